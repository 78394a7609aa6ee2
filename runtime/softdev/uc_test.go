//go:build linux && cgo

package softdev

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/device"
)

// UC: connected like RC, never acknowledged. The rules are in transport_rc.c
// (sd_rc_transmit's UC branch, responder_rx's UC checks).

// ucPair is two UC QPs of f connected to each other, each with its CQ.
// ucPair is two connected UC QPs, at path MTU 1024 (the tests count
// packets).
func (f *fixture) ucPair() pair {
	f.t.Helper()
	var p pair
	p.cqa, p.cqb = f.cq(256), f.cq(256)
	p.a = f.qp(p.cqa, p.cqa, device.Transport(verbs.QptUC))
	p.b = f.qp(p.cqb, p.cqb, device.Transport(verbs.QptUC))
	ea, err := f.d.Endpoint(p.a)
	if err != nil {
		f.t.Fatal(err)
	}
	eb, err := f.d.Endpoint(p.b)
	if err != nil {
		f.t.Fatal(err)
	}
	ea.MTU = verbs.MTU1024
	if err := errors.Join(device.Connect(p.a, ea, eb), device.Connect(p.b, eb, ea)); err != nil {
		f.t.Fatalf("Connect: %v", err)
	}
	return p
}

// postUC posts one signaled WR of f.buf[off:off+n] to qp.
func (f *fixture) postUC(qp *verbs.QP, id uint64, op verbs.ExpWROpcode, off, n int, remote uint64, rkey, imm uint32) error {
	w := f.send(id, op, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{off, n}), 1)
	w.WR.RDMA().RemoteAddr, w.WR.RDMA().Rkey = remote, rkey
	w.Ex.SetImmData(imm)
	return verbs.ExpPostSend(qp, w, nil)
}

// The four UC opcodes, several packets each (path MTU 1024): delivered,
// the requester's WQEs complete, and the responder sends nothing back.
func TestUCTransfers(t *testing.T) {
	f := newFixture(t)
	p := f.ucPair()
	for i := range 3000 {
		f.buf[i] = byte(i * 7)
	}
	f.postRecv(p.b, f.recv(1, f.sges(f.mr.Lkey, [2]int{8192, 4096}), 1))
	f.postRecv(p.b, f.recv(2, f.sges(f.mr.Lkey, [2]int{16384, 4096}), 1))
	f.postRecv(p.b, f.recv(3, f.sges(f.mr.Lkey, [2]int{20480, 16}), 1))
	for _, c := range []struct {
		op  verbs.ExpWROpcode
		dst int
	}{{verbs.ExpWRSend, 8192}, {verbs.ExpWRSendWithImm, 16384}, {verbs.ExpWRRDMAWrite, 24576}, {verbs.ExpWRRDMAWriteWithImm, 32768}} {
		if err := f.postUC(p.a, uint64(c.op)+10, c.op, 0, 3000, f.addr(c.dst), f.mr.Rkey, 0x55); err != nil {
			t.Fatalf("post %v: %v", c.op, err)
		}
	}
	s, r := sum(f.poll(p.cqa)), f.poll(p.cqb)
	if len(s) != 4 {
		t.Fatalf("requester: %+v, want 4 completions", s)
	}
	for _, c := range s {
		if c.Status != verbs.WCSuccess || c.Len != 3000 {
			t.Errorf("requester completion %+v", c)
		}
	}
	want := []wcSum{
		{1, verbs.WCSuccess, verbs.ExpWCRecv, 3000, p.b.QPNum},
		{2, verbs.WCSuccess, verbs.ExpWCRecv, 3000, p.b.QPNum},
		{3, verbs.WCSuccess, verbs.ExpWCRecvRDMAWithImm, 3000, p.b.QPNum},
	}
	if got := sum(r); len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("responder: %+v, want %+v", got, want)
	}
	if r[1].ImmData != 0x55 || r[2].ImmData != 0x55 || r[0].SrcQP != p.a.QPNum {
		t.Errorf("responder's imm %#x, %#x, src_qp %#x", r[1].ImmData, r[2].ImmData, r[0].SrcQP)
	}
	for _, dst := range []int{8192, 16384, 24576, 32768} {
		if !bytes.Equal(f.buf[dst:dst+3000], f.buf[:3000]) {
			t.Errorf("data at %d differs from what was sent", dst)
		}
	}
	if w, _ := f.d.QPWire(p.b); w.TxPackets != 0 || w.RxPackets != 12 {
		t.Errorf("responder sent %d packets and took %d: want none sent (UC has no ACKs) and 12 taken", w.TxPackets, w.RxPackets)
	}
}

