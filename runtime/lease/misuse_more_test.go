//go:build linux && cgo

package lease

import (
	"errors"
	"math"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/cmem"
	"github.com/verbsexp/verbsexp/runtime/device"
	"github.com/verbsexp/verbsexp/runtime/softdev"
)

// Misuse of tables and buffers is an error, never a crash, and never an
// SGE outside the buffer: nil, zero and foreign values, every offset and
// length that overflows or leaves the buffer, use after Free and Close,
// and the same from goroutines at once.

func TestMisuseNilAndZero(t *testing.T) {
	var nilT *Table
	var nilB *Buffer
	b := mustAlloc(t, 64)
	for name, err := range map[string]error{
		"nil Table Pin":     second(nilT.Pin(1, make([]byte, 8), 0)),
		"nil Table Lease":   second(nilT.Lease(1, b, 0, 8, 0)),
		"nil Table Release": nilT.Release(1),
		"nil Table Poll":    second(nilT.Poll(nil, nil)),
		"nil Table Close":   nilT.Close(),
		"nil Buffer Free":   nilB.Free(),
	} {
		if !errors.Is(err, ErrNil) || !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%s = %v, want ErrNil (EINVAL)", name, err)
		}
	}
	if nilT.Outstanding() != 0 || nilB.Bytes() != nil || nilB.Addr() != 0 || nilB.Pointer() != nil || nilB.Len() != 0 {
		t.Error("accessors of nil values are not zero")
	}
	if _, err := NewTable().Lease(1, nilB, 0, 1, 0); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("Lease of a nil Buffer: %v", err)
	}

	// A Buffer that Alloc did not make: refused, and the live count is
	// not disturbed (it went to -1).
	foreign := &Buffer{}
	before := LiveBuffers()
	if err := foreign.Free(); !errors.Is(err, ErrForeign) || LiveBuffers() != before {
		t.Errorf("Free of a Buffer{} = %v, live %d → %d", err, before, LiveBuffers())
	}
	if _, err := NewTable().Lease(1, foreign, 0, 1, 0); !errors.Is(err, ErrForeign) {
		t.Errorf("Lease of a Buffer{} = %v", err)
	}

	// The zero Table works (it used to panic assigning into a nil map).
	var zt Table
	go1 := make([]byte, 16)
	if _, err := zt.Pin(1, go1, 0); err != nil {
		t.Fatalf("Pin on a zero Table: %v", err)
	}
	if _, err := zt.Lease(2, b, 0, 8, 0); err != nil {
		t.Fatalf("Lease on a zero Table: %v", err)
	}
	if zt.Outstanding() != 2 {
		t.Errorf("zero Table holds %d leases", zt.Outstanding())
	}
	if err := zt.Release(1); err != nil {
		t.Error(err)
	}
	var le *LeakError
	if err := zt.Close(); !errors.As(err, &le) || len(le.WRIDs) != 1 || le.WRIDs[0] != 2 {
		t.Errorf("Close of the zero Table = %v", err)
	}
	var zt2 Table
	if err := zt2.Close(); err != nil {
		t.Errorf("Close of an unused zero Table = %v", err)
	}
}

func TestMisuseAllocAndFree(t *testing.T) {
	for _, n := range []int{0, -1, math.MinInt} {
		if b, err := Alloc(n); !errors.Is(err, syscall.EINVAL) || b != nil {
			t.Errorf("Alloc(%d) = %v, %v; want EINVAL", n, b, err)
		}
	}
	for _, n := range []int{math.MaxInt, 1 << 62, math.MaxInt - PageSize} {
		if b, err := Alloc(n); !errors.Is(err, syscall.ENOMEM) || b != nil {
			t.Errorf("Alloc(%d) = %v, %v; want ENOMEM", n, b, err)
			if b != nil {
				b.Free()
			}
		}
	}
	b, err := Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Free(); err != nil {
		t.Fatal(err)
	}
	if err := b.Free(); !errors.Is(err, ErrDoubleFree) {
		t.Errorf("second Free = %v", err)
	}
	// After Free, no accessor hands out the freed memory.
	if b.Bytes() != nil || b.Addr() != 0 || b.Pointer() != nil || b.Len() != 0 {
		t.Errorf("a freed Buffer: Bytes %d bytes, Addr %#x, Pointer %p, Len %d", len(b.Bytes()), b.Addr(), b.Pointer(), b.Len())
	}
	if _, err := NewTable().Lease(1, b, 0, 8, 0); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("Lease of a freed Buffer = %v", err)
	}
}

