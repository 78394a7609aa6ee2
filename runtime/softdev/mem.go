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
	"syscall"
	"unsafe"
)

// Calloc returns a zeroed T in C memory, for WRs, SGE lists, tasks and
// buffers handed to the verbs (Go's pointer-passing rules forbid Go
// memory that holds Go pointers there). Free it with Free.
func Calloc[T any]() *T {
	var zero T
	n := unsafe.Sizeof(zero)
	if n == 0 {
		n = 1
	}
	p := C.calloc(1, C.size_t(n))
	if p == nil {
		panic("softdev: out of C memory")
	}
	return (*T)(p)
}

// CallocSlice returns n zeroed Ts in C memory as a slice; free it with
// Free(unsafe.Pointer(&s[0])).
func CallocSlice[T any](n int) []T {
	if n <= 0 {
		panic("softdev: CallocSlice of nothing")
	}
	var zero T
	p := C.calloc(C.size_t(n), C.size_t(max(unsafe.Sizeof(zero), 1)))
	if p == nil {
		panic("softdev: out of C memory")
	}
	return unsafe.Slice((*T)(p), n)
}

// Free releases memory from Calloc or CallocSlice.
func Free(p unsafe.Pointer) { C.free(p) }

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
