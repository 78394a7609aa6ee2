//go:build linux && cgo

package softdev

import (
	"errors"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/device"
)

// write builds a signaled 8-byte RDMA write within f.buf.
func (f *fixture) write(id uint64, from, to int) *verbs.ExpSendWR {
	w := f.send(id, verbs.ExpWRRDMAWrite, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{from, 8}), 1)
	w.WR.RDMA().RemoteAddr, w.WR.RDMA().Rkey = f.addr(to), f.mr.Rkey
	return w
}

// progressBlocked runs the device and returns the deadlock report
// (failing if there is none).
func (f *fixture) progressBlocked() *DeadlockError {
	f.t.Helper()
	_, err := f.d.Progress()
	var de *DeadlockError
	if !errors.As(err, &de) {
		f.t.Fatalf("Progress = %v, want a deadlock report", err)
	}
	return de
}

// TestWaitEnableChain: a managed send queue runs nothing until enabled;
// a manager QP enables it once a CQ has produced enough completions, and
// the wait blocks the rest of the manager's queue meanwhile.
func TestWaitEnableChain(t *testing.T) {
	f := newFixture(t)
	trigger := f.pair(nil, nil)                                     // x -> y: completions on trigger.cqa
	managed := f.pair([]device.QPOption{device.ManagedSend()}, nil) // a's sends wait for enables
	m, mcq := f.mgr()

	// Three writes on the managed queue: nothing runs yet.
	f.postSend(managed.a, f.write(1, 0, 100), f.write(2, 0, 108), f.write(3, 0, 116))
	if de := f.progressBlocked(); len(de.Gated) != 1 || de.Gated[0].QPNum != managed.a.QPNum || de.Gated[0].Released != 0 {
		t.Fatalf("before any enable: %v", de)
	}
	// Manager: wait for 2 completions of the trigger CQ, enable two
	// WQEs; wait for 1 more (base 2 + 1), enable everything posted.
	f.postSend(m,
		f.wait(10, trigger.cqa, 2, verbs.ExpSendSignaled|verbs.ExpSendWaitEnLast),
		f.enable(11, verbs.ExpWRSendEnable, managed.a, 2, verbs.ExpSendSignaled|verbs.ExpSendWaitEnLast),
		f.wait(12, trigger.cqa, 1, verbs.ExpSendWaitEnLast),
		f.enable(13, verbs.ExpWRSendEnable, managed.a, 0, verbs.ExpSendSignaled|verbs.ExpSendWaitEnLast))

	de := f.progressBlocked()
	if len(de.Waits) != 1 || de.Waits[0].QPNum != m.QPNum || de.Waits[0].CQ != trigger.cqa ||
		de.Waits[0].Needed != 2 || de.Waits[0].Produced != 0 || de.Waits[0].Base != 0 || de.Waits[0].Count != 2 {
		t.Fatalf("before the trigger: %v", de)
	}

	// One trigger completion: still blocked (needs 2).
	f.postSend(trigger.a, f.write(100, 0, 200))
	if de := f.progressBlocked(); de.Waits[0].Produced != 1 {
		t.Fatalf("after one trigger completion: %v", de)
	}
	if _, s, _, _ := f.d.QPStats(managed.a); s.Done != 0 || s.Enabled != 0 {
		t.Fatalf("managed queue %+v", s)
	}
	// Second: the first wait is satisfied, two WQEs enabled and run;
	// the manager then blocks on base 2 + 1.
	f.postSend(trigger.a, f.write(101, 0, 200))
	if de := f.progressBlocked(); len(de.Waits) != 1 || de.Waits[0].Needed != 3 || de.Waits[0].Base != 2 || de.Waits[0].Produced != 2 {
		t.Fatalf("after two trigger completions: %v", de)
	}
	if _, s, _, _ := f.d.QPStats(managed.a); s.Done != 2 || s.Enabled != 2 {
		t.Fatalf("managed queue after the first enable %+v", s)
	}
	f.postSend(trigger.a, f.write(102, 0, 200))
	f.progress()

	if got := sum(f.poll(managed.cqa)); len(got) != 3 || got[0].ID != 1 || got[2].ID != 3 {
		t.Fatalf("managed completions %+v", got)
	}
	mc := sum(f.poll(mcq))
	want := []wcSum{{10, verbs.WCSuccess, verbs.ExpWCSend, 0, m.QPNum}, {11, verbs.WCSuccess, verbs.ExpWCSend, 0, m.QPNum},
		{13, verbs.WCSuccess, verbs.ExpWCSend, 0, m.QPNum}}
	if !reflect.DeepEqual(mc, want) {
		t.Fatalf("manager completions %+v, want %+v (12 is unsignaled)", mc, want)
	}
}

