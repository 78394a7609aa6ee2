//go:build linux && cgo

package task

import (
	"errors"
	"math"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/internal/shimtest"
)

// TestNewRefusesCapacitiesThatDoNotFit: counts above what C's int holds
// are refused with EINVAL, never truncated and never a panic (unsafe.Slice
// of a huge length used to panic, fatally under -race).
func TestNewRefusesCapacitiesThatDoNotFit(t *testing.T) {
	ctx := shimtest.Open(true)
	defer shimtest.Close(ctx)
	for _, c := range []Capacity{
		{Tasks: 1, SGEs: 1 << 60},
		{Tasks: 1, SGEs: math.MaxInt},
		{Tasks: 1<<32 + 4},
		{Tasks: 1, SendWRs: MaxCount + 1},
		{Tasks: 1, RecvWRs: math.MaxInt},
		{Tasks: math.MaxInt, SendWRs: math.MaxInt, RecvWRs: math.MaxInt, SGEs: math.MaxInt},
	} {
		l, err := New(ctx, c)
		if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "above") {
			t.Errorf("New(%+v) = %v, want EINVAL naming the limit", c, err)
		}
		if l != nil {
			l.Free()
		}
	}
	// The largest counts allowed: an arena the allocator may refuse
	// (ENOMEM) or, with overcommit, give; never a crash.
	l, err := New(ctx, Capacity{Tasks: 1, SGEs: MaxCount})
	switch {
	case err == nil:
		if len(l.sges) != MaxCount {
			t.Errorf("arena of %d SGEs, want %d", len(l.sges), MaxCount)
		}
		l.Free()
	case !errors.Is(err, syscall.ENOMEM):
		t.Errorf("New with MaxCount SGEs = %v, want success or ENOMEM", err)
	}
}

// TestArenaLayout: regions in order, 16-byte aligned, and the size
// overflow is seen (as it would be on a 32-bit target).
func TestArenaLayout(t *testing.T) {
	offs, size, ok := arenaLayout(Capacity{Tasks: 3, SendWRs: 2, RecvWRs: 1, SGEs: 5})
	if !ok {
		t.Fatal("arenaLayout refused a small capacity")
	}
	for i := 1; i < len(offs); i++ {
		if offs[i] < offs[i-1] || offs[i]%16 != 0 {
			t.Fatalf("offsets %v are not ascending and 16-aligned", offs)
		}
	}
	if size <= offs[4] {
		t.Fatalf("size %d leaves no room for the bad_task slot at %d", size, offs[4])
	}
	if _, _, ok := arenaLayout(Capacity{Tasks: math.MaxInt, SGEs: math.MaxInt}); ok {
		t.Fatal("arenaLayout accepted a size that overflows")
	}
	if _, ok := alignUp(math.MaxUint-3, 16); ok {
		t.Fatal("alignUp accepted an overflow")
	}
}

// TestWrappingRangesRefused: an SGE, or an RDMA remote range, that wraps
// around the address space is refused before anything is built (each
// refusal sticks: the List is Reset after it).
func TestWrappingRangesRefused(t *testing.T) {
	ctx := shimtest.Open(true)
	defer shimtest.Close(ctx)
	l := newList(t, ctx, Capacity{Tasks: 2, SendWRs: 4, RecvWRs: 1, SGEs: 4})
	qp := fakeQP(t)
	l.SendTask(qp)
	wrap := verbs.SGE{Addr: math.MaxUint64 - 7, Length: 9}
	if _, err := l.Send(1, 0, wrap); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("Send of a wrapping SGE = %v, want EINVAL", err)
	}
	if l.nSends != 0 || l.nSGEs != 0 {
		t.Fatalf("a refused Send was built: %d sends, %d SGEs", l.nSends, l.nSGEs)
	}
	l.Reset()
	l.SendTask(qp)
	ok := verbs.SGE{Addr: 0x1000, Length: 64}
	if _, err := l.Write(2, 0, math.MaxUint64-32, 1, ok); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("Write to a wrapping remote range = %v, want EINVAL", err)
	}
	if l.nSends != 0 || l.nSGEs != 0 {
		t.Fatalf("a refused Write was built: %d sends, %d SGEs", l.nSends, l.nSGEs)
	}
	l.Reset()
	l.SendTask(qp)
	if _, err := l.Read(3, 0, math.MaxUint64-64, 1, ok); err != nil {
		t.Errorf("Read of 64 bytes ending just below 2^64: %v", err)
	}
	if l.nSends != 1 || l.nSGEs != 1 {
		t.Fatalf("refused requests were built: %d sends, %d SGEs; want 1 and 1", l.nSends, l.nSGEs)
	}
	if _, err := l.RecvTask(qp); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Recv(4, wrap); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("Recv into a wrapping SGE = %v, want EINVAL", err)
	}
}

// cgocheck2 reports whether this binary was built with
// GOEXPERIMENT=cgocheck2.
func cgocheck2() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "GOEXPERIMENT" && strings.Contains(s.Value, "cgocheck2") {
			return true
		}
	}
	return false
}

// TestCgocheck2CatchesGoPointersInTheArena: Post passes the arena as
// uintptr, which cgo does not check; what keeps Go pointers out of the
// arena is cgocheck2 at the store. Storing a Go-allocated QP into a task
// must still be fatal in a cgocheck2 build (run in a child process: it is
// a fatal error, by design).
func TestCgocheck2CatchesGoPointersInTheArena(t *testing.T) {
	if os.Getenv("VERBSEXP_STORE_GO_POINTER") == "1" {
		ctx := shimtest.Open(true)
		l, err := New(ctx, Capacity{Tasks: 1})
		if err != nil {
			t.Fatal(err)
		}
		l.SendTask(new(verbs.QP)) // a Go pointer stored into C memory
		t.Log("NOT CAUGHT")
		return
	}
	if !cgocheck2() {
		t.Skip("SKIP (loudly): needs a GOEXPERIMENT=cgocheck2 build; make test-runtime runs this package that way")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCgocheck2CatchesGoPointersInTheArena$", "-test.v")
	cmd.Env = append(os.Environ(), "VERBSEXP_STORE_GO_POINTER=1")
	out, err := cmd.CombinedOutput()
	if err == nil || strings.Contains(string(out), "NOT CAUGHT") {
		t.Fatalf("storing a Go pointer into the arena was not caught by cgocheck2 (err %v):\n%s", err, out)
	}
	if !strings.Contains(string(out), "Go pointer stored into non-Go memory") {
		t.Fatalf("the child failed, but not with cgocheck2's error:\n%s", out)
	}
}
