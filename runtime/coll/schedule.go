//go:build linux && cgo

package coll

/*
#cgo CFLAGS: -I${SRCDIR}/../../headers
#include <stdlib.h>
#include "drain.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/task"
)

// Schedule is a collective built once into a standing task list: each
// Post is one ibv_exp_post_task, each Test one C call that polls the
// run's completion. Its methods may be called from several goroutines
// and across its communicator's Close (which abandons the run: they then
// return ErrClosed); they run under the communicator's lock, so Close
// never frees what a Post or Test is using. A copy of a Schedule is the
// same schedule (its state sits behind one pointer): closed through
// either, it is closed.
type Schedule struct {
	*schedule // nil for the zero Schedule, which is refused as a closed one
}

type schedule struct {
	c    *Comm
	name string // "allreduce", … for errors
	pl   *plan
	list *task.List
	test *C.struct_coll_test
	// Leases on the caller's memories and the scratch, for the life of
	// the schedule.
	leases  *lease.Table
	mems    []*memory
	scratch *lease.Buffer
	scrMR   *verbs.MR
	refs    [3]memRef // by memID
	// What the drain's CQs are, for errors.
	cqNames []string
	waits   int // signaled waits per run
	closed  bool
}

// wr_ids of the manager's closing waits (the others carry their op's
// index in the plan).
const (
	wrSends = 1<<62 + iota // all of the run's sends have completed
	wrDone                 // the run's one completion
	wrTrail                // consumes it, so the next run counts from there
	wrGuard                // the sends that read what the manager is about to write have completed
	wrReady                // a ready message, its receive, a wait for one (ready.go)
)

// sendGuard finds where the manager must wait for the run's sends so
// far: before its first own op (a send or calc to itself, whose receive
// writes a memory) when it writes bytes an earlier send to a peer reads
// (in place, the input is the output; sends after it read the new bytes
// on purpose). A send reads its bytes when it is sent, and
// again each time the transport sends it again (an RNR NAK from a peer
// that has not posted its receives yet, a lost packet), until its peer
// acknowledges it: overwriting them before that sends the new bytes. It
// returns the op index to wait before (-1: none) and how many peer QPs'
// sends the wait covers: every QP whose sends all come before that op,
// whose last send is signaled. A peer with sends on both sides of it
// would need an unsignaled send waited for: no plan does that.
func sendGuard(pl *plan, self int, inPlace bool) (at, qps int, err error) {
	same := func(a, b memID) bool {
		return a == b || inPlace && (a == memIn && b == memOut || a == memOut && b == memIn)
	}
	overlap := func(a, b region) bool {
		return same(a.mem, b.mem) && a.off < b.off+b.len && b.off < a.off+a.len
	}
	var written []region // what the manager's own receives write
	for _, o := range pl.ops {
		if o.kind == opRecv && o.peer == self {
			written = append(written, o.rs...)
		}
	}
	at = -1
	for i, o := range pl.ops {
		if (o.kind == opSend || o.kind == opCalc) && o.peer == self {
			at = i
			break
		}
	}
	hazard := false
	for i, o := range pl.ops {
		if (o.kind == opSend || o.kind == opCalc) && o.peer != self && (at < 0 || i < at) {
			for _, r := range o.rs {
				for _, w := range written {
					hazard = hazard || overlap(r, w)
				}
			}
		}
	}
	if !hazard {
		return -1, 0, nil
	}
	before, after := map[int]bool{}, map[int]bool{}
	for i, o := range pl.ops {
		if (o.kind == opSend || o.kind == opCalc) && o.peer != self {
			if i < at {
				before[o.peer] = true
			} else {
				after[o.peer] = true
			}
		}
	}
	for p := range before {
		if after[p] {
			return 0, 0, fmt.Errorf("internal: sends to rank %d on both sides of the manager's first write", p)
		}
	}
	return at, len(before), nil
}

// The wr_ids of a schedule's leases.
const (
	leaseIn uint64 = 1 + iota
	leaseOut
	leaseScratch
)

// build turns the plan mk makes into a standing schedule over in, out
// (which must hold need bytes) and a scratch of the length mk gives.
// Every argument is checked before mk runs: a plan is as large as the
// sizes it is given. dropWait ≥ 0 leaves out that wait (tests: a broken
// schedule).
func (c *Comm) build(name string, mk func() (pl *plan, scratchLen int), in, out *Memory, need [2]int, dropWait int) (_ *Schedule, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	s := &schedule{c: c, name: name, leases: lease.NewTable()}
	defer func() {
		if err != nil {
			s.release()
		}
	}()
	// Lease what the run touches.
	inM, outM := in.state(), out.state()
	if inM != nil && inM == outM { // in place: one lease covers both
		need = [2]int{0, max(need[0], need[1])}
	}
	for i, m := range []*memory{inM, outM} {
		if m == nil || i == 0 && m == outM {
			if m == nil && need[i] > 0 {
				return nil, fmt.Errorf("coll: %s: no %s memory (nil or zero Memory): %w", name, [2]string{"input", "output"}[i], syscall.EINVAL)
			}
			continue
		}
		if m.c.commState != c.commState {
			return nil, fmt.Errorf("coll: %s: a Memory of another communicator: %w", name, syscall.EINVAL)
		}
		if _, ok := c.memories[m]; !ok {
			return nil, fmt.Errorf("coll: %s: a closed Memory: %w", name, syscall.EINVAL)
		}
		if need[i] > m.buf.Len() {
			return nil, fmt.Errorf("coll: %s: the %s memory is %d bytes, the collective needs %d: %w",
				name, [2]string{"input", "output"}[i], m.buf.Len(), need[i], syscall.EINVAL)
		}
		if need[i] > 0 {
			sge, err := s.leases.Lease(leaseIn+uint64(i), m.buf, 0, need[i], m.mr.Lkey)
			if err != nil {
				return nil, fmt.Errorf("coll: %s: lease the %s memory: %w", name, [2]string{"input", "output"}[i], err)
			}
			s.refs[i] = memRef{sge.Addr, sge.Lkey}
		}
		m.users++
		s.mems = append(s.mems, m)
	}
	if inM != nil && inM == outM {
		s.refs[memIn] = s.refs[memOut]
	}
	pl, scratchLen := mk()
	s.pl = pl
	if scratchLen > 0 {
		if s.scratch, err = lease.Alloc(scratchLen); err != nil {
			return nil, err
		}
		if s.scrMR, err = verbs.RegMR(c.pd, s.scratch.Pointer(), uint64(scratchLen), int32(verbs.AccessLocalWrite)); err != nil {
			return nil, fmt.Errorf("coll: %s: register the scratch: %w", name, err)
		}
		sge, err := s.leases.Lease(leaseScratch, s.scratch, 0, scratchLen, s.scrMR.Lkey)
		if err != nil {
			return nil, err
		}
		s.refs[memScratch] = memRef{sge.Addr, sge.Lkey}
	}
	// Group the plan by queue: receives and sends per peer, in plan
	// order; the manager's walk follows.
	var order []int // peers in order of first use
	recvs, sends := map[int][]int{}, map[int][]int{}
	seen := map[int]bool{}
	for i, o := range pl.ops {
		if !seen[o.peer] {
			seen[o.peer] = true
			order = append(order, o.peer)
		}
		switch {
		case o.kind == opRecv:
			recvs[o.peer] = append(recvs[o.peer], i)
		case o.kind == opWait:
		case len(o.rs) > c.caps.sendSGE:
			return nil, fmt.Errorf("coll: %s: a send of %d SGEs; the queue pairs take %d: %w", name, len(o.rs), c.caps.sendSGE, syscall.EINVAL)
		case o.peer != c.rank:
			sends[o.peer] = append(sends[o.peer], i)
		}
	}
	if err := c.checkPeers(name, sends, recvs); err != nil {
		return nil, err
	}
	guard, guarded, err := sendGuard(pl, c.rank, in != nil && in == out)
	if err != nil {
		return nil, fmt.Errorf("coll: %s: %w", name, err)
	}
	// Ready messages (ready.go): to the peers this run receives from,
	// and from the peers it sends to.
	var readyTo, readyFrom []*peer
	for _, p := range order {
		if q := c.peers[p]; p != c.rank && q.useReady {
			if len(recvs[p]) > 0 {
				readyTo = append(readyTo, q)
			}
			if len(sends[p]) > 0 {
				readyFrom = append(readyFrom, q)
			}
		}
	}
	capa := task.Capacity{Tasks: 2*len(order) + 1 + len(readyTo) + len(readyFrom), SendWRs: 5 + len(readyTo) + len(readyFrom),
		RecvWRs: len(readyFrom)}
	for _, o := range pl.ops {
		capa.SGEs += len(o.rs)
		switch o.kind {
		case opRecv:
			capa.RecvWRs++
		case opSend, opCalc:
			capa.SendWRs += 2 // the WR and at most one enable
		case opWait:
			capa.SendWRs++
		}
	}
	if s.list, err = task.New(c.ctx, capa); err != nil {
		return nil, err
	}
	l := s.list
	add := func(_ any, err error) error { return err }
	for _, p := range order {
		if len(recvs[p]) == 0 {
			continue
		}
		if _, err := l.RecvTask(c.qpFor(p)); err != nil {
			return nil, err
		}
		for _, i := range recvs[p] {
			if err := add(l.Recv(uint64(i), s.sgesOf(pl.ops[i].rs)...)); err != nil {
				return nil, err
			}
		}
	}
	// The ready messages go once every receive is posted, and the next
	// run's ready receives with them.
	for _, q := range readyTo {
		if _, err := l.SendTask(q.ready); err != nil {
			return nil, err
		}
		if err := add(l.Send(wrReady, verbs.ExpSendSignaled)); err != nil {
			return nil, err
		}
	}
	for _, q := range readyFrom {
		if _, err := l.RecvTask(q.ready); err != nil {
			return nil, err
		}
		if err := add(l.Recv(wrReady)); err != nil {
			return nil, err
		}
	}
	sendQPs := 0
	for _, p := range order {
		if len(sends[p]) == 0 {
			continue
		}
		sendQPs++
		if _, err := l.SendTask(c.qpFor(p)); err != nil {
			return nil, err
		}
		for n, i := range sends[p] {
			var flags verbs.ExpSendFlags
			if n == len(sends[p])-1 {
				flags = verbs.ExpSendSignaled // the QP's sends are complete when this one is
			}
			if err := s.addSend(i, flags); err != nil {
				return nil, err
			}
		}
	}
	if _, err := l.SendTask(c.mgr); err != nil {
		return nil, err
	}
	last := verbs.ExpSendWaitEnLast // every wait and enable moves its base past itself
	var enable *verbs.ExpSendWR
	enablePeer, waitIndex := -1, 0
	toldReady := map[int]bool{} // peers whose ready message the manager waited for
	// The manager's work requests: this run's, and the previous run's
	// trailing wait, which is unsignaled: mlx4, mlx5 and softdev free its
	// slot only when a later CQE of the manager's send queue is polled.
	mgrWRs := 1
	onMgr := func(_ any, err error) error {
		mgrWRs++
		return err
	}
	for i, o := range pl.ops {
		if i == guard {
			enable = nil
			if err := onMgr(l.Wait(wrGuard, last|verbs.ExpSendSignaled, c.sendCQ, guarded)); err != nil {
				return nil, err
			}
			s.waits++
		}
		switch {
		case o.kind == opRecv:
		case o.kind == opWait:
			enable = nil
			waitIndex++
			if waitIndex-1 == dropWait {
				s.waits++ // counted by the done wait all the same: the run cannot complete
				continue
			}
			if err := onMgr(l.Wait(uint64(i), last|verbs.ExpSendSignaled, c.recvCQFor(o.peer), o.n)); err != nil {
				return nil, err
			}
			s.waits++
		case o.peer == c.rank: // the manager's own loopback
			enable = nil
			mgrWRs++
			if err := s.addSend(i, 0); err != nil {
				return nil, err
			}
		case enable != nil && enablePeer == o.peer:
			enable.Task.WQEEnable().WQECount++
		default:
			if q := c.peers[o.peer]; q.useReady && !toldReady[o.peer] {
				toldReady[o.peer] = true
				if err := onMgr(l.Wait(wrReady, last, q.readyCQ, 1)); err != nil {
					return nil, err
				}
			}
			mgrWRs++
			if enable, err = l.SendEnable(uint64(i), last, c.qpFor(o.peer), 1); err != nil {
				return nil, err
			}
			enablePeer = o.peer
		}
	}
	if sendQPs > guarded {
		if err := onMgr(l.Wait(wrSends, last|verbs.ExpSendSignaled, c.sendCQ, sendQPs-guarded)); err != nil {
			return nil, err
		}
		s.waits++
	}
	if len(readyTo) > 0 { // their slots are freed when the drain polls them
		if err := onMgr(l.Wait(wrReady, last|verbs.ExpSendSignaled, c.readySendCQ, len(readyTo))); err != nil {
			return nil, err
		}
		s.waits++
	}
	if err := onMgr(l.Wait(wrDone, last|verbs.ExpSendSignaled, c.doneCQ, s.waits)); err != nil {
		return nil, err
	}
	if err := onMgr(l.Wait(wrTrail, last, c.doneCQ, 1)); err != nil {
		return nil, err
	}
	if mgrWRs > c.caps.mgrDepth {
		return nil, fmt.Errorf("coll: %s: %d work requests on the manager in one run; it holds %d (4 × Options.Depth): %w", name, mgrWRs, c.caps.mgrDepth, syscall.EINVAL)
	}

	// The drain: every CQ the run feeds, with its count.
	var cqs []*verbs.CQ
	var expect []uint32
	var bounded []bool
	drained := func(cq *verbs.CQ, n int, name string, bound bool) {
		cqs, expect, bounded = append(cqs, cq), append(expect, uint32(n)), append(bounded, bound)
		s.cqNames = append(s.cqNames, name)
	}
	for _, p := range order {
		if n := len(recvs[p]); n > 0 {
			drained(c.recvCQFor(p), n, fmt.Sprintf("the receives from rank %d", p), false)
		}
	}
	if sendQPs > 0 {
		drained(c.sendCQ, sendQPs, "the sends", false)
	}
	if len(readyTo) > 0 {
		drained(c.readySendCQ, len(readyTo), "the ready messages sent", false)
	}
	for _, q := range readyFrom { // may hold the next run's already
		drained(q.readyCQ, 1, fmt.Sprintf("the ready messages from rank %d", q.rank), true)
	}
	if s.test = C.coll_test_new(C.int(len(cqs))); s.test == nil {
		return nil, fmt.Errorf("coll: %s: %w", name, syscall.ENOMEM)
	}
	s.test.done = (*C.struct_ibv_cq)(unsafe.Pointer(c.doneCQ))
	s.test.done_expect = C.uint32_t(s.waits + 1)
	s.test.done_id = wrDone
	cq := unsafe.Slice(s.test.cq, len(cqs))
	ex := unsafe.Slice(s.test.expect, len(cqs))
	bo := unsafe.Slice(s.test.bounded, len(cqs))
	for i := range cqs {
		cq[i] = (*C.struct_ibv_cq)(unsafe.Pointer(cqs[i]))
		ex[i] = C.uint32_t(expect[i])
		if bounded[i] {
			bo[i] = 1
		}
	}
	c.schedules[s] = struct{}{}
	return &Schedule{s}, nil
}

// memRef is where a memory starts and its lkey.
type memRef struct {
	addr uint64
	lkey uint32
}

// sgesOf is the SGEs of regions.
func (s *schedule) sgesOf(rs []region) []verbs.SGE {
	out := make([]verbs.SGE, len(rs))
	for i, r := range rs {
		m := s.refs[r.mem]
		out[i] = verbs.SGE{Addr: m.addr + uint64(r.off), Length: uint32(r.len), Lkey: m.lkey}
	}
	return out
}

// addSend appends op i of the plan (a send or calc) to the current task.
func (s *schedule) addSend(i int, flags verbs.ExpSendFlags) error {
	o := s.pl.ops[i]
	g := s.sgesOf(o.rs)
	var err error
	if o.kind == opCalc {
		_, err = s.list.Calc(uint64(i), flags, s.pl.calcOp, s.pl.calcType, g...)
	} else {
		_, err = s.list.Send(uint64(i), flags, g...)
	}
	return err
}

// checkPeers refuses a run with more sends or receives on one queue
// pair than Options.Depth lets it hold.
func (c *Comm) checkPeers(name string, sends, recvs map[int][]int) error {
	depth := c.caps.depth
	for p := range c.size { // in rank order, so the error names the same rank every time
		if n := len(sends[p]); n > depth {
			return fmt.Errorf("coll: rank %d: %s: %s to rank %d in one run; the communicator's Depth is %d (Options.Depth): %w", c.rank, name, nOf(n, "send"), p, depth, syscall.EINVAL)
		}
		if n := len(recvs[p]); n > depth {
			return fmt.Errorf("coll: rank %d: %s: %s from rank %d in one run; the communicator's Depth is %d (Options.Depth): %w", c.rank, name, nOf(n, "receive"), p, depth, syscall.EINVAL)
		}
	}
	return nil
}

// Post starts a run: one ibv_exp_post_task. ErrInFlight while a run of
// any schedule of the communicator is not yet complete on this rank.
func (s *Schedule) Post() error {
	if s == nil || s.schedule == nil {
		return errNilSchedule("Post")
	}
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := s.usable("post"); err != nil {
		return err
	}
	switch {
	case c.broken != nil:
		return fmt.Errorf("coll: rank %d: an earlier run failed, the communicator cannot run more: %w", c.rank, c.broken)
	case c.inflight != nil:
		return &textError{fmt.Sprintf("coll: rank %d: %s posted while a run of %s is in flight: wait for it first (Wait, or Test until done): %v", c.rank, s.name, c.inflight.name, syscall.EBUSY), ErrInFlight}
	}
	if err := s.list.Post(); err != nil {
		c.broken = err
		return fmt.Errorf("coll: rank %d: post %s: %w", c.rank, s.name, err)
	}
	c.inflight = s.schedule
	c.watcher.started()
	return nil
}

func errNilSchedule(what string) error {
	return fmt.Errorf("coll: %s of a nil Schedule: %w", what, syscall.EINVAL)
}

// usable is nil unless s or its communicator is closed. c.mu held.
func (s *schedule) usable(what string) error {
	switch {
	case s.c.closed:
		return fmt.Errorf("coll: rank %d: %s of %s: %w", s.c.rank, what, s.name, ErrClosed)
	case s.closed:
		return fmt.Errorf("coll: %s: %s of a closed schedule: %w", s.name, what, syscall.EINVAL)
	}
	return nil
}

// Test polls the run's completion once (one C call, no allocation): true
// once the run is complete on this rank. The schedule's output is then
// the caller's to read and its input to rewrite, and the next Post may
// follow.
func (s *Schedule) Test() (bool, error) {
	if s == nil || s.schedule == nil {
		return false, errNilSchedule("Test")
	}
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := s.usable("Test"); err != nil {
		return false, err
	}
	if c.inflight != s.schedule {
		return false, fmt.Errorf("coll: rank %d: Test of %s, which is not in flight: %w", c.rank, s.name, syscall.EINVAL)
	}
	switch C.coll_test(s.test) {
	case 0:
		if err := c.check(s.schedule); err != nil {
			c.inflight, c.broken = nil, err
			c.stopWatch(true, lostRank(err, c.rank))
			return false, err
		}
		return false, nil
	case 1:
		c.inflight = nil
		c.stopWatch(false, 0)
		return true, nil
	}
	err := s.failure()
	c.inflight, c.broken = nil, err
	c.stopWatch(true, lostRank(err, c.rank))
	return false, err
}

// RunError is a run that completed wrongly: an error completion, or a
// CQ that held more or fewer completions than the schedule produces.
type RunError struct {
	Rank     int
	Schedule string
	CQ       string // whose completions
	Status   verbs.WCStatus
	QP       string // the completion's QP, when it is an error completion
	Peer     int    // the rank that QP connects to, when it names one; else -1
	WRID     uint64
	Got      uint32 // completions found, when the count is wrong
	Want     uint32
	Errno    syscall.Errno // a failed poll
}

func (e *RunError) Error() string {
	head := fmt.Sprintf("coll: rank %d: %s: %s", e.Rank, e.Schedule, e.CQ)
	switch {
	case e.Errno != 0:
		return fmt.Sprintf("%s: ibv_exp_poll_cq: %v", head, e.Errno)
	case e.QP != "":
		return fmt.Sprintf("%s: completion %d (wr_id %#x) on %s has status %v", head, e.Got, e.WRID, e.QP, e.Status)
	}
	return fmt.Sprintf("%s: %d completions in one run, the schedule produces %d", head, e.Got, e.Want)
}

// lostRank is the rank a failed run blames: the peer lost, or the rank
// of the QP an error completion came on; self when it cannot tell.
func lostRank(err error, self int) int {
	var lost *PeerLostError
	var run *RunError
	switch {
	case errors.As(err, &lost):
		return lost.Peer
	case errors.As(err, &run) && run.Peer >= 0:
		return run.Peer
	}
	return self
}

func (s *schedule) failure() error {
	t := s.test
	e := &RunError{Rank: s.c.rank, Schedule: s.name, Got: uint32(t.got), Peer: -1}
	if t.bad_cq < 0 {
		e.CQ, e.Want = "the completion CQ", uint32(t.done_expect)
	} else {
		e.CQ, e.Want = "the CQ of "+s.cqNames[t.bad_cq], uint32(unsafe.Slice(t.expect, t.ncq)[t.bad_cq])
	}
	switch {
	case t.poll_ret < 0:
		e.Errno = syscall.Errno(-t.poll_ret)
	case t.status >= 0:
		e.Status, e.WRID = verbs.WCStatus(t.status), uint64(t.wr_id)
		e.QP, _, _ = s.c.Describe(uint32(t.qp_num))
		if e.QP == "" {
			e.QP = fmt.Sprintf("QP %#x", uint32(t.qp_num))
		}
		e.Peer = s.c.peerOfQP(uint32(t.qp_num))
		if e.Status == verbs.WCRetryExcErr && e.Peer >= 0 {
			// The run's own send found what a probe would have.
			return &PeerLostError{Rank: e.Rank, Schedule: e.Schedule, Peer: e.Peer, Via: -1, Status: e.Status, Run: e}
		}
	}
	return e
}

// How Wait polls without Progress: waitSpins polls back to back, then
// polls that yield the CPU to other processes until the run has taken
// waitYield, then naps between polls, doubling from waitNapMin to
// waitNapMax.
const (
	waitSpins  = 20
	waitYield  = time.Millisecond
	waitNapMin = 5 * time.Microsecond
	waitNapMax = 50 * time.Microsecond
)

// Wait polls until the run is complete. With Options.Progress (a
// software device), a run that cannot complete is reported with the
// error Progress gives (collsoft: a deadlock naming ranks, QPs and
// counts), never a hang; on an HCA (no Progress) it polls for as long as
// the run takes: use WaitContext to bound that.
func (s *Schedule) Wait() error { return s.WaitContext(context.Background()) }

// WaitContext is Wait, ending early with ctx's error when ctx is done.
// The run then stays in flight: Test or wait again, or close the
// communicator.
func (s *Schedule) WaitContext(ctx context.Context) error {
	if s == nil || s.schedule == nil {
		return errNilSchedule("Wait")
	}
	var pace waitPacer
	for polls := 0; ; polls++ {
		done, err := s.Test()
		if done || err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("coll: rank %d: %s: %w", s.c.rank, s.name, err)
		}
		p := s.c.opts.Progress
		if p == nil {
			pace.pause()
			continue
		}
		if err := p(); err != nil {
			// Progress ran the whole device: this rank's run may have
			// completed in it, the deadlock being another rank's.
			if done, terr := s.Test(); done || terr != nil {
				return terr
			}
			return fmt.Errorf("coll: rank %d: %s cannot complete: %w", s.c.rank, s.name, err)
		}
		if polls > 0 { // Progress ran everything there is and found nothing stuck
			return fmt.Errorf("coll: rank %d: %s: the device is idle and the run is not complete: %w", s.c.rank, s.name, syscall.EIO)
		}
	}
}

// Close releases the schedule: its task list, leases and scratch. EBUSY
// while its run is in flight.
func (s *Schedule) Close() error {
	if s == nil || s.schedule == nil {
		return errNilSchedule("Close")
	}
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.closed {
		return fmt.Errorf("coll: %s closed twice: %w", s.name, syscall.EINVAL)
	}
	if c.inflight == s.schedule && !c.closed {
		return fmt.Errorf("coll: close %s: %w", s.name, ErrInFlight)
	}
	return s.closeLocked()
}

func (s *schedule) closeLocked() error {
	s.closed = true
	delete(s.c.schedules, s)
	if s.c.inflight == s {
		s.c.inflight = nil
	}
	return s.release()
}

func (s *schedule) release() error {
	var errs []error
	for _, m := range s.mems {
		m.users--
	}
	s.mems = nil
	if s.list != nil {
		errs = append(errs, s.list.Free())
	}
	if s.test != nil {
		C.coll_test_free(s.test)
		s.test = nil
	}
	// The leases are the schedule's for its whole life (its work
	// requests complete every run and are posted again): end them here,
	// so Close reports only leases left by a bug.
	for id := leaseIn; id <= leaseScratch; id++ {
		if err := s.leases.Release(id); err != nil && !errors.Is(err, lease.ErrUnknown) {
			errs = append(errs, err)
		}
	}
	errs = append(errs, s.leases.Close())
	if s.scrMR != nil {
		errs = append(errs, verbs.DeregMR(s.scrMR))
	}
	if s.scratch != nil {
		errs = append(errs, s.scratch.Free())
	}
	return errors.Join(errs...)
}

// cmem is one zeroed T in C memory, for the verbs' in and out arguments.
func cmem[T any]() (*T, error) {
	var t T
	p := C.calloc(1, C.size_t(unsafe.Sizeof(t)))
	if p == nil {
		return nil, fmt.Errorf("coll: %d bytes of C memory: %w", unsafe.Sizeof(t), syscall.ENOMEM)
	}
	return (*T)(p), nil
}

// cmemSlice is n zeroed Ts in C memory.
func cmemSlice[T any](n int) ([]T, error) {
	var t T
	p := C.calloc(C.size_t(max(n, 1)), C.size_t(unsafe.Sizeof(t)))
	if p == nil {
		return nil, fmt.Errorf("coll: %d × %d bytes of C memory: %w", n, unsafe.Sizeof(t), syscall.ENOMEM)
	}
	return unsafe.Slice((*T)(p), max(n, 1)), nil
}

func free(p unsafe.Pointer) { C.free(p) }

// waitPacer spaces the polls of a wait without Progress. A run that
// takes longer than a few polls waits for a peer process: on an
// oversubscribed host (more ranks than cores) that process needs this
// core, which runtime.Gosched does not give up and sched_yield does
// (measured at 4 ranks on 2 cores: 2.6 ms per allreduce with Gosched,
// 0.58 ms with sched_yield). A run older than waitYield waits for a late
// peer or a retransmission: nap, with nanosleep (Go's timers round a
// short sleep of an otherwise idle process up to the netpoller's
// millisecond).
type waitPacer struct {
	polls int
	start time.Time
	nap   time.Duration
}

// pause is the pause after one poll that found the run incomplete.
func (w *waitPacer) pause() {
	switch {
	case w.polls < waitSpins:
		runtime.Gosched()
	case w.polls == waitSpins:
		w.start = time.Now()
		fallthrough
	case time.Since(w.start) < waitYield:
		schedYield()
	default:
		w.nap = min(max(2*w.nap, waitNapMin), waitNapMax)
		ts := syscall.NsecToTimespec(int64(w.nap))
		_ = syscall.Nanosleep(&ts, nil)
	}
	w.polls++
}

// schedYield gives the CPU to another thread or process that can run.
func schedYield() { _, _, _ = syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
