//go:build !linux

package generate

import "syscall"

// exchange is renameat2(RENAME_EXCHANGE), which only Linux has.
func exchange(a, b string) error { return syscall.ENOSYS }
