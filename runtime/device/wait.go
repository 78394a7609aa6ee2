//go:build linux && cgo

package device

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/cmem"
)

// Waiting on a CQ without spinning, as a net.Conn waits: a CQ created
// Waitable has a completion channel of its own, whose file descriptor
// (the kernel's event file on an HCA, a pipe on the software device) is
// made non-blocking and handed to Go's runtime poller (os.NewFile). A
// wait arms the CQ (ibv_req_notify_cq), polls once more (a completion
// that came before the arm raised no event), and then parks the
// goroutine in the poller until the channel is readable: no thread is
// blocked in C, and no CPU is spent while nothing comes. The events are
// read with ibv_get_cq_event on the non-blocking descriptor (EAGAIN:
// none left) and acknowledged together (ibv_ack_cq_events) in the same
// step, so a destroy never waits for an acknowledgement. Contexts are
// honoured through the file's read deadline.

// waiter is a Waitable CQ's completion channel and its file.
type waiter struct {
	ch    *verbs.CompChannel
	evCQ  **verbs.CQ      // ibv_get_cq_event's results, in C memory
	evCtx *unsafe.Pointer // (its cq_context, unused)
	sem   chan struct{}   // one WaitCQ on the CQ at a time

	mu   sync.Mutex // what follows
	cq   *verbs.CQ
	file *os.File // a non-blocking dup of the channel's fd, in the poller
	raw  syscall.RawConn
	shut bool // destroyed, or the device closed: no more reads
}

// newWaiter creates a completion channel.
func newWaiter(ctx *verbs.Context) (*waiter, error) {
	ch, err := verbs.CreateCompChannel(ctx)
	if err != nil {
		return nil, fmt.Errorf("device: Waitable: %w", err)
	}
	w := &waiter{ch: ch, sem: make(chan struct{}, 1)}
	if w.evCQ, err = cmem.New[*verbs.CQ](); err == nil {
		w.evCtx, err = cmem.New[unsafe.Pointer]()
	}
	if err != nil {
		w.destroyChannel()
		return nil, err
	}
	return w, nil
}

// compChannel is the channel to create a CQ with (nil without one).
func (w *waiter) compChannel() *verbs.CompChannel {
	if w == nil {
		return nil
	}
	return w.ch
}

// start puts the channel's descriptor in the poller for cq.
func (w *waiter) start(cq *verbs.CQ) error {
	fd, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(w.ch.FD), syscall.F_DUPFD_CLOEXEC, 0)
	if e != 0 {
		return fmt.Errorf("device: Waitable: dup of the completion channel's fd %d: %w", w.ch.FD, e)
	}
	// O_NONBLOCK is the open file's, so ibv_get_cq_event's own read of
	// the channel's fd does not block either: EAGAIN says none is left.
	if err := syscall.SetNonblock(int(fd), true); err != nil {
		syscall.Close(int(fd))
		return fmt.Errorf("device: Waitable: the completion channel's fd: %w", err)
	}
	f := os.NewFile(fd, "completion channel")
	raw, err := f.SyscallConn()
	if err == nil && f.SetReadDeadline(time.Time{}) != nil {
		err = errors.New("the runtime poller does not take it")
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("device: Waitable: the completion channel's fd %d: %w", w.ch.FD, err)
	}
	w.mu.Lock()
	w.cq, w.file, w.raw, w.shut = cq, f, raw, false
	w.mu.Unlock()
	return nil
}

// stop ends reads of the channel: a wait parked in the poller returns,
// and once stop returns, no read of the channel is in progress (Close of
// a pollable os.File waits for the calls using it).
func (w *waiter) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.shut {
		return
	}
	w.shut = true
	if w.file != nil {
		w.file.Close()
	}
}

// destroyChannel destroys the channel (its CQ destroyed first) and frees
// the waiter's C memory.
func (w *waiter) destroyChannel() error {
	err := verbs.DestroyCompChannel(w.ch)
	cmem.Free(w.evCQ)
	cmem.Free(w.evCtx)
	if err != nil {
		return fmt.Errorf("device: the CQ's completion channel: %w", err)
	}
	return nil
}

// arm asks for an event at the CQ's next completion.
func (w *waiter) arm() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.shut {
		return ErrClosed
	}
	if err := verbs.ReqNotifyCQ(w.cq, 0); err != nil {
		return fmt.Errorf("device: %w", err)
	}
	return nil
}

// longAgo is a deadline in the past: a cancelled context's.
var longAgo = time.Unix(1, 0)

