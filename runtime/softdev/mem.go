//go:build linux && cgo

package softdev

/*
#include <stdlib.h>
#include "engine.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"syscall"
	"unsafe"
)

// Calloc returns a zeroed T in C memory, for WRs, SGE lists, tasks and
// buffers handed to the verbs (Go's pointer-passing rules forbid Go
// memory that holds Go pointers there). Free it with Free. Like new, it
// panics only when the C allocator has no memory left.
func Calloc[T any]() *T {
	var zero T
	return (*T)(callocTracked(1, max(unsafe.Sizeof(zero), 1)))
}

// CallocSlice returns n zeroed Ts in C memory as a slice; free it with
// Free(unsafe.Pointer(&s[0])). n must be positive: like make with a
// negative length, CallocSlice panics otherwise, and when the C
// allocator has no memory for n Ts (a count whose size overflows
// included).
func CallocSlice[T any](n int) []T {
	if n <= 0 {
		panic(fmt.Sprintf("softdev: CallocSlice(%d): the count must be positive", n))
	}
	var zero T
	return unsafe.Slice((*T)(callocTracked(uintptr(n), max(unsafe.Sizeof(zero), 1))), n)
}

// allocs holds the addresses Calloc and CallocSlice handed out and Free
// has not taken back, so that Free can refuse anything else.
var allocs struct {
	sync.Mutex
	live map[uintptr]struct{}
}

func callocTracked(n, size uintptr) unsafe.Pointer {
	p := C.calloc(C.size_t(n), C.size_t(size)) // calloc checks n*size for overflow
	if p == nil {
		panic(fmt.Sprintf("softdev: out of C memory for %d × %d bytes", n, size))
	}
	allocs.Lock()
	if allocs.live == nil {
		allocs.live = map[uintptr]struct{}{}
	}
	allocs.live[uintptr(p)] = struct{}{}
	allocs.Unlock()
	return p
}

// Free releases memory from Calloc or CallocSlice. Freeing nil does
// nothing; a pointer that Calloc and CallocSlice did not return, or that
// was freed already, is refused with an error wrapping EINVAL and
// nothing is freed (C's free would abort the process, or corrupt its
// heap).
func Free(p unsafe.Pointer) error {
	if p == nil {
		return nil
	}
	allocs.Lock()
	_, ok := allocs.live[uintptr(p)]
	delete(allocs.live, uintptr(p))
	allocs.Unlock()
	if !ok {
		return fmt.Errorf("softdev: Free(%p): not memory from Calloc or CallocSlice, or freed already: %w", p, syscall.EINVAL)
	}
	C.free(p)
	return nil
}

// checkMapped says whether [addr, addr+n) is mapped memory the device may
// read, and write if write is set, as an HCA's registration finds out
// when it pins the pages. It is the C check every registration makes
// (sd_check_mapped in engine_dma.c, which the driver's reg_mr and the
// exported ibv_reg_mr run too), called first here for an error that
// names the first byte that is not and why.
func checkMapped(addr, n uintptr, write bool) error {
	var why C.struct_sd_unmapped
	w := C.int(0)
	if write {
		w = 1
	}
	return mappedErr(addr, n, write, C.sd_check_mapped(C.uintptr_t(addr), C.size_t(n), w, &why), why)
}

// checkMappedMsync is the check where /proc is not mounted: msync(2)
// sees holes, not permissions.
func checkMappedMsync(addr, n uintptr) error {
	var why C.struct_sd_unmapped
	return mappedErr(addr, n, false, C.sd_check_mapped_msync(C.uintptr_t(addr), C.size_t(n), &why), why)
}

func mappedErr(addr, n uintptr, write bool, e C.int, why C.struct_sd_unmapped) error {
	end, at := addr+n, uintptr(why.at)
	switch errno := syscall.Errno(e); {
	case e == 0:
		return nil
	case errno == syscall.EINVAL:
		return fmt.Errorf("range %#x + %d wraps around the address space: %w", addr, n, errno)
	case why.perms[0] != 0:
		perms := C.GoString(&why.perms[0])
		return fmt.Errorf("[%#x, %#x) is mapped %s, the device needs read%s access at %#x: %w",
			addr, end, perms, map[bool]string{true: " and write"}[write], at, errno)
	default:
		return fmt.Errorf("[%#x, %#x) is not mapped memory from %#x on: %w", addr, end, at, errno)
	}
}
