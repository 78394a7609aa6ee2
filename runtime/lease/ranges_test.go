//go:build linux && cgo

package lease

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
)

// check verifies the AVL invariants: ordered by start, heights right and
// balanced, as many nodes as counted.
func (r *ranges) check(t *testing.T) {
	t.Helper()
	var walk func(x *rangeNode, lo, hi uintptr) int
	walk = func(x *rangeNode, lo, hi uintptr) int {
		if x == nil {
			return 0
		}
		if x.start < lo || x.start >= hi || x.end <= x.start {
			t.Fatalf("node [%#x,%#x) out of order or empty (bounds %#x..%#x)", x.start, x.end, lo, hi)
		}
		n := walk(x.left, lo, x.start) + walk(x.right, x.start+1, hi) + 1
		if x.height != 1+max(height(x.left), height(x.right)) || abs(height(x.left)-height(x.right)) > 1 {
			t.Fatalf("node at %#x: height %d, children %d and %d", x.start, x.height, height(x.left), height(x.right))
		}
		return n
	}
	if n := walk(r.root, 0, math.MaxUint); n != r.n {
		t.Fatalf("tree holds %d nodes, count says %d", n, r.n)
	}
}

func abs(x int) int { return max(x, -x) }

// TestRangesAgainstScan: random adds and removes of ranges over a small
// address space; every overlap answer equals a scan of the ranges held,
// and the tree stays a balanced search tree.
func TestRangesAgainstScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	var r ranges
	held := map[uint64]*rangeNode{} // wrID → range
	var ids []uint64                // held, in the order added
	scan := func(start, end uintptr) bool {
		for _, h := range held {
			if start < h.end && h.start < end {
				return true
			}
		}
		return false
	}
	for step := 0; step < 20000; step++ {
		start := uintptr(rng.IntN(4000))
		end := start + uintptr(1+rng.IntN(40))
		id, got := r.overlap(start, end)
		if want := scan(start, end); got != want {
			t.Fatalf("step %d: overlap([%d,%d)) = %v, scan says %v", step, start, end, got, want)
		}
		if got {
			h := held[id]
			if h == nil || !(start < h.end && h.start < end) {
				t.Fatalf("step %d: overlap names wr_id %d, which does not overlap [%d,%d)", step, id, start, end)
			}
		}
		switch {
		case !got && rng.IntN(3) > 0:
			n := &rangeNode{start: start, end: end, wrID: uint64(step)}
			r.add(n)
			held[n.wrID] = n
			ids = append(ids, n.wrID)
		case len(ids) > 0:
			k := rng.IntN(len(ids))
			id := ids[k]
			ids[k] = ids[len(ids)-1]
			ids = ids[:len(ids)-1]
			r.remove(held[id].start)
			delete(held, id)
		}
		if step%997 == 0 {
			r.check(t)
		}
	}
	r.check(t)
	r.remove(1 << 40) // absent: no change
	if r.n != len(held) {
		t.Fatalf("count %d after removing an absent start, want %d", r.n, len(held))
	}
}

// TestLeaseRangesWithoutOverflow: offset and length are checked against
// the buffer without overflow (math.MaxInt used to wrap off+n and yield
// an SGE outside the buffer), and a length above what an SGE holds is
// refused, never truncated.
func TestLeaseRangesWithoutOverflow(t *testing.T) {
	b, err := Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	tb := NewTable()
	defer tb.Close()
	for _, c := range []struct{ off, n int }{
		{math.MaxInt, 1}, {1, math.MaxInt}, {math.MaxInt, math.MaxInt}, {4095, 2}, {-1, 2}, {0, 0},
		{0, 4097}, {0, MaxLength + 1}, {math.MinInt, 4096},
	} {
		sge, err := tb.Lease(1, b, c.off, c.n, 0)
		if !errors.Is(err, syscall.EINVAL) {
			t.Errorf("Lease(off %d, n %d) = %+v, %v; want EINVAL", c.off, c.n, sge, err)
		}
	}
	if tb.Outstanding() != 0 {
		t.Fatalf("%d leases after refusals", tb.Outstanding())
	}
	sge, err := tb.Lease(1, b, 4095, 1, 0)
	if err != nil || sge.Addr != b.Addr()+4095 || sge.Length != 1 {
		t.Fatalf("Lease of the last byte = %+v, %v", sge, err)
	}
	if err := tb.Release(1); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Lease(1, nil, 0, 1, 0); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("Lease of a nil buffer = %v, want EINVAL", err)
	}
}

// TestPinLengthAboveSGE: Go memory longer than an SGE's 32-bit length is
// refused (an address-space reservation stands in for 5 GiB of memory).
func TestPinLengthAboveSGE(t *testing.T) {
	mem, err := syscall.Mmap(-1, 0, 5<<30, syscall.PROT_NONE, syscall.MAP_ANON|syscall.MAP_PRIVATE|syscall.MAP_NORESERVE)
	if err != nil {
		t.Skipf("SKIP (loudly): cannot reserve 5 GiB of address space to stand for a long buffer: %v", err)
	}
	defer syscall.Munmap(mem)
	tb := NewTable()
	defer tb.Close()
	if _, err := tb.Pin(1, mem, 0); !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "SGE") {
		t.Fatalf("Pin of 5 GiB = %v, want EINVAL naming the SGE limit", err)
	}
}

// TestOverlapAcrossTable: leases over one buffer in shuffled order, with
// every other one released; each attempt is refused exactly when a held
// lease shares a byte.
func TestOverlapAcrossTable(t *testing.T) {
	const slot = 16
	b, err := Alloc(512 * slot)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	tb := NewTable()
	rng := rand.New(rand.NewPCG(3, 5))
	for i, k := range rng.Perm(512) {
		if _, err := tb.Lease(uint64(i), b, k*slot, slot, 0); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 512; i += 2 {
		if err := tb.Release(uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	held := make([]bool, 512)
	for i, k := range rand.New(rand.NewPCG(3, 5)).Perm(512) {
		held[k] = i%2 == 1
	}
	for off := 0; off+3*slot/2 <= 512*slot; off += slot / 2 {
		want := false
		for s := off / slot; s*slot < off+3*slot/2; s++ {
			want = want || held[s]
		}
		_, err := tb.Lease(1000, b, off, 3*slot/2, 0)
		if got := errors.Is(err, ErrBusy); got != want {
			t.Fatalf("lease of [%d,+%d): busy %v (%v), want %v", off, 3*slot/2, got, err, want)
		}
		if err == nil {
			tb.Release(1000)
		}
	}
	for i := 1; i < 512; i += 2 {
		tb.Release(uint64(i))
	}
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
}
