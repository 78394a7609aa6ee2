//go:build linux && cgo

package shimtest

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
	"unsafe"

	"github.com/verbsexp/verbsexp/abiutil"
	"github.com/verbsexp/verbsexp/generated/verbs"
)

// TestMain provides the device list functions before anything looks them
// up (dynlib.Provide refuses afterwards).
func TestMain(m *testing.M) {
	if err := ProvideDeviceList(); err != nil {
		fmt.Fprintln(os.Stderr, "shimtest:", err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// TestPollSlicesReachTheProvider: the slice forms pass the slice's first
// element, its length and (ibv_exp_poll_cq) C's size of the element,
// through the headers' inline dispatch; an empty slice is a count of 0
// that C sees, a nil one a NULL array.
func TestPollSlicesReachTheProvider(t *testing.T) {
	ctx := Open(true)
	defer Close(ctx)
	cq := Calloc[verbs.CQ]()
	defer Free(unsafe.Pointer(cq))
	cq.Context = ctx
	SetPollResult(3, 0)
	defer SetPollResult(0, 0)

	ewc := make([]verbs.ExpWC, 8)
	n, err := verbs.ExpPollCQ(cq, ewc)
	if sn, swc, size := SeenPoll(); n != 3 || err != nil || sn != 8 || swc != unsafe.Pointer(&ewc[0]) || size != ExpWCSize() {
		t.Errorf("ExpPollCQ(cq, 8 ExpWCs) = %d, %v; the provider saw %d at %p, wc_size %d; want 3, nil; 8 at %p, wc_size %d (C's sizeof)",
			n, err, sn, swc, size, &ewc[0], ExpWCSize())
	}
	wc := make([]verbs.WC, 5)
	n, err = verbs.PollCQ(cq, wc[1:])
	if sn, swc, _ := SeenPoll(); n != 3 || err != nil || sn != 4 || swc != unsafe.Pointer(&wc[1]) {
		t.Errorf("PollCQ(cq, wc[1:]) = %d, %v; the provider saw %d at %p; want 3, nil; 4 at %p", n, err, sn, swc, &wc[1])
	}
	before := Calls()
	if n, err := verbs.ExpPollCQ(cq, ewc[:0]); n != 0 || err != nil || Calls() != before+1 {
		t.Errorf("ExpPollCQ(cq, empty) = %d, %v after %d calls of the provider; want 0, nil and one call", n, err, Calls()-before)
	}
	if sn, swc, _ := SeenPoll(); sn != 0 || swc != unsafe.Pointer(&ewc[0]) {
		t.Errorf("ExpPollCQ(cq, ewc[:0]): the provider saw %d at %p, want 0 at %p", sn, swc, &ewc[0])
	}
	if n, err := verbs.PollCQ(cq, nil); n != 0 || err != nil {
		t.Errorf("PollCQ(cq, nil) = %d, %v; want 0, nil", n, err)
	}
	if sn, swc, _ := SeenPoll(); sn != 0 || swc != nil {
		t.Errorf("PollCQ(cq, nil): the provider saw %d at %p, want 0 at NULL", sn, swc)
	}
	if _, err := verbs.PollCQ(nil, wc); !errors.Is(err, abiutil.ErrNilArgument) {
		t.Errorf("PollCQ(nil, wc) = %v, want the nil-argument error", err)
	}
}

// TestDeviceListSliceForm: the list is the C array itself, its copies
// share one free, and C frees it once.
func TestDeviceListSliceForm(t *testing.T) {
	frees, live := ListFrees(), abiutil.LiveLists()
	list, err := verbs.GetDeviceList()
	if err != nil {
		t.Fatal(err)
	}
	if devs := list.All(); len(devs) != 2 || devs[0] != Device(0) || devs[1] != Device(1) {
		t.Fatalf("GetDeviceList().All() = %v, want the provider's two devices %p %p", devs, Device(0), Device(1))
	}
	cp := list
	if err := verbs.FreeDeviceList(cp); err != nil {
		t.Fatal(err)
	}
	if err := verbs.FreeDeviceList(list); !errors.Is(err, abiutil.ErrListFreed) || !errors.Is(err, syscall.EINVAL) {
		t.Errorf("FreeDeviceList of a copy of a freed list = %v, want ErrListFreed (EINVAL)", err)
	}
	if list.All() != nil || cp.Len() != 0 {
		t.Error("a freed list still lists devices")
	}
	exp, err := verbs.ExpGetDeviceList()
	if err != nil || exp.Len() != 2 {
		t.Fatalf("ExpGetDeviceList = %d devices, %v", exp.Len(), err)
	}
	if err := verbs.FreeDeviceList(exp); err != nil {
		t.Errorf("FreeDeviceList(ExpGetDeviceList's) = %v", err)
	}
	if err := verbs.FreeDeviceList(verbs.DeviceList{}); !errors.Is(err, abiutil.ErrListZero) {
		t.Errorf("FreeDeviceList(DeviceList{}) = %v, want ErrListZero", err)
	}
	if got := ListFrees() - frees; got != 2 {
		t.Errorf("C freed %d arrays, want 2 (one per list)", got)
	}
	if abiutil.LiveLists() != live {
		t.Errorf("%d lists alive, want %d", abiutil.LiveLists(), live)
	}
	// The pointer forms are still there.
	var n int32
	raw, err := verbs.GetDeviceListRaw(&n)
	if err != nil || n != 2 || *raw != Device(0) {
		t.Fatalf("GetDeviceListRaw = %p, %d, %v", raw, n, err)
	}
	if err := verbs.FreeDeviceListRaw(raw); err != nil {
		t.Error(err)
	}
}

// TestSliceFormsAllocateNothing: each slice form, like its pointer form,
// allocates nothing per call.
func TestSliceFormsAllocateNothing(t *testing.T) {
	ctx := Open(true)
	defer Close(ctx)
	cq := Calloc[verbs.CQ]()
	defer Free(unsafe.Pointer(cq))
	cq.Context = ctx
	SetPollResult(2, 0)
	defer SetPollResult(0, 0)
	wc, ewc := make([]verbs.WC, 16), make([]verbs.ExpWC, 16)
	for name, f := range map[string]func(){
		"PollCQ":    func() { verbs.PollCQ(cq, wc) },
		"ExpPollCQ": func() { verbs.ExpPollCQ(cq, ewc) },
		"GetDeviceList and FreeDeviceList": func() {
			l, _ := verbs.GetDeviceList()
			verbs.FreeDeviceList(l)
		},
		"ExpGetDeviceList and FreeDeviceList": func() {
			l, _ := verbs.ExpGetDeviceList()
			verbs.FreeDeviceList(l)
		},
	} {
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s: %v allocations per call, want 0", name, n)
		}
	}
}
