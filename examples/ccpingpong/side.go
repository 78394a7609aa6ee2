//go:build linux && cgo

package main

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/cmem"
	"github.com/verbsexp/verbsexp/runtime/device"
	"github.com/verbsexp/verbsexp/runtime/lease"
)

// The work request ids, one bit each for the receive and the send, so a
// set of them says what one round still waits for.
const (
	recvWRID = 1
	sendWRID = 2
	waitWRID = 3
)

func wrName(id uint64) string {
	switch id {
	case recvWRID:
		return "RECV"
	case sendWRID:
		return "SEND"
	case waitWRID:
		return "CQE_WAIT"
	}
	return fmt.Sprintf("wr_id %d", id)
}

// maxOperands is the most operands a calc SEND gathers: one SGE each,
// and the QP's send queue takes 16 SGEs per WQE, as the vendor's does.
const maxOperands = 16

// side is one process's verbs objects, set up as the vendor's program
// does: a CROSS_CHANNEL QP that carries the ping-pong, with one CQ for its
// sends and receives, and a CROSS_CHANNEL manager QP with a CQ of its own
// whose CQE_WAITs (-w) watch the first CQ. One registered buffer holds the
// calc operands at its start (16 bytes each) and takes every receive, so
// each result lands on the first operand of the next SEND.
type side struct {
	dev     *device.Device // the software device (-d softdev) or one libibverbs lists
	pd      *verbs.PD
	buf     *lease.Buffer
	mr      *verbs.MR
	cq, mcq *verbs.CQ
	qp, mqp *verbs.QP
	events  bool // -e: the CQ is slept on (device.Device.WaitCQ)

	wr *wrs // in C memory
	wc []verbs.WC
}

// wrs are the work requests and their SGEs, in C memory (the verbs read
// them during the call, a Go pointer in them would break cgo's rules);
// each post reuses them.
type wrs struct {
	recvSGE verbs.SGE
	sendSGE [maxOperands]verbs.SGE
	recv    verbs.RecvWR
	send    verbs.ExpSendWR
	wait    verbs.ExpSendWR
}

// open creates the side's objects on its device; close undoes it and
// closes the device, also after a failure part way.
func (s *side) open(cfg *config) error {
	var err error
	if s.pd, err = s.dev.AllocPD(); err != nil {
		return err
	}
	if s.buf, err = lease.Alloc(cfg.size); err != nil {
		return err
	}
	if s.mr, err = s.dev.RegMR(s.pd, s.buf.Bytes(), verbs.AccessLocalWrite); err != nil {
		return err
	}
	// Each CQ has room for every receive and one more.
	var wait []device.CQOption
	if s.events = cfg.events; s.events {
		wait = append(wait, device.Waitable())
	}
	if s.cq, err = s.dev.CreateCQ(cfg.rxDepth+1, wait...); err != nil {
		return err
	}
	caps := device.Caps{SendWR: 16, RecvWR: cfg.rxDepth, SendSGE: maxOperands, RecvSGE: 16}
	if s.qp, err = s.dev.CreateQP(s.pd, s.cq, s.cq, device.CrossChannel(), device.QPCaps(caps)); err != nil {
		return err
	}
	if s.mcq, err = s.dev.CreateCQ(cfg.rxDepth + 1); err != nil {
		return err
	}
	// The manager posts one CQE_WAIT at a time.
	caps.SendWR = 1
	if s.mqp, err = s.dev.CreateQP(s.pd, s.mcq, s.mcq, device.CrossChannel(), device.QPCaps(caps)); err != nil {
		return err
	}
	return s.buildWRs(cfg)
}

