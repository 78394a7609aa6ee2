//go:build linux && cgo

package softdev

import (
	"errors"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/device"
)

// The tests in this file state the cross-channel rules of doc.go one by
// one, each on a rig shaped like the vendor's CORE-Direct suite (see
// rig_test.go), and check the exact number of completions the vendor's
// scenarios lead to.

const (
	enWRID = uint64('M') // wr_id of the manager's SEND_ENABLEs
	reWRID = uint64('R') // wr_id of the manager's RECV_ENABLEs
)

// Rule 1: CQE_WAIT, SEND_ENABLE, RECV_ENABLE and calc posted to a QP
// created without CROSS_CHANNEL fail at once with EINVAL.
func TestRule01PostingQPGate(t *testing.T) {
	r := newRig(t, rigConfig{})
	calc := r.send(4, verbs.ExpWRSend, verbs.ExpSendSignaled|verbs.ExpSendWithCalc, r.sges(r.mr.Lkey, [2]int{0, 16}, [2]int{16, 16}), 2)
	calc.Op.Calc().CalcOp, calc.Op.Calc().DataType, calc.Op.Calc().DataSize = verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeInt, verbs.ExpCalcDataSize64Bit
	for _, w := range []*verbs.ExpSendWR{
		r.sendEn(1, 0, verbs.ExpSendSignaled|verbs.ExpSendWaitEnLast),
		r.recvEn(2, 0, verbs.ExpSendSignaled|verbs.ExpSendWaitEnLast),
		r.wait(3, r.scq, 1, verbs.ExpSendSignaled|verbs.ExpSendWaitEnLast),
		calc,
	} {
		if bad, err := r.post(r.qp, w); !isErrno(err, syscall.EINVAL) || bad != w {
			t.Errorf("opcode %v on a QP without CROSS_CHANNEL: %v, bad_wr %p; want EINVAL naming %p", w.ExpOpcode, err, bad, w)
		}
	}
	if _, s, _, _ := r.d.QPStats(r.qp); s.Posted != 0 {
		t.Errorf("refused WRs were posted: %+v", s)
	}
	r.drain().expect(t, 0, 0, 0)
}

// Rule 2: an enable needs a target created managed (MANAGED_SEND for
// SEND_ENABLE, MANAGED_RECV for RECV_ENABLE); otherwise the post fails,
// from a cross-channel QP and when the target is the posting QP itself.
func TestRule02TargetGate(t *testing.T) {
	for _, c := range []struct {
		name string
		en   func(r *rig, id uint64) *verbs.ExpSendWR
	}{
		{"send-enable", func(r *rig, id uint64) *verbs.ExpSendWR {
			return r.sendEn(id, 0, verbs.ExpSendSignaled|verbs.ExpSendWaitEnLast)
		}},
		{"recv-enable", func(r *rig, id uint64) *verbs.ExpSendWR {
			return r.recvEn(id, 0, verbs.ExpSendSignaled|verbs.ExpSendWaitEnLast)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, rigConfig{worker: []device.QPOption{device.CrossChannel()}})
			for i := range 10 {
				w := c.en(r, uint64(i))
				if bad, err := r.post(r.qp, w); !isErrno(err, syscall.EINVAL) || bad != w {
					t.Fatalf("enable of the posting QP itself, not managed: %v", err)
				}
				if _, err := r.post(r.mqp, c.en(r, uint64(i))); !isErrno(err, syscall.EINVAL) {
					t.Fatalf("enable of an unmanaged QP from the manager: %v", err)
				}
			}
			r.drain().expect(t, 0, 0, 0)
		})
	}
	// The other kind of managed queue does not qualify either.
	r := newRig(t, rigConfig{worker: []device.QPOption{device.CrossChannel(), device.ManagedRecv()}})
	if _, err := r.post(r.mqp, r.sendEn(1, 0, verbs.ExpSendWaitEnLast)); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("SEND_ENABLE of a QP managed on receive only: %v", err)
	}
}

