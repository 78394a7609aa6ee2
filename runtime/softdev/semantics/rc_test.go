//go:build linux && cgo

package semantics

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
)

// The RC transport between two devices, as a cluster sees it: rank 0 the
// requester, rank 1 the responder, each a process with its own device
// (an InfiniBand port: the QPs name each other by LID). Every rule is
// observed through the verbs only: completions and their timing, data,
// QP states, events. runtime/softdev's wireRules state the same rules
// with the transport's counters (packets, NAKs, resends) in-process; the
// counters have no verb, so these cases time what the counters count.
//
// Why two devices and not two QPs of one: between QPs of one device the
// engine delivers within its step (no RNR NAK, no ACK timer: see
// runtime/softdev's doc), so RNR, retries and duplicates exist only
// between devices; a rank that dies or stops must be a process of its
// own; and the library path gives a process one device (its launcher's).

// ackTimeout is what the local ACK timer waits for timeout t.
func ackTimeout(t uint8) time.Duration { return time.Duration(4096<<t) * time.Nanosecond }

// retryBound is when an unanswered send must have failed: its first
// transmission and retry_cnt more, each waiting out the timer; the upper
// bound has slack for a loaded machine.
func retryBound(timeout, retry uint8) (lo, hi time.Duration) {
	per := ackTimeout(timeout)
	return time.Duration(retry+1) * per, time.Duration(retry+1)*per*2 + 3*time.Second
}

// nobodyLID names 127.0.254.253 in the devices' /16: no device there.
const nobodyLID = 0xfefd

func rcCases() []semCase {
	return []semCase{
		{name: "RCSendRecv", ranks: 2, run: rcSendRecv},
		{name: "RCSegments", ranks: 2, run: rcSegments},
		{name: "RCRDMAAndAtomics", ranks: 2, run: rcRDMAAndAtomics},

		// A PSN the responder does not expect (ahead, behind, across the
		// wrap) is never taken; the requester's retries run out.
		{name: "RCWrongPSNAhead", ranks: 2, run: retryExceeded(psnAttr(5000, 100), 10, 3, nil)},
		{name: "RCWrongPSNBehind", ranks: 2, run: retryExceeded(psnAttr(100, 5000), 10, 3, nil)},
		{name: "RCWrongPSNWrap", ranks: 2, run: retryExceeded(psnAttr(0xfffff0, 0x10), 10, 3, nil)},
		// A QP number the peer's device does not have: dropped there.
		{name: "RCWrongQPN", ranks: 2, run: retryExceeded(requester(func(l *link) { l.timeout, l.retry = 10, 2 }), 10, 2,
			func(p *peerInfo) { p.QPN = 0x777 })},
		// A LID where no device is: the path goes nowhere.
		{name: "RCUnreachableLID", ranks: 2, run: retryExceeded(requester(func(l *link) { l.timeout, l.retry = 10, 2 }), 10, 2,
			func(p *peerInfo) {
				p.Addr.LID, p.Addr.GID = nobodyLID, [16]byte{10: 0xff, 11: 0xff, 12: 127, 13: 0, 14: 0xfe, 15: 0xfd}
			})},

		// ... and so does one that polls once and then sleeps on its
		// completion channel: the device, not its polls, runs the timer.
		{name: "RCRetryExceededOnChannel", ranks: 2, run: rcRetryExceededOnChannel},

		{name: "RCRNRRetriesRunOut", ranks: 2, run: rcRNRRetriesRunOut},
		{name: "RCRNRLateReceive", ranks: 2, run: rcRNRLateReceive},
		{name: "RCRNRRetryForever", ranks: 2, run: rcRNRRetryForever},

		// The responder checks rkey, range and access on every request.
		{name: "RCRemoteAccessWrongRkey", ranks: 2, run: remoteAccess(nil, func(p peerInfo) (uint64, uint32) { return p.Buf + 1000, p.Rkey ^ 0x100 })},
		{name: "RCRemoteAccessPastMR", ranks: 2, run: remoteAccess(nil, func(p peerInfo) (uint64, uint32) { return p.Buf + bufSize - 10, p.Rkey })},
		{name: "RCRemoteAccessNoWrite", ranks: 2, run: remoteAccess(
			func(d *dut) []uint32 {
				return []uint32{d.regMR(d.pd, d.buf, verbs.AccessLocalWrite|verbs.AccessRemoteRead).Rkey}
			},
			func(p peerInfo) (uint64, uint32) { return p.Buf + 1000, p.Extra[0] })},

		{name: "RCReceiveTooSmall", ranks: 2, run: rcReceiveTooSmall},
		{name: "RCDuplicateNotExecutedTwice", ranks: 2, run: rcDuplicate},
		{name: "RCPeerDies", ranks: 2, run: rcPeerDies, responderDies: true},
	}
}

