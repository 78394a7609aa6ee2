//go:build linux && cgo

package softdev

import (
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/cmem"
)

// Plain utilities shared by every test file, the independent vendor
// fixture (vendor_fixture_test.go) included: a system call and pointer
// chaining, nothing that builds device objects or asserts about them.

// link chains WRs in order and returns the first.
func link(ws ...*verbs.ExpSendWR) *verbs.ExpSendWR {
	for i := 0; i+1 < len(ws); i++ {
		ws[i].Next = ws[i+1]
	}
	return ws[0]
}

// pollFD is struct pollfd, for ppoll(2) on the context's async_fd.
type pollFD struct {
	fd      int32
	events  int16
	revents int16
}

// readable polls fd (twice in one call, as the vendor does, to see both
// entries reported) and returns how many entries poll(2) counted.
func readable(t *testing.T, fd int, wait time.Duration) int {
	t.Helper()
	fds := []pollFD{{fd: int32(fd), events: 1}, {fd: int32(fd), events: 1}} // POLLIN
	ts := syscall.NsecToTimespec(int64(wait))
	ppoll := func() (uintptr, syscall.Errno) {
		n, _, e := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), uintptr(len(fds)),
			uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		return n, e
	}
	n, e := ppoll()
	for e == syscall.EINTR { // the Go runtime's signals interrupt it
		n, e = ppoll()
	}
	if e != 0 {
		t.Fatalf("ppoll: %v", e)
	}
	return int(n)
}

// calloc is a zeroed T in C memory (cmem.New), for the verbs' records;
// out of C memory, the test cannot go on anyway.
func calloc[T any]() *T {
	p, err := cmem.New[T]()
	if err != nil {
		panic(err)
	}
	return p
}

// callocSlice is n zeroed Ts in C memory (cmem.Slice).
func callocSlice[T any](n int) []T {
	s, err := cmem.Slice[T](n)
	if err != nil {
		panic(err)
	}
	return s
}

// cfree frees what calloc or callocSlice returned, by its address.
func cfree(p unsafe.Pointer) error { return cmem.Free((*byte)(p)) }