// Rule 3: sends posted to a managed send queue are accepted and do not
// run; an enable posted there (even of the queue itself) waits with them.
func TestRule03ManagedSendQueueHoldsWork(t *testing.T) {
	t.Run("sends", func(t *testing.T) {
		r := newRig(t, rigConfig{worker: []device.QPOption{device.CrossChannel(), device.ManagedSend()}})
		for i := range 10 {
			r.mustPost(r.qp, r.sendWR(uint64(i)))
		}
		r.drain().expect(t, 0, 0, 0)
	})
	t.Run("own-enables", func(t *testing.T) {
		r := newRig(t, rigConfig{worker: []device.QPOption{device.CrossChannel(), device.ManagedSend()}})
		for i := range 10 {
			w := r.sendWR(uint64(i))
			if i%2 == 1 {
				w = r.sendEn(uint64(i), 0, verbs.ExpSendSignaled|verbs.ExpSendWaitEnLast)
			}
			r.mustPost(r.qp, w)
		}
		r.drain().expect(t, 0, 0, 0)
		_, err := r.d.Progress()
		var de *DeadlockError
		if !errors.As(err, &de) || len(de.Gated) != 1 || de.Gated[0].QPNum != r.qp.QPNum || de.Gated[0].Position != 0 {
			t.Fatalf("Progress = %v; want the worker's head reported as never released", err)
		}
	})
}

// Rule 3, receive side: receives of a managed receive queue, those
// posted before the connection included, take no data until released;
// sends to it stall (RNR retried for ever).
func TestRule03ManagedRecvQueueStallsSends(t *testing.T) {
	r := newRig(t, rigConfig{worker: []device.QPOption{device.CrossChannel(), device.ManagedRecv()}})
	for i := range 10 {
		r.mustPost(r.qp, r.sendWR(uint64(i)))
	}
	r.drain().expect(t, 0, 0, 0)
	_, err := r.d.Progress()
	var de *DeadlockError
	if !errors.As(err, &de) || len(de.Sends) != 1 || !de.Sends[0].PeerManaged ||
		de.Sends[0].PeerPosted != 31 || de.Sends[0].PeerReleased != 0 {
		t.Fatalf("Progress = %v; want the first send reported blocked on 31 unreleased receives", err)
	}
	// Enables of the worker's own receive queue, posted behind the
	// stalled send on its (unmanaged) send queue, never run either.
	r2 := newRig(t, rigConfig{worker: []device.QPOption{device.CrossChannel(), device.ManagedRecv()}})
	for i := range 10 {
		w := r2.sendWR(uint64(i))
		if i%2 == 1 {
			w = r2.recvEn(uint64(i), 0, verbs.ExpSendSignaled|verbs.ExpSendWaitEnLast)
		}
		r2.mustPost(r2.qp, w)
	}
	r2.drain().expect(t, 0, 0, 0)
}

// sendEnableCase: ten sends on a managed worker, then enables posted by
// the manager; how many sends (and their receives) run, and which
// manager CQEs appear.
func sendEnableCase(t *testing.T, enables []*verbs.ExpSendWR, r *rig, runs int, mgr []uint64) {
	t.Helper()
	for i := range 10 {
		r.mustPost(r.qp, r.sendWR(sendWRID|uint64(i)))
	}
	r.mustPost(r.mqp, enables...)
	d := r.drain()
	d.expect(t, runs, runs, len(mgr))
	want := make([]uint64, runs)
	for i := range want {
		want[i] = sendWRID | uint64(i)
	}
	if runs > 0 && !reflect.DeepEqual(ids(d.s), want) {
		t.Fatalf("sends completed %#x, want %#x in FIFO order", ids(d.s), want)
	}
	if len(mgr) > 0 && !reflect.DeepEqual(ids(d.m), mgr) {
		t.Fatalf("manager CQEs %v, want %v", ids(d.m), mgr)
	}
	for _, c := range d.m {
		if c.QP != r.mqp.QPNum {
			t.Fatalf("manager CQE %+v does not carry the manager's qp_num %#x", c, r.mqp.QPNum)
		}
	}
}

