//go:build linux && cgo

package collsoft_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/verbsexp/verbsexp/generated/verbs"
)

// TestMatrix checks every collective at every N from 1 to 64 on every
// rank against the Go reference: barrier; allreduce with every op and
// type the device reports, one element and five, each in place at one
// parity of N and out of place at the other; broadcast from every root; allgather with blocks of 1, 13, 64
// and 1000 bytes. Each schedule runs twice with fresh data (FLOAT ADD a
// third time with arbitrary values: identical bits on every rank).
func TestMatrix(t *testing.T) {
	calcs := deviceCalcs(t)
	floatAdd := calc{verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeFloat}
	bcastSizes := []int{13, 1, 8, 4099, 100}
	total, rankRuns := 0, 0
	for n := 1; n <= 64; n++ {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			w := newWorld(t, n)
			mem := newMemories(t, w, max(n*1000, 4099))
			rng := rand.New(rand.NewPCG(uint64(n), 0x6d61747269780a))
			runs := 0
			check := func(what string, err error) {
				t.Helper()
				runs++
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
			}

			bar := barrierSchedules(t, w)
			for range 3 {
				check("barrier", run(bar))
			}
			closeAll(t, bar)

			for _, c := range calcs {
				for _, count := range []int{1, 5} {
					// In place with one element at odd N, with five at
					// even N: both forms of both counts over the matrix.
					inPlace := (count == 1) == (n%2 == 1)
					a := newAllreduce(t, w, mem, c, count, inPlace)
					what := fmt.Sprintf("allreduce %v count %d in place %v", c, count, inPlace)
					check(what, a.once(rng, true))
					check(what, a.once(rng, true))
					if c == floatAdd {
						check(what+" (arbitrary floats)", a.once(rng, false))
					}
					a.close(t)
				}
			}

			for root := range n {
				size := bcastSizes[root%len(bcastSizes)]
				b := newBroadcast(t, w, mem, root, size)
				what := fmt.Sprintf("broadcast from %d of %d bytes", root, size)
				check(what, b.once(rng))
				check(what, b.once(rng))
				b.close(t)
			}

			for _, block := range []int{1, 13, 64, 1000} {
				a := newAllgather(t, w, mem, block)
				what := fmt.Sprintf("allgather of %d-byte blocks", block)
				check(what, a.once(rng))
				check(what, a.once(rng))
				a.close(t)
			}
			total += runs
			rankRuns += runs * n
		})
	}
	t.Logf("%d runs checked on every rank (N = 1 … 64): %d rank-runs", total, rankRuns)
}
