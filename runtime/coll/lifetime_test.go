//go:build linux && cgo

package coll_test

import (
	"errors"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/coll"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/softdev"
)

// TestCloseDuringWait: Comm.Close while other goroutines are in
// Schedule.Wait, Test and Post of the run it abandons (as the docs
// allow: Comm's methods may be called from several goroutines, and
// Close abandons a run in flight). Each call returns, with an error
// once the communicator is closed; none reads the schedule's C state
// after Close freed it (that was a SIGSEGV within a few rounds, and a
// data race under -race).
func TestCloseDuringWait(t *testing.T) {
	rounds := 200
	if testing.Short() {
		rounds = 40
	}
	dev, err := softdev.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	for r := range rounds {
		// No Progress: Wait polls, as on an HCA, for a run that rank 1
		// never joins.
		comms, err := coll.NewLocal(2, func(int) *verbs.Context { return dev.Context() }, coll.Options{})
		if err != nil {
			t.Fatal(err)
		}
		s, err := comms[0].Barrier()
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Post(); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make([]error, 3)
		for g, call := range []func() error{
			s.Wait,
			func() error {
				for {
					if _, err := s.Test(); err != nil {
						return err
					}
				}
			},
			func() error {
				for {
					if err := s.Post(); !errors.Is(err, coll.ErrInFlight) {
						return err
					}
				}
			},
		} {
			wg.Add(1)
			go func() { defer wg.Done(); errs[g] = call() }()
		}
		time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
		var le *coll.LeakError
		if err := comms[0].Close(); !errors.As(err, &le) || le.Schedules != 1 {
			t.Fatalf("round %d: Close with the schedule open: %v, want a LeakError for it", r, err)
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatalf("round %d: Wait, Test or Post still running a minute after Close", r)
		}
		for g, err := range errs {
			if !errors.Is(err, coll.ErrClosed) {
				t.Fatalf("round %d: %s across Close: %v, want coll.ErrClosed", r, []string{"Wait", "Test", "Post"}[g], err)
			}
		}
		if err := comms[1].Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCopiedHandles: a copy of a Comm, Schedule or Memory is the same
// object: closing the copy closes it, and the original's Close is then
// the error a second Close gives (a copied Schedule's second Close used
// to free its C state again; a copied Comm's, to destroy its queues
// again); a Memory's copy closes it (it used to say "closed twice").
func TestCopiedHandles(t *testing.T) {
	c := singleRank(t)
	buf, err := lease.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	m, err := c.Register(buf)
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Allreduce(m, m, 2, verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint)
	if err != nil {
		t.Fatal(err)
	}
	scp := *s
	if err := scp.Post(); err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(); err != nil {
		t.Fatalf("Wait through the original of a run the copy posted: %v", err)
	}
	if err := scp.Close(); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "Schedule Close after its copy's", s.Close(), syscall.EINVAL, "closed twice")
	wantErr(t, "Post after the copy's Close", s.Post(), syscall.EINVAL, "closed schedule")
	mcp := *m
	if err := mcp.Close(); err != nil {
		t.Fatalf("Close of a Memory's copy: %v", err)
	}
	wantErr(t, "Memory Close after its copy's", m.Close(), syscall.EINVAL, "closed twice")
	ccp := *c
	if _, err := ccp.Barrier(); err != nil {
		t.Fatal(err)
	}
	var le *coll.LeakError
	if err := ccp.Close(); !errors.As(err, &le) || le.Schedules != 1 {
		t.Fatalf("Close of a Comm's copy: %v, want the barrier it built as a leak", err)
	}
	wantErr(t, "Comm Close after its copy's", c.Close(), coll.ErrClosed)
	var zs coll.Schedule
	wantErr(t, "zero Schedule Post", zs.Post(), syscall.EINVAL, "nil Schedule")
	wantErr(t, "zero Schedule Wait", zs.Wait(), syscall.EINVAL, "nil Schedule")
	var zm coll.Memory
	wantErr(t, "zero Memory Close", zm.Close(), syscall.EINVAL, "nil Memory")
}

// openDevice opens a softdev device that cleanup closes (an error there
// fails t).
func openDevice(t *testing.T) *softdev.Device {
	t.Helper()
	dev, err := softdev.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dev.Close(); err != nil {
			t.Error(err)
		}
	})
	return dev
}

// singleRank is a one-rank communicator on a device of its own, which
// cleanup closes.
func singleRank(t *testing.T) *coll.Comm {
	t.Helper()
	dev := openDevice(t)
	c, err := coll.New(dev.Context(), 0, 1, coll.NewInProcess(1).For(0), coll.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
