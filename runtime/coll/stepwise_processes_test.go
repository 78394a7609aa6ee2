//go:build linux && cgo

package coll

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/softdev"
)

// The stepwise driver with its ranks in processes of their own: each
// process builds its one rank (newRank, as newStepWorld does for all of
// them) on the process's device, trades QP addresses with the other
// processes through an Exchange, and connects over the wire with the
// attributes an RC connection between hosts carries. The run is the
// same state machine (advance); what changes is who drives it: the
// process alone, in start, test and wait, as an application drives a
// non-blocking collective of a CPU-progressed library.
//
// Across devices it trades ready messages as coll's schedules do
// (ready.go): after posting a run's receives, a zero-length SEND on a
// plain RC ready QP to every peer it receives from; before its first
// send of a run to a peer, one ready message from that peer; ready
// receives posted readyRecvsAhead ahead and one more for each taken. So
// a late rank costs both sides what it is late, not an RNR timer.

// stepAddrLen is one neighbor's entry in a rank's published addresses:
// the neighbor's rank, and the number and first PSN of this rank's QP
// and of its ready QP to it.
const stepAddrLen = 20

// stepReadyWRID is the wr_id of ready messages and their receives (the
// plan's ops are numbered from 0).
const stepReadyWRID = 1 << 62

// stepReady is a rank's ready messages.
type stepReady struct {
	qps  []*verbs.QP   // by peer: the ready QPs
	cqs  []*verbs.CQ   // by peer: the peer's ready messages
	to   []*verbs.QP   // the ready QPs of the peers this rank receives from
	send *verbs.SendWR // a zero-length signaled SEND
	recv *verbs.RecvWR // a zero-length receive
	got  []bool        // by peer: this run's ready message taken
	wc   []verbs.WC    // one
}

// newStepProcess builds rank's part of a stepwise world of size ranks on
// dev (this process's device; the caller closes it, after the world)
// and connects each of its QPs, and a ready QP per neighbor, to the
// neighbor's for this rank: one exchange round of every rank's GID,
// active MTU and QP addresses, then INIT, RTR and RTS with the
// attributes Comm's connect gives its own QPs (comm.go: the smaller
// active MTU, min_rnr_timer 12, timeout 14, retry_cnt 7, rnr_retry 7, a
// random first PSN each way), so both sides of a benchmark meet the same
// transport.
func newStepProcess(dev *softdev.Device, rank, size int, planOf stepPlan, exchange Exchange) (w *stepWorld, err error) {
	world := &stepWorld{dev: dev} // w is nil by the time a failure's defer runs
	w = world
	defer func() {
		if err != nil {
			err = errors.Join(err, world.close())
			w = nil
		}
	}()
	pl, need, scratch := planOf(rank, size)
	r, err := w.newRank(rank, size, pl, need, scratch)
	if err != nil {
		return nil, fmt.Errorf("stepwise: rank %d: %w", rank, err)
	}
	w.ranks = []*stepRank{r}
	if err := w.newReady(r, pl); err != nil {
		return nil, fmt.Errorf("stepwise: rank %d: %w", rank, err)
	}
	port, err := dev.QueryPort(1)
	if err != nil {
		return nil, fmt.Errorf("stepwise: rank %d: %w", rank, err)
	}
	gid := dev.GID()
	nbrs := neighbors(rank, size)
	psn := make([][2]uint32, size)
	mine := make([]byte, 0, 17+stepAddrLen*len(nbrs))
	mine = append(append(mine, gid[:]...), byte(port.ActiveMTU))
	be := binary.BigEndian
	for _, p := range nbrs {
		psn[p] = [2]uint32{rand.Uint32() & 0xffffff, rand.Uint32() & 0xffffff}
		mine = be.AppendUint32(mine, uint32(p))
		mine = be.AppendUint32(be.AppendUint32(mine, r.qps[p].QPNum), psn[p][0])
		mine = be.AppendUint32(be.AppendUint32(mine, r.ready.qps[p].QPNum), psn[p][1])
	}
	all, err := exchange(mine)
	if err != nil {
		return nil, fmt.Errorf("stepwise: rank %d: exchange: %w", rank, err)
	}
	if len(all) != size {
		return nil, fmt.Errorf("stepwise: rank %d: the exchange returned %d entries for %d ranks", rank, len(all), size)
	}
	for _, p := range nbrs {
		e := all[p]
		if len(e) < 17 || (len(e)-17)%stepAddrLen != 0 {
			return nil, fmt.Errorf("stepwise: rank %d: rank %d published %d bytes, not a GID, an MTU and QP addresses", rank, p, len(e))
		}
		var peerGID [16]byte
		copy(peerGID[:], e)
		mtu := verbs.MTU(min(e[16], byte(port.ActiveMTU)))
		found := false
		for a := e[17:]; len(a) > 0; a = a[stepAddrLen:] {
			if int(be.Uint32(a)) != rank {
				continue
			}
			found = true
			if err := stepConnect(r.qps[p], peerGID, mtu, be.Uint32(a[4:]), be.Uint32(a[8:]), psn[p][0]); err != nil {
				return nil, fmt.Errorf("stepwise: rank %d: connect the QP to rank %d: %w", rank, p, err)
			}
			if err := stepConnect(r.ready.qps[p], peerGID, mtu, be.Uint32(a[12:]), be.Uint32(a[16:]), psn[p][1]); err != nil {
				return nil, fmt.Errorf("stepwise: rank %d: connect the ready QP to rank %d: %w", rank, p, err)
			}
			for range readyRecvsAhead {
				w.calls++
				if err := verbs.PostRecv(r.ready.qps[p], r.ready.recv, nil); err != nil {
					return nil, fmt.Errorf("stepwise: rank %d: the ready receives from rank %d: %w", rank, p, err)
				}
			}
		}
		if !found {
			return nil, fmt.Errorf("stepwise: rank %d: rank %d published no QP for it", rank, p)
		}
	}
	return w, nil
}

