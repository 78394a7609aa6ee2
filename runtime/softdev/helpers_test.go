//go:build linux && cgo

package softdev

import (
	"errors"
	"reflect"
	"syscall"
	"testing"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/device"
)

// fixture is an open device with a PD and one registered C buffer; every
// object it creates is destroyed at cleanup, and Close must then report
// no leaks.
type fixture struct {
	t    testing.TB
	d    *Device
	pd   *verbs.PD
	buf  []byte // C memory, registered as mr with every access
	mr   *verbs.MR
	free []unsafe.Pointer
	qps  []*verbs.QP
	cqs  []*verbs.CQ
	mrs  []*verbs.MR
	ahs  []*verbs.AH
	srqs []*verbs.SRQ
	gone bool // its device was closed under it (kill): nothing left to destroy
}

const bufSize = 1 << 16

// newFixture opens a device with synchronous completions (before the
// options, which may say otherwise): these tests pin softdev's rules
// step by step, a poll returning what the run it started produced.
// asyncFixture opens one as a program does.
func newFixture(t testing.TB, opts ...DeviceOption) *fixture {
	t.Helper()
	return asyncFixture(t, append([]DeviceOption{SyncCompletions()}, opts...)...)
}

// asyncFixture opens a device with the default, asynchronous completions.
func asyncFixture(t testing.TB, opts ...DeviceOption) *fixture {
	t.Helper()
	d, err := Open(opts...)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, d: d}
	if f.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	f.buf = callocSlice[byte](bufSize)
	f.free = append(f.free, unsafe.Pointer(&f.buf[0]))
	f.mr = f.reg(f.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	t.Cleanup(f.close)
	return f
}

// kill closes the device with everything in it, as a process that dies
// takes its device with it.
func (f *fixture) kill() {
	f.gone = true
	f.d.Close()
}

func (f *fixture) close() {
	t := f.t
	if f.gone {
		for _, p := range f.free {
			cfree(p)
		}
		return
	}
	// Newest first; a QP a pending enable of another names is EBUSY until
	// that one is gone, so go round until nothing more can be destroyed.
	left := f.qps
	for len(left) > 0 {
		var busy []*verbs.QP
		var last error
		for i := len(left) - 1; i >= 0; i-- {
			if err := f.d.DestroyQP(left[i]); err != nil {
				busy, last = append([]*verbs.QP{left[i]}, busy...), err
			}
		}
		if len(busy) == len(left) {
			t.Errorf("DestroyQP: %v", last)
			break
		}
		left = busy
	}
	for _, srq := range f.srqs {
		if err := f.d.DestroySRQ(srq); err != nil {
			t.Errorf("DestroySRQ: %v", err)
		}
	}
	for _, ah := range f.ahs {
		if err := verbs.DestroyAH(ah); err != nil {
			t.Errorf("ibv_destroy_ah: %v", err)
		}
	}
	for _, cq := range f.cqs {
		if err := f.d.DestroyCQ(cq); err != nil {
			t.Errorf("DestroyCQ: %v", err)
		}
	}
	for _, mr := range f.mrs {
		if err := f.d.DeregMR(mr); err != nil {
			t.Errorf("DeregMR: %v", err)
		}
	}
	if err := f.d.DeallocPD(f.pd); err != nil {
		t.Errorf("DeallocPD: %v", err)
	}
	if err := f.d.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	for _, p := range f.free {
		cfree(p)
	}
}

// alloc returns a zeroed T in C memory, freed at cleanup.
func alloc[T any](f *fixture) *T {
	p := calloc[T]()
	f.free = append(f.free, unsafe.Pointer(p))
	return p
}

// allocN returns n zeroed Ts in C memory, freed at cleanup.
func allocN[T any](f *fixture, n int) []T {
	s := callocSlice[T](n)
	f.free = append(f.free, unsafe.Pointer(&s[0]))
	return s
}

func (f *fixture) reg(b []byte, access verbs.AccessFlags) *verbs.MR {
	f.t.Helper()
	mr, err := f.d.RegMR(f.pd, b, access)
	if err != nil {
		f.t.Fatalf("RegMR: %v", err)
	}
	f.mrs = append(f.mrs, mr)
	return mr
}

func (f *fixture) cq(n int, opts ...device.CQOption) *verbs.CQ {
	f.t.Helper()
	cq, err := f.d.CreateCQ(n, opts...)
	if err != nil {
		f.t.Fatalf("CreateCQ: %v", err)
	}
	f.cqs = append(f.cqs, cq)
	return cq
}

func (f *fixture) qp(scq, rcq *verbs.CQ, opts ...device.QPOption) *verbs.QP {
	f.t.Helper()
	qp, err := f.d.CreateQP(f.pd, scq, rcq, opts...)
	if err != nil {
		f.t.Fatalf("CreateQP: %v", err)
	}
	f.qps = append(f.qps, qp)
	return qp
}

// pair is two connected QPs, each with its own CQ for sends and receives.
type pair struct {
	a, b     *verbs.QP
	cqa, cqb *verbs.CQ
}

