package generate

import (
	"runtime"
	"syscall"
	"unsafe"
)

// renameat2 by GOARCH (the syscall package names it only on some).
var sysRenameat2 = map[string]uintptr{
	"386": 353, "amd64": 316, "arm": 382, "arm64": 276, "loong64": 276,
	"ppc64": 357, "ppc64le": 357, "riscv64": 276, "s390x": 347,
}[runtime.GOARCH]

const renameExchange = 1 << 1 // RENAME_EXCHANGE

// exchange swaps the directories a and b in one step (renameat2 with
// RENAME_EXCHANGE), so that a process killed at any moment leaves each
// path holding a complete package. It fails (ENOSYS, EINVAL) where the
// kernel or file system cannot; the caller then falls back to renames.
func exchange(a, b string) error {
	if sysRenameat2 == 0 {
		return syscall.ENOSYS
	}
	pa, err := syscall.BytePtrFromString(a)
	if err != nil {
		return err
	}
	pb, err := syscall.BytePtrFromString(b)
	if err != nil {
		return err
	}
	const atFDCWD = -100
	fd := atFDCWD
	_, _, errno := syscall.Syscall6(sysRenameat2, uintptr(fd), uintptr(unsafe.Pointer(pa)), uintptr(fd), uintptr(unsafe.Pointer(pb)), renameExchange, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
