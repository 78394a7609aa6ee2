//go:build linux && cgo

package coll_test

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/coll"
	"github.com/verbsexp/verbsexp/runtime/coll/collsoft"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/softdev"
)

// testWorld is n ranks on a device of their own. Cleanup closes the
// world and the device and fails the test unless neither reports
// anything left open, and unless every lease Buffer the test allocated
// has been freed.
func testWorld(t *testing.T, n int, opts coll.Options) (*softdev.Device, *collsoft.World) {
	t.Helper()
	live := lease.LiveBuffers()
	dev, err := softdev.Open()
	if err != nil {
		t.Fatal(err)
	}
	w, err := collsoft.New(dev, n, opts)
	if err != nil {
		dev.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("World.Close: %v", err)
		}
		if err := dev.Close(); err != nil {
			t.Errorf("softdev Close: %v", err)
		}
		if now := lease.LiveBuffers(); now != live {
			t.Errorf("lease.LiveBuffers is %d after the test, %d before", now, live)
		}
	})
	return dev, w
}

// memory is a registered Buffer of n bytes; cleanup closes and frees it
// (before the world's cleanup, which runs later).
func memory(t *testing.T, c *coll.Comm, n int) *coll.Memory {
	t.Helper()
	buf, err := lease.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Register(buf)
	if err != nil {
		buf.Free()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil && !strings.Contains(err.Error(), "closed twice") {
			t.Errorf("Memory.Close: %v", err)
		}
		if err := buf.Free(); err != nil {
			t.Errorf("Buffer.Free: %v", err)
		}
	})
	return m
}

// wantErr fails unless err wraps target and its message says every one
// of says.
func wantErr(t *testing.T, what string, err, target error, says ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want %v", what, target)
		return
	}
	if !errors.Is(err, target) {
		t.Errorf("%s: %v, want an error wrapping %v", what, err, target)
	}
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s: %q does not say %q", what, err, s)
		}
	}
}

// TestBufferTooSmall: every collective refuses memory smaller than it
// needs, naming which memory, its size and the need; and arguments out
// of range.
func TestBufferTooSmall(t *testing.T) {
	const n = 4
	_, w := testWorld(t, n, coll.Options{})
	c := w.Comms[1]
	e3 := 3 * coll.ElementSize
	small, big := memory(t, c, e3-1), memory(t, c, n*64)
	add, uint_ := verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint
	for _, tc := range []struct {
		what  string
		build func() (*coll.Schedule, error)
		says  []string
	}{
		{"allreduce input", func() (*coll.Schedule, error) { return c.Allreduce(small, big, 3, add, uint_) },
			[]string{"input memory is 47 bytes, the collective needs 48"}},
		{"allreduce output", func() (*coll.Schedule, error) { return c.Allreduce(big, small, 3, add, uint_) },
			[]string{"output memory is 47 bytes, the collective needs 48"}},
		{"allreduce in place", func() (*coll.Schedule, error) { return c.Allreduce(small, small, 3, add, uint_) },
			[]string{"memory is 47 bytes, the collective needs 48"}},
		{"broadcast", func() (*coll.Schedule, error) { return c.Broadcast(0, small, e3) },
			[]string{"output memory is 47 bytes, the collective needs 48"}},
		{"allgather", func() (*coll.Schedule, error) { return c.Allgather(big, 65) },
			[]string{fmt.Sprintf("output memory is %d bytes, the collective needs %d", n*64, n*65)}},
		{"allreduce count 0", func() (*coll.Schedule, error) { return c.Allreduce(big, big, 0, add, uint_) },
			[]string{"count ≥ 1"}},
		{"allreduce nil memory", func() (*coll.Schedule, error) { return c.Allreduce(nil, big, 1, add, uint_) },
			[]string{"need input and output memories"}},
		{"broadcast root -1", func() (*coll.Schedule, error) { return c.Broadcast(-1, big, 8) },
			[]string{"root -1 of 4 ranks"}},
		{"broadcast root 4", func() (*coll.Schedule, error) { return c.Broadcast(n, big, 8) },
			[]string{"root 4 of 4 ranks"}},
		{"broadcast 0 bytes", func() (*coll.Schedule, error) { return c.Broadcast(0, big, 0) },
			[]string{"n ≥ 1"}},
		{"allgather block 0", func() (*coll.Schedule, error) { return c.Allgather(big, 0) },
			[]string{"block ≥ 1"}},
		{"allgather nil", func() (*coll.Schedule, error) { return c.Allgather(nil, 8) },
			[]string{"need a memory"}},
	} {
		s, err := tc.build()
		if s != nil {
			t.Errorf("%s: a schedule despite %v", tc.what, err)
			s.Close()
		}
		wantErr(t, tc.what, err, syscall.EINVAL, tc.says...)
	}
	// The memories stay usable: a build that fitted works.
	s, err := c.Allreduce(big, big, 3, add, uint_)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Error(err)
	}
}

