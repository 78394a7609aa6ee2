//go:build linux && cgo

package softdev

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sort"
	"testing"
	"time"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/internal/multiproc"
	"github.com/verbsexp/verbsexp/runtime/device"
)

// BenchmarkWire: ping-pong latency and one-way bandwidth between this
// process and another (TestWireEchoPeer), each with its own device at its
// own loopback address, over RC QPs; and the same messages over a plain
// TCP socket pair between the same two processes, this transport's
// floor. Rounds alternate between the two; medians of the rounds and
// their ratio are reported (softdev/tcp: 1 is the floor).

const (
	echoMax    = 1 << 16 // the largest message
	echoRecvs  = 128     // receives each side keeps posted
	modeEcho   = 1       // immediate data: send it back
	modeStream = 2       // count it
	modeEnd    = 3       // the stream is over: answer with one byte
)

type echoInfo struct {
	GID  [16]byte
	QPN  uint32
	MTU  verbs.MTU // the port's active MTU
	TCP  string
	Addr uint64
}

// wireEnd is one process's side of the benchmark: a QP with its CQ and a
// registered buffer.
type wireEnd struct {
	f     *fixture
	cq    *verbs.CQ
	qp    *verbs.QP
	buf   []byte
	mr    *verbs.MR
	wc    []verbs.ExpWC
	sge   []verbs.SGE
	swr   *verbs.ExpSendWR
	rwr   []verbs.RecvWR
	bad   **verbs.ExpSendWR
	rbad  **verbs.RecvWR
	sends int
}

func newWireEnd(t testing.TB) *wireEnd {
	e := &wireEnd{f: newFixture(t)}
	e.cq = e.f.cq(4096)
	e.qp = e.f.qp(e.cq, e.cq, device.QPCaps(device.Caps{SendWR: 256, RecvWR: 256, SendSGE: 1, RecvSGE: 1}))
	e.buf = allocN[byte](e.f, echoMax*(echoRecvs+1))
	e.mr = e.f.reg(e.buf, verbs.AccessLocalWrite)
	e.wc = allocN[verbs.ExpWC](e.f, 64)
	e.sge = allocN[verbs.SGE](e.f, echoRecvs+1)
	e.swr = alloc[verbs.ExpSendWR](e.f)
	e.rwr = allocN[verbs.RecvWR](e.f, echoRecvs)
	e.bad = alloc[*verbs.ExpSendWR](e.f)
	e.rbad = alloc[*verbs.RecvWR](e.f)
	return e
}

// recv posts receive slot i (each echoMax bytes).
func (e *wireEnd) recv(t testing.TB, i int) {
	e.sge[i] = verbs.SGE{Addr: uint64(uintptr(unsafe.Pointer(&e.buf[i*echoMax]))), Length: echoMax, Lkey: e.mr.Lkey}
	e.rwr[i] = verbs.RecvWR{WRID: uint64(i), SGList: &e.sge[i], NumSGE: 1}
	if err := verbs.PostRecv(e.qp, &e.rwr[i], e.rbad); err != nil {
		t.Fatalf("post recv: %v", err)
	}
}

// send sends n bytes from slot from with the mode as immediate data;
// every 16th is signaled (and its completion polled) so the ring frees.
func (e *wireEnd) send(t testing.TB, from, n int, mode uint32) {
	e.sends++
	e.sge[echoRecvs] = verbs.SGE{Addr: uint64(uintptr(unsafe.Pointer(&e.buf[from*echoMax]))), Length: uint32(n), Lkey: e.mr.Lkey}
	*e.swr = verbs.ExpSendWR{WRID: 1 << 32, SGList: &e.sge[echoRecvs], NumSGE: 1, ExpOpcode: verbs.ExpWRSendWithImm}
	if e.sends%16 == 0 {
		e.swr.ExpSendFlags = uint64(verbs.ExpSendSignaled)
	}
	e.swr.Ex.SetImmData(mode)
	if err := verbs.ExpPostSend(e.qp, e.swr, e.bad); err != nil {
		t.Fatalf("post send: %v", err)
	}
}

