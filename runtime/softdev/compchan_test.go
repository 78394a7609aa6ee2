//go:build linux && cgo

package softdev

import (
	"syscall"
	"testing"
	"unsafe"

	verbs "github.com/verbsexp/verbsexp/generated"
)

// Completion channels, through the exported verbs as an application
// calls them (ibv_create_comp_channel, ibv_create_cq with the channel,
// ibv_req_notify_cq, ibv_get_cq_event, ibv_ack_cq_events,
// ibv_destroy_comp_channel): the device's event pipe (sd_event_pipe), the
// rule the libibverbs provider serves the vendor's -e runs with.
func TestCompChannel(t *testing.T) {
	f := newFixture(t)
	ctx := f.d.Context()
	ch, err := verbs.CreateCompChannel(ctx)
	if err != nil {
		t.Fatalf("ibv_create_comp_channel: %v", err)
	}
	if ch.Context != ctx || ch.FD < 0 || ch.Refcnt != 0 {
		t.Fatalf("channel %+v", *ch)
	}
	tag := unsafe.Pointer(&f.buf[100]) // a cq_context to get back
	cq, err := verbs.CreateCQ(ctx, 16, tag, ch, 0)
	if err != nil {
		t.Fatal(err)
	}
	ecq, err := verbs.ExpCreateCQ(ctx, 16, nil, ch, 0, alloc[verbs.ExpCQInitAttr](f))
	if err != nil {
		t.Fatal(err)
	}
	if cq.Channel != ch || ecq.Channel != ch || ch.Refcnt != 2 {
		t.Fatalf("CQs on the channel: %p, %p, refcnt %d; want the channel and 2", cq.Channel, ecq.Channel, ch.Refcnt)
	}
	if err := verbs.DestroyCompChannel(ch); !isCallErrno(err, "ibv_destroy_comp_channel", syscall.EBUSY) {
		t.Errorf("destroying a channel CQs use: %v, want EBUSY", err)
	}
	a := f.qp(ecq, ecq)
	b := f.qp(cq, cq)
	if err := Connect(a, b); err != nil {
		t.Fatal(err)
	}
	gotCQ, gotCtx := alloc[*verbs.CQ](f), alloc[unsafe.Pointer](f)
	event := func(want *verbs.CQ) {
		t.Helper()
		if readable(t, int(ch.FD), 0) == 0 {
			t.Fatal("no completion event on the channel")
		}
		if err := verbs.GetCQEvent(ch, gotCQ, gotCtx); err != nil {
			t.Fatalf("ibv_get_cq_event: %v", err)
		}
		if *gotCQ != want || (want == cq && *gotCtx != tag) {
			t.Fatalf("event for CQ %p (cq_context %p), want %p", *gotCQ, *gotCtx, want)
		}
	}
	none := func(why string) {
		t.Helper()
		if readable(t, int(ch.FD), 0) != 0 {
			t.Fatalf("a completion event %s", why)
		}
	}
	send := func(id uint64, flags verbs.ExpSendFlags) {
		f.postSend(a, f.send(id, verbs.ExpWRSend, flags, f.sges(f.mr.Lkey, [2]int{0, 8}), 1))
		f.progress()
	}
	recv := func() { f.postRecv(b, f.recv(1, f.sges(f.mr.Lkey, [2]int{64, 8}), 1)) }

	// Unarmed: completions write no event.
	recv()
	send(1, verbs.ExpSendSignaled)
	none("from an unarmed CQ")
	f.poll(cq)
	f.poll(ecq)
	// Armed: the next completion writes one, and the arm is spent.
	if err := verbs.ReqNotifyCQ(cq, 0); err != nil {
		t.Fatal(err)
	}
	if err := verbs.ReqNotifyCQ(ecq, 0); err != nil {
		t.Fatal(err)
	}
	recv()
	send(2, verbs.ExpSendSignaled)
	event(cq) // the receive completes before the ACK completes the send
	event(ecq)
	none("after each armed CQ gave one")
	recv()
	send(3, verbs.ExpSendSignaled)
	none("from spent arms")
	f.poll(cq)
	f.poll(ecq)
	// Solicited only: an unsolicited receive does not wake it, a
	// solicited one does.
	if err := verbs.ReqNotifyCQ(cq, 1); err != nil {
		t.Fatal(err)
	}
	recv()
	send(4, 0)
	none("for an unsolicited receive on a solicited-only arm")
	recv()
	send(5, verbs.ExpSendSolicited)
	event(cq)
	// Arming a CQ that holds CQEs not polled yet writes the event at once
	// (mlx4 and mlx5 arm relative to the consumer index: perftest's -e
	// takes one event, re-arms and polls 16 CQEs at most). A
	// solicited-only arm counts only solicited or failed ones.
	f.poll(cq)
	f.poll(ecq)
	recv()
	send(6, verbs.ExpSendSignaled)
	if err := verbs.ReqNotifyCQ(cq, 1); err != nil {
		t.Fatal(err)
	}
	none("for an unsolicited CQE already there, on a solicited-only arm")
	if err := verbs.ReqNotifyCQ(cq, 0); err != nil {
		t.Fatal(err)
	}
	event(cq)
	if err := verbs.AckCQEvents(cq, 4); err != nil || cq.CompEventsCompleted != 4 {
		t.Errorf("ibv_ack_cq_events: %v, comp_events_completed %d", err, cq.CompEventsCompleted)
	}
	// Destroying the CQs gives the channel back.
	for _, qp := range []*verbs.QP{a, b} {
		if err := f.d.DestroyQP(qp); err != nil {
			t.Fatal(err)
		}
	}
	f.qps = nil
	if err := verbs.DestroyCQ(cq); err != nil {
		t.Fatal(err)
	}
	if err := f.d.DestroyCQ(ecq); err != nil {
		t.Fatal(err)
	}
	if ch.Refcnt != 0 {
		t.Errorf("refcnt %d after both CQs went, want 0", ch.Refcnt)
	}
	if err := verbs.DestroyCompChannel(ch); err != nil {
		t.Errorf("ibv_destroy_comp_channel: %v", err)
	}
}

