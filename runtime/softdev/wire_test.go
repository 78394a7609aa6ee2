//go:build linux && cgo

package softdev

import (
	"bytes"
	"encoding/binary"
	"syscall"
	"testing"
	"time"
	"unsafe"

	verbs "github.com/verbsexp/verbsexp/generated"
)

// Two devices of this process are two hosts: their QPs connect over the
// wire (TCP between their loopback addresses), with the RC transport's
// rules. The same tests run between processes in multiproc_test.go.

// link is one connection's attributes, as Connect sets them unless a
// test changes them.
type linkAttr struct {
	sqPSN, rqPSN  uint32 // this side's sq_psn, and the rq_psn it expects
	destQPN       uint32 // 0: the peer's
	dgid          *[16]byte
	mtu           verbs.MTU
	timeout       uint8
	retry, rnr    uint8
	minRNR        uint8
	rdAtomic      uint8
	access        verbs.AccessFlags
	skipRTSToPeer bool
}

func defaultLink() linkAttr {
	return linkAttr{mtu: verbs.MTU1024, timeout: 14, retry: 7, rnr: 7, minRNR: 12, rdAtomic: 4,
		access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic}
}

// connectOne moves qp to RTS towards peer (on the device whose GID is
// peerGID) with l.
func connectOne(t testing.TB, qp *verbs.QP, peerQPN uint32, peerGID [16]byte, l linkAttr) {
	t.Helper()
	attr := Calloc[verbs.ExpQPAttr]()
	defer Free(unsafe.Pointer(attr))
	*attr = verbs.ExpQPAttr{QPState: verbs.QpsInit, PortNum: 1, QPAccessFlags: int32(l.access)}
	if err := verbs.ExpModifyQP(qp, attr, uint64(verbs.ExpQPState|verbs.ExpQPPkeyIndex|verbs.ExpQPPort|verbs.ExpQPAccessFlags)); err != nil {
		t.Fatalf("QP %#x to INIT: %v", qp.QPNum, err)
	}
	dest := peerQPN
	if l.destQPN != 0 {
		dest = l.destQPN
	}
	g := peerGID
	if l.dgid != nil {
		g = *l.dgid
	}
	*attr = verbs.ExpQPAttr{QPState: verbs.QpsRtr, PathMTU: l.mtu, DestQPNum: dest, RQPSN: l.rqPSN,
		MaxDestRdAtomic: l.rdAtomic, MinRnrTimer: l.minRNR}
	attr.AHAttr.PortNum, attr.AHAttr.IsGlobal, attr.AHAttr.GRH.HopLimit = 1, 1, 64
	*attr.AHAttr.GRH.Dgid.Raw() = g
	if err := verbs.ExpModifyQP(qp, attr, uint64(verbs.ExpQPState|verbs.ExpQPAv|verbs.ExpQPPathMTU|verbs.ExpQPDestQPN|
		verbs.ExpQPRQPSN|verbs.ExpQPMaxDestRdAtomic|verbs.ExpQPMinRnrTimer)); err != nil {
		t.Fatalf("QP %#x to RTR: %v", qp.QPNum, err)
	}
	*attr = verbs.ExpQPAttr{QPState: verbs.QpsRts, SQPSN: l.sqPSN, Timeout: l.timeout, RetryCnt: l.retry,
		RnrRetry: l.rnr, MaxRdAtomic: l.rdAtomic}
	if err := verbs.ExpModifyQP(qp, attr, uint64(verbs.ExpQPState|verbs.ExpQPTimeout|verbs.ExpQPRetryCnt|verbs.ExpQPRnrRetry|
		verbs.ExpQPSQPSN|verbs.ExpQPMaxQPRdAtomic)); err != nil {
		t.Fatalf("QP %#x to RTS: %v", qp.QPNum, err)
	}
}

// wirePair is a QP on f connected to a QP on g.
type wirePair struct {
	f, g     *fixture
	a, b     *verbs.QP // a on f, b on g
	cqa, cqb *verbs.CQ
}

