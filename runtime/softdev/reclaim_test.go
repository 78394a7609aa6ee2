//go:build linux && cgo

package softdev

import (
	"syscall"
	"testing"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/device"
)

// The slot rule of mlx4 and mlx5: a WQE's slot is free for a new WR only
// once a polled CQE covers it (see "Post path" in the package doc). Each
// test fills a queue of depth reclaimDepth, checks that the next post
// fails with ENOMEM although every WQE executed, and what frees it.
// Before the rule, each of them failed at its first Freed check.

const reclaimDepth = 8

// reclaimQP is a QP with a send and a receive queue of reclaimDepth
// slots, its own send and receive CQs, connected to itself.
func reclaimQP(t *testing.T, f *fixture, scq, rcq *verbs.CQ, opts ...device.QPOption) *verbs.QP {
	t.Helper()
	caps := device.QPCaps(device.Caps{SendWR: reclaimDepth, RecvWR: reclaimDepth, SendSGE: 1, RecvSGE: 1})
	qp := f.qp(scq, rcq, append(opts, caps)...)
	if err := device.ConnectPair(qp, qp); err != nil {
		t.Fatal(err)
	}
	return qp
}

// write8 is an 8-byte RDMA write from the start of the buffer to offset
// 64 of it, signaled or not.
func (f *fixture) write8(id uint64, signaled bool) *verbs.ExpSendWR {
	w := f.write(id, 0, 64)
	if !signaled {
		w.ExpSendFlags = 0
	}
	return w
}

// trySend posts one WR and returns the verb's error.
func (f *fixture) trySend(qp *verbs.QP, w *verbs.ExpSendWR) error {
	w.Next = nil
	return verbs.ExpPostSend(qp, w, alloc[*verbs.ExpSendWR](f))
}

// tryRecv posts one 8-byte receive at offset 128 and returns the error.
func (f *fixture) tryRecv(qp *verbs.QP, id uint64) error {
	return verbs.PostRecv(qp, f.recv(id, f.sges(f.mr.Lkey, [2]int{128, 8}), 1), alloc[*verbs.RecvWR](f))
}

// pollOne polls at most one CQE, through ibv_poll_cq (legacy) or
// ibv_exp_poll_cq, and returns how many it got.
func (f *fixture) pollOne(cq *verbs.CQ, legacy bool) int {
	f.t.Helper()
	var n int32
	var err error
	if legacy {
		n, err = verbs.PollCQRaw(cq, 1, alloc[verbs.WC](f))
	} else {
		wc := alloc[verbs.ExpWC](f)
		n, err = verbs.ExpPollCQRaw(cq, 1, wc, uint32(unsafe.Sizeof(*wc)))
	}
	if err != nil {
		f.t.Fatalf("poll: %v", err)
	}
	return int(n)
}

// queues returns the QP's send and receive queue counters.
func (f *fixture) queues(qp *verbs.QP) (send, recv QueueStats) {
	f.t.Helper()
	_, send, recv, err := f.d.QPStats(qp)
	if err != nil {
		f.t.Fatal(err)
	}
	return send, recv
}

// setState moves qp to state with ibv_exp_modify_qp.
func (f *fixture) setState(qp *verbs.QP, state verbs.QPState) {
	f.t.Helper()
	attr := alloc[verbs.ExpQPAttr](f)
	attr.QPState = state
	if err := verbs.ExpModifyQP(qp, attr, uint64(verbs.ExpQPState)); err != nil {
		f.t.Fatalf("modify QP %#x to %v: %v", qp.QPNum, state, err)
	}
}

