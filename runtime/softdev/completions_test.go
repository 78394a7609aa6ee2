//go:build linux && cgo

package softdev

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/internal/sidebyside"
	"github.com/verbsexp/verbsexp/runtime/device"
)

// Completions as asynchronous as an HCA's (completions.go, the package
// doc's "Completions as an HCA's").

// within bounds every wait for completions that must come.
const within = 10 * time.Second

// pollUntil polls cq until it has n completions (or within passes).
func (f *fixture) pollUntil(cq *verbs.CQ, n int) []verbs.ExpWC {
	f.t.Helper()
	wc := allocN[verbs.ExpWC](f, 16)
	var out []verbs.ExpWC
	for end := time.Now().Add(within); len(out) < n; {
		k, err := verbs.ExpPollCQ(cq, wc)
		if err != nil {
			f.t.Fatalf("ExpPollCQ: %v", err)
		}
		out = append(out, wc[:k]...)
		if time.Now().After(end) {
			f.t.Fatalf("%d of %d completions in %v: %+v", len(out), n, within, sum(out))
		}
	}
	return out
}

// A program that polls once right after posting and counts on the
// completion fails on an HCA: it must fail here too. The poll runs the
// device (the SEND executes, the data is placed), yet returns nothing;
// the completions come at a later poll, in order. With SyncCompletions
// the same poll returns them (softdev's old behaviour).
func TestPollRightAfterPostFindsNothing(t *testing.T) {
	for _, sync := range []bool{false, true} {
		var opts []DeviceOption
		if sync {
			opts = append(opts, SyncCompletions())
		}
		f := asyncFixture(t, opts...)
		p := f.pair(nil, nil)
		copy(f.buf, "hello")
		f.postRecv(p.b, f.recv(1, f.sges(f.mr.Lkey, [2]int{100, 8}), 1))
		f.postSend(p.a, f.send(2, verbs.ExpWRSend, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{0, 5}), 1))
		wc := allocN[verbs.ExpWC](f, 4)
		n, err := verbs.ExpPollCQ(p.cqa, wc)
		if err != nil {
			t.Fatal(err)
		}
		if string(f.buf[100:105]) != "hello" {
			t.Fatalf("sync=%v: the poll did not run the device: %q placed", sync, f.buf[100:105])
		}
		if sync {
			if n != 1 || wc[0].WRID != 2 {
				t.Fatalf("SyncCompletions: the first poll found %+v, want the send", sum(wc[:n]))
			}
			continue
		}
		if n != 0 {
			t.Fatalf("the poll right after the post found %+v: completions visible at once, an HCA's are not", sum(wc[:n]))
		}
		if r := f.pollUntil(p.cqb, 1); r[0].WRID != 1 || r[0].Status != verbs.WCSuccess || byteLen(&r[0]) != 5 {
			t.Fatalf("receive %+v", sum(r))
		}
		if s := f.pollUntil(p.cqa, 1); s[0].WRID != 2 || s[0].Status != verbs.WCSuccess {
			t.Fatalf("send %+v", sum(s))
		}
	}
}

// The vendor's CORE-Direct suite (gtest_cd_tc5.cc, ti_6) polls the
// manager's CQ before each of ten sends and expects it empty every
// time: a CQE_WAIT for 9 completions must not have completed right
// after the 9th send is posted (an HCA has not processed the 9th
// receive and the wait behind it by then). Then the waits for 9 and 10
// complete, in order, and the one for 11 never does. On the default
// device this holds whatever the machine's load: a poll never returns a
// completion of work its own run did. (TestVendorTC5SendWaitTI6 pins
// what SyncCompletions gives instead: the wait for 9 at that poll.)
func TestVendorTC5SendWaitTI6Async(t *testing.T) {
	v := newVDWith(t)
	v.initTest(vdWith(verbs.ExpQPCreateCrossChannel))
	s := verbs.ExpSendSignaled
	early := v.waitThenSends([]*verbs.ExpSendWR{v.wait(3, v.rcq, 9, s), v.wait(2, v.rcq, 10, s),
		v.wait(1, v.rcq, 11, s|verbs.ExpSendWaitEnLast)}, true)
	if len(early) != 0 {
		t.Fatalf("manager CQEs before the tenth send: %v, want none (the vendor's expectation)", vdWRIDs(early))
	}
	var m, sends, recvs []verbs.WC
	for end := time.Now().Add(within); len(m) < 2 || len(sends) < vdSendPostCount || len(recvs) < vdSendPostCount; {
		m = append(m, v.poll(v.mcq, vdMgrCQE)...)
		sends = append(sends, v.poll(v.scq, v.cqTx)...)
		recvs = append(recvs, v.poll(v.rcq, v.cqRx)...)
		if time.Now().After(end) {
			t.Fatalf("in %v: manager %v, %d sends, %d receives", within, vdWRIDs(m), len(sends), len(recvs))
		}
	}
	time.Sleep(10 * time.Millisecond) // the wait for 11 has had every chance
	m = append(m, v.poll(v.mcq, vdMgrCQE)...)
	if got := vdWRIDs(m); !reflect.DeepEqual(got, []uint64{3, 2}) {
		t.Fatalf("manager CQ wr_ids %v, want [3 2]", got)
	}
}