// rcSendRecv: a SEND_WITH_IMM of 19 bytes: the receive completes with
// its wr_id, length, opcode, the sender's QP number, the immediate and
// IBV_EXP_WC_WITH_IMM; the bytes arrive; the send completes.
func rcSendRecv(n *node) {
	t, d := n.t, n.d
	w := n.wireUp(plain, nil)
	if n.rank == 1 {
		d.postRecv(w.qp, d.recvBuf(7, 100, 64))
		n.barrier("posted")
		r := d.await(w.cq, 1)[0]
		if r.Status != verbs.WCSuccess || r.WRID != 7 || byteLen(&r) != 19 || r.ExpOpcode != verbs.ExpWCRecv ||
			r.SrcQP != w.peer.QPN || r.ImmData != 0xab01 || r.ExpWCFlags&uint64(verbs.ExpWCWithImm) == 0 {
			t.Fatalf("receive %+v imm %#x src %#x flags %#x", sum([]verbs.ExpWC{r}), r.ImmData, r.SrcQP, r.ExpWCFlags)
		}
		if got := string(d.buf[100:119]); got != "hello over the wire" {
			t.Fatalf("received %q", got)
		}
		return
	}
	copy(d.buf, "hello over the wire")
	n.barrier("posted")
	s := d.sendBuf(1, verbs.ExpSendSignaled, 0, 19)
	s.ExpOpcode = verbs.ExpWRSendWithImm
	s.Ex.SetImmData(0xab01)
	d.postSend(w.qp, s)
	if c := d.await(w.cq, 1)[0]; c.Status != verbs.WCSuccess || c.WRID != 1 || c.ExpOpcode != verbs.ExpWCSend {
		t.Errorf("send: %+v", sum([]verbs.ExpWC{c}))
	}
}

// rcSegments: a message larger than path_mtu travels as path_mtu
// packets and arrives whole, in order: 40000 bytes at MTU 1024.
func rcSegments(n *node) {
	t, d := n.t, n.d
	w := n.wireUp(plain, nil)
	const size = 40000
	pattern := func(i int) byte { return byte(i*7 + i>>8) }
	if n.rank == 1 {
		d.postRecv(w.qp, d.recvBuf(1, 0, size))
		n.barrier("posted")
		if r := d.await(w.cq, 1)[0]; r.Status != verbs.WCSuccess || byteLen(&r) != size {
			t.Fatalf("receive %+v", sum([]verbs.ExpWC{r}))
		}
		for i := range size {
			if d.buf[i] != pattern(i) {
				t.Fatalf("byte %d is %d, want %d", i, d.buf[i], pattern(i))
			}
		}
		return // and closes its device at once: what it answered must still reach rank 0
	}
	for i := range size {
		d.buf[i] = pattern(i)
	}
	n.barrier("posted")
	d.postSend(w.qp, d.sendBuf(2, verbs.ExpSendSignaled, 0, size))
	if c := d.await(w.cq, 1)[0]; c.Status != verbs.WCSuccess {
		t.Errorf("send: %+v", sum([]verbs.ExpWC{c}))
	}
}

