package abiutil

import (
	"errors"
	"syscall"
)

// CallError is a failed C call: the function's C name and the errno it
// reported. errors.Is(err, syscall.ENOSYS) and friends work through Unwrap.
type CallError struct {
	Func  string
	Errno syscall.Errno
}

func (e *CallError) Error() string { return e.Func + ": " + e.Errno.Error() }

// Unwrap returns the syscall.Errno.
func (e *CallError) Unwrap() error { return e.Errno }

// Errno wraps errno as a *CallError of fn; zero errno becomes EIO, since
// the call did fail.
func Errno(fn string, errno syscall.Errno) error {
	if errno == 0 {
		errno = syscall.EIO
	}
	return &CallError{Func: fn, Errno: errno}
}

// Status maps the usual verbs int result: 0 is success, a positive value
// is an errno, -1 means "see errno", any other negative value is -errno.
func Status(fn string, r int64, errno syscall.Errno) error {
	switch {
	case r == 0:
		return nil
	case r > 0:
		return Errno(fn, syscall.Errno(r))
	case r == -1:
		return Errno(fn, errno)
	default:
		return Errno(fn, syscall.Errno(-r))
	}
}

// ErrNilArgument is wrapped by the error a wrapper returns instead of
// passing nil where the C function requires a pointer.
var ErrNilArgument = errors.New("nil pointer for a required argument")

// NilArg reports a required argument that was nil, as EINVAL.
func NilArg(fn, param string) error {
	return &ArgError{Func: fn, Param: param}
}

// ArgError is a required pointer argument that was nil.
type ArgError struct {
	Func, Param string
}

func (e *ArgError) Error() string {
	return e.Func + ": " + e.Param + " must not be nil (" + syscall.EINVAL.Error() + ")"
}

// Unwrap makes errors.Is(err, syscall.EINVAL) true.
func (e *ArgError) Unwrap() []error { return []error{syscall.EINVAL, ErrNilArgument} }
