//go:build linux && cgo

package semantics

import (
	"encoding/binary"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/generated/verbs"
)

// The fixture of the vendor's CORE-Direct gtests (libibverbs-1.2.1mlnx1,
// tests/api/gtest_cd.h) on the device under test: the device query every
// test starts with, the manager (mqp, mcq) of SetUp, the worker
// __init_test makes, all through the verbs the vendor's C calls
// (ibv_alloc_pd, ibv_reg_mr, ibv_create_cq, ibv_exp_modify_cq,
// ibv_exp_create_qp, ibv_modify_qp, ibv_post_recv, ibv_exp_post_send,
// ibv_exp_post_task, ibv_poll_cq with struct ibv_wc). This is
// runtime/softdev's vendor_fixture_test.go with its fixed polling passes
// replaced by the vendor's own form: poll until what must come came, for
// up to 10 s, then watch a quiet window for what must not.

const (
	vdPage          = 4096    // ctx->size: one page, the size of every message
	vdDepth         = 0x1F    // __init_test's default queue and CQ depths
	vdMgrCQE        = 0x10    // the manager's CQ
	vdMgrSendWR     = 0x40    // the manager's send queue
	vdSGEs          = 16      // max_send_sge and max_recv_sge of both QPs
	vdRecvWRID      = 0x10000 // the type bits of the receives' wr_id
	vdSendWRID      = 0x20000 // the type bits OR-ed into the sends' wr_id
	vdTypeBits      = ^uint64(0xFFFF)
	vdSendPostCount = 10
)

// vdInit are __init_test's arguments.
type vdInit struct {
	qpFlags    verbs.ExpQPCreateFlags
	qpTx, qpRx int
	cqTxFlags  verbs.ExpCQCapFlags
	cqTx       int
	cqRxFlags  verbs.ExpCQCapFlags
	cqRx       int
}

func vdWith(flags verbs.ExpQPCreateFlags) vdInit {
	return vdInit{qpFlags: flags, qpTx: vdDepth, qpRx: vdDepth, cqTx: vdDepth, cqRx: vdDepth}
}

// vd is the vendor's test_context on the device under test.
type vd struct {
	t       *testing.T
	d       *dut
	devAttr *verbs.ExpDeviceAttr
	pd      *verbs.PD
	net     []byte // net_buf: one page, registered
	mr      *verbs.MR
	mcq     *verbs.CQ
	mqp     *verbs.QP

	scq, rcq               *verbs.CQ
	qp                     *verbs.QP
	qpTx, qpRx, cqTx, cqRx int
	wc                     []verbs.WC
	peer                   struct {
		addr  addr
		qpn   uint32
		psn   uint32
		vaddr uint64
		rkey  uint32
	}

	probeQP *verbs.QP // see produced
	probeCQ *verbs.CQ
	probeID uint64
}

