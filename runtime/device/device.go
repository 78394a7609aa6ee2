//go:build linux && cgo

package device

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"

	"github.com/verbsexp/verbsexp/generated/verbs"
)

// Env names the environment variable Open("") reads: the device a
// program written for an HCA runs on without a change. SoftdevName there
// is the in-process software device.
const Env = "VERBSEXP_DEVICE"

// SoftdevName is the name of the in-process software device
// (runtime/softdev), which a program has when it links that package.
const SoftdevName = "softdev"

// Device is an open verbs device and the objects created through it. Its
// methods are safe for concurrent use. A copy of a Device is the same
// device (its state sits behind one pointer): a second Close, through
// either, is ErrClosed.
type Device struct {
	*state // nil for the zero Device, which is refused as a nil one
}

type state struct {
	name  string
	port  uint8
	close func() error // closes ctx, once
	leaks bool         // Close reports the objects left (close does not)

	mu     sync.RWMutex // methods hold it shared, Close exclusively
	closed bool
	ctx    *verbs.Context

	objMu sync.Mutex // the objects below
	pds   map[*verbs.PD]struct{}
	mrs   map[*verbs.MR]struct{}
	cqs   map[*verbs.CQ]*waiter // nil for a CQ without Waitable
	qps   map[*verbs.QP]struct{}
}

// ErrClosed is returned by the methods of a closed Device.
var ErrClosed = errors.New("device: device is closed")

// ErrNilDevice is returned by the methods of a nil *Device (what Open
// returns with its error): an error, never a nil dereference.
var ErrNilDevice = fmt.Errorf("device: nil *Device (did Open fail?): %w", syscall.EINVAL)

// Option configures Open.
type Option func(*openConfig)

type openConfig struct{ port uint8 }

// Port sets the port Endpoint and QueryPort use (default 1).
func Port(n uint8) Option { return func(c *openConfig) { c.port = n } }

var openers struct {
	sync.Mutex
	m map[string]func() (*Device, error)
}

// Register makes Open(name) call open instead of looking name up in
// libibverbs: how a device that lives in the process joins the layer
// without the layer importing it. runtime/softdev registers SoftdevName
// in its init function. A second registration of a name replaces the
// first.
func Register(name string, open func() (*Device, error)) {
	openers.Lock()
	defer openers.Unlock()
	if openers.m == nil {
		openers.m = map[string]func() (*Device, error){}
	}
	openers.m[name] = open
}

func opener(name string) func() (*Device, error) {
	openers.Lock()
	defer openers.Unlock()
	return openers.m[name]
}

// Open opens a device by name: a device registered with Register (the
// in-process software device, SoftdevName, once the program imports
// runtime/softdev), else the libibverbs device of that name (an HCA, or
// softdev0 under `softdev exec`). An empty name is $VERBSEXP_DEVICE
// (Env) if set, else the first device libibverbs lists. The error says
// which devices there are when none matches, and what to import when the
// software device is asked for and not linked.
func Open(name string, opts ...Option) (*Device, error) {
	cfg := openConfig{port: 1}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.port == 0 {
		return nil, fmt.Errorf("device: open: port 0: ports are numbered from 1: %w", syscall.EINVAL)
	}
	where := fmt.Sprintf("%q", name)
	if name == "" {
		name = os.Getenv(Env)
		where = "$" + Env + "=" + name
	}
	var d *Device
	var err error
	switch open := opener(name); {
	case name != "" && open != nil:
		d, err = open()
	case name == SoftdevName:
		return nil, fmt.Errorf(`device: open %s: the in-process software device is in package runtime/softdev, which this program does not link: import _ "github.com/verbsexp/verbsexp/runtime/softdev" (or name a libibverbs device): %w`, where, syscall.ENODEV)
	default:
		d, err = openLibrary(name, where)
	}
	if err != nil {
		return nil, err
	}
	d.port = cfg.port
	return d, nil
}

