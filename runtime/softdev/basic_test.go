//go:build linux && cgo

package softdev

import (
	"bytes"
	"errors"
	"reflect"
	"syscall"
	"testing"
	"unsafe"

	"github.com/verbsexp/verbsexp/abiutil"
	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/device"
)

// TestDispatch: the generated wrappers find this provider through the
// header's own lookup of the exp record in front of the context.
func TestDispatch(t *testing.T) {
	f := newFixture(t)
	ctx := f.d.Context()
	vc, err := verbs.GetCtx(ctx)
	if err != nil || vc == nil || unsafe.Pointer(&vc.Context) != unsafe.Pointer(ctx) {
		t.Fatalf("verbs_get_ctx = %p, %v", vc, err)
	}
	xc, err := verbs.GetExpCtx(ctx)
	if err != nil || xc == nil || uintptr(unsafe.Pointer(xc))+unsafe.Sizeof(*xc) != uintptr(unsafe.Pointer(vc)) {
		t.Fatalf("verbs_get_exp_ctx = %p, %v; want the record right before %p", xc, err, vc)
	}
	attr := alloc[verbs.ExpDeviceAttr](f)
	attr.CompMask = uint32(verbs.ExpDeviceAttrCalcCap | verbs.ExpDeviceAttrExpCapFlags)
	if err := verbs.ExpQueryDevice(ctx, attr); err != nil {
		t.Fatal(err)
	}
	if attr.ExpDeviceCapFlags&uint64(verbs.ExpDeviceCrossChannel) == 0 || attr.CalcCap.FpOps == 0 {
		t.Fatalf("query: cap flags %#x, calc %+v", attr.ExpDeviceCapFlags, attr.CalcCap)
	}
	cq := f.cq(4)
	if cq.Context != ctx || cq.CQE != 7 {
		t.Fatalf("cq context %p cqe %d, want 7: 8 slots (the inline create sets the context)", cq.Context, cq.CQE)
	}
}

// TestSendRecv: a legacy ibv_send_wr and an exp WR with two SGEs into a
// receive with two SGEs of other sizes; completions through both polls.
func TestSendRecv(t *testing.T) {
	f := newFixture(t)
	p := f.pair(nil, nil)
	copy(f.buf[0:], "hello, world")
	copy(f.buf[100:], "0123456789")

	f.postRecv(p.b, f.recv(1, f.sges(f.mr.Lkey, [2]int{1000, 64}), 1),
		f.recv(2, f.sges(f.mr.Lkey, [2]int{2000, 3}, [2]int{2100, 20}), 2))

	// Legacy post path: ibv_post_send -> ops.post_send.
	w := alloc[verbs.SendWR](f)
	w.WRID = 10
	w.Opcode = verbs.WRSend
	w.SendFlags = int32(verbs.SendSignaled)
	w.SGList = f.sges(f.mr.Lkey, [2]int{0, 12})
	w.NumSGE = 1
	bad := alloc[*verbs.SendWR](f)
	if err := verbs.PostSend(p.a, w, bad); err != nil {
		t.Fatal(err)
	}
	// Exp path, gathering two pieces, with immediate data.
	x := f.send(11, verbs.ExpWRSendWithImm, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{0, 5}, [2]int{100, 10}), 2)
	x.Ex.SetImmData(0xabcd)
	f.postSend(p.a, x)

	// ibv_poll_cq on the receiver (runs the device first).
	wc := allocN[verbs.WC](f, 4)
	n, err := verbs.PollCQ(p.cqb, wc[:4])
	if err != nil || n != 2 {
		t.Fatalf("PollCQ = %d, %v", n, err)
	}
	if wc[0].WRID != 1 || wc[0].Status != verbs.WCSuccess || wc[0].Opcode != verbs.WCRecv || wc[0].ByteLen != 12 ||
		wc[0].QPNum != p.b.QPNum || wc[0].SrcQP != p.a.QPNum || wc[0].WCFlags != 0 {
		t.Errorf("first receive: %+v", wc[0])
	}
	if wc[1].WRID != 2 || wc[1].ByteLen != 15 || wc[1].ImmData != 0xabcd || wc[1].WCFlags != int32(verbs.WCWithImm) {
		t.Errorf("second receive: %+v", wc[1])
	}
	if got := string(f.buf[1000:1012]); got != "hello, world" {
		t.Errorf("first payload %q", got)
	}
	if got := string(f.buf[2000:2003]) + string(f.buf[2100:2112]); got != "hello0123456789" {
		t.Errorf("scattered payload %q", got)
	}
	got := sum(f.poll(p.cqa))
	want := []wcSum{{10, verbs.WCSuccess, verbs.ExpWCSend, 12, p.a.QPNum}, {11, verbs.WCSuccess, verbs.ExpWCSend, 15, p.a.QPNum}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("send completions %+v, want %+v", got, want)
	}
}

