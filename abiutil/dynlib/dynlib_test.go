package dynlib

import (
	"errors"
	"strings"
	"syscall"
	"testing"
)

func TestLookupFromLibc(t *testing.T) {
	l := New("libc.so.6")
	s := &Sym{Name: "getpid"}
	p, err := l.Lookup(s)
	if err != nil || p == nil {
		t.Fatalf("getpid from libc.so.6: %v", err)
	}
	if q, _ := l.Lookup(s); q != p {
		t.Fatalf("second lookup gave %p, first %p", q, p)
	}
}

func TestMissingSymbolAndLibrary(t *testing.T) {
	_, err := New("libc.so.6").Lookup(&Sym{Name: "ibv_no_such_verb"})
	if err == nil || !errors.Is(err, syscall.ENOSYS) || !strings.Contains(err.Error(), "ibv_no_such_verb") || !strings.Contains(err.Error(), "libc.so.6") {
		t.Fatalf("missing symbol: %v", err)
	}
	_, err = New("libverbsexp-absent.so.9", "libverbsexp-absent.so").Lookup(&Sym{Name: "ibv_open_device"})
	if err == nil || !errors.Is(err, syscall.ENOSYS) || !strings.Contains(err.Error(), "ibv_open_device") || !strings.Contains(err.Error(), "libverbsexp-absent.so.9") {
		t.Fatalf("missing library: %v", err)
	}
}
