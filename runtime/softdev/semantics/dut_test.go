//go:build linux && cgo

package semantics

import (
	"errors"
	"reflect"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/verbsexp/verbsexp/abiutil"
	"github.com/verbsexp/verbsexp/abiutil/dynlib"
	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/device"
	"github.com/verbsexp/verbsexp/runtime/softdev"
)

// The device under test: a context opened on one of the two paths, and
// everything a case makes on it, through the generated package's verbs
// only (never a softdev method), so that the same calls reach softdev's
// stand-ins in-process and the vendor's libibverbs and the driver on the
// library path.

const (
	// within bounds every wait for completions or events that must come:
	// the vendor's suite polls for 10 s.
	within = 10 * time.Second
	// quietWindow is how long "nothing happens" is watched. A loopback
	// QP's work is done in one step of the device, a remote one's within
	// the timers a case sets; this is far beyond either.
	quietWindow = 100 * time.Millisecond
)

// dut is the device under test.
type dut struct {
	t    testing.TB
	path pathKind
	ctx  *verbs.Context
	port verbs.PortAttr
	gid  [16]byte

	// The default protection domain and buffer: 64 KiB registered with
	// local write and remote read, write and atomic access.
	pd  *verbs.PD
	buf []byte
	mr  *verbs.MR

	mem   arena
	idle  *verbs.CQ // see waitReadable
	qps   []*verbs.QP
	cqs   []*verbs.CQ
	chans []*verbs.CompChannel
	mrs   []*verbs.MR
	pds   []*verbs.PD
	close func() error
}

const bufSize = 1 << 16

// openDUT opens the device the path gives this process: softdev.Open
// in-process, the device libibverbs lists under softdev exec. Everything
// made on it is destroyed at the test's end, through the verbs.
func openDUT(t testing.TB, p pathKind) *dut {
	t.Helper()
	d := &dut{t: t, path: p}
	t.Cleanup(d.release)
	switch p {
	case inProcess:
		sd, err := softdev.Open(softdev.Autonomous(), softdev.InfiniBandPort())
		if err != nil {
			t.Fatalf("softdev.Open: %v", err)
		}
		d.ctx, d.close = sd.Context(), sd.Close
	case inProcessDefault:
		sd, err := softdev.Open()
		if err != nil {
			t.Fatalf("softdev.Open: %v", err)
		}
		d.ctx, d.close = sd.Context(), sd.Close
	case library:
		dev, err := device.Open("")
		if err != nil {
			t.Fatalf("runtime/device.Open under softdev exec: %v", err)
		}
		if dev.Name() != "softdev0" {
			t.Fatalf("libibverbs opened %s, want the launcher's softdev0", dev.Name())
		}
		d.ctx, d.close = dev.Context(), dev.Close
	}
	port := cAlloc[verbs.PortAttr](d)
	if err := verbs.QueryPort(d.ctx, 1, port); err != nil {
		t.Fatalf("ibv_query_port: %v", err)
	}
	d.port = *port
	gid := cAlloc[verbs.GID](d)
	if err := verbs.QueryGID(d.ctx, 1, 0, gid); err != nil {
		t.Fatalf("ibv_query_gid: %v", err)
	}
	d.gid = *gid.Raw()
	d.pd = d.allocPD()
	d.buf = d.buffer(bufSize)
	d.mr = d.regMR(d.pd, d.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	return d
}

// release destroys what the case left, newest first (a QP that a pending
// enable names is EBUSY until the manager is gone: go round), then closes
// the device; in-process, Close also reports anything left as a leak.
func (d *dut) release() {
	t := d.t
	if d.ctx != nil {
		left := d.qps
		for len(left) > 0 {
			var busy []*verbs.QP
			var last error
			for i := len(left) - 1; i >= 0; i-- {
				if err := verbs.DestroyQP(left[i]); err != nil {
					busy, last = append([]*verbs.QP{left[i]}, busy...), err
				}
			}
			if len(busy) == len(left) {
				t.Errorf("ibv_destroy_qp: %v", last)
				break
			}
			left = busy
		}
		for i := len(d.cqs) - 1; i >= 0; i-- {
			if err := verbs.DestroyCQ(d.cqs[i]); err != nil {
				t.Errorf("ibv_destroy_cq: %v", err)
			}
		}
		for _, ch := range d.chans {
			if err := verbs.DestroyCompChannel(ch); err != nil {
				t.Errorf("ibv_destroy_comp_channel: %v", err)
			}
		}
		for i := len(d.mrs) - 1; i >= 0; i-- {
			if err := verbs.DeregMR(d.mrs[i]); err != nil {
				t.Errorf("ibv_dereg_mr: %v", err)
			}
		}
		for i := len(d.pds) - 1; i >= 0; i-- {
			if err := verbs.DeallocPD(d.pds[i]); err != nil {
				t.Errorf("ibv_dealloc_pd: %v", err)
			}
		}
		if err := d.close(); err != nil {
			t.Errorf("closing the device: %v", err)
		}
		if d.path == library {
			if n := dynlib.ProvidedCount(); n != 0 {
				t.Errorf("%d functions served by softdev's in-process stand-ins on the library path, want none", n)
			}
		}
	}
	d.mem.free()
}

// forget drops obj from a cleanup list (the case destroyed it itself).
func forget[T comparable](list *[]T, obj T) {
	for i, o := range *list {
		if o == obj {
			*list = append((*list)[:i], (*list)[i+1:]...)
			return
		}
	}
}

// ---- memory the device and the verbs read: outside Go's heap ----

// arena hands out zeroed memory from anonymous mappings: WRs, SGE lists,
// attribute records and completion arrays (C structures that hold
// pointers, which Go's cgo rules keep out of Go memory), and data buffers
// to register.
type arena struct {
	maps [][]byte
	cur  []byte
	off  int
}

const arenaChunk = 1 << 20

func (a *arena) take(n, align int) []byte {
	if n > arenaChunk/4 {
		b := mmap(n)
		a.maps = append(a.maps, b)
		return b[:n:n]
	}
	off := (a.off + align - 1) &^ (align - 1)
	if a.cur == nil || off+n > len(a.cur) {
		a.cur = mmap(arenaChunk)
		a.maps = append(a.maps, a.cur)
		off = 0
	}
	a.off = off + n
	return a.cur[off : off+n : off+n]
}

func (a *arena) free() {
	for _, m := range a.maps {
		syscall.Munmap(m)
	}
	a.maps, a.cur = nil, nil
}

func mmap(n int) []byte {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		panic(err) // out of address space: nothing a test can do
	}
	return b
}

