//go:build cgo

package arrays

// Hand-written: the slice forms reach C with the slice's elements, its
// length and the element's size, refuse what the count cannot carry
// without calling C, allocate nothing, and the list's copies share one
// free.

import (
	"errors"
	"math"
	"syscall"
	"testing"
	"unsafe"

	"github.com/verbsexp/verbsexp/abiutil"
)

func TestPollSlice(t *testing.T) {
	cq := newCQ(3)
	defer freeCQ(cq)
	wc := make([]WC, 8)
	if n, err := PollCQ(cq, wc); n != 3 || err != nil {
		t.Fatalf("PollCQ(cq, 8 WCs) = %d, %v; want 3, nil", n, err)
	}
	for i := range 3 {
		if wc[i].WRID != uint64(100+i) {
			t.Errorf("wc[%d].WRID = %d, want %d (written by C)", i, wc[i].WRID, 100+i)
		}
	}
	if n, err := PollCQ(cq, wc[:2]); n != 2 || err != nil {
		t.Errorf("PollCQ(cq, 2 WCs) = %d, %v; want 2: the count is the slice's length", n, err)
	}
	if n, err := PollCQ(cq, wc[:0]); n != 0 || err != nil {
		t.Errorf("PollCQ(cq, empty) = %d, %v; want 0, nil", n, err)
	}
	if n, err := PollCQ(cq, nil); n != 0 || err != nil {
		t.Errorf("PollCQ(cq, nil) = %d, %v; want 0, nil", n, err)
	}
	if n, err := PollCQRaw(cq, 8, &wc[0]); n != 3 || err != nil {
		t.Errorf("PollCQRaw(cq, 8, &wc[0]) = %d, %v; want 3, nil", n, err)
	}
}

func TestStrideIsTheElementSize(t *testing.T) {
	cq := newCQ(2)
	defer freeCQ(cq)
	wc := make([]ExpWC, 4)
	if n, err := ExpPollCQ(cq, wc); n != 2 || err != nil {
		t.Fatalf("ExpPollCQ = %d, %v; want 2, nil (C checks wc_size against its sizeof)", n, err)
	}
	if wc[1].WRID != 201 || wc[1].ByteLen != 64 {
		t.Errorf("wc[1] = %+v, want WRID 201 and ByteLen 64 from C", wc[1])
	}
	// What the slice form spares its caller: a wrong size by hand.
	if _, err := ExpPollCQRaw(cq, 4, &wc[0], uint32(unsafe.Sizeof(wc[0]))-1); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("ExpPollCQRaw with a wrong wc_size: %v, want C's EINVAL", err)
	}
}

func TestLongSliceRefused(t *testing.T) {
	cq := newCQ(0)
	defer freeCQ(cq)
	sge := make([]SGE, math.MaxUint16+1)
	for i := range sge {
		sge[i].Length = 1
	}
	total := uint64(7)
	err := Sum(cq, &total, sge)
	var le *abiutil.LenError
	if !errors.As(err, &le) || !errors.Is(err, syscall.EINVAL) || le.Param != "num_sge" || le.Max != math.MaxUint16 {
		t.Fatalf("Sum with %d SGEs: %v, want a LenError of num_sge (at most 65535)", len(sge), err)
	}
	if total != 7 {
		t.Errorf("C was called with a truncated count: total = %d", total)
	}
	if err := Sum(cq, &total, sge[:math.MaxUint16]); err != nil || total != math.MaxUint16 {
		t.Errorf("Sum with 65535 SGEs = %v, total %d; want nil, 65535", err, total)
	}
}

func TestCountsOfOtherWidths(t *testing.T) {
	cq := newCQ(2)
	defer freeCQ(cq)
	if err := Count(cq, make([]SGE, 2)); err != nil {
		t.Errorf("Count(2 SGEs) = %v; C saw another count", err)
	}
	if err := Count(cq, make([]SGE, 3)); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("Count(3 SGEs) = %v, want C's EINVAL", err)
	}
	if err := provide(); err != nil {
		t.Fatal(err)
	}
	list, err := GetDeviceList()
	if err != nil {
		t.Fatal(err)
	}
	defer FreeDeviceList(list)
	if err := Named(cq, list.All()); err != nil {
		t.Errorf("Named(the devices) = %v; C did not see them", err)
	}
	if err := Named(cq, append(list.All()[:1:1], nil)); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("Named(a device and nil) = %v, want C's EINVAL", err)
	}
}

func TestDeviceList(t *testing.T) {
	if err := provide(); err != nil {
		t.Fatal(err)
	}
	frees, live := listFrees(), abiutil.LiveLists()
	list, err := GetDeviceList()
	if err != nil {
		t.Fatal(err)
	}
	devs := list.All()
	if len(devs) != 2 || string(devs[1].Name[:4]) != "dev1" {
		t.Fatalf("GetDeviceList: %d devices, want dev0 and dev1", len(devs))
	}
	cp := list
	if err := FreeDeviceList(cp); err != nil {
		t.Fatalf("FreeDeviceList: %v", err)
	}
	if err := FreeDeviceList(list); !errors.Is(err, abiutil.ErrListFreed) || !errors.Is(err, syscall.EINVAL) {
		t.Errorf("second FreeDeviceList (of another copy): %v, want ErrListFreed", err)
	}
	if got := listFrees() - frees; got != 1 {
		t.Errorf("C freed the array %d times, want once", got)
	}
	if list.All() != nil {
		t.Error("a freed list still lists its devices")
	}
	if err := FreeDeviceList(DeviceList{}); !errors.Is(err, abiutil.ErrListZero) {
		t.Errorf("FreeDeviceList(DeviceList{}) = %v, want ErrListZero", err)
	}
	if abiutil.LiveLists() != live {
		t.Errorf("%d lists alive, want %d", abiutil.LiveLists(), live)
	}
}

func TestSliceFormsAllocateNothing(t *testing.T) {
	if err := provide(); err != nil {
		t.Fatal(err)
	}
	cq := newCQ(4)
	defer freeCQ(cq)
	wc, ewc, sge := make([]WC, 4), make([]ExpWC, 4), make([]SGE, 4)
	var total uint64
	for name, f := range map[string]func(){
		"PollCQ":    func() { PollCQ(cq, wc) },
		"ExpPollCQ": func() { ExpPollCQ(cq, ewc) },
		"Sum":       func() { Sum(cq, &total, sge) },
		"GetDeviceList+FreeDeviceList": func() {
			l, _ := GetDeviceList()
			FreeDeviceList(l)
		},
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocations per call, want 0", name, n)
		}
	}
}
