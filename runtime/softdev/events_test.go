//go:build linux && cgo

package softdev

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/device"
)

// overrunRig: a plain worker whose send or receive CQ is 15 deep (16
// slots), with or without ignore-overrun; two sends are posted and
// polled first, as in the vendor's CQ tests, and async_fd is made
// non-blocking.
func overrunRig(t *testing.T, onSend, ignore bool) *rig {
	var opts []device.CQOption
	if ignore {
		opts = append(opts, device.IgnoreOverrun())
	}
	c := rigConfig{scq: 31, rcq: 31}
	if onSend {
		c.scq, c.scqOpts = 15, opts
	} else {
		c.rcq, c.rcqOpts = 15, opts
	}
	r := newRig(t, c)
	if err := syscall.SetNonblock(r.d.AsyncFD(), true); err != nil {
		t.Fatal(err)
	}
	r.mustPost(r.qp, r.sendWR(77), r.sendWR(66))
	d := r.drain()
	d.expect(t, 2, 2, 0)
	if d.s[0].ID != 77 || d.s[1].ID != 66 {
		t.Fatalf("first sends %+v", d.s)
	}
	return r
}

// Rule 11: a CQ that does not ignore overruns raises IBV_EVENT_CQ_ERR
// (on the CQ) and IBV_EVENT_QP_FATAL (on the QP whose completion overran
// it) when it overruns; what the CQ held stays pollable. Rule 12: the
// events come through a pollable async_fd and a get/ack pair.
func TestRule11OverrunRaisesEvents(t *testing.T) {
	r := overrunRig(t, true, false)
	if cqe := r.scq.CQE; cqe != 15 {
		t.Fatalf("a CQ asked for 15 entries reports %d (16 slots, minus one)", cqe)
	}
	if n := readable(t, r.d.AsyncFD(), 0); n != 0 {
		t.Fatalf("async_fd readable before any event: %d", n)
	}
	for i := range 17 { // 16 fit the ring; the 17th overruns it
		r.mustPost(r.qp, r.sendWR(uint64(i)))
	}
	got := r.poll(r.scq)
	if len(got) != 16 || got[15].WRID != 15 || got[15].Status != verbs.WCSuccess {
		t.Fatalf("after the overrun the send CQ gave %d CQEs (last %+v); want the 16 it held, the last wr_id 15", len(got), sum(got[len(got)-1:]))
	}
	if rc := r.poll(r.rcq); len(rc) == 16 {
		t.Fatalf("receive CQ: %d", len(rc))
	}
	st, err := r.d.CQStats(r.scq)
	if err != nil || !st.Overrun || st.Dropped != 1 || st.Produced != 18 {
		t.Fatalf("send CQ stats %+v, %v", st, err)
	}
	if s, _, _, _ := r.d.QPStats(r.qp); s != verbs.QpsErr {
		t.Fatalf("worker state %v, want the error state", s)
	}

	if n := readable(t, r.d.AsyncFD(), time.Second); n != 2 {
		t.Fatalf("poll(2) of async_fd counted %d entries, want both", n)
	}
	seen := map[verbs.EventType]bool{}
	for range 2 {
		ev, err := r.d.GetAsyncEvent()
		if err != nil {
			t.Fatal(err)
		}
		switch ev.EventType {
		case verbs.EventCQErr:
			if ev.Element.CQ() != r.scq {
				t.Errorf("CQ_ERR on %p, want the send CQ %p", ev.Element.CQ(), r.scq)
			}
		case verbs.EventQPFatal:
			if ev.Element.QP() != r.qp {
				t.Errorf("QP_FATAL on %p, want the worker %p", ev.Element.QP(), r.qp)
			}
		default:
			t.Errorf("unexpected event %v", ev.EventType)
		}
		seen[ev.EventType] = true
		if err := r.d.AckAsyncEvent(ev); err != nil {
			t.Fatal(err)
		}
	}
	if !seen[verbs.EventCQErr] || !seen[verbs.EventQPFatal] {
		t.Fatalf("events %v", seen)
	}
	if n := readable(t, r.d.AsyncFD(), 0); n != 0 {
		t.Fatalf("async_fd still readable after both events were read: %d", n)
	}
	if _, err := r.d.GetAsyncEvent(); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("GetAsyncEvent with none pending on a non-blocking fd: %v", err)
	}
	if err := r.d.AckAsyncEvent(&verbs.AsyncEvent{}); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("an ack too many: %v", err)
	}
}

// Rule 11: with IBV_EXP_CQ_IGNORE_OVERRUN (set with ibv_exp_modify_cq)
// there is no event and the QP keeps working; the CQ's ring is written
// over, so after the wrap its polls find nothing.
func TestRule11IgnoreOverrun(t *testing.T) {
	for _, onSend := range []bool{true, false} {
		name := map[bool]string{true: "send-cq", false: "recv-cq"}[onSend]
		t.Run(name, func(t *testing.T) {
			r := overrunRig(t, onSend, true)
			for i := range 17 {
				r.mustPost(r.qp, r.sendWR(uint64(i)))
			}
			d := r.drain()
			if onSend {
				d.expect(t, 0, 17, 0)
			} else {
				d.expect(t, 17, 0, 0)
			}
			if n := readable(t, r.d.AsyncFD(), 0); n != 0 {
				t.Fatalf("async_fd readable: %d", n)
			}
			if s, _, _, _ := r.d.QPStats(r.qp); s != verbs.QpsRts {
				t.Fatalf("worker state %v", s)
			}
			cq := r.rcq
			if onSend {
				cq = r.scq
			}
			if st, _ := r.d.CQStats(cq); st.Overrun || st.Produced != 19 || st.Queued != 0 {
				t.Fatalf("stats %+v: want 19 produced, none pollable, no overrun", st)
			}
		})
	}
}

// Rule 12: a reader blocked in GetAsyncEvent is woken by an event that
// another goroutine's post raises, and by Close.
func TestRule12BlockingGet(t *testing.T) {
	r := overrunRig(t, true, false)
	got := make(chan *verbs.AsyncEvent, 2)
	errc := make(chan error, 1)
	if err := syscall.SetNonblock(r.d.AsyncFD(), false); err != nil {
		t.Fatal(err)
	}
	go func() {
		for range 2 {
			ev, err := r.d.GetAsyncEvent()
			if err != nil {
				errc <- err
				return
			}
			got <- ev
		}
		errc <- nil
	}()
	for i := range 17 {
		r.mustPost(r.qp, r.sendWR(uint64(i)))
	}
	r.progress2()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := r.d.AckAsyncEvent(<-got); err != nil {
			t.Fatal(err)
		}
	}
	// Close wakes a blocked reader with ErrClosed.
	d, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { _, err := d.GetAsyncEvent(); done <- err }()
	time.Sleep(10 * time.Millisecond) // let it block (if it does not, it sees ErrClosed anyway)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("blocked GetAsyncEvent after Close: %v", err)
	}
}

// progress2 runs the device, accepting a deadlock report (the worker is
// in the error state, nothing is blocked, but tests here do not care).
func (r *rig) progress2() {
	if _, err := r.d.Progress(); err != nil {
		var de *DeadlockError
		if !errors.As(err, &de) {
			r.t.Fatal(err)
		}
	}
}
