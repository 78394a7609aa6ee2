//go:build linux && cgo

package softdev

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/device"
)

// TestCloseMidFlight: eight goroutines create, connect, post, poll and
// destroy on one device (through Device's methods, the exported verbs
// and the headers' inline verbs, which reach the device's C operations
// without the Device's lock), read and acknowledge its asynchronous
// events and run Progress, while the device is closed under them (every
// other round an Autonomous device, whose transport thread runs the
// queues too). Every call finishes (none crashes or hangs), every error
// is one the call may give, and every call that starts after Close
// returned is an error.
func TestCloseMidFlight(t *testing.T) {
	rounds := 60
	if testing.Short() {
		rounds = 15
	}
	for r := range rounds {
		closeMidFlight(t, r)
	}
}

// closeErr is nil if err is one a call on a device being closed (or
// whose objects other goroutines destroy) may return.
func closeErr(err error) error {
	var le *LeakError
	for _, ok := range []error{ErrClosed, syscall.ENODEV, syscall.EINVAL, syscall.EBUSY, syscall.ENOMEM, syscall.ECANCELED} {
		if errors.Is(err, ok) {
			return nil
		}
	}
	if err == nil || errors.As(err, &le) {
		return nil
	}
	var de *DeadlockError
	if errors.As(err, &de) {
		return nil // a QP another goroutine moved to RESET or ERR mid-schedule
	}
	return err
}

