//go:build linux && cgo

package main

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/device"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/softdev"
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
	dev     *softdev.Device // -d softdev, or nil
	vdev    *device.Device  // a device through libibverbs, or nil
	ctx     *verbs.Context
	pd      *verbs.PD
	buf     *lease.Buffer
	mr      *verbs.MR
	cq, mcq *verbs.CQ
	qp, mqp *verbs.QP
	channel *verbs.CompChannel // -e: both CQs report to it
	events  uint32             // CQ events taken, acknowledged at close
	evCQ    **verbs.CQ         // ibv_get_cq_event's results, in C memory
	evCtx   *unsafe.Pointer

	// The WRs, their SGEs and the completions, in C memory: the verbs
	// read the WRs during the call, the device writes the completions.
	recvWR *verbs.RecvWR
	sendWR *verbs.ExpSendWR
	waitWR *verbs.ExpSendWR
	wc     []verbs.WC
	cmem   []unsafe.Pointer
}

func cnew[T any](s *side) *T {
	p := softdev.Calloc[T]()
	s.cmem = append(s.cmem, unsafe.Pointer(p))
	return p
}

func cslice[T any](s *side, n int) []T {
	p := softdev.CallocSlice[T](n)
	s.cmem = append(s.cmem, unsafe.Pointer(&p[0]))
	return p
}

// open creates the side's objects on its device, both QPs in INIT; close
// undoes it and closes the device, also after a failure part way.
func (s *side) open(cfg *config) error {
	var err error
	if s.pd, err = verbs.AllocPD(s.ctx); err != nil {
		return err
	}
	if s.buf, err = lease.Alloc(cfg.size); err != nil {
		return err
	}
	if s.mr, err = verbs.RegMR(s.pd, s.buf.Pointer(), uint64(s.buf.Len()), int32(verbs.AccessLocalWrite)); err != nil {
		return err
	}
	if cfg.events {
		if s.channel, err = verbs.CreateCompChannel(s.ctx); err != nil {
			return fmt.Errorf("-e: a completion channel: %w", err)
		}
		s.evCQ, s.evCtx = cnew[*verbs.CQ](s), cnew[unsafe.Pointer](s)
	}
	// Each CQ has room for every receive and one more.
	if s.cq, err = verbs.CreateCQ(s.ctx, int32(cfg.rxDepth+1), nil, s.channel, 0); err != nil {
		return err
	}
	if s.qp, err = s.createQP(s.cq, verbs.QPCap{MaxSendWR: 16, MaxRecvWR: uint32(cfg.rxDepth), MaxSendSGE: maxOperands, MaxRecvSGE: 16}); err != nil {
		return err
	}
	if err := s.toInit(s.qp, cfg.ibPort); err != nil {
		return err
	}
	if s.mcq, err = verbs.CreateCQ(s.ctx, int32(cfg.rxDepth+1), nil, s.channel, 0); err != nil {
		return err
	}
	// The manager posts one CQE_WAIT at a time.
	if s.mqp, err = s.createQP(s.mcq, verbs.QPCap{MaxSendWR: 1, MaxRecvWR: uint32(cfg.rxDepth), MaxSendSGE: 16, MaxRecvSGE: 16}); err != nil {
		return err
	}
	if err := s.toInit(s.mqp, cfg.ibPort); err != nil {
		return err
	}
	s.buildWRs(cfg)
	return nil
}

func (s *side) createQP(cq *verbs.CQ, c verbs.QPCap) (*verbs.QP, error) {
	a := cnew[verbs.ExpQPInitAttr](s)
	a.SendCQ, a.RecvCQ, a.Cap, a.QPType, a.PD = cq, cq, c, verbs.QptRC, s.pd
	a.CompMask = uint32(verbs.ExpQPInitAttrCreateFlags | verbs.ExpQPInitAttrPD)
	a.ExpCreateFlags = uint32(verbs.ExpQPCreateCrossChannel)
	return verbs.ExpCreateQP(s.ctx, a)
}

func (s *side) toInit(qp *verbs.QP, port int) error {
	a := cnew[verbs.QPAttr](s)
	*a = verbs.QPAttr{QPState: verbs.QpsInit, PortNum: uint8(port)}
	if err := verbs.ModifyQP(qp, a, int32(verbs.QPStateConst|verbs.QPPkeyIndex|verbs.QPPort|verbs.QPAccessFlags)); err != nil {
		return fmt.Errorf("QP %#x to INIT: %w", qp.QPNum, err)
	}
	return nil
}

