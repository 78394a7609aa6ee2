//go:build linux && cgo

package softdev

import (
	"encoding/binary"
	"testing"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
)

// This file rebuilds, with this package's API and the generated verbs,
// the fixture of the vendor's CORE-Direct gtests (libibverbs-1.2.1mlnx1,
// tests/api/gtest_cd.h): the device query every test starts with, the
// manager (mqp, mcq) created in SetUp, and the worker __init_test makes.
// It deliberately does not use rig_test.go or helpers_test.go (only the
// plain utilities of util_test.go): the tests of vendor_test.go and
// vendor_calc_test.go are a second, independent reading of the suite.
//
// What a vendor test does through libibverbs' exported functions is done
// with the Device methods standing in for them (AllocPD, RegMR, CreateCQ,
// ModifyQP, QueryPort, GetAsyncEvent, …); everything else through the
// generated wrappers of the headers' inline verbs, exactly as the
// vendor's C does: ibv_exp_create_qp, ibv_exp_modify_cq, ibv_post_recv,
// ibv_exp_post_send, ibv_exp_post_task, ibv_poll_cq (struct ibv_wc, not
// the exp form) and ibv_exp_query_device.
//
// The vendor polls in loops bounded by time (10 s) and sleeps before its
// final polls, waiting for an HCA. This device does all its work at the
// start of every poll, so the tests here poll where the vendor's loops
// end, and the sleeps are gone. Package semantics runs the suite with the
// vendor's own time-bounded polls on every path (this device, and softdev
// behind the vendor's libibverbs).