// next returns the next receive completion (send completions only free
// the ring), spinning, then napping after a while without one.
func (e *wireEnd) next(t testing.TB) verbs.ExpWC {
	for spins := 0; ; spins++ {
		n, err := verbs.ExpPollCQ(e.cq, e.wc[:1])
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			if e.wc[0].Status != verbs.WCSuccess {
				t.Fatalf("completion %+v", sum(e.wc[:1]))
			}
			if e.wc[0].WRID == 1<<32 {
				spins = 0
				continue
			}
			return e.wc[0]
		}
		if spins > 20000 {
			time.Sleep(20 * time.Microsecond)
		}
	}
}

// info is what the peer needs to connect to e.
func (e *wireEnd) info(t testing.TB) echoInfo {
	a, err := e.f.d.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	return echoInfo{GID: e.f.d.GID(), QPN: e.qp.QPNum, MTU: a.ActiveMTU}
}

// connect connects e to peer at the smaller of the two active MTUs, as
// perftest does (4096 on loopback).
func (e *wireEnd) connect(t testing.TB, mine, peer echoInfo) {
	l := defaultLink()
	l.mtu = min(mine.MTU, peer.MTU)
	connectOne(t, e.qp, peer.QPN, peer.GID, l)
}

// TestWireEchoPeer is BenchmarkWire's other process; outside one it does
// nothing.
func TestWireEchoPeer(t *testing.T) {
	self, ok := multiproc.Rank()
	if !ok || self.Rank != 1 {
		t.Skip("SKIPPED: the echo process BenchmarkWire starts; nothing to do on its own")
	}
	e := newWireEnd(t)
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: e.f.d.Addr().AsSlice()})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	mine := e.info(t)
	mine.TCP = ln.Addr().String()
	infos := exchangeEcho(t, self, mine)
	e.connect(t, mine, infos[0])
	for i := range echoRecvs {
		e.recv(t, i)
	}
	go tcpEcho(t, ln)
	if err := self.Barrier("ready"); err != nil {
		t.Fatal(err)
	}
	for {
		c := e.next(t)
		slot := int(c.WRID)
		switch c.ImmData {
		case modeEcho:
			e.send(t, slot, int(byteLen(&c)), modeEcho)
		case modeEnd:
			e.send(t, slot, 1, modeEnd)
		}
		e.recv(t, slot)
		if c.ImmData == 0 {
			return // the benchmark is over
		}
	}
}

func exchangeEcho(t testing.TB, self multiproc.Self, mine echoInfo) []echoInfo {
	b := make([]byte, 0, 64)
	b = append(b, mine.GID[:]...)
	b = binary.LittleEndian.AppendUint32(b, mine.QPN)
	b = append(b, byte(mine.MTU))
	b = append(b, mine.TCP...)
	all, err := self.Exchange()(b)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]echoInfo, len(all))
	for r, a := range all {
		copy(out[r].GID[:], a)
		out[r].QPN = binary.LittleEndian.Uint32(a[16:])
		out[r].MTU = verbs.MTU(a[20])
		out[r].TCP = string(a[21:])
	}
	return out
}

