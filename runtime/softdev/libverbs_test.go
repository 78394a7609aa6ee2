//go:build linux && cgo

package softdev

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/verbsexp/verbsexp/abiutil"
	"github.com/verbsexp/verbsexp/abiutil/dynlib"
	"github.com/verbsexp/verbsexp/generated/verbs"
)

// These tests use the device only as an application that knows nothing
// of this package would: Open, Context and Close, and otherwise the
// generated wrappers of libibverbs' exported verbs (verbs.AllocPD,
// verbs.CreateCQ, verbs.ModifyQP, verbs.GetAsyncEvent, …) beside the
// headers' inline ones, as the vendor's C fixture calls ibv_alloc_pd,
// ibv_create_cq and ibv_modify_qp. They run with whatever libibverbs.so.1
// this machine has (CI: Debian's rdma-core, which the generated package's
// guard refuses), and again in subprocesses without any (the file hidden
// by a bind mount) and with a stand-in for MLNX_OFED's legacy library.

// libCase is the library the test binary finds: set by the subprocess
// tests below, else what dynlib finds here.
const libCaseEnv = "VERBSEXP_SOFTDEV_LIBCASE"

const (
	libAbsent  = "absent"  // no libibverbs.so.1
	libRDMA    = "rdma"    // upstream rdma-core's: refused by the guard
	libStandIn = "standin" // standInSource: legacy marker, records its calls
	libLegacy  = "legacy"  // a real MLNX_OFED legacy library
)

func libCase(t *testing.T) string {
	if c := os.Getenv(libCaseEnv); c != "" {
		return c
	}
	if _, err := dynlib.New("libibverbs.so.1").Path(); err != nil {
		return libAbsent
	}
	_, err := dynlib.New("libibverbs.so.1").Require(dynlib.Guard{Symbol: "ibv_exp_cmd_query_device"}).Lookup(&dynlib.Sym{Name: "ibv_get_device_list"})
	if err != nil {
		return libRDMA
	}
	return libLegacy
}

// lv is the vendor's test context, built with package verbs only.
type lv struct {
	t    *testing.T
	d    *Device
	ctx  *verbs.Context
	pd   *verbs.PD
	net  []byte
	mr   *verbs.MR
	cmem []unsafe.Pointer
}

func lvC[T any](v *lv) *T {
	p := calloc[T]()
	v.cmem = append(v.cmem, unsafe.Pointer(p))
	return p
}

func (v *lv) free() {
	for _, p := range v.cmem {
		cfree(p)
	}
}

// createCQ is ibv_create_cq, which must succeed and fill in what
// libibverbs fills in.
func (v *lv) createCQ(cqe int32) *verbs.CQ {
	v.t.Helper()
	cq, err := verbs.CreateCQ(v.ctx, cqe, unsafe.Pointer(v.ctx), nil, 0)
	if err != nil {
		v.t.Fatalf("ibv_create_cq(%d): %v", cqe, err)
	}
	if cq.Context != v.ctx || cq.CQContext != unsafe.Pointer(v.ctx) || cq.Channel != nil || cq.AsyncEventsCompleted != 0 {
		v.t.Fatalf("ibv_create_cq left context %p, cq_context %p, channel %p, async events %d", cq.Context, cq.CQContext, cq.Channel, cq.AsyncEventsCompleted)
	}
	return cq
}

// expQP is ibv_exp_create_qp as the vendor's fixture calls it.
func (v *lv) expQP(scq, rcq *verbs.CQ, c verbs.QPCap, mask verbs.ExpQPInitAttrCompMask, flags verbs.ExpQPCreateFlags) *verbs.QP {
	v.t.Helper()
	a := lvC[verbs.ExpQPInitAttr](v)
	a.SendCQ, a.RecvCQ, a.Cap, a.QPType = scq, rcq, c, verbs.QptRC
	a.CompMask, a.ExpCreateFlags, a.PD = uint32(mask), uint32(flags), v.pd
	qp, err := verbs.ExpCreateQP(v.ctx, a)
	if err != nil {
		v.t.Fatalf("ibv_exp_create_qp(mask %#x, flags %#x): %v", uint32(mask), uint32(flags), err)
	}
	return qp
}

