//go:build linux && cgo

package softdev

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
)

// A plain ACK that a poll or a post produces may wait aside for the next
// request to the same peer (transport_wire.c, flush). These tests hold the wire to
// what that must not change: every ACK still arrives, and answers keep
// their order.

// pollFor polls cq until it has given n completions; the test fails
// after 10 s (a hang, not a speed).
func (f *fixture) pollFor(cq *verbs.CQ, n int) []verbs.ExpWC {
	f.t.Helper()
	var got []verbs.ExpWC
	for end := time.Now().Add(10 * time.Second); len(got) < n; time.Sleep(50 * time.Microsecond) {
		got = append(got, f.poll(cq)...)
		if len(got) < n && time.Now().After(end) {
			f.t.Fatalf("%d of %d completions after 10 s: %+v", len(got), n, sum(got))
		}
	}
	return got
}

// wireClean fails the test unless qp's transport counters show no
// resend, timeout, duplicate or dropped packet.
func (f *fixture) wireClean(qp *verbs.QP) {
	f.t.Helper()
	w, err := f.d.QPWire(qp)
	if err != nil {
		f.t.Fatal(err)
	}
	if w.Retransmitted != 0 || w.Timeouts != 0 || w.Duplicates != 0 || w.Dropped != 0 || w.SeqNaksReceived != 0 {
		f.t.Fatalf("QP %#x: %+v; want no resend, timeout, duplicate, drop or sequence NAK", qp.QPNum, w)
	}
}

// The responder's application calls nothing while the sends arrive (its
// transport thread takes them, and must not hold their ACKs), then takes
// its receives with polls and goes quiet again (what those polls held
// must leave too): the requester completes every send long before its
// ACK timer (timeout 18: about 1.07 s) would resend.
func TestWireHeldAcksLeave(t *testing.T) {
	la, lb := defaultLink(), defaultLink()
	la.timeout, lb.timeout = 18, 18
	p := newWirePair(t, la, lb, nil, nil)
	const n = 4
	for i := range 2 * n {
		p.g.postRecv(p.b, p.g.recv(uint64(100+i), p.g.sges(p.g.mr.Lkey, [2]int{1024 + 64*i, 64}), 1))
	}
	send := func(from int) {
		for i := from; i < from+n; i++ {
			p.f.postSend(p.a, p.f.send(uint64(i), verbs.ExpWRSend, verbs.ExpSendSignaled, p.f.sges(p.f.mr.Lkey, [2]int{64 * i, 8}), 1))
		}
		for _, c := range p.f.pollFor(p.cqa, n) {
			if c.Status != verbs.WCSuccess || c.ExpOpcode != verbs.ExpWCSend {
				t.Fatalf("send %+v", sum([]verbs.ExpWC{c}))
			}
		}
	}
	send(0) // g quiet throughout
	for _, c := range p.g.pollFor(p.cqb, n) {
		if c.Status != verbs.WCSuccess {
			t.Fatalf("receive %+v", sum([]verbs.ExpWC{c}))
		}
	}
	// Now g polls for the next ones as they come, then goes quiet.
	done := make(chan []verbs.ExpWC)
	go func() { done <- p.g.pollFor(p.cqb, n) }()
	send(n)
	for _, c := range <-done {
		if c.Status != verbs.WCSuccess {
			t.Fatalf("receive %+v", sum([]verbs.ExpWC{c}))
		}
	}
	p.f.wireClean(p.a)
}

// SENDs and READs both ways at once: each responder's ACKs (which may
// wait aside, and let its own requests pass) and its READ responses
// (which take the ACKs before them along) reach the requester in order:
// an ACK after a READ response that answers past it would be a ghost,
// counted as dropped.
func TestWireAnswersKeepOrder(t *testing.T) {
	p := newWirePair(t, defaultLink(), defaultLink(), nil, nil)
	const rounds = 50
	sides := []struct {
		me, peer *fixture
		qp       *verbs.QP
		cq       *verbs.CQ
		mark     byte
	}{{p.f, p.g, p.a, p.cqa, 0xa0}, {p.g, p.f, p.b, p.cqb, 0xb0}}
	for _, s := range sides {
		for i := range 256 {
			s.me.buf[8192+i] = s.mark ^ byte(i) // what the peer's READs fetch
		}
		for i := range rounds {
			s.me.postRecv(s.qp, s.me.recv(uint64(1000+i), s.me.sges(s.me.mr.Lkey, [2]int{1024, 64}), 1))
		}
	}
	for i := range rounds {
		for _, s := range sides {
			snd := s.me.send(uint64(2*i), verbs.ExpWRSend, verbs.ExpSendSignaled, s.me.sges(s.me.mr.Lkey, [2]int{0, 16}), 1)
			rd := s.me.send(uint64(2*i+1), verbs.ExpWRRDMARead, verbs.ExpSendSignaled, s.me.sges(s.me.mr.Lkey, [2]int{16384 + 256*(i%8), 256}), 1)
			rd.WR.RDMA().RemoteAddr, rd.WR.RDMA().Rkey = s.peer.addr(8192), s.peer.mr.Rkey
			s.me.postSend(s.qp, snd, rd)
		}
		for _, s := range sides {
			for _, c := range s.me.pollFor(s.cq, 3) { // its SEND, its READ, the peer's SEND
				if c.Status != verbs.WCSuccess {
					t.Fatalf("round %d: %+v", i, sum([]verbs.ExpWC{c}))
				}
			}
			got := s.me.buf[16384+256*(i%8):][:256]
			for k, b := range got {
				if want := s.peer.buf[8192+k]; b != want {
					t.Fatalf("round %d: READ byte %d is %#x, want %#x", i, k, b, want)
				}
			}
		}
	}
	p.f.wireClean(p.a)
	p.g.wireClean(p.b)
}

