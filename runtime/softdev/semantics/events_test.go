//go:build linux && cgo

package semantics

import (
	"fmt"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
)

// Events: asynchronous ones on the context's async_fd (ibv_get_async_event,
// ibv_ack_async_event and the counters the library keeps), and completion
// channels (ibv_create_comp_channel, ibv_req_notify_cq, ibv_get_cq_event,
// ibv_ack_cq_events), which on the library path the unchanged libibverbs
// gets through the driver standing in for the kernel. CompChannel,
// CompChannelBlocking and EventsDroppedWithTheirObject were
// runtime/softdev's tests of those names; runtime/softdev's
// TestRule11*/TestRule12* keep what needs its counters (CQStats, QPStats)
// or Progress. The vendor's tc4 (VendorTC4*) is the CQ overrun's too.

func eventCases() []semCase {
	return []semCase{
		{name: "EventsCQOverrun", ranks: 1, run: eventsCQOverrun},
		{name: "EventsDroppedWithTheirObject", ranks: 1, run: eventsDroppedWithTheirObject},
		{name: "EventsDestroyKeepsOthersInOrder", ranks: 1, run: eventsDestroyKeepsOthersInOrder},
		{name: "EventsCommEstablished", ranks: 2, run: eventsCommEstablished},
		{name: "CompChannel", ranks: 1, run: compChannel},
		{name: "CompChannelBlocking", ranks: 1, run: compChannelBlocking},
		{name: "CompEventsGoWithTheirCQ", ranks: 1, run: compEventsGoWithTheirCQ},
	}
}

// overrunWorker: an RC QP connected to itself whose send CQ asks for 1
// entry (2 slots), and three signaled RDMA WRITEs to its own memory: the
// third CQE finds the ring full.
func overrunWorker(d *dut) (*verbs.QP, *verbs.CQ) {
	scq, rcq := d.cq(1), d.cq(8)
	qp := d.createQP(qpSpec{scq: scq, rcq: rcq})
	d.connect(qp, d.self(), qp.QPNum, defaultLink())
	for i := range 3 {
		w := d.send(uint64(i), verbs.ExpWRRDMAWrite, verbs.ExpSendSignaled, d.sges(d.mr.Lkey, [2]int{0, 8}), 1)
		w.WR.RDMA().RemoteAddr, w.WR.RDMA().Rkey = d.addr(64), d.mr.Rkey
		d.postSend(qp, w)
	}
	return qp, scq
}

