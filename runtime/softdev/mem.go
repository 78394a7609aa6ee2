//go:build linux && cgo

package softdev

/*
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

static int sd_msync(uintptr_t addr, size_t n) { return msync((void *)addr, n, MS_ASYNC); }
*/
import "C"

import (
	"fmt"
	"os"
	"strconv"
	"strings"
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
// when it pins the pages: it walks /proc/self/maps (sorted, one line per
// mapping: "start-end perms ...") and needs contiguous mappings with the
// permissions from the first byte to the last. That is exact and costs
// one read of a file of a few KB. Where /proc is not mounted it falls back
// to msync(2), which checks the mapping but not the permissions.
func checkMapped(addr, n uintptr, write bool) error {
	end := addr + n
	if end < addr {
		return fmt.Errorf("range %#x + %d wraps around the address space: %w", addr, n, syscall.EINVAL)
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return checkMappedMsync(addr, n)
	}
	cur := addr
	for line := range strings.SplitSeq(string(maps), "\n") {
		lo, hi, perms, ok := parseMapsLine(line)
		if !ok || hi <= cur {
			continue
		}
		if lo > cur {
			break // a hole at cur
		}
		if perms[0] != 'r' || (write && perms[1] != 'w') {
			return fmt.Errorf("[%#x, %#x) is mapped %s, the device needs read%s access at %#x: %w",
				addr, end, perms, map[bool]string{true: " and write"}[write], cur, syscall.EFAULT)
		}
		cur = hi
		if cur >= end {
			return nil
		}
	}
	return fmt.Errorf("[%#x, %#x) is not mapped memory from %#x on: %w", addr, end, cur, syscall.EFAULT)
}

// parseMapsLine reads "start-end perms" from a /proc/self/maps line.
func parseMapsLine(line string) (lo, hi uintptr, perms string, ok bool) {
	rng, rest, ok1 := strings.Cut(line, " ")
	a, b, ok2 := strings.Cut(rng, "-")
	if !ok1 || !ok2 || len(rest) < 4 {
		return 0, 0, "", false
	}
	l, err1 := strconv.ParseUint(a, 16, 64)
	h, err2 := strconv.ParseUint(b, 16, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, "", false
	}
	return uintptr(l), uintptr(h), rest[:4], true
}

// checkMappedMsync: msync(MS_ASYNC) fails with ENOMEM when part of the
// page range is not mapped, and does nothing else.
func checkMappedMsync(addr, n uintptr) error {
	page := uintptr(os.Getpagesize())
	lo := addr &^ (page - 1)
	hi := (addr + n + page - 1) &^ (page - 1)
	if C.sd_msync(C.uintptr_t(lo), C.size_t(hi-lo)) != 0 {
		return fmt.Errorf("[%#x, %#x) is not mapped memory: %w", addr, addr+n, syscall.EFAULT)
	}
	return nil
}
