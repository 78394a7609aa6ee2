//go:build linux && cgo

package softdev

import (
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/device"
)

// The misuse an attacker or a careless user tries on the device, each
// with the precise error it must give and, where memory is named, proof
// that nothing outside the buffers was touched: data lives between
// PROT_NONE guard pages (a stray write faults the test) and everything
// not meant to change is checked against canary bytes.

const canary = 0xa5

// guarded returns n bytes of canary-filled memory whose last byte is
// followed by a PROT_NONE page, and, when n is a multiple of the page
// size, whose first byte follows one.
func guarded(t testing.TB, n int) []byte {
	t.Helper()
	pg := os.Getpagesize()
	pages := (n + pg - 1) / pg
	mem, err := syscall.Mmap(-1, 0, (pages+2)*pg, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Munmap(mem) })
	for _, g := range [][]byte{mem[:pg], mem[(pages+1)*pg:]} {
		if err := syscall.Mprotect(g, syscall.PROT_NONE); err != nil {
			t.Fatal(err)
		}
	}
	b := mem[(pages+1)*pg-n : (pages+1)*pg]
	for i := range b {
		b[i] = canary
	}
	return b
}

// untouched reports the first byte of b outside [keepLo, keepHi) that is
// not the canary.
func untouched(b []byte, keepLo, keepHi int) error {
	for i, v := range b {
		if (i < keepLo || i >= keepHi) && v != canary {
			return fmt.Errorf("byte %d of the %d-byte buffer was written (%#x)", i, len(b), v)
		}
	}
	return nil
}

func addrOf(b []byte, off int) uint64 { return uint64(uintptr(unsafe.Pointer(&b[0]))) + uint64(off) }

// TestMisuseNilAndClosedDevice: every method of a nil *Device (what a
// failed Open returns) and of a closed one is an error, never a nil
// dereference or a use of the freed context.
func TestMisuseNilAndClosedDevice(t *testing.T) {
	live := newFixture(t) // real objects to hand to the dead devices
	cq := live.cq(4)
	qp := live.qp(cq, cq)
	ev := alloc[verbs.AsyncEvent](live)
	attr := alloc[verbs.QPAttr](live)
	closed, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	for _, dev := range []struct {
		name string
		d    *Device
		want error
	}{{"nil", nil, ErrNilDevice}, {"closed", closed, ErrClosed}} {
		d := dev.d
		calls := map[string]func() error{
			"Close":     d.Close,
			"AllocPD":   func() error { _, err := d.AllocPD(); return err },
			"DeallocPD": func() error { return d.DeallocPD(live.pd) },
			"RegMR": func() error {
				_, err := d.RegMR(live.pd, live.buf[:64], verbs.AccessLocalWrite)
				return err
			},
			"DeregMR":       func() error { return d.DeregMR(live.mr) },
			"CreateCQ":      func() error { _, err := d.CreateCQ(4); return err },
			"DestroyCQ":     func() error { return d.DestroyCQ(cq) },
			"CreateQP":      func() error { _, err := d.CreateQP(live.pd, cq, cq); return err },
			"DestroyQP":     func() error { return d.DestroyQP(qp) },
			"ModifyQP":      func() error { return d.ModifyQP(qp, attr, verbs.QPStateConst) },
			"QueryPort":     func() error { _, err := d.QueryPort(1); return err },
			"Progress":      func() error { _, err := d.Progress(); return err },
			"CQStats":       func() error { _, err := d.CQStats(cq); return err },
			"QPStats":       func() error { _, _, _, err := d.QPStats(qp); return err },
			"GetAsyncEvent": func() error { _, err := d.GetAsyncEvent(); return err },
			"AckAsyncEvent": func() error { return d.AckAsyncEvent(ev) },
		}
		for name, call := range calls {
			if err := call(); !errors.Is(err, dev.want) {
				t.Errorf("%s device: %s = %v, want %v", dev.name, name, err, dev.want)
			}
		}
		if d.Context() != nil || d.AsyncFD() != -1 || d.Limits() != (Limits{}) {
			t.Errorf("%s device: Context %p, AsyncFD %d, Limits %+v; want nil, -1, zero", dev.name, d.Context(), d.AsyncFD(), d.Limits())
		}
		if task, wr, errno := d.TaskFailure(); task != nil || wr != nil || errno != 0 {
			t.Errorf("%s device: TaskFailure %p %p %v", dev.name, task, wr, errno)
		}
	}
	// The nil Context a closed device gives is refused by the wrappers
	// (it used to be the freed context).
	if err := verbs.ExpPostTask(closed.Context(), alloc[verbs.ExpTask](live), nil); !isErrno(err, syscall.EINVAL) {
		t.Errorf("ExpPostTask on a closed device's Context(): %v", err)
	}
	// The live objects were not touched by any of it.
	if _, s, _, err := live.d.QPStats(qp); err != nil || s.Posted != 0 {
		t.Errorf("the live device's QP: %+v %v", s, err)
	}
}

// TestMisuseOptionsAndSizes: nil options are no options; limits and
// sizes outside what the C fields hold are EINVAL, never truncated.
func TestMisuseOptionsAndSizes(t *testing.T) {
	d, err := Open(nil, MaxCQE(64), nil)
	if err != nil {
		t.Fatalf("Open with nil options: %v", err)
	}
	defer d.Close()
	if l := d.Limits(); l.MaxCQE != 64 || l.MaxQPWR != DefaultLimits.MaxQPWR {
		t.Errorf("limits %+v", l)
	}
	cq, err := d.CreateCQ(4, nil, device.CrossChannelCQ(), nil)
	if err != nil {
		t.Fatalf("CreateCQ with nil options: %v", err)
	}
	defer d.DestroyCQ(cq)
	pd, _ := d.AllocPD()
	defer d.DeallocPD(pd)
	qp, err := d.CreateQP(pd, cq, cq, nil, device.CrossChannel(), nil)
	if err != nil {
		t.Fatalf("CreateQP with nil options: %v", err)
	}
	defer d.DestroyQP(qp)

	for _, opt := range []DeviceOption{
		MaxQPWR(0), MaxQPWR(-1), MaxQPWR(1<<24 + 1), MaxQPWR(math.MaxInt32 + 1), MaxQPWR(1<<32 + 1), MaxQPWR(math.MaxInt), MaxQPWR(math.MinInt),
		MaxCQE(0), MaxCQE(-1), MaxCQE(1<<24 + 1), MaxCQE(1<<32 + 1), MaxCQE(math.MaxInt), MaxCQE(math.MinInt),
	} {
		var c deviceConfig
		opt(&c)
		if d2, err := Open(opt); !isErrno(err, syscall.EINVAL) || d2 != nil {
			t.Errorf("Open(%+v) = %v, %v; want EINVAL", c.limits, d2, err)
		}
	}
	for _, n := range []int{0, -1, math.MinInt, 65, 1<<32 + 1, math.MaxInt32 + 1, math.MaxInt} {
		if c, err := d.CreateCQ(n); !isErrno(err, syscall.EINVAL) {
			t.Errorf("CreateCQ(%d) on a 64-CQE device = %v, %v; want EINVAL", n, c, err)
		}
	}
	for _, c := range []device.Caps{
		{SendWR: -1}, {RecvWR: math.MinInt}, {SendSGE: -1}, {RecvSGE: 1 << 32}, {Inline: math.MaxInt},
		{SendWR: 1 << 32}, {SendWR: 1<<32 + 2}, {SendSGE: 65}, {RecvSGE: 65}, {Inline: 1025},
		{SendWR: DefaultLimits.MaxQPWR + 1}, {RecvWR: math.MaxUint32},
	} {
		if q, err := d.CreateQP(pd, cq, cq, device.QPCaps(c)); !isErrno(err, syscall.EINVAL) {
			t.Errorf("CreateQP with %+v = %v, %v; want EINVAL", c, q, err)
		}
	}
	// Registration: lengths, access bits, ranges. Through the layer a
	// range is a slice, so only an empty one is a wrong length; the
	// ranges a slice cannot express go to the verb, which reaches the
	// same code.
	buf := guarded(t, 4096)
	if mr, err := d.RegMR(pd, buf[:0], verbs.AccessLocalWrite); !isErrno(err, syscall.EINVAL) {
		t.Errorf("RegMR of an empty slice = %v, %v; want EINVAL", mr, err)
	}
	base := unsafe.Pointer(&buf[0])
	for _, c := range []struct {
		name   string
		addr   unsafe.Pointer
		n      int
		access verbs.AccessFlags
		want   syscall.Errno
	}{
		{"zero length", base, 0, 0, syscall.EINVAL},
		{"nil address", nil, 64, 0, syscall.EFAULT},
		{"one byte past the buffer", base, 4097, 0, syscall.EFAULT},
		{"MaxInt length", base, math.MaxInt, 0, syscall.EFAULT},
		{"range wrapping the address space", unsafe.Add(base, 0), math.MaxInt, verbs.AccessLocalWrite, syscall.EFAULT},
		{"unknown access bit", base, 64, 1 << 20, syscall.EINVAL},
		{"remote write without local write", base, 64, verbs.AccessRemoteWrite, syscall.EINVAL},
	} {
		if mr, err := verbs.RegMR(pd, c.addr, uint64(c.n), int32(c.access)); !isErrno(err, c.want) {
			t.Errorf("RegMR %s = %v, %v; want %v", c.name, mr, err, c.want)
		}
	}
	if err := untouched(buf, 0, 0); err != nil {
		t.Error(err)
	}
}

