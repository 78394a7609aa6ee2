//go:build unix

package scratch

import (
	"errors"
	"os"
	"syscall"
)

// Lock takes an exclusive flock(2) on the directory dir, waiting for it
// when wait is set; closing lock releases it, as the end of the process
// does however it ends (SIGKILL too). busy: another process holds it; an
// error: the directory is gone, or the file system cannot lock.
func Lock(dir string, wait bool) (lock *os.File, busy bool, err error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, false, err
	}
	how := syscall.LOCK_EX
	if !wait {
		how |= syscall.LOCK_NB
	}
	for {
		err = syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err == nil {
		return f, false, nil
	}
	f.Close()
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return nil, true, nil
	}
	return nil, false, err
}