// Every offset/length pair that is not a range of the buffer is EINVAL;
// the accepted ones yield SGEs inside it.
func TestMisuseLeaseRanges(t *testing.T) {
	b := mustAlloc(t, 3*PageSize)
	n := b.Len()
	for i, c := range []struct{ off, n int }{
		{-1, 1}, {math.MinInt, 1}, {0, 0}, {0, -1}, {0, math.MinInt},
		{math.MaxInt, 1}, {1, math.MaxInt}, {math.MaxInt, math.MaxInt},
		{n, 1}, {n - 1, 2}, {0, n + 1}, {n, 0},
		{0, MaxLength + 1}, {0, 1 << 32}, {1 << 32, 1}, {math.MaxInt - n + 1, n},
	} {
		tb := NewTable()
		if sge, err := tb.Lease(uint64(i), b, c.off, c.n, 7); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("Lease(off %d, n %d) = %+v, %v; want EINVAL", c.off, c.n, sge, err)
		}
		if tb.Outstanding() != 0 {
			t.Errorf("a refused lease is outstanding")
		}
		tb.Close()
	}
	tb := NewTable()
	defer tb.Close()
	for i, c := range []struct{ off, n int }{{0, n}, {n - 1, 1}} {
		sge, err := tb.Lease(uint64(i), b, c.off, c.n, 7)
		if err != nil {
			t.Fatal(err)
		}
		if sge.Addr < b.Addr() || sge.Addr+uint64(sge.Length) > b.Addr()+uint64(n) {
			t.Errorf("SGE [%#x, +%d) outside the buffer [%#x, +%d)", sge.Addr, sge.Length, b.Addr(), n)
		}
		if err := tb.Release(uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestMisuseDoubleAndClosed(t *testing.T) {
	b := mustAlloc(t, 256)
	goMem := make([]byte, 64)
	tb := NewTable()
	if _, err := tb.Lease(1, b, 0, 64, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Pin(2, goMem, 0); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		err  error
		want error
	}{
		"Lease of a leased wr_id":            {second(tb.Lease(1, b, 128, 8, 0)), ErrLeased},
		"Pin of a leased wr_id":              {second(tb.Pin(1, make([]byte, 8), 0)), ErrLeased},
		"Lease of leased memory":             {second(tb.Lease(3, b, 63, 1, 0)), ErrBusy},
		"Pin of pinned memory (a sub-slice)": {second(tb.Pin(4, goMem[10:20], 0)), ErrBusy},
		"Pin of nothing":                     {second(tb.Pin(5, nil, 0)), syscall.EINVAL},
		"Pin of an empty slice":              {second(tb.Pin(5, goMem[:0], 0)), syscall.EINVAL},
		"Release of an unknown wr_id":        {tb.Release(99), ErrUnknown},
		"Free of a leased Buffer":            {b.Free(), ErrBusy},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s = %v, want %v", name, c.err, c.want)
		}
	}
	if err := tb.Release(1); err != nil {
		t.Fatal(err)
	}
	if err := tb.Release(1); !errors.Is(err, ErrUnknown) {
		t.Errorf("second Release = %v", err)
	}
	var le *LeakError
	if err := tb.Close(); !errors.As(err, &le) || len(le.WRIDs) != 1 || le.WRIDs[0] != 2 {
		t.Errorf("Close = %v", err)
	}
	for name, err := range map[string]error{
		"Close twice":         tb.Close(),
		"Pin after Close":     second(tb.Pin(6, make([]byte, 8), 0)),
		"Lease after Close":   second(tb.Lease(6, b, 0, 8, 0)),
		"Release after Close": tb.Release(2),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s = %v, want ErrClosed", name, err)
		}
	}
	if tb.Outstanding() != 0 {
		t.Errorf("a closed Table holds %d leases", tb.Outstanding())
	}
}

