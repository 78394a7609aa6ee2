//go:build linux && cgo

package coll_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/runtime/coll"
	"github.com/verbsexp/verbsexp/runtime/coll/collsoft"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/softdev"
)

// TestDroppedWaitIsADeadlock removes one WAIT from one rank's schedule
// (every wait of the plan in turn, on every rank up to N=6 and on a few
// at N=8 and 12, for each collective) and checks that Wait on that rank
// returns, within a time limit, a *collsoft.Deadlock naming the rank,
// its manager QP, its completion CQ and the count the done wait needs
// (one CQE short), while the other ranks' runs complete. Closing the
// broken rank's communicator abandons the run, reports the schedule as
// a leak and leaves nothing behind on the device.
func TestDroppedWaitIsADeadlock(t *testing.T) {
	cases := 0
	for _, n := range []int{1, 2, 3, 5, 6, 8, 12} {
		ranks := []int{0, n / 2, n - 1}
		if n <= 6 {
			ranks = nil
			for r := range n {
				ranks = append(ranks, r)
			}
		}
		for _, kind := range []string{"barrier", "allreduce", "broadcast", "allgather"} {
			for _, broken := range ranks {
				// A plan without waits (a broadcast's root, which only
				// sends) has nothing to remove.
				for i := range coll.PlanWaits(kind, broken, n, count, 1%n, block) {
					droppedWait(t, n, kind, broken, i)
					cases++
					if t.Failed() {
						return
					}
				}
			}
		}
	}
	t.Logf("%d broken schedules, each reported as a deadlock", cases)
}

// The collectives' sizes in TestDroppedWaitIsADeadlock: allreduce
// elements, allgather block bytes (and broadcast bytes).
const count, block = 2, 8

// droppedWait runs one case.
func droppedWait(t *testing.T, n int, kind string, broken, drop int) {
	t.Helper()
	name := fmt.Sprintf("N=%d %s: rank %d without wait %d", n, kind, broken, drop)
	dev, err := softdev.Open()
	if err != nil {
		t.Fatal(err)
	}
	w, err := collsoft.New(dev, n, coll.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var ss []*coll.Schedule
	var mems []*coll.Memory
	var bufs []*lease.Buffer
	for r, c := range w.Comms {
		buf, err := lease.Alloc(max(n*block, count*coll.ElementSize))
		if err != nil {
			t.Fatal(err)
		}
		m, err := c.Register(buf)
		if err != nil {
			t.Fatal(err)
		}
		bufs, mems = append(bufs, buf), append(mems, m)
		i := -1
		if r == broken {
			i = drop
		}
		s, err := coll.DropWait(c, kind, i, m, m, count, 1%n, block)
		if err != nil {
			t.Fatalf("%s: build rank %d: %v", name, r, err)
		}
		ss = append(ss, s)
	}
	for r, s := range ss {
		if err := s.Post(); err != nil {
			t.Fatalf("%s: rank %d: Post: %v", name, r, err)
		}
	}
	errs := make(chan error, n)
	go func() {
		for _, s := range ss {
			errs <- s.Wait()
		}
	}()
	var brokenErr error
	for r := range ss {
		select {
		case err := <-errs:
			if r == broken {
				brokenErr = err
			} else if err != nil {
				t.Errorf("%s: rank %d: Wait: %v", name, r, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%s: rank %d's Wait has not returned after a minute: a broken schedule hangs", name, r)
		}
	}
	want := coll.DoneCount(ss[broken])
	var d *collsoft.Deadlock
	if !errors.As(brokenErr, &d) {
		t.Fatalf("%s: Wait: %v, want a *collsoft.Deadlock", name, brokenErr)
	}
	mgr := fmt.Sprintf("rank %d's manager", broken)
	cq := fmt.Sprintf("rank %d's completion CQ", broken)
	found := false
	for _, st := range d.Stuck {
		if st.QP == mgr {
			found = true
			if st.Rank != broken || st.CQ != cq || int(st.Count) != want || st.Produced-st.Base != uint64(want-1) || st.QPNum != w.Comms[broken].Endpoints()[broken].Manager.QPNum {
				t.Errorf("%s: stuck manager %+v, want rank %d waiting on %s for %d CQEs, %d produced", name, st, broken, cq, want, want-1)
			}
		}
	}
	if !found {
		t.Errorf("%s: the deadlock does not name %s: %v", name, mgr, d)
	}
	for _, s := range []string{mgr, cq, fmt.Sprintf("for %d CQEs", want)} {
		if !strings.Contains(brokenErr.Error(), s) {
			t.Errorf("%s: Wait's error does not say %q: %v", name, s, brokenErr)
		}
	}
	for r, s := range ss {
		if r != broken {
			if err := s.Close(); err != nil {
				t.Error(err)
			}
		}
	}
	if err := ss[broken].Close(); !errors.Is(err, coll.ErrInFlight) {
		t.Errorf("%s: Close of the stuck schedule: %v, want ErrInFlight", name, err)
	}
	for r, m := range mems {
		if r != broken {
			if err := m.Close(); err != nil {
				t.Error(err)
			}
		}
	}
	var leak *coll.LeakError
	if err := w.Comms[broken].Close(); !errors.As(err, &leak) || leak.Schedules != 1 || leak.Memories != 1 {
		t.Errorf("%s: Close of the broken rank: %v, want a LeakError of 1 schedule and 1 memory", name, err)
	}
	w.Comms[broken] = nil
	if err := w.Close(); err != nil {
		t.Errorf("%s: %v", name, err)
	}
	for _, b := range bufs {
		if err := b.Free(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := dev.Close(); err != nil {
		t.Errorf("%s: softdev: %v", name, err)
	}
}
