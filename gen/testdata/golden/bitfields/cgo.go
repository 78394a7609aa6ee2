//go:build cgo

package bitfields

// Hand-written C side of cgo_test.go: the C compiler's own view of the
// records, to compare the generated accessors with at run time.

/*
#cgo CFLAGS: -I${SRCDIR}/../../c
#include <stdlib.h>
#include "bitfields.h"

static struct flags *new_flags(void) { return calloc(1, sizeof(struct flags)); }
static void c_set(struct flags *f, int which, long long v) {
	switch (which) {
	case 0: f->valid = v; break;
	case 1: f->mode = v; break;
	case 2: f->delta = v; break;
	case 3: f->wide = v; break;
	case 4: f->rest = v; break;
	case 5: f->on = v; break;
	}
}
static long long c_get(struct flags *f, int which) {
	switch (which) {
	case 0: return f->valid;
	case 1: return f->mode;
	case 2: return f->delta;
	case 3: return f->wide;
	case 4: return f->rest;
	case 5: return f->on;
	}
	return -1;
}
*/
import "C"

import "unsafe"

// The test calls C through these; cgo is not allowed in _test.go files.

func newFlags() *C.struct_flags              { return C.new_flags() }
func freeFlags(f *C.struct_flags)            { C.free(unsafe.Pointer(f)) }
func cSet(f *C.struct_flags, i int, v int64) { C.c_set(f, C.int(i), C.longlong(v)) }
func cGet(f *C.struct_flags, i int) int64    { return int64(C.c_get(f, C.int(i))) }
func cSizeofFlags() uintptr                  { return uintptr(C.sizeof_struct_flags) }
