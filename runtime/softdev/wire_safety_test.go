//go:build linux && cgo

package softdev

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
)

// The wire from the other end: a peer written here from the format the
// package documents (not from its C), at an address of its own, that
// says what it likes. Whatever it sends, the device drops or refuses it
// without crashing and without writing outside a registered range.

// rawPeer is a fake device at ip: a listener for the device's answers and
// a connection to the device, both from ip.
type rawPeer struct {
	t    testing.TB
	ip   netip.Addr
	ln   *net.TCPListener
	conn *net.TCPConn
	in   chan []byte            // frame bodies the device sent us
	gate chan struct{}          // the peer reads what the device sends once it is closed
	key  atomic.Pointer[[]byte] // the wire key it proves (nil: the process's, wire_auth_test.go)
}

// newRawPeer is a raw peer at the first of 127.0.net.201, .202, … where
// nothing listens at WirePort yet: other processes' devices and peers
// hold loopback addresses too (tests of other packages and other
// people's runs share this host).
func newRawPeer(t testing.TB, net int) *rawPeer {
	t.Helper()
	gate := make(chan struct{})
	close(gate)
	return rawPeerAt(t, net, gate, 1024)
}

// newHeldRawPeer is a raw peer that reads nothing the device sends until
// release, and then keeps up to frames of it for answer.
func newHeldRawPeer(t testing.TB, net, frames int) *rawPeer {
	t.Helper()
	return rawPeerAt(t, net, make(chan struct{}), frames)
}

func (p *rawPeer) release() { close(p.gate) }

func rawPeerAt(t testing.TB, net int, gate chan struct{}, frames int) *rawPeer {
	t.Helper()
	for k := 201; k < 255; k++ {
		if p := tryRawPeer(t, fmt.Sprintf("127.0.%d.%d", net, k), gate, frames); p != nil {
			return p
		}
	}
	t.Fatalf("no address from 127.0.%d.201 to .254 is free at port %d", net, WirePort)
	return nil
}

// tryRawPeer is newRawPeer, or nil if the address is taken.
func tryRawPeer(t testing.TB, ip string, gate chan struct{}, frames int) *rawPeer {
	p := &rawPeer{t: t, ip: netip.MustParseAddr(ip), in: make(chan []byte, frames), gate: gate}
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: p.ip.AsSlice(), Port: WirePort})
	if err != nil {
		return nil
	}
	p.ln = ln
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				<-gate
				var n [4]byte
				for first := true; ; first = false {
					if _, err := io.ReadFull(c, n[:]); err != nil {
						return
					}
					b := make([]byte, binary.LittleEndian.Uint32(n[:]))
					if _, err := io.ReadFull(c, b); err != nil {
						return
					}
					if first {
						if accept(c, p.keyOr(), p.gid(), b) != nil {
							return // not the device's hello, or it did not prove the key
						}
						continue
					}
					select {
					case p.in <- b:
					default: // nobody reads them (the fuzz target): drop
					}
				}
			}()
		}
	}()
	return p
}

func (p *rawPeer) gid() [16]byte { return netip.AddrFrom16(p.ip.As16()).As16() }

// dial connects to d from the peer's address. connect picks the port
// (IP_BIND_ADDRESS_NO_PORT), not bind: a fuzzing process opens tens of
// thousands of connections to the device, each left in TIME_WAIT here,
// and once those hold every ephemeral port of the address bind refuses
// ("address already in use"), where connect may reuse them (tcp_tw_reuse,
// on for loopback by default).
func (p *rawPeer) dial(d *Device) *net.TCPConn {
	const ipBindAddressNoPort = 24 // <linux/in.h>; not in package syscall
	dialer := net.Dialer{LocalAddr: &net.TCPAddr{IP: p.ip.AsSlice()}, Control: func(_, _ string, rc syscall.RawConn) error {
		var err error
		if e := rc.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, ipBindAddressNoPort, 1) }); e != nil {
			return e
		}
		return err
	}}
	c, err := dialer.Dial("tcp", net.JoinHostPort(d.Addr().String(), strconv.Itoa(WirePort)))
	if err != nil {
		panic(fmt.Sprintf("dial %v: %v", d.Addr(), err))
	}
	p.conn = c.(*net.TCPConn)
	return p.conn
}

// frame is one packet: the 64-byte header at the documented offsets, then
// the payload.
type frame struct {
	op, flags, syndrome, rnr  uint8
	dst, src, psn, imm        uint32
	va                        uint64
	rkey, dmaLen              uint32
	swapAdd, compare          uint64
	msn                       uint32
	payload                   []byte
	lenOverride, lengthPrefix int // lie about the payload length / the frame length
}

