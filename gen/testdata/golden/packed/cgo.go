//go:build cgo

package packed

// Hand-written C side of cgo_test.go: the C compiler's own view of the
// records, to compare the generated accessors with at run time.

/*
#cgo CFLAGS: -I${SRCDIR}/../../c
#include <stdlib.h>
#include "packed.h"

static struct holder *new_holder(void) { return calloc(1, sizeof(struct holder)); }
static unsigned long long c_addr(struct holder *h) { return h->w.addr; }
static unsigned c_len(struct holder *h) { return h->w.len; }
static unsigned c_after(struct holder *h) { return h->after; }
*/
import "C"

import "unsafe"

// The test calls C through these; cgo is not allowed in _test.go files.

func newHolder() *C.struct_holder     { return C.new_holder() }
func freeHolder(h *C.struct_holder)   { C.free(unsafe.Pointer(h)) }
func cAddr(h *C.struct_holder) uint64 { return uint64(C.c_addr(h)) }
func cLen(h *C.struct_holder) uint    { return uint(C.c_len(h)) }
func cAfter(h *C.struct_holder) uint  { return uint(C.c_after(h)) }
func cSizeofHolder() uintptr          { return uintptr(C.sizeof_struct_holder) }