// rcRDMAAndAtomics: RDMA WRITE (and WITH_IMM), READ, CMP_AND_SWP and
// FETCH_AND_ADD against the responder's memory, each checked there and
// at the requester.
func rcRDMAAndAtomics(n *node) {
	t, d := n.t, n.d
	w := n.wireUp(plain, nil)
	if n.rank == 1 {
		for i := range 9000 {
			d.buf[20000+i] = byte(255 - i%256 + 1)
		}
		binary.LittleEndian.PutUint64(d.buf[60000:], 41)
		d.postRecv(w.qp, d.recv(9, nil, 0))
		n.barrier("ready")
		r := d.await(w.cq, 1)[0]
		if r.Status != verbs.WCSuccess || r.ExpOpcode != verbs.ExpWCRecvRDMAWithImm || r.ImmData != 77 || byteLen(&r) != 10 {
			t.Errorf("write-with-imm receive: %+v imm %d", sum([]verbs.ExpWC{r}), r.ImmData)
		}
		n.barrier("done")
		for i := range 9000 {
			if d.buf[30000+i] != byte(i+1) {
				t.Fatalf("RDMA WRITE byte %d: %d, want %d", i, d.buf[30000+i], byte(i+1))
			}
		}
		if got := binary.LittleEndian.Uint64(d.buf[60000:]); got != 1005 {
			t.Errorf("after the atomics: %d, want 1005", got)
		}
		return
	}
	n.barrier("ready")
	for i := range 9000 {
		d.buf[i] = byte(i + 1)
	}
	p := w.peer
	wr := d.send(1, verbs.ExpWRRDMAWrite, verbs.ExpSendSignaled, d.sges(d.mr.Lkey, [2]int{0, 9000}), 1)
	wr.WR.RDMA().RemoteAddr, wr.WR.RDMA().Rkey = p.Buf+30000, p.Rkey
	wi := d.send(2, verbs.ExpWRRDMAWriteWithImm, verbs.ExpSendSignaled, d.sges(d.mr.Lkey, [2]int{0, 10}), 1)
	wi.WR.RDMA().RemoteAddr, wi.WR.RDMA().Rkey = p.Buf+50000, p.Rkey
	wi.Ex.SetImmData(77)
	rd := d.send(3, verbs.ExpWRRDMARead, verbs.ExpSendSignaled, d.sges(d.mr.Lkey, [2]int{12000, 9000}), 1)
	rd.WR.RDMA().RemoteAddr, rd.WR.RDMA().Rkey = p.Buf+20000, p.Rkey
	cs := d.send(4, verbs.ExpWRAtomicCmpAndSwp, verbs.ExpSendSignaled, d.sges(d.mr.Lkey, [2]int{40000, 8}), 1)
	cs.WR.Atomic().RemoteAddr, cs.WR.Atomic().Rkey = p.Buf+60000, p.Rkey
	cs.WR.Atomic().CompareAdd, cs.WR.Atomic().Swap = 41, 1000
	fa := d.send(5, verbs.ExpWRAtomicFetchAndAdd, verbs.ExpSendSignaled, d.sges(d.mr.Lkey, [2]int{40008, 8}), 1)
	fa.WR.Atomic().RemoteAddr, fa.WR.Atomic().Rkey = p.Buf+60000, p.Rkey
	fa.WR.Atomic().CompareAdd = 5
	d.postSend(w.qp, wr, wi, rd, cs, fa)
	got := sum(d.await(w.cq, 5))
	q := w.qp.QPNum
	for i := range got {
		got[i].Len = 0 // byte_len is defined for receives, RDMA READ and atomics only: compared below
	}
	want := []wcSum{{1, verbs.WCSuccess, verbs.ExpWCRDMAWrite, 0, q}, {2, verbs.WCSuccess, verbs.ExpWCRDMAWrite, 0, q},
		{3, verbs.WCSuccess, verbs.ExpWCRDMARead, 0, q}, {4, verbs.WCSuccess, verbs.ExpWCCompSwap, 0, q},
		{5, verbs.WCSuccess, verbs.ExpWCFetchAdd, 0, q}}
	if !equalSums(got, want) {
		t.Fatalf("%+v, want %+v", got, want)
	}
	for i := range 9000 {
		if d.buf[12000+i] != byte(255-i%256+1) {
			t.Fatalf("RDMA READ byte %d: %d", i, d.buf[12000+i])
		}
	}
	if a, b := binary.LittleEndian.Uint64(d.buf[40000:]), binary.LittleEndian.Uint64(d.buf[40008:]); a != 41 || b != 1000 {
		t.Errorf("CMP_AND_SWP saw %d (want 41), FETCH_AND_ADD %d (want 1000)", a, b)
	}
	n.barrier("done")
}

func psnAttr(sq, peerRQ uint32) func(rank int) link {
	return func(rank int) link {
		l := defaultLink()
		l.timeout, l.retry = 10, 3 // 4.2 ms × 4
		if rank == 0 {
			l.sqPSN = sq
		} else {
			l.rqPSN = peerRQ
		}
		return l
	}
}

