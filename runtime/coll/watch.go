//go:build linux && cgo

package coll

import (
	"fmt"
	"math/rand/v2"
	"time"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
)

// Watching the neighbors. RC has no keepalive: a rank whose part of a
// run only waits for a neighbor's messages has nothing outstanding that
// could time out, so on an HCA it would wait for ever for a neighbor
// whose process died. While a run takes longer than probeAfter, Test
// therefore probes every neighbor with a zero-length RDMA WRITE on a
// plain RC QP of its own (the collectives' QPs are managed: a probe
// there would wait for an enable). A live neighbor's device acknowledges
// it (its host's CPU plays no part); a dead one's does not, and after
// the QP's local ACK timeout and retries (timeout 14, retry_cnt 7: about
// 0.54 s) the probe ends with IBV_WC_RETRY_EXC_ERR and the run fails with
// a *PeerLostError naming the neighbor.
//
// A rank whose run failed tells its neighbors which rank was lost (a
// SEND with the rank as immediate data on each watch QP: their Test
// fails at once with a *PeerLostError naming it and the rank that told,
// and tells its own neighbors), then moves its watch QPs to the error
// state, where they answer nothing: a neighbor that missed the notice
// fails at its next probe. So the loss of one rank ends the run on
// every rank, within about probeAfter plus the QP's retries.
const (
	watchAfter = 10 * time.Millisecond  // a run this old takes its neighbors' notices
	probeAfter = 250 * time.Millisecond // a run this old probes its neighbors
	probeEvery = 250 * time.Millisecond // between a probe round's answers and the next
)

// watcher is a communicator's probes: one WR per neighbor and the
// completions, in C memory, made when first needed.
type watcher struct {
	wrs         []verbs.ExpSendWR // by rank: the probe or the notice to it
	recv        []verbs.RecvWR    // by rank: the receive of its notice
	bad         **verbs.ExpSendWR
	rbad        **verbs.RecvWR
	wc          []verbs.ExpWC
	outstanding int       // probes and notices not yet completed
	start       time.Time // when the run in flight was posted; zero: none
	next        time.Time // when the next probe round may go
	told        bool      // the neighbors were told of this rank's failure
}

// setUpWatch creates the watch CQ and one watch QP per neighbor, and
// lists them in ep.
func (c *Comm) setUpWatch(ep *Endpoint) error {
	var err error
	n := len(ep.Peers)
	if c.watchCQ, err = c.createCQ(2*n+1, false); err != nil {
		return err
	}
	if err := c.watcher.alloc(c.size); err != nil {
		return err
	}
	for _, q := range ep.Peers {
		p := c.peers[q.Rank]
		p.watchPSN = rand.Uint32() & 0xffffff
		if p.watch, err = c.createQP(c.watchCQ, c.watchCQ, 4, 0); err != nil {
			return err
		}
		// The receive a neighbor's notice lands in (posted in RESET, as
		// the verbs allow).
		rwr := &c.watcher.recv[q.Rank]
		*rwr = verbs.RecvWR{WRID: uint64(q.Rank)}
		if err := verbs.PostRecv(p.watch, rwr, c.watcher.rbad); err != nil {
			return fmt.Errorf("post the watch receive: %w", err)
		}
		ep.Watch = append(ep.Watch, QPAddr{Rank: q.Rank, QPNum: p.watch.QPNum, PSN: p.watchPSN})
	}
	return nil
}

// alloc makes the watcher's C memory: a probe WR, a receive and a
// completion per rank.
func (w *watcher) alloc(size int) error {
	var err error
	if w.wrs, err = cmemSlice[verbs.ExpSendWR](size); err != nil {
		return err
	}
	if w.recv, err = cmemSlice[verbs.RecvWR](size); err != nil {
		return err
	}
	if w.bad, err = cmem[*verbs.ExpSendWR](); err != nil {
		return err
	}
	if w.rbad, err = cmem[*verbs.RecvWR](); err != nil {
		return err
	}
	w.wc, err = cmemSlice[verbs.ExpWC](2 * size)
	return err
}

// started is called by Post: the run's watch starts from now.
func (w *watcher) started() {
	w.start = time.Now()
	w.next = w.start.Add(probeAfter)
}

// check watches the neighbors while the run in flight is old enough:
// from watchAfter on it takes their notices and the answers to probes
// (one poll of the watch CQ per Test; younger runs cost nothing), from
// probeAfter on it probes them, a round at a time. nil while every
// neighbor answers. c.mu held.
func (c *Comm) check(s *schedule) error {
	w := &c.watcher
	if c.opts.Progress != nil || w.start.IsZero() {
		return nil // a software device in one process reports a stall itself
	}
	now := time.Now()
	if now.Sub(w.start) < watchAfter {
		return nil
	}
	if w.outstanding == 0 && now.After(w.next) {
		if err := c.probe(); err != nil {
			return err
		}
	}
	n, err := verbs.ExpPollCQ(c.watchCQ, w.wc)
	if err != nil {
		return fmt.Errorf("coll: rank %d: %s: poll the watch CQ: %w", c.rank, s.name, err)
	}
	round := w.outstanding > 0
	var lost *PeerLostError
	for _, wc := range w.wc[:n] {
		switch {
		case wc.ExpOpcode == verbs.ExpWCRecv && wc.Status == verbs.WCSuccess:
			// A neighbor's notice: the rank in its immediate was lost.
			if lost == nil {
				lost = &PeerLostError{Rank: c.rank, Schedule: s.name, Peer: int(wc.ImmData), Via: int(wc.WRID)}
			}
		case wc.ExpOpcode == verbs.ExpWCRecv:
			// flushed: this rank's own watch QP went to the error state
		default:
			w.outstanding--
			if wc.Status != verbs.WCSuccess && lost == nil {
				lost = &PeerLostError{Rank: c.rank, Schedule: s.name, Peer: int(wc.WRID), Via: -1, Status: wc.Status}
			}
		}
	}
	if lost != nil {
		return lost
	}
	if round && w.outstanding == 0 { // every neighbor answered: the next round later
		w.next = now.Add(probeEvery)
	}
	return nil
}