// TestSendErrors: a receive too short, a bad lkey on either side; the
// failing QP goes to the error state and flushes what follows.
func TestSendErrors(t *testing.T) {
	t.Run("length", func(t *testing.T) {
		f := newFixture(t)
		p := f.pair(nil, nil)
		f.postRecv(p.b, f.recv(1, f.sges(f.mr.Lkey, [2]int{1000, 4}), 1), f.recv(2, f.sges(f.mr.Lkey, [2]int{1000, 4}), 1))
		f.postSend(p.a, f.send(10, verbs.ExpWRSend, 0, f.sges(f.mr.Lkey, [2]int{0, 8}), 1),
			f.send(11, verbs.ExpWRSend, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{0, 1}), 1))
		rb := sum(f.poll(p.cqb))
		ra := sum(f.poll(p.cqa))
		wantB := []wcSum{{1, verbs.WCLocLenErr, verbs.ExpWCRecv, 0, p.b.QPNum}, {2, verbs.WCWRFlushErr, verbs.ExpWCRecv, 0, p.b.QPNum}}
		wantA := []wcSum{{10, verbs.WCRemInvReqErr, verbs.ExpWCSend, 0, p.a.QPNum}, {11, verbs.WCWRFlushErr, verbs.ExpWCSend, 0, p.a.QPNum}}
		if !reflect.DeepEqual(rb, wantB) || !reflect.DeepEqual(ra, wantA) {
			t.Fatalf("receiver %+v\nsender %+v\nwant %+v\n%+v", rb, ra, wantB, wantA)
		}
		if st, _, _, _ := f.d.QPStats(p.a); st != verbs.QpsErr {
			t.Errorf("sender state %v", st)
		}
	})
	t.Run("bad-lkey-sender", func(t *testing.T) {
		f := newFixture(t)
		p := f.pair(nil, nil)
		f.postRecv(p.b, f.recv(1, f.sges(f.mr.Lkey, [2]int{1000, 64}), 1))
		f.postSend(p.a, f.send(10, verbs.ExpWRSend, 0, f.sges(f.mr.Lkey+1, [2]int{0, 8}), 1))
		if ra := sum(f.poll(p.cqa)); len(ra) != 1 || ra[0].Status != verbs.WCLocProtErr {
			t.Fatalf("sender %+v, want one IBV_WC_LOC_PROT_ERR (errors complete even unsignaled)", ra)
		}
		if rb := f.poll(p.cqb); len(rb) != 0 {
			t.Fatalf("receiver got %+v", sum(rb))
		}
	})
	t.Run("rkey-as-lkey", func(t *testing.T) {
		f := newFixture(t)
		p := f.pair(nil, nil)
		f.postRecv(p.b, f.recv(1, f.sges(f.mr.Lkey, [2]int{1000, 64}), 1))
		f.postSend(p.a, f.send(10, verbs.ExpWRSend, 0, f.sges(f.mr.Rkey, [2]int{0, 8}), 1))
		if ra := sum(f.poll(p.cqa)); len(ra) != 1 || ra[0].Status != verbs.WCLocProtErr {
			t.Fatalf("sender %+v", ra)
		}
	})
	t.Run("out-of-bounds-sge", func(t *testing.T) {
		f := newFixture(t)
		p := f.pair(nil, nil)
		f.postRecv(p.b, f.recv(1, f.sges(f.mr.Lkey, [2]int{1000, 64}), 1))
		f.postSend(p.a, f.send(10, verbs.ExpWRSend, 0, f.sges(f.mr.Lkey, [2]int{bufSize - 4, 8}), 1))
		if ra := sum(f.poll(p.cqa)); len(ra) != 1 || ra[0].Status != verbs.WCLocProtErr {
			t.Fatalf("sender %+v", ra)
		}
	})
	t.Run("bad-lkey-receiver", func(t *testing.T) {
		f := newFixture(t)
		p := f.pair(nil, nil)
		f.postRecv(p.b, f.recv(1, f.sges(0xdead00, [2]int{1000, 64}), 1))
		f.postSend(p.a, f.send(10, verbs.ExpWRSend, 0, f.sges(f.mr.Lkey, [2]int{0, 8}), 1))
		rb, ra := sum(f.poll(p.cqb)), sum(f.poll(p.cqa))
		if len(rb) != 1 || rb[0].Status != verbs.WCLocProtErr || len(ra) != 1 || ra[0].Status != verbs.WCRemOpErr {
			t.Fatalf("receiver %+v sender %+v", rb, ra)
		}
	})
	t.Run("receive-without-local-write", func(t *testing.T) {
		f := newFixture(t)
		ro := allocN[byte](f, 64)
		mr := f.reg(ro, 0)
		p := f.pair(nil, nil)
		r := allocN[verbs.SGE](f, 1)
		r[0] = verbs.SGE{Addr: uint64(uintptr(unsafe.Pointer(&ro[0]))), Length: 64, Lkey: mr.Lkey}
		f.postRecv(p.b, f.recv(1, &r[0], 1))
		f.postSend(p.a, f.send(10, verbs.ExpWRSend, 0, f.sges(f.mr.Lkey, [2]int{0, 8}), 1))
		if rb := sum(f.poll(p.cqb)); len(rb) != 1 || rb[0].Status != verbs.WCLocProtErr {
			t.Fatalf("receiver %+v", rb)
		}
	})
}

