//go:build linux && cgo

package coll

import (
	"fmt"
	"math/rand/v2"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
)

// Ready messages. A send that reaches a peer before the peer has posted
// the run's receives is answered with an RNR NAK, and the sender's HCA
// tries again only after the peer's min_rnr_timer (12: 0.64 ms here):
// a rank that starts a collective a few microseconds late would cost its
// neighbors a timer, every run. So a rank sends a run's data to a peer
// on another device only once the peer has said its receives are
// posted: each run's task list posts the receives first, then a
// zero-length SEND on the ready QP to every peer it receives from (a
// plain RC QP per neighbor: it goes at once, behind the receives), and
// the manager waits for one CQE on the ready CQ of a peer before its
// first SEND_ENABLE to that peer. A late peer then costs what it is
// late, plus one message.
//
// The ready messages land in receives posted one run ahead: two at
// connection, and one more in each run that waits for one (the ready
// receive count never runs out: a peer sends its next ready only in a
// run that needs this rank's data, which this rank posts, with the next
// ready receive, before its data can go). A ready CQ may therefore hold
// the next run's CQE when this one's is drained: the drain takes exactly
// one per run from it (coll_test's bounded CQs).
//
// Ranks on one device run by Options.Progress (softdev in one process)
// skip all of it: that device's loopback delivers to a receive posted
// later in the same step, and never NAKs.
const readyRecvsAhead = 2

// setUpReady creates the ready QPs' shared send CQ, a receive CQ per
// neighbor (the manager waits on it) and the QPs, and lists them in ep.
func (c *Comm) setUpReady(ep *Endpoint) error {
	var err error
	if c.readySendCQ, err = c.createCQ(max(c.caps.depth, 2*len(ep.Peers)), true); err != nil {
		return err
	}
	for _, q := range ep.Peers {
		p := c.peers[q.Rank]
		p.readyPSN = rand.Uint32() & 0xffffff
		if p.readyCQ, err = c.createCQ(2*readyRecvsAhead, true); err != nil {
			return err
		}
		if p.ready, err = c.createQP(c.readySendCQ, p.readyCQ, 2*readyRecvsAhead, 0); err != nil {
			return err
		}
		ep.Ready = append(ep.Ready, QPAddr{Rank: q.Rank, QPNum: p.ready.QPNum, PSN: p.readyPSN})
	}
	return nil
}

// readyOff turns ready messages off (tests: what they save).
var readyOff bool

// usesReady says whether ranks with endpoints a and b trade ready
// messages; both sides decide it from the same two endpoints.
func usesReady(a, b Endpoint) bool {
	if readyOff {
		return false
	}
	sameDevice := a.NodeGUID == b.NodeGUID && a.GID == b.GID
	return !(sameDevice && a.Progressed && b.Progressed)
}

// postReadyRecvs posts the ready receives a connection starts with, on
// p's ready QP once it is ready to receive.
func (c *Comm) postReadyRecvs(p *peer) error {
	wr, err := cmem[verbs.RecvWR]()
	if err != nil {
		return err
	}
	defer free(unsafe.Pointer(wr))
	bad, err := cmem[*verbs.RecvWR]()
	if err != nil {
		return err
	}
	defer free(unsafe.Pointer(bad))
	for range readyRecvsAhead {
		*wr = verbs.RecvWR{WRID: wrReady}
		if err := verbs.PostRecv(p.ready, wr, bad); err != nil {
			return fmt.Errorf("post the ready receives for rank %d: %w", p.rank, err)
		}
	}
	return nil
}
