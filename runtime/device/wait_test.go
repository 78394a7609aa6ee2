//go:build linux && cgo

package device_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/cmem"
	"github.com/verbsexp/verbsexp/runtime/device"
)

// nopQP is a QP connected to itself on a Waitable CQ of d, and a signaled
// NOP to post on it: each post makes one completion, which the device
// (running by itself, as device.Open(softdev) opens it) writes from its
// own thread, as an HCA would.
type nopQP struct {
	d   *device.Device
	pd  *verbs.PD
	cq  *verbs.CQ
	qp  *verbs.QP
	nop *verbs.ExpSendWR
}

func newNopQP(t testing.TB, d *device.Device) *nopQP {
	t.Helper()
	q := &nopQP{d: d}
	q.pd = must[*verbs.PD](t)(d.AllocPD())
	q.cq = must[*verbs.CQ](t)(d.CreateCQ(64, device.Waitable()))
	q.qp = must[*verbs.QP](t)(d.CreateQP(q.pd, q.cq, q.cq))
	if err := device.ConnectPair(q.qp, q.qp); err != nil {
		t.Fatal(err)
	}
	q.nop = must[*verbs.ExpSendWR](t)(cmem.New[verbs.ExpSendWR]())
	*q.nop = verbs.ExpSendWR{WRID: 7, ExpOpcode: verbs.ExpWRNop, ExpSendFlags: uint64(verbs.ExpSendSignaled)}
	t.Cleanup(func() {
		if err := errors.Join(d.DestroyQP(q.qp), d.DestroyCQ(q.cq), d.DeallocPD(q.pd), cmem.Free(q.nop)); err != nil {
			t.Error(err)
		}
	})
	return q
}

func (q *nopQP) post() error { return verbs.ExpPostSend(q.qp, q.nop, nil) }

// TestWaitWakes: a waiter asleep on the CQ returns the completion a
// post from another goroutine makes, every time.
func TestWaitWakes(t *testing.T) {
	q := newNopQP(t, open(t))
	ctx, cancel := contextWithTimeout(t, time.Minute)
	defer cancel()
	wc := make([]verbs.ExpWC, 4)
	for i := range 50 {
		got := make(chan error, 1)
		go func() {
			n, err := q.d.PollCQ(ctx, q.cq, wc[:1])
			if err == nil && (n != 1 || wc[0].WRID != 7 || wc[0].Status != verbs.WCSuccess) {
				err = fmt.Errorf("%d completions, wr_id %d, %v", n, wc[0].WRID, wc[0].Status)
			}
			got <- err
		}()
		if i%2 == 0 {
			time.Sleep(time.Millisecond) // asleep in the poller by now, most times; else polling
		}
		if err := q.post(); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("wait %d: %v", i, err)
		}
	}
}

// TestWaitContext: a wait for what never comes ends with its context's
// error, by deadline or cancellation, soon after (generously bounded:
// the machine may be loaded).
func TestWaitContext(t *testing.T) {
	q := newNopQP(t, open(t))
	wc := make([]verbs.ExpWC, 1)
	start := time.Now() // before the deadline is set, which counts from then
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if n, err := q.d.PollCQ(ctx, q.cq, wc); n != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a wait past its deadline: %d, %v; want DeadlineExceeded", n, err)
	}
	if d := time.Since(start); d < 50*time.Millisecond || d > 10*time.Second {
		t.Errorf("the deadline of 50ms ended the wait after %v", d)
	}
	ctx, cancel = context.WithCancel(t.Context())
	time.AfterFunc(20*time.Millisecond, cancel)
	if n, err := q.d.PollCQ(ctx, q.cq, wc); n != 0 || !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled wait: %d, %v; want Canceled", n, err)
	}
	// A completion that is there is returned even past the deadline; a
	// wait after a cancellation still waits (the deadline it left on the
	// file is not the next wait's).
	if err := q.post(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if n, err := q.d.PollCQ(ctx, q.cq, wc); n != 1 || err != nil {
		t.Errorf("a completion there, context done: %d, %v; want it", n, err)
	}
	ctx, cancel = context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	time.AfterFunc(50*time.Millisecond, func() { q.post() })
	if n, err := q.d.PollCQ(ctx, q.cq, wc); n != 1 || err != nil {
		t.Errorf("the wait after a cancelled one: %d, %v", n, err)
	}
}