// writes posts a signaled 8-byte RDMA WRITE from each QP (connected to
// itself) in turn, and returns the wr_ids in the order their completions
// came on the CQ they share.
func (f *fixture) writes(cq *verbs.CQ, qps ...*verbs.QP) []uint64 {
	f.t.Helper()
	for i, qp := range qps {
		w := f.send(uint64(i), verbs.ExpWRRDMAWrite, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{0, 8}), 1)
		w.WR.RDMA().RemoteAddr, w.WR.RDMA().Rkey = f.addr(1024+8*i), f.mr.Rkey
		f.postSend(qp, w)
	}
	var ids []uint64
	for _, c := range f.pollUntil(cq, len(qps)) {
		if c.Status != verbs.WCSuccess {
			f.t.Fatalf("write %+v", sum([]verbs.ExpWC{c}))
		}
		ids = append(ids, c.WRID)
	}
	return ids
}

// A program that assumes QP A's completion comes before QP B's on a
// shared CQ because A's WRITE was posted first (the verbs promise no
// such order) passes every time on the default device and is caught
// with CompletionJitter: over 200 rounds the order flips.
func TestCompletionJitterExposesCrossQPOrder(t *testing.T) {
	for _, jitter := range []time.Duration{0, 50 * time.Microsecond} {
		f := asyncFixture(t, CompletionJitter(jitter))
		cq := f.cq(16)
		a, b := f.qp(cq, cq), f.qp(cq, cq)
		for _, qp := range []*verbs.QP{a, b} {
			if err := device.ConnectPair(qp, qp); err != nil {
				t.Fatal(err)
			}
		}
		flipped := 0
		for range 200 {
			if ids := f.writes(cq, a, b); ids[0] != 0 {
				flipped++
			}
		}
		switch {
		case jitter == 0 && flipped != 0:
			t.Errorf("without jitter B's completion came first %d times in 200: the order should be the device's, the same every run", flipped)
		case jitter != 0 && flipped == 0:
			t.Errorf("with %v of jitter A's completion came first all 200 times: the jitter reorders nothing between QPs", jitter)
		}
		t.Logf("jitter %v: B first in %d of 200 rounds", jitter, flipped)
	}
}

// What the verbs do promise holds with jitter: one QP's send
// completions, and its receive completions, in order; a CORE-Direct
// schedule (enables releasing a managed queue, a wait counting the
// receives) completes as the rules say.
func TestCompletionJitterKeepsPromisedOrders(t *testing.T) {
	f := asyncFixture(t, CompletionJitter(100*time.Microsecond))
	p := f.pair([]device.QPOption{device.ManagedSend()}, nil)
	mgr, mcq := f.mgr()
	const n = 60
	for i := range n {
		f.postRecv(p.b, f.recv(uint64(1000+i), f.sges(f.mr.Lkey, [2]int{4096 + 8*i, 8}), 1))
	}
	for i := range n {
		f.postSend(p.a, f.send(uint64(i), verbs.ExpWRSend, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{0, 8}), 1))
	}
	// Three enables of 20, each moving the base, then a wait for all 60
	// receives: rules 4, 5 and 8 on deferred, reordered CQEs.
	var ws []*verbs.ExpSendWR
	for i := range 3 {
		ws = append(ws, f.enable(uint64(100+i), verbs.ExpWRSendEnable, p.a, 20, verbs.ExpSendSignaled|verbs.ExpSendWaitEnLast))
	}
	ws = append(ws, f.wait(103, p.cqb, n, verbs.ExpSendSignaled|verbs.ExpSendWaitEnLast))
	f.postSend(mgr, ws...)

	check := func(what string, got []verbs.ExpWC, first uint64) {
		t.Helper()
		for i, c := range got {
			if c.WRID != first+uint64(i) || c.Status != verbs.WCSuccess {
				t.Fatalf("%s: completion %d is %+v, want wr_id %d: one queue's completions keep their order", what, i, sum([]verbs.ExpWC{c}), first+uint64(i))
			}
		}
	}
	check("sends", f.pollUntil(p.cqa, n), 0)
	check("receives", f.pollUntil(p.cqb, n), 1000)
	check("manager", f.pollUntil(mcq, 4), 100)
}