// tcpEcho serves one connection: [mode 1][len 4][payload], answered as
// the softdev side is.
func tcpEcho(t testing.TB, ln *net.TCPListener) {
	c, err := ln.AcceptTCP()
	if err != nil {
		return
	}
	defer c.Close()
	c.SetNoDelay(true)
	buf := make([]byte, 5+echoMax)
	for {
		if _, err := io.ReadFull(c, buf[:5]); err != nil {
			return
		}
		n := int(binary.LittleEndian.Uint32(buf[1:]))
		if _, err := io.ReadFull(c, buf[5:5+n]); err != nil {
			return
		}
		switch buf[0] {
		case modeEcho:
			c.Write(buf[:5+n])
		case modeEnd:
			binary.LittleEndian.PutUint32(buf[1:], 1)
			c.Write(buf[:6])
		}
	}
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func BenchmarkWire(b *testing.B) {
	j := multiproc.Start(b, 2, multiproc.Config{Test: "TestWireEchoPeer", Own: 1, Timeout: 10 * time.Minute})
	self := j.Self(0)
	e := newWireEnd(b)
	mine := e.info(b)
	infos := exchangeEcho(b, self, mine)
	e.connect(b, mine, infos[1])
	for i := range echoRecvs {
		e.recv(b, i)
	}
	if err := self.Barrier("ready"); err != nil {
		b.Fatal(err)
	}
	tc, err := net.Dial("tcp", infos[1].TCP)
	if err != nil {
		b.Fatal(err)
	}
	defer tc.Close()
	tc.(*net.TCPConn).SetNoDelay(true)
	tbuf := make([]byte, 5+echoMax)

	softPing := func(size int) {
		e.send(b, echoRecvs, size, modeEcho)
		c := e.next(b)
		e.recv(b, int(c.WRID))
	}
	tcpPing := func(size int) {
		tbuf[0] = modeEcho
		binary.LittleEndian.PutUint32(tbuf[1:], uint32(size))
		tc.Write(tbuf[:5+size])
		io.ReadFull(tc, tbuf[:5+size])
	}
	softStream := func(size, n int) {
		for range n {
			e.send(b, echoRecvs, size, modeStream)
		}
		e.send(b, echoRecvs, 1, modeEnd)
		c := e.next(b)
		e.recv(b, int(c.WRID))
	}
	tcpStream := func(size, n int) {
		tbuf[0] = modeStream
		binary.LittleEndian.PutUint32(tbuf[1:], uint32(size))
		for range n {
			tc.Write(tbuf[:5+size])
		}
		tbuf[0] = modeEnd
		binary.LittleEndian.PutUint32(tbuf[1:], 1)
		tc.Write(tbuf[:6])
		io.ReadFull(tc, tbuf[:6])
	}
	timeIt := func(n int, f func()) float64 {
		t0 := time.Now()
		for range n {
			f()
		}
		return float64(time.Since(t0).Nanoseconds()) / float64(n)
	}
	const rounds = 9
	for _, size := range []int{8, 4096, 65536} {
		b.Run(fmt.Sprintf("pingpong/%dB", size), func(b *testing.B) {
			iters := max(b.N, 200)
			var soft, tcp []float64
			for range rounds {
				soft = append(soft, timeIt(iters, func() { softPing(size) }))
				tcp = append(tcp, timeIt(iters, func() { tcpPing(size) }))
			}
			s, c := median(soft), median(tcp)
			b.ReportMetric(s/1e3, "softdev-µs/rtt")
			b.ReportMetric(c/1e3, "tcp-µs/rtt")
			b.ReportMetric(s/c, "softdev/tcp")
		})
	}
	b.Run("bandwidth/65536B", func(b *testing.B) {
		const burst = 64
		var soft, tcp []float64
		for range rounds {
			soft = append(soft, timeIt(max(b.N/burst, 4), func() { softStream(65536, burst) }))
			tcp = append(tcp, timeIt(max(b.N/burst, 4), func() { tcpStream(65536, burst) }))
		}
		mbps := func(ns float64) float64 { return 65536 * burst / ns * 1e3 } // MB/s
		s, c := mbps(median(soft)), mbps(median(tcp))
		b.ReportMetric(s, "softdev-MB/s")
		b.ReportMetric(c, "tcp-MB/s")
		b.ReportMetric(s/c, "softdev/tcp")
	})
	e.send(b, echoRecvs, 1, 0) // the echo ends
	j.Wait()
}