// TestRDMA: write and read with key, bounds and access checks.
func TestRDMA(t *testing.T) {
	f := newFixture(t)
	copy(f.buf[0:], "remote direct memory access")
	rdma := func(p pair, id uint64, op verbs.ExpWROpcode, local [2]int, lkey uint32, remote int, rkey uint32) *verbs.ExpSendWR {
		w := f.send(id, op, verbs.ExpSendSignaled, f.sges(lkey, local), 1)
		w.WR.RDMA().RemoteAddr = f.addr(remote)
		w.WR.RDMA().Rkey = rkey
		f.postSend(p.a, w)
		return w
	}
	p := f.pair(nil, nil)
	rdma(p, 1, verbs.ExpWRRDMAWrite, [2]int{0, 27}, f.mr.Lkey, 4096, f.mr.Rkey)
	rdma(p, 2, verbs.ExpWRRDMARead, [2]int{8192, 27}, f.mr.Lkey, 4096, f.mr.Rkey)
	got := sum(f.poll(p.cqa))
	want := []wcSum{{1, verbs.WCSuccess, verbs.ExpWCRDMAWrite, 27, p.a.QPNum}, {2, verbs.WCSuccess, verbs.ExpWCRDMARead, 27, p.a.QPNum}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("completions %+v, want %+v", got, want)
	}
	if !bytes.Equal(f.buf[4096:4096+27], f.buf[:27]) || !bytes.Equal(f.buf[8192:8192+27], f.buf[:27]) {
		t.Fatalf("data: %q %q", f.buf[4096:4096+27], f.buf[8192:8192+27])
	}
	if rb := f.poll(p.cqb); len(rb) != 0 {
		t.Fatalf("an RDMA write without immediate completed at the responder: %+v", sum(rb))
	}

	ro := allocN[byte](f, 256)
	roMR := f.reg(ro, verbs.AccessRemoteRead) // no remote write, no local write
	roAddr := uint64(uintptr(unsafe.Pointer(&ro[0])))
	cases := []struct {
		name   string
		op     verbs.ExpWROpcode
		lkey   func() uint32
		remote func(w *verbs.ExpSendWR)
		want   verbs.WCStatus
	}{
		{"write-bad-rkey", verbs.ExpWRRDMAWrite, func() uint32 { return f.mr.Lkey },
			func(w *verbs.ExpSendWR) { w.WR.RDMA().Rkey = 0x777777 }, verbs.WCRemAccessErr},
		{"write-lkey-as-rkey", verbs.ExpWRRDMAWrite, func() uint32 { return f.mr.Lkey },
			func(w *verbs.ExpSendWR) { w.WR.RDMA().Rkey = f.mr.Lkey }, verbs.WCRemAccessErr},
		{"write-out-of-bounds", verbs.ExpWRRDMAWrite, func() uint32 { return f.mr.Lkey },
			func(w *verbs.ExpSendWR) { w.WR.RDMA().RemoteAddr = f.addr(bufSize - 8) }, verbs.WCRemAccessErr},
		{"write-read-only-mr", verbs.ExpWRRDMAWrite, func() uint32 { return f.mr.Lkey },
			func(w *verbs.ExpSendWR) { w.WR.RDMA().RemoteAddr, w.WR.RDMA().Rkey = roAddr, roMR.Rkey }, verbs.WCRemAccessErr},
		{"read-bad-lkey", verbs.ExpWRRDMARead, func() uint32 { return 0x12345 },
			func(w *verbs.ExpSendWR) {}, verbs.WCLocProtErr},
		{"read-into-read-only", verbs.ExpWRRDMARead, func() uint32 { return roMR.Lkey },
			func(w *verbs.ExpSendWR) {}, verbs.WCLocProtErr},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := f.pair(nil, nil)
			local := [2]int{0, 16}
			w := f.send(1, c.op, 0, nil, 1)
			if c.name == "read-into-read-only" {
				s := allocN[verbs.SGE](f, 1)
				s[0] = verbs.SGE{Addr: roAddr, Length: 16, Lkey: roMR.Lkey}
				w.SGList = &s[0]
			} else {
				w.SGList = f.sges(c.lkey(), local)
			}
			w.WR.RDMA().RemoteAddr = f.addr(4096)
			w.WR.RDMA().Rkey = f.mr.Rkey
			c.remote(w)
			f.postSend(p.a, w)
			if got := sum(f.poll(p.cqa)); len(got) != 1 || got[0].Status != c.want {
				t.Fatalf("completions %+v, want one %v", got, c.want)
			}
		})
	}
}