// connect moves qp to RTS connected to itself with ibv_modify_qp.
func (v *lv) connect(qp *verbs.QP) {
	v.t.Helper()
	a := lvC[verbs.QPAttr](v)
	self := verbs.AHAttr{PortNum: 1, IsGlobal: 1} // RoCE: a GRH with the device's own GID
	*self.GRH.Dgid.Raw() = v.d.GID()
	for _, s := range []struct {
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{verbs.QPAttr{QPState: verbs.QpsInit, PortNum: 1, QPAccessFlags: int32(verbs.AccessRemoteRead | verbs.AccessRemoteWrite)},
			verbs.QPStateConst | verbs.QPPkeyIndex | verbs.QPPort | verbs.QPAccessFlags},
		{verbs.QPAttr{QPState: verbs.QpsRtr, PathMTU: verbs.MTU1024, DestQPNum: qp.QPNum, MaxDestRdAtomic: 1, MinRnrTimer: 12, AHAttr: self},
			verbs.QPStateConst | verbs.QPAv | verbs.QPPathMTU | verbs.QPDestQPN | verbs.QPRQPSN | verbs.QPMaxDestRdAtomic | verbs.QPMinRnrTimer},
		{verbs.QPAttr{QPState: verbs.QpsRts, Timeout: 14, RetryCnt: 7, RnrRetry: 7, MaxRdAtomic: 1},
			verbs.QPStateConst | verbs.QPTimeout | verbs.QPRetryCnt | verbs.QPRnrRetry | verbs.QPSQPSN | verbs.QPMaxQPRdAtomic},
	} {
		*a = s.attr
		if err := verbs.ModifyQP(qp, a, int32(s.mask)); err != nil {
			v.t.Fatalf("ibv_modify_qp(QP %#x to %v): %v", qp.QPNum, s.attr.QPState, err)
		}
		if qp.State != s.attr.QPState {
			v.t.Fatalf("after ibv_modify_qp to %v, qp->state is %v", s.attr.QPState, qp.State)
		}
	}
}

// postRecvs posts n receives of 64 bytes each into the page.
func (v *lv) postRecvs(qp *verbs.QP, n int, wrid uint64) {
	v.t.Helper()
	for i := range n {
		sge := lvC[verbs.SGE](v)
		*sge = verbs.SGE{Addr: uint64(uintptr(unsafe.Pointer(&v.net[2048+64*(i%16)]))), Length: 64, Lkey: v.mr.Lkey}
		wr := lvC[verbs.RecvWR](v)
		*wr = verbs.RecvWR{WRID: wrid + uint64(i), SGList: sge, NumSGE: 1}
		if err := verbs.PostRecv(qp, wr, nil); err != nil {
			v.t.Fatalf("ibv_post_recv %d: %v", i, err)
		}
	}
}

// post is ibv_exp_post_send of one WR, which must succeed.
func (v *lv) post(qp *verbs.QP, wr *verbs.ExpSendWR) {
	v.t.Helper()
	if err := verbs.ExpPostSend(qp, wr, nil); err != nil {
		v.t.Fatalf("ibv_exp_post_send(QP %#x, wr_id %d): %v", qp.QPNum, wr.WRID, err)
	}
}

func (v *lv) send(wrid uint64) *verbs.ExpSendWR {
	sge := lvC[verbs.SGE](v)
	*sge = verbs.SGE{Addr: uint64(uintptr(unsafe.Pointer(&v.net[0]))), Length: 64, Lkey: v.mr.Lkey}
	wr := lvC[verbs.ExpSendWR](v)
	*wr = verbs.ExpSendWR{WRID: wrid, SGList: sge, NumSGE: 1, ExpOpcode: verbs.ExpWRSend, ExpSendFlags: uint64(verbs.ExpSendSignaled)}
	return wr
}

