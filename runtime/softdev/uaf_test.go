//go:build linux && cgo

package softdev

import (
	"bytes"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
)

// An MR deregistered while a message that uses it is in flight (issue 35,
// defect 1): an HCA translates every packet through the key, so after
// the deregistration the rest of the message is a remote access error
// (the responder's MR) or a local protection error (the requester's or
// the receive WQE's MR), and the memory is not touched, mapped or not.
// Each test runs three times: the buffer deregistered and left mapped
// (then its bytes show that nothing was written or read), deregistered
// and unmapped, which the application may do (then a device that still
// used it would fault), and a C heap buffer deregistered and freed (then
// make test-asan's AddressSanitizer reports a device that still used it
// as a heap-use-after-free).

// More packet opcodes and syndromes of the documented format
// (wire_safety_test.go has the first ones).
const (
	pktSendFirst    = 1
	pktSendLast     = 3
	pktReadReq      = 9
	pktFetchAdd     = 11
	pktReadRespFrst = 12
	pktReadRespLast = 14
	pktAtomicAck    = 17
	aethNakOp       = 5
	flagAckReq      = 0x2
)

// mapping is anonymous memory of its own (so that unmapping it unmaps
// nothing else), unmapped at cleanup unless the test did; in forBoth's
// freed variant it is C heap memory (CallocSlice), freed instead.
type mapping struct {
	b     []byte
	heap  bool
	unmap bool // unmapped or freed: gone
}

func newMapping(t *testing.T, n int) *mapping {
	t.Helper()
	m := &mapping{heap: strings.HasSuffix(t.Name(), "/"+freedVariant)}
	if m.heap {
		m.b = callocSlice[byte](n)
	} else {
		b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
		if err != nil {
			t.Fatal(err)
		}
		m.b = b
	}
	t.Cleanup(func() {
		if !m.unmap {
			m.free()
		}
	})
	return m
}

func (m *mapping) free() error {
	if m.heap {
		return cfree(unsafe.Pointer(&m.b[0]))
	}
	return syscall.Munmap(m.b)
}

func (m *mapping) addr(off int) uint64 { return uint64(uintptr(unsafe.Pointer(&m.b[off]))) }

// release deregisters mr and, if unmap, unmaps the memory under it.
func (m *mapping) release(t *testing.T, f *fixture, mr *verbs.MR, unmap bool) {
	t.Helper()
	if err := f.d.DeregMR(mr); err != nil {
		t.Fatalf("DeregMR: %v", err)
	}
	if unmap {
		if err := m.free(); err != nil {
			t.Fatal(err)
		}
		m.unmap = true
	}
}

// untouched says whether b[lo:hi] still holds v (nothing is checked once
// unmapped).
func (m *mapping) untouched(lo, hi int, v byte) bool {
	return m.unmap || bytes.Count(m.b[lo:hi], []byte{v}) == hi-lo
}

func (m *mapping) regMR(t *testing.T, f *fixture, access verbs.AccessFlags) *verbs.MR {
	t.Helper()
	mr, err := f.d.RegMR(f.pd, m.b, access)
	if err != nil {
		t.Fatalf("RegMR: %v", err)
	}
	return mr
}

// freedVariant is the name of forBoth's C heap variant (t.Name's form).
const freedVariant = "deregistered_and_freed"

// forBoth runs body with the buffer left mapped after the deregistration,
// and with it gone (unmapped, or freed).
func forBoth(t *testing.T, body func(t *testing.T, unmap bool)) {
	t.Run("deregistered", func(t *testing.T) { body(t, false) })
	t.Run("deregistered and unmapped", func(t *testing.T) { body(t, true) })
	t.Run(strings.ReplaceAll(freedVariant, "_", " "), func(t *testing.T) { body(t, true) })
}

// expectAnswer reads the device's next frame to the raw peer and checks
// its opcode, syndrome and PSN.
func expectAnswer(t *testing.T, p *rawPeer, op, syndrome uint8, psn uint32, what string) {
	t.Helper()
	a := p.answer(t)
	if a[0]&0x1f != op || a[2] != syndrome || le32(a[12:]) != psn {
		t.Fatalf("%s: the device answered op %d syndrome %d psn %d, want op %d syndrome %d psn %d",
			what, a[0]&0x1f, a[2], le32(a[12:]), op, syndrome, psn)
	}
}

