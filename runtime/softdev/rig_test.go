//go:build linux && cgo

package softdev

import (
	"testing"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/device"
)

// rig is the shape of setup the vendor's CORE-Direct tests use, built on
// the fixture: a cross-channel manager QP (mqp) connected to itself, with
// its own small CQ (mcq) and no receive queue; a worker QP (qp) connected
// to itself with the flags under test, separate send and receive CQs,
// and receives posted before it is connected; every message is one page
// of the fixture's buffer, sent from and received into the same page.
type rig struct {
	*fixture
	t        *testing.T
	mqp, qp  *verbs.QP
	mcq      *verbs.CQ
	scq, rcq *verbs.CQ
}

// rigConfig sizes a rig; zero values take the vendor's defaults (31-deep
// worker queues and CQs, a 16-entry manager CQ, every receive slot
// posted).
type rigConfig struct {
	worker           []device.QPOption // creation flags of the worker
	sendWR, recvWR   int
	scq, rcq         int
	scqOpts, rcqOpts []device.CQOption
}

const (
	page      = 4096    // bytes per message
	recvWRID  = 0x10000 // wr_id of every receive the rig posts
	sendWRID  = 0x20000 // OR-ed into the wr_id of the rig's sends
	mgrSendWR = 64
)

func newRig(t *testing.T, c rigConfig) *rig {
	t.Helper()
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.sendWR, 31)
	def(&c.recvWR, 31)
	def(&c.scq, 31)
	def(&c.rcq, 31)
	r := &rig{fixture: newFixture(t), t: t}
	r.mcq = r.cq(16)
	r.mqp = r.fixture.qp(r.mcq, r.mcq, device.CrossChannel(), device.QPCaps(device.Caps{SendWR: mgrSendWR, SendSGE: 16, RecvSGE: 16}))
	if err := device.ConnectPair(r.mqp, r.mqp); err != nil {
		t.Fatal(err)
	}
	r.scq = r.cq(c.scq, c.scqOpts...)
	r.rcq = r.cq(c.rcq, c.rcqOpts...)
	caps := device.QPCaps(device.Caps{SendWR: c.sendWR, RecvWR: c.recvWR, SendSGE: 16, RecvSGE: 16})
	r.qp = r.fixture.qp(r.scq, r.rcq, append(c.worker, caps)...)
	r.postRecvs(c.recvWR) // in RESET, before the connection exists
	if err := device.ConnectPair(r.qp, r.qp); err != nil {
		t.Fatal(err)
	}
	return r
}

// postRecvs posts n page-sized receives to the worker.
func (r *rig) postRecvs(n int) {
	r.t.Helper()
	for range n {
		r.postRecv(r.qp, r.recv(recvWRID, r.sges(r.mr.Lkey, [2]int{0, page}), 1))
	}
}

// sendWR is a signaled page-sized SEND, the worker's usual traffic.
func (r *rig) sendWR(id uint64) *verbs.ExpSendWR {
	return r.send(id, verbs.ExpWRSend, verbs.ExpSendSignaled, r.sges(r.mr.Lkey, [2]int{0, page}), 1)
}

// post posts WRs to qp and returns the verb's error and bad_wr.
func (r *rig) post(qp *verbs.QP, ws ...*verbs.ExpSendWR) (*verbs.ExpSendWR, error) {
	bad := alloc[*verbs.ExpSendWR](r.fixture)
	err := verbs.ExpPostSend(qp, link(ws...), bad)
	return *bad, err
}

// mustPost posts and fails the test on an error.
func (r *rig) mustPost(qp *verbs.QP, ws ...*verbs.ExpSendWR) {
	r.t.Helper()
	if bad, err := r.post(qp, ws...); err != nil {
		r.t.Fatalf("post to QP %#x: %v (bad wr_id %#x)", qp.QPNum, err, bad.WRID)
	}
}

// sendEn and recvEn build enables of the worker; waitOn a CQE_WAIT.
func (r *rig) sendEn(id uint64, count int, flags verbs.ExpSendFlags) *verbs.ExpSendWR {
	return r.enable(id, verbs.ExpWRSendEnable, r.qp, count, flags)
}

func (r *rig) recvEn(id uint64, count int, flags verbs.ExpSendFlags) *verbs.ExpSendWR {
	return r.enable(id, verbs.ExpWRRecvEnable, r.qp, count, flags)
}

// drained is what the three CQs held.
type drained struct{ s, r, m []wcSum }

func (r *rig) drain() drained {
	return drained{sum(r.poll(r.scq)), sum(r.poll(r.rcq)), sum(r.poll(r.mcq))}
}

// expect checks the number of completions on each CQ and that all
// succeeded.
func (d drained) expect(t *testing.T, s, rc, m int) {
	t.Helper()
	if len(d.s) != s || len(d.r) != rc || len(d.m) != m {
		t.Fatalf("completions: send CQ %d, receive CQ %d, manager CQ %d; want %d, %d, %d\n%+v\n%+v\n%+v",
			len(d.s), len(d.r), len(d.m), s, rc, m, d.s, d.r, d.m)
	}
	for _, l := range [][]wcSum{d.s, d.r, d.m} {
		for _, c := range l {
			if c.Status != verbs.WCSuccess {
				t.Fatalf("completion %+v did not succeed", c)
			}
		}
	}
}

// ids returns the wr_ids of completions, in order.
func ids(cs []wcSum) []uint64 {
	out := make([]uint64, len(cs))
	for i, c := range cs {
		out[i] = c.ID
	}
	return out
}