// pollAll polls cq with ibv_poll_cq until it is empty.
func (v *lv) pollAll(cq *verbs.CQ) []verbs.WC {
	v.t.Helper()
	wc := lvC[[16]verbs.WC](v)
	var got []verbs.WC
	for {
		n, err := verbs.PollCQ(cq, wc[:])
		if err != nil {
			v.t.Fatalf("ibv_poll_cq: %v", err)
		}
		if n == 0 {
			return got
		}
		got = append(got, wc[:n]...)
	}
}

func wrids(wc []verbs.WC) []uint64 {
	var ids []uint64
	for _, c := range wc {
		if c.Status != verbs.WCSuccess {
			return append(ids, ^uint64(0))
		}
		ids = append(ids, c.WRID)
	}
	return ids
}

func isCallErrno(err error, fn string, e syscall.Errno) bool {
	var ce *abiutil.CallError
	return errors.As(err, &ce) && ce.Func == fn && ce.Errno == e
}

// TestExportedVerbs is a vendor-style test on the device through the
// exported verbs: the device query, the PD and the registered page, the
// manager and a managed worker created, connected with ibv_modify_qp and
// queried with ibv_query_qp; three chained SEND_ENABLE(worker, 2), each
// with WAIT_EN_LAST, release 6 of 10 posted sends and a CQE_WAIT sees
// their 6 receives; a CQ overrun raises the two async events, read with
// ibv_get_async_event and acknowledged with ibv_ack_async_event (whose
// counters move); everything is destroyed with the verbs and Close finds
// nothing left. Then what the device does not support, and objects that
// are not the device's, which go to the library (or fail with ENOSYS).
func TestExportedVerbs(t *testing.T) {
	lc := libCase(t)
	t.Logf("libibverbs.so.1 on this run: %s", lc)
	calls := standInCalls(t, lc)

	d, err := Open(SyncCompletions()) // each poll below finds what its run completed
	if err != nil {
		t.Fatal(err)
	}
	v := &lv{t: t, d: d, ctx: d.Context()}
	defer v.free()

	da := lvC[verbs.DeviceAttr](v)
	if err := verbs.QueryDevice(v.ctx, da); err != nil || da.PhysPortCnt != 1 || int(da.MaxQPWR) != DefaultLimits.MaxQPWR {
		t.Fatalf("ibv_query_device: %v, ports %d, max_qp_wr %d", err, da.PhysPortCnt, da.MaxQPWR)
	}
	pa := lvC[verbs.PortAttr](v)
	if err := verbs.QueryPort(v.ctx, 1, pa); err != nil || pa.State != verbs.PortActive || pa.LinkLayer != verbs.LinkLayerEthernet {
		t.Fatalf("ibv_query_port: %v, state %v, link layer %d", err, pa.State, pa.LinkLayer)
	}
	*pa = verbs.PortAttr{}
	// The headers' inline ibv_query_port reaches the exported one through
	// the generated weak stub, which finds this device's too.
	if err := verbs.IbvQueryPort(v.ctx, 1, pa); err != nil || pa.State != verbs.PortActive || pa.LinkLayer != verbs.LinkLayerEthernet {
		t.Fatalf("inline ibv_query_port: %v, state %v, link layer %d", err, pa.State, pa.LinkLayer)
	}
	if err := verbs.QueryPort(v.ctx, 2, pa); !isCallErrno(err, "ibv_query_port", syscall.EINVAL) {
		t.Fatalf("ibv_query_port(port 2) = %v, want EINVAL", err)
	}

	if v.pd, err = verbs.AllocPD(v.ctx); err != nil || v.pd.Context != v.ctx {
		t.Fatalf("ibv_alloc_pd: %v", err)
	}
	v.net = callocSlice[byte](4096)
	v.cmem = append(v.cmem, unsafe.Pointer(&v.net[0]))
	if v.mr, err = verbs.RegMR(v.pd, unsafe.Pointer(&v.net[0]), 4096, int32(verbs.AccessLocalWrite|verbs.AccessRemoteWrite)); err != nil {
		t.Fatalf("ibv_reg_mr: %v", err)
	}
	if v.mr.Context != v.ctx || v.mr.PD != v.pd || v.mr.Length != 4096 || v.mr.Lkey == v.mr.Rkey {
		t.Fatalf("ibv_reg_mr gave %+v", *v.mr)
	}
	// The registration checks the range as Device.RegMR does: a page the
	// device may not read is refused.
	none, err := syscall.Mmap(-1, 0, 4096, syscall.PROT_NONE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(none)
	if _, err := verbs.RegMR(v.pd, unsafe.Pointer(&none[0]), 4096, int32(verbs.AccessLocalWrite)); !isCallErrno(err, "ibv_reg_mr", syscall.EFAULT) {
		t.Fatalf("ibv_reg_mr of a PROT_NONE page = %v, want EFAULT", err)
	}

	mcq := v.createCQ(0x10)
	mqp := v.expQP(mcq, mcq, verbs.QPCap{MaxSendWR: 0x40, MaxSendSGE: 16, MaxRecvSGE: 16},
		verbs.ExpQPInitAttrPD|verbs.ExpQPInitAttrCreateFlags, verbs.ExpQPCreateCrossChannel)
	v.connect(mqp)
	scq, rcq := v.createCQ(0x1F), v.createCQ(0x1F)
	worker := v.expQP(scq, rcq, verbs.QPCap{MaxSendWR: 0x1F, MaxRecvWR: 0x1F, MaxSendSGE: 16, MaxRecvSGE: 16},
		verbs.ExpQPInitAttrPD|verbs.ExpQPInitAttrCreateFlags, verbs.ExpQPCreateManagedSend)
	v.postRecvs(worker, 10, 1000) // in RESET, as the vendor does
	v.connect(worker)

	qa, qi := lvC[verbs.QPAttr](v), lvC[verbs.QPInitAttr](v)
	if err := verbs.QueryQP(worker, qa, int32(verbs.QPStateConst|verbs.QPDestQPN|verbs.QPCapConst), qi); err != nil {
		t.Fatalf("ibv_query_qp: %v", err)
	}
	if qa.QPState != verbs.QpsRts || qa.DestQPNum != worker.QPNum || qa.Cap.MaxSendWR != 0x1F || qi.SendCQ != scq || qi.RecvCQ != rcq || qi.QPType != verbs.QptRC {
		t.Fatalf("ibv_query_qp: state %v, dest %#x, max_send_wr %d, send CQ %p (want %p), type %v", qa.QPState, qa.DestQPNum, qa.Cap.MaxSendWR, qi.SendCQ, scq, qi.QPType)
	}

	for i := range 10 {
		v.post(worker, v.send(uint64(i)))
	}
	for i := range 3 {
		en := lvC[verbs.ExpSendWR](v)
		en.WRID, en.ExpOpcode = uint64(100+i), verbs.ExpWRSendEnable
		en.ExpSendFlags = uint64(verbs.ExpSendSignaled | verbs.ExpSendWaitEnLast)
		en.Task.WQEEnable().QP, en.Task.WQEEnable().WQECount = worker, 2
		v.post(mqp, en)
	}
	wait := lvC[verbs.ExpSendWR](v)
	wait.WRID, wait.ExpOpcode = 103, verbs.ExpWRCQEWait
	wait.ExpSendFlags = uint64(verbs.ExpSendSignaled | verbs.ExpSendWaitEnLast)
	wait.Task.CQEWait().CQ, wait.Task.CQEWait().CQCount = rcq, 6
	v.post(mqp, wait)

	if got := wrids(v.pollAll(rcq)); len(got) != 6 || got[0] != 1000 || got[5] != 1005 {
		t.Fatalf("receive CQ: wr_ids %v; want 1000..1005: three enables of 2 with WAIT_EN_LAST release 6", got)
	}
	if got := wrids(v.pollAll(scq)); len(got) != 6 || got[0] != 0 || got[5] != 5 {
		t.Fatalf("send CQ: wr_ids %v; want 0..5", got)
	}
	if got := wrids(v.pollAll(mcq)); len(got) != 4 || got[0] != 100 || got[3] != 103 {
		t.Fatalf("manager CQ: wr_ids %v; want the enables 100..102, then the wait 103", got)
	}

	// An overrun: a plain QP from the exported ibv_create_qp whose send
	// CQ holds 2, and 3 signaled sends.
	small, rcq2 := v.createCQ(1), v.createCQ(0x1F)
	ia := lvC[verbs.QPInitAttr](v)
	*ia = verbs.QPInitAttr{SendCQ: small, RecvCQ: rcq2, Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}, QPType: verbs.QptRC}
	plain, err := verbs.CreateQP(v.pd, ia)
	if err != nil || plain.Context != v.ctx || plain.PD != v.pd || plain.State != verbs.QpsReset {
		t.Fatalf("ibv_create_qp: %v", err)
	}
	v.postRecvs(plain, 3, 2000)
	v.connect(plain)
	for i := range 3 {
		v.post(plain, v.send(uint64(200+i)))
	}
	v.pollAll(rcq2) // runs the device
	if err := syscall.SetNonblock(int(v.ctx.AsyncFD), true); err != nil {
		t.Fatal(err)
	}
	ev := lvC[verbs.AsyncEvent](v)
	seen := map[verbs.EventType]bool{}
	for range 2 {
		if err := verbs.GetAsyncEvent(v.ctx, ev); err != nil {
			t.Fatalf("ibv_get_async_event: %v", err)
		}
		switch ev.EventType {
		case verbs.EventCQErr:
			if ev.Element.CQ() != small {
				t.Fatalf("CQ_ERR on %p, want the small CQ %p", ev.Element.CQ(), small)
			}
		case verbs.EventQPFatal:
			if ev.Element.QP() != plain {
				t.Fatalf("QP_FATAL on %p, want %p", ev.Element.QP(), plain)
			}
		default:
			t.Fatalf("event %v", ev.EventType)
		}
		seen[ev.EventType] = true
		if err := verbs.AckAsyncEvent(ev); err != nil {
			t.Fatalf("ibv_ack_async_event: %v", err)
		}
	}
	if !seen[verbs.EventCQErr] || !seen[verbs.EventQPFatal] {
		t.Fatalf("events %v, want CQ_ERR and QP_FATAL", seen)
	}
	if small.AsyncEventsCompleted != 1 || plain.EventsCompleted != 1 {
		t.Fatalf("after the acks: CQ async_events_completed %d, QP events_completed %d; want 1 and 1", small.AsyncEventsCompleted, plain.EventsCompleted)
	}
	if err := verbs.GetAsyncEvent(v.ctx, ev); !isCallErrno(err, "ibv_get_async_event", syscall.EAGAIN) {
		t.Fatalf("ibv_get_async_event with none pending on a non-blocking fd = %v, want EAGAIN", err)
	}
	if err := verbs.QueryQP(plain, qa, int32(verbs.QPStateConst), qi); err != nil || qa.QPState != verbs.QpsErr {
		t.Fatalf("ibv_query_qp after QP_FATAL: %v, state %v", err, qa.QPState)
	}
	if err := verbs.AckCQEvents(small, 3); err != nil || small.CompEventsCompleted != 3 {
		t.Fatalf("ibv_ack_cq_events(3): %v, comp_events_completed %d", err, small.CompEventsCompleted)
	}

	// ibv_exp_create_qp with only a PD: the header's inline code calls
	// the exported ibv_create_qp (the generated stub, then this device's).
	viaStub := v.expQP(scq, rcq, verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}, verbs.ExpQPInitAttrPD, 0)
	if viaStub.Context != v.ctx || viaStub.State != verbs.QpsReset {
		t.Fatalf("PD-only ibv_exp_create_qp gave context %p, state %v", viaStub.Context, viaStub.State)
	}

	// What the device does not support fails cleanly.
	gid := lvC[verbs.GID](v)
	if err := verbs.QueryGID(v.ctx, 1, 0, gid); err != nil || *gid.Raw() != d.GID() {
		t.Errorf("ibv_query_gid = %v, %x; want the device's GID %x", err, *gid.Raw(), d.GID())
	}
	if err := verbs.QueryGID(v.ctx, 1, 1, gid); !isCallErrno(err, "ibv_query_gid", syscall.EINVAL) {
		t.Errorf("ibv_query_gid index 1 = %v, want EINVAL (one GID)", err)
	}
	var pkey uint16
	if err := verbs.QueryPkey(v.ctx, 1, 0, &pkey); !isCallErrno(err, "ibv_query_pkey", syscall.EOPNOTSUPP) {
		t.Errorf("ibv_query_pkey = %v, want EOPNOTSUPP", err)
	}
	if _, err := verbs.CreateAH(v.pd, lvC[verbs.AHAttr](v)); !isCallErrno(err, "ibv_create_ah", syscall.EINVAL) {
		t.Errorf("ibv_create_ah on port 0 = %v, want EINVAL", err)
	}
	if err := verbs.ResizeCQ(scq, 64); !isCallErrno(err, "ibv_resize_cq", syscall.ENOSYS) {
		t.Errorf("ibv_resize_cq = %v, want ENOSYS (libibverbs' answer for a provider without resize)", err)
	}
	if err := verbs.DestroyCQ(scq); !isCallErrno(err, "ibv_destroy_cq", syscall.EBUSY) {
		t.Errorf("ibv_destroy_cq of a CQ in use = %v, want EBUSY", err)
	}

	for _, qp := range []*verbs.QP{mqp, worker, plain, viaStub} {
		if err := verbs.DestroyQP(qp); err != nil {
			t.Fatalf("ibv_destroy_qp(%#x): %v", qp.QPNum, err)
		}
	}
	if err := verbs.DestroyQP(worker); !isCallErrno(err, "ibv_destroy_qp", syscall.EINVAL) {
		t.Fatalf("second ibv_destroy_qp = %v, want EINVAL", err)
	}
	for _, cq := range []*verbs.CQ{mcq, scq, rcq, small, rcq2} {
		if err := verbs.DestroyCQ(cq); err != nil {
			t.Fatalf("ibv_destroy_cq: %v", err)
		}
	}
	if err := verbs.DestroyCQ(mcq); !isCallErrno(err, "ibv_destroy_cq", syscall.EINVAL) {
		t.Fatalf("second ibv_destroy_cq = %v, want EINVAL", err)
	}
	if err := verbs.DeallocPD(v.pd); !isCallErrno(err, "ibv_dealloc_pd", syscall.EBUSY) {
		t.Fatalf("ibv_dealloc_pd with an MR = %v, want EBUSY", err)
	}
	if err := verbs.DeregMR(v.mr); err != nil {
		t.Fatalf("ibv_dereg_mr: %v", err)
	}
	if err := verbs.DeallocPD(v.pd); err != nil {
		t.Fatalf("ibv_dealloc_pd: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("Close after destroying everything with the verbs: %v", err)
	}

	// ibv_close_device closes a device too.
	d2, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := verbs.AllocPD(d2.Context()); err != nil {
		t.Fatal(err)
	}
	if err := verbs.CloseDevice(d2.Context()); err != nil {
		t.Fatalf("ibv_close_device: %v", err)
	}
	if err := d2.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Close after ibv_close_device = %v, want ErrClosed", err)
	}
	if n := calls(); n != 0 {
		t.Fatalf("the stand-in library was called %d times for this device's objects", n)
	}

	checkLibrary(t, lc)
}