// retryExceeded: rank 0's three sends (two signaled) never get an
// answer: the first fails with IBV_WC_RETRY_EXC_ERR no sooner than the
// timers allow (and not much later), the others are flushed (the
// unsignaled one too), the QP is in ERR, and nothing reaches rank 1.
// misroute, if given, changes where rank 0's QP is pointed.
func retryExceeded(attr func(int) link, timeout, retry uint8, misroute func(*peerInfo)) func(n *node) {
	return func(n *node) {
		t, d := n.t, n.d
		w := n.wireUpTo(attr, nil, misroute)
		if n.rank == 1 {
			d.postRecv(w.qp, d.recvBuf(50, 0, 64))
			n.barrier("done")
			if got := d.quiet(w.cq); len(got) != 0 {
				t.Errorf("the responder completed %+v", sum(got))
			}
			return
		}
		start := time.Now()
		d.postSend(w.qp, d.sendBuf(1, verbs.ExpSendSignaled, 0, 8), d.sendBuf(2, verbs.ExpSendSignaled, 0, 8), d.sendBuf(3, 0, 0, 8))
		lo, hi := retryBound(timeout, retry)
		got := sum(d.awaitWithin(w.cq, 3, hi))
		took := time.Since(start)
		q := w.qp.QPNum
		want := []wcSum{{1, verbs.WCRetryExcErr, verbs.ExpWCSend, 0, q}, {2, verbs.WCWRFlushErr, verbs.ExpWCSend, 0, q}, {3, verbs.WCWRFlushErr, verbs.ExpWCSend, 0, q}}
		for i := range got {
			got[i].Len = 0
		}
		if !equalSums(got, want) {
			t.Errorf("%+v, want %+v", got, want)
		}
		if took < lo {
			t.Errorf("failed after %v, before timeout × (retry_cnt + 1) = %v", took, lo)
		}
		if st := d.qpState(w.qp); st != verbs.QpsErr {
			t.Errorf("requester in %v, want ERR", st)
		}
		n.barrier("done")
	}
}

// rcRetryExceededOnChannel: a requester whose peer never answers (a QP
// number its device does not have) polls its CQ once after the post, as
// a program does before it sleeps, then waits on its completion channel
// and polls no more: IBV_WC_RETRY_EXC_ERR still comes, its event within
// the retry bound, as on an HCA, whose timers run whatever the host does.
// On softdev the transport thread runs them; the post wakes it to arm the
// timer, and the poll must not take that wake-up from it (it could: the
// thread then slept on without a timer, and the program forever). Eight
// rounds, a new CQ and QP each.
func rcRetryExceededOnChannel(n *node) {
	t, d := n.t, n.d
	peer := exchange(n, d.self())[1-n.rank]
	if n.rank == 1 {
		n.barrier("done")
		return
	}
	ch := d.compChannel()
	gotCQ, gotCtx := cAlloc[*verbs.CQ](d), cAlloc[unsafe.Pointer](d)
	l := defaultLink()
	l.timeout, l.retry = 10, 2
	_, hi := retryBound(l.timeout, l.retry)
	for round := range 8 {
		cq := d.createCQ(4, ch, nil, 0)
		qp := d.createQP(qpSpec{scq: cq, rcq: cq})
		d.connect(qp, peer, 0x777, l)
		if err := verbs.ReqNotifyCQ(cq, 0); err != nil {
			t.Fatalf("ibv_req_notify_cq: %v", err)
		}
		d.postSend(qp, d.sendBuf(1, verbs.ExpSendSignaled, 0, 8))
		if got := d.poll(cq); len(got) != 0 {
			t.Fatalf("round %d: %+v before any retry", round, sum(got))
		}
		if readable(t, int(ch.FD), hi) == 0 {
			t.Fatalf("round %d: no completion event within %v of the post, with nobody polling: no retry timer ran", round, hi)
		}
		if err := verbs.GetCQEvent(ch, gotCQ, gotCtx); err != nil || *gotCQ != cq {
			t.Fatalf("round %d: ibv_get_cq_event: %v, CQ %p; want %p", round, err, *gotCQ, cq)
		}
		if err := verbs.AckCQEvents(cq, 1); err != nil {
			t.Fatal(err)
		}
		got := sum(d.await(cq, 1))
		got[0].Len = 0
		if want := []wcSum{{1, verbs.WCRetryExcErr, verbs.ExpWCSend, 0, qp.QPNum}}; !equalSums(got, want) {
			t.Fatalf("round %d: %+v, want %+v", round, got, want)
		}
	}
	n.barrier("done")
}