// TestSignaled: unsignaled WQEs complete silently; sq_sig_all signals all.
func TestSignaled(t *testing.T) {
	f := newFixture(t)
	for _, sigAll := range []bool{false, true} {
		var opts []device.QPOption
		if sigAll {
			opts = append(opts, device.SigAll())
		}
		p := f.pair(opts, nil)
		var ws []*verbs.ExpSendWR
		for i := range 6 {
			flags := verbs.ExpSendFlags(0)
			if i%3 == 0 {
				flags = verbs.ExpSendSignaled
			}
			w := f.send(uint64(i), verbs.ExpWRRDMAWrite, flags, f.sges(f.mr.Lkey, [2]int{0, 8}), 1)
			w.WR.RDMA().RemoteAddr, w.WR.RDMA().Rkey = f.addr(64), f.mr.Rkey
			ws = append(ws, w)
		}
		f.postSend(p.a, ws...)
		var ids []uint64
		for _, w := range f.poll(p.cqa) {
			ids = append(ids, w.WRID)
		}
		want := []uint64{0, 3}
		if sigAll {
			want = []uint64{0, 1, 2, 3, 4, 5}
		}
		if !reflect.DeepEqual(ids, want) {
			t.Errorf("sigAll=%v: completions %v, want %v", sigAll, ids, want)
		}
		_, s, _, _ := f.d.QPStats(p.a)
		if s.Posted != 6 || s.Done != 6 {
			t.Errorf("sigAll=%v: send queue %+v, want all 6 retired", sigAll, s)
		}
	}
}

