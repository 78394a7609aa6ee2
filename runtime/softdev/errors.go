//go:build linux && cgo

package softdev

import (
	"fmt"
	"strings"

	verbs "github.com/verbsexp/verbsexp/generated"
)

// BlockedWait is a CQE_WAIT at the head of a send queue that the CQ's
// completions do not (yet) satisfy.
type BlockedWait struct {
	QPNum    uint32    // the QP whose send queue the wait blocks
	WRID     uint64    // the wait's wr_id
	CQ       *verbs.CQ // the CQ waited on
	CQHandle uint32    // its handle, for messages
	Needed   uint64    // completions the CQ must have produced in total
	Produced uint64    // completions it has produced
}

// BlockedSend is a SEND, SEND_WITH_IMM or RDMA_WRITE_WITH_IMM at the head
// of a send queue whose peer has no enabled receive WQE (an RNR retry
// that never gives up).
type BlockedSend struct {
	QPNum     uint32
	WRID      uint64
	DestQPNum uint32 // the peer without a receive WQE
}

// DeadlockError is what Progress returns when posted work cannot run and
// nothing else can: each blocked send queue is listed, in QP creation
// order.
type DeadlockError struct {
	Waits []BlockedWait
	Sends []BlockedSend
}

func (e *DeadlockError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "softdev: deadlock: %d send queue(s) blocked:", len(e.Waits)+len(e.Sends))
	for _, w := range e.Waits {
		fmt.Fprintf(&b, " [QP %#x wr_id %d waits on CQ %d: needs %d completions, has %d]",
			w.QPNum, w.WRID, w.CQHandle, w.Needed, w.Produced)
	}
	for _, s := range e.Sends {
		fmt.Fprintf(&b, " [QP %#x wr_id %d: no receive WQE at QP %#x]", s.QPNum, s.WRID, s.DestQPNum)
	}
	return b.String()
}

// LeakError is what Close returns when objects were still open.
type LeakError struct {
	PDs, MRs, CQs, QPs int
}

func (e *LeakError) Error() string {
	return fmt.Sprintf("softdev: closed with objects not destroyed: %d PD, %d MR, %d CQ, %d QP",
		e.PDs, e.MRs, e.CQs, e.QPs)
}