// wireUpTo is wireUp with rank 0's QP pointed where misroute says (a QP
// number or a LID the peer does not have).
func (n *node) wireUpTo(attr func(int) link, setup func() []uint32, misroute func(*peerInfo)) *wire {
	if misroute == nil {
		return n.wireUp(attr, setup)
	}
	return n.wireUpWith(attr, setup, func(p *peerInfo) {
		if n.rank == 0 {
			misroute(p)
		}
	})
}

// rcRNRRetriesRunOut: no receive WQE, rnr_retry 3, the responder's
// min_rnr_timer 14 (1.28 ms): the send fails with
// IBV_WC_RNR_RETRY_EXC_ERR, no sooner than three RNR waits, and the QP
// is in ERR.
func rcRNRRetriesRunOut(n *node) {
	t, d := n.t, n.d
	w := n.wireUp(func(int) link { l := defaultLink(); l.rnr, l.minRNR = 3, 14; return l }, nil)
	if n.rank == 1 {
		n.barrier("done")
		return
	}
	start := time.Now()
	d.postSend(w.qp, d.sendBuf(1, verbs.ExpSendSignaled, 0, 8))
	c := d.await(w.cq, 1)[0]
	if c.Status != verbs.WCRnrRetryExcErr || c.WRID != 1 {
		t.Errorf("%+v, want RNR_RETRY_EXC_ERR", sum([]verbs.ExpWC{c}))
	}
	if min := 3 * 1280 * time.Microsecond; time.Since(start) < min {
		t.Errorf("failed after %v, before 3 RNR timers (%v)", time.Since(start), min)
	}
	if st := d.qpState(w.qp); st != verbs.QpsErr {
		t.Errorf("requester in %v, want ERR", st)
	}
	n.barrier("done")
}

// rcRNRLateReceive: a receive posted 20 ms after the send, rnr_retry 7,
// the responder's min_rnr_timer 18 (5.12 ms): the send waits through the
// RNR NAKs and completes, after the receive was posted.
func rcRNRLateReceive(n *node) {
	rnrLate(n, responder(func(l *link) { l.minRNR = 18 }), 20*time.Millisecond)
}

// rcRNRRetryForever: rnr_retry 7 means for ever (InfiniBand's infinite
// retry): with min_rnr_timer 1 (10 µs) a send NAKed for 300 ms, thousands
// of times, still completes once the receive comes.
func rcRNRRetryForever(n *node) {
	rnrLate(n, responder(func(l *link) { l.minRNR = 1 }), 300*time.Millisecond)
}

func rnrLate(n *node, attr func(int) link, late time.Duration) {
	t, d := n.t, n.d
	w := n.wireUp(attr, nil)
	if n.rank == 1 {
		n.barrier("sent")
		time.Sleep(late)
		d.postRecv(w.qp, d.recvBuf(9, 0, 16))
		if r := d.await(w.cq, 1)[0]; r.Status != verbs.WCSuccess || string(d.buf[:4]) != "late" {
			t.Errorf("receive %+v, data %q", sum([]verbs.ExpWC{r}), d.buf[:4])
		}
		return
	}
	copy(d.buf, "late")
	start := time.Now()
	d.postSend(w.qp, d.sendBuf(1, verbs.ExpSendSignaled, 0, 4))
	n.barrier("sent")
	if c := d.await(w.cq, 1)[0]; c.Status != verbs.WCSuccess {
		t.Errorf("%+v", sum([]verbs.ExpWC{c}))
	}
	if took := time.Since(start); took < late {
		t.Errorf("the send completed %v after its post, before the receive was posted (%v)", took, late)
	}
}

