//go:build linux && cgo

package coll_test

import (
	"fmt"
	"math"
	"runtime"
	"syscall"
	"testing"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/coll"
	"github.com/verbsexp/verbsexp/runtime/softdev"
)

// TestSizesCheckedFirst: sizes from the caller are checked, without
// overflow, before anything their size is made: an allreduce of a
// million elements over 4 KiB used to build its whole plan (1.9 GB
// allocated) before the memory check, and one of 2^40 ran the process
// out of memory; an allgather whose size × block overflows (2^62 over 4
// ranks is 0) built a schedule that failed on the device, or never
// completed.
func TestSizesCheckedFirst(t *testing.T) {
	const n = 4
	_, w := testWorld(t, n, coll.Options{})
	c := w.Comms[1]
	m := memory(t, c, 4096)
	add, uint_ := verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint
	var before, after runtime.MemStats
	for _, count := range []int{257, 1e6, 3e6, 1 << 40, 1 << 60, math.MaxInt / coll.ElementSize, math.MaxInt} {
		runtime.ReadMemStats(&before)
		s, err := c.Allreduce(m, m, count, add, uint_)
		runtime.ReadMemStats(&after)
		if s != nil {
			s.Close()
		}
		wantErr(t, fmt.Sprintf("allreduce of %d elements", count), err, syscall.EINVAL, fmt.Sprint(count), "Options.Depth")
		if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
			t.Errorf("allreduce of %d elements: %d bytes allocated before the refusal", count, got)
		}
	}
	for _, block := range []int{1 << 61, 1 << 62, 1<<62 + 1, math.MaxInt} { // size × block overflows
		s, err := c.Allgather(m, block)
		if s != nil {
			t.Errorf("allgather of %d-byte blocks over %d ranks: a schedule", block, n)
			s.Close()
		}
		wantErr(t, fmt.Sprintf("allgather of %d-byte blocks", block), err, syscall.EINVAL, fmt.Sprint(block))
	}
	// What fits still builds: 4 ranks of 1 KiB blocks in 4 KiB.
	s, err := c.Allgather(m, 1024)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

// TestRankCountsBounded: a rank count above MaxRanks (or below 1) is
// refused before anything is allocated for it: New used to make a slice
// of that many peers (a panic for 2^62, a fatal out-of-memory for
// 2^40), NewInProcess panicked on a negative size.
func TestRankCountsBounded(t *testing.T) {
	dev, err := softdev.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	ctx := func(int) *verbs.Context { return dev.Context() }
	for _, n := range []int{-1, 0, coll.MaxRanks + 1, 1 << 40, 1 << 62, math.MaxInt} {
		_, err := coll.New(dev.Context(), 0, n, coll.NewInProcess(1).For(0), coll.Options{})
		wantErr(t, fmt.Sprintf("New of %d ranks", n), err, syscall.EINVAL, fmt.Sprintf("of %d", n))
		_, err = coll.NewLocal(n, ctx, coll.Options{})
		wantErr(t, fmt.Sprintf("NewLocal of %d ranks", n), err, syscall.EINVAL, fmt.Sprintf("%d ranks", n))
		_, err = coll.NewInProcess(n).For(0)(nil)
		wantErr(t, fmt.Sprintf("NewInProcess of %d ranks", n), err, syscall.EINVAL, fmt.Sprintf("%d ranks", n))
	}
}