// ibv_get_cq_event blocks until an event comes, as on a kernel channel,
// unless the channel's fd was made non-blocking (EAGAIN).
func TestCompChannelBlocking(t *testing.T) {
	f := newFixture(t)
	ch, err := verbs.CreateCompChannel(f.d.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := verbs.DestroyCompChannel(ch); err != nil {
			t.Error(err)
		}
	}()
	cq, err := verbs.CreateCQ(f.d.Context(), 4, nil, ch, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := verbs.DestroyCQ(cq); err != nil {
			t.Error(err)
		}
	}()
	gotCQ, gotCtx := alloc[*verbs.CQ](f), alloc[unsafe.Pointer](f)
	if err := syscall.SetNonblock(int(ch.FD), true); err != nil {
		t.Fatal(err)
	}
	if err := verbs.GetCQEvent(ch, gotCQ, gotCtx); !isCallErrno(err, "ibv_get_cq_event", syscall.EAGAIN) {
		t.Errorf("ibv_get_cq_event with no event, non-blocking: %v, want EAGAIN", err)
	}
	if err := syscall.SetNonblock(int(ch.FD), false); err != nil {
		t.Fatal(err)
	}
	qp := f.qp(cq, cq)
	if err := Connect(qp, qp); err != nil {
		t.Fatal(err)
	}
	defer func() { f.d.DestroyQP(qp); f.qps = nil }()
	if err := verbs.ReqNotifyCQ(cq, 0); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- verbs.GetCQEvent(ch, gotCQ, gotCtx) }()
	f.postSend(qp, f.send(1, verbs.ExpWRNop, verbs.ExpSendSignaled, nil, 0))
	f.progress()
	if err := <-done; err != nil || *gotCQ != cq {
		t.Fatalf("blocked ibv_get_cq_event: %v, CQ %p; want %p", err, *gotCQ, cq)
	}
	f.poll(cq)
	verbs.AckCQEvents(cq, 1)
}