// path is where a QP sends: the peer's QP on the peer's device.
type path struct {
	dlid     uint16
	dgid     [16]byte
	qpn, psn uint32 // the peer's QP and the PSN it starts at
}

// connect moves qp through RTR to RTS with the vendor's attributes: the
// path (a GRH on RoCE), one READ or atomic outstanding each way, the RNR
// timer at 12 (0.64 ms) and seven retries of each kind (rnr_retry 7: for
// ever), the local ACK timeout at 14 (67 ms).
func (s *side) connect(qp *verbs.QP, cfg *config, p path, myPSN uint32, global bool) error {
	a := cnew[verbs.QPAttr](s)
	*a = verbs.QPAttr{QPState: verbs.QpsRtr, PathMTU: verbs.MTU(mtuEnum(cfg.mtu)), DestQPNum: p.qpn, RQPSN: p.psn,
		MaxDestRdAtomic: 1, MinRnrTimer: 12}
	a.AHAttr = verbs.AHAttr{Dlid: p.dlid, SL: uint8(cfg.sl), PortNum: uint8(cfg.ibPort)}
	if global {
		a.AHAttr.IsGlobal = 1
		a.AHAttr.GRH.SgidIndex = uint8(cfg.gidIndex)
		a.AHAttr.GRH.HopLimit = 64
		*a.AHAttr.GRH.Dgid.Raw() = p.dgid
	}
	if err := verbs.ModifyQP(qp, a, int32(verbs.QPStateConst|verbs.QPAv|verbs.QPPathMTU|verbs.QPDestQPN|
		verbs.QPRQPSN|verbs.QPMaxDestRdAtomic|verbs.QPMinRnrTimer)); err != nil {
		return fmt.Errorf("QP %#x to RTR: %w", qp.QPNum, err)
	}
	*a = verbs.QPAttr{QPState: verbs.QpsRts, Timeout: 14, RetryCnt: 7, RnrRetry: 7, SQPSN: myPSN, MaxRdAtomic: 1}
	if err := verbs.ModifyQP(qp, a, int32(verbs.QPStateConst|verbs.QPTimeout|verbs.QPRetryCnt|verbs.QPRnrRetry|
		verbs.QPSQPSN|verbs.QPMaxQPRdAtomic)); err != nil {
		return fmt.Errorf("QP %#x to RTS: %w", qp.QPNum, err)
	}
	return nil
}

// buildWRs fills in the three work requests once; each post reuses them.
// A receive takes the whole buffer. A calc SEND gathers the operands, one
// 16-byte SGE each, from the start of the buffer; a plain SEND sends the
// whole buffer.
func (s *side) buildWRs(cfg *config) {
	base := s.buf.Addr()
	rsge := cnew[verbs.SGE](s)
	*rsge = verbs.SGE{Addr: base, Length: uint32(cfg.size), Lkey: s.mr.Lkey}
	s.recvWR = cnew[verbs.RecvWR](s)
	*s.recvWR = verbs.RecvWR{WRID: recvWRID, SGList: rsge, NumSGE: 1}

	s.sendWR = cnew[verbs.ExpSendWR](s)
	w := s.sendWR
	w.WRID, w.ExpOpcode, w.ExpSendFlags = sendWRID, verbs.ExpWRSend, uint64(verbs.ExpSendSignaled)
	if cfg.calc == nil {
		sge := cnew[verbs.SGE](s)
		*sge = verbs.SGE{Addr: base, Length: uint32(cfg.size), Lkey: s.mr.Lkey}
		w.SGList, w.NumSGE = sge, 1
	} else {
		sges := cslice[verbs.SGE](s, len(cfg.ops))
		for i := range sges {
			sges[i] = verbs.SGE{Addr: base + uint64(16*i), Length: 16, Lkey: s.mr.Lkey}
		}
		w.SGList, w.NumSGE = &sges[0], int32(len(sges))
		w.ExpSendFlags |= uint64(verbs.ExpSendWithCalc)
		c := w.Op.Calc()
		c.CalcOp, c.DataType, c.DataSize = cfg.calc.op.dev, cfg.calc.wireType(), verbs.ExpCalcDataSize64Bit
	}

	// The manager's wait: one more CQE on the ping-pong's CQ than the
	// wait before (WAIT_EN_LAST moves the CQ's wait base past each).
	s.waitWR = cnew[verbs.ExpSendWR](s)
	s.waitWR.WRID, s.waitWR.ExpOpcode = waitWRID, verbs.ExpWRCQEWait
	s.waitWR.ExpSendFlags = uint64(verbs.ExpSendSignaled | verbs.ExpSendWaitEnLast)
	s.waitWR.Task.CQEWait().CQ, s.waitWR.Task.CQEWait().CQCount = s.cq, 1

	s.wc = cslice[verbs.WC](s, 2)
}

