//go:build linux && cgo

package softdev

import (
	"reflect"
	"testing"

	"github.com/verbsexp/verbsexp/generated/verbs"
)

// The vendor's CORE-Direct suite (gtest_cd_tc1.cc to tc5, tc8) runs on
// every path, this device in-process and softdev behind the vendor's
// libibverbs, in package semantics (TestSemantics/Vendor*), with the
// vendor's time-bounded polls. What stays here is what only a device
// that runs in polls can promise: how far a schedule has got at a given
// poll. The calc tests (tc6, tc7) are in vendor_calc_test.go.

// waitThenSends posts the manager's waits (on the worker's receive CQ)
// before the first of ten sends; if watch, the manager's CQ is polled
// before each send, as tc5 ti_4..ti_6 do, and its CQEs collected.
func (v *vd) waitThenSends(waits []*verbs.ExpSendWR, watch bool) (inLoop []verbs.WC) {
	for i := range vdSendPostCount {
		if i == 0 {
			v.postMgr(waits...)
		}
		if watch {
			inLoop = append(inLoop, v.poll(v.mcq, vdMgrCQE)...)
		}
		v.mustWrite(uint64(i), vdSend)
	}
	return inLoop
}

// sendsAllRan checks the ten sends and receives of waitThenSends.
func (v *vd) sendsAllRan() {
	v.t.Helper()
	if s := len(v.poll(v.scq, v.cqTx)); s != vdSendPostCount {
		v.t.Errorf("send CQ: %d, want %d", s, vdSendPostCount)
	}
	if r := len(v.poll(v.rcq, v.cqRx)); r != vdSendPostCount {
		v.t.Errorf("receive CQ: %d, want %d", r, vdSendPostCount)
	}
}

// tc5 ti_6: waits for 9, 10 and 11, WAIT_EN_LAST on the last: one base,
// so the first two complete (wr_ids 3 and 2, the manager's qp_num) and
// the third never does.
//
// The vendor also polls the manager's CQ before each send and expects it
// empty every time, i.e. also before the tenth send, when nine receives
// have completed and the wait for 9 is met. On an HCA that holds only
// because the loop outruns the HCA (the ninth receive and the wait behind
// it have not been processed yet when the manager's CQ is polled); here
// every poll runs the device first, as the rules say it may, so the wait
// for 9 completes at that poll. This test asserts that (rules 5 and 8),
// and that across all polls the manager's CQEs are exactly 3 then 2.
func TestVendorTC5SendWaitTI6(t *testing.T) {
	v := newVD(t)
	v.initTest(vdWith(verbs.ExpQPCreateCrossChannel))
	s := verbs.ExpSendSignaled
	early := v.waitThenSends([]*verbs.ExpSendWR{v.wait(3, v.rcq, 9, s), v.wait(2, v.rcq, 10, s),
		v.wait(1, v.rcq, 11, s|verbs.ExpSendWaitEnLast)}, true)
	if got := vdWRIDs(early); !reflect.DeepEqual(got, []uint64{3}) {
		t.Fatalf("manager CQEs before the tenth send: %v, want [3] (nine receives meet the wait for 9)", got)
	}
	v.sendsAllRan()
	m := append(early, v.poll(v.mcq, vdMgrCQE)...)
	if got := vdWRIDs(m); !reflect.DeepEqual(got, []uint64{3, 2}) {
		t.Fatalf("manager CQ wr_ids %v, want [3 2]", got)
	}
	for _, c := range m {
		if c.QPNum != v.mqp.QPNum || c.Status != verbs.WCSuccess {
			t.Fatalf("manager completion %+v: want success with the manager's qp_num %#x", c, v.mqp.QPNum)
		}
	}
}