// cAlloc is a zeroed T outside the Go heap, for the test's life.
func cAlloc[T any](d *dut) *T {
	var z T
	b := d.mem.take(max(int(unsafe.Sizeof(z)), 1), 16)
	return (*T)(unsafe.Pointer(&b[0]))
}

// cAllocN is n zeroed Ts outside the Go heap.
func cAllocN[T any](d *dut, n int) []T {
	var z T
	b := d.mem.take(max(int(unsafe.Sizeof(z))*n, 1), 16)
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n)
}

// buffer is n zeroed bytes of a mapping of their own (page-aligned), to
// register.
func (d *dut) buffer(n int) []byte { return d.mem.take(max(n, arenaChunk/4+1), 4096)[:n] }

// ---- objects ----

func (d *dut) allocPD() *verbs.PD {
	d.t.Helper()
	pd, err := verbs.AllocPD(d.ctx)
	if err != nil {
		d.t.Fatalf("ibv_alloc_pd: %v", err)
	}
	d.pds = append(d.pds, pd)
	return pd
}

func (d *dut) regMR(pd *verbs.PD, b []byte, access verbs.AccessFlags) *verbs.MR {
	d.t.Helper()
	mr, err := verbs.RegMR(pd, unsafe.Pointer(&b[0]), uint64(len(b)), int32(access))
	if err != nil {
		d.t.Fatalf("ibv_reg_mr(%d bytes, access %#x): %v", len(b), uint32(access), err)
	}
	d.mrs = append(d.mrs, mr)
	return mr
}

