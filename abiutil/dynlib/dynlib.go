// Package dynlib resolves C functions from a shared library at first use,
// so a package calling libibverbs builds, links and runs its tests on a
// machine that does not have it: only calling a missing function fails,
// with an error naming the function and the library.
//
// Two things come before the library itself:
//
//   - Provided functions. A provider that stands in for a library's
//     functions (runtime/softdev, a software verbs device without
//     libibverbs) registers its own with Provide before the first lookup
//     of them (softdev: at its first Open). Lookup returns them instead of the
//     library's; so do the weak stubs generated packages compile (they
//     call the C side, dynlib.h), and the provider forwards what is not
//     its own to the library's real function (verbsexp_dynlib_real).
//   - A Guard. A package generated for one ABI of a library must not call
//     another that has the same name: MLNX_OFED's legacy libibverbs.so.1
//     and upstream rdma-core's share a soname and differ in every struct.
//     Lib.Require names a symbol only libraries of the right ABI export;
//     a library without it is refused, and every lookup fails with a
//     *SymbolError whose Reason is an *ABIError saying which library was
//     found, what it is and what to do. Provided functions do not need
//     the library, so they are found whichever one is installed.
package dynlib

/*
#cgo LDFLAGS: -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>
#include "dynlib.h"

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

// The file the loader opened for h, or NULL.
static const char *dynlib_path(void *h) {
	struct link_map *lm = NULL;
	if (dlinfo(h, RTLD_DI_LINKMAP, &lm) != 0 || lm == NULL || lm->l_name == NULL || lm->l_name[0] == '\0')
		return NULL;
	return lm->l_name;
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

	guard  *Guard
	once   sync.Once
	handle unsafe.Pointer
	name   string // the name dlopen accepted
	path   string // the file the loader opened for it
	err    error

	cOnce  sync.Once
	cNames **C.char // Names as a NULL-terminated C array, for the registry
	cMark  *C.char  // guard.Symbol, or NULL
}

// New returns a library that will be opened by the first Lookup.
func New(names ...string) *Lib { return &Lib{Names: names} }

// Guard describes the ABI a package was generated for, so that a library
// of another ABI with the same name is refused instead of called.
type Guard struct {
	// Symbol is exported by every library of the ABI and by no other
	// library of that name.
	Symbol string
	// ABI names it in messages: "the MLNX_OFED legacy verbs …".
	ABI string
	// Fix says what to do when the library found lacks Symbol.
	Fix string
	// OtherSymbol, if set, identifies the library most often found
	// instead (a symbol only it exports); Other says what that library
	// is, for the message.
	OtherSymbol, Other string
}

// Require makes l refuse a library that does not export g.Symbol: every
// Lookup then fails with a *SymbolError whose Reason is an *ABIError.
// Call it where l is declared, before its first Lookup; it returns l.
func (l *Lib) Require(g Guard) *Lib {
	l.guard = &g
	return l
}

// ABIError says that the library found has another ABI than the one the
// package was generated for.
type ABIError struct {
	Path  string // the file the loader opened
	Guard Guard
	Other bool // it exports Guard.OtherSymbol: it is Guard.Other
}

func (e *ABIError) Error() string {
	g := e.Guard
	if e.Other {
		return fmt.Sprintf("%s is %s (it exports %s and not %s), whose ABI differs from %s, which this package was generated from; calling into it would corrupt memory: %s",
			e.Path, g.Other, g.OtherSymbol, g.Symbol, g.ABI, g.Fix)
	}
	return fmt.Sprintf("%s does not export %s, which every library of %s exports (this package was generated from that ABI); calling into it would corrupt memory: %s",
		e.Path, g.Symbol, g.ABI, g.Fix)
}

// Unwrap makes errors.Is(err, syscall.ENOSYS) true.
func (e *ABIError) Unwrap() error { return syscall.ENOSYS }

// Path opens l if needed and returns the file the loader opened for it
// (the same library Lookup resolves from, guard or not).
func (l *Lib) Path() (string, error) {
	l.once.Do(l.open)
	if l.handle == nil {
		return "", l.err
	}
	return l.path, nil
}

func (l *Lib) open() {
	var reasons []string
	for _, n := range l.Names {
		cn := C.CString(n)
		var cerr *C.char
		h := C.dynlib_open(cn, &cerr)
		C.free(unsafe.Pointer(cn))
		if h == nil {
			if cerr != nil {
				reasons = append(reasons, C.GoString(cerr))
			}
			continue
		}
		l.handle, l.name, l.path = h, n, n
		if p := C.dynlib_path(h); p != nil {
			l.path = C.GoString(p)
		}
		if g := l.guard; g != nil && !l.exports(g.Symbol) {
			l.err = &ABIError{Path: l.path, Guard: *g, Other: g.OtherSymbol != "" && l.exports(g.OtherSymbol)}
		}
		return
	}
	l.err = fmt.Errorf("cannot load %s: %s", strings.Join(l.Names, " or "), strings.Join(reasons, "; "))
}

func (l *Lib) exports(sym string) bool {
	cs := C.CString(sym)
	defer C.free(unsafe.Pointer(cs))
	var cerr *C.char
	return C.dynlib_sym(l.handle, cs, &cerr) != nil
}

// cLib returns Names and the guard's symbol in C memory, kept for the
// life of l (the registry is consulted once per symbol).
func (l *Lib) cLib() (**C.char, *C.char) {
	l.cOnce.Do(func() {
		arr := unsafe.Slice((**C.char)(C.calloc(C.size_t(len(l.Names)+1), C.size_t(unsafe.Sizeof((*C.char)(nil))))), len(l.Names)+1)
		for i, n := range l.Names {
			arr[i] = C.CString(n)
		}
		l.cNames = &arr[0]
		if l.guard != nil {
			l.cMark = C.CString(l.guard.Symbol)
		}
	})
	return l.cNames, l.cMark
}

// Provide registers fn, a C function with exactly the prototype of name,
// to be returned for name by every Lib that has lib among its Names and
// requires the guard symbol marker ("" for a Lib without a Guard), and by
// the generated stubs of those packages, instead of the library's own.
// It must run before the first lookup of name (a provider calls it from
// its package init): afterwards it fails, as it does if name is already
// provided. It is safe for concurrent use.
func Provide(lib, marker, name string, fn unsafe.Pointer) error {
	if fn == nil {
		return fmt.Errorf("dynlib: provide %s of %s: nil function", name, lib)
	}
	cl, cm, cn := C.CString(lib), C.CString(marker), C.CString(name)
	defer C.free(unsafe.Pointer(cl))
	defer C.free(unsafe.Pointer(cm))
	defer C.free(unsafe.Pointer(cn))
	switch e := syscall.Errno(C.verbsexp_dynlib_provide(cl, cm, cn, fn)); e {
	case 0:
		return nil
	case syscall.EBUSY:
		return fmt.Errorf("dynlib: provide %s of %s: it was looked up already; provide it before its first call (from the providing package's init): %w", name, lib, e)
	case syscall.EEXIST:
		return fmt.Errorf("dynlib: provide %s of %s: it is provided already: %w", name, lib, e)
	default:
		return fmt.Errorf("dynlib: provide %s of %s: %w", name, lib, e)
	}
}

// ProvidedCount is how many functions Provide has registered in this
// process: 0 means every lookup reaches a real library (a program using
// a device through the vendor's libibverbs and its provider, not
// softdev's in-process stand-ins, can check it).
func ProvidedCount() int { return int(C.verbsexp_dynlib_count_provided()) }

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
	if _, ok := e.Reason.(*ABIError); ok {
		return fmt.Sprintf("%s: not called: %v", e.Func, e.Reason)
	}
	return fmt.Sprintf("%s: not available from %s: %v", e.Func, e.Lib, e.Reason)
}

// Unwrap makes errors.Is(err, syscall.ENOSYS) true.
func (e *SymbolError) Unwrap() []error { return []error{syscall.ENOSYS, e.Reason} }

// Lookup returns the address of s in l: a provided function if one is
// registered, else the library's. After the first success it costs one
// atomic load.
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
	cn := C.CString(s.Name)
	defer C.free(unsafe.Pointer(cn))
	names, marker := l.cLib()
	if p := C.verbsexp_dynlib_provided(names, marker, cn); p != nil {
		s.addr.Store((*byte)(p))
		return p, nil
	}
	l.once.Do(l.open)
	if l.err != nil {
		lib := l.path
		if lib == "" {
			lib = strings.Join(l.Names, " or ")
		}
		s.err = &SymbolError{Func: s.Name, Lib: lib, Reason: l.err}
		return nil, s.err
	}
	var cerr *C.char
	p := C.dynlib_sym(l.handle, cn, &cerr)
	if p == nil {
		reason := "symbol not found"
		if cerr != nil {
			reason = C.GoString(cerr)
		}
		s.err = &SymbolError{Func: s.Name, Lib: l.path, Reason: fmt.Errorf("%s", reason)}
		return nil, s.err
	}
	s.addr.Store((*byte)(p))
	return p, nil
}