// A send queue of unsignaled writes, one signaled every k: the queue is
// full after depth posts although all of them ran, and each polled
// signaled CQE frees its WQE's slot and those of the unsignaled ones
// before it, through either poll.
func TestReclaimSendQueue(t *testing.T) {
	const k = 4
	for _, legacy := range []bool{false, true} {
		f := newFixture(t)
		scq, rcq := f.cq(64), f.cq(64)
		qp := reclaimQP(t, f, scq, rcq)
		id := uint64(0)
		post := func() error {
			err := f.trySend(qp, f.write8(id, id%k == k-1))
			if err == nil {
				id++
			}
			return err
		}
		for range reclaimDepth {
			if err := post(); err != nil {
				t.Fatalf("post %d of %d: %v", id, reclaimDepth, err)
			}
		}
		f.progress()
		if s, _ := f.queues(qp); s.Done != reclaimDepth || s.Freed != 0 {
			t.Fatalf("after %d writes ran unpolled: %+v; want Done %d, Freed 0", reclaimDepth, s, reclaimDepth)
		}
		if err := post(); !isErrno(err, syscall.ENOMEM) {
			t.Fatalf("post into a queue of %d executed, unpolled WQEs: %v; want ENOMEM", reclaimDepth, err)
		}
		// Each signaled CQE polled frees k more slots, no more.
		for round := 1; round <= reclaimDepth/k; round++ {
			if n := f.pollOne(scq, legacy); n != 1 {
				t.Fatalf("poll %d: %d CQEs; want 1", round, n)
			}
			if s, _ := f.queues(qp); s.Freed != uint64(round*k) {
				t.Fatalf("after %d polled CQEs: Freed %d; want %d", round, s.Freed, round*k)
			}
			for i := range k {
				if err := post(); err != nil {
					t.Fatalf("poll %d, post %d: %v", round, i, err)
				}
			}
			if err := post(); !isErrno(err, syscall.ENOMEM) {
				t.Fatalf("poll %d: post %d beyond the freed slots: %v; want ENOMEM", round, k+1, err)
			}
		}
		// The WQEs posted into freed slots are the new ones, intact.
		f.progress()
		got := ids(sum(f.poll(scq)))
		want := []uint64{2*reclaimDepth - k - 1, 2*reclaimDepth - 1}
		if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
			t.Fatalf("CQEs of the second round: %v; want %v", got, want)
		}
	}
}

// A receive queue: each polled receive CQE frees one slot, flush CQEs
// included.
func TestReclaimRecvQueue(t *testing.T) {
	f := newFixture(t)
	scq, rcq := f.cq(64), f.cq(64)
	qp := f.qp(scq, rcq, device.QPCaps(device.Caps{SendWR: 1, RecvWR: reclaimDepth, SendSGE: 1, RecvSGE: 1}))
	src := f.qp(scq, f.cq(4), device.QPCaps(device.Caps{SendWR: 64, RecvWR: 1, SendSGE: 1, RecvSGE: 1}))
	if err := device.ConnectPair(src, qp); err != nil {
		t.Fatal(err)
	}
	for i := range reclaimDepth {
		if err := f.tryRecv(qp, uint64(i)); err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
	}
	for i := range reclaimDepth {
		f.postSend(src, f.send(uint64(100+i), verbs.ExpWRSend, 0, f.sges(f.mr.Lkey, [2]int{0, 8}), 1))
	}
	f.progress()
	if _, r := f.queues(qp); r.Done != reclaimDepth || r.Freed != 0 {
		t.Fatalf("after %d receives consumed: %+v; want Done %d, Freed 0", reclaimDepth, r, reclaimDepth)
	}
	if err := f.tryRecv(qp, 50); !isErrno(err, syscall.ENOMEM) {
		t.Fatalf("receive into %d consumed, unpolled WQEs: %v; want ENOMEM", reclaimDepth, err)
	}
	for i := range 3 {
		if n := f.pollOne(rcq, i%2 == 1); n != 1 {
			t.Fatalf("receive CQE %d: polled %d", i, n)
		}
		if err := f.tryRecv(qp, uint64(60+i)); err != nil {
			t.Fatalf("receive after %d polled CQEs: %v", i+1, err)
		}
		if err := f.tryRecv(qp, 70); !isErrno(err, syscall.ENOMEM) {
			t.Fatalf("second receive after %d polled CQEs: %v; want ENOMEM", i+1, err)
		}
	}
	// The error state flushes the 3 receives posted since; the queue
	// holds 8 retired WQEs, 5 of them with unpolled CQEs and 3 with flush
	// CQEs: polling all 8 frees all 8.
	f.setState(qp, verbs.QpsErr)
	f.progress()
	if _, r := f.queues(qp); r.Done != reclaimDepth+3 || r.Freed != 3 {
		t.Fatalf("after the flush: %+v; want Done %d, Freed 3", r, reclaimDepth+3)
	}
	if err := f.tryRecv(qp, 80); !isErrno(err, syscall.ENOMEM) {
		t.Fatalf("receive into a queue of flushed, unpolled WQEs: %v; want ENOMEM", err)
	}
	cs := sum(f.poll(rcq))
	flushed := 0
	for _, c := range cs {
		if c.Status == verbs.WCWRFlushErr {
			flushed++
		}
	}
	if len(cs) != reclaimDepth || flushed != 3 {
		t.Fatalf("polled %d receive CQEs, %d flushed; want %d, 3", len(cs), flushed, reclaimDepth)
	}
	if _, r := f.queues(qp); r.Freed != reclaimDepth+3 {
		t.Fatalf("after polling every receive CQE: Freed %d; want %d", r.Freed, reclaimDepth+3)
	}
	for i := range reclaimDepth {
		if err := f.tryRecv(qp, uint64(90+i)); err != nil {
			t.Fatalf("receive %d after polling: %v", i, err)
		}
	}
}

