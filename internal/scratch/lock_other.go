//go:build !unix

package scratch

import (
	"errors"
	"os"
)

// Lock: no flock(2) here; scratch directories are judged by age.
func Lock(dir string, wait bool) (lock *os.File, busy bool, err error) {
	return nil, false, errors.ErrUnsupported
}