// eventsCQOverrun: a CQ that does not ignore overruns and finds its ring
// full raises IBV_EVENT_CQ_ERR on itself and IBV_EVENT_QP_FATAL on the QP
// whose CQE it lost, once each; async_fd is readable exactly while one is
// pending; acknowledging each moves the counter libibverbs keeps for it
// (the CQ's async_events_completed, the QP's events_completed); what the
// ring held polls back; the QP is in ERR.
func eventsCQOverrun(n *node) {
	t, d := n.t, n.d
	if readable(t, int(d.ctx.AsyncFD), 0) != 0 {
		t.Fatal("async_fd readable before any event")
	}
	qp, scq := overrunWorker(d)
	if scq.CQE != 1 {
		t.Errorf("a CQ asked for 1 entry reports %d (2 slots, minus one)", scq.CQE)
	}
	seen := map[verbs.EventType]bool{}
	for range 2 {
		ev := d.event(within)
		switch ev.EventType {
		case verbs.EventCQErr:
			if ev.Element.CQ() != scq {
				t.Errorf("CQ_ERR on %p, want the send CQ %p", ev.Element.CQ(), scq)
			}
		case verbs.EventQPFatal:
			if ev.Element.QP() != qp {
				t.Errorf("QP_FATAL on %p, want the worker %p", ev.Element.QP(), qp)
			}
		default:
			t.Errorf("unexpected event %v", ev.EventType)
		}
		seen[ev.EventType] = true
	}
	if !seen[verbs.EventCQErr] || !seen[verbs.EventQPFatal] {
		t.Fatalf("events %v, want CQ_ERR and QP_FATAL", seen)
	}
	if scq.AsyncEventsCompleted != 1 || qp.EventsCompleted != 1 {
		t.Errorf("after the acks: the CQ's async_events_completed %d, the QP's events_completed %d; want 1 and 1",
			scq.AsyncEventsCompleted, qp.EventsCompleted)
	}
	d.noEvent("after CQ_ERR and QP_FATAL")
	if got := sum(d.poll(scq)); len(got) != 2 || got[0].ID != 0 || got[1].ID != 1 || got[0].Status != verbs.WCSuccess || got[1].Status != verbs.WCSuccess {
		t.Errorf("the overrun CQ gave %+v, want the two CQEs it held (wr_ids 0 and 1)", got)
	}
	if st := d.qpState(qp); st != verbs.QpsErr {
		t.Errorf("the worker is in %v, want ERR", st)
	}
	if err := syscall.SetNonblock(int(d.ctx.AsyncFD), true); err != nil {
		t.Fatal(err)
	}
	ev := cAlloc[verbs.AsyncEvent](d)
	if err := verbs.GetAsyncEvent(d.ctx, ev); !isCallErrno(err, "ibv_get_async_event", syscall.EAGAIN) {
		t.Errorf("ibv_get_async_event with none pending on a non-blocking async_fd: %v, want EAGAIN", err)
	}
}

// eventsDroppedWithTheirObject: events still queued for a CQ and a QP go
// when they are destroyed: async_fd is readable with both pending, and
// not once the QP and the CQ are gone.
func eventsDroppedWithTheirObject(n *node) {
	t, d := n.t, n.d
	qp, scq := overrunWorker(d)
	if d.waitReadable(int(d.ctx.AsyncFD), within) == 0 {
		t.Fatal("no event after the overrun")
	}
	if err := d.destroyQP(qp); err != nil {
		t.Fatalf("ibv_destroy_qp: %v", err)
	}
	if err := d.destroyCQ(scq); err != nil {
		t.Fatalf("ibv_destroy_cq: %v", err)
	}
	if d.waitReadable(int(d.ctx.AsyncFD), quietWindow) == 0 {
		return
	}
	// Say what is left (read, never acknowledged: an ack would write
	// into the destroyed object).
	var left []string
	ev := cAlloc[verbs.AsyncEvent](d)
	for len(left) < 4 && readable(t, int(d.ctx.AsyncFD), 0) != 0 {
		if err := verbs.GetAsyncEvent(d.ctx, ev); err != nil {
			left = append(left, err.Error())
			break
		}
		what := "something else"
		switch {
		case ev.EventType == verbs.EventCQErr && ev.Element.CQ() == scq:
			what = "the destroyed CQ"
		case ev.EventType == verbs.EventQPFatal && ev.Element.QP() == qp:
			what = "the destroyed QP"
		}
		left = append(left, fmt.Sprintf("%v on %s", ev.EventType, what))
	}
	t.Fatalf("events left after their CQ and QP were destroyed: %s", strings.Join(left, ", "))
}