// What a UC responder drops, silently, keeping its state: a message with
// no receive WQE (the requester completes it all the same), an RDMA WRITE
// its access flags refuse or that its MRs do not cover. READs and
// atomics are refused at post.
func TestUCDrops(t *testing.T) {
	f := newFixture(t)
	p := f.ucPair()
	if err := f.postUC(p.a, 1, verbs.ExpWRSend, 0, 100, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	if s := sum(f.poll(p.cqa)); len(s) != 1 || s[0].Status != verbs.WCSuccess {
		t.Fatalf("requester of a SEND nobody receives: %+v, want success", s)
	}
	f.postRecv(p.b, f.recv(7, f.sges(f.mr.Lkey, [2]int{4096, 4096}), 1))
	if r := f.poll(p.cqb); len(r) != 0 {
		t.Fatalf("a receive posted late took the dropped message: %+v", sum(r))
	}
	// An RDMA WRITE beyond the MR, then one with a bad rkey: dropped.
	if err := f.postUC(p.a, 2, verbs.ExpWRRDMAWrite, 0, 100, f.addr(bufSize-50), f.mr.Rkey, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.postUC(p.a, 3, verbs.ExpWRRDMAWriteWithImm, 0, 100, f.addr(0), f.mr.Rkey^0x100, 0); err != nil {
		t.Fatal(err)
	}
	f.poll(p.cqa)
	if r := f.poll(p.cqb); len(r) != 0 {
		t.Fatalf("refused writes completed receives: %+v", sum(r))
	}
	// The next SEND takes the receive.
	if err := f.postUC(p.a, 4, verbs.ExpWRSend, 0, 10, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	f.poll(p.cqa)
	if r := sum(f.poll(p.cqb)); len(r) != 1 || r[0].ID != 7 || r[0].Len != 10 || r[0].Status != verbs.WCSuccess {
		t.Errorf("responder after the drops: %+v, want wr 7 with 10 bytes", r)
	}
	for _, qp := range []*verbs.QP{p.a, p.b} {
		if st, _, _, _ := f.d.QPStats(qp); st != verbs.QpsRts {
			t.Errorf("QP %#x in %v after UC drops, want RTS", qp.QPNum, st)
		}
	}
	for _, op := range []verbs.ExpWROpcode{verbs.ExpWRRDMARead, verbs.ExpWRAtomicFetchAndAdd, verbs.ExpWRAtomicCmpAndSwp} {
		n := 100
		if op != verbs.ExpWRRDMARead {
			n = 8
		}
		if err := f.postUC(p.a, 5, op, 0, n, f.addr(0), f.mr.Rkey, 0); !isErrno(err, syscall.EINVAL) {
			t.Errorf("%v on UC: %v, want EINVAL", op, err)
		}
	}
}

// The UC state machine (ibv_modify_qp(3)): RTR needs the address vector,
// path MTU, destination QP and rq_psn and takes no READ/atomic depth or
// RNR timer; RTS needs sq_psn and takes no timeout or retry counts.
func TestUCStateMachine(t *testing.T) {
	f := newFixture(t)
	cq := f.cq(8)
	qp := f.qp(cq, cq, device.Transport(verbs.QptUC))
	a := alloc[verbs.ExpQPAttr](f)
	try := func(attr verbs.ExpQPAttr, mask verbs.ExpQPAttrMask) error {
		*a = attr
		return verbs.ExpModifyQP(qp, a, uint64(mask))
	}
	if err := try(verbs.ExpQPAttr{QPState: verbs.QpsInit, PortNum: 1}, verbs.ExpQPState|verbs.ExpQPPkeyIndex|verbs.ExpQPPort|verbs.ExpQPAccessFlags); err != nil {
		t.Fatal(err)
	}
	rtr := verbs.ExpQPAttr{QPState: verbs.QpsRtr, PathMTU: verbs.MTU1024, DestQPNum: qp.QPNum, MaxDestRdAtomic: 1}
	rtr.AHAttr.PortNum, rtr.AHAttr.IsGlobal = 1, 1
	*rtr.AHAttr.GRH.Dgid.Raw() = f.d.GID()
	m := verbs.ExpQPState | verbs.ExpQPAv | verbs.ExpQPPathMTU | verbs.ExpQPDestQPN | verbs.ExpQPRQPSN
	if err := try(rtr, m|verbs.ExpQPMaxDestRdAtomic); !isErrno(err, syscall.EINVAL) {
		t.Errorf("UC RTR with max_dest_rd_atomic: %v, want EINVAL", err)
	}
	if err := try(rtr, m); err != nil {
		t.Fatal(err)
	}
	if err := try(verbs.ExpQPAttr{QPState: verbs.QpsRts, RetryCnt: 7}, verbs.ExpQPState|verbs.ExpQPSQPSN|verbs.ExpQPRetryCnt); !isErrno(err, syscall.EINVAL) {
		t.Errorf("UC RTS with retry_cnt: %v, want EINVAL", err)
	}
	if err := try(verbs.ExpQPAttr{QPState: verbs.QpsRts}, verbs.ExpQPState|verbs.ExpQPSQPSN); err != nil {
		t.Fatal(err)
	}
}

// ucWire is a UC QP of f connected to a raw peer's QP 0x4343, expecting
// PSN 100.
func ucWire(t *testing.T, f *fixture, p *rawPeer) (*verbs.QP, *verbs.CQ) {
	cq := f.cq(64)
	qp := f.qp(cq, cq, device.Transport(verbs.QptUC))
	ucConnect(t, f, qp, 0x4343, p.gid())
	return qp, cq
}

// ucConnect moves a UC QP of f to RTS towards QP peerQPN of the device
// whose GID is gid, expecting PSN 100 and sending from 0.
func ucConnect(t *testing.T, f *fixture, qp *verbs.QP, peerQPN uint32, gid [16]byte) {
	t.Helper()
	a := alloc[verbs.ExpQPAttr](f)
	*a = verbs.ExpQPAttr{QPState: verbs.QpsInit, PortNum: 1, QPAccessFlags: int32(verbs.AccessLocalWrite | verbs.AccessRemoteWrite)}
	if err := verbs.ExpModifyQP(qp, a, uint64(verbs.ExpQPState|verbs.ExpQPPkeyIndex|verbs.ExpQPPort|verbs.ExpQPAccessFlags)); err != nil {
		t.Fatal(err)
	}
	*a = verbs.ExpQPAttr{QPState: verbs.QpsRtr, PathMTU: verbs.MTU1024, DestQPNum: peerQPN, RQPSN: 100}
	a.AHAttr.PortNum, a.AHAttr.IsGlobal = 1, 1
	*a.AHAttr.GRH.Dgid.Raw() = gid
	if err := verbs.ExpModifyQP(qp, a, uint64(verbs.ExpQPState|verbs.ExpQPAv|verbs.ExpQPPathMTU|verbs.ExpQPDestQPN|verbs.ExpQPRQPSN)); err != nil {
		t.Fatal(err)
	}
	*a = verbs.ExpQPAttr{QPState: verbs.QpsRts, SQPSN: 100}
	if err := verbs.ExpModifyQP(qp, a, uint64(verbs.ExpQPState|verbs.ExpQPSQPSN)); err != nil {
		t.Fatal(err)
	}
}

// A UC sender over the wire sends more than a link holds for new work
// (1 MiB queued): it stops half way through a message, and must go on
// once the connection drained, though nothing ever comes back to wake
// it (perftest's ib_write_bw -c UC at 64 KiB stalled so). All WRITEs
// complete, on a device driven by its thread and on one driven by polls.
func TestUCLinkBusy(t *testing.T) {
	for _, run := range []struct {
		name string
		opt  DeviceOption
	}{{"autonomous", Autonomous()}, {"polls", PollDriven()}} {
		t.Run(run.name, func(t *testing.T) {
			f, g := newFixture(t, run.opt), newFixture(t)
			cq := f.cq(64)
			a := f.qp(cq, cq, device.Transport(verbs.QptUC), device.QPCaps(device.Caps{SendWR: 128, SendSGE: 1}))
			gcq := g.cq(8)
			b := g.qp(gcq, gcq, device.Transport(verbs.QptUC))
			ucConnect(t, f, a, b.QPNum, g.d.GID())
			ucConnect(t, g, b, a.QPNum, f.d.GID())
			dst := g.reg(allocN[byte](g, bufSize), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
			const n = 100 // 6.4 MB of 64 KiB WRITEs, the last signaled
			for i := range n {
				w := f.send(uint64(i), verbs.ExpWRRDMAWrite, 0, f.sges(f.mr.Lkey, [2]int{0, bufSize}), 1)
				if i == n-1 {
					w.ExpSendFlags = uint64(verbs.ExpSendSignaled)
				}
				w.WR.RDMA().RemoteAddr, w.WR.RDMA().Rkey = uint64(uintptr(dst.Addr)), dst.Rkey
				f.postSend(a, w)
			}
			if s := sum(waitCQ(t, f, cq, 1)); s[0].ID != n-1 || s[0].Status != verbs.WCSuccess {
				t.Errorf("last WRITE: %+v", s)
			}
		})
	}
}

// A packet lost in the middle of a UC message: the rest of the message
// is dropped, later MIDDLE and LAST packets too, until a FIRST or ONLY
// starts a new one, with whatever PSN; the receive WQE the lost message
// had takes it (rxe's class D1). Frames written by a raw peer, with UC's
// transport bits (1) in the opcode byte's top three.
func TestUCPacketLoss(t *testing.T) {
	f := newFixture(t)
	p := newRawPeer(t, 0)
	qp, cq := ucWire(t, f, p)
	f.postRecv(qp, f.recv(1, f.sges(f.mr.Lkey, [2]int{0, 8192}), 1))
	f.postRecv(qp, f.recv(2, f.sges(f.mr.Lkey, [2]int{8192, 8192}), 1))
	const uc = 1 << 5
	const sendFirst, sendMiddle, sendLast, sendOnly = uc | 1, uc | 2, uc | 3, uc | 4
	conn := p.open(f.d, 0)
	mk := func(op uint8, psn uint32, fill byte, n int) []byte {
		return frame{op: op, dst: qp.QPNum, src: 0x4343, psn: psn, payload: bytes.Repeat([]byte{fill}, n)}.bytes()
	}
	taken := func() uint64 { w, _ := f.d.QPWire(qp); return w.RxPackets }
	for _, fr := range [][]byte{
		mk(sendFirst, 100, 'a', 1024),
		mk(sendLast, 102, 'b', 10),     // PSN 101 lost: the message is dropped
		mk(sendMiddle, 103, 'c', 1024), // still dropped
		mk(sendOnly, 500, 'd', 20),     // a new message, PSN 500: taken, into wr 1
		mk(sendFirst, 501, 'e', 1024),
		mk(sendLast, 502, 'f', 5), // complete: wr 2
	} {
		n := taken()
		conn.Write(fr)
		waitFor(t, func() bool { return taken() > n }, "the device to take a frame")
	}
	r := sum(waitCQ(t, f, cq, 2))
	want := []wcSum{{1, verbs.WCSuccess, verbs.ExpWCRecv, 20, qp.QPNum}, {2, verbs.WCSuccess, verbs.ExpWCRecv, 1029, qp.QPNum}}
	if len(r) != 2 || r[0] != want[0] || r[1] != want[1] {
		t.Fatalf("completions %+v, want %+v", r, want)
	}
	if !bytes.Equal(f.buf[:20], bytes.Repeat([]byte{'d'}, 20)) || f.buf[8192] != 'e' || f.buf[8192+1024] != 'f' {
		t.Errorf("data: % x / %q %q", f.buf[:24], f.buf[8192], f.buf[8192+1024])
	}
	select {
	case b := <-p.in:
		t.Errorf("the UC responder answered: frame % x", b[:16])
	case <-time.After(50 * time.Millisecond):
	}
	if st, _, _, _ := f.d.QPStats(qp); st != verbs.QpsRts {
		t.Errorf("QP in %v after the losses, want RTS", st)
	}
}