// createCQ is ibv_create_cq of n entries, on a completion channel if ch
// is not nil, and then, with flags, ibv_exp_modify_cq setting them.
func (d *dut) createCQ(n int, ch *verbs.CompChannel, tag unsafe.Pointer, flags verbs.ExpCQCapFlags) *verbs.CQ {
	d.t.Helper()
	cq, err := verbs.CreateCQ(d.ctx, int32(n), tag, ch, 0)
	if err != nil {
		d.t.Fatalf("ibv_create_cq(%d): %v", n, err)
	}
	d.cqs = append(d.cqs, cq)
	if flags != 0 {
		a := cAlloc[verbs.ExpCQAttr](d)
		a.CompMask = uint32(verbs.ExpCQAttrCQCapFlags)
		a.CQCapFlags = uint32(flags)
		if err := verbs.ExpModifyCQ(cq, a, int32(verbs.ExpCQCapFlagsConst)); err != nil {
			d.t.Fatalf("ibv_exp_modify_cq(cap flags %#x): %v", uint32(flags), err)
		}
	}
	return cq
}

func (d *dut) cq(n int) *verbs.CQ { return d.createCQ(n, nil, nil, 0) }

func (d *dut) destroyCQ(cq *verbs.CQ) error {
	err := verbs.DestroyCQ(cq)
	if err == nil {
		forget(&d.cqs, cq)
	}
	return err
}

// qpSpec is what ibv_exp_create_qp is asked for.
type qpSpec struct {
	pd         *verbs.PD // nil: the default one
	scq, rcq   *verbs.CQ
	typ        verbs.QPType // 0: RC
	caps       verbs.QPCap  // zero: 64 WRs and 4 SGEs each way
	flags      verbs.ExpQPCreateFlags
	sigAll     bool
	maxInline  uint32
	noDefaults bool // caps as given, even zero
}

func (d *dut) createQP(s qpSpec) *verbs.QP {
	d.t.Helper()
	a := cAlloc[verbs.ExpQPInitAttr](d)
	a.SendCQ, a.RecvCQ = s.scq, s.rcq
	a.Cap = s.caps
	if a.Cap == (verbs.QPCap{}) && !s.noDefaults {
		a.Cap = verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4}
	}
	a.Cap.MaxInlineData = s.maxInline
	a.QPType = verbs.QptRC
	if s.typ != 0 {
		a.QPType = s.typ
	}
	if s.sigAll {
		a.SQSigAll = 1
	}
	a.PD = d.pd
	if s.pd != nil {
		a.PD = s.pd
	}
	a.CompMask = uint32(verbs.ExpQPInitAttrPD)
	if s.flags != 0 {
		a.CompMask |= uint32(verbs.ExpQPInitAttrCreateFlags)
		a.ExpCreateFlags = uint32(s.flags)
	}
	qp, err := verbs.ExpCreateQP(d.ctx, a)
	if err != nil {
		d.t.Fatalf("ibv_exp_create_qp(flags %#x): %v", uint32(s.flags), err)
	}
	d.qps = append(d.qps, qp)
	return qp
}

func (d *dut) destroyQP(qp *verbs.QP) error {
	err := verbs.DestroyQP(qp)
	if err == nil {
		forget(&d.qps, qp)
	}
	return err
}

func (d *dut) compChannel() *verbs.CompChannel {
	d.t.Helper()
	ch, err := verbs.CreateCompChannel(d.ctx)
	if err != nil {
		d.t.Fatalf("ibv_create_comp_channel: %v", err)
	}
	d.chans = append(d.chans, ch)
	return ch
}

// qpState is the QP's state as ibv_query_qp reports it.
func (d *dut) qpState(qp *verbs.QP) verbs.QPState {
	d.t.Helper()
	a, init := cAlloc[verbs.QPAttr](d), cAlloc[verbs.QPInitAttr](d)
	if err := verbs.QueryQP(qp, a, int32(verbs.QPStateConst), init); err != nil {
		d.t.Fatalf("ibv_query_qp: %v", err)
	}
	return a.QPState
}

// ---- connections ----

// addr is how a peer is named in an address vector: its LID on an
// InfiniBand port, its GID (a GRH) on an Ethernet one.
type addr struct {
	LID uint16
	GID [16]byte
}

func (d *dut) self() addr { return addr{LID: d.port.LID, GID: d.gid} }

// link is one side's connection attributes.
type link struct {
	sqPSN, rqPSN uint32 // this side's sq_psn, and the rq_psn it expects
	mtu          verbs.MTU
	timeout      uint8
	retry, rnr   uint8
	minRNR       uint8
	rdAtomic     uint8
	access       verbs.AccessFlags
	rtrOnly      bool // stop at RTR: a responder that never sends
}