// remoteAccess: rank 0 writes where target points in rank 1: the write
// fails with IBV_WC_REM_ACCESS_ERR; nothing is written; the responder's
// QP is in ERR, with IBV_EVENT_QP_ACCESS_ERR on it. setup registers
// rank 1's extra MRs.
func remoteAccess(setup func(*dut) []uint32, target func(peerInfo) (uint64, uint32)) func(n *node) {
	return func(n *node) {
		t, d := n.t, n.d
		var extra func() []uint32
		if setup != nil && n.rank == 1 {
			extra = func() []uint32 { return setup(d) }
		}
		w := n.wireUp(plain, extra)
		if n.rank == 1 {
			for i := range d.buf {
				d.buf[i] = byte(i * 3)
			}
			before := bytes.Clone(d.buf)
			n.barrier("ready")
			ev := d.event(within)
			if ev.EventType != verbs.EventQPAccessErr || ev.Element.QP() != w.qp {
				t.Errorf("event %v on QP %p, want %v on %p", ev.EventType, ev.Element.QP(), verbs.EventQPAccessErr, w.qp)
			}
			n.barrier("done")
			if !bytes.Equal(d.buf, before) {
				t.Error("the responder's memory changed")
			}
			if st := d.qpState(w.qp); st != verbs.QpsErr {
				t.Errorf("responder in %v, want ERR", st)
			}
			return
		}
		copy(d.buf, "0123456789abcdef")
		n.barrier("ready")
		wr := d.send(1, verbs.ExpWRRDMAWrite, verbs.ExpSendSignaled, d.sges(d.mr.Lkey, [2]int{0, 16}), 1)
		wr.WR.RDMA().RemoteAddr, wr.WR.RDMA().Rkey = target(w.peer)
		d.postSend(w.qp, wr)
		if c := d.await(w.cq, 1)[0]; c.Status != verbs.WCRemAccessErr {
			t.Errorf("%+v, want REM_ACCESS_ERR", sum([]verbs.ExpWC{c}))
		}
		n.barrier("done")
	}
}

// rcReceiveTooSmall: 3000 bytes into a 10-byte receive: LOC_LEN_ERR at
// the responder (its next receive flushed), REM_INV_REQ_ERR at the
// requester.
func rcReceiveTooSmall(n *node) {
	t, d := n.t, n.d
	w := n.wireUp(plain, nil)
	if n.rank == 1 {
		d.postRecv(w.qp, d.recvBuf(5, 0, 10), d.recvBuf(6, 100, 10))
		n.barrier("posted")
		got := d.await(w.cq, 2)
		if got[0].WRID != 5 || got[0].Status != verbs.WCLocLenErr || got[1].WRID != 6 || got[1].Status != verbs.WCWRFlushErr {
			t.Errorf("responder: %+v, want LOC_LEN_ERR then a flush", sum(got))
		}
		return
	}
	n.barrier("posted")
	d.postSend(w.qp, d.sendBuf(1, verbs.ExpSendSignaled, 0, 3000))
	if c := d.await(w.cq, 1)[0]; c.Status != verbs.WCRemInvReqErr {
		t.Errorf("%+v, want REM_INV_REQ_ERR", sum([]verbs.ExpWC{c}))
	}
}