// TestWRReuse: the post path copies the WR, its SGE list and an inline
// payload; rewriting them right after posting changes nothing.
func TestWRReuse(t *testing.T) {
	f := newFixture(t)
	p := f.pair(nil, nil)
	copy(f.buf[0:], "original")
	f.postRecv(p.b, f.recv(1, f.sges(f.mr.Lkey, [2]int{1000, 64}), 1), f.recv(2, f.sges(f.mr.Lkey, [2]int{2000, 64}), 1))
	sg := f.sges(f.mr.Lkey, [2]int{0, 8})
	w := f.send(7, verbs.ExpWRSend, verbs.ExpSendSignaled, sg, 1)
	f.postSend(p.a, w)
	// Reuse everything at once, as a caller with one WR would.
	*sg = verbs.SGE{Addr: f.addr(500), Length: 1, Lkey: 0}
	w.WRID, w.ExpOpcode, w.NumSGE = 99, verbs.ExpWRRDMARead, 0

	inl := allocN[byte](f, 16)
	copy(inl, "inline!!")
	isg := allocN[verbs.SGE](f, 1)
	isg[0] = verbs.SGE{Addr: uint64(uintptr(unsafe.Pointer(&inl[0]))), Length: 8, Lkey: 0xbad} // lkey not checked
	f.postSend(p.a, f.send(8, verbs.ExpWRSend, verbs.ExpSendSignaled|verbs.ExpSendInline, &isg[0], 1))
	copy(inl, "clobber!")

	if got := sum(f.poll(p.cqa)); len(got) != 2 || got[0].ID != 7 || got[0].Status != verbs.WCSuccess || got[1].ID != 8 || got[1].Status != verbs.WCSuccess {
		t.Fatalf("completions %+v", got)
	}
	if string(f.buf[1000:1008]) != "original" || string(f.buf[2000:2008]) != "inline!!" {
		t.Fatalf("payloads %q %q", f.buf[1000:1008], f.buf[2000:2008])
	}
}

// TestPostValidation: errors the post path reports at once, with bad_wr.
func TestPostValidation(t *testing.T) {
	f := newFixture(t)
	p := f.pair([]device.QPOption{device.QPCaps(device.Caps{SendWR: 8, RecvWR: 8, SendSGE: 2, RecvSGE: 2, Inline: 4})}, nil)
	cq := f.cq(4)
	plain := f.qp(cq, cq) // RESET, not cross-channel
	sg := f.sges(f.mr.Lkey, [2]int{0, 8}, [2]int{8, 8}, [2]int{16, 8})
	calc := func(op verbs.ExpCalcOp, n int, size verbs.ExpCalcDataSize) *verbs.ExpSendWR {
		w := f.send(1, verbs.ExpWRSend, verbs.ExpSendWithCalc, sg, n)
		w.Op.Calc().CalcOp = op
		w.Op.Calc().DataSize = size
		return w
	}
	cases := []struct {
		name string
		qp   *verbs.QP
		wr   *verbs.ExpSendWR
		want syscall.Errno
	}{
		{"too-many-sges", p.a, f.send(1, verbs.ExpWRSend, 0, sg, 3), syscall.EINVAL},
		{"local invalidate", p.a, f.send(1, verbs.ExpWRLocalInv, 0, sg, 1), syscall.EINVAL},
		{"unknown-flag", p.a, f.send(1, verbs.ExpWRSend, verbs.ExpSendIPCSUM, sg, 1), syscall.EINVAL},
		{"wait-on-plain-qp", p.a, f.wait(1, p.cqa, 1, 0), syscall.EINVAL},
		{"inline-too-long", p.a, f.send(1, verbs.ExpWRSend, verbs.ExpSendInline, sg, 1), syscall.EINVAL},
		{"calc-maxloc-8-byte-operands", p.a, calc(verbs.ExpCalcOpMaxloc, 2, verbs.ExpCalcDataSize64Bit), syscall.EINVAL},
		{"calc-bad-size", p.a, calc(verbs.ExpCalcOpAdd, 2, verbs.ExpCalcDataSizeNumber), syscall.EINVAL},
		{"calc-bad-op", p.a, calc(verbs.ExpCalcOpNumber, 2, verbs.ExpCalcDataSize64Bit), syscall.EINVAL},
		{"send-in-reset", plain, f.send(1, verbs.ExpWRSend, 0, sg, 1), syscall.EINVAL},
	}
	for _, c := range cases {
		bad := alloc[*verbs.ExpSendWR](f)
		err := verbs.ExpPostSend(c.qp, c.wr, bad)
		var ce *abiutil.CallError
		if !errors.As(err, &ce) || ce.Func != "ibv_exp_post_send" || !errors.Is(err, c.want) || *bad != c.wr {
			t.Errorf("%s: %v, bad_wr %p; want %v and bad_wr %p", c.name, err, *bad, c.want, c.wr)
		}
	}
	if _, s, _, _ := f.d.QPStats(p.a); s.Posted != 0 {
		t.Errorf("rejected WRs were posted: %+v", s)
	}
	r := f.recv(1, sg, 3)
	bad := alloc[*verbs.RecvWR](f)
	if err := verbs.PostRecv(p.a, r, bad); !isErrno(err, syscall.EINVAL) || *bad != r {
		t.Errorf("receive with 3 SGEs of 2: %v", err)
	}
}