// A WRITE whose MR goes between its FIRST and LAST packet: the LAST is
// NAKed with a remote access error, nothing lands, the QP is in ERR with
// IBV_EVENT_QP_ACCESS_ERR.
func TestDeregMidWrite(t *testing.T) {
	forBoth(t, func(t *testing.T, unmap bool) {
		f := newFixture(t)
		p := newRawPeer(t, 0)
		qp := safetyQP(t, f, p)
		m := newMapping(t, 2*os.Getpagesize())
		mr := m.regMR(t, f, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		conn := p.open(f.d, 0)

		conn.Write(frame{op: pktWriteFirst, flags: flagAckReq, dst: qp.QPNum, src: 0x4242, psn: 1000,
			va: m.addr(0), rkey: mr.Rkey, dmaLen: 2048, payload: bytes.Repeat([]byte{'A'}, 1024)}.bytes())
		expectAnswer(t, p, pktAck, 0, 1000, "WRITE_FIRST")
		if !m.untouched(0, 1024, 'A') {
			t.Fatal("the WRITE's first packet did not land")
		}
		m.release(t, f, mr, unmap)
		conn.Write(frame{op: pktWriteLast, dst: qp.QPNum, src: 0x4242, psn: 1001,
			payload: bytes.Repeat([]byte{'B'}, 1024)}.bytes())
		expectAnswer(t, p, pktAck, aethNakAccess, 1001, "WRITE_LAST after the MR was deregistered")
		if !m.untouched(1024, 2048, 0) {
			t.Error("the WRITE's last packet was placed after its MR was deregistered")
		}
		if st, _, _, _ := f.d.QPStats(qp); st != verbs.QpsErr {
			t.Errorf("QP in %v after a WRITE into a deregistered MR, want ERR", st)
		}
		expectEvent(t, f.d, verbs.EventQPAccessErr, qp)
	})
}

// A SEND whose receive WQE's MR goes between its FIRST and LAST packet:
// the receive completes with IBV_WC_LOC_PROT_ERR, not success, the
// requester gets a NAK (remote operational error, as for a receive WQE
// whose SGE fails its check at the first packet), and nothing more
// lands.
func TestDeregMidSend(t *testing.T) {
	forBoth(t, func(t *testing.T, unmap bool) {
		f := newFixture(t)
		p := newRawPeer(t, 0)
		cq := f.cq(64)
		qp := f.qp(cq, cq)
		l := defaultLink()
		l.rqPSN = 1000
		connectOne(t, qp, 0x4242, p.gid(), l)
		m := newMapping(t, 2*os.Getpagesize())
		mr := m.regMR(t, f, verbs.AccessLocalWrite)
		f.postRecv(qp, f.recv(7, f.sgesOver(m.b, mr.Lkey, [2]int{0, 4096}), 1))
		conn := p.open(f.d, 0)

		conn.Write(frame{op: pktSendFirst, flags: flagAckReq, dst: qp.QPNum, src: 0x4242, psn: 1000,
			payload: bytes.Repeat([]byte{'A'}, 1024)}.bytes())
		expectAnswer(t, p, pktAck, 0, 1000, "SEND_FIRST")
		m.release(t, f, mr, unmap)
		conn.Write(frame{op: pktSendLast, dst: qp.QPNum, src: 0x4242, psn: 1001,
			payload: bytes.Repeat([]byte{'B'}, 1024)}.bytes())
		expectAnswer(t, p, pktAck, aethNakOp, 1001, "SEND_LAST after the receive's MR was deregistered")
		if !m.untouched(1024, 2048, 0) {
			t.Error("the SEND's last packet was placed after the receive's MR was deregistered")
		}
		got := f.poll(cq)
		if len(got) != 1 || got[0].WRID != 7 || got[0].Status != verbs.WCLocProtErr {
			t.Fatalf("receive completions %+v, want wr_id 7 with IBV_WC_LOC_PROT_ERR", sum(got))
		}
	})
}

// requesterQP is a QP of f connected to the raw peer's QP 0x4242, sending
// from PSN 0 with no ACK timeout (nothing is resent unless the peer asks).
func requesterQP(t *testing.T, f *fixture, p *rawPeer) (*verbs.QP, *verbs.CQ) {
	t.Helper()
	cq := f.cq(64)
	qp := f.qp(cq, cq)
	l := defaultLink()
	l.timeout = 0
	connectOne(t, qp, 0x4242, p.gid(), l)
	return qp, cq
}

// pollOne polls cq until a completion comes (the device runs in the
// polls), up to 3 s.
func pollOne(t *testing.T, f *fixture, cq *verbs.CQ) []wcSum {
	t.Helper()
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if got := f.poll(cq); len(got) > 0 {
			return sum(got)
		}
	}
	t.Fatal("no completion within 3 s")
	return nil
}

