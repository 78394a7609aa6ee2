//go:build linux && cgo

package softdev

import (
	"bytes"
	"encoding/binary"
	"syscall"
	"testing"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/device"
)

// UD: datagrams addressed per work request with an address handle
// (ibv_create_ah), a Q_Key on each side, the 40-byte GRH area at the
// start of every receive buffer. The rules are in transport_rc.c (sd_ud_transmit,
// ud_rx) and engine_objects.c (create_ah_locked, the state machine).

const udQkey = 0x11111111 // ibv_ud_pingpong's

// udQP is a UD QP of f with a CQ of its own, in RTS with the Q_Key,
// through ibv_modify_qp as ibv_ud_pingpong moves it: INIT (P_Key index,
// port, Q_Key), RTR (the state alone), RTS (sq_psn).
func (f *fixture) udQP(qkey uint32, opts ...device.QPOption) (*verbs.QP, *verbs.CQ) {
	f.t.Helper()
	cq := f.cq(64)
	qp := f.qp(cq, cq, append([]device.QPOption{device.Transport(verbs.QptUD)}, opts...)...)
	f.udUp(qp, qkey)
	return qp, cq
}

func (f *fixture) udUp(qp *verbs.QP, qkey uint32) {
	f.t.Helper()
	a := alloc[verbs.QPAttr](f)
	for _, s := range []struct {
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{verbs.QPAttr{QPState: verbs.QpsInit, PortNum: 1, Qkey: qkey}, verbs.QPStateConst | verbs.QPPkeyIndex | verbs.QPPort | verbs.QPQkey},
		{verbs.QPAttr{QPState: verbs.QpsRtr}, verbs.QPStateConst},
		{verbs.QPAttr{QPState: verbs.QpsRts, SQPSN: 0x1234}, verbs.QPStateConst | verbs.QPSQPSN},
	} {
		*a = s.attr
		if err := verbs.ModifyQP(qp, a, int32(s.mask)); err != nil {
			f.t.Fatalf("UD QP %#x to %v: %v", qp.QPNum, s.attr.QPState, err)
		}
	}
}

// ah is ibv_create_ah for the device whose GID is gid: with a GRH (RoCE
// requires one), or by LID (0: none) on an InfiniBand port.
func (f *fixture) ah(gid [16]byte, lid uint16) *verbs.AH {
	f.t.Helper()
	a := alloc[verbs.AHAttr](f)
	a.PortNum = 1
	if lid != 0 {
		a.Dlid = lid
	} else {
		a.IsGlobal = 1
		a.GRH.HopLimit = 7
		*a.GRH.Dgid.Raw() = gid
	}
	ah, err := verbs.CreateAH(f.pd, a)
	if err != nil {
		f.t.Fatalf("ibv_create_ah: %v", err)
	}
	f.ahs = append(f.ahs, ah)
	return ah
}

// udSend posts one UD SEND of f.buf[off:off+n] with ibv_post_send.
func (f *fixture) udSend(qp *verbs.QP, ah *verbs.AH, qpn, qkey uint32, id uint64, off, n int, op verbs.WROpcode, imm uint32, flags verbs.SendFlags) error {
	w := alloc[verbs.SendWR](f)
	w.WRID, w.Opcode, w.SendFlags, w.ImmData = id, op, int32(flags|verbs.SendSignaled), imm
	w.SGList, w.NumSGE = f.sges(f.mr.Lkey, [2]int{off, n}), 1
	*w.WR.UD() = verbs.SendWRWRUD{AH: ah, RemoteQPN: qpn, RemoteQkey: qkey}
	return verbs.PostSend(qp, w, nil)
}

// udRecv posts a receive of n bytes at f.buf[off:].
func (f *fixture) udRecv(qp *verbs.QP, id uint64, off, n int) {
	f.t.Helper()
	f.postRecv(qp, f.recv(id, f.sges(f.mr.Lkey, [2]int{off, n}), 1))
}

