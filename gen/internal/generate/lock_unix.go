//go:build unix

package generate

import (
	"errors"
	"os"
	"syscall"
)

// lockDir takes an exclusive flock(2) on the directory dir, waiting for
// it when wait is set; closing lock releases it. The kernel drops the
// lock when the process ends, however it ends (SIGKILL too), so a
// scratch directory whose lock can be taken belongs to no running
// generator. busy: another process holds it; an error: the file system
// cannot lock (the caller then goes by age).
func lockDir(dir string, wait bool) (lock *os.File, busy bool, err error) {
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
	switch {
	case err == nil:
		return f, false, nil
	case errors.Is(err, syscall.EWOULDBLOCK):
		f.Close()
		return nil, true, nil
	}
	f.Close()
	return nil, false, err
}