// newReady gives r a ready QP per neighbor, each with its own receive
// CQ, sending on r's send CQ: the ready messages of a run are signaled
// sends the run's end waits for, as its last data sends are.
func (w *stepWorld) newReady(r *stepRank, pl *plan) error {
	size := len(r.qps)
	rd := &stepReady{qps: make([]*verbs.QP, size), cqs: make([]*verbs.CQ, size), got: make([]bool, size)}
	pd := w.pds[len(w.pds)-1]
	for _, p := range neighbors(r.rank, size) {
		cq, err := w.dev.CreateCQ(2 * readyRecvsAhead)
		if err != nil {
			return err
		}
		w.cqs = append(w.cqs, cq)
		qp, err := w.dev.CreateQP(pd, r.sendCQ, cq)
		if err != nil {
			return err
		}
		w.qps = append(w.qps, qp)
		rd.qps[p], rd.cqs[p] = qp, cq
	}
	from := make([]bool, size)
	for _, o := range pl.ops {
		if o.kind == opRecv && o.peer != r.rank && !from[o.peer] {
			from[o.peer] = true
			rd.to = append(rd.to, rd.qps[o.peer])
		}
	}
	r.sendQPs += len(rd.to)
	rd.send = &stepAlloc[verbs.SendWR](w, 1)[0]
	*rd.send = verbs.SendWR{WRID: stepReadyWRID, Opcode: verbs.WRSend, SendFlags: int32(verbs.SendSignaled)}
	rd.recv = &stepAlloc[verbs.RecvWR](w, 1)[0]
	*rd.recv = verbs.RecvWR{WRID: stepReadyWRID}
	rd.wc = stepAlloc[verbs.WC](w, 1)
	r.ready = rd
	return nil
}

// sendReady tells every peer r receives from that the run's receives
// are posted.
func (w *stepWorld) sendReady(r *stepRank) error {
	for _, qp := range r.ready.to {
		w.calls++
		if err := verbs.PostSend(qp, r.ready.send, nil); err != nil {
			return fmt.Errorf("stepwise: rank %d: ready message: %w", r.rank, err)
		}
	}
	return nil
}

// takeReady is true once peer's ready message of this run is taken: one
// poll of its ready CQ for one completion (the next run's may be there
// too), and a ready receive posted for the one taken.
func (w *stepWorld) takeReady(r *stepRank, peer int) (bool, error) {
	rd := r.ready
	if rd.got[peer] {
		return true, nil
	}
	w.calls++
	w.polls++
	n, err := verbs.PollCQ(rd.cqs[peer], rd.wc[:1])
	if err != nil {
		return false, fmt.Errorf("stepwise: rank %d: %w", r.rank, err)
	}
	if n == 0 {
		w.empty++
		return false, nil
	}
	if c := rd.wc[0]; c.Status != verbs.WCSuccess {
		return false, fmt.Errorf("stepwise: rank %d: ready message from rank %d: %v", r.rank, peer, c.Status)
	}
	w.calls++
	if err := verbs.PostRecv(rd.qps[peer], rd.recv, nil); err != nil {
		return false, fmt.Errorf("stepwise: rank %d: ready receive from rank %d: %w", r.rank, peer, err)
	}
	rd.got[peer] = true
	return true, nil
}

// stepConnect moves qp through INIT, RTR and RTS to the QP destQPN of
// the device whose GID is dgid, over RoCE (a GRH, port 1), with the
// attributes coll's own connections have (connectRC).
func stepConnect(qp *verbs.QP, dgid [16]byte, mtu verbs.MTU, destQPN, rqPSN, sqPSN uint32) error {
	ep := Endpoint{MTU: uint8(mtu), LinkLayer: uint8(verbs.LinkLayerEthernet), GID: dgid}
	return connectRC(qp, 1, ep, ep, QPAddr{QPNum: destQPN, PSN: rqPSN}, sqPSN)
}

// start begins a run of the process's rank: its receives, and what it
// can do before its first wait is not met (one poll there).
func (w *stepWorld) start() error {
	w.reset()
	_, err := w.test()
	return err
}

// test is the host's progress call: the rank advances as far as it can,
// polling once where it waits. True once the run is complete on it.
func (w *stepWorld) test() (bool, error) {
	r := w.ranks[0]
	if !r.done {
		if _, err := w.advance(r); err != nil {
			return false, err
		}
	}
	return r.done, nil
}

// wait tests until the run is complete, pausing between tests as
// Schedule.WaitContext does without Progress (waitPacer), so that both
// sides of a benchmark share the CPU alike; ctx bounds it.
func (w *stepWorld) wait(ctx context.Context) error {
	var pace waitPacer
	for {
		done, err := w.test()
		if done || err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("stepwise: rank %d: %w", w.ranks[0].rank, err)
		}
		pace.pause()
	}
}

// wireStats sums the transport counters of the world's QPs.
func (w *stepWorld) wireStats() (softdev.WireStats, error) {
	var sum softdev.WireStats
	for _, qp := range w.qps {
		s, err := w.dev.QPWire(qp)
		if err != nil {
			return sum, err
		}
		sum.RNRNaksReceived += s.RNRNaksReceived
		sum.Retransmitted += s.Retransmitted
		sum.Timeouts += s.Timeouts
	}
	return sum, nil
}