// TestEnableCountZero: count 0 enables what was posted before the
// ENABLE, not what is posted after it; an enable of a queue that is not
// managed is refused.
func TestEnableCountZero(t *testing.T) {
	f := newFixture(t)
	managed := f.pair([]device.QPOption{device.ManagedSend()}, nil)
	m, _ := f.mgr()
	f.postSend(managed.a, f.write(1, 0, 100), f.write(2, 0, 100))
	f.postSend(m, f.enable(10, verbs.ExpWRSendEnable, managed.a, 0, verbs.ExpSendWaitEnLast))
	f.postSend(managed.a, f.write(3, 0, 100))
	f.progressBlocked()
	if _, s, _, _ := f.d.QPStats(managed.a); s.Done != 2 || s.Enabled != 2 || s.Posted != 3 {
		t.Fatalf("managed queue %+v, want 2 of 3 run", s)
	}
	bad := alloc[*verbs.ExpSendWR](f)
	w := f.enable(11, verbs.ExpWRSendEnable, managed.b, 5, 0)
	if err := verbs.ExpPostSend(m, w, bad); !isErrno(err, syscall.EINVAL) || *bad != w {
		t.Fatalf("enable of an unmanaged queue: %v", err)
	}
	f.postSend(m, f.enable(12, verbs.ExpWRSendEnable, managed.a, 1, verbs.ExpSendWaitEnLast))
	f.progress()
	if _, s, _, _ := f.d.QPStats(managed.a); s.Done != 3 {
		t.Fatalf("managed queue %+v", s)
	}
}

// TestRecvEnable: a send to a managed receive queue waits (RNR) until a
// RECV_ENABLE lets the receive WQE take data.
func TestRecvEnable(t *testing.T) {
	f := newFixture(t)
	p := f.pair(nil, []device.QPOption{device.ManagedRecv()})
	m, _ := f.mgr()
	copy(f.buf, "payload!")
	f.postRecv(p.b, f.recv(1, f.sges(f.mr.Lkey, [2]int{1000, 8}), 1))
	f.postSend(p.a, f.send(2, verbs.ExpWRSend, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{0, 8}), 1))
	_, err := f.d.Progress()
	var de *DeadlockError
	if !errors.As(err, &de) || len(de.Sends) != 1 || de.Sends[0].QPNum != p.a.QPNum || de.Sends[0].DestQPNum != p.b.QPNum {
		t.Fatalf("send before RECV_ENABLE: %v", err)
	}
	if !strings.Contains(err.Error(), "no released receive WQE") || !strings.Contains(err.Error(), "1 posted, released up to 0") {
		t.Errorf("message %q", err)
	}
	f.postSend(m, f.enable(3, verbs.ExpWRRecvEnable, p.b, 1, verbs.ExpSendWaitEnLast))
	if got := sum(f.poll(p.cqb)); len(got) != 1 || got[0].Status != verbs.WCSuccess || got[0].Len != 8 {
		t.Fatalf("receive %+v", got)
	}
	if string(f.buf[1000:1008]) != "payload!" {
		t.Fatalf("payload %q", f.buf[1000:1008])
	}
}