func newWirePair(t testing.TB, la, lb linkAttr, aOpts, bOpts []QPOption) *wirePair {
	t.Helper()
	p := &wirePair{f: newFixture(t), g: newFixture(t)}
	p.cqa, p.cqb = p.f.cq(256), p.g.cq(256)
	p.a = p.f.qp(p.cqa, p.cqa, aOpts...)
	p.b = p.g.qp(p.cqb, p.cqb, bOpts...)
	connectOne(t, p.a, p.b.QPNum, p.g.d.GID(), la)
	connectOne(t, p.b, p.a.QPNum, p.f.d.GID(), lb)
	return p
}

// await polls both devices' CQs until want completions arrived on each
// (wa on cqa, wb on cqb), or the deadline: what came, by CQ.
func (p *wirePair) await(t testing.TB, wa, wb int, within time.Duration) (ca, cb []verbs.ExpWC) {
	t.Helper()
	end := time.Now().Add(within)
	for (len(ca) < wa || len(cb) < wb) && time.Now().Before(end) {
		ca = append(ca, p.f.poll(p.cqa)...)
		cb = append(cb, p.g.poll(p.cqb)...)
		if len(ca) < wa || len(cb) < wb {
			time.Sleep(50 * time.Microsecond)
		}
	}
	if len(ca) < wa || len(cb) < wb {
		t.Fatalf("after %v: %d of %d completions on a's CQ (%+v), %d of %d on b's (%+v)", within, len(ca), wa, sum(ca), len(cb), wb, sum(cb))
	}
	return ca, cb
}

func TestWireSendRecv(t *testing.T) {
	p := newWirePair(t, defaultLink(), defaultLink(), nil, nil)
	f, g := p.f, p.g
	copy(f.buf[0:], "hello over the wire")
	g.postRecv(p.b, g.recv(7, g.sges(g.mr.Lkey, [2]int{100, 64}), 1))
	w := f.send(1, verbs.ExpWRSendWithImm, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{0, 19}), 1)
	w.Ex.SetImmData(0xabcd)
	f.postSend(p.a, w)
	ca, cb := p.await(t, 1, 1, 5*time.Second)
	if ca[0].Status != verbs.WCSuccess || ca[0].WRID != 1 || byteLen(&ca[0]) != 19 {
		t.Fatalf("send: %+v", sum(ca))
	}
	r := cb[0]
	if r.Status != verbs.WCSuccess || r.WRID != 7 || byteLen(&r) != 19 || r.ExpOpcode != verbs.ExpWCRecv ||
		r.SrcQP != p.a.QPNum || r.ImmData != 0xabcd || r.ExpWCFlags&uint64(verbs.ExpWCWithImm) == 0 {
		t.Fatalf("receive: %+v imm %#x src %#x flags %#x", sum(cb), r.ImmData, r.SrcQP, r.ExpWCFlags)
	}
	if got := string(g.buf[100:119]); got != "hello over the wire" {
		t.Fatalf("received %q", got)
	}
}

// A message larger than path_mtu travels as path_mtu packets, in order.
func TestWireSegments(t *testing.T) {
	for _, mtu := range []verbs.MTU{verbs.MTU256, verbs.MTU1024, verbs.MTU4096} {
		la := defaultLink()
		la.mtu = mtu
		p := newWirePair(t, la, la, nil, nil)
		f, g := p.f, p.g
		const n = 40000
		for i := range n {
			f.buf[i] = byte(i*7 + i>>8)
		}
		g.postRecv(p.b, g.recv(1, g.sges(g.mr.Lkey, [2]int{0, n}), 1))
		before, _ := f.d.QPWire(p.a)
		f.postSend(p.a, f.send(2, verbs.ExpWRSend, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{0, n}), 1))
		p.await(t, 1, 1, 5*time.Second)
		if !bytes.Equal(g.buf[:n], f.buf[:n]) {
			t.Fatalf("MTU %v: payload differs", mtu)
		}
		after, _ := f.d.QPWire(p.a)
		bytesPer := 128 << mtu
		if want := uint64((n + bytesPer - 1) / bytesPer); after.TxPackets-before.TxPackets != want {
			t.Errorf("MTU %v: %d packets, want %d", mtu, after.TxPackets-before.TxPackets, want)
		}
	}
}

