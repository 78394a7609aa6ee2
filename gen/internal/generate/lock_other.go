//go:build !unix

package generate

import (
	"errors"
	"os"
)

// lockDir: no flock(2) here; scratch directories are judged by age.
func lockDir(dir string, wait bool) (lock *os.File, busy bool, err error) {
	return nil, false, errors.ErrUnsupported
}