// TestRingFull: the ring holds max_send_wr WQEs; the next WR of the list
// fails with ENOMEM and bad_wr names it; the ones before it stay posted.
func TestRingFull(t *testing.T) {
	f := newFixture(t)
	p := f.pair([]device.QPOption{device.QPCaps(device.Caps{SendWR: 4, RecvWR: 2, SendSGE: 1, RecvSGE: 1})}, nil)
	var ws []*verbs.ExpSendWR
	for i := range 6 {
		w := f.send(uint64(i), verbs.ExpWRRDMAWrite, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{0, 8}), 1)
		w.WR.RDMA().RemoteAddr, w.WR.RDMA().Rkey = f.addr(64), f.mr.Rkey
		ws = append(ws, w)
	}
	bad := alloc[*verbs.ExpSendWR](f)
	err := verbs.ExpPostSend(p.a, link(ws...), bad)
	if !isErrno(err, syscall.ENOMEM) || *bad != ws[4] {
		t.Fatalf("post of 6 into 4: %v, bad_wr %p; want ENOMEM at %p", err, *bad, ws[4])
	}
	if _, s, _, _ := f.d.QPStats(p.a); s.Posted != 4 {
		t.Fatalf("posted %d, want 4", s.Posted)
	}
	// Completing frees the slots.
	if got := f.poll(p.cqa); len(got) != 4 {
		t.Fatalf("%d completions", len(got))
	}
	ws[5].Next = nil
	if err := verbs.ExpPostSend(p.a, ws[4], bad); err != nil {
		t.Fatal(err)
	}
	r := []*verbs.RecvWR{f.recv(1, f.sges(f.mr.Lkey, [2]int{0, 8}), 1), f.recv(2, f.sges(f.mr.Lkey, [2]int{0, 8}), 1), f.recv(3, f.sges(f.mr.Lkey, [2]int{0, 8}), 1)}
	r[0].Next, r[1].Next = r[1], r[2]
	rbad := alloc[*verbs.RecvWR](f)
	if err := verbs.PostRecv(p.a, r[0], rbad); !isErrno(err, syscall.ENOMEM) || *rbad != r[2] {
		t.Fatalf("receive ring: %v, bad %p want %p", err, *rbad, r[2])
	}
}