func defaultLink() link {
	return link{mtu: verbs.MTU1024, timeout: 14, retry: 7, rnr: 7, minRNR: 12, rdAtomic: 4,
		access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic}
}

// ah is the address vector naming peer from port 1.
func (d *dut) ah(peer addr) verbs.AHAttr {
	ah := verbs.AHAttr{PortNum: 1, Dlid: peer.LID}
	if d.port.LinkLayer == verbs.LinkLayerEthernet {
		ah.Dlid, ah.IsGlobal, ah.GRH.HopLimit = 0, 1, 64
		*ah.GRH.Dgid.Raw() = peer.GID
	}
	return ah
}

// connect brings an RC or UC QP from RESET to RTS towards QP peerQPN at
// peer with ibv_modify_qp, as the vendor's programs do.
func (d *dut) connect(qp *verbs.QP, peer addr, peerQPN uint32, l link) {
	d.t.Helper()
	a := cAlloc[verbs.QPAttr](d)
	*a = verbs.QPAttr{QPState: verbs.QpsInit, PortNum: 1, QPAccessFlags: int32(l.access)}
	if err := verbs.ModifyQP(qp, a, int32(verbs.QPStateConst|verbs.QPPkeyIndex|verbs.QPPort|verbs.QPAccessFlags)); err != nil {
		d.t.Fatalf("ibv_modify_qp(QP %#x to INIT): %v", qp.QPNum, err)
	}
	*a = verbs.QPAttr{QPState: verbs.QpsRtr, PathMTU: l.mtu, DestQPNum: peerQPN, RQPSN: l.rqPSN,
		MaxDestRdAtomic: l.rdAtomic, MinRnrTimer: l.minRNR, AHAttr: d.ah(peer)}
	if err := verbs.ModifyQP(qp, a, int32(verbs.QPStateConst|verbs.QPAv|verbs.QPPathMTU|verbs.QPDestQPN|
		verbs.QPRQPSN|verbs.QPMaxDestRdAtomic|verbs.QPMinRnrTimer)); err != nil {
		d.t.Fatalf("ibv_modify_qp(QP %#x to RTR): %v", qp.QPNum, err)
	}
	if l.rtrOnly {
		return
	}
	*a = verbs.QPAttr{QPState: verbs.QpsRts, SQPSN: l.sqPSN, Timeout: l.timeout, RetryCnt: l.retry,
		RnrRetry: l.rnr, MaxRdAtomic: l.rdAtomic}
	if err := verbs.ModifyQP(qp, a, int32(verbs.QPStateConst|verbs.QPTimeout|verbs.QPRetryCnt|verbs.QPRnrRetry|
		verbs.QPSQPSN|verbs.QPMaxQPRdAtomic)); err != nil {
		d.t.Fatalf("ibv_modify_qp(QP %#x to RTS): %v", qp.QPNum, err)
	}
}

// ---- work requests ----

// sges is an SGE list over d.buf ranges {off, len} under lkey.
func (d *dut) sges(lkey uint32, ranges ...[2]int) *verbs.SGE {
	s := cAllocN[verbs.SGE](d, max(len(ranges), 1))
	for i, r := range ranges {
		s[i] = verbs.SGE{Addr: d.addr(r[0]), Length: uint32(r[1]), Lkey: lkey}
	}
	return &s[0]
}

// uintptrOf is the address of b's first byte.
func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

// addr is the address of d.buf[off].
func (d *dut) addr(off int) uint64 { return uint64(uintptr(unsafe.Pointer(&d.buf[0]))) + uint64(off) }

func (d *dut) send(id uint64, op verbs.ExpWROpcode, flags verbs.ExpSendFlags, sg *verbs.SGE, n int) *verbs.ExpSendWR {
	w := cAlloc[verbs.ExpSendWR](d)
	w.WRID, w.ExpOpcode, w.ExpSendFlags, w.SGList, w.NumSGE = id, op, uint64(flags), sg, int32(n)
	return w
}

// sendBuf is a SEND of d.buf[off:off+n].
func (d *dut) sendBuf(id uint64, flags verbs.ExpSendFlags, off, n int) *verbs.ExpSendWR {
	return d.send(id, verbs.ExpWRSend, flags, d.sges(d.mr.Lkey, [2]int{off, n}), 1)
}

