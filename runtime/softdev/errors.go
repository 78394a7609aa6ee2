//go:build linux && cgo

package softdev

import (
	"fmt"
	"strings"

	"github.com/verbsexp/verbsexp/generated/verbs"
)

// BlockedWait is a CQE_WAIT at the head of a send queue that the CQ's
// completions do not (yet) satisfy.
type BlockedWait struct {
	QPNum    uint32    // the QP whose send queue the wait blocks
	WRID     uint64    // the wait's wr_id
	CQ       *verbs.CQ // the CQ waited on
	CQHandle uint32    // its handle, for messages
	Needed   uint64    // CQEs the CQ must have produced in total: Base + Count
	Produced uint64    // CQEs it has produced
	Base     uint64    // the CQ's wait base when the wait was posted
	Count    int32     // the wait's cq_count
}

// BlockedSend is a SEND, SEND_WITH_IMM or RDMA_WRITE_WITH_IMM at the head
// of a send queue whose peer has no usable receive WQE (an RNR retry
// that never gives up): none posted, or, on a managed receive queue,
// none released by a RECV_ENABLE.
type BlockedSend struct {
	QPNum        uint32
	WRID         uint64
	DestQPNum    uint32 // the peer without a usable receive WQE
	PeerManaged  bool   // its receive queue is managed
	PeerPosted   uint64 // receives posted there
	PeerReleased uint64 // receives released there (PeerPosted if not managed)
	PeerBase     uint64 // its receive queue's enable base
}

// BlockedGated is the head of a managed send queue that no SEND_ENABLE
// has released: it waits for an enable, and none posted will reach it.
// When the head is itself a CQE_WAIT or an enable, its base and count are
// given too.
type BlockedGated struct {
	QPNum     uint32
	WRID      uint64
	Opcode    string // the head WQE's opcode: SEND, SEND_ENABLE, …
	Position  uint64 // its position in the queue
	Released  uint64 // the queue is released below this position
	QueueBase uint64 // the queue's enable base
	// For a gated CQE_WAIT (CQHandle) or SEND_ENABLE/RECV_ENABLE
	// (Target, a qp_num): the base and count it was posted with and the
	// index they make.
	CQHandle uint32
	Target   uint32
	Base     uint64
	Count    int32
	Upto     uint64
}

// DeadlockError is what Progress returns when posted work cannot run and
// nothing else can: each blocked send queue is listed, in QP creation
// order.
type DeadlockError struct {
	Waits []BlockedWait
	Sends []BlockedSend
	Gated []BlockedGated
}

func (e *DeadlockError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "softdev: deadlock: %d send queue(s) blocked:", len(e.Waits)+len(e.Sends)+len(e.Gated))
	for _, w := range e.Waits {
		fmt.Fprintf(&b, " [QP %#x wr_id %d: CQE_WAIT on CQ %d with base %d + count %d = %d CQEs, the CQ has produced %d]",
			w.QPNum, w.WRID, w.CQHandle, w.Base, w.Count, w.Needed, w.Produced)
	}
	for _, s := range e.Sends {
		if s.PeerManaged {
			fmt.Fprintf(&b, " [QP %#x wr_id %d: no released receive WQE at QP %#x (%d posted, released up to %d, enable base %d)]",
				s.QPNum, s.WRID, s.DestQPNum, s.PeerPosted, s.PeerReleased, s.PeerBase)
		} else {
			fmt.Fprintf(&b, " [QP %#x wr_id %d: no receive WQE at QP %#x (%d posted, all consumed)]",
				s.QPNum, s.WRID, s.DestQPNum, s.PeerPosted)
		}
	}
	for _, g := range e.Gated {
		fmt.Fprintf(&b, " [QP %#x wr_id %d: %s at position %d of a managed send queue released up to %d (enable base %d)",
			g.QPNum, g.WRID, g.Opcode, g.Position, g.Released, g.QueueBase)
		switch {
		case g.Target != 0:
			fmt.Fprintf(&b, "; it would release QP %#x up to base %d + count %d = %d", g.Target, g.Base, g.Count, g.Upto)
		case g.CQHandle != 0:
			fmt.Fprintf(&b, "; it would wait on CQ %d for base %d + count %d = %d CQEs", g.CQHandle, g.Base, g.Count, g.Upto)
		}
		b.WriteString("]")
	}
	return b.String()
}

// LeakError is what Close returns when objects were still open.
type LeakError struct {
	PDs, MRs, CQs, QPs int
	AHs, SRQs          int // address handles and shared receive queues
}

func (e *LeakError) Error() string {
	return fmt.Sprintf("softdev: closed with objects not destroyed: %d PD, %d MR, %d CQ, %d QP, %d AH, %d SRQ",
		e.PDs, e.MRs, e.CQs, e.QPs, e.AHs, e.SRQs)
}
