//go:build linux && cgo

package device_test

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/cmem"
	"github.com/verbsexp/verbsexp/runtime/device"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/softdev"
)

// queryQP is ibv_query_qp's attributes of qp.
func queryQP(t *testing.T, qp *verbs.QP) verbs.QPAttr {
	t.Helper()
	attr, err := cmem.New[verbs.QPAttr]()
	if err != nil {
		t.Fatal(err)
	}
	defer cmem.Free(attr)
	init, err := cmem.New[verbs.QPInitAttr]()
	if err != nil {
		t.Fatal(err)
	}
	defer cmem.Free(init)
	if err := verbs.QueryQP(qp, attr, 0, init); err != nil {
		t.Fatal(err)
	}
	return *attr
}

// TestConnectAttributes: Connect sets what an RC connection between
// hosts has, to the remote endpoint given, from the local one's PSN, at
// the smaller MTU; UC leaves out what UC does not take; UD is refused.
func TestConnectAttributes(t *testing.T) {
	d := open(t)
	pd := must[*verbs.PD](t)(d.AllocPD())
	defer d.DeallocPD(pd)
	cq := must[*verbs.CQ](t)(d.CreateCQ(8))
	defer d.DestroyCQ(cq)
	for _, typ := range []verbs.QPType{verbs.QptRC, verbs.QptUC} {
		a := must[*verbs.QP](t)(d.CreateQP(pd, cq, cq, device.Transport(typ)))
		b := must[*verbs.QP](t)(d.CreateQP(pd, cq, cq, device.Transport(typ)))
		ea, eb := must[device.Endpoint](t)(d.Endpoint(a)), must[device.Endpoint](t)(d.Endpoint(b))
		eb.MTU = verbs.MTU512
		if err := device.Connect(a, ea, eb, device.ServiceLevel(3)); err != nil {
			t.Fatal(err)
		}
		got := queryQP(t, a)
		rc := typ == verbs.QptRC
		want := verbs.QPAttr{QPState: verbs.QpsRts, CurQPState: verbs.QpsRts, DestQPNum: b.QPNum, SQPSN: ea.PSN, RQPSN: eb.PSN,
			PathMTU: verbs.MTU512, PortNum: 1, QPAccessFlags: int32(verbs.AccessLocalWrite | verbs.AccessRemoteWrite)}
		if rc {
			want.QPAccessFlags |= int32(verbs.AccessRemoteRead | verbs.AccessRemoteAtomic)
			want.Timeout, want.RetryCnt, want.RnrRetry, want.MinRnrTimer, want.MaxRdAtomic, want.MaxDestRdAtomic = 14, 7, 7, 12, 1, 1
		}
		for _, f := range []struct {
			name      string
			got, want any
		}{
			{"state", got.QPState, want.QPState}, {"dest_qp_num", got.DestQPNum, want.DestQPNum},
			{"sq_psn", got.SQPSN, want.SQPSN}, {"rq_psn", got.RQPSN, want.RQPSN}, {"path_mtu", got.PathMTU, want.PathMTU},
			{"access", got.QPAccessFlags, want.QPAccessFlags}, {"timeout", got.Timeout, want.Timeout},
			{"retry_cnt", got.RetryCnt, want.RetryCnt}, {"rnr_retry", got.RnrRetry, want.RnrRetry},
			{"min_rnr_timer", got.MinRnrTimer, want.MinRnrTimer}, {"max_rd_atomic", got.MaxRdAtomic, want.MaxRdAtomic},
			{"max_dest_rd_atomic", got.MaxDestRdAtomic, want.MaxDestRdAtomic},
			{"is_global (RoCE)", got.AHAttr.IsGlobal, uint8(1)}, {"dgid", *got.AHAttr.GRH.Dgid.Raw(), eb.GID},
			{"hop_limit", got.AHAttr.GRH.HopLimit, uint8(64)},
		} {
			if f.got != f.want {
				t.Errorf("%v: %s is %v, want %v", typ, f.name, f.got, f.want)
			}
		}
		for _, qp := range []*verbs.QP{a, b} {
			if err := d.DestroyQP(qp); err != nil {
				t.Fatal(err)
			}
		}
	}
	ud := must[*verbs.QP](t)(d.CreateQP(pd, cq, cq, device.Transport(verbs.QptUD)))
	defer d.DestroyQP(ud)
	if err := device.Connect(ud, must[device.Endpoint](t)(d.Endpoint(ud)), sample); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("Connect of a UD QP: %v, want EINVAL", err)
	}
	if s := queryQP(t, ud).QPState; s != verbs.QpsReset {
		t.Errorf("the refused UD QP is in %v, want RESET", s)
	}
}

// TestRandomPSNs: ConnectPair starts every connection at random PSNs
// (issue 35: they all started at 0), each way its own.
func TestRandomPSNs(t *testing.T) {
	d := open(t)
	pd := must[*verbs.PD](t)(d.AllocPD())
	defer d.DeallocPD(pd)
	cq := must[*verbs.CQ](t)(d.CreateCQ(8))
	defer d.DestroyCQ(cq)
	seen := map[uint32]bool{}
	for range 8 {
		a := must[*verbs.QP](t)(d.CreateQP(pd, cq, cq))
		b := must[*verbs.QP](t)(d.CreateQP(pd, cq, cq))
		if err := device.ConnectPair(a, b); err != nil {
			t.Fatal(err)
		}
		qa, qb := queryQP(t, a), queryQP(t, b)
		if qa.SQPSN != qb.RQPSN || qb.SQPSN != qa.RQPSN {
			t.Fatalf("a sends from %#x, b expects %#x; b sends from %#x, a expects %#x", qa.SQPSN, qb.RQPSN, qb.SQPSN, qa.RQPSN)
		}
		for _, psn := range []uint32{qa.SQPSN, qb.SQPSN} {
			if psn > 0xffffff {
				t.Fatalf("PSN %#x is not 24 bits", psn)
			}
			seen[psn] = true
		}
		if err := errors.Join(d.DestroyQP(a), d.DestroyQP(b)); err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) < 12 { // 16 draws of 24 bits: a repeat or two at most
		t.Fatalf("16 first PSNs took %d values: %v", len(seen), seen)
	}
}