// checkLibrary: verbs this device does not provide, and objects that are
// not its own, reach the library found, or fail as the wrapper would.
func checkLibrary(t *testing.T, lc string) {
	var n int32
	_, err := verbs.GetDeviceListRaw(&n)
	var se *dynlib.SymbolError
	var ae *dynlib.ABIError
	switch lc {
	case libAbsent:
		if !errors.As(err, &se) || !strings.Contains(err.Error(), "cannot load libibverbs.so.1") {
			t.Fatalf("ibv_get_device_list without the library: %v", err)
		}
	case libRDMA:
		if !errors.As(err, &ae) || !ae.Other {
			t.Fatalf("ibv_get_device_list with rdma-core's library: %v; want the guard's *ABIError naming rdma-core", err)
		}
		for _, want := range []string{ae.Path + " is upstream rdma-core's libibverbs", "MLNX_OFED legacy verbs", "install MLNX_OFED 4.9 or earlier", "-entry infiniband/verbs.h"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("guard error %q lacks %q", err, want)
			}
		}
	case libStandIn:
		if !isCallErrno(err, "ibv_get_device_list", syscall.ENODEV) {
			t.Fatalf("ibv_get_device_list from the stand-in = %v, want its ENODEV", err)
		}
	case libLegacy:
		t.Logf("a real MLNX_OFED legacy libibverbs is installed: ibv_get_device_list = %d devices, %v; fake objects are not forwarded to it (it would dereference them)", n, err)
		return
	}

	// A context that is not this device's goes to the library's own
	// ibv_alloc_pd, directly and through the inline ibv_query_port's stub.
	fake := calloc[verbs.Context]()
	defer cfree(unsafe.Pointer(fake))
	first := (*uintptr)(unsafe.Pointer(fake))
	_, errPD := verbs.AllocPD(fake)
	errPort := verbs.IbvQueryPort(fake, 1, calloc[verbs.PortAttr]())
	if lc == libStandIn {
		if !isCallErrno(errPD, "ibv_alloc_pd", syscall.EHOSTDOWN) || errPort != nil || *first != 0x7171 {
			t.Fatalf("forwarded to the stand-in: ibv_alloc_pd %v, inline ibv_query_port %v, marker %#x; want EHOSTDOWN, nil, 0x7171", errPD, errPort, *first)
		}
		return
	}
	if !isCallErrno(errPD, "ibv_alloc_pd", syscall.ENOSYS) || !isCallErrno(errPort, "___ibv_query_port", syscall.ENOSYS) {
		t.Fatalf("a foreign context with the library %s: ibv_alloc_pd %v, inline ibv_query_port %v; want ENOSYS from both", lc, errPD, errPort)
	}
}