// Rule 4: enable counts are relative to the queue's enable base, which
// only WAIT_EN_LAST moves; 0 releases everything posted.
func TestRule04EnableBase(t *testing.T) {
	const last = verbs.ExpSendWaitEnLast
	const sig = verbs.ExpSendSignaled
	for _, recv := range []bool{false, true} {
		recv := recv
		managed, en, id := device.ManagedSend(), (*rig).sendEn, enWRID
		name := "send"
		if recv {
			managed, en, id, name = device.ManagedRecv(), (*rig).recvEn, reWRID, "recv"
		}
		cfg := rigConfig{worker: []device.QPOption{device.CrossChannel(), managed}}
		t.Run(name+"/all", func(t *testing.T) {
			r := newRig(t, cfg)
			sendEnableCase(t, []*verbs.ExpSendWR{en(r, id, 0, sig|last)}, r, 10, []uint64{id})
		})
		t.Run(name+"/three", func(t *testing.T) {
			r := newRig(t, cfg)
			sendEnableCase(t, []*verbs.ExpSendWR{en(r, id, 3, last)}, r, 3, nil)
		})
		t.Run(name+"/2+2+2-each-moving-the-base", func(t *testing.T) {
			r := newRig(t, cfg)
			sendEnableCase(t, []*verbs.ExpSendWR{en(r, id+1, 2, sig|last), en(r, id+2, 2, sig|last), en(r, id+3, 2, sig|last)},
				r, 6, []uint64{id + 1, id + 2, id + 3})
		})
		t.Run(name+"/2+2+2-sharing-one-base", func(t *testing.T) {
			r := newRig(t, cfg)
			sendEnableCase(t, []*verbs.ExpSendWR{en(r, id+1, 2, sig), en(r, id+2, 2, sig), en(r, id+3, 2, sig|last)},
				r, 2, []uint64{id + 1, id + 2, id + 3})
		})
		t.Run(name+"/one-at-a-time", func(t *testing.T) {
			// A send, then an enable of one, five times, polling in
			// between: every send runs, no manager CQE (unsignaled).
			r := newRig(t, cfg)
			var s, rc, m int
			for i := range 10 {
				if i%2 == 1 {
					r.mustPost(r.mqp, en(r, id, 1, last))
				} else {
					r.mustPost(r.qp, r.sendWR(sendWRID|uint64(i)))
				}
				d := r.drain()
				s, rc, m = s+len(d.s), rc+len(d.r), m+len(d.m)
			}
			if s != 5 || rc != 5 || m != 0 {
				t.Fatalf("%d sends, %d receives, %d manager CQEs; want 5, 5, 0", s, rc, m)
			}
		})
	}
	t.Run("beyond-posted", func(t *testing.T) {
		r := newRig(t, rigConfig{worker: []device.QPOption{device.CrossChannel(), device.ManagedSend()}})
		for i := range 4 {
			r.mustPost(r.qp, r.sendWR(uint64(i)))
		}
		r.mustPost(r.mqp, r.sendEn(1, 3, last)) // base 0 -> 3
		w := r.sendEn(2, 2, last)               // 3 + 2 > 4 posted
		if bad, err := r.post(r.mqp, w); !isErrno(err, syscall.EINVAL) || bad != w {
			t.Fatalf("release beyond what is posted: %v", err)
		}
		r.mustPost(r.mqp, r.sendEn(3, 1, last)) // the refusal moved nothing: 3 + 1
		r.drain().expect(t, 4, 4, 0)
		if _, s, _, _ := r.d.QPStats(r.qp); s.Enabled != 4 {
			t.Fatalf("worker released up to %d, want 4", s.Enabled)
		}
	})
	t.Run("zero-is-a-snapshot", func(t *testing.T) {
		r := newRig(t, rigConfig{worker: []device.QPOption{device.CrossChannel(), device.ManagedSend()}})
		r.mustPost(r.qp, r.sendWR(1), r.sendWR(2))
		r.mustPost(r.mqp, r.sendEn(10, 0, last))
		r.mustPost(r.qp, r.sendWR(3)) // posted after the enable: not released
		r.drain().expect(t, 2, 2, 0)
		r.mustPost(r.mqp, r.sendEn(11, 1, last)) // base is 2 now
		r.drain().expect(t, 1, 1, 0)
	})
}

