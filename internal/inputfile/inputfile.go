// Package inputfile is how the generator and its checks read a file a
// user names (a manifest, an ack file, a file of a package directory, a
// header): regular files only, and never more than a bound. Opening is
// non-blocking and the type is taken from the open file (fstat), so a
// FIFO never blocks, a device such as /dev/zero (or a symbolic link to
// one) is never read, and a file swapped for one between a check and the
// read is caught too.
package inputfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ErrNotRegular is wrapped by the errors of Open and Read for anything
// but a regular file (directories included).
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is wrapped by the error of Read for a file beyond its bound.
var ErrTooLarge = errors.New("file too large")

// refusal is an error that reads as msg and matches kind (errors.Is).
type refusal struct {
	msg  string
	kind error
}

func (r *refusal) Error() string { return r.msg }
func (r *refusal) Unwrap() error { return r.kind }

// Open opens path for reading if it is a regular file.
func Open(path string) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, &refusal{fmt.Sprintf("%s is %s, not a regular file: gen reads only regular files (a FIFO blocks, a device such as /dev/zero never ends)", path, Describe(fi.Mode())), ErrNotRegular}
	}
	return f, fi, nil
}

// Read returns the contents of the regular file path, refusing one of
// more than max bytes; why ends the message of that refusal (what the
// bound is for: "gen writes no manifest that large").
func Read(path string, max int64, why string) ([]byte, error) {
	f, fi, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi.Size() > max {
		return nil, tooLarge(path, max, why) // refused before reading it
	}
	return ReadFrom(f, path, max, why)
}

// ReadFrom reads f (opened from path) whole, refusing more than max
// bytes as Read does.
func ReadFrom(f io.Reader, path string, max int64, why string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, tooLarge(path, max, why)
	}
	return b, nil
}

func tooLarge(path string, max int64, why string) error {
	return &refusal{fmt.Sprintf("%s is larger than %s: %s", path, Size(max), why), ErrTooLarge}
}

// Size spells a byte count as the messages do: 4 MiB, 512 KiB, 100 bytes.
func Size(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// Describe names a file type that is not a regular file.
func Describe(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "not a regular file (mode " + m.String() + ")"
}

// OutOfDescriptors says, for an error of opening a file or starting a
// process, whether the process ran out of file descriptors (EMFILE, or
// the system ENFILE), and then what to do: its limit, and how to raise
// it. Such an error says nothing about the file or program itself.
func OutOfDescriptors(err error) (string, bool) {
	switch {
	case errors.Is(err, syscall.EMFILE):
		var lim syscall.Rlimit
		syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
		return fmt.Sprintf("the generator ran out of file descriptors (it may hold %d at once: ulimit -n); raise the limit", lim.Cur), true
	case errors.Is(err, syscall.ENFILE):
		return "the system ran out of file descriptors (ENFILE); close some programs, or raise fs.file-max", true
	}
	return "", false
}