// TestDeadlock: two managers each waiting for a completion only the
// other's blocked queue could produce; Progress returns at once and
// lists both waits.
func TestDeadlock(t *testing.T) {
	f := newFixture(t)
	m1, c1 := f.mgr()
	m2, c2 := f.mgr()
	f.postSend(m1, f.wait(1, c2, 1, verbs.ExpSendWaitEnLast), f.send(2, verbs.ExpWRNop, verbs.ExpSendSignaled, nil, 0))
	f.postSend(m2, f.wait(3, c1, 1, verbs.ExpSendWaitEnLast), f.send(4, verbs.ExpWRNop, verbs.ExpSendSignaled, nil, 0))
	n, err := f.d.Progress()
	var de *DeadlockError
	if n != 0 || !errors.As(err, &de) || len(de.Waits) != 2 {
		t.Fatalf("Progress = %d, %v", n, err)
	}
	want := []BlockedWait{
		{QPNum: m1.QPNum, WRID: 1, CQ: c2, CQHandle: c2.Handle, Needed: 1, Produced: 0, Base: 0, Count: 1},
		{QPNum: m2.QPNum, WRID: 3, CQ: c1, CQHandle: c1.Handle, Needed: 1, Produced: 0, Base: 0, Count: 1},
	}
	if !reflect.DeepEqual(de.Waits, want) {
		t.Fatalf("waits %+v, want %+v", de.Waits, want)
	}
	t.Log(err)
	// Polls do not report it: they just find nothing.
	if got := f.poll(c1); len(got) != 0 {
		t.Fatalf("completions %+v", sum(got))
	}
	// Moving a QP to the error state flushes its queue; the flush
	// completion satisfies the other wait.
	attr := alloc[verbs.ExpQPAttr](f)
	attr.QPState = verbs.QpsErr
	if err := verbs.ExpModifyQP(m1, attr, uint64(verbs.ExpQPState)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.d.Progress(); err != nil {
		t.Fatalf("after flushing m1: %v", err)
	}
	if got := sum(f.poll(c2)); len(got) != 1 || got[0].ID != 4 {
		t.Fatalf("m2 completions %+v, want the NOP only (the wait is unsignaled)", got)
	}
}

// TestPostTask: tasks go to their QPs' send and receive queues in order;
// the first failure stops the walk, bad_task names it, the device records
// the failing WR, and what came before stays posted.
func TestPostTask(t *testing.T) {
	f := newFixture(t)
	p := f.pair([]device.QPOption{device.QPCaps(device.Caps{SendWR: 3, RecvWR: 8, SendSGE: 1, RecvSGE: 1})}, nil)
	m, _ := f.mgr()
	tasks := allocN[verbs.ExpTask](f, 4)
	bad := alloc[*verbs.ExpTask](f)
	set := func(i int, typ verbs.ExpTaskType, qp *verbs.QP) {
		tasks[i].TaskType = typ
		tasks[i].Item.QP = qp
		if i+1 < len(tasks) {
			tasks[i].Next = &tasks[i+1]
		}
	}
	set(0, verbs.ExpTaskRecv, p.b)
	tasks[0].Item.SetRecvWR(f.recv(1, f.sges(f.mr.Lkey, [2]int{1000, 8}), 1))
	set(1, verbs.ExpTaskSend, p.a)
	tasks[1].Item.SetSendWR(link(f.send(2, verbs.ExpWRSend, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{0, 8}), 1), f.write(3, 0, 64)))
	set(2, verbs.ExpTaskSend, m)
	tasks[2].Item.SetSendWR(f.wait(4, p.cqb, 1, verbs.ExpSendWaitEnLast))
	set(3, verbs.ExpTaskSend, p.a)
	over := []*verbs.ExpSendWR{f.write(5, 0, 64), f.write(6, 0, 64)}
	tasks[3].Item.SetSendWR(link(over...))

	err := verbs.ExpPostTask(f.d.Context(), &tasks[0], bad)
	if !isErrno(err, syscall.ENOMEM) || *bad != &tasks[3] {
		t.Fatalf("ExpPostTask = %v, bad_task %p; want ENOMEM at task 3 (%p)", err, *bad, &tasks[3])
	}
	if task, wr, errno := f.d.TaskFailure(); task != &tasks[3] || wr != unsafe.Pointer(over[1]) || errno != syscall.ENOMEM {
		t.Fatalf("TaskFailure = %p, %p, %v; want task 3, its second WR", task, wr, errno)
	}
	if _, s, r, _ := f.d.QPStats(p.a); s.Posted != 3 || r.Posted != 0 {
		t.Fatalf("sender queues %+v %+v: the WRs before the failure stay posted", s, r)
	}
	if _, _, r, _ := f.d.QPStats(p.b); r.Posted != 1 {
		t.Fatalf("receiver %+v", r)
	}
	if got := sum(f.poll(p.cqa)); len(got) != 3 {
		t.Fatalf("sender completions %+v", got)
	}

	// An invalid task (a QP of no device) fails before any WR.
	tasks[0].Next = nil
	tasks[0].Item.QP = (*verbs.QP)(unsafe.Pointer(alloc[verbs.QP](f)))
	if err := verbs.ExpPostTask(f.d.Context(), &tasks[0], bad); !isErrno(err, syscall.EINVAL) || *bad != &tasks[0] {
		t.Fatalf("foreign QP: %v", err)
	}
	if _, wr, _ := f.d.TaskFailure(); wr != nil {
		t.Fatalf("failing WR %p for an invalid task", wr)
	}
	// Reserved comp_mask bits are refused by the header before us.
	tasks[0].Item.QP, tasks[0].CompMask = p.b, 1
	if err := verbs.ExpPostTask(f.d.Context(), &tasks[0], bad); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("comp_mask: %v", err)
	}
}