// TestMisuseForeignAndStale: objects of another device, and PDs and MRs
// already freed, are EINVAL everywhere; the other device's objects are
// left as they were.
func TestMisuseForeignAndStale(t *testing.T) {
	f, g := newFixture(t), newFixture(t)
	cq, gcq := f.cq(4), g.cq(4)
	qp, gqp := f.qp(cq, cq), g.qp(gcq, gcq)
	attr := alloc[verbs.QPAttr](f)
	attr.QPState = verbs.QpsErr
	stalePD, _ := f.d.AllocPD()
	if err := f.d.DeallocPD(stalePD); err != nil {
		t.Fatal(err)
	}
	staleMR, err := f.d.RegMR(f.pd, f.buf[:64], 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.d.DeregMR(staleMR); err != nil {
		t.Fatal(err)
	}
	buf := f.buf[:64]
	for name, call := range map[string]func() error{
		"DeallocPD(their PD)":     func() error { return f.d.DeallocPD(g.pd) },
		"DeallocPD(nil)":          func() error { return f.d.DeallocPD(nil) },
		"DeallocPD twice":         func() error { return f.d.DeallocPD(stalePD) },
		"RegMR(their PD)":         func() error { _, err := f.d.RegMR(g.pd, buf, 0); return err },
		"RegMR(nil PD)":           func() error { _, err := f.d.RegMR(nil, buf, 0); return err },
		"RegMR(freed PD)":         func() error { _, err := f.d.RegMR(stalePD, buf, 0); return err },
		"DeregMR(their MR)":       func() error { return f.d.DeregMR(g.mr) },
		"DeregMR(nil)":            func() error { return f.d.DeregMR(nil) },
		"DeregMR twice":           func() error { return f.d.DeregMR(staleMR) },
		"CreateQP(their PD)":      func() error { _, err := f.d.CreateQP(g.pd, cq, cq); return err },
		"CreateQP(freed PD)":      func() error { _, err := f.d.CreateQP(stalePD, cq, cq); return err },
		"CreateQP(nil PD)":        func() error { _, err := f.d.CreateQP(nil, cq, cq); return err },
		"CreateQP(their send CQ)": func() error { _, err := f.d.CreateQP(f.pd, gcq, cq); return err },
		"CreateQP(their recv CQ)": func() error { _, err := f.d.CreateQP(f.pd, cq, gcq); return err },
		"CreateQP(nil CQs)":       func() error { _, err := f.d.CreateQP(f.pd, nil, nil); return err },
		"DestroyCQ(their CQ)":     func() error { return f.d.DestroyCQ(gcq) },
		"DestroyQP(their QP)":     func() error { return f.d.DestroyQP(gqp) },
		"ModifyQP(their QP)":      func() error { return f.d.ModifyQP(gqp, attr, verbs.QPStateConst) },
		"ModifyQP(nil QP)":        func() error { return f.d.ModifyQP(nil, attr, verbs.QPStateConst) },
		"ModifyQP(nil attr)":      func() error { return f.d.ModifyQP(qp, nil, verbs.QPStateConst) },
		"CQStats(their CQ)":       func() error { _, err := f.d.CQStats(gcq); return err },
		"QPStats(their QP)":       func() error { _, _, _, err := f.d.QPStats(gqp); return err },
		"QueryPort(0)":            func() error { _, err := f.d.QueryPort(0); return err },
		"QueryPort(255)":          func() error { _, err := f.d.QueryPort(255); return err },
		"AckAsyncEvent(nil)":      func() error { return f.d.AckAsyncEvent(nil) },
		"AckAsyncEvent, no event": func() error { return f.d.AckAsyncEvent(alloc[verbs.AsyncEvent](f)) },
		"ExpModifyQP to RTR from RESET": func() error {
			a := alloc[verbs.ExpQPAttr](f)
			a.QPState = verbs.QpsRtr
			return verbs.ExpModifyQP(qp, a, uint64(verbs.ExpQPState))
		},
		"ExpModifyCQ unknown mask": func() error { return verbs.ExpModifyCQ(cq, alloc[verbs.ExpCQAttr](f), 1<<30) },
	} {
		if err := call(); !isErrno(err, syscall.EINVAL) {
			t.Errorf("%s = %v, want EINVAL", name, err)
		}
	}
	// Still busy: EBUSY, and nothing freed.
	if err := f.d.DeallocPD(f.pd); !isErrno(err, syscall.EBUSY) {
		t.Errorf("DeallocPD with an MR and a QP in it: %v", err)
	}
	if err := f.d.DestroyCQ(cq); !isErrno(err, syscall.EBUSY) {
		t.Errorf("DestroyCQ used by a QP: %v", err)
	}
	// The other device is intact: its QP, CQ, PD and MR still work.
	if st, _, _, err := g.d.QPStats(gqp); err != nil || st != verbs.QpsReset {
		t.Errorf("their QP: %v %v", st, err)
	}
	if _, err := g.d.CQStats(gcq); err != nil {
		t.Errorf("their CQ: %v", err)
	}
	if mr, err := g.d.RegMR(g.pd, g.buf[:64], 0); err != nil {
		t.Errorf("their PD: %v", err)
	} else if err := g.d.DeregMR(mr); err != nil {
		t.Error(err)
	}
}

// TestMisuseConnect: nil QPs are refused before either QP changes state
// (QPs of two devices connect over the wire: see wire_test.go).
func TestMisuseConnect(t *testing.T) {
	f, g := newFixture(t), newFixture(t)
	cq, gcq := f.cq(4), g.cq(4)
	a, b := f.qp(cq, cq), f.qp(cq, cq)
	theirs := g.qp(gcq, gcq)
	for _, c := range [][2]*verbs.QP{{nil, nil}, {a, nil}, {nil, a}, {nil, theirs}} {
		if err := device.ConnectPair(c[0], c[1]); !isErrno(err, syscall.EINVAL) {
			t.Errorf("device.ConnectPair(%p, %p) = %v, want EINVAL", c[0], c[1], err)
		}
	}
	for _, q := range []struct {
		d  *Device
		qp *verbs.QP
	}{{f.d, a}, {f.d, b}, {g.d, theirs}} {
		if st, _, _, _ := q.d.QPStats(q.qp); st != verbs.QpsReset {
			t.Errorf("QP %#x moved to %v by a refused Connect", q.qp.QPNum, st)
		}
	}
	if err := device.ConnectPair(a, b); err != nil {
		t.Fatalf("Connect of two QPs of one device: %v", err)
	}
}

// TestMisuseConcurrent: the same object freed, destroyed or closed from
// several goroutines at once: exactly one succeeds, the others get
// EINVAL (or ErrClosed); a registration racing the PD's deallocation
// either wins (the PD is then busy) or is refused. No double free, no
// use of a freed record (these aborted the process before).
func TestMisuseConcurrent(t *testing.T) {
	// Enough rounds that the unfixed device aborted on every run (the
	// window between its check and its free is a few instructions);
	// fewer where each round registers memory (RegMR reads
	// /proc/self/maps) or opens a device.
	rounds, regs, slow := 30000, 2000, 300
	if testing.Short() {
		rounds, regs, slow = 2000, 200, 50
	}
	// race runs fn in n goroutines at once and returns their errors.
	race := func(n int, fn func(i int) error) []error {
		errs := make([]error, n)
		var start, done sync.WaitGroup
		start.Add(1)
		for i := range n {
			done.Add(1)
			go func() {
				defer done.Done()
				start.Wait()
				errs[i] = fn(i)
			}()
		}
		start.Done()
		done.Wait()
		return errs
	}
	// one checks that exactly one error is nil and the rest are want.
	one := func(what string, errs []error, want error) {
		t.Helper()
		ok := 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case !errors.Is(err, want):
				t.Fatalf("%s: %v, want nil or %v", what, err, want)
			}
		}
		if ok != 1 {
			t.Fatalf("%s: %d calls succeeded, want 1 (%v)", what, ok, errs)
		}
	}
	f := newFixture(t)
	cq := f.cq(4)
	for range rounds {
		pd, err := f.d.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		one("DeallocPD ×3", race(3, func(int) error { return f.d.DeallocPD(pd) }), syscall.EINVAL)
		c, _ := f.d.CreateCQ(4)
		one("DestroyCQ ×3", race(3, func(int) error { return f.d.DestroyCQ(c) }), syscall.EINVAL)
		q, _ := f.d.CreateQP(f.pd, cq, cq)
		one("DestroyQP ×3", race(3, func(int) error { return f.d.DestroyQP(q) }), syscall.EINVAL)
	}
	for range regs {
		mr, err := f.d.RegMR(f.pd, f.buf[:64], 0)
		if err != nil {
			t.Fatal(err)
		}
		one("DeregMR ×3", race(3, func(int) error { return f.d.DeregMR(mr) }), syscall.EINVAL)

		pd, _ := f.d.AllocPD()
		var got *verbs.MR
		errs := race(2, func(i int) error {
			if i == 0 {
				return f.d.DeallocPD(pd)
			}
			m, err := f.d.RegMR(pd, f.buf[:64], 0)
			got = m
			return err
		})
		switch {
		case errs[0] == nil && isErrno(errs[1], syscall.EINVAL): // the PD went first
		case errs[1] == nil && isErrno(errs[0], syscall.EBUSY): // the MR went first
			if err := f.d.DeregMR(got); err != nil {
				t.Fatal(err)
			}
			if err := f.d.DeallocPD(pd); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("RegMR racing DeallocPD: dealloc %v, reg %v", errs[0], errs[1])
		}
	}
	// Close from several goroutines, one of them blocked reading events.
	for range slow {
		d, err := Open()
		if err != nil {
			t.Fatal(err)
		}
		blocked := make(chan error)
		go func() { _, err := d.GetAsyncEvent(); blocked <- err }()
		one("Close ×4", race(4, func(int) error { return d.Close() }), ErrClosed)
		if err := <-blocked; !errors.Is(err, ErrClosed) {
			t.Fatalf("GetAsyncEvent across Close: %v", err)
		}
	}
	// ibv_close_device (the exported verb, through this package's own
	// function) racing Device.Close: one closes, the others fail
	// (ErrClosed, EINVAL, or ENODEV once the close has begun). A
	// Close deleting the Device's handle between the verb's lookup and
	// its use made the verb panic ("misuse of an invalid Handle").
	for range rounds / 10 {
		d, err := Open()
		if err != nil {
			t.Fatal(err)
		}
		ctx := d.Context()
		errs := race(3, func(i int) error {
			if i == 0 {
				return d.Close()
			}
			return verbs.CloseDevice(ctx)
		})
		ok := 0
		for i, err := range errs {
			switch {
			case err == nil:
				ok++
			case i == 0 && errors.Is(err, ErrClosed), i > 0 && (isErrno(err, syscall.EINVAL) || isErrno(err, syscall.ENODEV)):
			default:
				t.Fatalf("close %d: %v", i, err)
			}
		}
		if ok != 1 {
			t.Fatalf("%d of Device.Close and two ibv_close_device succeeded (%v)", ok, errs)
		}
	}
	// Posts racing the QP's destruction, polls racing the CQ's: each
	// call succeeds or is EINVAL.
	for range slow {
		scq, pcq := f.cq(64), f.cq(4)
		q := f.qp(scq, scq, device.QPCaps(device.Caps{SendWR: 64, RecvWR: 64, SendSGE: 1, RecvSGE: 1}))
		if err := device.ConnectPair(q, q); err != nil {
			t.Fatal(err)
		}
		wr := f.send(1, verbs.ExpWRNop, 0, nil, 0)
		wc := allocN[verbs.ExpWC](f, 4)
		errs := race(4, func(i int) error {
			switch i {
			case 0:
				return f.d.DestroyQP(q)
			case 1:
				return f.d.DestroyCQ(pcq)
			case 2:
				_, err := verbs.ExpPollCQ(pcq, wc[:4])
				return err
			}
			return verbs.ExpPostSend(q, wr, nil)
		})
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("destroys: %v %v", errs[0], errs[1])
		}
		for _, err := range errs[2:] {
			if err != nil && !isErrno(err, syscall.EINVAL) {
				t.Fatalf("post or poll racing a destroy: %v", err)
			}
		}
		f.qps, f.cqs = f.qps[:len(f.qps)-1], f.cqs[:len(f.cqs)-2] // destroyed above
		if err := f.d.DestroyCQ(scq); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMisuseGuardedTransfers: SGEs, receive buffers and remote ranges one