// noFrames fails if the device sends the raw peer anything within d.
func noFrames(t *testing.T, p *rawPeer, d time.Duration, what string) {
	t.Helper()
	select {
	case b := <-p.in:
		t.Errorf("%s: the device sent op %d psn %d (%d payload bytes)", what, b[0]&0x1f, le32(b[12:]), len(b)-64)
	case <-time.After(d):
	}
}

// A SEND the responder asks to have resent (a PSN sequence NAK) after
// its MR was deregistered: the retransmission would read the MR's
// memory, so the WQE completes with IBV_WC_LOC_PROT_ERR and nothing is
// sent.
func TestDeregBeforeRetransmit(t *testing.T) {
	forBoth(t, func(t *testing.T, unmap bool) {
		f := newFixture(t)
		p := newRawPeer(t, 0)
		qp, cq := requesterQP(t, f, p)
		m := newMapping(t, 2*os.Getpagesize())
		for i := range m.b {
			m.b[i] = 'S'
		}
		mr := m.regMR(t, f, verbs.AccessLocalWrite)
		f.postSend(qp, f.send(3, verbs.ExpWRSend, verbs.ExpSendSignaled, f.sgesOver(m.b, mr.Lkey, [2]int{0, 2048}), 1))
		f.progress()
		expectAnswer(t, p, pktSendFirst, 0, 0, "the SEND's first packet")
		expectAnswer(t, p, pktSendLast, 0, 1, "the SEND's last packet")
		m.release(t, f, mr, unmap)
		conn := p.open(f.d, 0)
		conn.Write(frame{op: pktAck, syndrome: aethNakSeq, dst: qp.QPNum, src: 0x4242, psn: 0}.bytes())
		got := pollOne(t, f, cq)
		if got[0].ID != 3 || got[0].Status != verbs.WCLocProtErr {
			t.Fatalf("completions %+v, want wr_id 3 with IBV_WC_LOC_PROT_ERR", got)
		}
		noFrames(t, p, 100*time.Millisecond, "a retransmission from a deregistered MR")
	})
}

// A message the wire takes in several passes (the socket full, the peer
// not reading): the bursts after the MR's deregistration would read it.
// The WQE completes with IBV_WC_LOC_PROT_ERR, and no frame that left
// after the deregistration carries what the memory holds since.
func TestDeregBetweenBursts(t *testing.T) {
	forBoth(t, func(t *testing.T, unmap bool) {
		f := newFixture(t)
		p := newHeldRawPeer(t, 0, 1<<13)
		cq := f.cq(64)
		qp := f.qp(cq, cq)
		l := defaultLink()
		l.timeout, l.mtu = 0, verbs.MTU4096
		connectOne(t, qp, 0x4242, p.gid(), l)
		const size = 16 << 20 // 4096 packets: more than the socket holds
		m := newMapping(t, size)
		copy(m.b, bytes.Repeat([]byte{'S'}, size))
		mr := m.regMR(t, f, verbs.AccessLocalWrite)
		wr := f.send(4, verbs.ExpWRRDMAWrite, verbs.ExpSendSignaled, f.sgesOver(m.b, mr.Lkey, [2]int{0, size}), 1)
		wr.WR.RDMA().RemoteAddr, wr.WR.RDMA().Rkey = 1<<40, 0x77
		f.postSend(qp, wr)
		waitFor(t, func() bool { w, _ := f.d.QPWire(qp); return w.TxPackets > 0 && f.d.Wire().GatherCopies > 0 },
			"the socket to fill: %+v", f.d.Wire())
		sent, _ := f.d.QPWire(qp)
		if sent.TxPackets >= size/4096 {
			t.Fatalf("all %d packets left before the deregistration: the socket never filled", sent.TxPackets)
		}
		// Quickly: the peer answers the device's hello only once released,
		// and a handshake not over within 2 s fails the connection.
		if !unmap {
			x := bytes.Repeat([]byte{'X'}, size)
			m.release(t, f, mr, false)
			copy(m.b, x) // what a burst after the deregistration would carry
		} else {
			m.release(t, f, mr, true)
		}
		p.release()
		for {
			select {
			case b := <-p.in:
				if bytes.IndexByte(b[64:], 'X') >= 0 {
					t.Fatalf("frame psn %d carries bytes written after the deregistration", le32(b[12:]))
				}
				continue
			case <-time.After(200 * time.Millisecond):
			}
			break
		}
		got := pollOne(t, f, cq)
		if got[0].ID != 4 || got[0].Status != verbs.WCLocProtErr {
			t.Fatalf("completions %+v, want wr_id 4 with IBV_WC_LOC_PROT_ERR", got)
		}
		after, _ := f.d.QPWire(qp)
		if after.TxPackets != sent.TxPackets {
			t.Errorf("%d packets sent after the deregistration", after.TxPackets-sent.TxPackets)
		}
	})
}

