//go:build linux && cgo

// Package cmem is typed C memory for the records the verbs read and
// write: work requests, SGE lists, attributes, completions. Go's
// pointer-passing rules forbid handing C Go memory that holds Go
// pointers, and a device writes completions long after the call that
// named the memory, so such records live in C memory; this package gives
// it out as *T and []T, so a program needs no unsafe to use it.
//
//	sge, err := cmem.Slice[verbs.SGE](2)
//	if err != nil {
//		log.Fatal(err)
//	}
//	wr, err := cmem.New[verbs.ExpSendWR]()
//
// Every allocation is tracked until it is freed: a second Free, or a
// pointer this package did not hand out (Go memory, a pointer into the
// middle of a slice), is refused with an error wrapping EINVAL and
// nothing is freed, where C's free would abort the process or corrupt
// its heap. Live counts what is not freed yet, for leak checks.
//
// T must hold no Go pointers (the garbage collector does not look into C
// memory): the verbs records qualify, their pointers point at C memory.
// Data buffers a device reads and writes are better leased
// (runtime/lease), which also keeps them from being freed while a work
// request names them.
package cmem

/*
#include <stdlib.h>
*/
import "C"

import (
	"fmt"
	"math"
	"sync"
	"syscall"
	"unsafe"
)

// allocs holds the address and byte size of every allocation New and
// Slice handed out and no Free has taken back.
var allocs struct {
	sync.Mutex
	live map[uintptr]uintptr
}

// New returns a zeroed T in C memory. Free it with Free. The error wraps
// ENOMEM when the C allocator has no memory left.
func New[T any]() (*T, error) {
	var zero T
	p, err := alloc(1, unsafe.Sizeof(zero))
	if err != nil {
		return nil, fmt.Errorf("cmem: New[%T]: %w", zero, err)
	}
	return (*T)(p), nil
}

// Slice returns n zeroed Ts in C memory, as a slice of length and
// capacity n. Free it with FreeSlice. n must be positive (EINVAL
// otherwise); a size that does not fit the address space, or memory the
// C allocator does not have, is ENOMEM.
func Slice[T any](n int) ([]T, error) {
	var zero T
	if n <= 0 {
		return nil, fmt.Errorf("cmem: Slice[%T](%d): the count must be positive: %w", zero, n, syscall.EINVAL)
	}
	p, err := alloc(uintptr(n), unsafe.Sizeof(zero))
	if err != nil {
		return nil, fmt.Errorf("cmem: Slice[%T](%d): %w", zero, n, err)
	}
	return unsafe.Slice((*T)(p), n), nil
}

// alloc is calloc(n, size) (a size of 0 takes 1 byte, so every
// allocation has an address of its own), tracked.
func alloc(n, size uintptr) (unsafe.Pointer, error) {
	size = max(size, 1)
	if n > math.MaxInt/size {
		return nil, fmt.Errorf("%d × %d bytes do not fit the address space: %w", n, size, syscall.ENOMEM)
	}
	p := C.calloc(C.size_t(n), C.size_t(size))
	if p == nil {
		return nil, fmt.Errorf("out of C memory for %d × %d bytes: %w", n, size, syscall.ENOMEM)
	}
	allocs.Lock()
	if allocs.live == nil {
		allocs.live = map[uintptr]uintptr{}
	}
	allocs.live[uintptr(p)] = n * size
	allocs.Unlock()
	return p, nil
}

// Free releases what New returned. Freeing nil does nothing; a pointer
// New and Slice did not return, or one freed already, is refused with an
// error wrapping EINVAL, and nothing is freed. The first element of a
// Slice frees the whole slice, as FreeSlice does.
func Free[T any](p *T) error {
	if p == nil {
		return nil
	}
	return release(unsafe.Pointer(p), "Free")
}

// FreeSlice releases what Slice returned (all of it, whatever s's length
// now). A nil or empty slice does nothing; a slice that does not start
// where a Slice did (a reslice s[1:], Go memory), or one freed already,
// is refused with an error wrapping EINVAL, and nothing is freed.
func FreeSlice[T any](s []T) error {
	if len(s) == 0 {
		return nil
	}
	return release(unsafe.Pointer(unsafe.SliceData(s)), "FreeSlice")
}

func release(p unsafe.Pointer, fn string) error {
	allocs.Lock()
	_, ok := allocs.live[uintptr(p)]
	delete(allocs.live, uintptr(p))
	allocs.Unlock()
	if !ok {
		return fmt.Errorf("cmem: %s(%p): not memory from New or Slice, or freed already: %w", fn, p, syscall.EINVAL)
	}
	C.free(p)
	return nil
}

// Live returns the number of allocations not freed yet and their bytes:
// a test compares it before and after, as a leak check.
func Live() (allocations int, bytes int64) {
	allocs.Lock()
	defer allocs.Unlock()
	for _, n := range allocs.live {
		bytes += int64(n)
	}
	return len(allocs.live), bytes
}