// postRecvs posts n receives; it returns how many it posted.
func (s *side) postRecvs(n int) (int, error) {
	for i := range n {
		if err := verbs.PostRecv(s.qp, s.recvWR, nil); err != nil {
			return i, err
		}
	}
	return n, nil
}

func (s *side) postSend() error { return verbs.ExpPostSend(s.qp, s.sendWR, nil) }

func (s *side) postWait() error { return verbs.ExpPostSend(s.mqp, s.waitWR, nil) }

// pollMCQ waits for the manager's CQE_WAIT to complete: the ping-pong's
// CQ has a new completion.
func (s *side) pollMCQ() error {
	for {
		n, err := verbs.PollCQ(s.mcq, s.wc[:1])
		if err != nil {
			return fmt.Errorf("poll of the manager's CQ: %w", err)
		}
		if n == 0 {
			idle()
			continue
		}
		wc := s.wc[0]
		if wc.Status != verbs.WCSuccess {
			return fmt.Errorf("%s on the manager QP %#x failed: status %v (%d)", wrName(wc.WRID), s.mqp.QPNum, wc.Status, int(wc.Status))
		}
		if wc.WRID != waitWRID {
			return fmt.Errorf("the manager's CQ returned %s, want CQE_WAIT", wrName(wc.WRID))
		}
		return nil
	}
}

// pollCQ returns the next one or two completions of the ping-pong's CQ:
// polling until there is one, or with -e polling once after an event
// (none, if the event's completions were taken by the poll before).
func (s *side) pollCQ() ([]verbs.WC, error) {
	for {
		n, err := verbs.PollCQ(s.cq, s.wc)
		if err != nil {
			return nil, fmt.Errorf("poll of the CQ: %w", err)
		}
		if n > 0 || s.channel != nil {
			return s.wc[:n], nil
		}
		idle()
	}
}

// arm asks for an event at the ping-pong CQ's next completion.
func (s *side) arm() error {
	if err := verbs.ReqNotifyCQ(s.cq, 0); err != nil {
		return fmt.Errorf("-e: ibv_req_notify_cq: %w", err)
	}
	return nil
}

// awaitEvent sleeps until the channel has an event, which must be the
// ping-pong CQ's, and arms the CQ again, as the vendor's program does.
func (s *side) awaitEvent() error {
	if err := verbs.GetCQEvent(s.channel, s.evCQ, s.evCtx); err != nil {
		return fmt.Errorf("-e: ibv_get_cq_event: %w", err)
	}
	s.events++
	if *s.evCQ != s.cq {
		return fmt.Errorf("-e: an event for CQ %p, not the ping-pong's %p", *s.evCQ, s.cq)
	}
	return s.arm()
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
	if s.qp != nil {
		add("destroy QP", verbs.DestroyQP(s.qp))
	}
	if s.mqp != nil {
		add("destroy manager QP", verbs.DestroyQP(s.mqp))
	}
	if s.cq != nil {
		if s.events > 0 {
			add("acknowledge CQ events", verbs.AckCQEvents(s.cq, s.events))
		}
		add("destroy CQ", verbs.DestroyCQ(s.cq))
	}
	if s.mcq != nil {
		add("destroy manager CQ", verbs.DestroyCQ(s.mcq))
	}
	if s.channel != nil {
		add("destroy completion channel", verbs.DestroyCompChannel(s.channel))
	}
	if s.mr != nil {
		add("deregister MR", verbs.DeregMR(s.mr))
	}
	if s.buf != nil {
		add("free buffer", s.buf.Free())
	}
	if s.pd != nil {
		add("deallocate PD", verbs.DeallocPD(s.pd))
	}
	for _, p := range s.cmem {
		add("free", softdev.Free(p))
	}
	if s.dev != nil {
		add("close device", s.dev.Close())
	}
	if s.vdev != nil {
		add("close device", s.vdev.Close())
	}
	return errors.Join(errs...)
}

// idle gives the CPU away between two empty polls, as MPI libraries do
// when oversubscribed: the device's thread, and the peer process when it
// shares the host, need it to make the completion happen.
func idle() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
