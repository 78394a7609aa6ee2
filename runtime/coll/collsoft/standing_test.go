//go:build linux && cgo

package collsoft_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/coll"
)

// standingPosts is how often each standing schedule is posted in a row
// (issue 13: 1000), under -race as well (the whole set takes about 20
// s there).
const standingPosts = 1000

// TestStanding posts each collective's schedule standingPosts times in
// a row at N in {1, 2, 3, 5, 6, 7, 12, 33, 64} (the issue's), the powers
// of two among them and 63 (the most extra ranks), with fresh input
// every time, checking every rank's result and every region's canary
// every time: one build, then runs only. The allreduce takes a
// different op and type at each N (FLOAT ADD alternates exact sums with
// arbitrary values); TestStandingEveryCalc runs all of them.
func TestStanding(t *testing.T) {
	calcs := deviceCalcs(t)
	total, rankRuns := 0, 0
	for i, n := range []int{1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 32, 33, 63, 64} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			posts := standingPosts
			w := newWorld(t, n)
			rng := rand.New(rand.NewPCG(uint64(n), 0x7374616e64))
			mem := newMemories(t, w, n*13+3*coll.ElementSize)

			bar := barrierSchedules(t, w)
			for k := range posts {
				if err := run(bar); err != nil {
					t.Fatalf("barrier post %d: %v", k, err)
				}
			}
			closeAll(t, bar)

			c := calcs[i%len(calcs)]
			a := newAllreduce(t, w, mem, c, 3, i%2 == 0)
			for k := range posts {
				if err := a.once(rng, k%2 == 0); err != nil {
					t.Fatalf("allreduce %v post %d: %v", c, k, err)
				}
			}
			a.close(t)

			root := (n - 1) / 2
			b := newBroadcast(t, w, mem, root, 13)
			for k := range posts {
				if err := b.once(rng); err != nil {
					t.Fatalf("broadcast from %d post %d: %v", root, k, err)
				}
			}
			b.close(t)

			g := newAllgather(t, w, mem, 13)
			for k := range posts {
				if err := g.once(rng); err != nil {
					t.Fatalf("allgather post %d: %v", k, err)
				}
			}
			g.close(t)
			t.Logf("N=%d: 4 schedules × %d posts checked (allreduce %v)", n, posts, c)
			total += 4 * posts
			rankRuns += 4 * posts * n
		})
	}
	t.Logf("%d runs checked on every rank: %d rank-runs", total, rankRuns)
}

// TestStandingEveryCalc posts an allreduce of every op and type the
// device reports standingPosts times in a row at a few N (one element,
// then four, alternately in place), results checked every time.
func TestStandingEveryCalc(t *testing.T) {
	calcs := deviceCalcs(t)
	floatAdd := calc{verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeFloat}
	total, rankRuns := 0, 0
	for _, n := range []int{3, 6, 12, 33} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			posts := standingPosts
			w := newWorld(t, n)
			rng := rand.New(rand.NewPCG(uint64(n), 0x63616c63))
			mem := newMemories(t, w, 4*coll.ElementSize)
			for i, c := range calcs {
				count := 1 + 3*(i%2)
				a := newAllreduce(t, w, mem, c, count, i%4 < 2)
				for k := range posts {
					// FLOAT ADD alternates exact sums with arbitrary values
					// (identical bits on every rank).
					if err := a.once(rng, c != floatAdd || k%2 == 0); err != nil {
						t.Fatalf("allreduce %v count %d post %d: %v", c, count, k, err)
					}
				}
				a.close(t)
				total += posts
				rankRuns += posts * n
			}
		})
	}
	t.Logf("%d runs checked on every rank: %d rank-runs", total, rankRuns)
}

// TestStandingInterleaved posts the four collectives of one
// communicator in turn, standingPosts rounds: schedules share the
// communicator's queues and CQs, and each run must leave them as the
// next schedule's run expects (every CQ drained, every wait's base
// where it counts from).
func TestStandingInterleaved(t *testing.T) {
	for _, n := range []int{5, 12} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			posts := standingPosts
			w := newWorld(t, n)
			rng := rand.New(rand.NewPCG(uint64(n), 0x696e746572))
			arMem := newMemories(t, w, 2*coll.ElementSize)
			bcMem := newMemories(t, w, 29)
			agMem := newMemories(t, w, n*5)
			bar := barrierSchedules(t, w)
			a := newAllreduce(t, w, arMem, calc{verbs.ExpCalcOpMaxloc, verbs.ExpCalcDataTypeUint}, 2, false)
			b := newBroadcast(t, w, bcMem, n-1, 29)
			g := newAllgather(t, w, agMem, 5)
			for k := range posts {
				for _, step := range []struct {
					what string
					run  func() error
				}{
					{"barrier", func() error { return run(bar) }},
					{"allreduce", func() error { return a.once(rng, true) }},
					{"broadcast", func() error { return b.once(rng) }},
					{"allgather", func() error { return g.once(rng) }},
				} {
					if err := step.run(); err != nil {
						t.Fatalf("round %d: %s: %v", k, step.what, err)
					}
				}
			}
			closeAll(t, bar)
			a.close(t)
			b.close(t)
			g.close(t)
			t.Logf("%d rounds of 4 schedules checked", posts)
		})
	}
}

// TestNoAllocation: a run of a standing schedule allocates nothing in
// Go, neither Post nor Test (the caller's loop: post every rank, then
// test each until it is complete).
func TestNoAllocation(t *testing.T) {
	const n = 5
	w := newWorld(t, n)
	mem := newMemories(t, w, n*8)
	a := newAllreduce(t, w, mem, calc{verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint}, 2, true)
	b := newBroadcast(t, w, newMemories(t, w, 8), 2, 8)
	g := newAllgather(t, w, newMemories(t, w, n*8), 8)
	bar := barrierSchedules(t, w)
	for _, c := range []struct {
		what string
		ss   []*coll.Schedule
	}{{"barrier", bar}, {"allreduce", a.ss}, {"broadcast", b.ss}, {"allgather", g.ss}} {
		var err error
		post := func() {
			for _, s := range c.ss {
				if e := s.Post(); e != nil && err == nil {
					err = e
				}
			}
		}
		test := func() {
			for _, s := range c.ss {
				for polls := 0; ; polls++ {
					done, e := s.Test()
					if done || e != nil || polls > 1000 {
						if e == nil && !done {
							e = fmt.Errorf("not complete after %d polls", polls)
						}
						if e != nil && err == nil {
							err = e
						}
						break
					}
				}
			}
		}
		// One Post and Test loop per rank per run: nothing of either
		// may allocate, so neither does.
		allocs := testing.AllocsPerRun(200, func() { post(); test() })
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		if allocs != 0 {
			t.Errorf("%s: %.2f allocations per run of Post and Test on %d ranks, want 0", c.what, allocs, n)
		}
		// Wait with collsoft's Progress (a softdev Progress per poll
		// that does not complete) allocates nothing either.
		allocs = testing.AllocsPerRun(200, func() {
			if e := run(c.ss); e != nil && err == nil {
				err = e
			}
		})
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		if allocs != 0 {
			t.Errorf("%s: %.2f allocations per run of Post and Wait on %d ranks, want 0", c.what, allocs, n)
		}
	}
	closeAll(t, bar)
	a.close(t)
	b.close(t)
	g.close(t)
}
