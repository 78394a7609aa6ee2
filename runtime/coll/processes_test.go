//go:build linux && cgo

package coll_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/internal/multiproc"
	"github.com/verbsexp/verbsexp/runtime/coll"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/softdev"
)

// Ranks in processes of their own, each with its own softdev device at
// its own address, endpoints traded through files: what a user tries
// first, and what a cluster does. Every result is checked on every rank.

// TestUsersProgram is the program as a user wrote it: each rank
// opens a device, New over a file exchange, an allreduce of rank+1. It
// must print the sum on every rank (it used to print 2 and 4 at two
// ranks, and hang at three).
func TestUsersProgram(t *testing.T) {
	self, isRank := multiproc.Rank()
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprint(n, "ranks"), func(t *testing.T) {
			if !isRank {
				res := multiproc.Run(t, n, multiproc.Config{Timeout: 90 * time.Second})
				for _, r := range res {
					if want := fmt.Sprintf("rank %d got %d <nil>", r.Rank, n*(n+1)/2); !bytes.Contains(r.Output, []byte(want)) {
						t.Errorf("rank %d printed no %q:\n%s", r.Rank, want, r.Output)
					}
				}
				return
			}
			dev, err := softdev.Open()
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			c, err := coll.New(dev.Context(), self.Rank, self.Size, self.Exchange(), coll.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			buf, _ := lease.Alloc(coll.ElementSize)
			defer buf.Free()
			mem, err := c.Register(buf)
			if err != nil {
				t.Fatal(err)
			}
			defer mem.Close()
			s, err := c.Allreduce(mem, mem, 1, verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			coll.PutElement(buf.Bytes(), 0, uint64(self.Rank+1), 0)
			if err := s.Post(); err != nil {
				t.Fatal(err)
			}
			err = s.Wait()
			v, _ := coll.Element(buf.Bytes(), 0)
			fmt.Printf("rank %d got %d %v\n", self.Rank, v, err)
			if err != nil || v != uint64(self.Size*(self.Size+1)/2) {
				t.Fatalf("rank %d: sum %d, %v", self.Rank, v, err)
			}
		})
	}
}

// TestCollectivesAcrossProcesses: barrier, allreduce (every op and type
// the device has, 5 elements), broadcast from every root and allgather,
// each run 20 times with fresh data, across 2, 3, 4 and 8 processes.
func TestCollectivesAcrossProcesses(t *testing.T) {
	self, isRank := multiproc.Rank()
	if !isRank && testing.Short() {
		t.Skip("SKIPPED in -short: starts up to 8 processes")
	}
	for _, n := range []int{2, 3, 4, 8} {
		t.Run(fmt.Sprint(n, "ranks"), func(t *testing.T) {
			if !isRank {
				multiproc.Run(t, n, multiproc.Config{Timeout: 180 * time.Second})
				return
			}
			collectivesRank(t, self)
		})
	}
}

