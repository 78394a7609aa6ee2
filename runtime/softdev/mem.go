//go:build linux && cgo

package softdev

// #include <stdlib.h>
import "C"

import "unsafe"

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