// rcDuplicate: the responder's process is stopped (SIGSTOP) while a SEND
// is outstanding: the requester's ACK timer (timeout 15: 134 ms) resends
// it, twice in 300 ms, well within retry_cnt 7 (1.07 s); then the
// responder continues (SIGCONT) and finds the first copy and the
// duplicates. The first is executed, the duplicates answered and not
// executed again: of two receives posted, one completes, with the first
// message; the requester's send completes once, successfully. A second
// SEND then lands in the second receive (the PSNs moved on by one
// message, not by the copies).
func rcDuplicate(n *node) {
	t, d := n.t, n.d
	const stop = 300 * time.Millisecond
	w := n.wireUp(requester(func(l *link) { l.timeout = 15 }), nil)
	if n.rank == 1 {
		d.postRecv(w.qp, d.recvBuf(1, 0, 64), d.recvBuf(2, 100, 64))
		n.barrier("posted")
		// Stopped and continued by rank 0 here.
		r := d.await(w.cq, 1)
		if got := d.quiet(w.cq); len(got) != 0 {
			r = append(r, got...)
		}
		if len(r) != 1 || r[0].WRID != 1 || r[0].Status != verbs.WCSuccess || byteLen(&r[0]) != 3 || string(d.buf[:3]) != "one" {
			t.Fatalf("after the stop: %+v (data %q), want the first receive only, with \"one\"", sum(r), d.buf[:3])
		}
		n.barrier("checked")
		if r := d.await(w.cq, 1)[0]; r.WRID != 2 || r.Status != verbs.WCSuccess || byteLen(&r) != 3 || string(d.buf[100:103]) != "two" {
			t.Fatalf("the second message: %+v (data %q), want the second receive with \"two\"", sum([]verbs.ExpWC{r}), d.buf[100:103])
		}
		return
	}
	n.barrier("posted")
	pid := w.peer.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP to rank 1 (pid %d): %v", pid, err)
	}
	cont := func() { syscall.Kill(pid, syscall.SIGCONT) }
	defer cont() // never leave it stopped
	for end := time.Now().Add(within); !stopped(pid); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("rank 1 (pid %d) never stopped", pid)
		}
	}
	copy(d.buf, "one")
	start := time.Now()
	d.postSend(w.qp, d.sendBuf(1, verbs.ExpSendSignaled, 0, 3))
	if got := d.quietFor(w.cq, time.Until(start.Add(stop))); len(got) != 0 {
		t.Fatalf("the send completed while its responder was stopped: %+v", sum(got))
	}
	cont()
	c := d.await(w.cq, 1)
	c = append(c, d.quiet(w.cq)...)
	if len(c) != 1 || c[0].WRID != 1 || c[0].Status != verbs.WCSuccess {
		t.Fatalf("the first send: %+v, want one successful completion", sum(c))
	}
	if took := time.Since(start); took < stop {
		t.Errorf("the send completed %v after its post, while its responder was stopped", took)
	}
	n.barrier("checked")
	copy(d.buf[200:], "two")
	d.postSend(w.qp, d.sendBuf(2, verbs.ExpSendSignaled, 200, 3))
	if c := d.await(w.cq, 1)[0]; c.WRID != 2 || c.Status != verbs.WCSuccess {
		t.Fatalf("the second send: %+v", sum([]verbs.ExpWC{c}))
	}
}

// stopped says whether process pid is stopped (state T in /proc).
func stopped(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'T'
}

// rcPeerDies: the responder's process dies (SIGKILL) after a first
// exchange: the requester's next send fails with IBV_WC_RETRY_EXC_ERR
// within the timers, the QP goes to ERR and its receive is flushed. Never
// a hang (RC has no keepalive: the send is what finds out).
func rcPeerDies(n *node) {
	t, d := n.t, n.d
	w := n.wireUp(requester(func(l *link) { l.timeout, l.retry = 12, 3 }), nil)
	if n.rank == 1 {
		d.postRecv(w.qp, d.recvBuf(1, 0, 8))
		d.await(w.cq, 1)
		n.barrier("up")
		n.die()
	}
	d.postRecv(w.qp, d.recvBuf(70, 0, 8))
	d.postSend(w.qp, d.sendBuf(1, verbs.ExpSendSignaled, 0, 8))
	if c := d.await(w.cq, 1)[0]; c.WRID != 1 || c.Status != verbs.WCSuccess {
		t.Fatalf("the first send: %+v", sum([]verbs.ExpWC{c}))
	}
	n.barrier("up")
	for end := time.Now().Add(within); syscall.Kill(w.peer.Pid, 0) == nil; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("rank 1 (pid %d) did not die", w.peer.Pid)
		}
	}
	start := time.Now()
	d.postSend(w.qp, d.sendBuf(2, verbs.ExpSendSignaled, 0, 8))
	_, hi := retryBound(12, 3)
	got := sum(d.awaitWithin(w.cq, 2, hi))
	q := w.qp.QPNum
	for i := range got {
		got[i].Len = 0
	}
	want := []wcSum{{2, verbs.WCRetryExcErr, verbs.ExpWCSend, 0, q}, {70, verbs.WCWRFlushErr, verbs.ExpWCRecv, 0, q}}
	if !equalSums(got, want) {
		t.Errorf("after rank 1 died: %+v, want %+v", got, want)
	}
	if took := time.Since(start); took > hi {
		t.Errorf("the failures took %v (bound %v)", took, hi)
	}
	if st := d.qpState(w.qp); st != verbs.QpsErr {
		t.Errorf("requester in %v, want ERR", st)
	}
}