// TestOverrun: a 2-slot CQ and three completions. One that does not
// ignore overruns keeps the two it holds pollable, refuses the third and
// is in error; a cross-channel or ignore-overrun CQ writes the third over
// the first, so its polls find nothing (the ring's ownership says the
// slots belong to another pass), and a wait still counts all three.
func TestOverrun(t *testing.T) {
	for _, mode := range []string{"plain", "cross-channel", "ignore-overrun"} {
		t.Run(mode, func(t *testing.T) {
			f := newFixture(t)
			var opts []device.CQOption
			switch mode {
			case "cross-channel":
				opts = append(opts, device.CrossChannelCQ())
			case "ignore-overrun":
				opts = append(opts, device.IgnoreOverrun())
			}
			cq := f.cq(1, opts...)
			rcq := f.cq(4)
			a, b := f.qp(cq, rcq), f.qp(rcq, rcq)
			if err := device.ConnectPair(a, b); err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				w := f.send(uint64(i), verbs.ExpWRRDMAWrite, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{0, 8}), 1)
				w.WR.RDMA().RemoteAddr, w.WR.RDMA().Rkey = f.addr(64), f.mr.Rkey
				f.postSend(a, w)
			}
			f.progress()
			st, _ := f.d.CQStats(cq)
			wc := allocN[verbs.ExpWC](f, 4)
			n, err := verbs.ExpPollCQ(cq, wc[:4])
			if mode == "plain" {
				if st != (CQStats{Produced: 2, Queued: 2, Dropped: 1, Overrun: true}) {
					t.Fatalf("stats %+v", st)
				}
				if err != nil || n != 2 || wc[0].WRID != 0 || wc[1].WRID != 1 {
					t.Fatalf("poll after the overrun: %d, %v; want the two CQEs held", n, err)
				}
				if s, _, _, _ := f.d.QPStats(a); s != verbs.QpsErr {
					t.Fatalf("the QP whose completion overran is %v", s)
				}
				return
			}
			if st != (CQStats{Produced: 3, Queued: 0, Dropped: 1}) {
				t.Fatalf("stats %+v", st)
			}
			if err != nil || n != 0 {
				t.Fatalf("poll: %d, %v", n, err)
			}
			m, mcq := f.mgr()
			f.postSend(m, f.wait(9, cq, 3, verbs.ExpSendSignaled|verbs.ExpSendWaitEnLast))
			if got := sum(f.poll(mcq)); len(got) != 1 || got[0].ID != 9 {
				t.Fatalf("wait for 3 completions of a CQ that wrapped: %+v", got)
			}
		})
	}
}

// TestQPLifecycle: destroy refused while in use; Close reports leaks.
func TestQPLifecycle(t *testing.T) {
	d, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	pd, _ := d.AllocPD()
	buf := callocSlice[byte](64)
	defer cfree(unsafe.Pointer(&buf[0]))
	mr, err := d.RegMR(pd, buf[:64], verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.RegMR(pd, buf[:64], verbs.AccessRemoteWrite); !isErrno(err, syscall.EINVAL) {
		t.Errorf("remote write without local write: %v", err)
	}
	cq, _ := d.CreateCQ(8)
	qp, err := d.CreateQP(pd, cq, cq)
	if err != nil {
		t.Fatal(err)
	}
	if qp.State != verbs.QpsReset || qp.QPNum == 0 || qp.Context != d.Context() || qp.SendCQ != cq {
		t.Errorf("new QP %+v", *qp)
	}
	if err := d.DestroyCQ(cq); !isErrno(err, syscall.EBUSY) {
		t.Errorf("DestroyCQ in use: %v", err)
	}
	if err := d.DeallocPD(pd); !isErrno(err, syscall.EBUSY) {
		t.Errorf("DeallocPD in use: %v", err)
	}
	_ = mr
	err = d.Close()
	var le *LeakError
	if !errors.As(err, &le) || *le != (LeakError{PDs: 1, MRs: 1, CQs: 1, QPs: 1}) {
		t.Fatalf("Close = %v, want a LeakError of one of each", err)
	}
	if _, err := d.AllocPD(); !errors.Is(err, ErrClosed) {
		t.Errorf("AllocPD after Close: %v", err)
	}
	if err := d.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
}