func (f frame) bytes() []byte {
	h := make([]byte, 64)
	h[0], h[1], h[2], h[3] = f.op, f.flags, f.syndrome, f.rnr
	le := binary.LittleEndian
	le.PutUint32(h[4:], f.dst)
	le.PutUint32(h[8:], f.src)
	le.PutUint32(h[12:], f.psn)
	n := uint32(len(f.payload))
	if f.lenOverride != 0 {
		n = uint32(f.lenOverride)
	}
	le.PutUint32(h[16:], n)
	le.PutUint32(h[20:], f.imm)
	le.PutUint64(h[24:], f.va)
	le.PutUint32(h[32:], f.rkey)
	le.PutUint32(h[36:], f.dmaLen)
	le.PutUint64(h[40:], f.swapAdd)
	le.PutUint64(h[48:], f.compare)
	le.PutUint32(h[56:], f.msn)
	body := append(h, f.payload...)
	out := make([]byte, 4, 4+len(body))
	total := uint32(len(body))
	if f.lengthPrefix != 0 {
		total = uint32(f.lengthPrefix)
	}
	le.PutUint32(out, total)
	return append(out, body...)
}

// The packet opcodes and syndromes of the documented format.
const (
	pktSendOnly    = 4
	pktWriteFirst  = 5
	pktWriteMiddle = 6
	pktWriteLast   = 7
	pktWriteOnly   = 8
	pktAck         = 16
	aethNakSeq     = 2
	aethNakAccess  = 4
)

// closedSoon says whether the device closed c (a read returns EOF or an
// error within the wait).
func closedSoon(c *net.TCPConn, wait time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(wait))
	var b [1]byte
	_, err := c.Read(b[:])
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// safetyQP is a QP of f connected to the raw peer's QP 0x4242, expecting
// PSN 1000, with the fixture's buffer registered for remote write.
func safetyQP(t testing.TB, f *fixture, p *rawPeer) *verbs.QP {
	cq := f.cq(64)
	qp := f.qp(cq, cq)
	l := defaultLink()
	l.rqPSN = 1000
	connectOne(t, qp, 0x4242, p.gid(), l)
	return qp
}

func TestWireSafety(t *testing.T) {
	f := newFixture(t)
	p := newRawPeer(t, 0)
	qp := safetyQP(t, f, p)
	for i := range f.buf {
		f.buf[i] = 0x5a
	}
	before := append([]byte(nil), f.buf...)
	dropped := func() uint64 { return f.d.Wire().Dropped }

	t.Run("garbage instead of a hello", func(t *testing.T) {
		c := p.dial(f.d)
		c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		if !closedSoon(c, 2*time.Second) {
			t.Error("the device kept a connection that sent garbage")
		}
	})
	t.Run("a hello claiming another address", func(t *testing.T) {
		c := p.dial(f.d)
		c.Write(helloTo(f.d.GID(), f.d.GID())) // the device's own GID, from the peer's address
		c.Write(frame{op: pktSendOnly, dst: qp.QPNum, src: 0x4242, psn: 1000, payload: []byte("x")}.bytes())
		if !closedSoon(c, 2*time.Second) {
			t.Error("the device kept a connection whose hello named a GID it does not come from")
		}
	})
	t.Run("no hello", func(t *testing.T) {
		c := p.dial(f.d)
		if !closedSoon(c, 4*time.Second) {
			t.Error("a connection that never says hello stayed open past the hello deadline")
		}
	})
	for _, c := range []struct {
		name string
		f    frame
	}{
		{"frame length above the largest", frame{op: pktSendOnly, dst: qp.QPNum, src: 0x4242, psn: 1000, lengthPrefix: 1 << 30}},
		{"frame length below a header", frame{op: pktSendOnly, lengthPrefix: 10}},
		{"payload length that lies", frame{op: pktSendOnly, dst: qp.QPNum, src: 0x4242, psn: 1000, payload: []byte("abc"), lenOverride: 4000}},
		{"opcode 0", frame{op: 0, dst: qp.QPNum, src: 0x4242, psn: 1000}},
		{"opcode 200", frame{op: 200, dst: qp.QPNum, src: 0x4242, psn: 1000}},
		{"unknown flags", frame{op: pktSendOnly, flags: 0x80, dst: qp.QPNum, src: 0x4242, psn: 1000}},
		{"payload above 4096", frame{op: pktSendOnly, dst: qp.QPNum, src: 0x4242, psn: 1000, payload: make([]byte, 5000)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn := p.open(f.d, 0)
			conn.Write(c.f.bytes())
			if !closedSoon(conn, 2*time.Second) {
				t.Error("the device kept a connection that sent a frame that does not parse")
			}
		})
	}
	// Frames that parse but name a QP that is not this peer's, or claim
	// another source QP: dropped, the connection stays.
	conn := p.open(f.d, 0)
	for _, fr := range []frame{
		{op: pktWriteOnly, dst: 0x999, src: 0x4242, psn: 1000, va: f.addr(0), rkey: f.mr.Rkey, dmaLen: 4, payload: []byte("nope")},
		{op: pktWriteOnly, dst: qp.QPNum, src: 0x4243, psn: 1000, va: f.addr(0), rkey: f.mr.Rkey, dmaLen: 4, payload: []byte("nope")},
	} {
		d0 := dropped()
		conn.Write(fr.bytes())
		waitFor(t, func() bool { return dropped() > d0 }, "the device to drop a frame for QP %#x from QP %#x", fr.dst, fr.src)
	}
	// Wrong PSN: a sequence NAK (once), nothing written.
	conn.Write(frame{op: pktWriteOnly, dst: qp.QPNum, src: 0x4242, psn: 1005, va: f.addr(0), rkey: f.mr.Rkey, dmaLen: 4, payload: []byte("nope")}.bytes())
	if a := p.answer(t); a[0] != pktAck || a[2] != aethNakSeq || le32(a[12:]) != 1000 {
		t.Errorf("answer to PSN 1005: op %d syndrome %d psn %d, want a sequence NAK for 1000", a[0], a[2], le32(a[12:]))
	}
	// Out of range: REM_ACCESS NAK; nothing written, the QP in ERR.
	conn.Write(frame{op: pktWriteOnly, dst: qp.QPNum, src: 0x4242, psn: 1000, va: f.addr(bufSize - 2), rkey: f.mr.Rkey, dmaLen: 4, payload: []byte("nope")}.bytes())
	if a := p.answer(t); a[0] != pktAck || a[2] != aethNakAccess {
		t.Errorf("answer to a write past the MR: op %d syndrome %d, want a remote access NAK", a[0], a[2])
	}
	if !bytes.Equal(f.buf, before) {
		t.Error("a frame wrote into the registered buffer")
	}
	if st, _, _, _ := f.d.QPStats(qp); st != verbs.QpsErr {
		t.Errorf("QP in %v after an access violation, want ERR", st)
	}
	if closedSoon(conn, 100*time.Millisecond) {
		t.Error("the device closed a connection whose frames parsed")
	}
	// Truncated frame, then the peer goes: no crash, the device still works.
	conn.Write(frame{op: pktSendOnly, dst: qp.QPNum, src: 0x4242, psn: 1001, payload: make([]byte, 100)}.bytes()[:30])
	conn.Close()
	time.Sleep(20 * time.Millisecond)
	if _, err := f.d.QueryPort(1); err != nil {
		t.Fatalf("the device after all that: %v", err)
	}
}