func closeMidFlight(t *testing.T, round int) {
	var opts []DeviceOption
	if round%2 == 1 {
		opts = append(opts, Autonomous())
	}
	d, err := Open(opts...)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, d: d} // no cleanup: the device is closed under the goroutines
	defer func() {
		for _, p := range f.free {
			cfree(p)
		}
	}()
	if f.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	f.buf = callocSlice[byte](bufSize)
	f.free = append(f.free, unsafe.Pointer(&f.buf[0]))
	f.mr = f.reg(f.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	p := f.pair(nil, nil)
	ctx := d.Context()

	var closed atomic.Bool // set once Close has returned
	var stop atomic.Bool   // the goroutines' loops end
	var mu sync.Mutex
	var failures []string
	// call runs one call and checks its error.
	call := func(g int, name string, fn func() error) {
		after := closed.Load()
		err := fn()
		if err == nil && after {
			err = errors.New("succeeded on a closed device")
		}
		if err = closeErr(err); err != nil {
			mu.Lock()
			if len(failures) < 20 {
				failures = append(failures, fmt.Sprintf("round %d goroutine %d: %s: %v", round, g, name, err))
			}
			mu.Unlock()
		}
	}

	// The C memory each goroutine hands to the verbs, built before they
	// start (the fixture's helpers are not safe for concurrent use).
	type mem struct {
		nop    *verbs.ExpSendWR
		write  *verbs.ExpSendWR
		legacy *verbs.SendWR
		recv   *verbs.RecvWR
		task   *verbs.ExpTask
		badS   **verbs.ExpSendWR
		badL   **verbs.SendWR
		badR   **verbs.RecvWR
		badT   **verbs.ExpTask
		ewc    []verbs.ExpWC
		wc     []verbs.WC
		ev     *verbs.AsyncEvent
		qattr  *verbs.QPAttr
		qinit  *verbs.QPInitAttr
		port   *verbs.PortAttr
		devatt *verbs.ExpDeviceAttr
	}
	const workers = 8
	ms := make([]mem, workers)
	for i := range ms {
		m := &ms[i]
		m.nop = f.send(uint64(i), verbs.ExpWRNop, verbs.ExpSendSignaled, nil, 0)
		m.write = f.write(uint64(100+i), 8*i, 1024+8*i)
		m.legacy = alloc[verbs.SendWR](f)
		m.legacy.WRID, m.legacy.Opcode, m.legacy.SendFlags = uint64(200+i), verbs.WRRDMAWrite, int32(verbs.SendSignaled)
		m.legacy.SGList, m.legacy.NumSGE = f.sges(f.mr.Lkey, [2]int{8 * i, 8}), 1
		m.legacy.WR.RDMA().RemoteAddr, m.legacy.WR.RDMA().Rkey = f.addr(2048+8*i), f.mr.Rkey
		m.recv = f.recv(uint64(300+i), f.sges(f.mr.Lkey, [2]int{4096 + 8*i, 8}), 1)
		m.task = alloc[verbs.ExpTask](f)
		m.task.TaskType, m.task.Item.QP = verbs.ExpTaskSend, p.a
		m.task.Item.SetSendWR(f.send(uint64(400+i), verbs.ExpWRNop, verbs.ExpSendSignaled, nil, 0))
		m.badS, m.badL = alloc[*verbs.ExpSendWR](f), alloc[*verbs.SendWR](f)
		m.badR, m.badT = alloc[*verbs.RecvWR](f), alloc[*verbs.ExpTask](f)
		m.ewc, m.wc = allocN[verbs.ExpWC](f, 8), allocN[verbs.WC](f, 8)
		m.ev, m.qattr, m.qinit = alloc[verbs.AsyncEvent](f), alloc[verbs.QPAttr](f), alloc[verbs.QPInitAttr](f)
		m.port, m.devatt = alloc[verbs.PortAttr](f), alloc[verbs.ExpDeviceAttr](f)
	}
	ewcSize := uint32(unsafe.Sizeof(verbs.ExpWC{}))

	work := []func(g int, m *mem){
		// Create, connect, overrun a one-entry CQ (an asynchronous
		// event for the readers), destroy.
		func(g int, m *mem) {
			var cq *verbs.CQ
			var qp *verbs.QP
			call(g, "CreateCQ", func() (err error) { cq, err = d.CreateCQ(1); return })
			if cq == nil {
				return
			}
			call(g, "CreateQP", func() (err error) { qp, err = d.CreateQP(f.pd, cq, cq); return })
			if qp != nil {
				call(g, "Connect", func() error { return device.ConnectPair(qp, qp) })
				for range 3 {
					call(g, "ExpPostSend", func() error { m.nop.Next = nil; return verbs.ExpPostSend(qp, m.nop, m.badS) })
				}
				call(g, "ExpPollCQ", func() error { _, err := verbs.ExpPollCQRaw(cq, 8, &m.ewc[0], ewcSize); return err })
				call(g, "DestroyQP", func() error { return d.DestroyQP(qp) })
			}
			call(g, "DestroyCQ", func() error { return d.DestroyCQ(cq) })
		},
		// Post on the shared pair: exp and legacy sends, receives.
		func(g int, m *mem) {
			call(g, "ExpPostSend", func() error { m.write.Next = nil; return verbs.ExpPostSend(p.a, m.write, m.badS) })
			call(g, "PostSend", func() error { return verbs.PostSend(p.a, m.legacy, m.badL) })
			call(g, "PostRecv", func() error { return verbs.PostRecv(p.b, m.recv, m.badR) })
		},
		// Poll the shared CQs both ways.
		func(g int, m *mem) {
			call(g, "ExpPollCQ", func() error { _, err := verbs.ExpPollCQRaw(p.cqa, 8, &m.ewc[0], ewcSize); return err })
			call(g, "PollCQ", func() error { _, err := verbs.PollCQ(p.cqa, m.wc[:8]); return err })
			call(g, "PollCQ b", func() error { _, err := verbs.PollCQ(p.cqb, m.wc[:8]); return err })
		},
		// Tasks, through the context taken before Close.
		func(g int, m *mem) {
			call(g, "ExpPostTask", func() error { return verbs.ExpPostTask(ctx, m.task, m.badT) })
			call(g, "QPStats", func() error { _, _, _, err := d.QPStats(p.a); return err })
		},
		// The exported verbs: PDs, MRs, CQs and QPs made and destroyed
		// through the context.
		func(g int, m *mem) {
			var pd *verbs.PD
			call(g, "verbs.AllocPD", func() (err error) { pd, err = verbs.AllocPD(ctx); return })
			if pd != nil {
				var mr *verbs.MR
				call(g, "verbs.RegMR", func() (err error) {
					mr, err = verbs.RegMR(pd, unsafe.Pointer(&f.buf[0]), 4096, int32(verbs.AccessLocalWrite))
					return
				})
				if mr != nil {
					call(g, "verbs.DeregMR", func() error { return verbs.DeregMR(mr) })
				}
				call(g, "verbs.DeallocPD", func() error { return verbs.DeallocPD(pd) })
			}
			var cq *verbs.CQ
			call(g, "verbs.CreateCQ", func() (err error) { cq, err = verbs.CreateCQ(ctx, 4, nil, nil, 0); return })
			if cq != nil {
				call(g, "verbs.DestroyCQ", func() error { return verbs.DestroyCQ(cq) })
			}
		},
		// Asynchronous events, both ways.
		func(g int, m *mem) {
			var ev *verbs.AsyncEvent
			call(g, "GetAsyncEvent", func() (err error) { ev, err = d.GetAsyncEvent(); return })
			if ev != nil {
				call(g, "AckAsyncEvent", func() error { return d.AckAsyncEvent(ev) })
			}
		},
		func(g int, m *mem) {
			if closed.Load() || rand.IntN(2) == 0 {
				call(g, "verbs.GetAsyncEvent", func() error {
					err := verbs.GetAsyncEvent(ctx, m.ev)
					if err == nil {
						err = verbs.AckAsyncEvent(m.ev)
					}
					return err
				})
			}
			call(g, "Progress", func() error { _, err := d.Progress(); return err })
		},
		// Queries and state changes on the shared QPs.
		func(g int, m *mem) {
			call(g, "verbs.QueryPort", func() error { return verbs.QueryPort(ctx, 1, m.port) })
			call(g, "verbs.ExpQueryDevice", func() error { return verbs.ExpQueryDevice(ctx, m.devatt) })
			call(g, "verbs.QueryQP", func() error { return verbs.QueryQP(p.b, m.qattr, 0, m.qinit) })
			call(g, "verbs.ReqNotifyCQ", func() error { return verbs.ReqNotifyCQ(p.cqb, 0) })
			if rand.IntN(16) == 0 { // reconnect: RESET, then device.ConnectPair
				m.qattr.QPState = verbs.QpsReset
				call(g, "verbs.ModifyQP", func() error { return verbs.ModifyQP(p.b, m.qattr, int32(verbs.QPStateConst)) })
				call(g, "Connect", func() error { return device.ConnectPair(p.b, p.a) })
			}
		},
	}
	var wg sync.WaitGroup
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			after := 0
			for !stop.Load() && after < 10 {
				if closed.Load() {
					after++
				}
				work[g](g, &ms[g])
			}
		}()
	}
	time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
	call(-1, "Close", d.Close)
	closed.Store(true)
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(time.Minute):
		buf := make([]byte, 1<<20)
		t.Fatalf("round %d: goroutines still running a minute after Close:\n%s", round, buf[:runtime.Stack(buf, true)])
	}
	for _, s := range failures {
		t.Error(s)
	}
	if t.Failed() {
		t.FailNow()
	}
}

