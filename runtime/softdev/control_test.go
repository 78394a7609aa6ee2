//go:build linux && cgo

package softdev

import (
	"errors"
	"syscall"
	"testing"

	"github.com/verbsexp/verbsexp/generated/verbs"
)

// QueryPort answers for port 1 only, as a one-port HCA does.
func TestQueryPort(t *testing.T) {
	f := newFixture(t)
	a, err := f.d.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	// A RoCE port on loopback (MTU 65536): no LID, one GID, the largest MTU.
	if a.State != verbs.PortActive || a.LID != 0 || a.ActiveMTU != verbs.MTU4096 || a.LinkLayer != verbs.LinkLayerEthernet || a.GIDTblLen != 1 {
		t.Fatalf("port 1: state %v, LID %d, active MTU %v, link layer %d, %d GIDs; want active, 0, 4096, Ethernet, 1",
			a.State, a.LID, a.ActiveMTU, a.LinkLayer, a.GIDTblLen)
	}
	for _, p := range []uint8{0, 2, 255} {
		if _, err := f.d.QueryPort(p); !isErrno(err, syscall.EINVAL) {
			t.Errorf("port %d: %v, want EINVAL", p, err)
		}
	}
	d, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if _, err := d.QueryPort(1); !errors.Is(err, ErrClosed) {
		t.Fatalf("QueryPort after Close: %v", err)
	}
}

// ModifyQP takes a QP through RESET, INIT, RTR and RTS with the standard
// attributes and mask, refuses illegal transitions, and refuses QPs that
// are not live ones of the device without reading them.
func TestModifyQP(t *testing.T) {
	f := newFixture(t)
	cq := f.cq(16)
	qp := f.qp(cq, cq)
	mod := func(q *verbs.QP, a verbs.QPAttr, m verbs.QPAttrMask) error { return f.d.ModifyQP(q, &a, m) }
	if err := mod(qp, verbs.QPAttr{QPState: verbs.QpsRts}, verbs.QPStateConst); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("RESET -> RTS: %v, want EINVAL", err)
	}
	if err := mod(qp, verbs.QPAttr{QPState: verbs.QpsInit, PortNum: 1, QPAccessFlags: int32(verbs.AccessRemoteWrite)},
		verbs.QPStateConst|verbs.QPPkeyIndex|verbs.QPPort|verbs.QPAccessFlags); err != nil {
		t.Fatal(err)
	}
	if err := mod(qp, verbs.QPAttr{QPState: verbs.QpsRtr}, verbs.QPStateConst); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("INIT -> RTR without a path: %v, want EINVAL", err)
	}
	rtr := verbs.QPAttr{QPState: verbs.QpsRtr, DestQPNum: qp.QPNum, PathMTU: verbs.MTU1024, MinRnrTimer: 12,
		MaxDestRdAtomic: 1, AHAttr: verbs.AHAttr{PortNum: 1, IsGlobal: 1}}
	*rtr.AHAttr.GRH.Dgid.Raw() = f.d.GID()
	if err := mod(qp, rtr, verbs.QPStateConst|verbs.QPAv|verbs.QPPathMTU|verbs.QPDestQPN|verbs.QPRQPSN|
		verbs.QPMaxDestRdAtomic|verbs.QPMinRnrTimer); err != nil {
		t.Fatal(err)
	}
	if err := mod(qp, verbs.QPAttr{QPState: verbs.QpsRts, Timeout: 14, RetryCnt: 7, RnrRetry: 7, MaxRdAtomic: 1},
		verbs.QPStateConst|verbs.QPTimeout|verbs.QPRetryCnt|verbs.QPRnrRetry|verbs.QPSQPSN|verbs.QPMaxQPRdAtomic); err != nil {
		t.Fatal(err)
	}
	if st, _, _, err := f.d.QPStats(qp); err != nil || st != verbs.QpsRts || qp.State != verbs.QpsRts {
		t.Fatalf("state %v (handle says %v), %v; want RTS", st, qp.State, err)
	}

	other := newFixture(t)
	ocq := other.cq(16)
	foreign := other.qp(ocq, ocq)
	gone := f.qp(cq, cq)
	if err := f.d.DestroyQP(gone); err != nil {
		t.Fatal(err)
	}
	f.qps = f.qps[:len(f.qps)-1]
	for name, q := range map[string]*verbs.QP{"nil": nil, "another device's": foreign, "destroyed": gone} {
		if err := mod(q, verbs.QPAttr{QPState: verbs.QpsErr}, verbs.QPStateConst); !isErrno(err, syscall.EINVAL) {
			t.Errorf("ModifyQP on a %s QP: %v, want EINVAL", name, err)
		}
	}
}