// wait parks until the channel has events, reads and acknowledges them
// all. It returns nil when it took at least one; ctx's error when ctx
// ended; ErrClosed when the CQ is destroyed or the device closed.
func (w *waiter) wait(ctx context.Context) error {
	w.mu.Lock()
	f, raw, cq, shut := w.file, w.raw, w.cq, w.shut
	w.mu.Unlock()
	if shut {
		return ErrClosed
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		dl, _ := ctx.Deadline()
		f.SetReadDeadline(dl)
		stop := context.AfterFunc(ctx, func() { f.SetReadDeadline(longAgo) })
		var readErr error
		err := raw.Read(func(uintptr) bool {
			n := 0
			for {
				err := verbs.GetCQEvent(w.ch, w.evCQ, w.evCtx)
				if errors.Is(err, syscall.EAGAIN) {
					break
				}
				if err != nil {
					readErr = fmt.Errorf("device: %w", err)
					break
				}
				n++
				if *w.evCQ != cq {
					readErr = fmt.Errorf("device: the completion channel of CQ %p gave an event of CQ %p", cq, *w.evCQ)
					break
				}
			}
			if n > 0 {
				verbs.AckCQEvents(cq, uint32(n))
			}
			return n > 0 || readErr != nil
		})
		stop()
		switch {
		case readErr != nil:
			return readErr
		case err == nil:
			return nil
		case errors.Is(err, os.ErrDeadlineExceeded):
			// ctx ended, or a cancellation of an earlier wait set the
			// deadline late: the loop sees which.
		default:
			w.mu.Lock()
			shut := w.shut
			w.mu.Unlock()
			if shut { // the file closed under the wait
				return ErrClosed
			}
			return fmt.Errorf("device: waiting on the completion channel: %w", err)
		}
	}
}

// waiterOf is cq's waiter, if cq is a Waitable CQ of d.
func (d *Device) waiterOf(fn string, cq *verbs.CQ) (*waiter, error) {
	var w *waiter
	err := d.use(func() error {
		d.objMu.Lock()
		defer d.objMu.Unlock()
		x, ok := d.cqs[cq]
		switch {
		case !ok:
			return d.errNotMine(fn, "CQ", cq)
		case x == nil:
			return fmt.Errorf("device: %s: CQ %p was not created Waitable (it has no completion channel): %w", fn, cq, syscall.EINVAL)
		}
		w = x
		return nil
	})
	return w, err
}

// WaitCQ calls poll until it finds completions and returns what it
// returned (n > 0, or an error). poll polls cq: verbs.ExpPollCQ into a
// slice, or lease.Table.Poll, which also ends the leases of what it
// polls. Between polls that find nothing the goroutine sleeps in Go's
// poller on the CQ's completion channel (cq must be created Waitable),
// armed first and polled once more so no completion is missed: no
// thread blocked in C, no CPU spent, woken by the device's event.
//
// Completions that are there are returned even when ctx has ended; a
// wait for more ends with ctx's error (context.Canceled or
// DeadlineExceeded). One WaitCQ at a time waits on a CQ (others queue,
// each within its ctx). Destroying the CQ, or closing the device, ends a
// wait with ErrClosed.
//
// On the in-process software device the device must run by itself
// (device.Open(SoftdevName) opens it so; softdev.Open needs
// softdev.Autonomous), or nothing completes while the program sleeps.
func (d *Device) WaitCQ(ctx context.Context, cq *verbs.CQ, poll func() (int, error)) (int, error) {
	if poll == nil {
		return 0, fmt.Errorf("device: WaitCQ: nil poll function: %w", syscall.EINVAL)
	}
	w, err := d.waiterOf("WaitCQ", cq)
	if err != nil {
		return 0, err
	}
	if n, err := poll(); err != nil || n > 0 {
		return n, err
	}
	select {
	case w.sem <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-w.sem }()
	for {
		if err := w.arm(); err != nil {
			return 0, err
		}
		if n, err := poll(); err != nil || n > 0 {
			return n, err
		}
		if err := w.wait(ctx); err != nil {
			return 0, err
		}
		if n, err := poll(); err != nil || n > 0 {
			return n, err
		}
	}
}

// PollCQ polls up to len(wc) completions of cq into wc with
// ibv_exp_poll_cq, sleeping until there is at least one as WaitCQ does;
// it returns how many it polled.
func (d *Device) PollCQ(ctx context.Context, cq *verbs.CQ, wc []verbs.ExpWC) (int, error) {
	if len(wc) == 0 {
		return 0, fmt.Errorf("device: PollCQ: no room for a completion (an empty slice): %w", syscall.EINVAL)
	}
	wc = wc[:min(len(wc), math.MaxInt32)] // what ibv_exp_poll_cq's int count takes
	return d.WaitCQ(ctx, cq, func() (int, error) { return verbs.ExpPollCQ(cq, wc) })
}