func TestUDDatagram(t *testing.T) {
	f := newFixture(t)
	a, acq := f.udQP(udQkey)
	b, bcq := f.udQP(udQkey)
	copy(f.buf[0:], "datagram to b")
	for i := 1024; i < 1024+40; i++ {
		f.buf[i] = 0xee // the GRH area: overwritten, the GRH came
	}
	f.udRecv(b, 77, 1024, 40+64)
	ah := f.ah(f.d.GID(), 0)
	if err := f.udSend(a, ah, b.QPNum, udQkey, 5, 0, 13, verbs.WRSendWithImm, 0xabcd, verbs.SendSolicited); err != nil {
		t.Fatal(err)
	}
	sa, sb := f.poll(acq), f.poll(bcq)
	if len(sa) != 1 || sa[0].Status != verbs.WCSuccess || sa[0].WRID != 5 || sa[0].ExpOpcode != verbs.ExpWCSend {
		t.Fatalf("sender's completions %+v, want wr 5's SEND", sum(sa))
	}
	if len(sb) != 1 {
		t.Fatalf("receiver's completions %+v, want one", sum(sb))
	}
	r := sb[0]
	if r.Status != verbs.WCSuccess || r.WRID != 77 || byteLen(&r) != 40+13 || r.SrcQP != a.QPNum || r.QPNum != b.QPNum ||
		r.ImmData != 0xabcd || r.ExpWCFlags&uint64(verbs.ExpWCGRH|verbs.ExpWCWithImm) != uint64(verbs.ExpWCGRH|verbs.ExpWCWithImm) || r.Slid != 0 {
		t.Errorf("receive %+v (byte_len %d, flags %#x): want wr 77, 53 bytes (40 of GRH), src_qp %#x, imm 0xabcd, GRH and IMM flags, slid 0 (RoCE)",
			r, byteLen(&r), r.ExpWCFlags, a.QPNum)
	}
	if got := string(f.buf[1024+40 : 1024+40+13]); got != "datagram to b" {
		t.Errorf("payload at offset 40: %q", got)
	}
	g := f.buf[1024 : 1024+40]
	gid := f.d.GID()
	if g[0]>>4 != 6 || g[6] != 0x1b || g[7] != 7 || !bytes.Equal(g[8:24], gid[:]) || !bytes.Equal(g[24:40], gid[:]) ||
		binary.BigEndian.Uint16(g[4:]) != 12+8+4+13+4 {
		t.Errorf("GRH % x: want version 6, next header 0x1b, hop limit 7, payload length 41, source and destination GID %x", g, gid)
	}
	// On the wire too: a datagram from a QP of another device.
	g2 := newFixture(t)
	c, ccq := g2.udQP(udQkey)
	f.udRecv(b, 78, 2048, 40+64)
	if err := g2.udSend(c, g2.ah(f.d.GID(), 0), b.QPNum, udQkey, 9, 0, 64, verbs.WRSend, 0, 0); err != nil {
		t.Fatal(err)
	}
	if s := waitCQ(t, g2, ccq, 1); s[0].Status != verbs.WCSuccess {
		t.Fatalf("wire sender: %+v", sum(s))
	}
	r = waitCQ(t, f, bcq, 1)[0]
	if r.Status != verbs.WCSuccess || r.WRID != 78 || byteLen(&r) != 40+64 || r.SrcQP != c.QPNum {
		t.Errorf("datagram over the wire: %+v, byte_len %d; want wr 78, 104 bytes, src_qp %#x", r, byteLen(&r), c.QPNum)
	}
}

// waitCQ polls cq until n completions came (a peer on the wire sends
// when it sends).
func waitCQ(t *testing.T, f *fixture, cq *verbs.CQ, n int) []verbs.ExpWC {
	t.Helper()
	var out []verbs.ExpWC
	waitFor(t, func() bool { out = append(out, f.poll(cq)...); return len(out) >= n }, "%d completions", n)
	return out
}