// TestClosedHandles: every verb given a handle that outlived Close (the
// context, a PD, MR, CQ or QP live at Close, a CQ and a QP destroyed
// before it) fails with ENODEV, by whichever path it reaches the device:
// the headers' inline verbs call its operations directly, the exported
// verbs look the handle up. These handles used to name freed memory.
func TestClosedHandles(t *testing.T) {
	f := newFixture(t)
	d, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	mr, err := d.RegMR(pd, f.buf[:4096], verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	cq, _ := d.CreateCQ(4)
	qp, err := d.CreateQP(pd, cq, cq)
	if err != nil {
		t.Fatal(err)
	}
	if err := device.ConnectPair(qp, qp); err != nil {
		t.Fatal(err)
	}
	deadCQ, _ := d.CreateCQ(4)
	deadQP, _ := d.CreateQP(pd, cq, cq)
	if err := d.DestroyQP(deadQP); err != nil {
		t.Fatal(err)
	}
	if err := d.DestroyCQ(deadCQ); err != nil {
		t.Fatal(err)
	}
	ctx := d.Context()
	var le *LeakError
	if err := d.Close(); !errors.As(err, &le) {
		t.Fatalf("Close = %v, want the leaks", err)
	}
	// Reuse what Close freed, so a read of freed memory finds garbage.
	for range 1000 {
		f.free = append(f.free, unsafe.Pointer(&callocSlice[byte](64 + 8*rand.IntN(64))[0]))
	}

	wr := f.send(1, verbs.ExpWRNop, verbs.ExpSendSignaled, nil, 0)
	lwr := alloc[verbs.SendWR](f)
	rwr := f.recv(2, nil, 0)
	task := alloc[verbs.ExpTask](f)
	task.Item.QP = qp
	task.Item.SetSendWR(wr)
	ewc, wc := allocN[verbs.ExpWC](f, 4), allocN[verbs.WC](f, 4)
	qattr, eqattr, qinit := alloc[verbs.QPAttr](f), alloc[verbs.ExpQPAttr](f), alloc[verbs.QPInitAttr](f)
	eqinit := alloc[verbs.ExpQPInitAttr](f)
	eqinit.PD, eqinit.SendCQ, eqinit.RecvCQ, eqinit.QPType = pd, cq, cq, verbs.QptRC
	eqinit.CompMask = uint32(verbs.ExpQPInitAttrPD)
	qinit.SendCQ, qinit.RecvCQ, qinit.QPType = cq, cq, verbs.QptRC
	cqattr := alloc[verbs.ExpCQAttr](f)
	ev := alloc[verbs.AsyncEvent](f)
	ev.EventType = verbs.EventCQErr
	ev.Element.SetCQ(cq)
	ahattr := alloc[verbs.AHAttr](f)

	type check struct {
		name string
		err  error
	}
	var checks []check
	add := func(name string, err error) { checks = append(checks, check{name, err}) }
	for _, h := range []struct {
		name string
		qp   *verbs.QP
		cq   *verbs.CQ
	}{{"live", qp, cq}, {"destroyed", deadQP, deadCQ}} {
		add(h.name+" PostSend", verbs.PostSend(h.qp, lwr, nil))
		add(h.name+" PostRecv", verbs.PostRecv(h.qp, rwr, nil))
		add(h.name+" ExpPostSend", verbs.ExpPostSend(h.qp, wr, nil))
		_, err := verbs.PollCQ(h.cq, wc[:4])
		add(h.name+" PollCQ", err)
		_, err = verbs.ExpPollCQ(h.cq, ewc[:4])
		add(h.name+" ExpPollCQ", err)
		add(h.name+" ReqNotifyCQ", verbs.ReqNotifyCQ(h.cq, 0))
		add(h.name+" ExpModifyCQ", verbs.ExpModifyCQ(h.cq, cqattr, int32(verbs.ExpCQCapFlagsConst)))
		add(h.name+" ExpModifyQP", verbs.ExpModifyQP(h.qp, eqattr, uint64(verbs.ExpQPState)))
		add(h.name+" ModifyQP", verbs.ModifyQP(h.qp, qattr, int32(verbs.QPStateConst)))
		add(h.name+" QueryQP", verbs.QueryQP(h.qp, qattr, 0, qinit))
		add(h.name+" Connect", device.ConnectPair(h.qp, h.qp))
		add(h.name+" DestroyQP", verbs.DestroyQP(h.qp))
		add(h.name+" ResizeCQ", verbs.ResizeCQ(h.cq, 8))
		add(h.name+" DestroyCQ", verbs.DestroyCQ(h.cq))
	}
	add("ExpPostTask", verbs.ExpPostTask(ctx, task, nil))
	add("ExpQueryDevice", verbs.ExpQueryDevice(ctx, alloc[verbs.ExpDeviceAttr](f)))
	add("QueryDevice", verbs.QueryDevice(ctx, alloc[verbs.DeviceAttr](f)))
	add("QueryPort", verbs.QueryPort(ctx, 1, alloc[verbs.PortAttr](f)))
	add("QueryGID", verbs.QueryGID(ctx, 1, 0, alloc[verbs.GID](f)))
	add("QueryPkey", verbs.QueryPkey(ctx, 1, 0, alloc[uint16](f)))
	_, err = verbs.AllocPD(ctx)
	add("AllocPD", err)
	_, err = verbs.CreateCompChannel(ctx)
	add("CreateCompChannel", err)
	_, err = verbs.CreateCQ(ctx, 4, nil, nil, 0)
	add("CreateCQ", err)
	_, err = verbs.ExpCreateCQ(ctx, 4, nil, nil, 0, alloc[verbs.ExpCQInitAttr](f))
	add("ExpCreateCQ", err)
	_, err = verbs.ExpCreateQP(ctx, eqinit)
	add("ExpCreateQP", err)
	_, err = verbs.CreateQP(pd, qinit)
	add("CreateQP", err)
	_, err = verbs.RegMR(pd, unsafe.Pointer(&f.buf[0]), 64, int32(verbs.AccessLocalWrite))
	add("RegMR", err)
	_, err = verbs.CreateAH(pd, ahattr)
	add("CreateAH", err)
	add("DeregMR", verbs.DeregMR(mr))
	add("DeallocPD", verbs.DeallocPD(pd))
	add("GetAsyncEvent", verbs.GetAsyncEvent(ctx, ev))
	add("CloseDevice", verbs.CloseDevice(ctx))
	for _, c := range checks {
		if !isErrno(c.err, syscall.ENODEV) {
			t.Errorf("%s on a closed device: %v, want ENODEV", c.name, c.err)
		}
	}
	// The acknowledgements return nothing: they must change nothing.
	before := [2]uint32{cq.AsyncEventsCompleted, cq.CompEventsCompleted}
	if err := verbs.AckAsyncEvent(ev); err != nil {
		t.Error(err)
	}
	if err := verbs.AckCQEvents(cq, 1); err != nil {
		t.Error(err)
	}
	if after := [2]uint32{cq.AsyncEventsCompleted, cq.CompEventsCompleted}; after != before {
		t.Errorf("acknowledgements on a closed device's CQ moved its counters %v to %v", before, after)
	}
}

// TestOpenOutOfFDs: Open needs six file descriptors (async_fd, the
// device's own dup of it, the close wake-up, the listener, the epoll set
// and the transport's wake-up); without them it fails with the errno the
// system gave, EMFILE, not ENOMEM, and closes the ones it had got.
func TestOpenOutOfFDs(t *testing.T) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	// Fill every descriptor below a low limit, then free 0 to 5 of them:
	// each of the six descriptors Open takes fails in turn.
	low := lim
	low.Cur = 256
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Skipf("SKIPPED: cannot lower RLIMIT_NOFILE: %v", err)
	}
	var fill []int
	defer func() {
		for _, fd := range fill {
			syscall.Close(fd)
		}
	}()
	for {
		fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			if !errors.Is(err, syscall.EMFILE) {
				t.Fatalf("filling the descriptor table: %v", err)
			}
			break
		}
		fill = append(fill, fd)
	}
	if len(fill) < 6 {
		t.Fatalf("only %d descriptors below the limit", len(fill))
	}
	for free := 0; free < 6; free++ {
		for i := 0; i < free; i++ {
			syscall.Close(fill[len(fill)-1-i])
		}
		d, err := Open()
		if d != nil || !errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENOMEM) {
			t.Errorf("Open with %d free descriptors = %v, %v; want EMFILE", free, d, err)
		}
		// What Open took it gave back: the same descriptors are free again.
		for i := 0; i < free; i++ {
			fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
			if err != nil {
				t.Fatalf("Open with %d free descriptors kept some: %v", free, err)
			}
			fill[len(fill)-1-i] = fd
		}
	}
}

