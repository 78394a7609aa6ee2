// Package dynlib resolves C functions from a shared library at first use,
// so a package calling libibverbs builds, links and runs its tests on a
// machine that does not have it: only calling a missing function fails,
// with an error naming the function and the library.
package dynlib

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

static void *dynlib_open(const char *name, char **err) {
	void *h = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
	if (h == NULL) *err = dlerror();
	return h;
}

static void *dynlib_sym(void *h, const char *name, char **err) {
	dlerror();
	void *p = dlsym(h, name);
	if (p == NULL) *err = dlerror();
	return p;
}
*/
import "C"

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// Lib is a shared library opened on first use; the first of Names that
// dlopen accepts is used.
type Lib struct {
	Names []string

	once   sync.Once
	handle unsafe.Pointer
	name   string
	err    error
}

// New returns a library that will be opened by the first Lookup.
func New(names ...string) *Lib { return &Lib{Names: names} }

func (l *Lib) open() {
	var reasons []string
	for _, n := range l.Names {
		cn := C.CString(n)
		var cerr *C.char
		h := C.dynlib_open(cn, &cerr)
		C.free(unsafe.Pointer(cn))
		if h != nil {
			l.handle, l.name = h, n
			return
		}
		if cerr != nil {
			reasons = append(reasons, C.GoString(cerr))
		}
	}
	l.err = fmt.Errorf("cannot load %s: %s", strings.Join(l.Names, " or "), strings.Join(reasons, "; "))
}

// Sym is one function of a Lib, resolved once and cached.
type Sym struct {
	Name string
	addr atomic.Pointer[byte]
	mu   sync.Mutex
	err  error
}

// SymbolError says that a function could not be resolved.
type SymbolError struct {
	Func, Lib string
	Reason    error
}

func (e *SymbolError) Error() string {
	return fmt.Sprintf("%s: not available from %s: %v", e.Func, e.Lib, e.Reason)
}

// Unwrap makes errors.Is(err, syscall.ENOSYS) true.
func (e *SymbolError) Unwrap() []error { return []error{syscall.ENOSYS, e.Reason} }

// Lookup returns the address of s in l. After the first success it costs
// one atomic load.
func (l *Lib) Lookup(s *Sym) (unsafe.Pointer, error) {
	if p := s.addr.Load(); p != nil {
		return unsafe.Pointer(p), nil
	}
	return l.slowLookup(s)
}

func (l *Lib) slowLookup(s *Sym) (unsafe.Pointer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.addr.Load(); p != nil {
		return unsafe.Pointer(p), nil
	}
	if s.err != nil {
		return nil, s.err
	}
	l.once.Do(l.open)
	if l.err != nil {
		s.err = &SymbolError{Func: s.Name, Lib: strings.Join(l.Names, " or "), Reason: l.err}
		return nil, s.err
	}
	cn := C.CString(s.Name)
	defer C.free(unsafe.Pointer(cn))
	var cerr *C.char
	p := C.dynlib_sym(l.handle, cn, &cerr)
	if p == nil {
		reason := "symbol not found"
		if cerr != nil {
			reason = C.GoString(cerr)
		}
		s.err = &SymbolError{Func: s.Name, Lib: l.name, Reason: fmt.Errorf("%s", reason)}
		return nil, s.err
	}
	s.addr.Store((*byte)(p))
	return p, nil
}