// answer waits for the device's next frame to the raw peer.
func (p *rawPeer) answer(t *testing.T) []byte {
	t.Helper()
	select {
	case b := <-p.in:
		return b
	case <-time.After(3 * time.Second):
		t.Fatal("no answer from the device")
		return nil
	}
}

func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }

func waitFor(t *testing.T, cond func() bool, what string, args ...any) {
	t.Helper()
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for "+what, args...)
}

// FuzzWireFrames: whatever bytes follow a valid hello, the device drops
// or refuses them, never crashes, never writes outside the range it
// registered for remote write (the bytes on both sides of it are a
// canary), and still answers after. The seeds are frames for the
// registered range, its QP and the PSN it expects, so that mutations
// probe its edges. One device and one raw peer per fuzzing process; a
// connection per input.
func FuzzWireFrames(f *testing.F) {
	fx := newFixture(f)
	p := newRawPeer(f, 1) // fuzzing processes take an address each
	qp := safetyQP(f, fx, p)
	const span = 1 << 14
	mem := allocN[byte](fx, 3*span)
	for i := range mem {
		mem[i] = 0xc5
	}
	mr := fx.reg(mem[span:2*span], verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	va := uint64(uintptr(unsafe.Pointer(&mem[span])))
	for _, fr := range []frame{
		{op: pktWriteOnly, dst: qp.QPNum, src: 0x4242, psn: 1000, va: va, rkey: mr.Rkey, dmaLen: 4, payload: []byte("data")},
		{op: pktWriteOnly, dst: qp.QPNum, src: 0x4242, psn: 1000, va: va + span - 2, rkey: mr.Rkey, dmaLen: 4, payload: []byte("edge")},
		{op: pktWriteFirst, dst: qp.QPNum, src: 0x4242, psn: 1000, va: va, rkey: mr.Rkey, dmaLen: 1 << 31, payload: make([]byte, 1024)},
		{op: pktSendOnly, dst: qp.QPNum, src: 0x4242, psn: 1000, payload: []byte("hello")},
	} {
		f.Add(fr.bytes())
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		c := p.openT(t, fx.d, 0)
		c.Write(b)
		c.Close()
		if _, err := fx.d.QueryPort(1); err != nil {
			t.Fatal(err)
		}
		for i := range span {
			if mem[i] != 0xc5 || mem[2*span+i] != 0xc5 {
				t.Fatalf("a byte next to the registered range changed (at %d)", i)
			}
		}
	})
}
