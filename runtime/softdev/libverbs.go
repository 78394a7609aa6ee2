//go:build linux && cgo

package softdev

/*
#include <stdlib.h>
#include "engine.h"
#include "front_go.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime/cgo"
	"sync"
	"syscall"
	"unsafe"

	"github.com/verbsexp/verbsexp/abiutil/dynlib"
)

// The exported verbs of libibverbs reach this device through functions of
// its own (front_go.c), registered with dynlib for the legacy verbs ABI
// by the first Open: the generated wrappers (verbs.AllocPD,
// verbs.ModifyQP, …) and the weak stubs behind the headers' inline verbs
// find them instead of the system library's. Not before: a program that
// never opens a device of this package (one that runs on the vendor's
// libibverbs and a provider) has no stand-in between it and the library
// (dynlib.ProvidedCount is 0). provideErr is why they could not be
// registered (looked up before the first Open); Open then fails with it.
var (
	provideOnce sync.Once
	provideErr  error
)

func provide() error {
	provideOnce.Do(func() {
		var lib, marker *C.char
		var n C.int
		table := unsafe.Slice(C.sdl_exports(&lib, &marker, &n), int(n))
		for _, e := range table {
			if err := dynlib.Provide(C.GoString(lib), C.GoString(marker), C.GoString(e.name), e.fn); err != nil {
				provideErr = errors.Join(provideErr, err)
			}
		}
	})
	return provideErr
}

// attach makes the device's objects known to the exported verbs.
func (d *Device) attach() error {
	if provideErr := provide(); provideErr != nil {
		return fmt.Errorf("softdev: open: the exported verbs (verbs.AllocPD, …) cannot reach this device: %w", provideErr)
	}
	d.handle = cgo.NewHandle(d)
	if e := C.sdl_register(d.ctx, C.uintptr_t(d.handle)); e != 0 {
		d.handle.Delete()
		return fmt.Errorf("softdev: open: %w", syscall.Errno(e))
	}
	return nil
}

// detach forgets the device for the exported verbs, waiting for the calls
// in flight on it (a blocked ibv_get_async_event returns once Close has
// woken it).
func (d *Device) detach() {
	C.sdl_forget(d.ctx)
	d.handle.Delete()
}

// sdlCloseDevice is ibv_close_device on a device of this package.
//
//export sdlCloseDevice
func sdlCloseDevice(h C.uintptr_t) C.int {
	d := deviceOf(cgo.Handle(h))
	if d == nil {
		return C.ENODEV // closed (by Device.Close or another ibv_close_device) since the lookup
	}
	var le *LeakError
	switch err := d.Close(); {
	case err == nil, errors.As(err, &le):
		return 0
	default:
		return C.ENODEV // closed already
	}
}

// deviceOf is the Device of h, or nil if h was deleted: a Close racing
// ibv_close_device deletes it between the C side's lookup and this call
// (cgo.Handle.Value panics on a deleted handle; handles are never reused).
func deviceOf(h cgo.Handle) (d *Device) {
	defer func() {
		if recover() != nil {
			d = nil
		}
	}()
	return h.Value().(*Device)
}

// inFlight is the number of exported verbs running on d, -1 once it is
// closed. For tests.
func (d *Device) inFlight() int { return int(C.sdl_users(d.ctx)) }