// openLibrary opens the libibverbs device called name, or the first one
// listed if name is "".
func openLibrary(name, where string) (*Device, error) {
	soft := fmt.Sprintf("; %s=%s runs on the in-process software device", Env, SoftdevName)
	list, err := verbs.GetDeviceList()
	if err != nil {
		return nil, fmt.Errorf("device: open %s: %w%s", where, err, soft)
	}
	defer verbs.FreeDeviceList(list)
	var names []string
	for _, dev := range list.All() {
		got, err := verbs.GetDeviceName(dev)
		if err != nil {
			return nil, fmt.Errorf("device: ibv_get_device_name: %w", err)
		}
		names = append(names, got)
		if name != "" && got != name {
			continue
		}
		ctx, err := verbs.OpenDevice(dev)
		if err != nil {
			return nil, fmt.Errorf("device: ibv_open_device(%s): %w", got, err)
		}
		d, err := New(got, ctx, func() error {
			if err := verbs.CloseDevice(ctx); err != nil {
				return fmt.Errorf("device: ibv_close_device(%s): %w", got, err)
			}
			return nil
		})
		if err == nil {
			d.leaks = true // libibverbs does not say
		}
		return d, err
	}
	if list.Len() == 0 {
		return nil, fmt.Errorf("device: open %s: libibverbs lists no device (no HCA, or a program not started under softdev exec)%s: %w", where, soft, syscall.ENODEV)
	}
	return nil, fmt.Errorf("device: open %s: no such device among %s%s: %w", where, strings.Join(names, ", "), soft, syscall.ENODEV)
}

// New makes a Device of a context opened elsewhere (by a device that
// lives in the process, or by a program's own ibv_open_device): name
// names it in messages, close closes the context and is called once, by
// Close, whose error it returns (say there what was left open, if the
// device can tell). The resources of the Device go through the
// generated package's verbs, so ctx's provider must serve those.
func New(name string, ctx *verbs.Context, close func() error) (*Device, error) {
	if ctx == nil || close == nil {
		return nil, fmt.Errorf("device: New(%q): a context and a close function are needed: %w", name, syscall.EINVAL)
	}
	return &Device{&state{name: name, port: 1, close: close, ctx: ctx,
		pds: map[*verbs.PD]struct{}{}, mrs: map[*verbs.MR]struct{}{}, cqs: map[*verbs.CQ]*waiter{}, qps: map[*verbs.QP]struct{}{}}}, nil
}

// Name is the device's name: the libibverbs device's, or SoftdevName.
func (d *Device) Name() string {
	if d == nil || d.state == nil {
		return ""
	}
	return d.name
}

// Context returns the device's struct ibv_context, the argument of the
// generated verbs that take one (verbs.ExpPostTask, task.New, coll.New,
// …). It is nil once the device is closed (and for a nil Device), which
// every verb refuses with EINVAL.
func (d *Device) Context() *verbs.Context {
	if d == nil || d.state == nil {
		return nil
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return nil
	}
	return d.ctx
}

// use runs f unless the device is closed (or nil), with Close held off.
func (d *Device) use(f func() error) error {
	if d == nil || d.state == nil {
		return ErrNilDevice
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return ErrClosed
	}
	return f()
}

// LeakError is what Close of a libibverbs device returns when objects
// created through the Device were not destroyed (the in-process software
// device counts every object, and returns its own error). Close closes
// the device all the same: the objects go with its context.
type LeakError struct {
	PDs, MRs, CQs, QPs int
}

func (e *LeakError) Error() string {
	return fmt.Sprintf("device: closed with objects not destroyed: %d PD, %d MR, %d CQ, %d QP", e.PDs, e.MRs, e.CQs, e.QPs)
}

// Close closes the device, after the calls in flight on it. Waits on its
// CQs (WaitCQ) return ErrClosed. Objects still open go with it; Close
// then returns an error saying so (a *LeakError, or the software
// device's *softdev.LeakError). A second Close is ErrClosed.
func (d *Device) Close() error {
	if d == nil || d.state == nil {
		return ErrNilDevice
	}
	d.objMu.Lock()
	for _, w := range d.cqs {
		if w != nil {
			w.stop()
		}
	}
	d.objMu.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	d.closed = true
	d.objMu.Lock()
	leaks := LeakError{PDs: len(d.pds), MRs: len(d.mrs), CQs: len(d.cqs), QPs: len(d.qps)}
	d.objMu.Unlock()
	if err := d.close(); err != nil {
		return err
	}
	if d.leaks && leaks != (LeakError{}) {
		return &leaks
	}
	return nil
}