// byte outside their MR, wrong and stale keys: each completes with its
// error status and writes nothing anywhere (the MR sits between guard
// pages, its bytes are canaries); ranges exactly at the MR's edge work
// and write only their bytes.
func TestMisuseGuardedTransfers(t *testing.T) {
	f := newFixture(t)
	const n = 8192
	g := guarded(t, n)
	gmr := f.reg(g, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	readOnly := f.reg(f.buf[bufSize/2:], verbs.AccessLocalWrite|verbs.AccessRemoteRead) // no remote write
	staleMR, err := f.d.RegMR(f.pd, g[:n], verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	stale := *staleMR // its keys, copied before DeregMR frees the record (reading it after is a use after free)
	if err := f.d.DeregMR(staleMR); err != nil {
		t.Fatal(err)
	}
	for i := range 64 {
		f.buf[i] = byte(i + 1) // the source bytes
	}
	srcSGE := func(off, n int) verbs.SGE { return verbs.SGE{Addr: f.addr(off), Length: uint32(n), Lkey: f.mr.Lkey} }
	gSGE := func(off, n int, lkey uint32) verbs.SGE {
		return verbs.SGE{Addr: addrOf(g, off), Length: uint32(n), Lkey: lkey}
	}
	sgl := func(s ...verbs.SGE) (*verbs.SGE, int) {
		l := allocN[verbs.SGE](f, max(len(s), 1))
		copy(l, s)
		return &l[0], len(s)
	}
	type want struct {
		send, recv verbs.WCStatus // recv: only checked when a receive is posted
		lo, hi     int            // bytes of g that change (the rest stays canary)
	}
	ok := verbs.WCSuccess
	for _, c := range []struct {
		name   string
		op     verbs.ExpWROpcode
		src    []verbs.SGE // gathered (for READ: scattered into)
		recv   []verbs.SGE // posted at the receiver, if any
		remote uint64
		rkey   uint32
		want   want
	}{
		{"write at the MR's end", verbs.ExpWRRDMAWrite, []verbs.SGE{srcSGE(0, 8)}, nil, addrOf(g, n-8), gmr.Rkey, want{ok, 0, n - 8, n}},
		{"write one byte past the end", verbs.ExpWRRDMAWrite, []verbs.SGE{srcSGE(0, 8)}, nil, addrOf(g, n-7), gmr.Rkey, want{verbs.WCRemAccessErr, 0, 0, 0}},
		{"write one byte before the start", verbs.ExpWRRDMAWrite, []verbs.SGE{srcSGE(0, 8)}, nil, addrOf(g, 0) - 1, gmr.Rkey, want{verbs.WCRemAccessErr, 0, 0, 0}},
		{"write to the top of the address space", verbs.ExpWRRDMAWrite, []verbs.SGE{srcSGE(0, 8)}, nil, math.MaxUint64 - 3, gmr.Rkey, want{verbs.WCRemAccessErr, 0, 0, 0}},
		{"write with the lkey as rkey", verbs.ExpWRRDMAWrite, []verbs.SGE{srcSGE(0, 8)}, nil, addrOf(g, 0), gmr.Lkey, want{verbs.WCRemAccessErr, 0, 0, 0}},
		{"write with a stale rkey", verbs.ExpWRRDMAWrite, []verbs.SGE{srcSGE(0, 8)}, nil, addrOf(g, 0), stale.Rkey, want{verbs.WCRemAccessErr, 0, 0, 0}},
		{"write with rkey 0", verbs.ExpWRRDMAWrite, []verbs.SGE{srcSGE(0, 8)}, nil, addrOf(g, 0), 0, want{verbs.WCRemAccessErr, 0, 0, 0}},
		{"write with rkey MaxUint32", verbs.ExpWRRDMAWrite, []verbs.SGE{srcSGE(0, 8)}, nil, addrOf(g, 0), math.MaxUint32, want{verbs.WCRemAccessErr, 0, 0, 0}},
		{"write to an MR without remote write", verbs.ExpWRRDMAWrite, []verbs.SGE{srcSGE(0, 8)}, nil, f.addr(bufSize / 2), readOnly.Rkey, want{verbs.WCRemAccessErr, 0, 0, 0}},
		{"write of 2 SGEs ending one byte past", verbs.ExpWRRDMAWrite, []verbs.SGE{srcSGE(0, 4), srcSGE(4, 5)}, nil, addrOf(g, n-8), gmr.Rkey, want{verbs.WCRemAccessErr, 0, 0, 0}},
		{"write from a source one byte past its MR", verbs.ExpWRRDMAWrite, []verbs.SGE{{Addr: f.addr(bufSize - 7), Length: 8, Lkey: f.mr.Lkey}}, nil, addrOf(g, 0), gmr.Rkey, want{verbs.WCLocProtErr, 0, 0, 0}},
		{"read from past the end", verbs.ExpWRRDMARead, []verbs.SGE{gSGE(0, 8, gmr.Lkey)}, nil, addrOf(g, n-7), gmr.Rkey, want{verbs.WCRemAccessErr, 0, 0, 0}},
		{"read into one byte past the end", verbs.ExpWRRDMARead, []verbs.SGE{gSGE(n-7, 8, gmr.Lkey)}, nil, f.addr(0), f.mr.Rkey, want{verbs.WCLocProtErr, 0, 0, 0}},
		{"read into the end", verbs.ExpWRRDMARead, []verbs.SGE{gSGE(n-8, 8, gmr.Lkey)}, nil, f.addr(0), f.mr.Rkey, want{ok, 0, n - 8, n}},
		{"read into a stale lkey", verbs.ExpWRRDMARead, []verbs.SGE{gSGE(0, 8, stale.Lkey)}, nil, f.addr(0), f.mr.Rkey, want{verbs.WCLocProtErr, 0, 0, 0}},
		{"read into the rkey", verbs.ExpWRRDMARead, []verbs.SGE{gSGE(0, 8, gmr.Rkey)}, nil, f.addr(0), f.mr.Rkey, want{verbs.WCLocProtErr, 0, 0, 0}},
		{"send into a receive at the end", verbs.ExpWRSend, []verbs.SGE{srcSGE(0, 8)}, []verbs.SGE{gSGE(n-8, 8, gmr.Lkey)}, 0, 0, want{ok, ok, n - 8, n}},
		{"send one byte longer than the receive", verbs.ExpWRSend, []verbs.SGE{srcSGE(0, 9)}, []verbs.SGE{gSGE(n-8, 8, gmr.Lkey)}, 0, 0, want{verbs.WCRemInvReqErr, verbs.WCLocLenErr, 0, 0}},
		{"receive one byte past the end", verbs.ExpWRSend, []verbs.SGE{srcSGE(0, 8)}, []verbs.SGE{gSGE(n-7, 8, gmr.Lkey)}, 0, 0, want{verbs.WCRemOpErr, verbs.WCLocProtErr, 0, 0}},
		{"second receive SGE outside: the first stays untouched", verbs.ExpWRSend, []verbs.SGE{srcSGE(0, 16)}, []verbs.SGE{gSGE(0, 8, gmr.Lkey), gSGE(n-4, 8, gmr.Lkey)}, 0, 0, want{verbs.WCRemOpErr, verbs.WCLocProtErr, 0, 0}},
		{"receive with a stale lkey", verbs.ExpWRSend, []verbs.SGE{srcSGE(0, 8)}, []verbs.SGE{gSGE(0, 8, stale.Lkey)}, 0, 0, want{verbs.WCRemOpErr, verbs.WCLocProtErr, 0, 0}},
		{"receive with lkey 0", verbs.ExpWRSend, []verbs.SGE{srcSGE(0, 8)}, []verbs.SGE{gSGE(0, 8, 0)}, 0, 0, want{verbs.WCRemOpErr, verbs.WCLocProtErr, 0, 0}},
		{"empty SGE at the MR's end", verbs.ExpWRSend, []verbs.SGE{srcSGE(0, 0)}, []verbs.SGE{gSGE(n, 0, gmr.Lkey)}, 0, 0, want{ok, ok, 0, 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for i := range g {
				g[i] = canary
			}
			p := f.pair(nil, nil)
			if c.recv != nil {
				l, k := sgl(c.recv...)
				f.postRecv(p.b, f.recv(1, l, k))
			}
			l, k := sgl(c.src...)
			w := f.send(2, c.op, verbs.ExpSendSignaled, l, k)
			w.WR.RDMA().RemoteAddr, w.WR.RDMA().Rkey = c.remote, c.rkey
			f.postSend(p.a, w)
			sa, sb := f.poll(p.cqa), f.poll(p.cqb)
			if len(sa) != 1 || sa[0].Status != c.want.send {
				t.Errorf("sender %+v, want status %v", sum(sa), c.want.send)
			}
			if c.recv != nil && (len(sb) != 1 || sb[0].Status != c.want.recv) {
				t.Errorf("receiver %+v, want status %v", sum(sb), c.want.recv)
			}
			if err := untouched(g, c.want.lo, c.want.hi); err != nil {
				t.Error(err)
			}
			for i := c.want.lo; i < c.want.hi; i++ {
				if g[i] != byte(i-c.want.lo+1) {
					t.Fatalf("byte %d = %#x, want %#x", i, g[i], i-c.want.lo+1)
				}
			}
		})
	}
}

// TestMisusePollArguments: ExpPollCQ with counts and entry sizes outside
// what the verb takes is EINVAL and leaves the completions queued; an
// entry size smaller or larger than struct ibv_exp_wc writes exactly the
// bytes the call names (the entries end at a guard page).
func TestMisusePollArguments(t *testing.T) {
	f := newFixture(t)
	cq := f.cq(8)
	qp := f.qp(cq, cq)
	if err := device.ConnectPair(qp, qp); err != nil {
		t.Fatal(err)
	}
	post := func(k int) {
		for i := range k {
			f.postSend(qp, f.send(uint64(100+i), verbs.ExpWRNop, verbs.ExpSendSignaled, nil, 0))
		}
	}
	queued := func() uint64 {
		s, err := f.d.CQStats(cq)
		if err != nil {
			t.Fatal(err)
		}
		return s.Queued
	}
	size := int(unsafe.Sizeof(verbs.ExpWC{}))
	prefix := int(unsafe.Offsetof(verbs.ExpWC{}.SrcQP)) // the least the provider takes
	post(2)
	f.progress()
	wc := guarded(t, 2*size)
	at := (*verbs.ExpWC)(unsafe.Pointer(&wc[0]))
	for _, c := range []struct {
		name     string
		n        int32
		wcSize   uint32
		want     error
		polled   int
		touchedN int // bytes of wc written
	}{
		{"count -1", -1, uint32(size), syscall.EINVAL, 0, 0},
		{"count MinInt32", math.MinInt32, uint32(size), syscall.EINVAL, 0, 0},
		{"entry size 0", 2, 0, syscall.EINVAL, 0, 0},
		{"entry size 1", 2, 1, syscall.EINVAL, 0, 0},
		{"entry size one byte short of src_qp", 2, uint32(prefix - 1), syscall.EINVAL, 0, 0},
		{"count 0", 0, uint32(size), nil, 0, 0},
		{"the smallest entries, two of them", 2, uint32(prefix), nil, 2, 2 * prefix},
	} {
		for i := range wc {
			wc[i] = canary
		}
		got, err := verbs.ExpPollCQRaw(cq, c.n, at, c.wcSize)
		if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) || int(got) != c.polled {
			t.Errorf("%s: %d, %v; want %d, %v", c.name, got, err, c.polled, c.want)
		}
		if err := untouched(wc, 0, c.touchedN); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if c.polled == 0 && queued() != 2 {
			t.Errorf("%s: %d completions left queued, want 2", c.name, queued())
		}
	}
	// The prefix entries hold the wr_ids, at prefix-byte strides.
	if a, b := *(*uint64)(unsafe.Pointer(&wc[0])), *(*uint64)(unsafe.Pointer(&wc[prefix])); a != 100 || b != 101 {
		t.Errorf("prefix entries hold wr_ids %d, %d", a, b)
	}
	// A stride above the struct (MaxUint32) writes one struct per entry:
	// the last entry of a buffer at the guard page is safe.
	post(1)
	last := (*verbs.ExpWC)(unsafe.Pointer(&wc[size]))
	for i := range wc {
		wc[i] = canary
	}
	if got, err := verbs.ExpPollCQRaw(cq, 1, last, math.MaxUint32); err != nil || got != 1 || last.WRID != 100 {
		t.Errorf("stride MaxUint32: %d, %v, wr_id %d", got, err, last.WRID)
	}
	if err := untouched(wc, size, 2*size); err != nil {
		t.Error(err)
	}
	lwc := allocN[verbs.WC](f, 1)
	if _, err := verbs.PollCQRaw(cq, -1, &lwc[0]); !isErrno(err, syscall.EINVAL) {
		t.Errorf("PollCQ count -1: %v", err)
	}
	if _, err := verbs.ExpPollCQRaw(cq, 1, nil, uint32(size)); !isErrno(err, syscall.EINVAL) {
		t.Errorf("ExpPollCQ nil wc: %v", err)
	}
}

// TestMisusePostArguments: work requests the device cannot take are
// refused at post with EINVAL (or ENOMEM for a full ring) and bad_wr,
// and nothing is posted.
func TestMisusePostArguments(t *testing.T) {
	f := newFixture(t)
	p := f.pair([]device.QPOption{device.QPCaps(device.Caps{SendWR: 8, RecvWR: 8, SendSGE: 4, RecvSGE: 4, Inline: 64})}, nil)
	m, mcq := f.mgr()
	managed := f.qp(mcq, mcq, device.ManagedSend())
	if err := device.ConnectPair(managed, managed); err != nil {
		t.Fatal(err)
	}
	other := newFixture(t)
	theirCQ := other.cq(4)
	theirQP := other.qp(theirCQ, theirCQ)
	deadCQ, _ := f.d.CreateCQ(4)
	f.d.DestroyCQ(deadCQ)
	sg := f.sges(f.mr.Lkey, [2]int{0, 8}, [2]int{8, 8}, [2]int{16, 8}, [2]int{24, 8}, [2]int{32, 8})
	huge := allocN[verbs.SGE](f, 2)
	huge[0] = verbs.SGE{Addr: f.addr(0), Length: 1 << 30, Lkey: f.mr.Lkey}
	huge[1] = verbs.SGE{Addr: f.addr(0), Length: 1 << 30, Lkey: f.mr.Lkey}
	max32 := allocN[verbs.SGE](f, 1)
	max32[0] = verbs.SGE{Addr: f.addr(0), Length: math.MaxUint32, Lkey: f.mr.Lkey}
	mk := func(op verbs.ExpWROpcode, flags verbs.ExpSendFlags, sg *verbs.SGE, n int32) *verbs.ExpSendWR {
		w := f.send(7, op, flags, sg, 0)
		w.NumSGE = n
		return w
	}
	for _, c := range []struct {
		name string
		qp   *verbs.QP
		wr   *verbs.ExpSendWR
		want syscall.Errno
	}{
		{"num_sge -1", p.a, mk(verbs.ExpWRSend, 0, sg, -1), syscall.EINVAL},
		{"num_sge MinInt32", p.a, mk(verbs.ExpWRSend, 0, sg, math.MinInt32), syscall.EINVAL},
		{"num_sge above max_sge", p.a, mk(verbs.ExpWRSend, 0, sg, 5), syscall.EINVAL},
		{"num_sge MaxInt32", p.a, mk(verbs.ExpWRSend, 0, sg, math.MaxInt32), syscall.EINVAL},
		{"num_sge 1 and no sg_list", p.a, mk(verbs.ExpWRSend, 0, nil, 1), syscall.EINVAL},
		{"2 GiB in two SGEs", p.a, mk(verbs.ExpWRSend, 0, &huge[0], 2), syscall.EINVAL},
		{"an SGE of 4 GiB - 1", p.a, mk(verbs.ExpWRSend, 0, &max32[0], 1), syscall.EINVAL},
		{"opcode 200", p.a, mk(200, 0, nil, 0), syscall.EINVAL},
		{"opcode MaxUint32", p.a, mk(math.MaxUint32, 0, nil, 0), syscall.EINVAL},
		{"bind-MW opcode", p.a, mk(verbs.ExpWRBindMW, 0, sg, 1), syscall.EINVAL},
		{"atomic with two SGEs", p.a, mk(verbs.ExpWRAtomicFetchAndAdd, 0, sg, 2), syscall.EINVAL},
		{"send flag 1<<63", p.a, mk(verbs.ExpWRSend, 1<<63, nil, 0), syscall.EINVAL},
		{"inline above max_inline", p.a, mk(verbs.ExpWRSend, verbs.ExpSendInline, &huge[0], 1), syscall.EINVAL},
		{"inline RDMA read", p.a, mk(verbs.ExpWRRDMARead, verbs.ExpSendInline, sg, 1), syscall.EINVAL},
		{"comp_mask", p.a, func() *verbs.ExpSendWR { w := mk(verbs.ExpWRNop, 0, nil, 0); w.CompMask = 1; return w }(), syscall.EINVAL},
		{"wait from a QP that is not cross-channel", p.a, f.wait(7, mcq, 1, 0), syscall.EINVAL},
		{"wait on a nil CQ", m, f.wait(7, nil, 1, 0), syscall.EINVAL},
		{"wait on a destroyed CQ", m, f.wait(7, deadCQ, 1, 0), syscall.EINVAL},
		{"wait on another device's CQ", m, f.wait(7, theirCQ, 1, 0), syscall.EINVAL},
		{"wait count -1", m, f.wait(7, mcq, -1, 0), syscall.EINVAL},
		{"wait count MinInt32", m, f.wait(7, mcq, math.MinInt32, 0), syscall.EINVAL},
		{"enable of a nil QP", m, f.enable(7, verbs.ExpWRSendEnable, nil, 0, 0), syscall.EINVAL},
		{"enable of another device's QP", m, f.enable(7, verbs.ExpWRSendEnable, theirQP, 0, 0), syscall.EINVAL},
		{"enable of a queue that is not managed", m, f.enable(7, verbs.ExpWRSendEnable, p.a, 0, 0), syscall.EINVAL},
		{"enable count -1", m, f.enable(7, verbs.ExpWRSendEnable, managed, -1, 0), syscall.EINVAL},
		{"enable of more than was posted", m, f.enable(7, verbs.ExpWRSendEnable, managed, 1, 0), syscall.EINVAL},
		{"enable count MaxInt32", m, f.enable(7, verbs.ExpWRSendEnable, managed, math.MaxInt32, 0), syscall.EINVAL},
		{"receive enable of a queue that is not managed", m, f.enable(7, verbs.ExpWRRecvEnable, managed, 0, 0), syscall.EINVAL},
		{"calc on a QP that is not cross-channel", p.a, func() *verbs.ExpSendWR {
			w := mk(verbs.ExpWRSend, verbs.ExpSendWithCalc, f.sges(f.mr.Lkey, [2]int{0, 16}), 1)
			return w
		}(), syscall.EINVAL},
		{"calc op 256 (its low byte is ADD)", m, func() *verbs.ExpSendWR {
			w := mk(verbs.ExpWRSend, verbs.ExpSendWithCalc, f.sges(f.mr.Lkey, [2]int{0, 16}), 1)
			w.Op.Calc().CalcOp = 256
			return w
		}(), syscall.EINVAL},
		{"calc type 256", m, func() *verbs.ExpSendWR {
			w := mk(verbs.ExpWRSend, verbs.ExpSendWithCalc, f.sges(f.mr.Lkey, [2]int{0, 16}), 1)
			w.Op.Calc().DataType = 256
			return w
		}(), syscall.EINVAL},
		{"calc operand of 17 bytes", m, mk(verbs.ExpWRSend, verbs.ExpSendWithCalc, f.sges(f.mr.Lkey, [2]int{0, 16}, [2]int{16, 17}), 2), syscall.EINVAL},
		{"calc inline", m, mk(verbs.ExpWRSend, verbs.ExpSendWithCalc|verbs.ExpSendInline, f.sges(f.mr.Lkey, [2]int{0, 16}), 1), syscall.EINVAL},
	} {
		var before [2]QueueStats
		for i, q := range []*verbs.QP{c.qp, managed} {
			_, before[i], _, _ = f.d.QPStats(q)
		}
		bad := alloc[*verbs.ExpSendWR](f)
		if err := verbs.ExpPostSend(c.qp, c.wr, bad); !isErrno(err, c.want) || *bad != c.wr {
			t.Errorf("%s: %v (bad_wr %p, want %p), want %v", c.name, err, *bad, c.wr, c.want)
		}
		for i, q := range []*verbs.QP{c.qp, managed} {
			if _, s, _, _ := f.d.QPStats(q); s != before[i] {
				t.Errorf("%s: QP %#x's send queue %+v changed (was %+v)", c.name, q.QPNum, s, before[i])
			}
		}
	}
	// Receives.
	for _, c := range []struct {
		name string
		n    int32
		sg   *verbs.SGE
	}{{"num_sge -1", -1, sg}, {"num_sge above max_sge", 5, sg}, {"num_sge MaxInt32", math.MaxInt32, sg}, {"no sg_list", 1, nil}, {"2 GiB", 2, &huge[0]}} {
		r := f.recv(7, c.sg, 0)
		r.NumSGE = c.n
		bad := alloc[*verbs.RecvWR](f)
		if err := verbs.PostRecv(p.b, r, bad); !isErrno(err, syscall.EINVAL) || *bad != r {
			t.Errorf("receive %s: %v", c.name, err)
		}
	}
	if _, _, r, _ := f.d.QPStats(p.b); r.Posted != 0 {
		t.Errorf("refused receives were posted: %+v", r)
	}
	// A WR list that loops back fills the ring and stops there (ENOMEM):
	// bounded, never a hang.
	w := f.send(9, verbs.ExpWRNop, 0, nil, 0)
	w.Next = w
	bad := alloc[*verbs.ExpSendWR](f)
	if err := verbs.ExpPostSend(p.a, w, bad); !isErrno(err, syscall.ENOMEM) || *bad != w {
		t.Errorf("a looping send list: %v", err)
	}
	r := f.recv(9, nil, 0)
	r.Next = r
	rbad := alloc[*verbs.RecvWR](f)
	if err := verbs.PostRecv(p.b, r, rbad); !isErrno(err, syscall.ENOMEM) || *rbad != r {
		t.Errorf("a looping receive list: %v", err)
	}
	if _, s, _, _ := f.d.QPStats(p.a); s.Posted != 8 {
		t.Errorf("a looping list posted %d WRs into an 8-slot ring", s.Posted)
	}
}

// TestMisuseTaskLoops: a task list whose next pointers loop back is
// refused whole with EINVAL, bad_task naming the task whose next closes
// the loop (ibv_exp_post_task used to walk it for ever); long lists
// without a loop post as before.
func TestMisuseTaskLoops(t *testing.T) {
	f := newFixture(t)
	cq := f.cq(1024)
	qp := f.qp(cq, cq, device.QPCaps(device.Caps{SendWR: 1024, RecvWR: 1024, SendSGE: 1, RecvSGE: 1}))
	if err := device.ConnectPair(qp, qp); err != nil {
		t.Fatal(err)
	}
	const n = 1000
	tasks := allocN[verbs.ExpTask](f, n)
	build := func(k, back int) *verbs.ExpTask { // k tasks, the last one's next is task back (-1: none)
		for i := range k {
			tasks[i] = verbs.ExpTask{TaskType: verbs.ExpTaskSend}
			tasks[i].Item.QP = qp
			if i%2 == 1 { // every other task carries a NOP
				tasks[i].Item.SetSendWR(f.send(uint64(i), verbs.ExpWRNop, 0, nil, 0))
			}
			if i+1 < k {
				tasks[i].Next = &tasks[i+1]
			}
		}
		if back >= 0 {
			tasks[k-1].Next = &tasks[back]
		}
		return &tasks[0]
	}
	for _, c := range []struct {
		k, back int
		want    error
	}{
		{1, 0, syscall.EINVAL},   // a task that is its own next
		{2, 0, syscall.EINVAL},   // a → b → a
		{3, 1, syscall.EINVAL},   // a → b → c → b
		{n, 500, syscall.EINVAL}, // back to the middle of a long list
		{n, n - 1, syscall.EINVAL},
		{n, -1, nil}, // no loop: 500 NOPs posted
	} {
		_, before, _, _ := f.d.QPStats(qp)
		bad := alloc[*verbs.ExpTask](f)
		err := verbs.ExpPostTask(f.d.Context(), build(c.k, c.back), bad)
		_, after, _, _ := f.d.QPStats(qp)
		posted := after.Posted - before.Posted
		if c.want == nil {
			if err != nil || posted != n/2 {
				t.Errorf("%d tasks without a loop: %v, %d posted", c.k, err, posted)
			}
			continue
		}
		if !errors.Is(err, c.want) || *bad != &tasks[c.k-1] || posted != 0 {
			t.Errorf("%d tasks looping back to %d: %v, bad_task %p (want %p, the last), %d WRs posted",
				c.k, c.back, err, *bad, &tasks[c.k-1], posted)
		}
		if task, _, errno := f.d.TaskFailure(); task != &tasks[c.k-1] || errno != syscall.EINVAL {
			t.Errorf("TaskFailure %p %v", task, errno)
		}
	}
	// Malformed tasks: nil QP, unknown type, comp_mask, another device's QP.
	other := newFixture(t)
	ocq := other.cq(4)
	oqp := other.qp(ocq, ocq)
	for name, mod := range map[string]func(*verbs.ExpTask){
		"nil QP":          func(x *verbs.ExpTask) { x.Item.QP = nil },
		"type 99":         func(x *verbs.ExpTask) { x.TaskType = 99 },
		"another's QP":    func(x *verbs.ExpTask) { x.Item.QP = oqp },
		"comp_mask 1<<20": func(x *verbs.ExpTask) { x.CompMask = 1 << 20 },
	} {
		head := build(3, -1)
		mod(&tasks[2])
		bad := alloc[*verbs.ExpTask](f)
		if err := verbs.ExpPostTask(f.d.Context(), head, bad); !isErrno(err, syscall.EINVAL) || *bad != &tasks[2] {
			t.Errorf("task %s: %v, bad_task %p", name, err, *bad)
		}
	}
}

// TestMisuseZeroRecords: records that no device made (zeroed C memory)
// handed to the exp verbs are refused, never a dereference of their NULL
// context: a zeroed context finds no provider (ENOSYS); a CQ or QP with a
// NULL context is refused by the wrapper (EINVAL naming ->context).
func TestMisuseZeroRecords(t *testing.T) {
	f := newFixture(t)
	ctx := alloc[verbs.Context](f)
	cq := alloc[verbs.CQ](f)
	qp := alloc[verbs.QP](f)
	wc := allocN[verbs.ExpWC](f, 1)
	for name, call := range map[string]func() error{
		"ExpPollCQ":      func() error { _, err := verbs.ExpPollCQ(cq, wc[:1]); return err },
		"ExpPostSend":    func() error { return verbs.ExpPostSend(qp, alloc[verbs.ExpSendWR](f), nil) },
		"ExpPostTask":    func() error { return verbs.ExpPostTask(ctx, alloc[verbs.ExpTask](f), nil) },
		"ExpModifyQP":    func() error { return verbs.ExpModifyQP(qp, alloc[verbs.ExpQPAttr](f), 0) },
		"ExpModifyCQ":    func() error { return verbs.ExpModifyCQ(cq, alloc[verbs.ExpCQAttr](f), 0) },
		"ExpQueryDevice": func() error { return verbs.ExpQueryDevice(ctx, alloc[verbs.ExpDeviceAttr](f)) },
		"ExpCreateCQ": func() error {
			_, err := verbs.ExpCreateCQ(ctx, 4, nil, nil, 0, alloc[verbs.ExpCQInitAttr](f))
			return err
		},
		"ExpCreateQP": func() error {
			a := alloc[verbs.ExpQPInitAttr](f)
			a.CompMask = uint32(verbs.ExpQPInitAttrPD | verbs.ExpQPInitAttrCreateFlags)
			_, err := verbs.ExpCreateQP(ctx, a)
			return err
		},
	} {
		want := syscall.ENOSYS
		switch name {
		case "ExpPollCQ", "ExpPostSend", "ExpModifyQP", "ExpModifyCQ":
			want = syscall.EINVAL
		}
		if err := call(); !isErrno(err, want) {
			t.Errorf("%s on a zeroed record: %v, want %v", name, err, want)
		}
	}
}

// TestMisuseAsyncFD: async_fd is the user's, and users do things with it
// (a runtime poller that closes it, a direct read, a stray write). The
// device used to write its event counts into whatever file got async_fd's
// number after a close, and abort() when its own read of the count
// failed; it now keeps a private dup of the eventfd and reads only what
// is there.
func TestMisuseAsyncFD(t *testing.T) {
	overrun := func(r *rig) {
		for i := range 17 { // the 17th overruns the 16-slot send CQ: CQ_ERR and QP_FATAL
			r.mustPost(r.qp, r.sendWR(uint64(i)))
		}
		r.poll(r.scq)
	}
	getTwo := func(r *rig) {
		t.Helper()
		for range 2 {
			ev, err := r.d.GetAsyncEvent()
			if err != nil {
				t.Fatalf("GetAsyncEvent: %v", err)
			}
			if err := r.d.AckAsyncEvent(ev); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Run("closed and its number reused", func(t *testing.T) {
		var f *os.File
		t.Cleanup(func() { // after the fixture's, which closes the device
			if f == nil {
				return
			}
			if _, err := f.WriteString("still open"); err != nil {
				t.Errorf("Close closed the file that took async_fd's number: %v", err)
			}
			f.Close()
		})
		r := overrunRig(t, true, false)
		fd := r.d.AsyncFD()
		if err := syscall.Close(fd); err != nil {
			t.Fatal(err)
		}
		var err error
		if f, err = os.CreateTemp(t.TempDir(), "reused"); err != nil {
			t.Fatal(err)
		}
		if int(f.Fd()) != fd {
			t.Logf("the temp file got fd %d, not async_fd's %d: the reuse is not exercised", f.Fd(), fd)
		}
		overrun(r)
		getTwo(r) // still delivered
		if st, err := f.Stat(); err != nil || st.Size() != 0 {
			t.Fatalf("the device wrote %d bytes into the file that took async_fd's number (%v)", st.Size(), err)
		}
	})
	t.Run("read by the user", func(t *testing.T) {
		r := overrunRig(t, true, false)
		overrun(r)
		var buf [8]byte
		for range 2 { // the user takes both counts
			if _, err := syscall.Read(r.d.AsyncFD(), buf[:]); err != nil {
				t.Fatal(err)
			}
		}
		getTwo(r) // used to abort (non-blocking fd) or block for ever holding the lock
		if _, err := r.d.GetAsyncEvent(); !errors.Is(err, syscall.EAGAIN) {
			t.Fatalf("a third GetAsyncEvent: %v", err)
		}
	})
	t.Run("a stray count written by the user", func(t *testing.T) {
		r := overrunRig(t, true, false)
		if err := syscall.SetNonblock(r.d.AsyncFD(), false); err != nil {
			t.Fatal(err)
		}
		var one [8]byte
		one[0] = 1
		if _, err := syscall.Write(r.d.AsyncFD(), one[:]); err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		var before, after syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &before)
		go func() { _, err := r.d.GetAsyncEvent(); got <- err }()
		time.Sleep(300 * time.Millisecond)
		syscall.Getrusage(syscall.RUSAGE_SELF, &after)
		cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
		select {
		case err := <-got:
			t.Fatalf("GetAsyncEvent returned %v with no event queued", err)
		default:
		}
		if cpu > 150*time.Millisecond {
			t.Errorf("a blocked GetAsyncEvent used %v of CPU in 300 ms: it spins on the stray count", cpu)
		}
		overrun(r) // a real event wakes it
		if err := <-got; err != nil {
			t.Fatalf("GetAsyncEvent after a real event: %v", err)
		}
	})
}

// TestMisuseExportedVerbs: the generated wrappers of libibverbs' exported
// verbs reach this device's own functions (front_go.c) for its objects;
// misuse through them is an error as through the methods: sizes, nil
// and stale objects, objects of another device, and the same object
// freed from several goroutines (once: the others are refused).
func TestMisuseExportedVerbs(t *testing.T) {
	f, g := newFixture(t), newFixture(t)
	ctx := f.d.Context()
	pd, err := verbs.AllocPD(ctx)
	if err != nil {
		t.Skipf("SKIP (loudly): the exported verbs do not reach the device here: %v", err)
	}
	cq, err := verbs.CreateCQ(ctx, 4, nil, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	gcq := g.cq(4)
	small := guarded(t, 64)
	attr := alloc[verbs.QPInitAttr](f)
	mkAttr := func(scq, rcq *verbs.CQ, typ verbs.QPType, c verbs.QPCap) *verbs.QPInitAttr {
		*attr = verbs.QPInitAttr{SendCQ: scq, RecvCQ: rcq, QPType: typ, Cap: c}
		return attr
	}
	rc := verbs.QptRC
	for name, call := range map[string]func() error{
		"RegMR of 64 bytes as 1 TiB": func() error {
			_, err := verbs.RegMR(pd, unsafe.Pointer(&small[0]), 1<<40, int32(verbs.AccessLocalWrite))
			return err
		},
		"RegMR of MaxUint64 bytes": func() error {
			_, err := verbs.RegMR(pd, unsafe.Pointer(&small[0]), math.MaxUint64, 0)
			return err
		},
		"RegMR of 0 bytes":     func() error { _, err := verbs.RegMR(pd, unsafe.Pointer(&small[0]), 0, 0); return err },
		"RegMR unknown access": func() error { _, err := verbs.RegMR(pd, unsafe.Pointer(&small[0]), 64, 1<<20); return err },
		"CreateCQ of -1":       func() error { _, err := verbs.CreateCQ(ctx, -1, nil, nil, 0); return err },
		"CreateCQ of MinInt32": func() error {
			_, err := verbs.CreateCQ(ctx, math.MinInt32, nil, nil, 0)
			return err
		},
		"CreateCQ of MaxInt32": func() error { _, err := verbs.CreateCQ(ctx, math.MaxInt32, nil, nil, 0); return err },
		"CreateQP on their CQ": func() error {
			_, err := verbs.CreateQP(pd, mkAttr(gcq, gcq, rc, verbs.QPCap{}))
			return err
		},
		"CreateQP of type RAW_PACKET": func() error {
			_, err := verbs.CreateQP(pd, mkAttr(cq, cq, verbs.QptRawPacket, verbs.QPCap{}))
			return err
		},
		"CreateQP of type XRC_SEND": func() error {
			_, err := verbs.CreateQP(pd, mkAttr(cq, cq, verbs.QptXRCSend, verbs.QPCap{}))
			return err
		},
		"CreateQP of MaxUint32 WRs": func() error {
			_, err := verbs.CreateQP(pd, mkAttr(cq, cq, rc, verbs.QPCap{MaxSendWR: math.MaxUint32}))
			return err
		},
		"CreateQP of 65 SGEs": func() error {
			_, err := verbs.CreateQP(pd, mkAttr(cq, cq, rc, verbs.QPCap{MaxRecvSGE: 65}))
			return err
		},
		"CreateQP with nil CQs": func() error {
			_, err := verbs.CreateQP(pd, mkAttr(nil, nil, rc, verbs.QPCap{}))
			return err
		},
		"ModifyQP to RTS from RESET": func() error {
			q, err := verbs.CreateQP(pd, mkAttr(cq, cq, rc, verbs.QPCap{}))
			if err != nil {
				return err
			}
			defer verbs.DestroyQP(q)
			a := alloc[verbs.QPAttr](f)
			a.QPState = verbs.QpsRts
			return verbs.ModifyQP(q, a, int32(verbs.QPStateConst))
		},
		"QueryPort 2": func() error { return verbs.QueryPort(ctx, 2, alloc[verbs.PortAttr](f)) },
	} {
		if err := call(); !isErrno(err, syscall.EINVAL) && !isErrno(err, syscall.EFAULT) {
			t.Errorf("%s = %v, want EINVAL or EFAULT", name, err)
		}
	}
	// A QP destroyed through the verb: every verb on it is refused.
	q, err := verbs.CreateQP(pd, mkAttr(cq, cq, rc, verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}))
	if err != nil {
		t.Fatal(err)
	}
	if err := verbs.DestroyQP(q); err != nil {
		t.Fatal(err)
	}
	qa, qi := alloc[verbs.QPAttr](f), alloc[verbs.QPInitAttr](f)
	for name, err := range map[string]error{
		"DestroyQP twice":         verbs.DestroyQP(q),
		"ModifyQP of a destroyed": verbs.ModifyQP(q, qa, int32(verbs.QPStateConst)),
		"QueryQP of a destroyed":  verbs.QueryQP(q, qa, 0, qi),
		"PostSend on a destroyed": verbs.ExpPostSend(q, f.send(1, verbs.ExpWRNop, 0, nil, 0), nil),
	} {
		if !isErrno(err, syscall.EINVAL) {
			t.Errorf("%s = %v, want EINVAL", name, err)
		}
	}
	// The same PD, MR, CQ freed by the verb from three goroutines at once.
	for range 300 {
		p, err := verbs.AllocPD(ctx)
		if err != nil {
			t.Fatal(err)
		}
		mr, err := verbs.RegMR(pd, unsafe.Pointer(&small[0]), 64, 0)
		if err != nil {
			t.Fatal(err)
		}
		c, err := verbs.CreateCQ(ctx, 4, nil, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var ok [3]int32
		var mu sync.Mutex
		var bad []error
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i, err := range []error{verbs.DeallocPD(p), verbs.DeregMR(mr), verbs.DestroyCQ(c)} {
					mu.Lock()
					switch {
					case err == nil:
						ok[i]++
					case isErrno(err, syscall.EINVAL), isErrno(err, syscall.ENOSYS): // ENOSYS: not an object of an open device: forwarded, no library
					default:
						bad = append(bad, err)
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if ok != [3]int32{1, 1, 1} || bad != nil {
			t.Fatalf("DeallocPD, DeregMR, DestroyCQ from 3 goroutines: %v succeeded (want one each), errors %v", ok, bad)
		}
	}
	if err := verbs.DestroyCQ(cq); err != nil {
		t.Error(err)
	}
	if err := verbs.DeallocPD(pd); err != nil {
		t.Error(err)
	}
}

// TestMisuseCopiedRecords: a copy of a CQ's or QP's struct (in C or Go
// memory) carries the device's context, so the verbs dispatch to the
// device, which must find it is not one of its objects: EINVAL. Polling
// a copied CQ used to read a struct sd_cq past the copy's end (SIGSEGV).
func TestMisuseCopiedRecords(t *testing.T) {
	f := newFixture(t)
	cq := f.cq(8)
	qp := f.qp(cq, cq)
	if err := device.ConnectPair(qp, qp); err != nil {
		t.Fatal(err)
	}
	m, _ := f.mgr()
	ccq, cqp := alloc[verbs.CQ](f), alloc[verbs.QP](f)
	*ccq, *cqp = *cq, *qp
	gcq, gqp := new(verbs.CQ), new(verbs.QP) // Go memory: no Go pointers inside, so cgo lets them pass
	*gcq, *gqp = *cq, *qp
	wc := allocN[verbs.ExpWC](f, 4)
	lwc := allocN[verbs.WC](f, 4)
	attr := alloc[verbs.ExpQPAttr](f)
	attr.QPState = verbs.QpsErr
	for _, c := range []struct {
		kind string
		cq   *verbs.CQ
		qp   *verbs.QP
	}{{"C copy", ccq, cqp}, {"Go copy", gcq, gqp}} {
		calls := map[string]func() error{
			"ExpPollCQ": func() error {
				_, err := verbs.ExpPollCQ(c.cq, wc[:4])
				return err
			},
			"PollCQ":      func() error { _, err := verbs.PollCQ(c.cq, lwc[:4]); return err },
			"ExpModifyCQ": func() error { return verbs.ExpModifyCQ(c.cq, alloc[verbs.ExpCQAttr](f), 0) },
			"DestroyCQ":   func() error { return f.d.DestroyCQ(c.cq) },
			"CQStats":     func() error { _, err := f.d.CQStats(c.cq); return err },
			"ExpPostSend": func() error { return verbs.ExpPostSend(c.qp, f.send(1, verbs.ExpWRNop, 0, nil, 0), nil) },
			"PostRecv":    func() error { return verbs.PostRecv(c.qp, f.recv(1, nil, 0), nil) },
			"ExpModifyQP": func() error { return verbs.ExpModifyQP(c.qp, attr, uint64(verbs.ExpQPState)) },
			"DestroyQP":   func() error { return f.d.DestroyQP(c.qp) },
		}
		if c.kind == "C copy" { // these store the pointer into C memory: not a Go one (cgocheck2)
			calls["wait on it"] = func() error { return verbs.ExpPostSend(m, f.wait(1, c.cq, 1, 0), nil) }
			calls["enable it"] = func() error { return verbs.ExpPostSend(m, f.enable(1, verbs.ExpWRSendEnable, c.qp, 0, 0), nil) }
			calls["a task on it"] = func() error {
				task := alloc[verbs.ExpTask](f)
				task.TaskType, task.Item.QP = verbs.ExpTaskSend, c.qp
				return verbs.ExpPostTask(f.d.Context(), task, nil)
			}
		}
		for name, call := range calls {
			if err := call(); !isErrno(err, syscall.EINVAL) {
				t.Errorf("%s of a %s = %v, want EINVAL", name, c.kind, err)
			}
		}
	}
	// The originals are untouched and still work.
	if st, _, _, err := f.d.QPStats(qp); err != nil || st != verbs.QpsRts {
		t.Errorf("the original QP: %v %v", st, err)
	}
	if _, err := verbs.ExpPollCQ(cq, wc[:4]); err != nil {
		t.Errorf("the original CQ: %v", err)
	}
}