// The vendor's post_task case: ten sends on a managed worker and, in the
// same list, a manager that releases one, waits for its own CQE, releases
// everything posted, and waits for the ten receives.
func TestRule04and05PostTaskChain(t *testing.T) {
	r := newRig(t, rigConfig{worker: []device.QPOption{device.CrossChannel(), device.ManagedSend()}})
	var sends []*verbs.ExpSendWR
	for i := range 10 {
		sends = append(sends, r.send(uint64(i), verbs.ExpWRSend, verbs.ExpSendSignaled, nil, 0))
	}
	mgr := []*verbs.ExpSendWR{
		r.sendEn(0, 1, verbs.ExpSendSignaled),
		r.wait(1, r.mcq, 1, verbs.ExpSendSignaled),
		r.sendEn(2, 0, 0),
		r.wait(3, r.rcq, 10, verbs.ExpSendSignaled|verbs.ExpSendWaitEnLast),
	}
	tasks := allocN[verbs.ExpTask](r.fixture, 2)
	tasks[0].TaskType, tasks[0].Item.QP, tasks[0].Next = verbs.ExpTaskSend, r.qp, &tasks[1]
	tasks[0].Item.SetSendWR(link(sends...))
	tasks[1].TaskType, tasks[1].Item.QP = verbs.ExpTaskSend, r.mqp
	tasks[1].Item.SetSendWR(link(mgr...))
	bad := alloc[*verbs.ExpTask](r.fixture)
	if err := verbs.ExpPostTask(r.d.Context(), &tasks[0], bad); err != nil {
		t.Fatal(err)
	}
	d := r.drain()
	d.expect(t, 10, 10, 3)
	if got := ids(d.m); !reflect.DeepEqual(got, []uint64{0, 1, 3}) {
		t.Fatalf("manager CQEs %v, want [0 1 3]", got)
	}
}

// waitCase: the manager posts waits on the worker's receive CQ, then the
// worker sends n pages to itself; which waits complete.
func waitCase(t *testing.T, waits func(r *rig) []*verbs.ExpSendWR, n int, want []uint64) {
	t.Helper()
	r := newRig(t, rigConfig{worker: []device.QPOption{device.CrossChannel()}})
	r.mustPost(r.mqp, waits(r)...)
	for i := range n {
		r.mustPost(r.qp, r.sendWR(uint64(i)))
	}
	d := r.drain()
	d.expect(t, n, n, len(want))
	if len(want) > 0 && !reflect.DeepEqual(ids(d.m), want) {
		t.Fatalf("manager CQEs %v, want %v", ids(d.m), want)
	}
	for _, c := range d.m {
		if c.QP != r.mqp.QPNum || c.Status != verbs.WCSuccess {
			t.Fatalf("manager CQE %+v: want success with the manager's qp_num %#x", c, r.mqp.QPNum)
		}
	}
}