func collectivesRank(t *testing.T, self multiproc.Self) {
	r, n := self.Rank, self.Size
	dev := openDevice(t)
	c, err := coll.New(dev.Context(), r, n, self.Exchange(), coll.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}()
	var closers []func() error
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			if err := closers[i](); err != nil {
				t.Error(err)
			}
		}
	}()
	alloc := func(size int) (*lease.Buffer, *coll.Memory) {
		b, err := lease.Alloc(size)
		if err != nil {
			t.Fatal(err)
		}
		m, err := c.Register(b)
		if err != nil {
			t.Fatal(err)
		}
		closers = append(closers, b.Free, m.Close)
		return b, m
	}
	run := func(what string, s *coll.Schedule) {
		t.Helper()
		if err := s.Post(); err != nil {
			t.Fatalf("%s: post: %v", what, err)
		}
		ctx, cancel := self.Context()
		defer cancel()
		if err := s.WaitContext(ctx); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	const iters = 20

	bar, err := c.Barrier()
	if err != nil {
		t.Fatal(err)
	}
	defer bar.Close()
	for range iters {
		run("barrier", bar)
	}

	const count = 5
	inB, in := alloc(count * coll.ElementSize)
	outB, out := alloc(count * coll.ElementSize)
	for _, k := range []struct {
		op  verbs.ExpCalcOp
		typ verbs.ExpCalcDataType
	}{{verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint}, {verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeInt},
		{verbs.ExpCalcOpBxor, verbs.ExpCalcDataTypeUint}, {verbs.ExpCalcOpBor, verbs.ExpCalcDataTypeInt},
		{verbs.ExpCalcOpBand, verbs.ExpCalcDataTypeUint}, {verbs.ExpCalcOpMaxloc, verbs.ExpCalcDataTypeUint}} {
		s, err := c.Allreduce(in, out, count, k.op, k.typ)
		if err != nil {
			t.Fatal(err)
		}
		for it := range iters {
			val := func(rank, i int) uint64 { return uint64(it)<<40 ^ uint64(rank+1)<<(8*uint(i%4)) ^ uint64(i*rank) }
			for i := range count {
				coll.PutElement(inB.Bytes(), i, val(r, i), uint64(r))
			}
			run(fmt.Sprintf("allreduce %v %v", k.op, k.typ), s)
			for i := range count {
				want, wantLoc := val(0, i), uint64(0)
				for q := 1; q < n; q++ {
					v := val(q, i)
					switch k.op {
					case verbs.ExpCalcOpAdd:
						want += v
					case verbs.ExpCalcOpBxor:
						want ^= v
					case verbs.ExpCalcOpBor:
						want |= v
					case verbs.ExpCalcOpBand:
						want &= v
					case verbs.ExpCalcOpMaxloc:
						if v > want {
							want, wantLoc = v, uint64(q)
						}
					}
				}
				got, loc := coll.Element(outB.Bytes(), i)
				if got != want || (k.op == verbs.ExpCalcOpMaxloc && loc != wantLoc) {
					t.Fatalf("allreduce %v %v run %d element %d: %#x (loc %d), want %#x (loc %d)", k.op, k.typ, it, i, got, loc, want, wantLoc)
				}
			}
		}
		s.Close()
	}

	const bn = 3000
	bb, bm := alloc(bn)
	for root := range n {
		s, err := c.Broadcast(root, bm, bn)
		if err != nil {
			t.Fatal(err)
		}
		for it := range iters {
			pat := func(i int) byte { return byte(i*31 + it + root) }
			for i := range bn {
				if r == root {
					bb.Bytes()[i] = pat(i)
				} else {
					bb.Bytes()[i] = 0xee
				}
			}
			run(fmt.Sprintf("broadcast from %d", root), s)
			for i := range bn {
				if bb.Bytes()[i] != pat(i) {
					t.Fatalf("broadcast from %d run %d byte %d: %d, want %d", root, it, i, bb.Bytes()[i], pat(i))
				}
			}
		}
		s.Close()
	}

	const block = 700
	gb, gm := alloc(n * block)
	g, err := c.Allgather(gm, block)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for it := range iters {
		pat := func(rank, i int) byte { return byte(rank*17 + i + it) }
		for q := range n {
			for i := range block {
				if q == r {
					gb.Bytes()[q*block+i] = pat(q, i)
				} else {
					gb.Bytes()[q*block+i] = 0
				}
			}
		}
		run("allgather", g)
		for q := range n {
			for i := range block {
				if got := gb.Bytes()[q*block+i]; got != pat(q, i) {
					t.Fatalf("allgather run %d: rank %d's byte %d is %d, want %d", it, q, i, got, pat(q, i))
				}
			}
		}
	}
}