// eventsDestroyKeepsOthersInOrder: two overrun workers raise CQ_ERR and
// QP_FATAL each, worker 1's first (its QP was created first and runs
// first); destroying worker 2's QP while its QP_FATAL is unread drops
// that event only, and the others come in the order they were raised.
// Then the first event, read but not yet acknowledged, holds up the
// destroy of its CQ on the library path until it is acknowledged, as
// libibverbs' ibv_cmd_destroy_cq waits for the kernel's events_reported;
// the in-process device keeps its own rule (runtime/softdev's doc: the
// events still queued go with their object, and destroy waits for no
// acknowledgement), so there the destroy returns at once.
func eventsDestroyKeepsOthersInOrder(n *node) {
	t, d := n.t, n.d
	qp1, scq1 := overrunWorker(d)
	qp2, scq2 := overrunWorker(d)
	for end := time.Now().Add(within); d.qpState(qp1) != verbs.QpsErr || d.qpState(qp2) != verbs.QpsErr; {
		if time.Now().After(end) {
			t.Fatalf("the workers' QPs are in %v and %v %v after their overruns, want ERR", d.qpState(qp1), d.qpState(qp2), within)
		}
		d.waitReadable(int(d.ctx.AsyncFD), time.Millisecond) // runs the device in process
	}
	first := cAlloc[verbs.AsyncEvent](d)
	if err := verbs.GetAsyncEvent(d.ctx, first); err != nil {
		t.Fatalf("ibv_get_async_event: %v", err)
	}
	if first.EventType != verbs.EventCQErr || first.Element.CQ() != scq1 {
		t.Fatalf("first event %v on %p, want CQ_ERR on worker 1's CQ %p", first.EventType, first.Element.CQ(), scq1)
	}
	if err := d.destroyQP(qp2); err != nil {
		t.Fatalf("ibv_destroy_qp with its QP_FATAL unread: %v", err)
	}
	if ev := d.event(within); ev.EventType != verbs.EventQPFatal || ev.Element.QP() != qp1 {
		t.Errorf("second event %v on %p, want QP_FATAL on worker 1's QP %p", ev.EventType, ev.Element.QP(), qp1)
	}
	if ev := d.event(within); ev.EventType != verbs.EventCQErr || ev.Element.CQ() != scq2 {
		t.Errorf("third event %v on %p, want CQ_ERR on worker 2's CQ %p", ev.EventType, ev.Element.CQ(), scq2)
	}
	d.noEvent("after destroying the QP whose QP_FATAL was unread")

	if err := d.destroyQP(qp1); err != nil { // its event was acknowledged: no wait
		t.Fatalf("ibv_destroy_qp: %v", err)
	}
	destroyAfterAck(d, scq1, "its CQ_ERR", func() {
		if err := verbs.AckAsyncEvent(first); err != nil {
			t.Fatalf("ibv_ack_async_event: %v", err)
		}
	})
}

// destroyAfterAck destroys cq, one of whose events (what) the program
// read and has not acknowledged. On the library path the destroy must
// wait until ack acknowledges it, as ibv_cmd_destroy_cq waits for the
// kernel's count of events reported; in process it returns at once
// (runtime/softdev's doc: destroy waits for no acknowledgement), and ack
// is not called (it would name a destroyed CQ).
func destroyAfterAck(d *dut, cq *verbs.CQ, what string, ack func()) {
	t := d.t
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- d.destroyCQ(cq) }()
	if d.path == library {
		select {
		case err := <-done:
			t.Fatalf("ibv_destroy_cq returned (%v) while %s was read and not acknowledged", err, what)
		case <-time.After(quietWindow):
		}
		ack()
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ibv_destroy_cq: %v", err)
		}
	case <-time.After(within):
		t.Fatalf("ibv_destroy_cq still waits after %v (%v path; %s acknowledged on the library path)", within, d.path, what)
	}
}

// eventsCommEstablished: a QP in RTR (not RTS) that receives its first
// packet raises IBV_EVENT_COMM_EST on itself, and takes the message.
func eventsCommEstablished(n *node) {
	t, d := n.t, n.d
	w := n.wireUpWith(func(rank int) link { l := defaultLink(); l.rtrOnly = rank == 1; return l }, nil, nil)
	if n.rank == 1 {
		if st := d.qpState(w.qp); st != verbs.QpsRtr {
			t.Fatalf("the responder is in %v, want RTR", st)
		}
		d.postRecv(w.qp, d.recvBuf(3, 0, 16))
		n.barrier("posted")
		if r := d.await(w.cq, 1)[0]; r.Status != verbs.WCSuccess || r.WRID != 3 || string(d.buf[:5]) != "first" {
			t.Errorf("receive %+v, data %q", sum([]verbs.ExpWC{r}), d.buf[:5])
		}
		ev := d.event(within)
		if ev.EventType != verbs.EventCommEst || ev.Element.QP() != w.qp {
			t.Errorf("event %v on QP %p, want COMM_EST on %p", ev.EventType, ev.Element.QP(), w.qp)
		}
		return
	}
	n.barrier("posted")
	copy(d.buf, "first")
	d.postSend(w.qp, d.sendBuf(1, verbs.ExpSendSignaled, 0, 5))
	if c := d.await(w.cq, 1)[0]; c.Status != verbs.WCSuccess {
		t.Errorf("%+v", sum([]verbs.ExpWC{c}))
	}
}