// Rule 5: a wait stalls the manager until the CQ has produced base + N
// CQEs since creation, from any QP; chained waits without WAIT_EN_LAST
// share one base; each signaled wait yields its own CQE.
func TestRule05WaitBase(t *testing.T) {
	const sig, last = verbs.ExpSendSignaled, verbs.ExpSendWaitEnLast
	t.Run("fewer-than-arrive", func(t *testing.T) {
		waitCase(t, func(r *rig) []*verbs.ExpSendWR { return []*verbs.ExpSendWR{r.wait(0, r.rcq, 1, sig|last)} }, 10, []uint64{0})
	})
	t.Run("more-than-arrive", func(t *testing.T) {
		waitCase(t, func(r *rig) []*verbs.ExpSendWR { return []*verbs.ExpSendWR{r.wait(0, r.rcq, 11, sig|last)} }, 10, nil)
	})
	t.Run("exactly", func(t *testing.T) {
		r := newRig(t, rigConfig{worker: []device.QPOption{device.CrossChannel()}})
		r.mustPost(r.mqp, r.wait(0, r.rcq, 10, sig|last))
		for i := range 10 {
			if got := r.poll(r.mcq); len(got) != 0 {
				t.Fatalf("the wait completed after %d of 10 CQEs: %+v", i, sum(got))
			}
			r.mustPost(r.qp, r.sendWR(uint64(i)))
		}
		r.drain().expect(t, 10, 10, 1)
	})
	t.Run("three-equal", func(t *testing.T) {
		waitCase(t, func(r *rig) []*verbs.ExpSendWR {
			return []*verbs.ExpSendWR{r.wait(3, r.rcq, 10, sig), r.wait(2, r.rcq, 10, sig), r.wait(1, r.rcq, 10, sig|last)}
		}, 10, []uint64{3, 2, 1})
	})
	t.Run("9-10-11", func(t *testing.T) {
		waitCase(t, func(r *rig) []*verbs.ExpSendWR {
			return []*verbs.ExpSendWR{r.wait(3, r.rcq, 9, sig), r.wait(2, r.rcq, 10, sig), r.wait(1, r.rcq, 11, sig|last)}
		}, 10, []uint64{3, 2})
	})
	t.Run("base-moves-by-the-largest", func(t *testing.T) {
		// 9, 10, 11 with WAIT_EN_LAST on the last: the base moves by 11,
		// so a following wait for 1 needs the 12th CQE.
		r := newRig(t, rigConfig{worker: []device.QPOption{device.CrossChannel()}})
		r.mustPost(r.mqp, r.wait(1, r.rcq, 9, 0), r.wait(2, r.rcq, 10, 0), r.wait(3, r.rcq, 11, last),
			r.wait(4, r.rcq, 1, sig|last))
		for i := range 12 {
			r.mustPost(r.qp, r.sendWR(uint64(i)))
			if got := len(r.poll(r.mcq)); (i < 11 && got != 0) || (i == 11 && got != 1) {
				t.Fatalf("after %d CQEs the manager has %d CQEs", i+1, got)
			}
		}
	})
	t.Run("counts-polled-and-overwritten-CQEs", func(t *testing.T) {
		// A plain worker (not cross-channel) whose send CQ ignores
		// overruns and is 15 deep: the wait is on the receive CQ, for 18.
		r := newRig(t, rigConfig{scq: 15, scqOpts: []device.CQOption{device.IgnoreOverrun()}})
		r.mustPost(r.mqp, r.wait(777, r.rcq, 15+3, sig|last))
		for i := range 17 {
			r.mustPost(r.qp, r.sendWR(uint64(i)))
		}
		r.drain().expect(t, 0, 17, 0) // the send CQ wrapped: its polls find nothing
		for i := 17; i < 25; i++ {
			r.mustPost(r.qp, r.sendWR(uint64(i)))
		}
		d := r.drain()
		d.expect(t, 0, 8, 1)
		if d.m[0].ID != 777 || d.m[0].QP != r.mqp.QPNum {
			t.Fatalf("manager CQE %+v", d.m[0])
		}
	})
}