// TestConcurrentPosts: goroutines posting to their own QPs at once.
func TestConcurrentPosts(t *testing.T) {
	f := newFixture(t)
	const workers, rounds = 8, 200
	pairs := make([]pair, workers)
	for i := range pairs {
		pairs[i] = f.pair(nil, nil)
	}
	wrs := make([]*verbs.ExpSendWR, workers)
	bads := make([]**verbs.ExpSendWR, workers)
	for i := range wrs {
		wrs[i] = f.write(uint64(i), 0, 64+8*i)
		bads[i] = alloc[*verbs.ExpSendWR](f)
	}
	wcs := make([][]verbs.ExpWC, workers)
	for i := range wcs {
		wcs[i] = allocN[verbs.ExpWC](f, 8)
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := 0
			for range rounds {
				if err := verbs.ExpPostSend(pairs[i].a, wrs[i], bads[i]); err != nil {
					errs <- err
					return
				}
				for {
					n, err := verbs.ExpPollCQ(pairs[i].cqa, wcs[i][:8])
					if err != nil {
						errs <- err
						return
					}
					got += int(n)
					if n > 0 {
						break
					}
				}
			}
			if got != rounds {
				errs <- errors.New("lost completions")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestReferences: a pending WAIT or ENABLE keeps its CQ or QP alive;
// objects of another device are refused at post time.
func TestReferences(t *testing.T) {
	f := newFixture(t)
	other := newFixture(t)
	m, _ := f.mgr()
	target := f.pair([]device.QPOption{device.ManagedSend()}, nil)
	cq := f.cq(8)
	f.postSend(target.a, f.write(1, 0, 64))
	f.postSend(m, f.wait(1, cq, 1, 0), f.enable(2, verbs.ExpWRSendEnable, target.a, 1, 0))
	if err := f.d.DestroyCQ(cq); !isErrno(err, syscall.EBUSY) {
		t.Fatalf("DestroyCQ with a pending wait: %v", err)
	}
	if err := f.d.DestroyQP(target.a); !isErrno(err, syscall.EBUSY) {
		t.Fatalf("DestroyQP with a pending enable: %v", err)
	}
	foreign := other.cq(8)
	bad := alloc[*verbs.ExpSendWR](f)
	w := f.wait(3, foreign, 1, 0)
	if err := verbs.ExpPostSend(m, w, bad); !isErrno(err, syscall.EINVAL) || *bad != w {
		t.Fatalf("wait on another device's CQ: %v", err)
	}
	e := f.enable(4, verbs.ExpWRRecvEnable, other.pair(nil, []device.QPOption{device.ManagedRecv()}).b, 0, 0)
	if err := verbs.ExpPostSend(m, e, bad); !isErrno(err, syscall.EINVAL) || *bad != e {
		t.Fatalf("enable of another device's QP: %v", err)
	}
	if _, err := f.d.CQStats(foreign); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("CQStats of a foreign CQ: %v", err)
	}
	// Flushing the manager drops its references: both can go (the
	// fixture destroys them at cleanup).
	attr := alloc[verbs.ExpQPAttr](f)
	attr.QPState = verbs.QpsErr
	if err := verbs.ExpModifyQP(m, attr, uint64(verbs.ExpQPState)); err != nil {
		t.Fatal(err)
	}
	// The write it would have enabled stays gated: that is all that is left.
	if de := f.progressBlocked(); len(de.Gated) != 1 || len(de.Waits)+len(de.Sends) != 0 {
		t.Fatalf("after flushing the manager: %v", de)
	}
}

// TestStateMachine: the RC transitions with the attributes the kernel's
// table requires and allows for each (a missing one, or one the
// transition does not take, is EINVAL and changes nothing), RoCE's GRH,
// and the transitions the device refuses.
func TestStateMachine(t *testing.T) {
	f := newFixture(t)
	cq := f.cq(8)
	qp := f.qp(cq, cq)
	attr := alloc[verbs.ExpQPAttr](f)
	gid := f.d.GID()
	move := func(s verbs.QPState, mask verbs.ExpQPAttrMask) error {
		*attr = verbs.ExpQPAttr{QPState: s, DestQPNum: qp.QPNum, PortNum: 1, PathMTU: verbs.MTU1024,
			Timeout: 14, RetryCnt: 7, RnrRetry: 7, MinRnrTimer: 12, MaxRdAtomic: 1, MaxDestRdAtomic: 1}
		attr.AHAttr.PortNum, attr.AHAttr.IsGlobal = 1, 1
		*attr.AHAttr.GRH.Dgid.Raw() = gid
		return verbs.ExpModifyQP(qp, attr, uint64(verbs.ExpQPState|mask))
	}
	state := func() verbs.QPState { st, _, _, _ := f.d.QPStats(qp); return st }
	initMask := verbs.ExpQPPkeyIndex | verbs.ExpQPPort | verbs.ExpQPAccessFlags
	rtrMask := verbs.ExpQPAv | verbs.ExpQPPathMTU | verbs.ExpQPDestQPN | verbs.ExpQPRQPSN |
		verbs.ExpQPMaxDestRdAtomic | verbs.ExpQPMinRnrTimer
	rtsMask := verbs.ExpQPTimeout | verbs.ExpQPRetryCnt | verbs.ExpQPRnrRetry | verbs.ExpQPSQPSN | verbs.ExpQPMaxQPRdAtomic
	if err := move(verbs.QpsRts, rtsMask); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("RESET -> RTS: %v", err)
	}
	if err := move(verbs.QpsInit, 0); !isErrno(err, syscall.EINVAL) || state() != verbs.QpsReset {
		t.Fatalf("RESET -> INIT without port, P_Key index and access: %v, %v", err, state())
	}
	if err := move(verbs.QpsInit, initMask|verbs.ExpQPTimeout); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("RESET -> INIT with a timeout: %v", err)
	}
	if err := move(verbs.QpsInit, initMask); err != nil {
		t.Fatal(err)
	}
	for _, m := range []verbs.ExpQPAttrMask{verbs.ExpQPAv, verbs.ExpQPPathMTU, verbs.ExpQPDestQPN, verbs.ExpQPRQPSN,
		verbs.ExpQPMaxDestRdAtomic, verbs.ExpQPMinRnrTimer} {
		if err := move(verbs.QpsRtr, rtrMask&^m); !isErrno(err, syscall.EINVAL) || state() != verbs.QpsInit {
			t.Fatalf("INIT -> RTR without %#x: %v, %v", uint64(m), err, state())
		}
	}
	attrNoGRH := func() error {
		*attr = verbs.ExpQPAttr{QPState: verbs.QpsRtr, DestQPNum: qp.QPNum, PathMTU: verbs.MTU1024, MinRnrTimer: 12}
		attr.AHAttr.PortNum, attr.AHAttr.Dlid = 1, 1
		return verbs.ExpModifyQP(qp, attr, uint64(verbs.ExpQPState|rtrMask))
	}
	if err := attrNoGRH(); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("INIT -> RTR with a LID and no GRH on a RoCE port: %v", err)
	}
	if err := move(verbs.QpsRtr, rtrMask); err != nil {
		t.Fatal(err)
	}
	if err := move(verbs.QpsRts, rtsMask&^verbs.ExpQPSQPSN); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("RTR -> RTS without sq_psn: %v", err)
	}
	if err := move(verbs.QpsRts, rtsMask); err != nil || qp.State != verbs.QpsRts {
		t.Fatalf("RTR -> RTS: %v, state %v", err, qp.State)
	}
	if err := move(verbs.QpsRts, verbs.ExpQPMinRnrTimer); err != nil {
		t.Fatalf("RTS -> RTS with min_rnr_timer: %v", err)
	}
	if err := move(verbs.QpsRts, verbs.ExpQPDestQPN); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("RTS -> RTS with a new destination: %v", err)
	}
	if err := move(verbs.QpsSqd, 0); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("RTS -> SQD: %v", err)
	}
	// RESET discards posted WQEs.
	f.postSend(qp, f.send(1, verbs.ExpWRNop, verbs.ExpSendSignaled, nil, 0))
	if err := move(verbs.QpsReset, 0); err != nil {
		t.Fatal(err)
	}
	if _, s, _, _ := f.d.QPStats(qp); s.Posted != 0 || len(f.poll(cq)) != 0 {
		t.Fatalf("after RESET: %+v", s)
	}
}
