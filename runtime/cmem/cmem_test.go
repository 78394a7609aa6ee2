//go:build linux && cgo

package cmem_test

import (
	"errors"
	"math"
	"sync"
	"syscall"
	"testing"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/cmem"
)

// TestFreeMisuse: Free and FreeSlice take back exactly what New and Slice
// gave, once; anything else is EINVAL and frees nothing (C's free would
// abort the process, or corrupt its heap).
func TestFreeMisuse(t *testing.T) {
	before, _ := cmem.Live()
	p, err := cmem.New[uint64]()
	if err != nil {
		t.Fatal(err)
	}
	s, err := cmem.Slice[verbs.SGE](4)
	if err != nil {
		t.Fatal(err)
	}
	if n, b := cmem.Live(); n != before+2 || b < 8+4*16 {
		t.Fatalf("Live after New and Slice: %d allocations, %d bytes; want %d and at least %d", n, b, before+2, 8+4*16)
	}
	goMem := new(uint64)
	goSlice := make([]verbs.SGE, 2)
	mapped, err := syscall.Mmap(-1, 0, 4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(mapped)
	for _, c := range []struct {
		name string
		free func() error
		want error
	}{
		{"Free(nil)", func() error { return cmem.Free[uint64](nil) }, nil},
		{"FreeSlice(nil)", func() error { return cmem.FreeSlice[byte](nil) }, nil},
		{"Free of Go memory", func() error { return cmem.Free(goMem) }, syscall.EINVAL},
		{"FreeSlice of Go memory", func() error { return cmem.FreeSlice(goSlice) }, syscall.EINVAL},
		{"FreeSlice of mmap'd memory", func() error { return cmem.FreeSlice(mapped) }, syscall.EINVAL},
		{"FreeSlice of a reslice", func() error { return cmem.FreeSlice(s[1:]) }, syscall.EINVAL},
		{"Free inside a Slice", func() error { return cmem.Free(&s[2]) }, syscall.EINVAL},
		{"Free", func() error { return cmem.Free(p) }, nil},
		{"Free again", func() error { return cmem.Free(p) }, syscall.EINVAL},
		{"FreeSlice of a shortened slice", func() error { return cmem.FreeSlice(s[:1]) }, nil},
		{"FreeSlice again", func() error { return cmem.FreeSlice(s) }, syscall.EINVAL},
	} {
		if err := c.free(); !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("%s = %v, want %v", c.name, err, c.want)
		}
	}
	if n, _ := cmem.Live(); n != before {
		t.Errorf("Live after the frees: %d allocations, want %d", n, before)
	}
}

// TestSizes: a count that is not positive is EINVAL, one whose size
// overflows is ENOMEM: errors, never a panic or a short allocation.
func TestSizes(t *testing.T) {
	for _, n := range []int{0, -1, math.MinInt} {
		if s, err := cmem.Slice[byte](n); !errors.Is(err, syscall.EINVAL) || s != nil {
			t.Errorf("Slice(%d) = %d elements, %v; want EINVAL", n, len(s), err)
		}
	}
	if s, err := cmem.Slice[verbs.ExpWC](math.MaxInt); !errors.Is(err, syscall.ENOMEM) || s != nil {
		t.Errorf("Slice(MaxInt) of %T = %d elements, %v; want ENOMEM", verbs.ExpWC{}, len(s), err)
	}
	// A type of no size still gets an address of its own.
	a, err := cmem.New[struct{}]()
	if err != nil {
		t.Fatal(err)
	}
	b, err := cmem.New[struct{}]()
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Error("two New[struct{}] share an address")
	}
	if err := errors.Join(cmem.Free(a), cmem.Free(b)); err != nil {
		t.Error(err)
	}
}

// TestZeroed: memory comes zeroed, as calloc gives it (a record's unset
// members must read 0 to the verbs).
func TestZeroed(t *testing.T) {
	for range 4 {
		s, err := cmem.Slice[uint64](512)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range s {
			if v != 0 {
				t.Fatalf("element %d is %#x", i, v)
			}
			s[i] = ^uint64(0)
		}
		if err := cmem.FreeSlice(s); err != nil {
			t.Fatal(err)
		}
	}
}

// TestConcurrentFree: goroutines racing to free one allocation: exactly
// one succeeds.
func TestConcurrentFree(t *testing.T) {
	for range 100 {
		p, err := cmem.New[verbs.ExpSendWR]()
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		ok := 0
		for range 4 {
			wg.Go(func() {
				if cmem.Free(p) == nil {
					mu.Lock()
					ok++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if ok != 1 {
			t.Fatalf("%d frees of one allocation succeeded", ok)
		}
	}
}