// TestCopiedDevice: a copy of a Device is the same device: closing it
// closes the original, whose own Close is then ErrClosed (it used to
// close the freed context again and panic on the deleted handle); the
// zero Device is refused like a nil one.
func TestCopiedDevice(t *testing.T) {
	d, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	cp := *d
	pd, err := cp.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.DeallocPD(pd); err != nil {
		t.Fatalf("DeallocPD through the original of a PD the copy made: %v", err)
	}
	if err := cp.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Close of the original after the copy's: %v, want ErrClosed", err)
	}
	if _, err := d.AllocPD(); !errors.Is(err, ErrClosed) {
		t.Fatalf("AllocPD on the original after the copy's Close: %v, want ErrClosed", err)
	}
	if d.Context() != nil {
		t.Fatal("the original's Context after the copy's Close is not nil")
	}
	var zero Device
	if err := zero.Close(); !errors.Is(err, ErrNilDevice) {
		t.Fatalf("zero Device Close: %v, want ErrNilDevice", err)
	}
	if _, err := zero.AllocPD(); !errors.Is(err, ErrNilDevice) {
		t.Fatalf("zero Device AllocPD: %v, want ErrNilDevice", err)
	}
	if _, err := zero.GetAsyncEvent(); !errors.Is(err, ErrNilDevice) {
		t.Fatalf("zero Device GetAsyncEvent: %v, want ErrNilDevice", err)
	}
	if _, err := zero.Progress(); !errors.Is(err, ErrNilDevice) || zero.Context() != nil {
		t.Fatalf("zero Device Progress: %v, Context %p", err, zero.Context())
	}
}