func (d *dut) recv(id uint64, sg *verbs.SGE, n int) *verbs.RecvWR {
	w := cAlloc[verbs.RecvWR](d)
	w.WRID, w.SGList, w.NumSGE = id, sg, int32(n)
	return w
}

// recvBuf is a receive into d.buf[off:off+n].
func (d *dut) recvBuf(id uint64, off, n int) *verbs.RecvWR {
	return d.recv(id, d.sges(d.mr.Lkey, [2]int{off, n}), 1)
}

func (d *dut) wait(id uint64, cq *verbs.CQ, count int, flags verbs.ExpSendFlags) *verbs.ExpSendWR {
	w := d.send(id, verbs.ExpWRCQEWait, flags, nil, 0)
	w.Task.CQEWait().CQ, w.Task.CQEWait().CQCount = cq, int32(count)
	return w
}

func (d *dut) enable(id uint64, op verbs.ExpWROpcode, qp *verbs.QP, count int, flags verbs.ExpSendFlags) *verbs.ExpSendWR {
	w := d.send(id, op, flags, nil, 0)
	w.Task.WQEEnable().QP, w.Task.WQEEnable().WQECount = qp, int32(count)
	return w
}

// chain links WRs in order and returns the first.
func chain(ws ...*verbs.ExpSendWR) *verbs.ExpSendWR {
	for i := 0; i+1 < len(ws); i++ {
		ws[i].Next = ws[i+1]
	}
	return ws[0]
}

// post is ibv_exp_post_send; it returns the error and the WR bad_wr names.
func (d *dut) post(qp *verbs.QP, ws ...*verbs.ExpSendWR) (*verbs.ExpSendWR, error) {
	bad := cAlloc[*verbs.ExpSendWR](d)
	err := verbs.ExpPostSend(qp, chain(ws...), bad)
	return *bad, err
}

func (d *dut) postSend(qp *verbs.QP, ws ...*verbs.ExpSendWR) {
	d.t.Helper()
	if bad, err := d.post(qp, ws...); err != nil {
		var id uint64
		if bad != nil {
			id = bad.WRID
		}
		d.t.Fatalf("ibv_exp_post_send on QP %#x: %v (bad wr_id %d)", qp.QPNum, err, id)
	}
}

func (d *dut) postRecv(qp *verbs.QP, ws ...*verbs.RecvWR) {
	d.t.Helper()
	for i := 0; i+1 < len(ws); i++ {
		ws[i].Next = ws[i+1]
	}
	bad := cAlloc[*verbs.RecvWR](d)
	if err := verbs.PostRecv(qp, ws[0], bad); err != nil {
		d.t.Fatalf("ibv_post_recv on QP %#x: %v", qp.QPNum, err)
	}
}

// ---- completions ----

// poll drains cq once with ibv_exp_poll_cq.
func (d *dut) poll(cq *verbs.CQ) []verbs.ExpWC {
	d.t.Helper()
	wc := cAllocN[verbs.ExpWC](d, 16)
	var out []verbs.ExpWC
	for {
		n, err := verbs.ExpPollCQ(cq, wc)
		if err != nil {
			d.t.Fatalf("ibv_exp_poll_cq: %v", err)
		}
		out = append(out, wc[:n]...)
		if int(n) < len(wc) {
			return out
		}
	}
}

// await polls cq until want completions came, for up to d; it fails the
// test with what came when they did not.
func (d *dut) awaitWithin(cq *verbs.CQ, want int, limit time.Duration) []verbs.ExpWC {
	d.t.Helper()
	var got []verbs.ExpWC
	for end := time.Now().Add(limit); ; {
		got = append(got, d.poll(cq)...)
		if len(got) >= want {
			return got
		}
		if time.Now().After(end) {
			d.t.Fatalf("%d of %d completions in %v: %+v", len(got), want, limit, sum(got))
		}
		time.Sleep(20 * time.Microsecond)
	}
}

func (d *dut) await(cq *verbs.CQ, want int) []verbs.ExpWC { return d.awaitWithin(cq, want, within) }

// quiet polls cq for the quiet window and returns whatever came.
func (d *dut) quiet(cq *verbs.CQ) []verbs.ExpWC { return d.quietFor(cq, quietWindow) }