// TestTooDeepForTheQueues: an allreduce of more elements than
// Options.Depth lets one run post on a queue is refused, naming Depth.
func TestTooDeepForTheQueues(t *testing.T) {
	const n, depth = 3, 4
	_, w := testWorld(t, n, coll.Options{Depth: depth})
	c := w.Comms[0]
	m := memory(t, c, (depth+1)*coll.ElementSize)
	s, err := c.Allreduce(m, m, depth+1, verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint)
	if s != nil {
		s.Close()
	}
	wantErr(t, "allreduce of Depth+1 elements", err, syscall.EINVAL, "Options.Depth", fmt.Sprint(depth+1))
	s, err = c.Allreduce(m, m, depth, verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint)
	if err != nil {
		t.Fatalf("allreduce of Depth elements: %v", err)
	}
	s.Close()
}

// TestCalcTheDeviceLacks: an op or type outside the device's calc
// capabilities is EOPNOTSUPP naming both (MAXLOC is accepted on UINT
// only; an unknown op or type is refused, not passed to the device).
func TestCalcTheDeviceLacks(t *testing.T) {
	_, w := testWorld(t, 2, coll.Options{})
	c := w.Comms[0]
	m := memory(t, c, coll.ElementSize)
	for _, tc := range []struct {
		op  verbs.ExpCalcOp
		typ verbs.ExpCalcDataType
	}{
		{verbs.ExpCalcOpMaxloc, verbs.ExpCalcDataTypeInt},
		{verbs.ExpCalcOpMaxloc, verbs.ExpCalcDataTypeFloat},
		{verbs.ExpCalcOpNumber, verbs.ExpCalcDataTypeUint},
		{verbs.ExpCalcOp(99), verbs.ExpCalcDataTypeInt},
		{verbs.ExpCalcOp(1 << 20), verbs.ExpCalcDataTypeInt},
		{verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeNumber},
		{verbs.ExpCalcOpAdd, verbs.ExpCalcDataType(200)},
	} {
		s, err := c.Allreduce(m, m, 1, tc.op, tc.typ)
		if s != nil {
			s.Close()
		}
		wantErr(t, fmt.Sprintf("%v on %v", tc.op, tc.typ), err, syscall.EOPNOTSUPP,
			"cannot reduce", tc.op.String(), tc.typ.String())
	}
}

// TestRanksOnTwoDevices: ranks on two softdev devices (two hosts, as
// far as their QPs know: they connect over the wire with their GIDs)
// form one communicator, and every rank gets the whole sum; neither
// device is left holding anything.
func TestRanksOnTwoDevices(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		devs := make([]*softdev.Device, 2)
		for i := range devs {
			d, err := softdev.Open()
			if err != nil {
				t.Fatal(err)
			}
			devs[i] = d
		}
		comms, err := coll.NewLocal(n, func(r int) *verbs.Context { return devs[r%2].Context() }, coll.Options{})
		if err != nil {
			t.Fatalf("N=%d: %v", n, err)
		}
		w := &collsoft.World{Comms: comms}
		ss, mems, bufs := allreduceEveryRank(t, w, 1)
		for r := range n {
			coll.PutElement(bufs[2*r].Bytes(), 0, uint64(r+1), 0)
		}
		runEveryRank(t, ss)
		for r := range n {
			if v, _ := coll.Element(bufs[2*r+1].Bytes(), 0); v != uint64(n*(n+1)/2) {
				t.Errorf("N=%d rank %d (device %d): sum %d, want %d", n, r, r%2, v, n*(n+1)/2)
			}
		}
		for _, s := range ss {
			s.Close()
		}
		for _, m := range mems {
			m.Close()
		}
		for _, c := range comms {
			if err := c.Close(); err != nil {
				t.Errorf("N=%d: %v", n, err)
			}
		}
		for _, b := range bufs {
			b.Free()
		}
		for i, d := range devs {
			if err := d.Close(); err != nil {
				t.Errorf("N=%d device %d: %v", n, i, err)
			}
		}
	}
}