// standInSource is a stand-in for MLNX_OFED's legacy libibverbs.so.1,
// which cannot be installed here: it exports the legacy marker the guard
// looks for, a few verbs that leave a mark in their first argument, and
// a count of its calls.
const standInSource = `
#include <errno.h>
#include <stdint.h>
int standin_calls;
int ibv_exp_cmd_query_device(void) { return ENOSYS; }
void *ibv_get_device_list(int *n) { standin_calls++; if (n) *n = 0; errno = ENODEV; return 0; }
void *ibv_alloc_pd(uintptr_t *ctx) { standin_calls++; *ctx = 0x5a5a; errno = EHOSTDOWN; return 0; }
int ibv_query_port(uintptr_t *ctx, uint8_t port, void *attr) { standin_calls++; *ctx = 0x7171; return 0; }
`

// standInCalls returns a function counting the stand-in's calls so far
// (0 when it is not the library).
func standInCalls(t *testing.T, lc string) func() int32 {
	if lc != libStandIn {
		return func() int32 { return 0 }
	}
	p, err := dynlib.New("libibverbs.so.1").Lookup(&dynlib.Sym{Name: "standin_calls"})
	if err != nil {
		t.Fatalf("the stand-in library: %v", err)
	}
	base := *(*int32)(p)
	return func() int32 { return *(*int32)(p) - base }
}