// probe posts a zero-length RDMA WRITE, signaled, on every watch QP.
func (c *Comm) probe() error {
	w := &c.watcher
	for _, p := range c.peers {
		if p == nil {
			continue
		}
		wr := &w.wrs[p.rank]
		*wr = verbs.ExpSendWR{WRID: uint64(p.rank), ExpOpcode: verbs.ExpWRRDMAWrite,
			ExpSendFlags: uint64(verbs.ExpSendSignaled)}
		if err := verbs.ExpPostSend(p.watch, wr, w.bad); err != nil {
			return fmt.Errorf("coll: rank %d: probe rank %d: %w", c.rank, p.rank, err)
		}
		w.outstanding++
	}
	return nil
}

// noticeWait bounds how long a failing rank waits for its notices to be
// acknowledged before its watch QPs go to the error state.
const noticeWait = 100 * time.Millisecond

// stopWatch ends the probes of a run that is over. When the run failed
// because rank lost was lost (this rank's own number when it does not
// know), the neighbors are told, once, and the watch QPs go to the error
// state. c.mu held.
func (c *Comm) stopWatch(failed bool, lost int) {
	w := &c.watcher
	w.start = time.Time{}
	if !failed || w.told || w.wrs == nil {
		return
	}
	w.told = true
	for _, p := range c.peers {
		if p == nil || p.watch == nil || p.rank == lost {
			continue
		}
		wr := &w.wrs[p.rank]
		*wr = verbs.ExpSendWR{WRID: uint64(p.rank), ExpOpcode: verbs.ExpWRSendWithImm, ExpSendFlags: uint64(verbs.ExpSendSignaled)}
		wr.Ex.SetImmData(uint32(lost))
		if verbs.ExpPostSend(p.watch, wr, w.bad) == nil {
			w.outstanding++
		}
	}
	for end := time.Now().Add(noticeWait); w.outstanding > 0 && time.Now().Before(end); {
		n, err := verbs.ExpPollCQ(c.watchCQ, w.wc)
		if err != nil {
			break
		}
		for _, wc := range w.wc[:n] {
			if wc.ExpOpcode != verbs.ExpWCRecv {
				w.outstanding--
			}
		}
		if n == 0 {
			time.Sleep(50 * time.Microsecond)
		}
	}
	attr, err := cmem[verbs.ExpQPAttr]()
	if err != nil {
		return
	}
	defer free(unsafe.Pointer(attr))
	for _, p := range c.peers {
		if p != nil && p.watch != nil {
			*attr = verbs.ExpQPAttr{QPState: verbs.QpsErr}
			verbs.ExpModifyQP(p.watch, attr, uint64(verbs.ExpQPState))
		}
	}
}

func (w *watcher) free() {
	for _, p := range []unsafe.Pointer{unsafe.Pointer(unsafe.SliceData(w.wrs)), unsafe.Pointer(unsafe.SliceData(w.recv)),
		unsafe.Pointer(w.bad), unsafe.Pointer(w.rbad), unsafe.Pointer(unsafe.SliceData(w.wc))} {
		if p != nil {
			free(p)
		}
	}
	*w = watcher{}
}

// PeerLostError is a run that ended because a rank was lost: a probe of
// the neighbor Peer, or a send of the run itself to it (Run says which),
// completed with Status (IBV_WC_RETRY_EXC_ERR: no answer within the QP's
// timeout and retries: its process died, its host or link is down, or
// its own run failed), or the neighbor Via told this rank that Peer was
// lost.
type PeerLostError struct {
	Rank     int // this rank
	Schedule string
	Peer     int // the rank lost
	Via      int // the neighbor that told; -1: this rank found it itself
	Status   verbs.WCStatus
	Run      *RunError // the run's own completion that found it, if one did (not a probe)
}

func (e *PeerLostError) Error() string {
	switch {
	case e.Via >= 0:
		return fmt.Sprintf("coll: rank %d: %s: rank %d is lost (rank %d's run failed on it and told this one)", e.Rank, e.Schedule, e.Peer, e.Via)
	case e.Run != nil:
		return fmt.Sprintf("coll: rank %d: %s: rank %d is lost: %s ended with %v (its process died, its host is unreachable, or its own run failed)",
			e.Rank, e.Schedule, e.Peer, e.Run.QP, e.Status)
	}
	return fmt.Sprintf("coll: rank %d: %s: rank %d is lost: a probe of it ended with %v (its process died, its host is unreachable, or its own run failed)",
		e.Rank, e.Schedule, e.Peer, e.Status)
}

// Unwrap gives the run's own error completion, when one found the loss.
func (e *PeerLostError) Unwrap() error {
	if e.Run == nil {
		return nil
	}
	return e.Run
}