func TestWireRDMAAndAtomics(t *testing.T) {
	p := newWirePair(t, defaultLink(), defaultLink(), nil, nil)
	f, g := p.f, p.g
	for i := range 9000 {
		f.buf[i] = byte(i)
		g.buf[20000+i] = byte(255 - i%256)
	}
	// WRITE 9000 bytes into g at 30000, then WRITE_WITH_IMM, READ 9000
	// bytes from g's 20000, CMP_AND_SWP and FETCH_AND_ADD on g's 60000.
	binary.LittleEndian.PutUint64(g.buf[60000:], 41)
	atomicMR := g.reg(g.buf, verbs.AccessLocalWrite|verbs.AccessRemoteAtomic)
	wr := f.send(1, verbs.ExpWRRDMAWrite, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{0, 9000}), 1)
	wr.WR.RDMA().RemoteAddr, wr.WR.RDMA().Rkey = g.addr(30000), g.mr.Rkey
	wi := f.send(2, verbs.ExpWRRDMAWriteWithImm, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{0, 10}), 1)
	wi.WR.RDMA().RemoteAddr, wi.WR.RDMA().Rkey = g.addr(50000), g.mr.Rkey
	wi.Ex.SetImmData(77)
	rd := f.send(3, verbs.ExpWRRDMARead, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{10000, 9000}), 1)
	rd.WR.RDMA().RemoteAddr, rd.WR.RDMA().Rkey = g.addr(20000), g.mr.Rkey
	cs := f.send(4, verbs.ExpWRAtomicCmpAndSwp, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{40000, 8}), 1)
	cs.WR.Atomic().RemoteAddr, cs.WR.Atomic().Rkey = g.addr(60000), atomicMR.Rkey
	cs.WR.Atomic().CompareAdd, cs.WR.Atomic().Swap = 41, 1000
	fa := f.send(5, verbs.ExpWRAtomicFetchAndAdd, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{40008, 8}), 1)
	fa.WR.Atomic().RemoteAddr, fa.WR.Atomic().Rkey = g.addr(60000), atomicMR.Rkey
	fa.WR.Atomic().CompareAdd = 5
	g.postRecv(p.b, g.recv(9, nil, 0))
	f.postSend(p.a, wr, wi, rd, cs, fa)
	ca, cb := p.await(t, 5, 1, 5*time.Second)
	want := []wcSum{{1, verbs.WCSuccess, verbs.ExpWCRDMAWrite, 9000, p.a.QPNum}, {2, verbs.WCSuccess, verbs.ExpWCRDMAWrite, 10, p.a.QPNum},
		{3, verbs.WCSuccess, verbs.ExpWCRDMARead, 9000, p.a.QPNum}, {4, verbs.WCSuccess, verbs.ExpWCCompSwap, 8, p.a.QPNum},
		{5, verbs.WCSuccess, verbs.ExpWCFetchAdd, 8, p.a.QPNum}}
	if got := sum(ca); !equalSums(got, want) {
		t.Fatalf("completions %+v, want %+v", got, want)
	}
	if cb[0].ExpOpcode != verbs.ExpWCRecvRDMAWithImm || cb[0].ImmData != 77 || byteLen(&cb[0]) != 10 {
		t.Fatalf("write-with-imm receive: %+v imm %d", sum(cb), cb[0].ImmData)
	}
	if !bytes.Equal(g.buf[30000:39000], f.buf[:9000]) || !bytes.Equal(g.buf[50000:50010], f.buf[:10]) {
		t.Fatal("RDMA WRITE data differs")
	}
	if !bytes.Equal(f.buf[10000:19000], g.buf[20000:29000]) {
		t.Fatal("RDMA READ data differs")
	}
	if old, old2, now := binary.LittleEndian.Uint64(f.buf[40000:]), binary.LittleEndian.Uint64(f.buf[40008:]), binary.LittleEndian.Uint64(g.buf[60000:]); old != 41 || old2 != 1000 || now != 1005 {
		t.Fatalf("atomics: CMP_AND_SWP saw %d (want 41), FETCH_AND_ADD saw %d (want 1000), memory %d (want 1005)", old, old2, now)
	}
}

func equalSums(a, b []wcSum) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

var _ = syscall.EINVAL
