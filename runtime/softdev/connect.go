//go:build linux && cgo

package softdev

import (
	"fmt"
	"syscall"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
)

// Connect connects two RC QPs to each other (a may be b: a QP connected
// to itself), moving each through INIT, RTR and RTS with
// verbs.ExpModifyQP and the attributes an RC connection over RoCE sets:
// local write, remote write, remote read and atomics allowed, port 1, a
// GRH whose dgid is the other QP's device GID (ibv_query_gid, index 0),
// the other's qp_num, PSN 0 both ways, path MTU 1024, timeout 14,
// retry_cnt 7, rnr_retry 7 (for ever), min_rnr_timer 12, one READ or
// atomic outstanding each way. Two UC QPs connect the same way without
// what UC does not take (the READ and atomic depths, the timers and
// retry counts); UD QPs are not connected (EINVAL: they move to RTS with
// a Q_Key alone). The QPs may be of one device or of two
// (two devices of this process talk over the wire, as two hosts would);
// QPs in other processes connect the same way, with attributes traded
// out of band (see runtime/coll). It works with any provider whose QPs
// go through the exp modify path. A nil QP is refused with EINVAL before
// either QP changes state.
func Connect(a, b *verbs.QP) error {
	if a == nil || b == nil {
		return fmt.Errorf("softdev: connect: nil QP (a %p, b %p): %w", a, b, syscall.EINVAL)
	}
	if a.QPType != b.QPType || (a.QPType != verbs.QptRC && a.QPType != verbs.QptUC) {
		return fmt.Errorf("softdev: connect: QPs of types %v and %v: both must be RC or both UC: %w", a.QPType, b.QPType, syscall.EINVAL)
	}
	rc := a.QPType == verbs.QptRC
	gid := Calloc[verbs.GID]()
	defer Free(unsafe.Pointer(gid))
	gidOf := func(qp *verbs.QP) ([16]byte, error) {
		if err := verbs.QueryGID(qp.Context, 1, 0, gid); err != nil {
			return [16]byte{}, fmt.Errorf("softdev: connect: QP %#x: %w", qp.QPNum, err)
		}
		return *gid.Raw(), nil
	}
	ga, err := gidOf(a)
	if err != nil {
		return err
	}
	gb, err := gidOf(b)
	if err != nil {
		return err
	}
	attr := Calloc[verbs.ExpQPAttr]()
	defer Free(unsafe.Pointer(attr))
	step := func(qp *verbs.QP, fill func(*verbs.ExpQPAttr) verbs.ExpQPAttrMask) error {
		*attr = verbs.ExpQPAttr{}
		mask := fill(attr)
		return verbs.ExpModifyQP(qp, attr, uint64(mask))
	}
	type end struct {
		qp, peer *verbs.QP
		peerGID  [16]byte
	}
	ends := []end{{a, b, gb}, {b, a, ga}}
	if a == b {
		ends = ends[:1]
	}
	for _, e := range ends {
		if err := step(e.qp, func(x *verbs.ExpQPAttr) verbs.ExpQPAttrMask {
			x.QPState = verbs.QpsInit
			x.PortNum = 1
			x.QPAccessFlags = int32(verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic)
			return verbs.ExpQPState | verbs.ExpQPPkeyIndex | verbs.ExpQPPort | verbs.ExpQPAccessFlags
		}); err != nil {
			return err
		}
	}
	for _, e := range ends {
		if err := step(e.qp, func(x *verbs.ExpQPAttr) verbs.ExpQPAttrMask {
			x.QPState = verbs.QpsRtr
			x.PathMTU = verbs.MTU1024
			x.DestQPNum = e.peer.QPNum
			x.AHAttr.PortNum = 1
			x.AHAttr.IsGlobal = 1
			x.AHAttr.GRH.HopLimit = 64
			*x.AHAttr.GRH.Dgid.Raw() = e.peerGID
			m := verbs.ExpQPState | verbs.ExpQPAv | verbs.ExpQPPathMTU | verbs.ExpQPDestQPN | verbs.ExpQPRQPSN
			if rc {
				x.MaxDestRdAtomic = 1
				x.MinRnrTimer = 12
				m |= verbs.ExpQPMaxDestRdAtomic | verbs.ExpQPMinRnrTimer
			}
			return m
		}); err != nil {
			return err
		}
		if err := step(e.qp, func(x *verbs.ExpQPAttr) verbs.ExpQPAttrMask {
			x.QPState = verbs.QpsRts
			m := verbs.ExpQPState | verbs.ExpQPSQPSN
			if rc {
				x.Timeout = 14
				x.RetryCnt = 7
				x.RnrRetry = 7
				x.MaxRdAtomic = 1
				m |= verbs.ExpQPTimeout | verbs.ExpQPRetryCnt | verbs.ExpQPRnrRetry | verbs.ExpQPMaxQPRdAtomic
			}
			return m
		}); err != nil {
			return err
		}
	}
	return nil
}