// buildWRs fills in the three work requests once; each post reuses them.
// A receive takes the whole buffer. A calc SEND gathers the operands, one
// 16-byte SGE each, from the start of the buffer; a plain SEND sends the
// whole buffer.
func (s *side) buildWRs(cfg *config) error {
	w, err := cmem.New[wrs]()
	if err != nil {
		return err
	}
	s.wr, s.wc = w, make([]verbs.WC, 2)
	base := s.buf.Addr()
	w.recvSGE = verbs.SGE{Addr: base, Length: uint32(cfg.size), Lkey: s.mr.Lkey}
	w.recv = verbs.RecvWR{WRID: recvWRID, SGList: &w.recvSGE, NumSGE: 1}

	w.send = verbs.ExpSendWR{WRID: sendWRID, ExpOpcode: verbs.ExpWRSend, ExpSendFlags: uint64(verbs.ExpSendSignaled),
		SGList: &w.sendSGE[0], NumSGE: 1}
	w.sendSGE[0] = verbs.SGE{Addr: base, Length: uint32(cfg.size), Lkey: s.mr.Lkey}
	if cfg.calc != nil {
		for i := range cfg.ops {
			w.sendSGE[i] = verbs.SGE{Addr: base + uint64(16*i), Length: 16, Lkey: s.mr.Lkey}
		}
		w.send.NumSGE = int32(len(cfg.ops))
		w.send.ExpSendFlags |= uint64(verbs.ExpSendWithCalc)
		c := w.send.Op.Calc()
		c.CalcOp, c.DataType, c.DataSize = cfg.calc.op.dev, cfg.calc.wireType(), verbs.ExpCalcDataSize64Bit
	}

	// The manager's wait: one more CQE on the ping-pong's CQ than the
	// wait before (WAIT_EN_LAST moves the CQ's wait base past each).
	w.wait = verbs.ExpSendWR{WRID: waitWRID, ExpOpcode: verbs.ExpWRCQEWait,
		ExpSendFlags: uint64(verbs.ExpSendSignaled | verbs.ExpSendWaitEnLast)}
	w.wait.Task.CQEWait().CQ, w.wait.Task.CQEWait().CQCount = s.cq, 1
	return nil
}

// postRecvs posts n receives; it returns how many it posted.
func (s *side) postRecvs(n int) (int, error) {
	for i := range n {
		if err := verbs.PostRecv(s.qp, &s.wr.recv, nil); err != nil {
			return i, err
		}
	}
	return n, nil
}

func (s *side) postSend() error { return verbs.ExpPostSend(s.qp, &s.wr.send, nil) }

func (s *side) postWait() error { return verbs.ExpPostSend(s.mqp, &s.wr.wait, nil) }

// poll polls cq into s.wc, waiting between empty polls: with -e asleep
// until the CQ's completion channel has an event, else giving the CPU
// away.
func (s *side) poll(cq *verbs.CQ, n int) ([]verbs.WC, error) {
	poll := func() (int, error) { return verbs.PollCQ(cq, s.wc[:n]) }
	if s.events && cq == s.cq {
		got, err := s.dev.WaitCQ(context.Background(), cq, poll)
		return s.wc[:got], err
	}
	for {
		got, err := poll()
		if got > 0 || err != nil {
			return s.wc[:got], err
		}
		idle()
	}
}

// pollMCQ waits for the manager's CQE_WAIT to complete: the ping-pong's
// CQ has a new completion.
func (s *side) pollMCQ() error {
	wcs, err := s.poll(s.mcq, 1)
	if err != nil {
		return fmt.Errorf("poll of the manager's CQ: %w", err)
	}
	wc := wcs[0]
	if wc.Status != verbs.WCSuccess {
		return fmt.Errorf("%s on the manager QP %#x failed: status %v (%d)", wrName(wc.WRID), s.mqp.QPNum, wc.Status, int(wc.Status))
	}
	if wc.WRID != waitWRID {
		return fmt.Errorf("the manager's CQ returned %s, want CQE_WAIT", wrName(wc.WRID))
	}
	return nil
}

// pollCQ returns the next one or two completions of the ping-pong's CQ.
func (s *side) pollCQ() ([]verbs.WC, error) {
	wcs, err := s.poll(s.cq, len(s.wc))
	if err != nil {
		return nil, fmt.Errorf("poll of the CQ: %w", err)
	}
	return wcs, nil
}

// close destroys what open created, in the vendor's order, and the
// device; it reports every failure.
func (s *side) close() error {
	var errs []error
	add := func(what string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}
	for _, o := range []struct {
		what    string
		made    bool
		destroy func() error
	}{
		{"destroy QP", s.qp != nil, func() error { return s.dev.DestroyQP(s.qp) }},
		{"destroy manager QP", s.mqp != nil, func() error { return s.dev.DestroyQP(s.mqp) }},
		{"destroy CQ", s.cq != nil, func() error { return s.dev.DestroyCQ(s.cq) }},
		{"destroy manager CQ", s.mcq != nil, func() error { return s.dev.DestroyCQ(s.mcq) }},
		{"deregister MR", s.mr != nil, func() error { return s.dev.DeregMR(s.mr) }},
		{"free buffer", s.buf != nil, func() error { return s.buf.Free() }},
		{"deallocate PD", s.pd != nil, func() error { return s.dev.DeallocPD(s.pd) }},
	} {
		if o.made {
			add(o.what, o.destroy())
		}
	}
	add("free the work requests", cmem.Free(s.wr))
	if s.dev != nil {
		add("close device", s.dev.Close())
	}
	return errors.Join(errs...)
}

// idle gives the CPU away between two empty polls, as MPI libraries do
// when oversubscribed: the device's thread, and the peer process when it
// shares the host, need it to make the completion happen.
func idle() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