// What a UD responder drops, silently (the sender's WQE completes with
// success all the same: nothing answers a datagram): another Q_Key, no
// receive WQE, a datagram above the port's MTU. A Q_Key with its high
// bit set in the WR is the sending QP's own.
func TestUDDrops(t *testing.T) {
	f := newFixture(t)
	a, acq := f.udQP(udQkey)
	b, bcq := f.udQP(udQkey)
	ah := f.ah(f.d.GID(), 0)
	sent := func(id uint64) {
		t.Helper()
		s := f.poll(acq)
		if len(s) != 1 || s[0].Status != verbs.WCSuccess || s[0].WRID != id {
			t.Fatalf("sender: %+v, want wr %d done", sum(s), id)
		}
	}
	received := func(want int) []verbs.ExpWC {
		t.Helper()
		r := f.poll(bcq)
		if len(r) != want {
			t.Fatalf("receiver: %+v, want %d completions", sum(r), want)
		}
		return r
	}
	dropped := func() uint64 { w, _ := f.d.QPWire(b); return w.Dropped }

	// No receive WQE.
	d0 := dropped()
	if err := f.udSend(a, ah, b.QPNum, udQkey, 1, 0, 8, verbs.WRSend, 0, 0); err != nil {
		t.Fatal(err)
	}
	sent(1)
	received(0)
	if dropped() != d0+1 {
		t.Errorf("dropped %d, want %d: the datagram for a QP without receives", dropped(), d0+1)
	}
	// Another Q_Key.
	f.udRecv(b, 2, 1024, 4096)
	if err := f.udSend(a, ah, b.QPNum, 0x22222222, 2, 0, 8, verbs.WRSend, 0, 0); err != nil {
		t.Fatal(err)
	}
	sent(2)
	received(0)
	// The sender's own Q_Key (the high bit): taken.
	if err := f.udSend(a, ah, b.QPNum, 0x80000000, 3, 0, 8, verbs.WRSend, 0, 0); err != nil {
		t.Fatal(err)
	}
	sent(3)
	if r := received(1); r[0].WRID != 2 || r[0].Status != verbs.WCSuccess {
		t.Errorf("the datagram with the QP's own Q_Key: %+v", sum(r))
	}
	// Above the port's MTU: completes, never arrives.
	attr, err := f.d.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	mtu := 128 << attr.ActiveMTU
	f.udRecv(b, 4, 0, bufSize)
	if err := f.udSend(a, ah, b.QPNum, udQkey, 4, 0, mtu+1, verbs.WRSend, 0, 0); err != nil {
		t.Fatal(err)
	}
	sent(4)
	received(0)
	// Exactly the MTU arrives.
	if err := f.udSend(a, ah, b.QPNum, udQkey, 5, 0, mtu, verbs.WRSend, 0, 0); err != nil {
		t.Fatal(err)
	}
	sent(5)
	if r := received(1); byteLen(&r[0]) != uint32(40+mtu) {
		t.Errorf("a datagram of the MTU (%d): byte_len %d", mtu, byteLen(&r[0]))
	}
}

