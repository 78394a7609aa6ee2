//go:build linux && cgo

package collsoft_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/coll"
)

// TestDefaultDepthAllreduce: with the default Depth an allreduce of
// DefaultDepth elements builds and runs at N=64 (and one more is
// refused).
func TestDefaultDepthAllreduce(t *testing.T) {
	const n = 64
	w := newWorld(t, n)
	rng := rand.New(rand.NewPCG(64, 64))
	mem := newMemories(t, w, (coll.DefaultDepth+1)*coll.ElementSize)
	for _, c := range []calc{{verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeFloat}, {verbs.ExpCalcOpMaxloc, verbs.ExpCalcDataTypeUint}} {
		a := newAllreduce(t, w, mem, c, coll.DefaultDepth, true)
		for k := range 5 {
			if err := a.once(rng, true); err != nil {
				t.Fatalf("%v run %d: %v", c, k, err)
			}
		}
		a.close(t)
	}
	if a, err := buildAllreduce(w, mem, calc{verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint}, coll.DefaultDepth+1, true); err == nil {
		a.close(t)
		t.Errorf("an allreduce of DefaultDepth+1 elements was accepted")
	}
}

// TestSmallDepth: with queues only Options.Depth deep, every collective
// either refuses to build (EINVAL, naming Options.Depth) or runs
// correctly, run after run: what the builder accepts fits the queues and
// CQs. Allreduce counts go up to the first that is refused.
func TestSmallDepth(t *testing.T) {
	for _, depth := range []int{1, 2, 3, 4, 8} {
		for _, n := range []int{2, 3, 5, 12, 33} {
			t.Run(fmt.Sprintf("Depth=%d/N=%d", depth, n), func(t *testing.T) {
				w := newWorldOpts(t, n, coll.Options{Depth: depth})
				rng := rand.New(rand.NewPCG(uint64(depth), uint64(n)))
				mem := newMemories(t, w, n*16+(depth+2)*coll.ElementSize)
				refused := func(what string, err error) bool {
					t.Helper()
					if err == nil {
						return false
					}
					if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "Options.Depth") {
						t.Fatalf("%s: %v, want EINVAL naming Options.Depth", what, err)
					}
					return true
				}
				try := func(what string, once func() error) {
					t.Helper()
					for k := range 20 {
						if err := once(); err != nil {
							t.Fatalf("%s, run %d: %v", what, k, err)
						}
					}
				}
				var bar []*coll.Schedule
				var err error
				for _, c := range w.Comms {
					var s *coll.Schedule
					if s, err = c.Barrier(); err != nil {
						break
					}
					bar = append(bar, s)
				}
				if !refused("barrier", err) {
					try("barrier", func() error { return run(bar) })
				}
				closeAll(t, bar)
				accepted := 0
				for count := 1; count <= depth+1; count++ {
					a, err := buildAllreduce(w, mem, calc{verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint}, count, count%2 == 0)
					if refused(fmt.Sprintf("allreduce count %d", count), err) {
						break
					}
					accepted = count
					try(fmt.Sprintf("allreduce count %d", count), func() error { return a.once(rng, true) })
					a.close(t)
				}
				t.Logf("allreduce: up to %d elements accepted", accepted)
				// From Depth 8 on the manager's queue (4 × Depth) holds
				// every N's schedule of Depth elements: the bound is then
				// the peer queues' Depth, as Options.Depth says.
				if depth >= 8 && accepted != depth {
					t.Errorf("allreduce at Depth %d: up to %d elements accepted, want %d", depth, accepted, depth)
				}
			})
		}
	}
}
