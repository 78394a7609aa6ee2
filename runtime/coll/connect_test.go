//go:build linux && cgo

package coll_test

import (
	"sync"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/coll"
	"github.com/verbsexp/verbsexp/runtime/coll/collsoft"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/softdev"
)

// TestPostRightAfterNew: a rank may post as soon as its own New
// returns, even when a peer connects its QPs late. Rank 1 here dawdles
// between learning the endpoints and connecting; without New's second
// exchange round, rank 0's first send reaches rank 1's QP before it is
// ready and fails (softdev: IBV_WC_RETRY_EXC_ERR at once).
func TestPostRightAfterNew(t *testing.T) {
	dev := openDevice(t)
	const size = 2
	x := coll.NewInProcess(size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for rank := range size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			exchange, rounds := x.For(rank), 0
			if rank == 1 {
				exchange = func(local []byte) ([][]byte, error) {
					all, err := x.For(rank)(local)
					if rounds++; rounds == 1 {
						time.Sleep(50 * time.Millisecond) // connects late
					}
					return all, err
				}
			}
			c, err := coll.New(dev.Context(), rank, size, exchange, coll.Options{})
			if err != nil {
				errs[rank] = err
				x.Fail(rank, err)
				return
			}
			defer func() {
				if err := c.Close(); err != nil && errs[rank] == nil {
					errs[rank] = err
				}
			}()
			s, err := c.Barrier()
			if err != nil {
				errs[rank] = err
				return
			}
			for range 3 {
				if err := s.Post(); err != nil {
					errs[rank] = err
					return
				}
				if err := s.Wait(); err != nil {
					errs[rank] = err
					return
				}
			}
			errs[rank] = s.Close()
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestScheduleCloseEndsItsLeases: closing a schedule that has run ends
// the leases it held on its memories and scratch without reporting them
// as leaks (they are the schedule's for its life, not per run), and its
// memories can then be closed and their buffers freed.
func TestScheduleCloseEndsItsLeases(t *testing.T) {
	dev, err := softdev.Open()
	if err != nil {
		t.Fatal(err)
	}
	w, err := collsoft.New(dev, 5, coll.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ss, mems, bufs := allreduceEveryRank(t, w, 3) // with a scratch (5 ranks: an extra one)
	for _, s := range ss {
		if err := s.Post(); err != nil {
			t.Fatal(err)
		}
	}
	for r, s := range ss {
		if err := s.Wait(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("rank %d: schedule Close: %v", r, err)
		}
	}
	for i, m := range mems {
		if err := m.Close(); err != nil {
			t.Errorf("memory %d: Close: %v", i, err)
		}
		if err := bufs[i].Free(); err != nil {
			t.Errorf("buffer %d: Free: %v", i, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Error(err)
	}
	if err := dev.Close(); err != nil {
		t.Error(err)
	}
}

// allreduceEveryRank registers an input and an output memory of count
// elements on every rank of w and builds an ADD UINT allreduce over them:
// the schedules by rank, then the memories and their buffers, in and out
// by rank.
func allreduceEveryRank(t *testing.T, w *collsoft.World, count int) ([]*coll.Schedule, []*coll.Memory, []*lease.Buffer) {
	t.Helper()
	var ss []*coll.Schedule
	var bufs []*lease.Buffer
	var mems []*coll.Memory
	for _, c := range w.Comms {
		for range 2 {
			b, err := lease.Alloc(count * coll.ElementSize)
			if err != nil {
				t.Fatal(err)
			}
			m, err := c.Register(b)
			if err != nil {
				t.Fatal(err)
			}
			bufs, mems = append(bufs, b), append(mems, m)
		}
		in, out := mems[len(mems)-2], mems[len(mems)-1]
		s, err := c.Allreduce(in, out, count, verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint)
		if err != nil {
			t.Fatal(err)
		}
		ss = append(ss, s)
	}
	return ss, mems, bufs
}
