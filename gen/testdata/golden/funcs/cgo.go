//go:build cgo

package funcs

// Hand-written C side of cgo_test.go: records in C memory for the
// generated wrappers to be called with.

/*
#include <stdlib.h>
#include "funcs.h"

static struct dev *new_dev(int fd) { struct dev *d = calloc(1, sizeof *d); d->fd = fd; return d; }
*/
import "C"

import "unsafe"

func newDev(fd int) *Dev { return (*Dev)(unsafe.Pointer(C.new_dev(C.int(fd)))) }

func freeDev(d *Dev) { C.free(unsafe.Pointer(d)) }