// runEveryRank posts every rank's run and waits for all of them, each
// from its own goroutine, as separate processes would.
func runEveryRank(t *testing.T, ss []*coll.Schedule) {
	t.Helper()
	runEveryRankPosted(t, ss, 0)
}

// flight. Once the run is complete, either may post.
func TestPostInFlight(t *testing.T) {
	const n = 3
	_, w := testWorld(t, n, coll.Options{})
	var bars, gathers []*coll.Schedule
	for _, c := range w.Comms {
		b, err := c.Barrier()
		if err != nil {
			t.Fatal(err)
		}
		g, err := c.Allgather(memory(t, c, n*8), 8)
		if err != nil {
			t.Fatal(err)
		}
		bars, gathers = append(bars, b), append(gathers, g)
	}
	defer func() {
		for r := range n {
			if err := bars[r].Close(); err != nil {
				t.Error(err)
			}
			if err := gathers[r].Close(); err != nil {
				t.Error(err)
			}
		}
	}()
	for _, s := range bars {
		if err := s.Post(); err != nil {
			t.Fatal(err)
		}
	}
	wantErr(t, "the same schedule again", bars[1].Post(), coll.ErrInFlight, "barrier posted while a run of barrier is in flight")
	wantErr(t, "another schedule", gathers[1].Post(), coll.ErrInFlight, "allgather posted while a run of barrier is in flight")
	wantErr(t, "as EBUSY", gathers[1].Post(), syscall.EBUSY)
	wantErr(t, "close in flight", bars[1].Close(), coll.ErrInFlight)
	_, err := gathers[1].Test()
	wantErr(t, "Test of a schedule not in flight", err, syscall.EINVAL, "not in flight")
	for r, s := range bars {
		if err := s.Wait(); err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for _, s := range gathers {
		if err := s.Post(); err != nil {
			t.Fatalf("after the barrier: %v", err)
		}
	}
	for _, s := range gathers {
		if err := s.Wait(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCloseReportsLeaks: closing a communicator with schedules and
// memories still open closes them and says so (*LeakError with the
// counts), a run in flight included; afterwards the device holds
// nothing, the buffers are free to free, and the closed objects refuse
// further use.
func TestCloseReportsLeaks(t *testing.T) {
	live := lease.LiveBuffers()
	dev, err := softdev.Open()
	if err != nil {
		t.Fatal(err)
	}
	const n = 3
	w, err := collsoft.New(dev, n, coll.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ars, mems, bufs := allreduceEveryRank(t, w, 4)
	var scheds []*coll.Schedule
	for r, c := range w.Comms {
		b, err := c.Barrier()
		if err != nil {
			t.Fatal(err)
		}
		scheds = append(scheds, ars[r], b)
	}
	// Rank 2's barrier is in flight (no other rank posted) when it closes.
	if err := scheds[5].Post(); err != nil {
		t.Fatal(err)
	}
	for r, c := range w.Comms {
		var leak *coll.LeakError
		err := c.Close()
		if !errors.As(err, &leak) || leak.Rank != r || leak.Schedules != 2 || leak.Memories != 2 {
			t.Errorf("rank %d: Close: %v, want a LeakError of 2 schedules and 2 memories", r, err)
		}
		wantErr(t, "Close again", c.Close(), coll.ErrClosed)
		_, err = c.Barrier()
		wantErr(t, "Barrier after Close", err, coll.ErrClosed)
		_, err = c.Register(bufs[0])
		wantErr(t, "Register after Close", err, coll.ErrClosed)
	}
	wantErr(t, "Post of a schedule its communicator closed", scheds[0].Post(), coll.ErrClosed, "post of allreduce")
	_, err = scheds[0].Test()
	wantErr(t, "Test of a schedule its communicator closed", err, coll.ErrClosed, "Test of allreduce")
	wantErr(t, "Close of a schedule its communicator closed", scheds[0].Close(), syscall.EINVAL, "closed twice")
	wantErr(t, "Close of a memory its communicator closed", mems[0].Close(), syscall.EINVAL, "closed twice")
	if err := dev.Close(); err != nil {
		t.Errorf("softdev after the leaks were closed: %v", err)
	}
	for i, b := range bufs {
		if err := b.Free(); err != nil {
			t.Errorf("buffer %d: %v", i, err)
		}
	}
	if now := lease.LiveBuffers(); now != live {
		t.Errorf("lease.LiveBuffers %d, was %d before", now, live)
	}
}

// TestMemoryInUse: a Memory cannot be closed, nor its Buffer freed,
// while a schedule uses it (EBUSY, lease.ErrBusy); once the schedule is
// closed both can.
func TestMemoryInUse(t *testing.T) {
	_, w := testWorld(t, 2, coll.Options{})
	c := w.Comms[0]
	buf, err := lease.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Register(buf)
	if err != nil {
		t.Fatal(err)
	}
	s1, err := c.Broadcast(0, m, 64)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := c.Allgather(m, 32)
	if err != nil {
		t.Fatal(err)
	}
	wantErr(t, "Memory.Close with two schedules on it", m.Close(), syscall.EBUSY, "used by 2 schedules")
	wantErr(t, "Buffer.Free while leased", buf.Free(), lease.ErrBusy)
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "Memory.Close with one schedule on it", m.Close(), syscall.EBUSY, "used by 1 schedule: close them first")
	wantErr(t, "Buffer.Free while leased by one", buf.Free(), lease.ErrBusy)
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "schedule closed twice", s2.Close(), syscall.EINVAL, "closed twice")
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "Memory closed twice", m.Close(), syscall.EINVAL, "closed twice")
	if err := buf.Free(); err != nil {
		t.Fatal(err)
	}
	_, err = c.Register(buf)
	wantErr(t, "Register a freed buffer", err, syscall.EINVAL, "freed buffer")
	_, err = c.Register(nil)
	wantErr(t, "Register nil", err, syscall.EINVAL)
}

// TestMemoryOfAnotherComm: a schedule refuses a Memory registered with
// another communicator (its MR is in another PD) and a closed one.
func TestMemoryOfAnotherComm(t *testing.T) {
	_, w := testWorld(t, 2, coll.Options{})
	_, w2 := testWorld(t, 2, coll.Options{})
	c := w.Comms[0]
	own := memory(t, c, 64)
	for _, other := range []*coll.Memory{memory(t, w.Comms[1], 64), memory(t, w2.Comms[0], 64)} {
		for what, build := range map[string]func() (*coll.Schedule, error){
			"allreduce input":  func() (*coll.Schedule, error) { return c.Allreduce(other, own, 1, 0, 1) },
			"allreduce output": func() (*coll.Schedule, error) { return c.Allreduce(own, other, 1, 0, 1) },
			"broadcast":        func() (*coll.Schedule, error) { return c.Broadcast(0, other, 8) },
			"allgather":        func() (*coll.Schedule, error) { return c.Allgather(other, 8) },
		} {
			s, err := build()
			if s != nil {
				s.Close()
			}
			wantErr(t, what, err, syscall.EINVAL, "another communicator")
		}
	}
	if err := own.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := c.Broadcast(0, own, 8)
	wantErr(t, "a closed memory", err, syscall.EINVAL, "closed Memory")
}

// TestNewRefuses: New's arguments, and every way the exchange can fail
// or lie, are errors naming the problem; after each, the device holds
// nothing (what New created is destroyed).
func TestNewRefuses(t *testing.T) {
	dev, err := softdev.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := dev.Close(); err != nil {
			t.Errorf("softdev after the refused New calls: %v", err)
		}
	}()
	ctx := dev.Context()
	self := coll.NewInProcess(1).For(0)
	for _, tc := range []struct {
		what     string
		ctx      *verbs.Context
		rank, n  int
		exchange coll.Exchange
		opts     coll.Options
		target   error
		says     string
	}{
		{"nil context", nil, 0, 1, self, coll.Options{}, syscall.EINVAL, "nil context"},
		{"rank -1", ctx, -1, 2, self, coll.Options{}, syscall.EINVAL, "rank -1 of 2"},
		{"rank = size", ctx, 2, 2, self, coll.Options{}, syscall.EINVAL, "rank 2 of 2"},
		{"size 0", ctx, 0, 0, self, coll.Options{}, syscall.EINVAL, "rank 0 of 0"},
		{"nil exchange", ctx, 0, 1, nil, coll.Options{}, syscall.EINVAL, "nil exchange"},
		{"negative depth", ctx, 0, 1, self, coll.Options{Depth: -1}, syscall.EINVAL, "Depth -1"},
		{"huge depth", ctx, 0, 1, self, coll.Options{Depth: 1<<20 + 1}, syscall.EINVAL, "Depth"},
		{"port 2", ctx, 0, 1, self, coll.Options{Port: 2}, syscall.EINVAL, "port 2"},
		{"exchange fails", ctx, 0, 1, func([]byte) ([][]byte, error) { return nil, syscall.ECONNRESET },
			coll.Options{}, syscall.ECONNRESET, "exchange"},
		{"exchange returns too few", ctx, 0, 2, func(b []byte) ([][]byte, error) { return [][]byte{b}, nil },
			coll.Options{}, nil, "exchange returned 1 endpoint for 2 ranks"},
		{"exchange returns garbage", ctx, 0, 1, func([]byte) ([][]byte, error) { return [][]byte{[]byte("garbage")}, nil },
			coll.Options{}, coll.ErrBadEndpoint, "endpoint 0"},
		{"exchange returns another rank's", ctx, 0, 1, relabel(func(e *coll.Endpoint) { e.Rank = 3 }),
			coll.Options{}, nil, "says rank 3 of 1"},
		{"exchange returns another size", ctx, 0, 1, relabel(func(e *coll.Endpoint) { e.Size = 7 }),
			coll.Options{}, nil, "the exchange mixed communicators"},
		{"endpoint with an extra peer", ctx, 0, 1, relabel(func(e *coll.Endpoint) {
			e.Peers, e.Watch, e.Ready = append(e.Peers, coll.QPAddr{Rank: 0}), append(e.Watch, coll.QPAddr{Rank: 0}), append(e.Ready, coll.QPAddr{Rank: 0})
		}),
			coll.Options{}, nil, "lists 1 peer, want 0"},
		{"other link layer", ctx, 0, 1, relabel(func(e *coll.Endpoint) { e.LinkLayer = verbs.LinkLayerInfiniband }),
			coll.Options{}, coll.ErrOtherDevice, "link layer"},
		{"exchange returns this rank another endpoint", ctx, 0, 1, relabel(func(e *coll.Endpoint) { e.Manager.PSN ^= 1 }),
			coll.Options{}, coll.ErrConflict, "not the one it sent"},
		{"second round fails", ctx, 0, 1, rounds(self, func() ([][]byte, error) { return nil, syscall.ETIMEDOUT }),
			coll.Options{}, syscall.ETIMEDOUT, "exchange"},
		{"second round mixes rounds", ctx, 0, 1, rounds(self, func() ([][]byte, error) { return [][]byte{[]byte("vxep")}, nil }),
			coll.Options{}, nil, "mixed rounds"},
		{"second round: the mark without a digest", ctx, 0, 1, rounds(self, func() ([][]byte, error) { return [][]byte{[]byte("vxep connected")}, nil }),
			coll.Options{}, nil, "mixed rounds"},
		{"second round: another view", ctx, 0, 1, rounds(self, func() ([][]byte, error) {
			return [][]byte{append([]byte("vxep connected"), make([]byte, 32)...)}, nil
		}), coll.Options{}, coll.ErrConflict, "second round returned a digest for this rank that is not the one it sent"},
	} {
		c, err := coll.New(tc.ctx, tc.rank, tc.n, tc.exchange, tc.opts)
		if c != nil {
			t.Errorf("%s: a communicator despite %v", tc.what, err)
			c.Close()
			continue
		}
		if tc.target == nil {
			tc.target = err // only the message is checked
			if err == nil {
				tc.target = errors.New("an error")
			}
		}
		wantErr(t, tc.what, err, tc.target, tc.says)
	}
}

// relabel is a one-rank exchange that returns the rank's endpoint
// changed by edit.
func relabel(edit func(*coll.Endpoint)) coll.Exchange {
	return func(b []byte) ([][]byte, error) {
		var e coll.Endpoint
		if err := e.UnmarshalBinary(b); err != nil {
			return nil, err
		}
		edit(&e)
		out, err := e.MarshalBinary()
		return [][]byte{out}, err
	}
}

// rounds is an exchange whose first round is first's and whose second
// returns second().
func rounds(first coll.Exchange, second func() ([][]byte, error)) coll.Exchange {
	n := 0
	return func(b []byte) ([][]byte, error) {
		if n++; n == 1 {
			return first(b)
		}
		return second()
	}
}

// TestRunErrorBreaksComm: a run that fails (rank 1 is gone: its
// communicator closed, its QPs destroyed, so rank 0's send is never
// acknowledged) is a *RunError naming the rank, the schedule, the CQ and
// the status; the communicator refuses further posts, saying why.
func TestRunErrorBreaksComm(t *testing.T) {
	dev, w := testWorld(t, 2, coll.Options{})
	_ = dev
	b0, err := w.Comms[0].Barrier()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Comms[1].Close(); err != nil {
		t.Fatal(err)
	}
	w.Comms[1] = nil
	if err := b0.Post(); err != nil {
		t.Fatal(err)
	}
	err = b0.Wait()
	var re *coll.RunError
	if !errors.As(err, &re) {
		t.Fatalf("Wait with the peer gone: %v, want a *coll.RunError", err)
	}
	if re.Rank != 0 || re.Schedule != "barrier" || re.Status == verbs.WCSuccess || re.CQ == "" {
		t.Errorf("RunError %+v: want rank 0, barrier, a CQ and a failed status", re)
	}
	if !strings.Contains(err.Error(), "rank 0: barrier") {
		t.Errorf("RunError does not name the rank and schedule: %v", err)
	}
	t.Log(err)
	wantErr(t, "Post after a failed run", b0.Post(), re, "an earlier run failed")
	if err := b0.Close(); err != nil {
		t.Error(err)
	}
}

// TestInProcessExchange: the in-process exchange refuses a rank it does
// not have, and Fail releases every rank waiting in a round with the
// failure instead of leaving it blocked.
func TestInProcessExchange(t *testing.T) {
	x := coll.NewInProcess(3)
	_, err := x.For(3)([]byte("x"))
	if err == nil || !strings.Contains(err.Error(), "has no rank 3") {
		t.Errorf("rank 3 of 3: %v", err)
	}
	got := make(chan error, 2)
	for r := range 2 {
		go func() {
			_, err := x.For(r)([]byte{byte(r)})
			got <- err
		}()
	}
	x.Fail(2, syscall.ENODEV)
	for range 2 {
		if err := <-got; !errors.Is(err, syscall.ENODEV) || !strings.Contains(err.Error(), "rank 2 failed") {
			t.Errorf("a rank waiting when rank 2 failed: %v", err)
		}
	}
	if _, err := x.For(0)(nil); !errors.Is(err, syscall.ENODEV) {
		t.Errorf("a round after the failure: %v", err)
	}
}
