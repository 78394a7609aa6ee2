//go:build linux && cgo

package softdev

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/device"
)

// Shared receive queues: created, modified, queried and destroyed as
// ibv_create_srq and friends do (Device methods running the exported
// verbs' code), posted with ibv_post_srq_recv (ops.post_srq_recv). The
// rules are in engine_exec.c (sd_recv_take, recv_cqe, flush_one, poll_free).

func (f *fixture) srq(maxWR, maxSGE int) *verbs.SRQ {
	f.t.Helper()
	s, err := f.d.CreateSRQ(f.pd, maxWR, maxSGE)
	if err != nil {
		f.t.Fatalf("CreateSRQ: %v", err)
	}
	f.srqs = append(f.srqs, s)
	return s
}

// pendingEvent is the oldest pending asynchronous event of f's device,
// or an error wrapping EAGAIN if none is (async_fd made non-blocking).
func (f *fixture) pendingEvent() (*verbs.AsyncEvent, error) {
	f.t.Helper()
	if err := syscall.SetNonblock(f.d.AsyncFD(), true); err != nil {
		f.t.Fatal(err)
	}
	return f.d.GetAsyncEvent()
}

// srqRecv posts one receive of n bytes at f.buf[off:] to the SRQ.
func (f *fixture) srqRecv(srq *verbs.SRQ, id uint64, off, n int) error {
	return f.d.PostSRQRecv(srq, f.recv(id, f.sges(f.mr.Lkey, [2]int{off, n}), 1), nil)
}

// srqPairs is n RC pairs whose b sides take their receives from srq.
func (f *fixture) srqPairs(srq *verbs.SRQ, n int) []pair {
	f.t.Helper()
	ps := make([]pair, n)
	for i := range ps {
		ps[i] = f.pair(nil, []device.QPOption{device.SRQ(srq)})
	}
	return ps
}

// Two QPs take receives from one device.SRQ, in the order their messages come;
// each completion names its QP and the SRQ. The device.SRQ holds max_wr WQEs:
// posting more is ENOMEM until polled completions free slots, as mlx4 and
// mlx5 free an device.SRQ WQE in poll_cq.
func TestSRQShared(t *testing.T) {
	f := newFixture(t)
	srq := f.srq(4, 1)
	ps := f.srqPairs(srq, 2)
	for i := range 4 {
		if err := f.srqRecv(srq, uint64(100+i), 4096*(i+1), 4096); err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
	}
	if err := f.srqRecv(srq, 104, 0, 64); !isErrno(err, syscall.ENOMEM) {
		t.Fatalf("a fifth receive on a 4-deep SRQ: %v, want ENOMEM", err)
	}
	copy(f.buf, "from one")
	copy(f.buf[64:], "from two")
	send := func(p pair, id uint64, off int) {
		t.Helper()
		f.postSend(p.a, f.send(id, verbs.ExpWRSend, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{off, 8}), 1))
		f.progress() // each arrives before the next is posted (else the round robin orders them)
	}
	send(ps[1], 1, 64)
	send(ps[0], 2, 0)
	send(ps[1], 3, 64)
	r0, r1 := f.poll(ps[0].cqb), f.poll(ps[1].cqb)
	if len(r0) != 1 || len(r1) != 2 {
		t.Fatalf("receives: %+v / %+v, want 1 and 2", sum(r0), sum(r1))
	}
	for _, c := range []struct {
		wc   verbs.ExpWC
		id   uint64
		qp   *verbs.QP
		text string
		off  int
	}{{r1[0], 100, ps[1].b, "from two", 4096}, {r0[0], 101, ps[0].b, "from one", 8192}, {r1[1], 102, ps[1].b, "from two", 12288}} {
		if c.wc.WRID != c.id || c.wc.QPNum != c.qp.QPNum || c.wc.SRQ != srq || c.wc.Status != verbs.WCSuccess || string(f.buf[c.off:c.off+8]) != c.text {
			t.Errorf("receive %+v: want wr %d on QP %#x from device.SRQ %p with %q", c.wc, c.id, c.qp.QPNum, srq, c.text)
		}
	}
	// Three slots were freed by those polls: three posts fit, a fourth not.
	for i := range 3 {
		if err := f.srqRecv(srq, uint64(200+i), 0, 64); err != nil {
			t.Fatalf("post after polling, %d: %v", i, err)
		}
	}
	if err := f.srqRecv(srq, 203, 0, 64); !isErrno(err, syscall.ENOMEM) {
		t.Errorf("post beyond max_wr after polling: %v, want ENOMEM", err)
	}
	// A QP with an device.SRQ has no receive queue of its own.
	if err := verbs.PostRecv(ps[0].b, f.recv(9, f.sges(f.mr.Lkey, [2]int{0, 8}), 1), nil); !isErrno(err, syscall.ENOMEM) {
		t.Errorf("ibv_post_recv on a QP with an SRQ: %v, want ENOMEM", err)
	}
	qa, qi := alloc[verbs.QPAttr](f), alloc[verbs.QPInitAttr](f)
	if err := verbs.QueryQP(ps[0].b, qa, 0, qi); err != nil || qi.SRQ != srq || qi.Cap.MaxRecvWR != 0 {
		t.Errorf("ibv_query_qp: %v, srq %p, max_recv_wr %d; want %p and 0", err, qi.SRQ, qi.Cap.MaxRecvWR, srq)
	}
	if err := f.d.DestroySRQ(srq); !isErrno(err, syscall.EBUSY) {
		t.Errorf("DestroySRQ with QPs on it: %v, want EBUSY", err)
	}
}