// quietFor polls cq for span and returns whatever came.
func (d *dut) quietFor(cq *verbs.CQ, span time.Duration) []verbs.ExpWC {
	d.t.Helper()
	var got []verbs.ExpWC
	for end := time.Now().Add(span); time.Now().Before(end); time.Sleep(time.Millisecond) {
		got = append(got, d.poll(cq)...)
	}
	return got
}

// wcSum summarises a completion for comparison.
type wcSum struct {
	ID     uint64
	Status verbs.WCStatus
	Op     verbs.ExpWCOpcode
	Len    uint32
	QP     uint32
}

func sum(ws []verbs.ExpWC) []wcSum {
	out := make([]wcSum, len(ws))
	for i, w := range ws {
		out[i] = wcSum{w.WRID, w.Status, w.ExpOpcode, byteLen(&w), w.QPNum}
	}
	return out
}

func equalSums(a, b []wcSum) bool { return reflect.DeepEqual(a, b) }

// byteLen reads struct ibv_exp_wc.byte_len: a field up to MLNX_OFED 4.3,
// a member of an anonymous union (accessor ByteLen()) from 4.6 on.
func byteLen(w *verbs.ExpWC) uint32 {
	v := reflect.ValueOf(w)
	if f := v.Elem().FieldByName("ByteLen"); f.IsValid() {
		return uint32(f.Uint())
	}
	return uint32(v.MethodByName("ByteLen").Call(nil)[0].Uint())
}

// ---- events ----

// readable polls fd (twice in one call, as the vendor's suite does, so
// both entries are counted) for up to wait and returns poll(2)'s count.
func readable(t testing.TB, fd int, wait time.Duration) int {
	t.Helper()
	type pollFD struct {
		fd      int32
		events  int16
		revents int16
	}
	fds := []pollFD{{fd: int32(fd), events: 1}, {fd: int32(fd), events: 1}} // POLLIN
	ts := syscall.NsecToTimespec(int64(wait))
	for {
		n, _, e := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), uintptr(len(fds)),
			uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		if e == syscall.EINTR { // the Go runtime's signals interrupt it
			continue
		}
		if e != 0 {
			t.Fatalf("ppoll: %v", e)
		}
		return int(n)
	}
}

// waitReadable polls fd (as readable does) until it is readable, for up
// to limit, and polls an idle CQ of the device meanwhile, as a program
// waiting for an event may poll its CQs: on an HCA, or on a softdev that
// runs its queues in its own thread, those polls change nothing; on the
// in-process default device, whose QPs' send queues run in polls until
// one connects to another device, they are what runs them. It returns
// readable's count, 0 if fd stayed unreadable.
func (d *dut) waitReadable(fd int, limit time.Duration) int {
	d.t.Helper()
	if d.idle == nil {
		d.idle = d.cq(1)
	}
	for end := time.Now().Add(limit); ; {
		if got := d.poll(d.idle); len(got) != 0 {
			d.t.Fatalf("a CQ no QP uses gave %+v", sum(got))
		}
		if n := readable(d.t, fd, time.Millisecond); n != 0 || time.Now().After(end) {
			return n
		}
	}
}

// event reads the next asynchronous event (ibv_get_async_event), which
// must come within the bound, and acknowledges it.
func (d *dut) event(limit time.Duration) verbs.AsyncEvent {
	d.t.Helper()
	if d.waitReadable(int(d.ctx.AsyncFD), limit) == 0 {
		d.t.Fatalf("no asynchronous event within %v", limit)
	}
	ev := cAlloc[verbs.AsyncEvent](d)
	if err := verbs.GetAsyncEvent(d.ctx, ev); err != nil {
		d.t.Fatalf("ibv_get_async_event: %v", err)
	}
	got := *ev
	if err := verbs.AckAsyncEvent(ev); err != nil {
		d.t.Fatalf("ibv_ack_async_event: %v", err)
	}
	return got
}

// noEvent checks that no asynchronous event comes in the quiet window.
func (d *dut) noEvent(why string) {
	d.t.Helper()
	if n := d.waitReadable(int(d.ctx.AsyncFD), quietWindow); n != 0 {
		ev := d.event(0)
		d.t.Fatalf("an asynchronous event %s: %v", why, ev.EventType)
	}
}

// isCallErrno says whether err is fn's failure with errno e.
func isCallErrno(err error, fn string, e syscall.Errno) bool {
	var ce *abiutil.CallError
	return errors.As(err, &ce) && ce.Func == fn && ce.Errno == e
}