// The transport thread holds a connection's ACKs, for the application's
// next request to that peer to carry (as a poll's are held), only while
// that application answers within 20 µs. A responder whose application
// posts nothing gets its ACKs at once, as ib_write_bw -t 1 needs (each
// WRITE waits for the last one's completion). Two applications that
// WRITE to each other in turn and spin on memory meanwhile, as
// ib_write_lat does, have their ACKs ride on those WRITEs, also when the
// threads place the data (here nearly always: one WRITE in 16 is
// signaled, and its completion polled 8 rounds later), so that the ACK does not complete the peer's WRITE
// before its data comes, which would leave that data, too, to the peer's
// thread (ib_write_lat's polls then stop taking it: 64 KiB rounds were
// 30 % slower). When the answers stop, the first ACK held waits out its
// 20 µs, and the next ones go at once again.
func TestWireThreadHoldsAcksWhileAnswered(t *testing.T) {
	p := newWirePair(t, defaultLink(), defaultLink(), nil, nil)
	holds := func() uint64 { return p.g.d.Wire().ThreadHolds }
	oneWay := func(n int) uint64 {
		t.Helper()
		before := holds()
		for i := range n {
			p.writeUnpolled(0, 64, byte(1+i%250))
		}
		return holds() - before
	}
	if h := oneWay(100); h != 0 {
		t.Fatalf("g's application posted nothing, and its transport thread held the ACKs of %d of 100 WRITEs", h)
	}

	const rounds, flag, src = 2000, 4096, 4160
	before := [2]uint64{p.f.d.Wire().ThreadHolds, holds()}
	turn := func(me, peer *fixture, qp *verbs.QP, cq *verbs.CQ, first bool) error {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		wr := me.send(1, verbs.ExpWRRDMAWrite, 0, me.sges(me.mr.Lkey, [2]int{src, 4}), 1)
		wr.WR.RDMA().RemoteAddr, wr.WR.RDMA().Rkey = peer.addr(flag), peer.mr.Rkey
		in := (*uint32)(unsafe.Pointer(&me.buf[flag]))
		wc := allocN[verbs.ExpWC](me, 1)
		bad := alloc[*verbs.ExpSendWR](me)
		for i := uint32(1); i <= rounds; i++ {
			if !first || i > 1 {
				want := i - btou(first)
				end := time.Now().Add(10 * time.Second) // a hang, not a speed: each round gets 10 s
				for spins := 0; atomic.LoadUint32(in) != want; spins++ {
					if spins%4096 == 0 && time.Now().After(end) {
						return fmt.Errorf("round %d: the peer's WRITE of %d not placed in 10 s (%d there)", i, want, atomic.LoadUint32(in))
					}
				}
			}
			if i%16 == 8 && i > 16 { // the signaled WRITE 8 rounds ago frees its slot and those before it
				if n, err := verbs.ExpPollCQ(cq, wc[:1]); err != nil || n != 1 || wc[0].Status != verbs.WCSuccess {
					return fmt.Errorf("round %d: the signaled WRITE of round %d: %v %+v", i, i-8, err, sum(wc[:n]))
				}
			}
			binary.LittleEndian.PutUint32(me.buf[src:], i)
			wr.ExpSendFlags = 0
			if i%16 == 0 {
				wr.ExpSendFlags = uint64(verbs.ExpSendSignaled)
			}
			if err := verbs.ExpPostSend(qp, wr, bad); err != nil {
				return fmt.Errorf("round %d: %v", i, err)
			}
		}
		return nil
	}
	errs := make(chan error, 1)
	go func() { errs <- turn(p.g, p.f, p.b, p.cqb, false) }()
	if err := turn(p.f, p.g, p.a, p.cqa, true); err != nil {
		t.Fatalf("f: %v", err)
	}
	if err := <-errs; err != nil {
		t.Fatalf("g: %v", err)
	}
	during := [2]uint64{p.f.d.Wire().ThreadHolds - before[0], holds() - before[1]}
	t.Logf("in %d rounds of WRITEs in turn, the transport threads held ACKs %d (f) and %d (g) times", rounds, during[0], during[1])
	if during[0]+during[1] == 0 {
		t.Errorf("in %d rounds of WRITEs in turn the transport threads never held an ACK for the next WRITE", rounds)
	}

	if h := oneWay(100); h > 1 {
		t.Errorf("g's application stopped answering, and its transport thread held the ACKs of %d of the next 100 WRITEs, want at most the first", h)
	}
	p.f.wireClean(p.a)
	p.g.wireClean(p.b)
}

