//go:build cgo

package names

// Hand-written C side of cgo_test.go: C memory for the address form.

/*
#include <stdlib.h>
*/
import "C"

import "unsafe"

func cAlloc(n int) unsafe.Pointer { return C.malloc(C.size_t(n)) }

func cFree(p unsafe.Pointer) { C.free(p) }
