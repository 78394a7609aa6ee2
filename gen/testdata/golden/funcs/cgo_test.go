//go:build cgo

package funcs

// Hand-written: runs the generated wrappers of the inline functions of
// funcs.h, where every convention's result crosses back to Go with its
// errno in one C value.

import (
	"errors"
	"syscall"
	"testing"

	"github.com/verbsexp/verbsexp/abiutil"
)

// TestStatusCarriesErrno: -1 with errno set by C arrives as that errno
// (packed into the high half of the trampoline's int64).
func TestStatusCarriesErrno(t *testing.T) {
	d := newDev(3)
	defer freeDev(d)
	for _, e := range []syscall.Errno{syscall.EAGAIN, syscall.ENODEV, syscall.Errno(4095)} {
		err := DevFail(d, int32(e))
		var ce *abiutil.CallError
		if !errors.As(err, &ce) || ce.Func != "dev_fail" || ce.Errno != e {
			t.Errorf("DevFail(errno %d) = %v, want a CallError of dev_fail with errno %d", e, err, e)
		}
	}
	if err := DevPoke(d, 9); err != nil {
		t.Fatalf("DevPoke: %v", err)
	}
	if d.FD != 9 {
		t.Fatalf("DevPoke did not reach C: fd = %d", d.FD)
	}
}

// TestConstCharResultIsString: a const char * result is a Go string; NULL
// is "" with the errno C set.
func TestConstCharResultIsString(t *testing.T) {
	d := newDev(1)
	defer freeDev(d)
	if s, err := DevLabel(d); s != "open" || err != nil {
		t.Fatalf("DevLabel = %q, %v; want \"open\", nil", s, err)
	}
	d.FD = 0
	s, err := DevLabel(d)
	if s != "" || !errors.Is(err, syscall.ENODEV) {
		t.Fatalf("DevLabel of a closed dev = %q, %v; want \"\" and ENODEV", s, err)
	}
}
