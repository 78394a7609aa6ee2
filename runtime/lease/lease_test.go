//go:build linux && cgo

package lease

import (
	"errors"
	"runtime"
	"syscall"
	"testing"
)

func TestBufferLifecycle(t *testing.T) {
	b, err := Alloc(3 * PageSize)
	if err != nil {
		t.Fatal(err)
	}
	if b.Addr()%uint64(PageSize) != 0 {
		t.Fatalf("buffer at %#x is not page aligned", b.Addr())
	}
	for _, c := range b.Bytes() {
		if c != 0 {
			t.Fatal("buffer not zeroed")
		}
	}
	tb := NewTable()
	sge, err := tb.Lease(7, b, 100, 50, 0x11)
	if err != nil || sge.Addr != b.Addr()+100 || sge.Length != 50 || sge.Lkey != 0x11 {
		t.Fatalf("Lease = %+v, %v", sge, err)
	}
	if err := b.Free(); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("Free of a leased buffer = %v, want EBUSY", err)
	}
	if _, err := tb.Lease(8, b, 120, 10, 0x11); !errors.Is(err, ErrBusy) {
		t.Fatalf("overlapping lease = %v, want ErrBusy", err)
	}
	if _, err := tb.Lease(7, b, 1000, 10, 0x11); !errors.Is(err, ErrLeased) {
		t.Fatalf("second lease of wr_id 7 = %v, want ErrLeased", err)
	}
	if _, err := tb.Lease(9, b, 150, 10, 0x11); err != nil {
		t.Fatalf("adjacent lease: %v", err)
	}
	for _, id := range []uint64{7, 9} {
		if err := tb.Release(id); err != nil {
			t.Fatal(err)
		}
	}
	if err := tb.Release(7); !errors.Is(err, ErrUnknown) {
		t.Fatalf("second Release = %v, want ErrUnknown", err)
	}
	if err := b.Free(); err != nil {
		t.Fatal(err)
	}
	if err := b.Free(); !errors.Is(err, ErrDoubleFree) {
		t.Fatalf("double Free = %v, want ErrDoubleFree", err)
	}
	if _, err := tb.Lease(10, b, 0, 8, 0); err == nil {
		t.Fatal("lease of a freed buffer accepted")
	}
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestPinnedGoMemorySurvivesGC: a pinned Go buffer keeps its contents
// and address across collections until released.
func TestPinnedGoMemorySurvivesGC(t *testing.T) {
	tb := NewTable()
	buf := make([]byte, 4096)
	buf[0], buf[4095] = 0xaa, 0x55
	sge, err := tb.Pin(1, buf, 3)
	if err != nil {
		t.Fatal(err)
	}
	addr := sge.Addr
	buf = nil
	runtime.GC()
	runtime.GC()
	if tb.Outstanding() != 1 {
		t.Fatalf("outstanding %d", tb.Outstanding())
	}
	if err := tb.Release(1); err != nil {
		t.Fatal(err)
	}
	_ = addr
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestCloseReportsLeaks(t *testing.T) {
	tb := NewTable()
	for _, id := range []uint64{5, 2} {
		if _, err := tb.Pin(id, make([]byte, 64), 0); err != nil {
			t.Fatal(err)
		}
	}
	err := tb.Close()
	var le *LeakError
	if !errors.As(err, &le) || len(le.WRIDs) != 2 || le.WRIDs[0] != 2 || le.WRIDs[1] != 5 {
		t.Fatalf("Close = %v, want a LeakError for wr_id 2 and 5", err)
	}
	if tb.Outstanding() != 0 {
		t.Fatalf("leases left after Close: %d", tb.Outstanding())
	}
	if _, err := tb.Pin(9, make([]byte, 8), 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Pin after Close = %v, want ErrClosed", err)
	}
}