// A program that posts and then sleeps on the CQ's completion channel
// (ibv_req_notify_cq, then poll(2) on the channel's fd and
// ibv_get_cq_event), polling nothing, gets its event although the CQE is
// held back when the post returns: the transport thread writes it when
// it is due, and the event fires then. On a device that runs by itself
// (as under softdev exec) the post ran the WRITE; on the default device
// one poll ran it (and found nothing). With and without jitter.
func TestDeferredCompletionFiresEvent(t *testing.T) {
	for _, autonomous := range []bool{true, false} {
		for _, jitter := range []time.Duration{0, 200 * time.Microsecond} {
			opts := []DeviceOption{CompletionJitter(jitter)}
			if autonomous {
				opts = append(opts, Autonomous())
			}
			f := asyncFixture(t, opts...)
			cq := f.cq(16, device.Waitable())
			qp := f.qp(cq, cq)
			if err := device.ConnectPair(qp, qp); err != nil {
				t.Fatal(err)
			}
			gotCQ, gotCtx := alloc[*verbs.CQ](f), alloc[unsafe.Pointer](f)
			wc := allocN[verbs.ExpWC](f, 4)
			for i := range 10 {
				w := f.send(uint64(i), verbs.ExpWRRDMAWrite, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{0, 8}), 1)
				w.WR.RDMA().RemoteAddr, w.WR.RDMA().Rkey = f.addr(1024), f.mr.Rkey
				f.postSend(qp, w)
				if !autonomous {
					if n, err := verbs.ExpPollCQ(cq, wc); n != 0 || err != nil {
						t.Fatalf("the poll that ran the write: %d, %v, want nothing yet", n, err)
					}
				}
				if err := verbs.ReqNotifyCQ(cq, 0); err != nil {
					t.Fatal(err)
				}
				if readable(t, int(cq.Channel.FD), within) == 0 {
					t.Fatalf("autonomous %v, jitter %v, write %d: no completion event in %v", autonomous, jitter, i, within)
				}
				if err := verbs.GetCQEvent(cq.Channel, gotCQ, gotCtx); err != nil || *gotCQ != cq {
					t.Fatalf("ibv_get_cq_event: %v, CQ %p, want %p", err, *gotCQ, cq)
				}
				if err := verbs.AckCQEvents(cq, 1); err != nil {
					t.Fatal(err)
				}
				if n, err := verbs.ExpPollCQ(cq, wc); n != 1 || err != nil || wc[0].WRID != uint64(i) {
					t.Fatalf("after the event: %d, %v, %+v; want write %d", n, err, sum(wc[:n]), i)
				}
			}
		}
	}
}

// $VERBSEXP_SOFTDEV_JITTER is what Open takes without the option: a
// value that is not a duration, or one past MaxJitter, is refused
// naming the variable; SyncCompletions is not undone by it.
func TestJitterEnv(t *testing.T) {
	for _, bad := range []string{"fast", "-5us", "2s"} {
		t.Setenv(JitterEnv, bad)
		d, err := Open()
		if err == nil {
			d.Close()
			t.Fatalf("$%s=%q: Open succeeded", JitterEnv, bad)
		}
		if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), JitterEnv) {
			t.Fatalf("$%s=%q: %v, want EINVAL naming the variable", JitterEnv, bad, err)
		}
	}
	t.Setenv(JitterEnv, "50us")
	f := asyncFixture(t, SyncCompletions())
	cq := f.cq(16)
	qp := f.qp(cq, cq)
	if err := device.ConnectPair(qp, qp); err != nil {
		t.Fatal(err)
	}
	w := f.send(7, verbs.ExpWRRDMAWrite, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{0, 8}), 1)
	w.WR.RDMA().RemoteAddr, w.WR.RDMA().Rkey = f.addr(1024), f.mr.Rkey
	f.postSend(qp, w)
	if got := f.poll(cq); len(got) != 1 {
		t.Fatalf("SyncCompletions with $%s set: the first poll found %d completions, want 1", JitterEnv, len(got))
	}
	if _, err := Open(CompletionJitter(-time.Microsecond)); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("CompletionJitter(-1us): %v, want EINVAL", err)
	}
}