// A READ whose local MR goes between its first and last response packet:
// the WQE completes with IBV_WC_LOC_PROT_ERR and the last response is not
// placed.
func TestDeregMidReadResponse(t *testing.T) {
	forBoth(t, func(t *testing.T, unmap bool) {
		f := newFixture(t)
		p := newRawPeer(t, 0)
		qp, cq := requesterQP(t, f, p)
		m := newMapping(t, os.Getpagesize())
		mr := m.regMR(t, f, verbs.AccessLocalWrite)
		wr := f.send(5, verbs.ExpWRRDMARead, verbs.ExpSendSignaled, f.sgesOver(m.b, mr.Lkey, [2]int{0, 2048}), 1)
		wr.WR.RDMA().RemoteAddr, wr.WR.RDMA().Rkey = 1<<40, 0x77
		f.postSend(qp, wr)
		f.progress()
		expectAnswer(t, p, pktReadReq, 0, 0, "the READ request")
		conn := p.open(f.d, 0)
		conn.Write(frame{op: pktReadRespFrst, dst: qp.QPNum, src: 0x4242, psn: 0, payload: bytes.Repeat([]byte{'R'}, 1024)}.bytes())
		waitFor(t, func() bool { return m.b[1023] == 'R' }, "the first READ response to land")
		m.release(t, f, mr, unmap)
		conn.Write(frame{op: pktReadRespLast, dst: qp.QPNum, src: 0x4242, psn: 1, payload: bytes.Repeat([]byte{'Q'}, 1024)}.bytes())
		got := pollOne(t, f, cq)
		if got[0].ID != 5 || got[0].Status != verbs.WCLocProtErr {
			t.Fatalf("completions %+v, want wr_id 5 with IBV_WC_LOC_PROT_ERR", got)
		}
		if !m.untouched(1024, 2048, 0) {
			t.Error("the READ's last response was placed after its MR was deregistered")
		}
	})
}

// An atomic whose local MR goes before its ATOMIC ACK: IBV_WC_LOC_PROT_ERR,
// the original value not written.
func TestDeregBeforeAtomicAck(t *testing.T) {
	forBoth(t, func(t *testing.T, unmap bool) {
		f := newFixture(t)
		p := newRawPeer(t, 0)
		qp, cq := requesterQP(t, f, p)
		m := newMapping(t, os.Getpagesize())
		mr := m.regMR(t, f, verbs.AccessLocalWrite)
		wr := f.send(6, verbs.ExpWRAtomicFetchAndAdd, verbs.ExpSendSignaled, f.sgesOver(m.b, mr.Lkey, [2]int{0, 8}), 1)
		wr.WR.Atomic().RemoteAddr, wr.WR.Atomic().Rkey, wr.WR.Atomic().CompareAdd = 1<<40, 0x77, 1
		f.postSend(qp, wr)
		f.progress()
		expectAnswer(t, p, pktFetchAdd, 0, 0, "the FETCH_ADD request")
		m.release(t, f, mr, unmap)
		conn := p.open(f.d, 0)
		conn.Write(frame{op: pktAtomicAck, dst: qp.QPNum, src: 0x4242, psn: 0, swapAdd: 0x4141414141414141}.bytes())
		got := pollOne(t, f, cq)
		if got[0].ID != 6 || got[0].Status != verbs.WCLocProtErr {
			t.Fatalf("completions %+v, want wr_id 6 with IBV_WC_LOC_PROT_ERR", got)
		}
		if !m.untouched(0, 8, 0) {
			t.Errorf("the ATOMIC ACK's value was written after the MR was deregistered: %x", m.b[:8])
		}
	})
}