// TestWaitEnds: destroying the CQ, or closing the device, ends a wait
// with ErrClosed instead of leaving it asleep.
func TestWaitEnds(t *testing.T) {
	for _, c := range []string{"DestroyCQ", "Close"} {
		d, err := device.Open(device.SoftdevName)
		if err != nil {
			t.Fatal(err)
		}
		cq := must[*verbs.CQ](t)(d.CreateCQ(4, device.Waitable()))
		got := make(chan error, 1)
		go func() {
			_, err := d.PollCQ(t.Context(), cq, make([]verbs.ExpWC, 1))
			got <- err
		}()
		time.Sleep(20 * time.Millisecond)
		if c == "DestroyCQ" {
			if err := d.DestroyCQ(cq); err != nil {
				t.Fatal(err)
			}
		}
		closeErr := d.Close()
		select {
		case err := <-got:
			if !errors.Is(err, device.ErrClosed) {
				t.Errorf("%s under a wait: the wait returned %v, want ErrClosed", c, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%s under a wait: still waiting a minute later", c)
		}
		if c == "DestroyCQ" && closeErr != nil {
			t.Errorf("Close after DestroyCQ: %v", closeErr)
		}
	}
}

// cpuTime is the process's user and system time so far.
func cpuTime(t testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// spinFor is the polling loop programs use today: poll, and poll again,
// until a completion or the deadline.
func spinFor(cq *verbs.CQ, wc []verbs.ExpWC, d time.Duration) (int, error) {
	for end := time.Now().Add(d); time.Now().Before(end); {
		if n, err := pollOnce(cq, wc); n > 0 || err != nil {
			return n, err
		}
	}
	return 0, nil
}

// TestWaitIdleCPU: a waiter that waits 1.5 s for nothing uses next to no
// CPU (the process's, its device's thread included: well under 5% of the
// time), where the polling loop burns what it gets of a core.
func TestWaitIdleCPU(t *testing.T) {
	q := newNopQP(t, open(t))
	wc := make([]verbs.ExpWC, 1)
	const wait = 1500 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	c0, w0 := cpuTime(t), time.Now()
	if _, err := q.d.PollCQ(ctx, q.cq, wc); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the wait: %v", err)
	}
	waitCPU, wall := cpuTime(t)-c0, time.Since(w0)
	c0 = cpuTime(t)
	if _, err := spinFor(q.cq, wc, wait); err != nil {
		t.Fatal(err)
	}
	spinCPU := cpuTime(t) - c0
	t.Logf("waiting %v: %v of CPU (%.2f%%); the polling loop for as long: %v (%.0f%%)",
		wall.Round(time.Millisecond), waitCPU, 100*waitCPU.Seconds()/wall.Seconds(), spinCPU, 100*spinCPU.Seconds()/wait.Seconds())
	if waitCPU > wall/20 || 4*waitCPU > spinCPU {
		t.Fatalf("waiting %v for nothing took %v of CPU, the polling loop %v: want well under 5%% and far below the loop's", wall, waitCPU, spinCPU)
	}
}

// BenchmarkWakeup: the time from a post (on another goroutine) to the
// return of the goroutine waiting for its completion, asleep in the
// poller (wait: PollCQ on a Waitable CQ) against the polling loop of
// today (poll: ibv_exp_poll_cq again and again), in interleaved rounds
// of 20 wake-ups each way; it reports each way's median and their ratio,
// and the CPU each used per wake-up (the waiting side's parks for 2 ms
// before each post, so that it is asleep; the polling side spins that
// long).
func BenchmarkWakeup(b *testing.B) {
	q := newNopQP(b, open(b))
	ctx := b.Context()
	ways := []struct {
		name string
		wait func(wc []verbs.ExpWC) (int, error)
	}{
		{"wait", func(wc []verbs.ExpWC) (int, error) { return q.d.PollCQ(ctx, q.cq, wc) }},
		{"poll", func(wc []verbs.ExpWC) (int, error) { return spinFor(q.cq, wc, time.Minute) }},
	}
	lat := make([][]float64, len(ways))
	cpu := make([]time.Duration, len(ways))
	const perRound = 20
	b.ResetTimer()
	for r := 0; r < b.N; r++ {
		for k := range ways {
			i := (r + k) % len(ways)
			c0 := cpuTime(b)
			for range perRound {
				ready, done := make(chan struct{}), make(chan time.Time, 1)
				wc := make([]verbs.ExpWC, 1)
				go func() {
					close(ready)
					n, err := ways[i].wait(wc)
					if err != nil || n != 1 {
						b.Errorf("%s: %d, %v", ways[i].name, n, err)
					}
					done <- time.Now()
				}()
				<-ready
				time.Sleep(2 * time.Millisecond)
				t0 := time.Now()
				if err := q.post(); err != nil {
					b.Fatal(err)
				}
				lat[i] = append(lat[i], float64((<-done).Sub(t0).Nanoseconds()))
			}
			cpu[i] += cpuTime(b) - c0
		}
	}
	b.StopTimer()
	med := make([]float64, len(ways))
	for i, w := range ways {
		slices.Sort(lat[i])
		med[i] = lat[i][len(lat[i])/2]
		b.ReportMetric(med[i], w.name+"-wake-ns")
		b.ReportMetric(float64(cpu[i].Nanoseconds())/float64(b.N*perRound), w.name+"-cpu-ns/wake")
	}
	b.ReportMetric(med[0]/med[1], "wait/poll")
	b.Logf("wake-up, medians of %d each: wait %.1f µs, poll %.1f µs (wait/poll %.2f; p90 %.1f and %.1f µs); CPU per wake-up (2 ms of waiting each): wait %v, poll %v",
		len(lat[0]), med[0]/1e3, med[1]/1e3, med[0]/med[1], lat[0][len(lat[0])*9/10]/1e3, lat[1][len(lat[1])*9/10]/1e3,
		cpu[0]/time.Duration(b.N*perRound), cpu[1]/time.Duration(b.N*perRound))
}
