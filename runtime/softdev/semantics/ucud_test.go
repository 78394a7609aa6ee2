//go:build linux && cgo

package semantics

import (
	"bytes"
	"syscall"
	"time"

	"github.com/verbsexp/verbsexp/generated/verbs"
)

// UC and UD between two devices (rank 0 sends, rank 1 receives):
// runtime/softdev's uc_test.go and ud_test.go state the same rules
// between QPs of one device, with the transport's counters.

func ucudCases() []semCase {
	return []semCase{
		{name: "UCTransfers", ranks: 2, run: ucTransfers},
		{name: "UCDrops", ranks: 2, run: ucDrops},
		{name: "UDDatagram", ranks: 2, run: udDatagram},
		{name: "UDDrops", ranks: 2, run: udDrops},
	}
}

// ---- UC: connected like RC, never acknowledged ----

// ucUp is rank's UC QP connected to the other rank's: ibv_modify_qp with
// what UC takes (INIT: access; RTR: the path, the destination QP and
// rq_psn; RTS: sq_psn).
func (n *node) ucUp() *wire {
	t, d := n.t, n.d
	t.Helper()
	w := &wire{cq: d.cq(64)}
	w.qp = d.createQP(qpSpec{scq: w.cq, rcq: w.cq, typ: verbs.QptUC})
	w.peer = exchange(n, peerInfo{Addr: d.self(), QPN: w.qp.QPNum, Buf: d.addr(0), Rkey: d.mr.Rkey})[1-n.rank]
	a := cAlloc[verbs.QPAttr](d)
	for _, s := range []struct {
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{verbs.QPAttr{QPState: verbs.QpsInit, PortNum: 1, QPAccessFlags: int32(verbs.AccessLocalWrite | verbs.AccessRemoteWrite)},
			verbs.QPStateConst | verbs.QPPkeyIndex | verbs.QPPort | verbs.QPAccessFlags},
		{verbs.QPAttr{QPState: verbs.QpsRtr, PathMTU: verbs.MTU1024, DestQPNum: w.peer.QPN, AHAttr: d.ah(w.peer.Addr)},
			verbs.QPStateConst | verbs.QPAv | verbs.QPPathMTU | verbs.QPDestQPN | verbs.QPRQPSN},
		{verbs.QPAttr{QPState: verbs.QpsRts}, verbs.QPStateConst | verbs.QPSQPSN},
	} {
		*a = s.attr
		if err := verbs.ModifyQP(w.qp, a, int32(s.mask)); err != nil {
			t.Fatalf("UC QP %#x to %v: %v", w.qp.QPNum, s.attr.QPState, err)
		}
	}
	n.barrier("connected")
	return w
}

// postUC posts one signaled WR of d.buf[off:off+n].
func (d *dut) postUC(qp *verbs.QP, id uint64, op verbs.ExpWROpcode, off, n int, remote uint64, rkey, imm uint32) error {
	w := d.sendBuf(id, verbs.ExpSendSignaled, off, n)
	w.ExpOpcode = op
	w.WR.RDMA().RemoteAddr, w.WR.RDMA().Rkey = remote, rkey
	w.Ex.SetImmData(imm)
	_, err := d.post(qp, w)
	return err
}

// ucTransfers: the four UC opcodes, three packets each (3000 bytes at
// path MTU 1024): the requester's WQEs complete, the receives complete
// with their lengths, opcodes, immediates and the sender's QP number, and
// the bytes are where they were sent.
func ucTransfers(n *node) {
	t, d := n.t, n.d
	w := n.ucUp()
	pattern := func(i int) byte { return byte(i * 7) }
	dsts := []int{8192, 16384, 24576, 32768}
	if n.rank == 1 {
		d.postRecv(w.qp, d.recvBuf(1, 8192, 4096), d.recvBuf(2, 16384, 4096), d.recvBuf(3, 40960, 16))
		n.barrier("posted")
		r := d.await(w.cq, 3)
		q := w.qp.QPNum
		want := []wcSum{{1, verbs.WCSuccess, verbs.ExpWCRecv, 3000, q}, {2, verbs.WCSuccess, verbs.ExpWCRecv, 3000, q},
			{3, verbs.WCSuccess, verbs.ExpWCRecvRDMAWithImm, 3000, q}}
		if got := sum(r); !equalSums(got, want) {
			t.Errorf("responder: %+v, want %+v", got, want)
		}
		if r[1].ImmData != 0x55 || r[2].ImmData != 0x55 || r[0].SrcQP != w.peer.QPN {
			t.Errorf("responder's imm %#x, %#x, src_qp %#x (want 0x55, 0x55, %#x)", r[1].ImmData, r[2].ImmData, r[0].SrcQP, w.peer.QPN)
		}
		n.barrier("done")
		for _, dst := range dsts {
			for i := range 3000 {
				if d.buf[dst+i] != pattern(i) {
					t.Fatalf("byte %d at %d: %d, want %d", i, dst, d.buf[dst+i], pattern(i))
				}
			}
		}
		if got := d.quiet(w.cq); len(got) != 0 {
			t.Errorf("more completions: %+v", sum(got))
		}
		return
	}
	for i := range 3000 {
		d.buf[i] = pattern(i)
	}
	n.barrier("posted")
	for i, op := range []verbs.ExpWROpcode{verbs.ExpWRSend, verbs.ExpWRSendWithImm, verbs.ExpWRRDMAWrite, verbs.ExpWRRDMAWriteWithImm} {
		if err := d.postUC(w.qp, uint64(i+10), op, 0, 3000, w.peer.Buf+uint64(dsts[i]), w.peer.Rkey, 0x55); err != nil {
			t.Fatalf("post %v: %v", op, err)
		}
	}
	for i, c := range d.await(w.cq, 4) {
		if c.Status != verbs.WCSuccess || c.WRID != uint64(i+10) {
			t.Errorf("requester completion %+v", sum([]verbs.ExpWC{c}))
		}
	}
	n.barrier("done")
}