// The device.SRQ limit (ibv_modify_srq(3)): armed by IBV_SRQ_LIMIT, it raises
// IBV_EVENT_SRQ_LIMIT_REACHED once fewer WQEs than it are left, then is
// disarmed (query says 0). A limit of max_wr or more, and a resize, are
// EINVAL.
func TestSRQLimit(t *testing.T) {
	f := newFixture(t)
	srq := f.srq(8, 2)
	p := f.srqPairs(srq, 1)[0]
	if err := f.d.ModifySRQ(srq, verbs.SRQAttr{SRQLimit: 8}, verbs.SRQLimit); !isErrno(err, syscall.EINVAL) {
		t.Errorf("limit 8 on an 8-deep SRQ: %v, want EINVAL", err)
	}
	if err := f.d.ModifySRQ(srq, verbs.SRQAttr{MaxWR: 16}, verbs.SRQMaxWR); !isErrno(err, syscall.EINVAL) {
		t.Errorf("resizing: %v, want EINVAL", err)
	}
	if err := f.d.ModifySRQ(srq, verbs.SRQAttr{SRQLimit: 3}, verbs.SRQLimit); err != nil {
		t.Fatal(err)
	}
	if a, err := f.d.QuerySRQ(srq); err != nil || a != (verbs.SRQAttr{MaxWR: 8, MaxSGE: 2, SRQLimit: 3}) {
		t.Fatalf("QuerySRQ: %+v, %v", a, err)
	}
	for i := range 5 {
		if err := f.srqRecv(srq, uint64(i), 0, 64); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 { // 5 -> 3 left: not below the limit
		f.postSend(p.a, f.send(uint64(i), verbs.ExpWRSend, 0, f.sges(f.mr.Lkey, [2]int{0, 8}), 1))
	}
	f.progress()
	if _, err := f.pendingEvent(); !isErrno(err, syscall.EAGAIN) {
		t.Fatalf("an event before the limit was crossed: %v", err)
	}
	f.postSend(p.a, f.send(9, verbs.ExpWRSend, 0, f.sges(f.mr.Lkey, [2]int{0, 8}), 1)) // 2 left
	f.progress()
	ev, err := f.pendingEvent()
	if err != nil || ev.EventType != verbs.EventSRQLimitReached || ev.Element.SRQ() != srq {
		t.Fatalf("event %+v, %v: want SRQ_LIMIT_REACHED for %p", ev, err, srq)
	}
	if err := f.d.AckAsyncEvent(ev); err != nil || srq.EventsCompleted != 1 {
		t.Errorf("ack: %v, events_completed %d", err, srq.EventsCompleted)
	}
	if a, _ := f.d.QuerySRQ(srq); a.SRQLimit != 0 {
		t.Errorf("limit after it fired: %d, want 0 (disarmed)", a.SRQLimit)
	}
	f.postSend(p.a, f.send(10, verbs.ExpWRSend, 0, f.sges(f.mr.Lkey, [2]int{0, 8}), 1))
	f.progress()
	if _, err := f.pendingEvent(); !isErrno(err, syscall.EAGAIN) {
		t.Errorf("a second event from a disarmed limit: %v", err)
	}
}

// A QP with an device.SRQ that goes to the error state flushes the WQE it held
// for a message half taken (IBV_WC_WR_FLUSH_ERR), not the SRQ's others,
// and raises IBV_EVENT_QP_LAST_WQE_REACHED once. The first packet of a
// SEND comes from a raw peer; the rest never does.
func TestSRQFlush(t *testing.T) {
	f := newFixture(t)
	srq := f.srq(4, 1)
	p := newRawPeer(t, 0)
	cq := f.cq(16)
	qp := f.qp(cq, cq, device.SRQ(srq))
	l := defaultLink()
	l.rqPSN = 1000
	connectOne(t, qp, 0x4242, p.gid(), l)
	other := f.srqPairs(srq, 1)[0]
	for i := range 2 {
		if err := f.srqRecv(srq, uint64(50+i), 4096*i, 4096); err != nil {
			t.Fatal(err)
		}
	}
	conn := p.open(f.d, 0)
	conn.Write(frame{op: 1 /* SEND_FIRST */, dst: qp.QPNum, src: 0x4242, psn: 1000, payload: bytes.Repeat([]byte{'x'}, 1024)}.bytes())
	waitFor(t, func() bool { w, _ := f.d.QPWire(qp); return w.RxPackets == 1 }, "the first packet")
	a := alloc[verbs.QPAttr](f)
	a.QPState = verbs.QpsErr
	if err := f.d.ModifyQP(qp, a, verbs.QPStateConst); err != nil {
		t.Fatal(err)
	}
	if r := sum(f.poll(cq)); len(r) != 1 || r[0].ID != 50 || r[0].Status != verbs.WCWRFlushErr {
		t.Fatalf("flush: %+v, want the held wr 50 flushed", r)
	}
	ev, err := f.pendingEvent()
	if err != nil || ev.EventType != verbs.EventQPLastWQEReached || ev.Element.QP() != qp {
		t.Fatalf("event %+v, %v: want LAST_WQE_REACHED for the QP", ev, err)
	}
	f.d.AckAsyncEvent(ev)
	f.progress()
	if _, err := f.pendingEvent(); !isErrno(err, syscall.EAGAIN) {
		t.Errorf("a second LAST_WQE_REACHED: %v", err)
	}
	// The SRQ's other WQE is still there for the other QP.
	f.postSend(other.a, f.send(1, verbs.ExpWRSend, 0, f.sges(f.mr.Lkey, [2]int{0, 8}), 1))
	if r := sum(f.poll(other.cqb)); len(r) != 1 || r[0].ID != 51 || r[0].Status != verbs.WCSuccess {
		t.Errorf("the other QP's receive: %+v, want wr 51", r)
	}
}

// A SEND to a QP of the same device whose device.SRQ is empty waits (the RNR
// rule of the device's loopback: no NAK, no retry count) until a receive
// is posted to the SRQ; a UD QP takes datagrams from an device.SRQ too. Creation
// refuses max_wr 0 and more than max_qp_wr.
func TestSRQRules(t *testing.T) {
	f := newFixture(t, MaxQPWR(64))
	if _, err := f.d.CreateSRQ(f.pd, 65, 1); !isErrno(err, syscall.EINVAL) {
		t.Errorf("CreateSRQ above max_qp_wr: %v, want EINVAL", err)
	}
	if _, err := f.d.CreateSRQ(f.pd, 4, 65); !isErrno(err, syscall.EINVAL) {
		t.Errorf("CreateSRQ with 65 SGEs: %v, want EINVAL", err)
	}
	srq := f.srq(4, 1)
	p := f.srqPairs(srq, 1)[0]
	f.postSend(p.a, f.send(1, verbs.ExpWRSend, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{0, 8}), 1))
	if s := f.poll(p.cqa); len(s) != 0 {
		t.Fatalf("a SEND to an empty device.SRQ completed: %+v", sum(s))
	}
	if err := f.srqRecv(srq, 7, 1024, 64); err != nil {
		t.Fatal(err)
	}
	if s, r := sum(f.poll(p.cqa)), sum(f.poll(p.cqb)); len(s) != 1 || len(r) != 1 || r[0].ID != 7 {
		t.Errorf("after the device.SRQ got a receive: %+v / %+v", s, r)
	}
	ua, acq := f.udQP(udQkey)
	ub, bcq := f.udQP(udQkey, device.SRQ(srq))
	if err := f.srqRecv(srq, 8, 2048, 128); err != nil {
		t.Fatal(err)
	}
	if err := f.udSend(ua, f.ah(f.d.GID(), 0), ub.QPNum, udQkey, 1, 0, 16, verbs.WRSend, 0, 0); err != nil {
		t.Fatal(err)
	}
	f.poll(acq)
	if r := f.poll(bcq); len(r) != 1 || r[0].WRID != 8 || r[0].SRQ != srq || byteLen(&r[0]) != 56 {
		t.Errorf("UD from an SRQ: %+v", sum(r))
	}
}

// Close counts address handles and SRQs left open (LeakError), and their
// handles stay harmless after it: the verbs on them fail with ENODEV, the
// methods with ErrClosed.
func TestCloseLeaksAHAndSRQ(t *testing.T) {
	d, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	srq, err := d.CreateSRQ(pd, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	a := calloc[verbs.AHAttr]()
	defer cfree(unsafe.Pointer(a))
	a.PortNum, a.IsGlobal = 1, 1
	*a.GRH.Dgid.Raw() = d.GID()
	ah, err := verbs.CreateAH(pd, a)
	if err != nil {
		t.Fatal(err)
	}
	var le *LeakError
	if err := d.Close(); !errors.As(err, &le) || *le != (LeakError{PDs: 1, AHs: 1, SRQs: 1}) {
		t.Fatalf("Close: %v, want 1 PD, 1 AH and 1 device.SRQ left", err)
	}
	if err := verbs.DestroyAH(ah); !isErrno(err, syscall.ENODEV) {
		t.Errorf("ibv_destroy_ah after Close: %v, want ENODEV", err)
	}
	if err := d.DestroySRQ(srq); !errors.Is(err, ErrClosed) {
		t.Errorf("DestroySRQ after Close: %v, want ErrClosed", err)
	}
}