func (f *fixture) pair(aOpts, bOpts []device.QPOption) pair {
	f.t.Helper()
	var p pair
	p.cqa, p.cqb = f.cq(256), f.cq(256)
	p.a = f.qp(p.cqa, p.cqa, aOpts...)
	p.b = f.qp(p.cqb, p.cqb, bOpts...)
	if err := device.ConnectPair(p.a, p.b); err != nil {
		f.t.Fatalf("Connect: %v", err)
	}
	return p
}

// mgr is a cross-channel QP connected to itself, for WAIT and ENABLE.
func (f *fixture) mgr() (*verbs.QP, *verbs.CQ) {
	f.t.Helper()
	cq := f.cq(256)
	qp := f.qp(cq, cq, device.CrossChannel())
	if err := device.ConnectPair(qp, qp); err != nil {
		f.t.Fatalf("Connect: %v", err)
	}
	return qp, cq
}

// addr is the address of f.buf[off].
func (f *fixture) addr(off int) uint64 { return uint64(uintptr(unsafe.Pointer(&f.buf[off]))) }

// sges builds an SGE list in C memory over f.buf ranges {off, len}.
func (f *fixture) sges(lkey uint32, ranges ...[2]int) *verbs.SGE {
	return f.sgesOver(f.buf, lkey, ranges...)
}

// sgesOver is sges over the ranges of buf (C memory).
func (f *fixture) sgesOver(buf []byte, lkey uint32, ranges ...[2]int) *verbs.SGE {
	s := allocN[verbs.SGE](f, max(len(ranges), 1))
	for i, r := range ranges {
		s[i] = verbs.SGE{Addr: uint64(uintptr(unsafe.Pointer(&buf[r[0]]))), Length: uint32(r[1]), Lkey: lkey}
	}
	return &s[0]
}

// send builds an exp send WR in C memory.
func (f *fixture) send(id uint64, op verbs.ExpWROpcode, flags verbs.ExpSendFlags, sg *verbs.SGE, n int) *verbs.ExpSendWR {
	w := alloc[verbs.ExpSendWR](f)
	w.WRID = id
	w.ExpOpcode = op
	w.ExpSendFlags = uint64(flags)
	w.SGList = sg
	w.NumSGE = int32(n)
	return w
}

func (f *fixture) recv(id uint64, sg *verbs.SGE, n int) *verbs.RecvWR {
	w := alloc[verbs.RecvWR](f)
	w.WRID = id
	w.SGList = sg
	w.NumSGE = int32(n)
	return w
}

func (f *fixture) wait(id uint64, cq *verbs.CQ, count int, flags verbs.ExpSendFlags) *verbs.ExpSendWR {
	w := f.send(id, verbs.ExpWRCQEWait, flags, nil, 0)
	w.Task.CQEWait().CQ = cq
	w.Task.CQEWait().CQCount = int32(count)
	return w
}

func (f *fixture) enable(id uint64, op verbs.ExpWROpcode, qp *verbs.QP, count int, flags verbs.ExpSendFlags) *verbs.ExpSendWR {
	w := f.send(id, op, flags, nil, 0)
	w.Task.WQEEnable().QP = qp
	w.Task.WQEEnable().WQECount = int32(count)
	return w
}

func (f *fixture) postSend(qp *verbs.QP, ws ...*verbs.ExpSendWR) {
	f.t.Helper()
	bad := alloc[*verbs.ExpSendWR](f)
	if err := verbs.ExpPostSend(qp, link(ws...), bad); err != nil {
		f.t.Fatalf("ExpPostSend: %v (bad wr_id %d)", err, (*bad).WRID)
	}
}

func (f *fixture) postRecv(qp *verbs.QP, ws ...*verbs.RecvWR) {
	f.t.Helper()
	for i := 0; i+1 < len(ws); i++ {
		ws[i].Next = ws[i+1]
	}
	bad := alloc[*verbs.RecvWR](f)
	if err := verbs.PostRecv(qp, ws[0], bad); err != nil {
		f.t.Fatalf("PostRecv: %v", err)
	}
}

// poll drains cq through ExpPollCQ (which runs the device first).
func (f *fixture) poll(cq *verbs.CQ) []verbs.ExpWC {
	f.t.Helper()
	wc := allocN[verbs.ExpWC](f, 16)
	var out []verbs.ExpWC
	for {
		n, err := verbs.ExpPollCQ(cq, wc)
		if err != nil {
			f.t.Fatalf("ExpPollCQ: %v", err)
		}
		out = append(out, wc[:n]...)
		if int(n) < len(wc) {
			return out
		}
	}
}

// wcs summarises completions for comparison.
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

// byteLen reads struct ibv_exp_wc.byte_len: a field (ByteLen) up to
// MLNX_OFED 4.3, a member of an anonymous union (accessor ByteLen()) from
// 4.6 on. These tests also run on packages generated from every release
// (tests.TestRealReleases), so they take whichever the package has.
func byteLen(w *verbs.ExpWC) uint32 {
	v := reflect.ValueOf(w)
	if f := v.Elem().FieldByName("ByteLen"); f.IsValid() {
		return uint32(f.Uint())
	}
	return uint32(v.MethodByName("ByteLen").Call(nil)[0].Uint())
}

func (f *fixture) progress() int {
	f.t.Helper()
	n, err := f.d.Progress()
	if err != nil {
		f.t.Fatalf("Progress: %v", err)
	}
	return n
}

func isErrno(err error, e syscall.Errno) bool { return errors.Is(err, e) }