// ucDrops: what a UC responder drops, silently, keeping its state: a
// message with no receive WQE (the requester completes it all the same,
// and a receive posted later does not get it), an RDMA WRITE that its MRs
// do not cover or with a wrong rkey. The next SEND takes the receive;
// both QPs stay in RTS. READs and atomics are refused at post.
func ucDrops(n *node) {
	t, d := n.t, n.d
	w := n.ucUp()
	if n.rank == 1 {
		n.barrier("dropped")
		// The SEND left the requester before the barrier; give it time to
		// arrive (a fabric's latency, here a TCP hop) before the receive.
		time.Sleep(quietWindow)
		d.postRecv(w.qp, d.recvBuf(7, 4096, 4096))
		if r := d.quiet(w.cq); len(r) != 0 {
			t.Fatalf("a receive posted late took the dropped message: %+v", sum(r))
		}
		n.barrier("posted")
		n.barrier("refused")
		if r := d.quiet(w.cq); len(r) != 0 {
			t.Fatalf("refused writes completed receives: %+v", sum(r))
		}
		n.barrier("checked")
		if r := sum(d.await(w.cq, 1)); r[0].ID != 7 || r[0].Len != 10 || r[0].Status != verbs.WCSuccess {
			t.Errorf("responder after the drops: %+v, want wr 7 with 10 bytes", r)
		}
		if st := d.qpState(w.qp); st != verbs.QpsRts {
			t.Errorf("responder in %v after UC drops, want RTS", st)
		}
		return
	}
	if err := d.postUC(w.qp, 1, verbs.ExpWRSend, 0, 100, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	if s := sum(d.await(w.cq, 1)); s[0].Status != verbs.WCSuccess {
		t.Fatalf("requester of a SEND nobody receives: %+v, want success", s)
	}
	n.barrier("dropped")
	n.barrier("posted")
	if err := d.postUC(w.qp, 2, verbs.ExpWRRDMAWrite, 0, 100, w.peer.Buf+bufSize-50, w.peer.Rkey, 0); err != nil {
		t.Fatal(err)
	}
	if err := d.postUC(w.qp, 3, verbs.ExpWRRDMAWriteWithImm, 0, 100, w.peer.Buf, w.peer.Rkey^0x100, 0); err != nil {
		t.Fatal(err)
	}
	if s := sum(d.await(w.cq, 2)); s[0].Status != verbs.WCSuccess || s[1].Status != verbs.WCSuccess {
		t.Fatalf("requester of refused writes: %+v, want success (nothing answers UC)", s)
	}
	n.barrier("refused")
	n.barrier("checked")
	if err := d.postUC(w.qp, 4, verbs.ExpWRSend, 0, 10, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	d.await(w.cq, 1)
	if st := d.qpState(w.qp); st != verbs.QpsRts {
		t.Errorf("requester in %v after UC drops, want RTS", st)
	}
	for _, op := range []verbs.ExpWROpcode{verbs.ExpWRRDMARead, verbs.ExpWRAtomicFetchAndAdd, verbs.ExpWRAtomicCmpAndSwp} {
		size := 100
		if op != verbs.ExpWRRDMARead {
			size = 8
		}
		if err := d.postUC(w.qp, 5, op, 0, size, w.peer.Buf, w.peer.Rkey, 0); !isCallErrno(err, "ibv_exp_post_send", syscall.EINVAL) {
			t.Errorf("%v on UC: %v, want EINVAL", op, err)
		}
	}
}

// ---- UD: datagrams through address handles ----

const udQkey = 0x11111111 // ibv_ud_pingpong's

// udPeer is a rank's UD QP in RTS with udQkey (INIT: P_Key index, port,
// Q_Key; RTR; RTS: sq_psn, as ibv_ud_pingpong moves it), its CQ, an
// address handle for the other rank (its LID on an InfiniBand port, its
// GID in a GRH on an Ethernet one) and what the other rank told.
type udPeer struct {
	qp   *verbs.QP
	cq   *verbs.CQ
	ah   *verbs.AH
	peer peerInfo
}

func (n *node) udUp() *udPeer {
	t, d := n.t, n.d
	t.Helper()
	u := &udPeer{cq: d.cq(64)}
	u.qp = d.createQP(qpSpec{scq: u.cq, rcq: u.cq, typ: verbs.QptUD})
	a := cAlloc[verbs.QPAttr](d)
	for _, s := range []struct {
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{verbs.QPAttr{QPState: verbs.QpsInit, PortNum: 1, Qkey: udQkey}, verbs.QPStateConst | verbs.QPPkeyIndex | verbs.QPPort | verbs.QPQkey},
		{verbs.QPAttr{QPState: verbs.QpsRtr}, verbs.QPStateConst},
		{verbs.QPAttr{QPState: verbs.QpsRts, SQPSN: 0x1234}, verbs.QPStateConst | verbs.QPSQPSN},
	} {
		*a = s.attr
		if err := verbs.ModifyQP(u.qp, a, int32(s.mask)); err != nil {
			t.Fatalf("UD QP %#x to %v: %v", u.qp.QPNum, s.attr.QPState, err)
		}
	}
	u.peer = exchange(n, peerInfo{Addr: d.self(), QPN: u.qp.QPNum})[1-n.rank]
	ah := cAlloc[verbs.AHAttr](d)
	*ah = d.ah(u.peer.Addr)
	var err error
	if u.ah, err = verbs.CreateAH(d.pd, ah); err != nil {
		t.Fatalf("ibv_create_ah: %v", err)
	}
	t.Cleanup(func() { // before the PD goes (the device's cleanup is older, so later)
		if err := verbs.DestroyAH(u.ah); err != nil {
			t.Errorf("ibv_destroy_ah: %v", err)
		}
	})
	return u
}

// udSend posts one signaled UD SEND of d.buf[off:off+n] with ibv_post_send.
func (d *dut) udSend(u *udPeer, qkey uint32, id uint64, off, n int, op verbs.WROpcode, imm uint32, flags verbs.SendFlags) {
	d.t.Helper()
	w := cAlloc[verbs.SendWR](d)
	w.WRID, w.Opcode, w.SendFlags, w.ImmData = id, op, int32(flags|verbs.SendSignaled), imm
	w.SGList, w.NumSGE = d.sges(d.mr.Lkey, [2]int{off, n}), 1
	*w.WR.UD() = verbs.SendWRWRUD{AH: u.ah, RemoteQPN: u.peer.QPN, RemoteQkey: qkey}
	if err := verbs.PostSend(u.qp, w, cAlloc[*verbs.SendWR](d)); err != nil {
		d.t.Fatalf("ibv_post_send (UD, wr %d): %v", id, err)
	}
	if c := d.await(u.cq, 1)[0]; c.Status != verbs.WCSuccess || c.WRID != id || c.ExpOpcode != verbs.ExpWCSend {
		d.t.Fatalf("sender's completion %+v, want wr %d's SEND done", sum([]verbs.ExpWC{c}), id)
	}
}

// udDatagram: a SEND_WITH_IMM of 13 bytes through the address handle:
// the receive completes with the 40-byte GRH area counted in byte_len,
// the sender's QP number, the immediate; on an InfiniBand port the
// datagram came without a GRH (IBV_WC_GRH clear) and the completion names
// the sender's LID, on an Ethernet port with one (IBV_WC_GRH set, slid 0);
// the payload starts at offset 40.
func udDatagram(n *node) {
	t, d := n.t, n.d
	u := n.udUp()
	if n.rank == 1 {
		for i := 1024; i < 1024+40; i++ {
			d.buf[i] = 0xee
		}
		d.postRecv(u.qp, d.recvBuf(77, 1024, 40+64))
		n.barrier("posted")
		r := d.await(u.cq, 1)[0]
		ib := d.port.LinkLayer != verbs.LinkLayerEthernet
		wantFlags, wantSlid := uint64(verbs.ExpWCGRH|verbs.ExpWCWithImm), uint16(0)
		if ib {
			wantFlags, wantSlid = uint64(verbs.ExpWCWithImm), u.peer.Addr.LID
		}
		if r.Status != verbs.WCSuccess || r.WRID != 77 || byteLen(&r) != 40+13 || r.SrcQP != u.peer.QPN || r.QPNum != u.qp.QPNum ||
			r.ImmData != 0xabcd || r.ExpWCFlags&uint64(verbs.ExpWCGRH|verbs.ExpWCWithImm) != wantFlags || r.Slid != wantSlid {
			t.Errorf("receive %+v (byte_len %d, flags %#x, slid %#x): want wr 77, 53 bytes (40 of GRH area), src_qp %#x, imm 0xabcd, flags %#x, slid %#x",
				sum([]verbs.ExpWC{r}), byteLen(&r), r.ExpWCFlags, r.Slid, u.peer.QPN, wantFlags, wantSlid)
		}
		if got := string(d.buf[1024+40 : 1024+40+13]); got != "datagram to 1" {
			t.Errorf("payload at offset 40: %q", got)
		}
		if ib && !bytes.Equal(d.buf[1024:1024+40], bytes.Repeat([]byte{0xee}, 40)) {
			t.Errorf("the GRH area of a datagram without a GRH was written: % x", d.buf[1024:1024+40])
		}
		return
	}
	copy(d.buf, "datagram to 1")
	n.barrier("posted")
	d.udSend(u, udQkey, 5, 0, 13, verbs.WRSendWithImm, 0xabcd, verbs.SendSolicited)
}

// udDrops: what a UD responder drops, silently (the sender's WQE
// completes all the same: nothing answers a datagram): a datagram with
// no receive WQE when it arrives (a receive posted later does not get
// it), another
// Q_Key, one above the port's MTU. A Q_Key with its high bit set in the
// WR is the sending QP's own: taken. Exactly the MTU arrives.
func udDrops(n *node) {
	t, d := n.t, n.d
	u := n.udUp()
	mtu := 128 << d.port.ActiveMTU
	// A first datagram, received: the path from rank 0 to rank 1 is up
	// (the first send to a device opens the connection to it, and a
	// datagram waits for that, not a completion).
	if n.rank == 1 {
		d.postRecv(u.qp, d.recvBuf(1, 1024, 4096))
		n.barrier("warm posted")
		if r := d.await(u.cq, 1); r[0].WRID != 1 || r[0].Status != verbs.WCSuccess {
			t.Fatalf("the first datagram: %+v", sum(r))
		}
		n.barrier("warm")
	} else {
		n.barrier("warm posted")
		d.udSend(u, udQkey, 0, 0, 8, verbs.WRSend, 0, 0)
		n.barrier("warm")
	}
	if n.rank == 1 {
		n.barrier("no receive")
		// The datagram left rank 0 before the barrier; give it time to
		// arrive (a fabric's latency, here a TCP hop) before the receive.
		time.Sleep(quietWindow)
		d.postRecv(u.qp, d.recvBuf(2, 1024, 4096))
		if r := d.quiet(u.cq); len(r) != 0 {
			t.Fatalf("a receive posted after the datagram took it: %+v", sum(r))
		}
		n.barrier("posted")
		n.barrier("wrong qkey")
		if r := d.quiet(u.cq); len(r) != 0 {
			t.Fatalf("a datagram with another Q_Key was taken: %+v", sum(r))
		}
		n.barrier("checked qkey")
		if r := d.await(u.cq, 1); r[0].WRID != 2 || r[0].Status != verbs.WCSuccess {
			t.Errorf("the datagram with the sender's own Q_Key: %+v", sum(r))
		}
		d.postRecv(u.qp, d.recvBuf(4, 0, bufSize))
		n.barrier("big posted")
		n.barrier("too big")
		if r := d.quiet(u.cq); len(r) != 0 {
			t.Fatalf("a datagram above the MTU (%d) arrived: %+v", mtu, sum(r))
		}
		n.barrier("checked big")
		if r := d.await(u.cq, 1); r[0].WRID != 4 || byteLen(&r[0]) != uint32(40+mtu) {
			t.Errorf("a datagram of the MTU (%d): %+v, byte_len %d", mtu, sum(r), byteLen(&r[0]))
		}
		return
	}
	d.udSend(u, udQkey, 1, 0, 8, verbs.WRSend, 0, 0)
	n.barrier("no receive")
	n.barrier("posted")
	d.udSend(u, 0x22222222, 2, 0, 8, verbs.WRSend, 0, 0)
	n.barrier("wrong qkey")
	n.barrier("checked qkey")
	d.udSend(u, 0x80000000, 3, 0, 8, verbs.WRSend, 0, 0)
	n.barrier("big posted")
	d.udSend(u, udQkey, 4, 0, mtu+1, verbs.WRSend, 0, 0)
	n.barrier("too big")
	n.barrier("checked big")
	d.udSend(u, udQkey, 5, 0, mtu, verbs.WRSend, 0, 0)
}