// TestConnectCarries: connections work, not only reach RTS: a SEND
// between QPs connected by ConnectPair on an InfiniBand port (LID
// addressing, no GRH) and between two devices over the wire.
func TestConnectCarries(t *testing.T) {
	ib, err := softdev.Open(softdev.InfiniBandPort(), softdev.Autonomous())
	if err != nil {
		t.Fatal(err)
	}
	defer ib.Close()
	other := open(t)
	for _, c := range []struct {
		name string
		a, b *device.Device
	}{{"InfiniBand loopback", ib.Device, ib.Device}, {"two devices", open(t), other}} {
		t.Run(c.name, func(t *testing.T) { sendOver(t, c.a, c.b) })
	}
}

// sendOver connects a QP of a to one of b with ConnectPair and sends 32
// bytes from one to the other.
func sendOver(t *testing.T, a, b *device.Device) {
	pa, pb := must[*verbs.PD](t)(a.AllocPD()), must[*verbs.PD](t)(b.AllocPD())
	ca, cb := must[*verbs.CQ](t)(a.CreateCQ(4)), must[*verbs.CQ](t)(b.CreateCQ(4, device.Waitable()))
	qa, qb := must[*verbs.QP](t)(a.CreateQP(pa, ca, ca)), must[*verbs.QP](t)(b.CreateQP(pb, cb, cb))
	defer func() {
		if err := errors.Join(a.DestroyQP(qa), b.DestroyQP(qb), a.DestroyCQ(ca), b.DestroyCQ(cb), a.DeallocPD(pa), b.DeallocPD(pb)); err != nil {
			t.Error(err)
		}
	}()
	if err := device.ConnectPair(qa, qb); err != nil {
		t.Fatal(err)
	}
	if attr := queryQP(t, qa); a == b && (attr.AHAttr.IsGlobal != 0 || attr.AHAttr.Dlid == 0) {
		t.Errorf("on InfiniBand: is_global %d, dlid %d; want LID addressing", attr.AHAttr.IsGlobal, attr.AHAttr.Dlid)
	}
	src, dst := must[*lease.Buffer](t)(lease.Alloc(64)), must[*lease.Buffer](t)(lease.Alloc(64))
	ma, mb := must[*verbs.MR](t)(a.RegMR(pa, src.Bytes(), verbs.AccessLocalWrite)), must[*verbs.MR](t)(b.RegMR(pb, dst.Bytes(), verbs.AccessLocalWrite))
	defer func() {
		if err := errors.Join(a.DeregMR(ma), b.DeregMR(mb), src.Free(), dst.Free()); err != nil {
			t.Error(err)
		}
	}()
	copy(src.Bytes(), "connected")
	recv, send := must[*verbs.RecvWR](t)(cmem.New[verbs.RecvWR]()), must[*verbs.ExpSendWR](t)(cmem.New[verbs.ExpSendWR]())
	sges := must[[]verbs.SGE](t)(cmem.Slice[verbs.SGE](2))
	defer func() { cmem.Free(recv); cmem.Free(send); cmem.FreeSlice(sges) }()
	sges[0] = verbs.SGE{Addr: dst.Addr(), Length: 32, Lkey: mb.Lkey}
	sges[1] = verbs.SGE{Addr: src.Addr(), Length: 32, Lkey: ma.Lkey}
	*recv = verbs.RecvWR{WRID: 1, SGList: &sges[0], NumSGE: 1}
	*send = verbs.ExpSendWR{WRID: 2, SGList: &sges[1], NumSGE: 1, ExpOpcode: verbs.ExpWRSend, ExpSendFlags: uint64(verbs.ExpSendSignaled)}
	if err := errors.Join(verbs.PostRecv(qb, recv, nil), verbs.ExpPostSend(qa, send, nil)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := contextWithTimeout(t, time.Minute)
	defer cancel()
	wc := make([]verbs.ExpWC, 1)
	if n, err := b.PollCQ(ctx, cb, wc); n != 1 || err != nil || wc[0].Status != verbs.WCSuccess || wc[0].WRID != 1 {
		t.Fatalf("receive: %d completions, %v, status %v, wr_id %d", n, err, wc[0].Status, wc[0].WRID)
	}
	if got := string(dst.Bytes()[:9]); got != "connected" {
		t.Fatalf("received %q", got)
	}
	// The send's completion, so nothing is left in flight.
	for deadline := time.Now().Add(time.Minute); ; {
		n, err := pollOnce(ca, wc)
		if err != nil || n == 1 {
			if err != nil || wc[0].Status != verbs.WCSuccess {
				t.Fatalf("send: %v, status %v", err, wc[0].Status)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no send completion in a minute")
		}
		time.Sleep(time.Millisecond)
	}
}