// compChannel: completion channels through the exported verbs. Two CQs
// on one channel (ibv_create_cq with a cq_context, ibv_exp_create_cq);
// the channel counts them and refuses to go while they use it (EBUSY). A
// CQ writes no event unarmed; armed, one for its next CQE, and the arm is
// spent; a solicited-only arm ignores an unsolicited receive and fires for
// a solicited one; arming over a CQE not polled yet fires at once (as
// mlx4 and mlx5 arm relative to the consumer index), a solicited-only arm
// only for a solicited or failed one. ibv_ack_cq_events adds to the CQ's
// comp_events_completed; destroying the CQs gives the channel back.
func compChannel(n *node) {
	t, d := n.t, n.d
	ch := d.compChannel()
	if ch.Context != d.ctx || ch.FD < 0 || ch.Refcnt != 0 {
		t.Fatalf("channel %+v", *ch)
	}
	tag := unsafe.Pointer(&d.buf[100]) // a cq_context to get back
	cq := d.createCQ(16, ch, tag, 0)
	ecq, err := verbs.ExpCreateCQ(d.ctx, 16, nil, ch, 0, cAlloc[verbs.ExpCQInitAttr](d))
	if err != nil {
		t.Fatalf("ibv_exp_create_cq: %v", err)
	}
	d.cqs = append(d.cqs, ecq)
	if cq.Channel != ch || ecq.Channel != ch || ch.Refcnt != 2 {
		t.Fatalf("CQs on the channel: %p, %p, refcnt %d; want the channel and 2", cq.Channel, ecq.Channel, ch.Refcnt)
	}
	if err := verbs.DestroyCompChannel(ch); !isCallErrno(err, "ibv_destroy_comp_channel", syscall.EBUSY) {
		t.Errorf("destroying a channel CQs use: %v, want EBUSY", err)
	}
	a := d.createQP(qpSpec{scq: ecq, rcq: ecq})
	b := d.createQP(qpSpec{scq: cq, rcq: cq})
	d.connect(a, d.self(), b.QPNum, defaultLink())
	d.connect(b, d.self(), a.QPNum, defaultLink())

	gotCQ, gotCtx := cAlloc[*verbs.CQ](d), cAlloc[unsafe.Pointer](d)
	events := map[*verbs.CQ]uint32{}
	event := func(want *verbs.CQ) {
		t.Helper()
		if d.waitReadable(int(ch.FD), within) == 0 {
			t.Fatal("no completion event on the channel")
		}
		if err := verbs.GetCQEvent(ch, gotCQ, gotCtx); err != nil {
			t.Fatalf("ibv_get_cq_event: %v", err)
		}
		if *gotCQ != want || (want == cq && *gotCtx != tag) {
			t.Fatalf("event for CQ %p (cq_context %p), want %p", *gotCQ, *gotCtx, want)
		}
		events[want]++
	}
	none := func(why string) {
		t.Helper()
		if d.waitReadable(int(ch.FD), quietWindow) != 0 {
			t.Fatalf("a completion event %s", why)
		}
	}
	arm := func(c *verbs.CQ, solicited int32) {
		t.Helper()
		if err := verbs.ReqNotifyCQ(c, solicited); err != nil {
			t.Fatalf("ibv_req_notify_cq: %v", err)
		}
	}
	send := func(id uint64, flags verbs.ExpSendFlags) {
		d.postSend(a, d.sendBuf(id, flags, 0, 8))
	}
	recv := func() { d.postRecv(b, d.recvBuf(1, 64, 8)) }
	// done waits until the receive on cq and, if signaled, the send on
	// ecq completed: then any event they would write is written.
	done := func(sends int) {
		t.Helper()
		d.await(cq, 1)
		if sends > 0 {
			d.await(ecq, sends)
		}
	}

	// Unarmed: completions write no event.
	recv()
	send(1, verbs.ExpSendSignaled)
	done(1)
	none("from an unarmed CQ")
	// Armed: the next completion writes one (the receive completes before
	// the ACK completes the send), and the arm is spent.
	arm(cq, 0)
	arm(ecq, 0)
	recv()
	send(2, verbs.ExpSendSignaled)
	event(cq)
	event(ecq)
	none("after each armed CQ gave one")
	done(1)
	recv()
	send(3, verbs.ExpSendSignaled)
	done(1)
	none("from spent arms")
	// Solicited only: an unsolicited receive does not wake it, a
	// solicited one does.
	arm(cq, 1)
	recv()
	send(4, 0)
	done(0)
	none("for an unsolicited receive on a solicited-only arm")
	recv()
	send(5, verbs.ExpSendSolicited)
	event(cq)
	done(0)
	// Over a CQE not polled yet (the send's completion on ecq says the
	// receive's is there): a solicited-only arm stays quiet for an
	// unsolicited one, a plain arm fires at once.
	recv()
	send(6, verbs.ExpSendSignaled)
	d.await(ecq, 1)
	arm(cq, 1)
	none("for an unsolicited CQE already there, on a solicited-only arm")
	arm(cq, 0)
	event(cq)
	for _, c := range []*verbs.CQ{cq, ecq} {
		if err := verbs.AckCQEvents(c, events[c]); err != nil || c.CompEventsCompleted != events[c] {
			t.Errorf("ibv_ack_cq_events(%d): %v, comp_events_completed %d", events[c], err, c.CompEventsCompleted)
		}
	}
	if events[cq] != 3 || events[ecq] != 1 {
		t.Errorf("%d and %d events, want 3 and 1", events[cq], events[ecq])
	}
	// Destroying the CQs gives the channel back.
	for _, qp := range []*verbs.QP{a, b} {
		if err := d.destroyQP(qp); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []*verbs.CQ{cq, ecq} {
		if err := d.destroyCQ(c); err != nil {
			t.Fatal(err)
		}
	}
	if ch.Refcnt != 0 {
		t.Errorf("refcnt %d after both CQs went, want 0", ch.Refcnt)
	}
}

// compChannelBlocking: ibv_get_cq_event blocks until an event comes, as
// on a kernel channel, unless the channel's fd was made non-blocking
// (EAGAIN).
func compChannelBlocking(n *node) {
	t, d := n.t, n.d
	ch := d.compChannel()
	cq := d.createCQ(4, ch, nil, 0)
	gotCQ, gotCtx := cAlloc[*verbs.CQ](d), cAlloc[unsafe.Pointer](d)
	if err := syscall.SetNonblock(int(ch.FD), true); err != nil {
		t.Fatal(err)
	}
	if err := verbs.GetCQEvent(ch, gotCQ, gotCtx); !isCallErrno(err, "ibv_get_cq_event", syscall.EAGAIN) {
		t.Errorf("ibv_get_cq_event with no event, non-blocking: %v, want EAGAIN", err)
	}
	if err := syscall.SetNonblock(int(ch.FD), false); err != nil {
		t.Fatal(err)
	}
	qp := d.createQP(qpSpec{scq: cq, rcq: cq})
	d.connect(qp, d.self(), qp.QPNum, defaultLink())
	if err := verbs.ReqNotifyCQ(cq, 0); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- verbs.GetCQEvent(ch, gotCQ, gotCtx) }()
	if d.waitReadable(int(ch.FD), quietWindow) != 0 {
		t.Fatal("an event before anything completed")
	}
	d.postSend(qp, d.send(1, verbs.ExpWRNop, verbs.ExpSendSignaled, nil, 0))
	d.await(cq, 1)
	select {
	case err := <-got:
		if err != nil || *gotCQ != cq {
			t.Fatalf("the blocked ibv_get_cq_event: %v, CQ %p; want %p", err, *gotCQ, cq)
		}
	case <-time.After(within):
		t.Fatalf("the blocked ibv_get_cq_event did not return within %v of the completion", within)
	}
	if err := verbs.AckCQEvents(cq, 1); err != nil {
		t.Fatal(err)
	}
}