// TestInPlaceLatePeer: an in-place allreduce between ranks on two devices
// where rank 1 posts its run 5 ms after rank 0. Rank 0's send meets RNR
// NAKs (rank 1 has no receive yet) and is sent again after each RNR
// timer, reading its input again; rank 0's result must not overwrite
// that input before the send is acknowledged, or rank 1 receives rank
// 0's result instead of its contribution (as it would on an HCA).
func TestInPlaceLatePeer(t *testing.T) {
	devs := make([]*softdev.Device, 2)
	for i := range devs {
		d, err := softdev.Open()
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		devs[i] = d
	}
	comms, err := coll.NewLocal(2, func(r int) *verbs.Context { return devs[r].Context() }, coll.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ss := make([]*coll.Schedule, 2)
	bufs := make([]*lease.Buffer, 2)
	for r, c := range comms {
		defer c.Close()
		b, _ := lease.Alloc(coll.ElementSize)
		defer b.Free()
		m, err := c.Register(b)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if ss[r], err = c.Allreduce(m, m, 1, verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint); err != nil {
			t.Fatal(err)
		}
		defer ss[r].Close()
		bufs[r] = b
	}
	for run := range 10 {
		for r := range 2 {
			coll.PutElement(bufs[r].Bytes(), 0, uint64(100*run+r+1), 0)
		}
		if err := ss[0].Post(); err != nil {
			t.Fatal(err)
		}
		for end := time.Now().Add(5 * time.Millisecond); time.Now().Before(end); {
			if _, err := ss[0].Test(); err != nil { // rank 0's device sends in its polls
				t.Fatal(err)
			}
		}
		runEveryRankPosted(t, ss, 1)
		for r := range 2 {
			if v, _ := coll.Element(bufs[r].Bytes(), 0); v != uint64(200*run+3) {
				t.Fatalf("run %d rank %d: %d, want %d", run, r, v, 200*run+3)
			}
		}
	}
}

// sumRank is this process's rank with a device of its own and an
// in-place allreduce (ADD on UINT) of one element in buf, all released
// when t ends.
func sumRank(t *testing.T, exchange coll.Exchange) (*softdev.Device, *lease.Buffer, *coll.Schedule) {
	t.Helper()
	self, _ := multiproc.Rank()
	dev := openDevice(t)
	c, err := coll.New(dev.Context(), self.Rank, self.Size, exchange, coll.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	buf, err := lease.Alloc(coll.ElementSize)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { buf.Free() })
	mem, err := c.Register(buf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	s, err := c.Allreduce(mem, mem, 1, verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return dev, buf, s
}

// runEveryRankPosted posts the runs of ranks from on (those before are
// posted already) and waits for every rank, each in its own goroutine.
func runEveryRankPosted(t *testing.T, ss []*coll.Schedule, from int) {
	t.Helper()
	errs := make([]error, len(ss))
	var wg sync.WaitGroup
	for r, s := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r >= from {
				if errs[r] = s.Post(); errs[r] != nil {
					return
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			errs[r] = s.WaitContext(ctx)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// TestRankKilledMidCollective: the last rank SIGKILLs its own process
// after posting its 4th allreduce. Every other rank's Wait must end with
// an error naming it (lost, found by a probe or told by a neighbor, or
// an error completion on a QP to it) within a bound the QP timers give:
// probeAfter, then timeout 14 × (retry_cnt 7 + 1) ≈ 0.54 s, with slack.
func TestRankKilledMidCollective(t *testing.T) {
	self, isRank := multiproc.Rank()
	for _, n := range []int{2, 3, 4, 8} {
		t.Run(fmt.Sprint(n, "ranks"), func(t *testing.T) {
			victim := n - 1
			if !isRank {
				res := multiproc.Run(t, n, multiproc.Config{Timeout: 120 * time.Second,
					Expect: func(rank int, err error) error {
						if rank == victim {
							var ee *exec.ExitError
							if errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL {
								return nil
							}
							return fmt.Errorf("the victim ended with %v, not its own SIGKILL", err)
						}
						return err
					}})
				for _, r := range res {
					i := bytes.Index(r.Output, []byte("lost rank"))
					if r.Rank == victim {
						continue
					}
					if i < 0 {
						t.Errorf("rank %d said nothing of the loss:\n%s", r.Rank, r.Output)
						continue
					}
					t.Logf("rank %d: %s", r.Rank, bytes.SplitN(r.Output[i:], []byte("\n"), 2)[0])
				}
				return
			}
			_, buf, s := sumRank(t, self.Exchange())
			for run := 0; ; run++ {
				coll.PutElement(buf.Bytes(), 0, uint64(self.Rank+1), 0)
				if err := s.Post(); err != nil {
					t.Fatalf("run %d: %v", run, err)
				}
				if self.Rank == victim && run == 3 {
					syscall.Kill(os.Getpid(), syscall.SIGKILL)
				}
				start := time.Now()
				ctx, cancel := self.Context()
				err := s.WaitContext(ctx)
				cancel()
				took := time.Since(start)
				if err == nil {
					if v, _ := coll.Element(buf.Bytes(), 0); v != uint64(n*(n+1)/2) || run > 3 {
						t.Fatalf("run %d: sum %d with a nil error", run, v)
					}
					continue
				}
				var lost *coll.PeerLostError
				if !errors.As(err, &lost) || lost.Peer != victim {
					t.Fatalf("run %d: %v: not a *coll.PeerLostError naming rank %d", run, err, victim)
				}
				if bound := 250*time.Millisecond + 8*67*time.Millisecond + 3*time.Second; took > bound {
					t.Errorf("run %d: the loss took %v to notice (bound %v)", run, took, bound)
				}
				fmt.Printf("rank %d: lost rank %d after %v: %v\n", self.Rank, victim, took.Round(time.Millisecond), err)
				return
			}
		})
	}
}

// TestSkewedRankCostsNoRNR: across 4 processes, each allreduce run has
// one rank (a different one each run) post 200 µs after the others. With
// ready messages the others' sends wait for the late rank's receives:
// no RNR NAK on any device, no packet sent again, so the run costs the
// skew and a message. Without them (the control), the same schedule
// draws RNR NAKs, each an RNR timer (min_rnr_timer 12: 0.64 ms) before
// the sender tries again. The ranks print their median run (measured:
// 0.55 ms with ready messages, 0.8 ms without; at a 50 µs skew 0.35 ms
// and 0.78 ms); the counters are what the test holds them to.
func TestSkewedRankCostsNoRNR(t *testing.T) {
	self, isRank := multiproc.Rank()
	if !isRank && testing.Short() {
		t.Skip("SKIPPED in -short: starts 4 processes twice")
	}
	const n, runs, skew = 4, 24, 200 * time.Microsecond
	for _, ready := range []bool{true, false} {
		t.Run(map[bool]string{true: "ready", false: "control"}[ready], func(t *testing.T) {
			if !isRank {
				res := multiproc.Run(t, n, multiproc.Config{Timeout: 120 * time.Second})
				for _, r := range res {
					if i := bytes.Index(r.Output, []byte("skew:")); i >= 0 {
						t.Logf("rank %d: %s", r.Rank, bytes.SplitN(r.Output[i:], []byte("\n"), 2)[0])
					}
				}
				return
			}
			if !ready {
				defer coll.WithoutReady()()
			}
			exchange := self.Exchange() // its rounds are numbered: New's, then the counters
			dev, buf, s := sumRank(t, exchange)
			var waited []time.Duration // runs another rank was late for
			for run := range runs {
				coll.PutElement(buf.Bytes(), 0, uint64(self.Rank+1), 0)
				late := run % n
				if self.Rank == late {
					// nanosleep: Go's timers round a short sleep of an
					// otherwise idle process up to a millisecond.
					ts := syscall.NsecToTimespec(int64(skew))
					_ = syscall.Nanosleep(&ts, nil)
				}
				start := time.Now()
				if err := s.Post(); err != nil {
					t.Fatalf("run %d: %v", run, err)
				}
				if err := s.Wait(); err != nil {
					t.Fatalf("run %d: %v", run, err)
				}
				if self.Rank != late {
					waited = append(waited, time.Since(start))
				}
				if v, _ := coll.Element(buf.Bytes(), 0); v != n*(n+1)/2 {
					t.Fatalf("run %d: sum %d, want %d", run, v, n*(n+1)/2)
				}
			}
			ws := dev.Wire().QPs
			// Every rank's counters, so that each rank judges the job.
			all, err := exchange(fmt.Appendf(nil, "%d %d %d", ws.RNRNaksReceived, ws.Retransmitted, ws.Timeouts))
			if err != nil {
				t.Fatal(err)
			}
			var rnr, again, timeouts uint64
			for _, b := range all {
				var x, y, z uint64
				if _, err := fmt.Sscanf(string(b), "%d %d %d", &x, &y, &z); err != nil {
					t.Fatalf("counters %q: %v", b, err)
				}
				rnr, again, timeouts = rnr+x, again+y, timeouts+z
			}
			slices.Sort(waited)
			fmt.Printf("skew: %v late rank; this rank's median run %v; the job's RNR NAKs %d, packets sent again %d (local ACK timer expiries %d)\n",
				skew, waited[len(waited)/2].Round(10*time.Microsecond), rnr, again, timeouts)
			// Packets sent again after a local ACK timer fired are the
			// load's (an ACK late past the timer on a loaded machine: it
			// happened in a full make test), not the schedule's; any other
			// resend follows a NAK, which ready messages rule out.
			switch {
			case ready && (rnr != 0 || (again != 0 && timeouts == 0)):
				t.Errorf("with ready messages: %d RNR NAKs and %d packets sent again across the job (%d local ACK timer expiries), want no NAK and no resend but after a timer", rnr, again, timeouts)
			case !ready && rnr == 0:
				t.Errorf("without ready messages a rank %v late drew no RNR NAK: the control shows nothing", skew)
			}
		})
	}
}
