// Package scratch makes, locks and removes the scratch directories that
// the generator (gen/internal/generate) and softdev's launcher
// (runtime/softdev/launch) write into before renaming into place. A
// directory's flock(2) lives as long as the process that made it, so a
// later run can tell one in use from one a killed run left, and sweep it.
package scratch

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Make creates a directory prefix+random in parent and locks it (Lock)
// until release is called or the process ends. One that another run's
// sweep removed between its creation and its lock is made again. Where
// the file system cannot lock, the directory is returned unlocked (a
// sweep then judges it by age).
func Make(parent, prefix string) (dir string, release func(), err error) {
	for range 100 {
		dir, err := os.MkdirTemp(parent, prefix)
		if err != nil {
			return "", nil, err
		}
		lock, _, err := Lock(dir, true)
		if err != nil {
			if _, serr := os.Stat(dir); serr != nil {
				continue // removed meanwhile
			}
			return dir, func() {}, nil
		}
		locked, lerr := lock.Stat()
		there, serr := os.Stat(dir)
		if lerr == nil && serr == nil && os.SameFile(locked, there) {
			return dir, func() { lock.Close() }, nil
		}
		lock.Close()
	}
	return "", nil, fmt.Errorf("the directories made in %s kept disappearing", parent)
}

// RemoveAll removes dir, making its directories writable first where
// what was written into it (a package, a previous copy) made them
// read-only.
func RemoveAll(dir string) {
	if err := os.RemoveAll(dir); err == nil {
		return
	}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	os.RemoveAll(dir)
}
