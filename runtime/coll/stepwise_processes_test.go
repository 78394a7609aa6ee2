//go:build linux && cgo

package coll

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"time"
	"unsafe"

	verbs "github.com/verbsexp/verbsexp/generated"
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

// stepAddrLen is one neighbor's entry in a rank's published addresses:
// the neighbor's rank, and the number and first PSN of this rank's QP
// to it.
const stepAddrLen = 12

// newStepProcess builds rank's part of a stepwise world of size ranks on
// dev (this process's device; the caller closes it, after the world)
// and connects each of its QPs to the neighbor's QP for this rank:
// one exchange round of every rank's GID, active MTU and QP addresses,
// then INIT, RTR and RTS with the attributes Comm's connect gives its
// own QPs (comm.go: the smaller active MTU, min_rnr_timer 12, timeout
// 14, retry_cnt 7, rnr_retry 7, a random first PSN each way), so both
// sides of a benchmark meet the same transport.
func newStepProcess(dev *softdev.Device, rank, size int, planOf stepPlan, exchange Exchange) (w *stepWorld, err error) {
	w = &stepWorld{dev: dev}
	defer func() {
		if err != nil {
			err = errors.Join(err, w.close())
			w = nil
		}
	}()
	pl, need, scratch := planOf(rank, size)
	r, err := w.newRank(rank, size, pl, need, scratch)
	if err != nil {
		return nil, fmt.Errorf("stepwise: rank %d: %w", rank, err)
	}
	w.ranks = []*stepRank{r}
	port, err := dev.QueryPort(1)
	if err != nil {
		return nil, fmt.Errorf("stepwise: rank %d: %w", rank, err)
	}
	gid := dev.GID()
	nbrs := neighbors(rank, size)
	psn := make([]uint32, size)
	mine := make([]byte, 0, 17+stepAddrLen*len(nbrs))
	mine = append(append(mine, gid[:]...), byte(port.ActiveMTU))
	for _, p := range nbrs {
		psn[p] = rand.Uint32() & 0xffffff
		mine = binary.BigEndian.AppendUint32(mine, uint32(p))
		mine = binary.BigEndian.AppendUint32(mine, r.qps[p].QPNum)
		mine = binary.BigEndian.AppendUint32(mine, psn[p])
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
			if int(binary.BigEndian.Uint32(a)) != rank {
				continue
			}
			found = true
			if err := stepConnect(r.qps[p], peerGID, mtu, binary.BigEndian.Uint32(a[4:]), binary.BigEndian.Uint32(a[8:]), psn[p]); err != nil {
				return nil, fmt.Errorf("stepwise: rank %d: connect the QP to rank %d: %w", rank, p, err)
			}
		}
		if !found {
			return nil, fmt.Errorf("stepwise: rank %d: rank %d published no QP for it", rank, p)
		}
	}
	return w, nil
}

// stepConnect moves qp through INIT, RTR and RTS to the QP destQPN of
// the device whose GID is dgid, over RoCE (a GRH, port 1).
func stepConnect(qp *verbs.QP, dgid [16]byte, mtu verbs.MTU, destQPN, rqPSN, sqPSN uint32) error {
	attr := softdev.Calloc[verbs.ExpQPAttr]()
	defer softdev.Free(unsafe.Pointer(attr))
	*attr = verbs.ExpQPAttr{QPState: verbs.QpsInit, PortNum: 1,
		QPAccessFlags: int32(verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead)}
	if err := verbs.ExpModifyQP(qp, attr, uint64(verbs.ExpQPState|verbs.ExpQPPkeyIndex|verbs.ExpQPPort|verbs.ExpQPAccessFlags)); err != nil {
		return fmt.Errorf("to INIT: %w", err)
	}
	*attr = verbs.ExpQPAttr{QPState: verbs.QpsRtr, PathMTU: mtu, DestQPNum: destQPN, RQPSN: rqPSN, MaxDestRdAtomic: 1, MinRnrTimer: 12}
	attr.AHAttr.PortNum, attr.AHAttr.IsGlobal, attr.AHAttr.GRH.HopLimit = 1, 1, 64
	*attr.AHAttr.GRH.Dgid.Raw() = dgid
	if err := verbs.ExpModifyQP(qp, attr, uint64(verbs.ExpQPState|verbs.ExpQPAv|verbs.ExpQPPathMTU|verbs.ExpQPDestQPN|
		verbs.ExpQPRQPSN|verbs.ExpQPMaxDestRdAtomic|verbs.ExpQPMinRnrTimer)); err != nil {
		return fmt.Errorf("to RTR: %w", err)
	}
	*attr = verbs.ExpQPAttr{QPState: verbs.QpsRts, SQPSN: sqPSN, Timeout: 14, RetryCnt: 7, RnrRetry: 7, MaxRdAtomic: 1}
	if err := verbs.ExpModifyQP(qp, attr, uint64(verbs.ExpQPState|verbs.ExpQPTimeout|verbs.ExpQPRetryCnt|verbs.ExpQPRnrRetry|
		verbs.ExpQPSQPSN|verbs.ExpQPMaxQPRdAtomic)); err != nil {
		return fmt.Errorf("to RTS: %w", err)
	}
	return nil
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

// wait tests until the run is complete, polling as Schedule.Wait does
// without Progress (waitSpins tests back to back, then naps from
// waitNapMin doubling to waitNapMax), so that both sides of a benchmark
// share the CPU alike; ctx bounds it.
func (w *stepWorld) wait(ctx context.Context) error {
	var nap time.Duration
	for polls := 0; ; polls++ {
		done, err := w.test()
		if done || err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("stepwise: rank %d: %w", w.ranks[0].rank, err)
		}
		if polls < waitSpins {
			runtime.Gosched()
			continue
		}
		nap = min(max(2*nap, waitNapMin), waitNapMax)
		time.Sleep(nap)
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