// Poll on a nil CQ, with no room, and on a closed Table (which used to
// poll the completions and drop them, their leases already gone).
func TestMisusePoll(t *testing.T) {
	d, err := softdev.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	cq, err := d.CreateCQ(8)
	if err != nil {
		t.Fatal(err)
	}
	defer d.DestroyCQ(cq)
	pd, _ := d.AllocPD()
	defer d.DeallocPD(pd)
	qp, err := d.CreateQP(pd, cq, cq)
	if err != nil {
		t.Fatal(err)
	}
	defer d.DestroyQP(qp)
	if err := device.ConnectPair(qp, qp); err != nil {
		t.Fatal(err)
	}
	wr, err := cmem.New[verbs.ExpSendWR]()
	if err != nil {
		t.Fatal(err)
	}
	defer cmem.Free(wr)
	wr.WRID, wr.ExpOpcode, wr.ExpSendFlags = 5, verbs.ExpWRNop, uint64(verbs.ExpSendSignaled)
	if err := verbs.ExpPostSend(qp, wr, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Progress(); err != nil { // the NOP completes
		t.Fatal(err)
	}
	wc := make([]verbs.ExpWC, 4)
	tb := NewTable()
	if _, err := tb.Poll(nil, wc); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("Poll(nil CQ) = %v", err)
	}
	if n, err := tb.Poll(cq, nil); n != 0 || err != nil {
		t.Errorf("Poll with no room = %d, %v", n, err)
	}
	tb.Close()
	if n, err := tb.Poll(cq, wc); !errors.Is(err, ErrClosed) || n != 0 {
		t.Errorf("Poll on a closed Table = %d, %v", n, err)
	}
	if s, _ := d.CQStats(cq); s.Queued != 1 {
		t.Errorf("the closed Table's Poll took the completion (%d queued)", s.Queued)
	}
	if n, err := NewTable().Poll(cq, wc); n != 1 || err != nil || wc[0].WRID != 5 {
		t.Errorf("Poll = %d, %v, wr_id %d", n, err, wc[0].WRID)
	}
}

// A Table dropped with Go memory still pinned used to crash the process
// from the finalizer goroutine ("runtime.Pinner: found leaking pinned
// pointer"). Now its leases are kept: the memory stays pinned.
func TestMisuseTableDroppedWithPins(t *testing.T) {
	abandoned.Lock()
	before := len(abandoned.states)
	abandoned.Unlock()
	func() {
		for range 8 {
			tb := NewTable()
			if _, err := tb.Pin(1, make([]byte, 64), 0); err != nil {
				t.Fatal(err)
			}
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		abandoned.Lock()
		n := len(abandoned.states) - before
		abandoned.Unlock()
		if n == 8 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 8 dropped Tables were kept after 10 s of GCs", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for range 3 { // the Pinners' own finalizers run now: they must find nothing
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// Goroutines leasing, releasing, freeing and closing at once: every call
// either succeeds or returns its documented error, and the books balance.
func TestMisuseConcurrentTable(t *testing.T) {
	const workers, rounds = 8, 500
	b := mustAlloc(t, workers*64)
	tb := NewTable()
	// Hold one lease all along, so Free below can never succeed.
	if _, err := tb.Lease(1<<40, b, workers*64-1, 1, 0); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds*4)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]byte, 32)
			for i := range rounds {
				id := uint64(i % 4) // wr_ids shared by all workers: ErrLeased expected
				if _, err := tb.Lease(id, b, w*64, 32, 0); err != nil && !errors.Is(err, ErrLeased) {
					errs <- err
				} else if err == nil {
					if err := tb.Release(id); err != nil && !errors.Is(err, ErrUnknown) {
						errs <- err
					}
				}
				if _, err := tb.Pin(uint64(1000+w), mine, 0); err != nil {
					errs <- err
				}
				if err := tb.Release(uint64(1000 + w)); err != nil {
					errs <- err
				}
				if err := b.Free(); !errors.Is(err, ErrBusy) && err != nil {
					errs <- err
				} else if err == nil {
					errs <- errors.New("Buffer freed while the table uses it")
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var le *LeakError
	if err := tb.Close(); !errors.As(err, &le) || len(le.WRIDs) != 1 {
		t.Errorf("Close = %v, want the one lease held", err)
	}
	// Close racing Pin and Release: each returns nil or ErrClosed.
	for range 200 {
		tb := NewTable()
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m := make([]byte, 8)
				if _, err := tb.Pin(uint64(w), m, 0); err != nil && !errors.Is(err, ErrClosed) {
					t.Error(err)
				}
				if err := tb.Release(uint64(w)); err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrUnknown) {
					t.Error(err)
				}
			}()
		}
		var le *LeakError
		if err := tb.Close(); err != nil && !errors.As(err, &le) {
			t.Error(err)
		}
		wg.Wait()
		if tb.Outstanding() != 0 {
			t.Fatal("leases left after Close")
		}
	}
}

func mustAlloc(t *testing.T, n int) *Buffer {
	t.Helper()
	b, err := Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Free(); err != nil && !errors.Is(err, ErrDoubleFree) {
			t.Errorf("Free at cleanup: %v", err)
		}
	})
	return b
}

func second[T any](_ T, err error) error { return err }