const (
	vdPage          = 4096    // ctx->size: one page, the size of every message
	vdDepth         = 0x1F    // __init_test's default queue and CQ depths
	vdMgrCQE        = 0x10    // the manager's CQ
	vdMgrSendWR     = 0x40    // the manager's send queue
	vdSGEs          = 16      // max_send_sge and max_recv_sge of both QPs
	vdRecvWRID      = 0x10000 // the type bits of the receives' wr_id
	vdSendWRID      = 0x20000 // the type bits OR-ed into the sends' wr_id
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

// vdWith is __init_test with only the worker's flags given.
func vdWith(flags verbs.ExpQPCreateFlags) vdInit {
	return vdInit{qpFlags: flags, qpTx: vdDepth, qpRx: vdDepth, cqTx: vdDepth, cqRx: vdDepth}
}

// vd is the vendor's test_context, with the device it runs on.
type vd struct {
	t       *testing.T
	d       *Device
	devAttr *verbs.ExpDeviceAttr // as SetUp queried it
	pd      *verbs.PD
	net     []byte // net_buf: one page of C memory, registered
	mr      *verbs.MR
	mcq     *verbs.CQ
	mqp     *verbs.QP

	// Made by initTest.
	scq, rcq               *verbs.CQ
	qp                     *verbs.QP
	qpTx, qpRx, cqTx, cqRx int
	wc                     []verbs.WC // cqTx + cqRx entries, as the vendor allocates
	peer                   struct {
		lid   uint16
		gid   [16]byte // RoCE: the GID, the address vector's GRH names it
		qpn   uint32
		psn   uint32
		vaddr uint64
		rkey  uint32
	}

	// Host side of the calc tests: ctx->buf (only its first 32 bytes
	// matter) and ctx->last_result.
	host [32]byte
	last [8]byte
	calc vdCalcState

	cmem []unsafe.Pointer
}

// vdC returns a zeroed T in C memory, freed after the device closes.
func vdC[T any](v *vd) *T {
	p := calloc[T]()
	v.cmem = append(v.cmem, unsafe.Pointer(p))
	return p
}

func vdCN[T any](v *vd, n int) []T {
	s := callocSlice[T](n)
	v.cmem = append(v.cmem, unsafe.Pointer(&s[0]))
	return s
}

// newVD is verbs_test::SetUp and verbs_test_cd::SetUp: open the device
// and query it (comp_mask = IBV_EXP_DEVICE_ATTR_RESERVED - 1), then the
// PD, the registered page, and the manager: a cross-channel QP with a
// 16-entry CQ for both queues, 64 send WRs and no receive queue,
// connected to itself.
//
// The device completes synchronously (SyncCompletions): these tests pin
// what each poll finds, step by step; newVDWith opens it otherwise.
func newVD(t *testing.T) *vd {
	t.Helper()
	return newVDWith(t, SyncCompletions())
}

func newVDWith(t *testing.T, opts ...DeviceOption) *vd {
	t.Helper()
	d, err := Open(opts...)
	if err != nil {
		t.Fatal(err)
	}
	v := &vd{t: t, d: d}
	t.Cleanup(v.tearDown)

	v.devAttr = vdC[verbs.ExpDeviceAttr](v)
	v.devAttr.CompMask = uint32(verbs.ExpDeviceAttrReserved - 1)
	if err := verbs.ExpQueryDevice(d.Context(), v.devAttr); err != nil {
		t.Fatalf("ibv_exp_query_device: %v", err)
	}
	if v.devAttr.ExpDeviceCapFlags&uint64(verbs.ExpDeviceCrossChannel) == 0 {
		t.Errorf("the device does not report IBV_EXP_DEVICE_CROSS_CHANNEL: %#x", v.devAttr.ExpDeviceCapFlags)
	}

	// The values SetUp starts with; __init_test replaces them.
	v.qpTx, v.qpRx = 20, 100
	v.cqTx, v.cqRx = v.qpTx, v.qpRx

	if v.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	v.net = vdCN[byte](v, vdPage)
	if v.mr, err = d.RegMR(v.pd, v.net[:vdPage], verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		t.Fatal(err)
	}
	if v.mcq, err = d.CreateCQ(vdMgrCQE); err != nil {
		t.Fatal(err)
	}
	v.mqp = v.createQP(v.mcq, v.mcq, verbs.QPCap{MaxSendWR: vdMgrSendWR, MaxSendSGE: vdSGEs, MaxRecvSGE: vdSGEs},
		verbs.ExpQPCreateCrossChannel)

	// The manager's connection: access flags 0, itself as the
	// destination, PSNs 0, one outstanding read either way (on a RoCE
	// port, a GRH naming its own GID).
	v.modify(v.mqp, verbs.QPAttr{QPState: verbs.QpsInit, PortNum: 1},
		verbs.QPStateConst|verbs.QPPkeyIndex|verbs.QPPort|verbs.QPAccessFlags)
	v.modify(v.mqp, verbs.QPAttr{QPState: verbs.QpsRtr, PathMTU: verbs.MTU1024, DestQPNum: v.mqp.QPNum,
		MaxDestRdAtomic: 1, MinRnrTimer: 12, AHAttr: v.roceAH(v.d.GID())},
		verbs.QPStateConst|verbs.QPAv|verbs.QPPathMTU|verbs.QPDestQPN|verbs.QPRQPSN|verbs.QPMaxDestRdAtomic|verbs.QPMinRnrTimer)
	v.modify(v.mqp, verbs.QPAttr{QPState: verbs.QpsRts, Timeout: 14, RetryCnt: 7, RnrRetry: 7, MaxRdAtomic: 1},
		verbs.QPStateConst|verbs.QPTimeout|verbs.QPRetryCnt|verbs.QPRnrRetry|verbs.QPSQPSN|verbs.QPMaxQPRdAtomic)
	return v
}

// createQP is ibv_exp_create_qp with the fixture's init_attr: RC, no
// inline data, sq_sig_all 0, comp_mask CREATE_FLAGS | PD.
func (v *vd) createQP(scq, rcq *verbs.CQ, caps verbs.QPCap, flags verbs.ExpQPCreateFlags) *verbs.QP {
	v.t.Helper()
	a := vdC[verbs.ExpQPInitAttr](v)
	a.SendCQ, a.RecvCQ = scq, rcq
	a.Cap = caps
	a.QPType = verbs.QptRC
	a.CompMask = uint32(verbs.ExpQPInitAttrCreateFlags | verbs.ExpQPInitAttrPD)
	a.ExpCreateFlags = uint32(flags)
	a.PD = v.pd
	qp, err := verbs.ExpCreateQP(v.d.Context(), a)
	if err != nil {
		v.t.Fatalf("ibv_exp_create_qp(flags %#x): %v", uint32(flags), err)
	}
	return qp
}

// modify is ibv_modify_qp, which must succeed.
func (v *vd) modify(qp *verbs.QP, attr verbs.QPAttr, mask verbs.QPAttrMask) {
	v.t.Helper()
	if err := v.d.ModifyQP(qp, &attr, mask); err != nil {
		v.t.Fatalf("ibv_modify_qp(QP %#x, state %v): %v", qp.QPNum, attr.QPState, err)
	}
}

// createCQ is ibv_create_cq and, with flags, ibv_exp_modify_cq setting
// the capability flags (moderation left at 0), which must succeed.
func (v *vd) createCQ(n int, flags verbs.ExpCQCapFlags) *verbs.CQ {
	v.t.Helper()
	cq, err := verbs.CreateCQ(v.d.Context(), int32(n), nil, nil, 0)
	if err != nil {
		v.t.Fatalf("ibv_create_cq(%d): %v", n, err)
	}
	if flags != 0 {
		a := vdC[verbs.ExpCQAttr](v)
		a.CompMask = uint32(verbs.ExpCQAttrCQCapFlags)
		a.CQCapFlags = uint32(flags)
		if err := verbs.ExpModifyCQ(cq, a, int32(verbs.ExpCQCapFlagsConst)); err != nil {
			v.t.Fatalf("ibv_exp_modify_cq(cap flags %#x): %v", uint32(flags), err)
		}
	}
	return cq
}

// initTest is __init_test: the worker's send and receive CQs, the
// worker (16 SGEs each way, no inline data) with the flags under test,
// its connection info from a loopback "exchange", every receive slot
// posted while it is still in RESET, then INIT (remote read and write),
// RTR to itself and RTS.
func (v *vd) initTest(c vdInit) {
	v.t.Helper()
	v.qpTx, v.qpRx, v.cqTx, v.cqRx = c.qpTx, c.qpRx, c.cqTx, c.cqRx
	v.scq = v.createCQ(v.cqTx, c.cqTxFlags)
	v.rcq = v.createCQ(v.cqRx, c.cqRxFlags)
	v.wc = vdCN[verbs.WC](v, v.cqTx+v.cqRx)
	v.qp = v.createQP(v.scq, v.rcq, verbs.QPCap{MaxSendWR: uint32(v.qpTx), MaxRecvWR: uint32(v.qpRx),
		MaxSendSGE: vdSGEs, MaxRecvSGE: vdSGEs}, c.qpFlags)

	port, err := v.d.QueryPort(1)
	if err != nil {
		v.t.Fatalf("ibv_query_port: %v", err)
	}
	v.peer.lid = port.LID
	v.peer.qpn = v.qp.QPNum
	v.peer.psn = 0x5a5a5 // the vendor draws one at random
	// The vendor's fixture ran on InfiniBand (a LID); on a RoCE port, as
	// this one is, the address vector needs the GRH with the peer's GID,
	// as any portable verbs program sets it.
	if port.LinkLayer == verbs.LinkLayerEthernet {
		g := vdC[verbs.GID](v)
		if err := verbs.QueryGID(v.d.Context(), 1, 0, g); err != nil {
			v.t.Fatalf("ibv_query_gid: %v", err)
		}
		v.peer.gid = *g.Raw()
	}
	v.peer.vaddr = v.addr(vdPage)
	v.peer.rkey = v.mr.Rkey

	if n := v.postRead(v.qpRx); n != v.qpRx {
		v.t.Fatalf("posted %d of %d receives before INIT", n, v.qpRx)
	}

	v.modify(v.qp, verbs.QPAttr{QPState: verbs.QpsInit, PortNum: 1,
		QPAccessFlags: int32(verbs.AccessRemoteRead | verbs.AccessRemoteWrite)},
		verbs.QPStateConst|verbs.QPPkeyIndex|verbs.QPPort|verbs.QPAccessFlags)
	v.modify(v.qp, verbs.QPAttr{QPState: verbs.QpsRtr, PathMTU: verbs.MTU1024, DestQPNum: v.peer.qpn,
		RQPSN: v.peer.psn, MaxDestRdAtomic: 4, MinRnrTimer: 12,
		AHAttr: v.peerAH()},
		verbs.QPStateConst|verbs.QPAv|verbs.QPPathMTU|verbs.QPDestQPN|verbs.QPRQPSN|verbs.QPMaxDestRdAtomic|verbs.QPMinRnrTimer)
	v.modify(v.qp, verbs.QPAttr{QPState: verbs.QpsRts, Timeout: 14, RetryCnt: 7, RnrRetry: 7,
		SQPSN: v.peer.psn, MaxRdAtomic: 4},
		verbs.QPStateConst|verbs.QPTimeout|verbs.QPRetryCnt|verbs.QPRnrRetry|verbs.QPSQPSN|verbs.QPMaxQPRdAtomic)
}

// peerAH is the address vector of the RTR transition: the LID, with a
// GRH naming the peer's GID on a RoCE port.
func (v *vd) peerAH() verbs.AHAttr {
	if v.peer.gid != ([16]byte{}) {
		return v.roceAH(v.peer.gid)
	}
	return verbs.AHAttr{Dlid: v.peer.lid, PortNum: 1}
}

func (v *vd) roceAH(gid [16]byte) verbs.AHAttr {
	ah := verbs.AHAttr{PortNum: 1, IsGlobal: 1}
	ah.GRH.HopLimit = 1
	*ah.GRH.Dgid.Raw() = gid
	return ah
}

// tearDown destroys in the vendor's order, with the verbs that created
// the QPs and CQs, then closes the device, which must find nothing left.
func (v *vd) tearDown() {
	t := v.t
	if v.mqp != nil {
		if err := verbs.DestroyQP(v.mqp); err != nil {
			t.Errorf("destroy mqp: %v", err)
		}
	}
	if v.mcq != nil {
		if err := verbs.DestroyCQ(v.mcq); err != nil {
			t.Errorf("destroy mcq: %v", err)
		}
	}
	if v.qp != nil {
		if err := verbs.DestroyQP(v.qp); err != nil {
			t.Errorf("destroy qp: %v", err)
		}
	}
	for _, cq := range []*verbs.CQ{v.scq, v.rcq} {
		if cq != nil {
			if err := verbs.DestroyCQ(cq); err != nil {
				t.Errorf("destroy CQ: %v", err)
			}
		}
	}
	if v.mr != nil {
		if err := v.d.DeregMR(v.mr); err != nil {
			t.Errorf("dereg MR: %v", err)
		}
	}
	if v.pd != nil {
		if err := v.d.DeallocPD(v.pd); err != nil {
			t.Errorf("dealloc PD: %v", err)
		}
	}
	if err := v.d.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	for _, p := range v.cmem {
		cfree(p)
	}
}

// addr is the address of net_buf[off].
func (v *vd) addr(off int) uint64 { return uint64(uintptr(unsafe.Pointer(&v.net[0]))) + uint64(off) }

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
// It returns ibv_exp_post_send's error.
func (v *vd) postWrite(wrid uint64, what vdWrite) error {
	binary.BigEndian.PutUint64(v.net[:8], wrid)
	sge := vdC[verbs.SGE](v)
	*sge = verbs.SGE{Addr: v.addr(0), Length: vdPage, Lkey: v.mr.Lkey}
	wr := vdC[verbs.ExpSendWR](v)
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
	return verbs.ExpPostSend(v.qp, wr, vdC[*verbs.ExpSendWR](v))
}

// postRead is __post_read: count page-sized receives on the worker,
// one call each; it returns how many were posted, and reports a failure.
func (v *vd) postRead(count int) int {
	v.t.Helper()
	sge := vdC[verbs.SGE](v)
	*sge = verbs.SGE{Addr: v.addr(0), Length: vdPage, Lkey: v.mr.Lkey}
	wr := vdC[verbs.RecvWR](v)
	wr.WRID, wr.SGList, wr.NumSGE = vdRecvWRID, sge, 1
	bad := vdC[*verbs.RecvWR](v)
	for i := range count {
		if err := verbs.PostRecv(v.qp, wr, bad); err != nil {
			v.t.Errorf("ibv_post_recv %d of %d: %v", i+1, count, err)
			return i
		}
	}
	return count
}

// poll is ibv_poll_cq for at most n completions into the fixture's wc
// array; a negative result fails the test, as the vendor asserts.
func (v *vd) poll(cq *verbs.CQ, n int) []verbs.WC {
	v.t.Helper()
	got, err := verbs.PollCQ(cq, v.wc[:n])
	if err != nil {
		v.t.Fatalf("ibv_poll_cq: %v", err)
	}
	return v.wc[:got]
}

// enable builds a SEND_ENABLE or RECV_ENABLE of the worker, in C memory.
func (v *vd) enable(id uint64, op verbs.ExpWROpcode, count int, flags verbs.ExpSendFlags) *verbs.ExpSendWR {
	w := vdC[verbs.ExpSendWR](v)
	w.WRID, w.ExpOpcode, w.ExpSendFlags = id, op, uint64(flags)
	w.Task.WQEEnable().QP, w.Task.WQEEnable().WQECount = v.qp, int32(count)
	return w
}

// wait builds a CQE_WAIT, in C memory.
func (v *vd) wait(id uint64, cq *verbs.CQ, count int, flags verbs.ExpSendFlags) *verbs.ExpSendWR {
	w := vdC[verbs.ExpSendWR](v)
	w.WRID, w.ExpOpcode, w.ExpSendFlags = id, verbs.ExpWRCQEWait, uint64(flags)
	w.Task.CQEWait().CQ, w.Task.CQEWait().CQCount = cq, int32(count)
	return w
}

// postMgr is ibv_exp_post_send on the manager with a NULL bad_wr, as the
// vendor posts its enables and waits.
func (v *vd) postMgr(ws ...*verbs.ExpSendWR) {
	v.t.Helper()
	if err := verbs.ExpPostSend(v.mqp, link(ws...), nil); err != nil {
		v.t.Fatalf("ibv_exp_post_send on the manager: %v", err)
	}
}

// mustWrite is __post_write that must succeed.
func (v *vd) mustWrite(wrid uint64, what vdWrite) {
	v.t.Helper()
	if err := v.postWrite(wrid, what); err != nil {
		v.t.Fatalf("__post_write(wr_id %#x, %d): %v", wrid, what, err)
	}
}

// vdWRIDs lists the wr_ids of completions.
func vdWRIDs(cs []verbs.WC) []uint64 {
	out := make([]uint64, len(cs))
	for i, c := range cs {
		out[i] = c.WRID
	}
	return out
}