// compEventsGoWithTheirCQ: two CQs on one channel, each armed, each
// given a CQE (the first CQ's first): destroying the first CQ while both
// events are unread drops its event only, and the second's is still
// there. Then that event, read but not acknowledged, holds up the
// destroy of its CQ on the library path until ibv_ack_cq_events, as
// libibverbs' ibv_cmd_destroy_cq waits for the kernel's
// comp_events_reported (a program that does not acknowledge its events
// hangs there on an HCA too); in process the destroy returns at once
// (runtime/softdev's doc: destroy waits for no acknowledgement).
func compEventsGoWithTheirCQ(n *node) {
	t, d := n.t, n.d
	ch := d.compChannel()
	var cqs [2]*verbs.CQ
	var qps [2]*verbs.QP
	for i := range 2 {
		cqs[i] = d.createCQ(4, ch, nil, 0)
		qps[i] = d.createQP(qpSpec{scq: cqs[i], rcq: cqs[i]})
		d.connect(qps[i], d.self(), qps[i].QPNum, defaultLink())
		if err := verbs.ReqNotifyCQ(cqs[i], 0); err != nil {
			t.Fatalf("ibv_req_notify_cq: %v", err)
		}
	}
	for i := range 2 {
		w := d.send(uint64(i), verbs.ExpWRRDMAWrite, verbs.ExpSendSignaled, d.sges(d.mr.Lkey, [2]int{0, 8}), 1)
		w.WR.RDMA().RemoteAddr, w.WR.RDMA().Rkey = d.addr(64), d.mr.Rkey
		d.postSend(qps[i], w)
		d.await(cqs[i], 1) // its event is written with the CQE
	}
	if err := d.destroyQP(qps[0]); err != nil {
		t.Fatalf("ibv_destroy_qp: %v", err)
	}
	if err := d.destroyCQ(cqs[0]); err != nil {
		t.Fatalf("ibv_destroy_cq with its completion event unread: %v", err)
	}
	gotCQ, gotCtx := cAlloc[*verbs.CQ](d), cAlloc[unsafe.Pointer](d)
	if d.waitReadable(int(ch.FD), within) == 0 {
		t.Fatal("the second CQ's completion event is gone with the first CQ")
	}
	if err := verbs.GetCQEvent(ch, gotCQ, gotCtx); err != nil {
		t.Fatalf("ibv_get_cq_event: %v", err)
	}
	if *gotCQ != cqs[1] {
		t.Fatalf("event for CQ %p, want the second CQ %p (the first, %p, was destroyed)", *gotCQ, cqs[1], cqs[0])
	}
	if d.waitReadable(int(ch.FD), quietWindow) != 0 {
		t.Fatal("a completion event left on the channel after the destroyed CQ's and the second's")
	}
	if err := d.destroyQP(qps[1]); err != nil {
		t.Fatalf("ibv_destroy_qp: %v", err)
	}
	destroyAfterAck(d, cqs[1], "its completion event", func() { verbs.AckCQEvents(cqs[1], 1) })
}