// runCase runs TestExportedVerbs in a subprocess with lc, the command
// prefixed by wrap.
func runCase(t *testing.T, lc string, env []string, wrap ...string) {
	args := append(wrap, os.Args[0], "-test.run", "^TestExportedVerbs$", "-test.v", "-test.count", "1")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(append(os.Environ(), libCaseEnv+"="+lc), env...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestExportedVerbs") || !strings.Contains(string(out), "libibverbs.so.1 on this run: "+lc) {
		t.Fatalf("TestExportedVerbs with the library %s: %v\n%s", lc, err, out)
	}
	t.Logf("TestExportedVerbs passed with the library %s", lc)
}

// TestExportedVerbsWithoutLibrary runs TestExportedVerbs where
// libibverbs.so.1 cannot be loaded: in a private mount namespace with the
// installed file hidden under /dev/null (the loader then fails on it).
func TestExportedVerbsWithoutLibrary(t *testing.T) {
	if os.Getenv(libCaseEnv) != "" {
		t.Skip("SKIPPED: inside a subprocess of this test")
	}
	path, err := dynlib.New("libibverbs.so.1").Path()
	if err != nil {
		t.Skipf("SKIPPED: libibverbs.so.1 is absent here, so TestExportedVerbs already ran without it (%v)", err)
	}
	file, err := filepath.EvalSymlinks(path)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("unshare", "-rm", "true").CombinedOutput(); err != nil {
		t.Skipf("SKIPPED, NOT TESTED: private mount namespaces (unshare -rm) are not permitted here (%v: %s), so %s cannot be hidden", err, out, file)
	}
	runCase(t, libAbsent, nil, "unshare", "-rm", "sh", "-c", `mount --bind /dev/null "$1" && shift && exec "$@"`, "sh", file)
}