// Rule 6: bases live on the CQ or QP, so managers share them.
func TestRule06BasesAreShared(t *testing.T) {
	r := newRig(t, rigConfig{worker: []device.QPOption{device.CrossChannel(), device.ManagedSend()}})
	m2cq := r.cq(16)
	m2 := r.fixture.qp(m2cq, m2cq, device.CrossChannel(), device.QPCaps(device.Caps{SendWR: 16}))
	if err := device.ConnectPair(m2, m2); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		r.mustPost(r.qp, r.sendWR(uint64(i)))
	}
	r.mustPost(r.mqp, r.sendEn(1, 2, verbs.ExpSendWaitEnLast))                           // base 0 -> 2
	r.mustPost(m2, r.enable(2, verbs.ExpWRSendEnable, r.qp, 2, verbs.ExpSendWaitEnLast)) // 2 + 2
	r.drain().expect(t, 4, 4, 0)
	// Waits too: the second manager's wait for 2 counts from the base
	// the first one's WAIT_EN_LAST left (4 + 2 = 6).
	r.mustPost(r.mqp, r.wait(3, r.rcq, 4, verbs.ExpSendSignaled|verbs.ExpSendWaitEnLast))
	r.mustPost(m2, r.wait(4, r.rcq, 2, verbs.ExpSendSignaled|verbs.ExpSendWaitEnLast))
	if m, m2c := len(r.poll(r.mcq)), len(r.poll(m2cq)); m != 1 || m2c != 0 {
		t.Fatalf("after 4 receive CQEs: %d and %d manager CQEs; want 1 and 0", m, m2c)
	}
	r.mustPost(r.mqp, r.sendEn(5, 2, verbs.ExpSendWaitEnLast))
	r.drain()
	if got := sum(r.poll(m2cq)); len(got) != 1 || got[0].ID != 4 || got[0].QP != m2.QPNum {
		t.Fatalf("second manager after 6 receive CQEs: %+v", got)
	}
}

// Rule 7: a manager runs its WRs in order; an unmet wait blocks what
// follows, never errors and never completes. The deadlock report names
// the QP, the base and the count.
func TestRule07InOrder(t *testing.T) {
	r := newRig(t, rigConfig{worker: []device.QPOption{device.CrossChannel(), device.ManagedSend()}})
	r.mustPost(r.qp, r.sendWR(1), r.sendWR(2))
	r.mustPost(r.mqp, r.wait(9, r.rcq, 5, verbs.ExpSendWaitEnLast), r.wait(10, r.rcq, 3, verbs.ExpSendSignaled|verbs.ExpSendWaitEnLast),
		r.sendEn(11, 0, verbs.ExpSendSignaled|verbs.ExpSendWaitEnLast))
	for range 3 {
		_, err := r.d.Progress()
		var de *DeadlockError
		if !errors.As(err, &de) || len(de.Waits) != 1 {
			t.Fatalf("Progress = %v", err)
		}
		w := de.Waits[0]
		if w.QPNum != r.mqp.QPNum || w.WRID != 9 || w.Base != 0 || w.Count != 5 || w.Needed != 5 || w.Produced != 0 {
			t.Fatalf("blocked wait %+v", w)
		}
		msg := err.Error()
		for _, s := range []string{"QP 0x", "base 0 + count 5 = 5", "produced 0"} {
			if !strings.Contains(msg, s) {
				t.Fatalf("deadlock message %q lacks %q", msg, s)
			}
		}
	}
	r.drain().expect(t, 0, 0, 0)
	// The enable queued behind the second wait carries its own base:
	// the first wait moved the base to 5, so it waits for 5 + 3.
	if _, s, _, _ := r.d.QPStats(r.mqp); s.Posted != 3 || s.Done != 0 {
		t.Fatalf("manager queue %+v", s)
	}
}

// Rule 8: an enable or wait yields a CQE on the manager's CQ only if
// signaled, with IBV_WC_SUCCESS, its wr_id and the manager's qp_num, in
// post order; a wait on the manager's own CQ is met by its own CQEs.
func TestRule08ControlCompletions(t *testing.T) {
	r := newRig(t, rigConfig{worker: []device.QPOption{device.CrossChannel(), device.ManagedSend()}})
	r.mustPost(r.qp, r.sendWR(1), r.sendWR(2))
	r.mustPost(r.mqp,
		r.sendEn(100, 1, verbs.ExpSendSignaled|verbs.ExpSendWaitEnLast),
		r.wait(101, r.mcq, 1, verbs.ExpSendSignaled|verbs.ExpSendWaitEnLast), // met by CQE 100
		r.sendEn(102, 1, verbs.ExpSendWaitEnLast),                            // unsignaled: no CQE
		r.wait(103, r.mcq, 2, verbs.ExpSendSignaled|verbs.ExpSendWaitEnLast)) // base 1 + 2: a third CQE that never comes
	d := r.drain()
	want := []wcSum{
		{100, verbs.WCSuccess, verbs.ExpWCSend, 0, r.mqp.QPNum},
		{101, verbs.WCSuccess, verbs.ExpWCSend, 0, r.mqp.QPNum},
	}
	if !reflect.DeepEqual(d.m, want) || len(d.s) != 2 {
		t.Fatalf("manager CQEs %+v, want %+v; worker %+v", d.m, want, d.s)
	}
}