// A CQ nobody polls, only a CQE_WAIT counting it: every WQE executes and
// the wait completes, yet the queue is full after depth WRs, as on an
// HCA. That is a standing schedule that never drains one of its CQs.
func TestReclaimWaitOnlyCQ(t *testing.T) {
	f := newFixture(t)
	mqp, mcq := f.mgr()
	scq, rcq := f.cq(64), f.cq(64)
	qp := reclaimQP(t, f, scq, rcq)
	for i := range reclaimDepth {
		if err := f.trySend(qp, f.write8(uint64(i), true)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	f.postSend(mqp, f.wait(1000, scq, reclaimDepth, verbs.ExpSendSignaled|verbs.ExpSendWaitEnLast))
	f.progress()
	if got := ids(sum(f.poll(mcq))); len(got) != 1 || got[0] != 1000 {
		t.Fatalf("the wait's CQE: %v; want [1000]", got)
	}
	if s, _ := f.queues(qp); s.Done != reclaimDepth || s.Freed != 0 {
		t.Fatalf("after the writes and the wait: %+v; want Done %d, Freed 0", s, reclaimDepth)
	}
	for range 3 { // however long the device runs
		if err := f.trySend(qp, f.write8(99, true)); !isErrno(err, syscall.ENOMEM) {
			t.Fatalf("write into a queue whose CQEs nobody polled: %v; want ENOMEM", err)
		}
		f.progress()
	}
	st, err := f.d.CQStats(scq)
	if err != nil || st.Produced != reclaimDepth || st.Queued != reclaimDepth {
		t.Fatalf("send CQ: %+v, %v; want %d produced and queued", st, err, reclaimDepth)
	}
	f.poll(scq)
	if err := f.trySend(qp, f.write8(99, false)); err != nil {
		t.Fatalf("write after polling the send CQ: %v", err)
	}
}

// CQEs written over before anyone polled them (IGNORE_OVERRUN, a CQ of
// 2 slots) free nothing: the poll finds no CQE, the queue stays full.
func TestReclaimOverwrittenCQEs(t *testing.T) {
	for _, opt := range []device.CQOption{device.IgnoreOverrun(), device.CrossChannelCQ()} {
		f := newFixture(t)
		scq := f.cq(1, opt) // 2 slots
		qp := reclaimQP(t, f, scq, f.cq(4))
		for i := range reclaimDepth {
			if err := f.trySend(qp, f.write8(uint64(i), true)); err != nil {
				t.Fatalf("write %d: %v", i, err)
			}
		}
		if n := f.pollOne(scq, false); n != 0 {
			t.Fatalf("poll of a CQ written over %d times: %d CQEs; want 0", reclaimDepth/2-1, n)
		}
		st, _ := f.d.CQStats(scq)
		if st.Produced != reclaimDepth || st.Dropped != reclaimDepth-2 || st.Overrun {
			t.Fatalf("send CQ: %+v; want %d produced, %d dropped, no overrun", st, reclaimDepth, reclaimDepth-2)
		}
		if s, _ := f.queues(qp); s.Done != reclaimDepth || s.Freed != 0 {
			t.Fatalf("queue: %+v; want Done %d, Freed 0", s, reclaimDepth)
		}
		if err := f.trySend(qp, f.write8(99, true)); !isErrno(err, syscall.ENOMEM) {
			t.Fatalf("write after the CQEs were written over: %v; want ENOMEM", err)
		}
	}
}

// A CQE lost to an overrun (a CQ that does not ignore them) frees
// nothing either; the QP goes to the error state, and what the ring kept
// frees the slots of its WQEs only.
func TestReclaimOverrunCQE(t *testing.T) {
	f := newFixture(t)
	scq := f.cq(3) // 4 slots
	qp := reclaimQP(t, f, scq, f.cq(4))
	for i := range 5 {
		if err := f.trySend(qp, f.write8(uint64(i), true)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	f.progress()
	if st, _ := f.d.CQStats(scq); !st.Overrun || st.Dropped != 1 {
		t.Fatalf("send CQ: %+v; want an overrun with 1 CQE lost", st)
	}
	if got := ids(sum(f.poll(scq))); len(got) != 4 {
		t.Fatalf("polled %v; want the 4 CQEs the ring held", got)
	}
	if s, _ := f.queues(qp); s.Done != 5 || s.Freed != 4 {
		t.Fatalf("queue: %+v; want Done 5, Freed 4 (the lost CQE's slot stays taken)", s)
	}
}

// RESET empties both queues and frees every slot; CQEs of the WQEs from
// before it, polled afterwards, free nothing of the new queue.
func TestReclaimReset(t *testing.T) {
	f := newFixture(t)
	scq, rcq := f.cq(64), f.cq(64)
	qp := reclaimQP(t, f, scq, rcq)
	fill := func() {
		t.Helper()
		for i := range reclaimDepth {
			if err := f.trySend(qp, f.write8(uint64(i), true)); err != nil {
				t.Fatalf("write %d: %v", i, err)
			}
			if err := f.tryRecv(qp, uint64(i)); err != nil {
				t.Fatalf("receive %d: %v", i, err)
			}
		}
		f.progress()
		if err := f.trySend(qp, f.write8(99, true)); !isErrno(err, syscall.ENOMEM) {
			t.Fatalf("write into a full send queue: %v; want ENOMEM", err)
		}
		if err := f.tryRecv(qp, 99); !isErrno(err, syscall.ENOMEM) {
			t.Fatalf("receive into a full receive queue: %v; want ENOMEM", err)
		}
	}
	fill()
	f.setState(qp, verbs.QpsReset)
	if s, r := f.queues(qp); s != (QueueStats{}) || r != (QueueStats{}) {
		t.Fatalf("after RESET: send %+v, receive %+v; want all zero", s, r)
	}
	if err := device.ConnectPair(qp, qp); err != nil {
		t.Fatal(err)
	}
	fill()
	// The 8 CQEs of the first generation come first in the send CQ; they
	// free nothing of the new queue.
	for i := range reclaimDepth {
		if n := f.pollOne(scq, false); n != 1 {
			t.Fatalf("old CQE %d: polled %d", i, n)
		}
	}
	if s, _ := f.queues(qp); s.Freed != 0 {
		t.Fatalf("after polling the CQEs from before RESET: Freed %d; want 0", s.Freed)
	}
	f.poll(scq)
	f.poll(rcq) // empty: the receives were never consumed
	if s, _ := f.queues(qp); s.Freed != reclaimDepth {
		t.Fatalf("after polling the new CQEs: send Freed %d; want %d", s.Freed, reclaimDepth)
	}
}
