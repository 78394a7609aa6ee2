//go:build linux && cgo

package softdev

/*
#include "engine.h"
#include "front_go.h"
*/
import "C"

import (
	"fmt"
	"syscall"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
)

// AsyncFD returns the context's async_fd (also Context().AsyncFD): a real
// file descriptor, readable while an asynchronous event is pending, for
// poll(2), epoll or a runtime poller. -1 once the device is closed (the
// fd is closed with it).
func (d *Device) AsyncFD() int {
	fd := -1
	_ = d.use(func() error {
		fd = int((*verbs.Context)(unsafe.Pointer(d.ctx)).AsyncFD)
		return nil
	})
	return fd
}

// GetAsyncEvent returns the oldest pending asynchronous event, as
// ibv_get_async_event does for an HCA (verbs.GetAsyncEvent on the
// device's context is the same, with ECANCELED for ErrClosed): its EventType
// (verbs.EventCQErr with Element.CQ(), verbs.EventSRQLimitReached with
// Element.SRQ(), verbs.EventQPFatal with Element.QP()). Like the verb it
// blocks until an event is pending, unless async_fd was made non-blocking
// (fcntl O_NONBLOCK): then it returns an error wrapping EAGAIN. Close
// makes a blocked call return ErrClosed. Every event returned must be
// acknowledged with AckAsyncEvent.
func (d *Device) GetAsyncEvent() (*verbs.AsyncEvent, error) {
	if d.isNil() {
		return nil, ErrNilDevice
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed || d.closing.Load() {
		return nil, ErrClosed
	}
	var typ C.int
	var elem unsafe.Pointer
	switch e := C.sd_get_async_event(d.ctx, &typ, &elem); e {
	case 0:
	case C.ECANCELED:
		return nil, ErrClosed
	default:
		return nil, callErr("get_async_event", e)
	}
	ev := &verbs.AsyncEvent{EventType: verbs.EventType(typ)}
	switch ev.EventType {
	case verbs.EventCQErr:
		ev.Element.SetCQ((*verbs.CQ)(elem))
	case verbs.EventSRQErr, verbs.EventSRQLimitReached:
		ev.Element.SetSRQ((*verbs.SRQ)(elem))
	case verbs.EventPortErr, verbs.EventPortActive:
		ev.Element.SetPortNum(1)
	default:
		ev.Element.SetQP((*verbs.QP)(elem))
	}
	return ev, nil
}

// AckAsyncEvent acknowledges an event GetAsyncEvent returned, as
// ibv_ack_async_event does (the CQ's AsyncEventsCompleted or the QP's
// EventsCompleted goes up by one). EINVAL if ev is nil or no event awaits
// an acknowledgement.
func (d *Device) AckAsyncEvent(ev *verbs.AsyncEvent) error {
	if ev == nil {
		return fmt.Errorf("softdev: ack_async_event: nil event: %w", syscall.EINVAL)
	}
	return d.use(func() error {
		return callErr("ack_async_event", C.sdl_ack(d.ctx, (*C.struct_ibv_async_event)(unsafe.Pointer(ev))))
	})
}