// Rule 9: CROSS_CHANNEL alone changes nothing for SEND: the worker
// completes every send, in order, with its wr_id.
func TestRule09CrossChannelAlone(t *testing.T) {
	r := newRig(t, rigConfig{worker: []device.QPOption{device.CrossChannel()}})
	var d drained
	for i := range 10 {
		r.mustPost(r.qp, r.sendWR(sendWRID|uint64(i)))
		x := r.drain()
		d.s, d.r = append(d.s, x.s...), append(d.r, x.r...)
	}
	d.expect(t, 10, 10, 0)
	for i, c := range d.s {
		if c.ID != sendWRID|uint64(i) || d.r[i].ID != recvWRID || d.r[i].Len != page {
			t.Fatalf("completion %d: send %+v receive %+v", i, c, d.r[i])
		}
	}
	// And RDMA write, read.
	w := r.send(7, verbs.ExpWRRDMAWrite, verbs.ExpSendSignaled, r.sges(r.mr.Lkey, [2]int{0, 64}), 1)
	w.WR.RDMA().RemoteAddr, w.WR.RDMA().Rkey = r.addr(page), r.mr.Rkey
	rd := r.send(8, verbs.ExpWRRDMARead, verbs.ExpSendSignaled, r.sges(r.mr.Lkey, [2]int{2 * page, 64}), 1)
	rd.WR.RDMA().RemoteAddr, rd.WR.RDMA().Rkey = r.addr(page), r.mr.Rkey
	r.mustPost(r.qp, w, rd)
	if got := r.drain(); len(got.s) != 2 || got.s[0].Op != verbs.ExpWCRDMAWrite || got.s[1].Op != verbs.ExpWCRDMARead {
		t.Fatalf("RDMA on a cross-channel QP: %+v", got.s)
	}
}

// Rule 10: post_task posts tasks in order and stops at the first failure,
// which bad_task names; the tasks before it stay posted and run.
func TestRule10PostTaskStops(t *testing.T) {
	r := newRig(t, rigConfig{}) // a plain worker: an enable posted to it fails
	var sends []*verbs.ExpSendWR
	for i := range 10 {
		sends = append(sends, r.send(uint64(i), verbs.ExpWRSend, verbs.ExpSendSignaled, nil, 0))
	}
	tasks := allocN[verbs.ExpTask](r.fixture, 2)
	tasks[0].TaskType, tasks[0].Item.QP, tasks[0].Next = verbs.ExpTaskSend, r.qp, &tasks[1]
	tasks[0].Item.SetSendWR(link(sends...))
	tasks[1].TaskType, tasks[1].Item.QP = verbs.ExpTaskSend, r.qp
	tasks[1].Item.SetSendWR(r.sendEn(0, 1, verbs.ExpSendSignaled|verbs.ExpSendWaitEnLast))
	bad := alloc[*verbs.ExpTask](r.fixture)
	err := verbs.ExpPostTask(r.d.Context(), &tasks[0], bad)
	if !isErrno(err, syscall.EINVAL) || *bad != &tasks[1] {
		t.Fatalf("ExpPostTask = %v, bad_task %p; want EINVAL at %p", err, *bad, &tasks[1])
	}
	r.drain().expect(t, 10, 10, 0)
}
