//go:build linux && cgo

package softdev

import (
	"fmt"
	"syscall"
	"unsafe"

	verbs "github.com/verbsexp/verbsexp/generated"
)

// Connect connects two RC QPs to each other (a may be b: a QP connected
// to itself), moving each through INIT, RTR and RTS with the other's
// qp_num, with verbs.ExpModifyQP and the attributes an RC connection
// sets: local write, remote write and remote read allowed, port 1, MTU
// 1024. It works with any provider whose QPs go through the exp modify
// path, not only this device. It sets up a loopback connection (no
// address handle), so a and b must be QPs of the same context: QPs of
// two devices are refused with EINVAL (softdev's devices are not linked,
// and a's qp_num would name a QP of b's device), as is a nil QP, before
// either QP changes state.
func Connect(a, b *verbs.QP) error {
	switch {
	case a == nil || b == nil:
		return fmt.Errorf("softdev: connect: nil QP (a %p, b %p): %w", a, b, syscall.EINVAL)
	case a.Context != b.Context:
		return fmt.Errorf("softdev: connect: QPs %#x and %#x are of different contexts (devices): %w", a.QPNum, b.QPNum, syscall.EINVAL)
	}
	attr := Calloc[verbs.ExpQPAttr]()
	defer Free(unsafe.Pointer(attr))
	step := func(qp *verbs.QP, fill func(*verbs.ExpQPAttr) verbs.ExpQPAttrMask) error {
		*attr = verbs.ExpQPAttr{}
		mask := fill(attr)
		return verbs.ExpModifyQP(qp, attr, uint64(mask))
	}
	pairs := [][2]*verbs.QP{{a, b}, {b, a}}
	if a == b {
		pairs = pairs[:1]
	}
	for _, p := range pairs {
		qp := p[0]
		if err := step(qp, func(x *verbs.ExpQPAttr) verbs.ExpQPAttrMask {
			x.QPState = verbs.QpsInit
			x.PortNum = 1
			x.QPAccessFlags = int32(verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead)
			return verbs.ExpQPState | verbs.ExpQPPkeyIndex | verbs.ExpQPPort | verbs.ExpQPAccessFlags
		}); err != nil {
			return err
		}
	}
	for _, p := range pairs {
		qp, peer := p[0], p[1]
		if err := step(qp, func(x *verbs.ExpQPAttr) verbs.ExpQPAttrMask {
			x.QPState = verbs.QpsRtr
			x.PathMTU = verbs.MTU1024
			x.DestQPNum = peer.QPNum
			x.MaxDestRdAtomic = 1
			x.MinRnrTimer = 12
			x.AHAttr.PortNum = 1
			return verbs.ExpQPState | verbs.ExpQPAv | verbs.ExpQPPathMTU | verbs.ExpQPDestQPN |
				verbs.ExpQPRQPSN | verbs.ExpQPMaxDestRdAtomic | verbs.ExpQPMinRnrTimer
		}); err != nil {
			return err
		}
		if err := step(qp, func(x *verbs.ExpQPAttr) verbs.ExpQPAttrMask {
			x.QPState = verbs.QpsRts
			x.Timeout = 14
			x.RetryCnt = 7
			x.RnrRetry = 7
			x.MaxRdAtomic = 1
			return verbs.ExpQPState | verbs.ExpQPTimeout | verbs.ExpQPRetryCnt | verbs.ExpQPRnrRetry |
				verbs.ExpQPSQPSN | verbs.ExpQPMaxQPRdAtomic
		}); err != nil {
			return err
		}
	}
	return nil
}