// A receive WQE too short for the GRH area and the payload completes with
// IBV_WC_LOC_LEN_ERR and takes the QP to the error state; a READ or RDMA
// WRITE is refused at post; so is a send with a destroyed AH, or no AH.
// An AH may go once its sends are posted. In RTR a UD QP receives but
// does not send.
func TestUDRules(t *testing.T) {
	f := newFixture(t)
	a, acq := f.udQP(udQkey)
	b, bcq := f.udQP(udQkey)
	ah := f.ah(f.d.GID(), 0)
	for _, op := range []verbs.WROpcode{verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm, verbs.WRRDMARead} {
		if err := f.udSend(a, ah, b.QPNum, udQkey, 1, 0, 8, op, 0, 0); !isErrno(err, syscall.EINVAL) {
			t.Errorf("opcode %v on UD: %v, want EINVAL", op, err)
		}
	}
	if err := f.udSend(a, nil, b.QPNum, udQkey, 1, 0, 8, verbs.WRSend, 0, 0); !isErrno(err, syscall.EINVAL) {
		t.Errorf("a UD send without an AH: %v, want EINVAL", err)
	}
	// The AH destroyed after the post: the WQE has what it needs.
	gone := f.ah(f.d.GID(), 0)
	f.udRecv(b, 10, 0, 40+8)
	if err := f.udSend(a, gone, b.QPNum, udQkey, 2, 0, 8, verbs.WRSend, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := verbs.DestroyAH(gone); err != nil {
		t.Fatal(err)
	}
	f.ahs = f.ahs[:len(f.ahs)-1]
	if s, r := f.poll(acq), f.poll(bcq); len(s) != 1 || len(r) != 1 || r[0].Status != verbs.WCSuccess {
		t.Errorf("send after its AH was destroyed: %+v / %+v", sum(s), sum(r))
	}
	if err := f.udSend(a, gone, b.QPNum, udQkey, 3, 0, 8, verbs.WRSend, 0, 0); !isErrno(err, syscall.EINVAL) {
		t.Errorf("a send with a destroyed AH: %v, want EINVAL", err)
	}
	if err := f.d.DeallocPD(f.pd); !isErrno(err, syscall.EBUSY) {
		t.Errorf("DeallocPD with an AH in it: %v, want EBUSY", err)
	}
	// An AH of another PD than the QP's.
	pd2, err := f.d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	aa := alloc[verbs.AHAttr](f)
	aa.PortNum, aa.IsGlobal = 1, 1
	*aa.GRH.Dgid.Raw() = f.d.GID()
	other, err := verbs.CreateAH(pd2, aa)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.udSend(a, other, b.QPNum, udQkey, 3, 0, 8, verbs.WRSend, 0, 0); !isErrno(err, syscall.EINVAL) {
		t.Errorf("a send with an AH of another PD: %v, want EINVAL", err)
	}
	if err := verbs.DestroyAH(other); err != nil {
		t.Fatal(err)
	}
	if err := f.d.DeallocPD(pd2); err != nil {
		t.Fatal(err)
	}

	// RTR receives, does not send.
	c := f.qp(bcq, bcq, device.Transport(verbs.QptUD))
	at := alloc[verbs.QPAttr](f)
	*at = verbs.QPAttr{QPState: verbs.QpsInit, PortNum: 1, Qkey: udQkey}
	if err := verbs.ModifyQP(c, at, int32(verbs.QPStateConst|verbs.QPPkeyIndex|verbs.QPPort|verbs.QPQkey)); err != nil {
		t.Fatal(err)
	}
	*at = verbs.QPAttr{QPState: verbs.QpsRtr}
	if err := verbs.ModifyQP(c, at, int32(verbs.QPStateConst)); err != nil {
		t.Fatal(err)
	}
	f.udRecv(c, 20, 0, 40+8)
	if err := f.udSend(a, ah, c.QPNum, udQkey, 4, 0, 8, verbs.WRSend, 0, 0); err != nil {
		t.Fatal(err)
	}
	f.poll(acq)
	if r := f.poll(bcq); len(r) != 1 || r[0].WRID != 20 || r[0].Status != verbs.WCSuccess {
		t.Errorf("a UD QP in RTR receiving: %+v", sum(r))
	}
	if err := f.udSend(c, ah, a.QPNum, udQkey, 5, 0, 8, verbs.WRSend, 0, 0); !isErrno(err, syscall.EINVAL) {
		t.Errorf("a send from a UD QP in RTR: %v, want EINVAL", err)
	}

	// Too short a receive: LOC_LEN_ERR, the QP in error.
	f.udRecv(b, 30, 0, 40+7)
	if err := f.udSend(a, ah, b.QPNum, udQkey, 6, 0, 8, verbs.WRSend, 0, 0); err != nil {
		t.Fatal(err)
	}
	f.poll(acq)
	if r := f.poll(bcq); len(r) != 1 || r[0].WRID != 30 || r[0].Status != verbs.WCLocLenErr {
		t.Errorf("an 8-byte datagram into 47 bytes: %+v, want LOC_LEN_ERR", sum(r))
	}
	if st, _, _, _ := f.d.QPStats(b); st != verbs.QpsErr {
		t.Errorf("receiver in %v after LOC_LEN_ERR, want ERR", st)
	}
}

// The UD state machine (ibv_modify_qp(3)): INIT needs the P_Key index,
// port and Q_Key and takes no access flags; RTR takes no address vector
// or path; RTS needs sq_psn; the Q_Key changes in RTS; query_qp says it.
// Address handles: port 1, a GRH on a RoCE port (mlx5_create_ah).
func TestUDStateMachine(t *testing.T) {
	f := newFixture(t)
	cq := f.cq(8)
	qp := f.qp(cq, cq, device.Transport(verbs.QptUD))
	a := alloc[verbs.QPAttr](f)
	try := func(attr verbs.QPAttr, mask verbs.QPAttrMask) error {
		*a = attr
		return verbs.ModifyQP(qp, a, int32(mask))
	}
	base := verbs.QPStateConst | verbs.QPPkeyIndex | verbs.QPPort
	if err := try(verbs.QPAttr{QPState: verbs.QpsInit, PortNum: 1}, base); !isErrno(err, syscall.EINVAL) {
		t.Errorf("INIT without a Q_Key: %v", err)
	}
	if err := try(verbs.QPAttr{QPState: verbs.QpsInit, PortNum: 1, Qkey: 1}, base|verbs.QPQkey|verbs.QPAccessFlags); !isErrno(err, syscall.EINVAL) {
		t.Errorf("INIT with access flags: %v", err)
	}
	if err := try(verbs.QPAttr{QPState: verbs.QpsInit, PortNum: 1, Qkey: 1}, base|verbs.QPQkey); err != nil {
		t.Fatal(err)
	}
	if err := try(verbs.QPAttr{QPState: verbs.QpsRtr, PathMTU: verbs.MTU1024}, verbs.QPStateConst|verbs.QPPathMTU); !isErrno(err, syscall.EINVAL) {
		t.Errorf("RTR with a path MTU: %v", err)
	}
	if err := try(verbs.QPAttr{QPState: verbs.QpsRtr}, verbs.QPStateConst); err != nil {
		t.Fatal(err)
	}
	if err := try(verbs.QPAttr{QPState: verbs.QpsRts}, verbs.QPStateConst); !isErrno(err, syscall.EINVAL) {
		t.Errorf("RTS without sq_psn: %v", err)
	}
	if err := try(verbs.QPAttr{QPState: verbs.QpsRts, Timeout: 14}, verbs.QPStateConst|verbs.QPSQPSN|verbs.QPTimeout); !isErrno(err, syscall.EINVAL) {
		t.Errorf("RTS with a timeout: %v", err)
	}
	if err := try(verbs.QPAttr{QPState: verbs.QpsRts}, verbs.QPStateConst|verbs.QPSQPSN); err != nil {
		t.Fatal(err)
	}
	if err := try(verbs.QPAttr{QPState: verbs.QpsRts, Qkey: 0x77}, verbs.QPStateConst|verbs.QPQkey); err != nil {
		t.Fatalf("RTS -> RTS with a new Q_Key: %v", err)
	}
	qa, qi := alloc[verbs.QPAttr](f), alloc[verbs.QPInitAttr](f)
	if err := verbs.QueryQP(qp, qa, 0, qi); err != nil || qa.Qkey != 0x77 || qi.QPType != verbs.QptUD {
		t.Errorf("ibv_query_qp: %v, qkey %#x, type %v; want 0x77, UD", err, qa.Qkey, qi.QPType)
	}

	ah := alloc[verbs.AHAttr](f)
	for name, attr := range map[string]verbs.AHAttr{
		"port 2":         {PortNum: 2, IsGlobal: 1},
		"no GRH on RoCE": {PortNum: 1, Dlid: 3},
		"sgid index 1":   {PortNum: 1, IsGlobal: 1, GRH: verbs.GlobalRoute{SgidIndex: 1}},
	} {
		*ah = attr
		if _, err := verbs.CreateAH(f.pd, ah); !isCallErrno(err, "ibv_create_ah", syscall.EINVAL) {
			t.Errorf("ibv_create_ah with %s: %v, want EINVAL", name, err)
		}
	}
}

// On an InfiniBand port (the provider's default) an AH names its device
// by LID, datagrams without a GRH arrive without one (IBV_WC_GRH clear,
// the GRH area untouched) and receive completions carry the sender's LID.
func TestUDInfiniBandPort(t *testing.T) {
	f := newFixture(t, InfiniBandPort())
	a, acq := f.udQP(udQkey)
	b, bcq := f.udQP(udQkey)
	port, err := f.d.QueryPort(1)
	if err != nil || port.LinkLayer != verbs.LinkLayerInfiniband || port.LID == 0 {
		t.Fatalf("port: %v, link layer %d, LID %#x; want InfiniBand with a LID", err, port.LinkLayer, port.LID)
	}
	ah := alloc[verbs.AHAttr](f)
	*ah = verbs.AHAttr{PortNum: 1}
	if _, err := verbs.CreateAH(f.pd, ah); !isCallErrno(err, "ibv_create_ah", syscall.EINVAL) {
		t.Errorf("ibv_create_ah with dlid 0 on InfiniBand: %v, want EINVAL", err)
	}
	for i := range 40 {
		f.buf[i] = 0xee
	}
	f.udRecv(b, 1, 0, 40+16)
	if err := f.udSend(a, f.ah([16]byte{}, port.LID), b.QPNum, udQkey, 2, 512, 16, verbs.WRSend, 0, 0); err != nil {
		t.Fatal(err)
	}
	f.poll(acq)
	r := f.poll(bcq)
	if len(r) != 1 || r[0].Status != verbs.WCSuccess || r[0].ExpWCFlags&uint64(verbs.ExpWCGRH) != 0 || r[0].Slid != port.LID || byteLen(&r[0]) != 56 {
		t.Fatalf("datagram by LID: %+v; want success, no GRH flag, slid %#x, 56 bytes", r, port.LID)
	}
	if !bytes.Equal(f.buf[:40], bytes.Repeat([]byte{0xee}, 40)) {
		t.Errorf("the GRH area was written for a datagram without a GRH: % x", f.buf[:40])
	}
}
