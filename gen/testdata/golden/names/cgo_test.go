//go:build cgo

package names

// Hand-written: the wrappers whose C parameters are named as Go keywords,
// predeclared identifiers and names the wrappers use compile and reach C
// with every argument (a parameter named nil made every call fail with
// "nil must not be nil"; unpack or syscall did not compile), and the
// renamed members and address form are the ones the notes name.

import (
	"errors"
	"syscall"
	"testing"
	"unsafe"
)

func TestShadowingParameters(t *testing.T) {
	var r Rec
	r.Z = 1 + 2 + 3 + 4 + 5 + 6 + 7 + 8 + 9 + 10 + 11 + 12 + 13 + 14 + 15 + 16 + 17
	if err := All(&r, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17); err != nil {
		t.Fatalf("All with the right sum: %v", err)
	}
	if err := All(&r, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("All with a wrong sum: %v, want EINVAL from C", err)
	}
	if err := All(nil, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("All(nil, …) = %v, want the nil-argument error", err)
	}
}

func TestRenamedMembers(t *testing.T) {
	var r Rec
	r.SetX, r.SetY, r.SetZ_ = 1, 2, 3
	r.X_.SetP(4)
	r.SetY_(5)
	r.Z = 6
	if r.SetX != 1 || r.SetY != 2 || r.SetZ_ != 3 || r.X_.P() != 4 || r.Y_() != 5 || r.Z != 6 {
		t.Errorf("members do not hold what was stored: %+v", r)
	}
	var w Tight
	w.SetSetW(7)
	w.SetW_(8)
	if w.SetW() != 7 || w.W_() != 8 {
		t.Errorf("packed members: set_w %d, w %d", w.SetW(), w.W_())
	}
}

func TestAddressFormRenamed(t *testing.T) {
	if err := ExpPostTaskCMem(0); err != nil {
		t.Errorf("ExpPostTaskCMem (the function of that name): %v", err)
	}
	p := cAlloc(64)
	defer cFree(p)
	if err := ExpPostTaskCMem_(uintptr(p), uintptr(p), 0); err != nil {
		t.Errorf("ExpPostTaskCMem_ (ibv_exp_post_task's address form): %v", err)
	}
	if err := ExpPostTaskCMem_(uintptr(p), uintptr(unsafe.Add(p, 8)), 0); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("ExpPostTaskCMem_ with different pointers: %v, want EINVAL", err)
	}
}