// A send WR with a nonzero comp_mask is refused with EINVAL (the mlx5
// provider ignores the field; verbs_exp.h defines no bit of it), *bad_wr
// naming it and the WRs before it posted, and the first refusal on the
// device says on stderr which WR of the list, its wr_id, the value and
// what to do; a second one says nothing more.
func TestCompMaskRefusedSaysWhy(t *testing.T) {
	f := newFixture(t)
	cq := f.cq(16)
	qp := f.qp(cq, cq)
	if err := device.ConnectPair(qp, qp); err != nil {
		t.Fatal(err)
	}
	say := func() (*verbs.ExpSendWR, *verbs.ExpSendWR, string, error) {
		var wrs []*verbs.ExpSendWR
		for i := range 3 {
			wrs = append(wrs, f.send(uint64(10+i), verbs.ExpWRNop, verbs.ExpSendSignaled, nil, 0))
		}
		wrs[1].CompMask = 4
		bad := alloc[*verbs.ExpSendWR](f)
		var err error
		out := stderrOf(t, func() { err = verbs.ExpPostSend(qp, link(wrs...), bad) })
		return *bad, wrs[1], out, err
	}
	bad, want, out, err := say()
	if !errors.Is(err, syscall.EINVAL) || bad != want {
		t.Fatalf("comp_mask 4: %v, bad_wr %p; want EINVAL at the second WR %p", err, bad, want)
	}
	for _, s := range []string{"ibv_exp_post_send: work request 1", "wr_id 11", "comp_mask 0x4", "mlx5 provider ignores it", "Zero the work request"} {
		if !strings.Contains(out, s) {
			t.Errorf("stderr %q does not say %q", out, s)
		}
	}
	if got := f.poll(cq); len(got) != 1 || got[0].WRID != 10 {
		t.Errorf("completions %+v, want the first NOP's: the WRs before the refused one stay posted", sum(got))
	}
	if _, _, out, _ := say(); out != "" {
		t.Errorf("the second refusal said %q again", out)
	}
}

// stderrOf runs fn with file descriptor 2 (what C writes to) sent to a
// pipe, and returns what was written.
func stderrOf(t *testing.T, fn func()) string {
	t.Helper()
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	saved, err := syscall.Dup(2)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Dup3(p[1], 2, 0)
	syscall.Close(p[1])
	fn()
	syscall.Dup3(saved, 2, 0)
	syscall.Close(saved)
	b := make([]byte, 4096)
	syscall.SetNonblock(p[0], true)
	n, _ := syscall.Read(p[0], b)
	syscall.Close(p[0])
	return string(b[:max(n, 0)])
}

// BenchmarkPostPollRound is the latency a program sees for a loopback
// completion: post one signaled 8-byte RDMA WRITE, poll until its CQE
// comes. "async" is the default device (the CQE written about 1 us
// after the run that produced it), "sync" one with SyncCompletions
// (the first poll returns it, as softdev did before); interleaved, with
// the medians and their ratio.
func BenchmarkPostPollRound(b *testing.B) {
	round := func(f *fixture) func(n int) error {
		cq := f.cq(16)
		qp := f.qp(cq, cq)
		if err := device.ConnectPair(qp, qp); err != nil {
			b.Fatal(err)
		}
		w := f.send(1, verbs.ExpWRRDMAWrite, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{0, 8}), 1)
		w.WR.RDMA().RemoteAddr, w.WR.RDMA().Rkey = f.addr(1024), f.mr.Rkey
		bad := alloc[*verbs.ExpSendWR](f)
		wc := alloc[verbs.ExpWC](f)
		size := uint32(unsafe.Sizeof(*wc))
		return func(n int) error {
			for range n {
				if err := verbs.ExpPostSend(qp, w, bad); err != nil {
					return err
				}
				for {
					k, err := verbs.ExpPollCQRaw(cq, 1, wc, size)
					if err != nil {
						return err
					}
					if k == 1 {
						break
					}
				}
			}
			return nil
		}
	}
	async, sync := round(asyncFixture(b)), round(newFixture(b))
	r := sidebyside.Bench(b, 100, sidebyside.Way{Name: "async", Run: async}, sidebyside.Way{Name: "sync", Run: sync})
	b.ReportMetric(r.Ratio("async", "sync"), "async/sync")
	if b.N > 1 {
		fmt.Printf("PostPollRound (interleaved medians): %s; async/sync %.2f\n", r.Summary(), r.Ratio("async", "sync"))
	}
}
