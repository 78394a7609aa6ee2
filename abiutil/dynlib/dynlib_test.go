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

// testGuard is a guard as a generated package declares one; the symbols
// are real: the first is exported only by MLNX_OFED's legacy libibverbs,
// the second only by upstream rdma-core's.
var testGuard = Guard{
	Symbol:      "ibv_exp_cmd_query_device",
	ABI:         "the legacy verbs",
	Fix:         "install the legacy library",
	OtherSymbol: "_verbs_init_and_alloc_context",
	Other:       "upstream rdma-core",
}

// TestGuardRefusesAnotherLibrary: a library without the guard's symbol is
// refused, every lookup failing with the path opened, what it is and the
// fix, and a symbol it does export (getpid) is not resolved either.
func TestGuardRefusesAnotherLibrary(t *testing.T) {
	l := New("libc.so.6").Require(testGuard)
	path, err := l.Path()
	if err != nil || !strings.HasSuffix(path, "/libc.so.6") {
		t.Fatalf("Path = %q, %v; want the file opened for libc.so.6", path, err)
	}
	for _, name := range []string{"getpid", "ibv_open_device"} {
		_, err := l.Lookup(&Sym{Name: name})
		var ae *ABIError
		if !errors.As(err, &ae) || ae.Other || ae.Path != path || !errors.Is(err, syscall.ENOSYS) {
			t.Fatalf("%s from a guarded libc: %v; want an *ABIError for %s, not the other library", name, err, path)
		}
		for _, want := range []string{name + ": not called: ", path + " does not export ibv_exp_cmd_query_device", "the legacy verbs", "install the legacy library"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q lacks %q", err, want)
			}
		}
	}
}

// TestGuardNamesRDMACore: on a machine with upstream rdma-core's
// libibverbs.so.1 (CI installs Debian's), the guard says it is that one.
func TestGuardNamesRDMACore(t *testing.T) {
	path, err := New("libibverbs.so.1").Path()
	if err != nil {
		t.Skipf("SKIPPED: no libibverbs.so.1 on this machine (%v): the rdma-core case is not tested here; install libibverbs1", err)
	}
	_, err = New("libibverbs.so.1").Require(testGuard).Lookup(&Sym{Name: "ibv_get_device_list"})
	var ae *ABIError
	if !errors.As(err, &ae) {
		t.Fatalf("ibv_get_device_list from %s under the legacy guard: %v; want an *ABIError (is this MLNX_OFED's legacy library?)", path, err)
	}
	want := path + " is upstream rdma-core (it exports _verbs_init_and_alloc_context and not ibv_exp_cmd_query_device), whose ABI differs from the legacy verbs"
	if !ae.Other || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "install the legacy library") {
		t.Fatalf("error %q\nwant it to contain %q and the fix", err, want)
	}
	// Without the guard the same library resolves: the guard is what refuses it.
	if _, err := New("libibverbs.so.1").Lookup(&Sym{Name: "ibv_get_device_list"}); err != nil {
		t.Fatalf("unguarded lookup: %v", err)
	}
}

// TestProvide: a provided function is found before the library is
// opened (here it does not exist), for the guard symbol it was provided
// for only; providing twice, or after a lookup, fails.
func TestProvide(t *testing.T) {
	getpid, err := New("libc.so.6").Lookup(&Sym{Name: "getpid"})
	if err != nil {
		t.Fatal(err)
	}
	const lib = "libverbsexp-provided.so.3"
	if err := Provide(lib, testGuard.Symbol, "verbsexp_test_pid", getpid); err != nil {
		t.Fatal(err)
	}
	if err := Provide(lib, testGuard.Symbol, "verbsexp_test_pid", getpid); !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("second Provide = %v, want EEXIST", err)
	}
	if err := Provide(lib, "", "verbsexp_test_nil", nil); err == nil {
		t.Fatal("Provide(nil) succeeded")
	}
	guarded := New("libverbsexp-absent.so.9", lib).Require(testGuard)
	p, err := guarded.Lookup(&Sym{Name: "verbsexp_test_pid"})
	if err != nil || p != getpid {
		t.Fatalf("provided lookup = %p, %v; want getpid %p", p, err, getpid)
	}
	// A package of another ABI (no guard) does not get it.
	if _, err := New(lib).Lookup(&Sym{Name: "verbsexp_test_pid"}); !errors.Is(err, syscall.ENOSYS) || !strings.Contains(err.Error(), "cannot load") {
		t.Fatalf("unguarded lookup of a function provided for the guarded ABI: %v; want the missing library", err)
	}
	// Looked up (and not found): too late to provide it now.
	if _, err := guarded.Lookup(&Sym{Name: "verbsexp_test_late"}); err == nil {
		t.Fatal("verbsexp_test_late resolved")
	}
	if err := Provide(lib, testGuard.Symbol, "verbsexp_test_late", getpid); !errors.Is(err, syscall.EBUSY) || !strings.Contains(err.Error(), "looked up already") {
		t.Fatalf("Provide after a lookup = %v, want EBUSY", err)
	}
}
