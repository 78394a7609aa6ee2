//go:build linux && cgo

package softdev

/*
#include "engine.h"
*/
import "C"

import (
	"fmt"
	"syscall"
)

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