func btou(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// Frames that arrive while the application polls the wire are left to
// that poll (transport_wire.c, poller_takes), for a few microseconds at
// most: a poll that never reads them (markPolling) still has them placed
// by the transport thread, which counts what it left
// (DeviceWire.LeftToPoller). Then the application polls without a pause
// while SENDs of 16 KiB arrive, which its polls and the thread share:
// every receive completes, in order, with its data. Then it stops
// polling, and a WRITE is placed with nobody polling.
func TestWireLeavesFramesToPoller(t *testing.T) {
	p := newWirePair(t, defaultLink(), defaultLink(), nil, nil)
	const size, depth = 16 << 10, 2
	write := func(off int, mark byte) { t.Helper(); p.writeUnpolled(off, size, mark) }

	write(0, 0xa0) // the connection accepted and greeted: the next frames come alone
	p.g.d.markPolling(true)
	write(0, 0xa1)
	left := p.g.d.Wire().LeftToPoller
	p.g.d.markPolling(false)
	if left == 0 {
		t.Fatalf("a WRITE arrived during a poll: the transport thread never left its frames to it (%+v)", p.g.d.Wire())
	}

	wc := allocN[verbs.ExpWC](p.g, 4)
	for round := range 200 {
		for i := range depth {
			p.g.postRecv(p.b, p.g.recv(uint64(i), p.g.sges(p.g.mr.Lkey, [2]int{size * i, size}), 1))
		}
		for i := range depth {
			p.f.buf[size*(2+i)] = byte(round)
			p.f.postSend(p.a, p.f.send(uint64(i), verbs.ExpWRSend, verbs.ExpSendSignaled, p.f.sges(p.f.mr.Lkey, [2]int{size * (2 + i), size}), 1))
		}
		for got, end := 0, time.Now().Add(10*time.Second); got < depth; {
			n, err := verbs.ExpPollCQ(p.cqb, wc)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range wc[:n] {
				if c.Status != verbs.WCSuccess || c.WRID != uint64(got) || c.ByteLen() != size || p.g.buf[size*got] != byte(round) {
					t.Fatalf("round %d: receive %d: %+v, first byte %d", round, got, sum([]verbs.ExpWC{c}), p.g.buf[size*got])
				}
				got++
			}
			if n == 0 && time.Now().After(end) {
				t.Fatalf("round %d: %d of %d receives after 10 s", round, got, depth)
			}
		}
		p.f.pollFor(p.cqa, depth)
	}
	t.Logf("frames left to polls: %d before the SENDs, %d after", left, p.g.d.Wire().LeftToPoller)

	write(2*size, 0xa2)
	p.f.wireClean(p.a)
}

// An application that polls without a pause while SENDs arrive takes
// them itself; once those polls have read the frames SD_POLLED_RUN times
// in a row, the polls take the connections out of the transport thread's
// set (transport_wire.c, sd_net_polled), which
// DeviceWire.Unwatched counts. Every receive still completes, in order,
// with its data, before and after. Then the application stops polling,
// and a WRITE is placed all the same: the timer the polls kept pushing
// gives the thread the connections back.
func TestWirePollsTakeTheConnections(t *testing.T) {
	p := newWirePair(t, defaultLink(), defaultLink(), nil, nil)
	const size, slots, window, most, after = 256, 64, 16, 40000, 2000
	recvs := make([]*verbs.RecvWR, slots)
	for i := range recvs {
		recvs[i] = p.g.recv(uint64(i), p.g.sges(p.g.mr.Lkey, [2]int{size * i, size}), 1)
		p.g.postRecv(p.b, recvs[i])
	}
	sends := make([]*verbs.ExpSendWR, slots)
	for i := range sends {
		sends[i] = p.f.send(uint64(i), verbs.ExpWRSend, verbs.ExpSendSignaled, p.f.sges(p.f.mr.Lkey, [2]int{size * i, size}), 1)
	}

	// The responder polls in a goroutine of its own, without a pause,
	// until it is told to stop; it reposts each receive it takes.
	stop := make(chan struct{})
	type result struct {
		got int
		err error
	}
	done := make(chan result, 1)
	var taken atomic.Int64 // receives taken and posted again
	wc := allocN[verbs.ExpWC](p.g, 16)
	bad := alloc[*verbs.RecvWR](p.g)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		got := 0
		for {
			select {
			case <-stop:
				done <- result{got, nil}
				return
			default:
			}
			n, err := verbs.ExpPollCQ(p.cqb, wc)
			if err != nil {
				done <- result{got, err}
				return
			}
			for _, c := range wc[:n] {
				slot := got % slots
				seq := binary.LittleEndian.Uint32(p.g.buf[size*slot:])
				if c.Status != verbs.WCSuccess || c.WRID != uint64(slot) || byteLen(&c) != size || seq != uint32(got) {
					done <- result{got, fmt.Errorf("receive %d: %+v, sequence number %d", got, sum([]verbs.ExpWC{c}), seq)}
					return
				}
				if err := verbs.PostRecv(p.b, recvs[slot], bad); err != nil {
					done <- result{got, err}
					return
				}
				got++
				taken.Store(int64(got))
			}
		}
	}()

	// The requester keeps at most window SENDs ahead of its completions
	// and of the receives the responder took (no RNR NAK), and polls
	// without a pause too.
	sent, completed, unwatchedAt := 0, 0, -1
	for unwatchedAt < 0 || sent < unwatchedAt+after {
		if unwatchedAt < 0 && sent >= most {
			close(stop)
			<-done
			t.Fatalf("%d SENDs arrived while the responder polled without a pause, and the transport thread never stopped watching: %+v", sent, p.g.d.Wire())
		}
		for ; sent-completed < window && sent-int(taken.Load()) < window; sent++ {
			binary.LittleEndian.PutUint32(p.f.buf[size*(sent%slots):], uint32(sent))
			p.f.postSend(p.a, sends[sent%slots])
		}
		for _, c := range p.f.poll(p.cqa) {
			if c.Status != verbs.WCSuccess {
				t.Fatalf("SEND %d: %+v", completed, sum([]verbs.ExpWC{c}))
			}
			completed++
		}
		if unwatchedAt < 0 && p.g.d.Wire().Unwatched > 0 {
			unwatchedAt = sent
		}
	}
	for completed < sent {
		completed += len(p.f.pollFor(p.cqa, sent-completed))
	}
	for end := time.Now().Add(10 * time.Second); taken.Load() < int64(sent) && time.Now().Before(end); time.Sleep(time.Millisecond) {
		select {
		case r := <-done:
			t.Fatalf("the responder stopped after %d receives: %v", r.got, r.err)
		default:
		}
	}
	close(stop)
	if r := <-done; r.err != nil || r.got != sent {
		t.Fatalf("the responder took %d of %d receives: %v", r.got, sent, r.err)
	}
	t.Logf("the thread stopped watching after %d SENDs; %d more arrived; %+v", unwatchedAt, sent-unwatchedAt, p.g.d.Wire())

	// Nobody polls now: the WRITE lands by the transport thread's hand
	// (not in 10 s: the thread never watched again).
	p.writeUnpolled(32<<10, size, 0xc3)
	p.f.wireClean(p.a)
	p.g.wireClean(p.b)
}

// writeUnpolled WRITEs size bytes of mark from f's buffer at off to g's
// at off, with nobody polling g: the test fails unless they land within
// 10 s (g's transport thread places them) and the WRITE completes.
func (p *wirePair) writeUnpolled(off, size int, mark byte) {
	t := p.f.t
	t.Helper()
	for i := range size {
		p.f.buf[off+i] = mark
	}
	wr := p.f.send(uint64(mark), verbs.ExpWRRDMAWrite, verbs.ExpSendSignaled, p.f.sges(p.f.mr.Lkey, [2]int{off, size}), 1)
	wr.WR.RDMA().RemoteAddr, wr.WR.RDMA().Rkey = p.g.addr(off), p.g.mr.Rkey
	p.f.postSend(p.a, wr)
	for end := time.Now().Add(10 * time.Second); p.g.buf[off+size-1] != mark; time.Sleep(100 * time.Microsecond) {
		if time.Now().After(end) {
			t.Fatalf("WRITE %#x: not placed in 10 s with nobody polling (%+v)", mark, p.g.d.Wire())
		}
	}
	if c := p.f.pollFor(p.cqa, 1); c[0].Status != verbs.WCSuccess {
		t.Fatalf("WRITE %#x: %+v", mark, sum(c))
	}
}
