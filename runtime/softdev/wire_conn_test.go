//go:build linux && cgo

package softdev

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/generated/verbs"
)

// Two devices that send to each other share one TCP connection: the one
// the first sender opened, which says in its hello that it reads frames
// too (transport_wire.c, conn_carrier). Two one-way connections cost a
// bare TCP ACK per frame.

// helloBoth is the flag in a hello's byte 14 (of the frame, length
// prefix included): the opener takes frames on this connection too.
const helloBoth = 1

// The device answers a peer that opened a connection with helloBoth on
// that connection, and opens none of its own; a peer whose hello lacks
// the flag gets its answers on the device's own connection (the raw peer
// tests of wire_safety_test.go).
func TestWireAnswersOnPeersConnection(t *testing.T) {
	p := newRawPeer(t, 0) // 127.0.0.201 or above
	// The device above the raw peer's address: the end with the lower
	// GID opens its connection as soon as a path resolves to the peer
	// (sd_wire_open_link), the higher one sends on what the peer opened.
	f := newFixtureAbove(t, p.ip)
	cq := f.cq(16)
	qp := f.qp(cq, cq)
	l := defaultLink()
	l.rqPSN = 1000
	connectOne(t, qp, 0x4242, p.gid(), l)

	conn := p.open(f.d, helloBoth)
	conn.Write(frame{op: pktWriteOnly, dst: qp.QPNum, src: 0x4242, psn: 1000, va: f.addr(0), rkey: f.mr.Rkey, dmaLen: 4, payload: []byte("both")}.bytes())
	conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	var n [4]byte
	if _, err := io.ReadFull(conn, n[:]); err != nil {
		t.Fatalf("no answer on the peer's own connection: %v", err)
	}
	a := make([]byte, binary.LittleEndian.Uint32(n[:]))
	if _, err := io.ReadFull(conn, a); err != nil {
		t.Fatalf("the answer's frame: %v", err)
	}
	if a[0] != pktAck || a[2] != 0 || le32(a[12:]) != 1000 {
		t.Errorf("answer to the WRITE: op %d syndrome %d psn %d, want an ACK of 1000", a[0], a[2], le32(a[12:]))
	}
	if got := string(f.buf[:4]); got != "both" {
		t.Errorf("the WRITE placed %q, want %q", got, "both")
	}
	select {
	case b := <-p.in:
		t.Errorf("the device opened a connection of its own as well and sent %d bytes on it", len(b))
	case <-time.After(100 * time.Millisecond):
	}
}

// newFixtureAbove is a fixture whose device is at a loopback address
// above ip (127.0.3.2 and up, the first nothing listens at).
func newFixtureAbove(t *testing.T, ip netip.Addr) *fixture {
	t.Helper()
	for k := 2; k < 255; k++ {
		a := netip.MustParseAddr(fmt.Sprintf("127.0.3.%d", k))
		if a.Compare(ip) <= 0 {
			t.Fatalf("%v is not above %v", a, ip)
		}
		if d, err := Open(Address(a.String())); err == nil {
			d.Close()
			return newFixture(t, Address(a.String()))
		}
	}
	t.Fatal("no address from 127.0.3.2 to .254 is free")
	return nil
}