// TestExportedVerbsWithLegacyLibrary runs TestExportedVerbs with the
// stand-in for the legacy library first on the loader's path: the
// device's objects never reach it, others do.
func TestExportedVerbsWithLegacyLibrary(t *testing.T) {
	if os.Getenv(libCaseEnv) != "" {
		t.Skip("SKIPPED: inside a subprocess of this test")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "standin.c")
	if err := os.WriteFile(src, []byte(standInSource), 0o644); err != nil {
		t.Fatal(err)
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", filepath.Join(dir, "libibverbs.so.1"), src).CombinedOutput(); err != nil {
		t.Fatalf("building the stand-in: %v\n%s", err, out)
	}
	runCase(t, libStandIn, []string{"LD_LIBRARY_PATH=" + dir})
}

// TestCloseEndsBlockedGetAsyncEvent: Close while ibv_get_async_event
// blocks on the device's async_fd ends the call (-1, ECANCELED), and
// Close waits for it to leave before freeing the device.
func TestCloseEndsBlockedGetAsyncEvent(t *testing.T) {
	d, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	ctx := d.Context()
	ev := calloc[verbs.AsyncEvent]()
	defer cfree(unsafe.Pointer(ev))
	done := make(chan error)
	go func() { done <- verbs.GetAsyncEvent(ctx, ev) }()
	for d.inFlight() != 1 { // until the call is inside the device (blocked: nothing is pending)
		runtime.Gosched()
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !isCallErrno(err, "ibv_get_async_event", syscall.ECANCELED) {
		t.Fatalf("blocked ibv_get_async_event after Close = %v, want ECANCELED", err)
	}
	if n := d.inFlight(); n != -1 {
		t.Fatalf("the closed device is still registered (%d calls in flight)", n)
	}
}
