//go:build linux && cgo

package collsoft_test

import (
	"fmt"
	"testing"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/coll"
	"github.com/verbsexp/verbsexp/runtime/coll/collsoft"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/softdev"
)

// reclaimRuns is how often each schedule is posted: with queues of
// reclaimDepth slots that is the queues' worth more than a hundred
// times over, so a CQ left undrained by a run shows as ENOMEM at Post.
const (
	reclaimRuns  = 1000
	reclaimDepth = 8
)

// TestStandingSchedulesReclaim runs every collective reclaimRuns times
// on softdev, which frees a queue slot only when its CQE is polled, as
// mlx4 and mlx5 do: a schedule must drain every CQ it feeds on every
// run, or posting it again fails with ENOMEM once the queues are full
// (as it does, in the second run, with coll_test's drain of the other
// CQs left out).
func TestStandingSchedulesReclaim(t *testing.T) {
	for _, n := range []int{1, 2, 3, 8, 12} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) { reclaimWorld(t, n) })
	}
}

// rankBuf is one rank's registered memory.
type rankBuf struct {
	buf *lease.Buffer
	mem *coll.Memory
}

func reclaimWorld(t *testing.T, n int) {
	dev, err := softdev.Open()
	if err != nil {
		t.Fatal(err)
	}
	w, err := collsoft.New(dev, n, coll.Options{Depth: reclaimDepth})
	if err != nil {
		t.Fatal(err)
	}
	var mems []rankBuf
	register := func(c *coll.Comm, size int) *coll.Memory {
		t.Helper()
		b, err := lease.Alloc(size)
		if err != nil {
			t.Fatal(err)
		}
		m, err := c.Register(b)
		if err != nil {
			t.Fatal(err)
		}
		mems = append(mems, rankBuf{b, m})
		return m
	}
	defer func() {
		for _, m := range mems {
			if err := m.mem.Close(); err != nil {
				t.Error(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Error(err)
		}
		if err := dev.Close(); err != nil {
			t.Error(err)
		}
		for _, m := range mems {
			m.buf.Free()
		}
	}()

	const elems, block, bytes = 4, 24, 40
	root := n - 1
	ins, outs, bcast, gather := make([]*coll.Memory, n), make([]*coll.Memory, n), make([]*coll.Memory, n), make([]*coll.Memory, n)
	scheds := map[string][]*coll.Schedule{}
	add := func(name string, s *coll.Schedule, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		scheds[name] = append(scheds[name], s)
	}
	for r, c := range w.Comms {
		ins[r], outs[r] = register(c, 16*elems), register(c, 16*elems)
		bcast[r], gather[r] = register(c, bytes), register(c, n*block)
		s, err := c.Barrier()
		add("barrier", s, err)
		s, err = c.Allreduce(ins[r], outs[r], elems, verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint)
		add("allreduce", s, err)
		s, err = c.Broadcast(root, bcast[r], bytes)
		add("broadcast", s, err)
		s, err = c.Allgather(gather[r], block)
		add("allgather", s, err)
	}
	defer func() {
		for _, ss := range scheds {
			for _, s := range ss {
				if err := s.Close(); err != nil {
					t.Error(err)
				}
			}
		}
	}()

	run := func(name string, it int) {
		t.Helper()
		for r, s := range scheds[name] {
			if err := s.Post(); err != nil {
				t.Fatalf("%s, run %d: rank %d: Post: %v", name, it, r, err)
			}
		}
		for r, s := range scheds[name] {
			if err := s.Wait(); err != nil {
				t.Fatalf("%s, run %d: rank %d: %v", name, it, r, err)
			}
		}
	}
	pattern := func(it, r, i int) byte { return byte(it*31 + r*7 + i + 1) }
	for it := range reclaimRuns {
		run("barrier", it)

		for r := range n {
			for i := range elems {
				coll.PutElement(ins[r].Bytes(), i, uint64(it)<<20|uint64(r)<<8|uint64(i), 0)
			}
		}
		run("allreduce", it)
		for r := range n {
			for i := range elems {
				want := uint64(n)*(uint64(it)<<20|uint64(i)) + uint64(n*(n-1)/2)<<8
				if v, _ := coll.Element(outs[r].Bytes(), i); v != want {
					t.Fatalf("allreduce, run %d: rank %d element %d = %#x; want %#x", it, r, i, v, want)
				}
			}
		}

		for r := range n {
			b := bcast[r].Bytes()
			for i := range bytes {
				if r == root {
					b[i] = pattern(it, root, i)
				} else {
					b[i] = 0
				}
			}
		}
		run("broadcast", it)
		for r := range n {
			for i, v := range bcast[r].Bytes()[:bytes] {
				if want := pattern(it, root, i); v != want {
					t.Fatalf("broadcast, run %d: rank %d byte %d = %#x; want %#x", it, r, i, v, want)
				}
			}
		}

		for r := range n {
			b := gather[r].Bytes()
			for i := range n * block {
				b[i] = 0
			}
			for i := range block {
				b[r*block+i] = pattern(it, r, i)
			}
		}
		run("allgather", it)
		for r := range n {
			b := gather[r].Bytes()
			for q := range n {
				for i := range block {
					if v, want := b[q*block+i], pattern(it, q, i); v != want {
						t.Fatalf("allgather, run %d: rank %d, rank %d's byte %d = %#x; want %#x", it, r, q, i, v, want)
					}
				}
			}
		}
	}
}