// SENDs both ways between two devices, the lower-addressed one first
// (its connection opens when its path resolves, and the other has read
// its hello by the time the first SEND arrives): every message arrives,
// nothing is resent, and the host has one TCP connection between the two
// addresses, not two.
func TestWireOneConnectionPerPair(t *testing.T) {
	p := newWirePair(t, defaultLink(), defaultLink(), nil, nil)
	type end struct {
		f  *fixture
		qp *verbs.QP
		cq *verbs.CQ
	}
	lo, hi := end{p.f, p.a, p.cqa}, end{p.g, p.b, p.cqb}
	if p.f.d.Addr().Compare(p.g.d.Addr()) > 0 {
		lo, hi = hi, lo
	}
	const rounds = 20
	for i := range rounds {
		lo.f.postRecv(lo.qp, lo.f.recv(uint64(100+i), lo.f.sges(lo.f.mr.Lkey, [2]int{4096 + 64*i, 64}), 1))
		hi.f.postRecv(hi.qp, hi.f.recv(uint64(100+i), hi.f.sges(hi.f.mr.Lkey, [2]int{4096 + 64*i, 64}), 1))
	}
	for i := range rounds {
		for _, s := range [][2]end{{lo, hi}, {hi, lo}} {
			from, to := s[0], s[1]
			copy(from.f.buf[64*i:], fmt.Sprintf("round %2d from %v", i, from.f.d.Addr()))
			from.f.postSend(from.qp, from.f.send(uint64(i), verbs.ExpWRSend, verbs.ExpSendSignaled, from.f.sges(from.f.mr.Lkey, [2]int{64 * i, 32}), 1))
			for _, c := range from.f.pollFor(from.cq, 1) {
				if c.Status != verbs.WCSuccess || c.ExpOpcode != verbs.ExpWCSend {
					t.Fatalf("round %d: send %+v", i, sum([]verbs.ExpWC{c}))
				}
			}
			for _, c := range to.f.pollFor(to.cq, 1) {
				if c.Status != verbs.WCSuccess || c.ExpOpcode != verbs.ExpWCRecv {
					t.Fatalf("round %d: receive %+v", i, sum([]verbs.ExpWC{c}))
				}
			}
			if got, want := to.f.buf[4096+64*i:][:32], from.f.buf[64*i:][:32]; !bytes.Equal(got, want) {
				t.Fatalf("round %d: received %q, want %q", i, got, want)
			}
		}
	}
	p.f.wireClean(p.a)
	p.g.wireClean(p.b)
	if conns := tcpConnections(t, p.f.d.Addr(), p.g.d.Addr()); conns != 1 {
		t.Errorf("%d TCP connections between %v and %v, want 1 for both directions", conns, p.f.d.Addr(), p.g.d.Addr())
	}
}

// tcpConnections counts the established TCP connections between IPv4
// addresses a and b in this network namespace (/proc/net/tcp lists each
// of a loopback connection's two ends).
func tcpConnections(t *testing.T, a, b netip.Addr) int {
	t.Helper()
	raw, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	const established = 0x01
	ends := 0
	for _, e := range parseProcNetTCP(raw) {
		l, r := e.at.Addr(), e.peer.Addr()
		if e.state == established && ((l == a && r == b) || (l == b && r == a)) {
			ends++
		}
	}
	return ends / 2
}

// A datagram posted to a peer whose connection is still opening, its
// address handle destroyed as soon as the send completes (UD completes
// when the datagram leaves the QP, not when it arrives): the link goes,
// and the connection keeps what it holds until it is up and sent
// (sd_wire_close_link). A fresh sender device each round, so each opens
// its connection anew.
func TestWireDatagramOutlivesItsAH(t *testing.T) {
	f := newFixture(t)
	b, bcq := f.udQP(udQkey)
	for round := range 10 {
		g := newFixture(t)
		c, ccq := g.udQP(udQkey)
		f.udRecv(b, uint64(round), 4096, 40+64)
		a := alloc[verbs.AHAttr](g)
		a.PortNum, a.IsGlobal, a.GRH.HopLimit = 1, 1, 7
		*a.GRH.Dgid.Raw() = f.d.GID()
		ah, err := verbs.CreateAH(g.pd, a)
		if err != nil {
			t.Fatalf("ibv_create_ah: %v", err)
		}
		copy(g.buf, fmt.Sprintf("datagram %d", round))
		if err := g.udSend(c, ah, b.QPNum, udQkey, 1, 0, 16, verbs.WRSend, 0, 0); err != nil {
			t.Fatal(err)
		}
		if s := waitCQ(t, g, ccq, 1); s[0].Status != verbs.WCSuccess {
			t.Fatalf("round %d: sender %+v", round, sum(s))
		}
		if err := verbs.DestroyAH(ah); err != nil {
			t.Fatalf("ibv_destroy_ah: %v", err)
		}
		r := waitCQ(t, f, bcq, 1)[0]
		if r.Status != verbs.WCSuccess || r.WRID != uint64(round) || string(f.buf[4096+40:][:10]) != fmt.Sprintf("datagram %d", round) {
			t.Fatalf("round %d: receive %+v, payload %q", round, sum([]verbs.ExpWC{r}), f.buf[4096+40:][:10])
		}
		g.kill()
	}
}