// newVD is verbs_test::SetUp and verbs_test_cd::SetUp: the device query
// (comp_mask = IBV_EXP_DEVICE_ATTR_RESERVED - 1), the PD, the registered
// page, and the manager: a cross-channel QP with a 16-entry CQ for both
// queues, 64 send WRs and no receive queue, connected to itself.
func newVD(n *node) *vd {
	t, d := n.t, n.d
	t.Helper()
	v := &vd{t: t, d: d}
	v.devAttr = cAlloc[verbs.ExpDeviceAttr](d)
	v.devAttr.CompMask = uint32(verbs.ExpDeviceAttrReserved - 1)
	if err := verbs.ExpQueryDevice(d.ctx, v.devAttr); err != nil {
		t.Fatalf("ibv_exp_query_device: %v", err)
	}
	if v.devAttr.ExpDeviceCapFlags&uint64(verbs.ExpDeviceCrossChannel) == 0 {
		t.Errorf("the device does not report IBV_EXP_DEVICE_CROSS_CHANNEL: %#x", v.devAttr.ExpDeviceCapFlags)
	}
	v.qpTx, v.qpRx = 20, 100
	v.cqTx, v.cqRx = v.qpTx, v.qpRx
	v.pd = d.allocPD()
	v.net = d.buffer(vdPage)
	v.mr = d.regMR(v.pd, v.net, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	v.mcq = d.cq(vdMgrCQE)
	v.mqp = d.createQP(qpSpec{pd: v.pd, scq: v.mcq, rcq: v.mcq, noDefaults: true,
		caps: verbs.QPCap{MaxSendWR: vdMgrSendWR, MaxSendSGE: vdSGEs, MaxRecvSGE: vdSGEs}, flags: verbs.ExpQPCreateCrossChannel})
	// Access flags 0, itself as the destination, PSNs 0, one read either way.
	d.connect(v.mqp, d.self(), v.mqp.QPNum, link{mtu: verbs.MTU1024, timeout: 14, retry: 7, rnr: 7, minRNR: 12, rdAtomic: 1})
	return v
}

// initTest is __init_test: the worker's CQs, the worker with the flags
// under test, every receive slot posted while it is still in RESET, then
// INIT (remote read and write), RTR to itself and RTS.
func (v *vd) initTest(c vdInit) {
	v.t.Helper()
	d := v.d
	v.qpTx, v.qpRx, v.cqTx, v.cqRx = c.qpTx, c.qpRx, c.cqTx, c.cqRx
	v.scq = d.createCQ(v.cqTx, nil, nil, c.cqTxFlags)
	v.rcq = d.createCQ(v.cqRx, nil, nil, c.cqRxFlags)
	v.wc = cAllocN[verbs.WC](d, v.cqTx+v.cqRx)
	v.qp = d.createQP(qpSpec{pd: v.pd, scq: v.scq, rcq: v.rcq, flags: c.qpFlags,
		caps: verbs.QPCap{MaxSendWR: uint32(v.qpTx), MaxRecvWR: uint32(v.qpRx), MaxSendSGE: vdSGEs, MaxRecvSGE: vdSGEs}})
	v.peer.addr = d.self()
	v.peer.qpn = v.qp.QPNum
	v.peer.psn = 0x5a5a5 // the vendor draws one at random
	v.peer.vaddr = v.addr(vdPage)
	v.peer.rkey = v.mr.Rkey
	if n := v.postRead(v.qpRx); n != v.qpRx {
		v.t.Fatalf("posted %d of %d receives before INIT", n, v.qpRx)
	}
	d.connect(v.qp, v.peer.addr, v.peer.qpn, link{sqPSN: v.peer.psn, rqPSN: v.peer.psn, mtu: verbs.MTU1024,
		timeout: 14, retry: 7, rnr: 7, minRNR: 12, rdAtomic: 4, access: verbs.AccessRemoteRead | verbs.AccessRemoteWrite})
}

// addr is the address of net_buf[off].
func (v *vd) addr(off int) uint64 { return uint64(uintptrOf(v.net)) + uint64(off) }

// vdWrite is what __post_write is asked to post.
type vdWrite int

const (
	vdSend vdWrite = iota
	vdRDMAWrite
	vdRDMARead
	vdSendEnable // of the worker itself, every WQE posted (count 0), WAIT_EN_LAST
	vdRecvEnable // likewise
	vdCQEWait    // for one CQE of the worker's send CQ, WAIT_EN_LAST
	vdCalcSend   // a SEND with calc ADD, INT, 64-bit
)

// postWrite is __post_write: one signaled WR on the worker, its single
// SGE the whole page (whose first 8 bytes get the wr_id, big-endian).
func (v *vd) postWrite(wrid uint64, what vdWrite) error {
	d := v.d
	binary.BigEndian.PutUint64(v.net[:8], wrid)
	sge := cAlloc[verbs.SGE](d)
	*sge = verbs.SGE{Addr: v.addr(0), Length: vdPage, Lkey: v.mr.Lkey}
	wr := cAlloc[verbs.ExpSendWR](d)
	wr.WRID, wr.SGList, wr.NumSGE = wrid, sge, 1
	wr.ExpSendFlags = uint64(verbs.ExpSendSignaled)
	switch what {
	case vdSend:
		wr.ExpOpcode = verbs.ExpWRSend
	case vdRDMAWrite, vdRDMARead:
		wr.ExpOpcode = verbs.ExpWRRDMAWrite
		if what == vdRDMARead {
			wr.ExpOpcode = verbs.ExpWRRDMARead
		}
		wr.WR.RDMA().RemoteAddr, wr.WR.RDMA().Rkey = v.peer.vaddr, v.peer.rkey
	case vdSendEnable, vdRecvEnable:
		wr.ExpOpcode = verbs.ExpWRSendEnable
		if what == vdRecvEnable {
			wr.ExpOpcode = verbs.ExpWRRecvEnable
		}
		wr.Task.WQEEnable().QP, wr.Task.WQEEnable().WQECount = v.qp, 0
		wr.ExpSendFlags |= uint64(verbs.ExpSendWaitEnLast)
	case vdCQEWait:
		wr.ExpOpcode = verbs.ExpWRCQEWait
		wr.Task.CQEWait().CQ, wr.Task.CQEWait().CQCount = v.scq, 1
		wr.ExpSendFlags |= uint64(verbs.ExpSendWaitEnLast)
	case vdCalcSend:
		wr.ExpOpcode = verbs.ExpWRSend
		wr.ExpSendFlags |= uint64(verbs.ExpSendWithCalc)
		c := wr.Op.Calc()
		c.CalcOp, c.DataType, c.DataSize = verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeInt, verbs.ExpCalcDataSize64Bit
	}
	return verbs.ExpPostSend(v.qp, wr, cAlloc[*verbs.ExpSendWR](d))
}

func (v *vd) mustWrite(wrid uint64, what vdWrite) {
	v.t.Helper()
	if err := v.postWrite(wrid, what); err != nil {
		v.t.Fatalf("__post_write(wr_id %#x, %d): %v", wrid, what, err)
	}
}

// postRead is __post_read: count page-sized receives on the worker, one
// call each; it returns how many were posted.
func (v *vd) postRead(count int) int {
	v.t.Helper()
	sge := cAlloc[verbs.SGE](v.d)
	*sge = verbs.SGE{Addr: v.addr(0), Length: vdPage, Lkey: v.mr.Lkey}
	wr := cAlloc[verbs.RecvWR](v.d)
	wr.WRID, wr.SGList, wr.NumSGE = vdRecvWRID, sge, 1
	bad := cAlloc[*verbs.RecvWR](v.d)
	for i := range count {
		if err := verbs.PostRecv(v.qp, wr, bad); err != nil {
			v.t.Errorf("ibv_post_recv %d of %d: %v", i+1, count, err)
			return i
		}
	}
	return count
}

// poll is one ibv_poll_cq for at most n completions; the result is a copy.
func (v *vd) poll(cq *verbs.CQ, n int) []verbs.WC {
	v.t.Helper()
	got, err := verbs.PollCQ(cq, v.wc[:n])
	if err != nil {
		v.t.Fatalf("ibv_poll_cq: %v", err)
	}
	return append([]verbs.WC(nil), v.wc[:got]...)
}

// vdWant is one CQ collect polls: depth entries a call, want of them due.
type vdWant struct {
	cq    *verbs.CQ
	depth int
	want  int
}

// collect is the vendor's time-bounded polling: each CQ polled until its
// due completions came (for up to 10 s: the test fails if they do not),
// then all of them for the quiet window, so that completions beyond the
// due ones are caught; it returns everything each CQ gave.
func (v *vd) collect(ws ...vdWant) [][]verbs.WC {
	v.t.Helper()
	got := make([][]verbs.WC, len(ws))
	pass := func() {
		for i, w := range ws {
			got[i] = append(got[i], v.poll(w.cq, w.depth)...)
		}
	}
	for end := time.Now().Add(within); ; {
		pass()
		short := -1
		for i, w := range ws {
			if len(got[i]) < w.want {
				short = i
			}
		}
		if short < 0 {
			break
		}
		if time.Now().After(end) {
			v.t.Fatalf("CQ %d of %d: %d of %d completions in %v (wr_ids %v)", short+1, len(ws), len(got[short]), ws[short].want, within, vdWRIDs(got[short]))
		}
		time.Sleep(20 * time.Microsecond)
	}
	for end := time.Now().Add(quietWindow); time.Now().Before(end); time.Sleep(time.Millisecond) {
		pass()
	}
	return got
}

// count is collect of one CQ; it returns how many completions it gave.
func (v *vd) count(cq *verbs.CQ, depth, want int) int {
	return len(v.collect(vdWant{cq, depth, want})[0])
}

// produced waits, through the verbs, until cq has produced n CQEs since
// its creation, polled or not: a cross-channel probe QP of its own posts
// a signaled CQE_WAIT for n (without WAIT_EN_LAST, so the CQ's wait base
// stays where the case's waits put it: 0 in the cases that use this) and
// polls for its completion. A CQ that ignores overruns and has wrapped
// gives its poller nothing, so this is how a case knows that the last
// CQE was written before it polls.
func (v *vd) produced(cq *verbs.CQ, n int) {
	v.t.Helper()
	d := v.d
	if v.probeQP == nil {
		v.probeCQ = d.cq(16)
		v.probeQP = d.createQP(qpSpec{pd: v.pd, scq: v.probeCQ, rcq: v.probeCQ, flags: verbs.ExpQPCreateCrossChannel})
		d.connect(v.probeQP, d.self(), v.probeQP.QPNum, defaultLink())
	}
	v.probeID++
	d.postSend(v.probeQP, d.wait(v.probeID, cq, n, verbs.ExpSendSignaled))
	if c := d.await(v.probeCQ, 1); len(c) != 1 || c[0].WRID != v.probeID || c[0].Status != verbs.WCSuccess {
		v.t.Fatalf("the probe's wait for %d CQEs: %+v", n, sum(c))
	}
}

// postMgr is ibv_exp_post_send on the manager with a NULL bad_wr, as the
// vendor posts its enables and waits.
func (v *vd) postMgr(ws ...*verbs.ExpSendWR) {
	v.t.Helper()
	if err := verbs.ExpPostSend(v.mqp, chain(ws...), nil); err != nil {
		v.t.Fatalf("ibv_exp_post_send on the manager: %v", err)
	}
}

// enable and wait build a SEND_ENABLE or RECV_ENABLE of the worker, and a
// CQE_WAIT.
func (v *vd) enable(id uint64, op verbs.ExpWROpcode, count int, flags verbs.ExpSendFlags) *verbs.ExpSendWR {
	return v.d.enable(id, op, v.qp, count, flags)
}

func (v *vd) wait(id uint64, cq *verbs.CQ, count int, flags verbs.ExpSendFlags) *verbs.ExpSendWR {
	return v.d.wait(id, cq, count, flags)
}

// vdTally is the bookkeeping of the vendor's polling loops: completions
// counted per CQ, sends and receives told apart by the wr_id's type
// bits, receives reposted when at most one is left.
type vdTally struct {
	routs      int
	scnt, rcnt int
	sPolled    int
	rPolled    int
	onRecv     func()
}

// pollBoth is one pass of the vendor's loop body: the send CQ, then the
// receive CQ, every completion a success.
func (v *vd) pollBoth(tl *vdTally) {
	v.t.Helper()
	for _, side := range []struct {
		cq     *verbs.CQ
		depth  int
		polled *int
	}{{v.scq, v.cqTx, &tl.sPolled}, {v.rcq, v.cqRx, &tl.rPolled}} {
		got := v.poll(side.cq, side.depth)
		*side.polled += len(got)
		for _, c := range got {
			if c.Status != verbs.WCSuccess {
				v.t.Fatalf("completion wr_id %#x failed: %v", c.WRID, c.Status)
			}
			switch c.WRID & vdTypeBits {
			case vdSendWRID:
				tl.scnt++
			case vdRecvWRID:
				if tl.routs--; tl.routs <= 1 {
					tl.routs += v.postRead(v.qpRx - tl.routs)
					if tl.routs < v.qpRx {
						v.t.Fatalf("could not repost receives (%d)", tl.routs)
					}
				}
				if tl.onRecv != nil {
					tl.onRecv()
				}
				tl.rcnt++
			}
		}
	}
}

// loop is the vendor's "post, then poll for a while": post(i) for i in
// 0..count-1, each followed by a pass of pollBoth; then passes until
// want sends and want receives were polled (up to 10 s), and for the
// quiet window beyond.
func (v *vd) loop(count int, tl *vdTally, want int, post func(i int)) {
	v.t.Helper()
	for i := range count {
		post(i)
		v.pollBoth(tl)
	}
	for end := time.Now().Add(within); tl.sPolled < want || tl.rPolled < want; time.Sleep(20 * time.Microsecond) {
		if time.Now().After(end) {
			v.t.Fatalf("%d sends and %d receives completed in %v, want %d each", tl.sPolled, tl.rPolled, within, want)
		}
		v.pollBoth(tl)
	}
	for end := time.Now().Add(quietWindow); time.Now().Before(end); time.Sleep(time.Millisecond) {
		v.pollBoth(tl)
	}
}

func vdWRIDs(cs []verbs.WC) []uint64 {
	out := make([]uint64, len(cs))
	for i, c := range cs {
		out[i] = c.WRID
	}
	return out
}

// asyncNonblocking is fcntl(async_fd, F_SETFL, flags | O_NONBLOCK).
func (v *vd) asyncNonblocking() {
	v.t.Helper()
	if err := syscall.SetNonblock(int(v.d.ctx.AsyncFD), true); err != nil {
		v.t.Fatalf("fcntl(async_fd, O_NONBLOCK): %v", err)
	}
}

// vdIsEINVAL is the vendor's (EINVAL == rc || EINVAL == errno).
func vdIsEINVAL(err error) bool { return errors.Is(err, syscall.EINVAL) }
