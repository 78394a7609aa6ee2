//go:build linux && cgo

package lease

import (
	"errors"
	"sync"
	"testing"
)

// TestCopiedBuffer: a copy of a Buffer is the same buffer. Freeing the
// copy frees it for the original, whose Free is then ErrDoubleFree (it
// used to free the memory again: glibc aborted) and whose accessors give
// nil and 0 (Bytes used to return the freed memory); a lease taken
// through one holds both.
func TestCopiedBuffer(t *testing.T) {
	buf, err := Alloc(PageSize)
	if err != nil {
		t.Fatal(err)
	}
	cp := *buf
	tb := NewTable()
	defer tb.Close()
	if _, err := tb.Lease(1, &cp, 0, 64, 0); err != nil {
		t.Fatal(err)
	}
	if err := buf.Free(); !errors.Is(err, ErrBusy) {
		t.Fatalf("Free of a Buffer whose copy is leased: %v, want ErrBusy", err)
	}
	if err := tb.Release(1); err != nil {
		t.Fatal(err)
	}
	if err := cp.Free(); err != nil {
		t.Fatal(err)
	}
	if err := buf.Free(); !errors.Is(err, ErrDoubleFree) {
		t.Fatalf("Free after the copy's Free: %v, want ErrDoubleFree", err)
	}
	if b, p, a, n := buf.Bytes(), buf.Pointer(), buf.Addr(), buf.Len(); b != nil || p != nil || a != 0 || n != 0 {
		t.Fatalf("the original after the copy's Free: Bytes %p, Pointer %p, Addr %#x, Len %d; want nothing", b, p, a, n)
	}
	if _, err := tb.Lease(2, buf, 0, 64, 0); err == nil {
		t.Fatal("Lease of a Buffer freed through its copy succeeded")
	}
	var zero Buffer
	if err := zero.Free(); !errors.Is(err, ErrForeign) {
		t.Fatalf("zero Buffer Free: %v, want ErrForeign", err)
	}
	if zero.Bytes() != nil || zero.Len() != 0 {
		t.Fatal("zero Buffer has memory")
	}
}

// TestCopiedTable: a copy of a used Table is the same table, lock
// included: goroutines pinning through the original and the copy at once
// do not race (they used to share the map under two locks), and closing
// one closes both.
func TestCopiedTable(t *testing.T) {
	tb := NewTable()
	if got := tb.Outstanding(); got != 0 { // first use: the state exists from here on
		t.Fatal(got)
	}
	cp := *tb
	mem := make([]byte, 2*64*8)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for g, table := range []*Table{tb, &cp} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 64 {
				id := uint64(g*64 + i)
				off := int(id) * 8
				if _, err := table.Pin(id, mem[off:off+8], 0); err != nil {
					errs[g] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if tb.Outstanding() != 128 || cp.Outstanding() != 128 {
		t.Fatalf("outstanding %d and %d, want 128 in both", tb.Outstanding(), cp.Outstanding())
	}
	if err := cp.Release(5); err != nil {
		t.Fatal(err)
	}
	if err := tb.Release(5); !errors.Is(err, ErrUnknown) {
		t.Fatalf("Release through the original of a lease the copy released: %v, want ErrUnknown", err)
	}
	var le *LeakError
	if err := cp.Close(); !errors.As(err, &le) || len(le.WRIDs) != 127 {
		t.Fatalf("Close of the copy: %v, want the 127 leases left", err)
	}
	if err := tb.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Close of the original after the copy's: %v, want ErrClosed", err)
	}
	if _, err := tb.Pin(1000, mem[:8], 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Pin on the original after the copy's Close: %v, want ErrClosed", err)
	}
	// Two copies of an unused zero Table are two tables.
	var a Table
	b := a
	if _, err := a.Pin(1, mem[:8], 0); err != nil {
		t.Fatal(err)
	}
	if b.Outstanding() != 0 {
		t.Fatal("a copy of an unused zero Table shares its leases")
	}
	a.Close()
	b.Close()
}
