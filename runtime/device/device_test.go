//go:build linux && cgo

package device_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/cmem"
	"github.com/verbsexp/verbsexp/runtime/device"
	"github.com/verbsexp/verbsexp/runtime/softdev"
)

// open opens the in-process device (as VERBSEXP_DEVICE=softdev does),
// closed at cleanup, which must find nothing left.
func open(t testing.TB) *device.Device {
	t.Helper()
	d, err := device.Open(device.SoftdevName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil && !errors.Is(err, device.ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return d
}

func must[T any](t testing.TB) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// TestOpenByName: "softdev" and $VERBSEXP_DEVICE=softdev open the
// in-process device; any other name goes to libibverbs, whose error
// says what there is and what to do.
func TestOpenByName(t *testing.T) {
	d := open(t)
	if d.Name() != device.SoftdevName || d.Context() == nil {
		t.Fatalf("Open(softdev): name %q, context %p", d.Name(), d.Context())
	}
	t.Setenv(device.Env, device.SoftdevName)
	e, err := device.Open("")
	if err != nil {
		t.Fatalf("Open(\"\") with %s=softdev: %v", device.Env, err)
	}
	if e.Name() != device.SoftdevName || e.Context() == d.Context() {
		t.Errorf("Open(\"\") with %s=softdev: %q, context %p (the first device's %p): want a device of its own", device.Env, e.Name(), e.Context(), d.Context())
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	t.Setenv(device.Env, "")
	for _, name := range []string{"", "mlx5_9"} {
		_, err := device.Open(name)
		if err == nil || !strings.Contains(err.Error(), device.Env+"="+device.SoftdevName) {
			t.Errorf("Open(%q) without an HCA: %v; want an error that names %s=%s", name, err, device.Env, device.SoftdevName)
		}
	}
	if _, err := device.Open(device.SoftdevName, device.Port(0)); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("Port(0): %v, want EINVAL", err)
	}
}

// TestLayerImportsNoDevice: the layer must not import the software
// device (softdev registers itself), or every program on an HCA would
// carry it.
func TestLayerImportsNoDevice(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasSuffix(dep, "/runtime/softdev") {
			t.Fatalf("runtime/device depends on %s", dep)
		}
	}
}

// TestCloseAndCopies: a copy is the same device; Close twice is
// ErrClosed, through either; every method of a closed or nil Device is an
// error, never a crash.
func TestCloseAndCopies(t *testing.T) {
	d, err := device.Open(device.SoftdevName)
	if err != nil {
		t.Fatal(err)
	}
	cp := *d
	pd := must[*verbs.PD](t)(cp.AllocPD())
	if err := d.DeallocPD(pd); err != nil {
		t.Fatalf("DeallocPD through the original of the copy's PD: %v", err)
	}
	if err := cp.Close(); err != nil {
		t.Fatal(err)
	}
	var zero device.Device
	for _, c := range []struct {
		name string
		d    *device.Device
		want error
	}{{"closed", d, device.ErrClosed}, {"nil", nil, device.ErrNilDevice}, {"zero", &zero, device.ErrNilDevice}} {
		calls := map[string]error{"Close": c.d.Close(), "DeallocPD": c.d.DeallocPD(pd)}
		_, calls["AllocPD"] = c.d.AllocPD()
		_, calls["CreateCQ"] = c.d.CreateCQ(4)
		_, calls["CreateQP"] = c.d.CreateQP(nil, nil, nil)
		_, calls["RegMR"] = c.d.RegMR(nil, make([]byte, 1), 0)
		_, calls["QueryPort"] = c.d.QueryPort(1)
		_, calls["QueryGID"] = c.d.QueryGID(1, 0)
		_, calls["Endpoint"] = c.d.Endpoint(nil)
		calls["DestroyCQ"], calls["DestroyQP"], calls["DeregMR"] = c.d.DestroyCQ(nil), c.d.DestroyQP(nil), c.d.DeregMR(nil)
		for name, err := range calls {
			if !errors.Is(err, c.want) {
				t.Errorf("%s device: %s = %v, want %v", c.name, name, err, c.want)
			}
		}
		if c.d.Context() != nil {
			t.Errorf("%s device: Context %p, want nil", c.name, c.d.Context())
		}
	}
}

// TestNotMine: objects of another device, destroyed ones and nil are
// refused with EINVAL before any verb reads them; the other device's
// are left as they were.
func TestNotMine(t *testing.T) {
	d, e := open(t), open(t)
	pd, epd := must[*verbs.PD](t)(d.AllocPD()), must[*verbs.PD](t)(e.AllocPD())
	cq, ecq := must[*verbs.CQ](t)(d.CreateCQ(4)), must[*verbs.CQ](t)(e.CreateCQ(4))
	qp, eqp := must[*verbs.QP](t)(d.CreateQP(pd, cq, cq)), must[*verbs.QP](t)(e.CreateQP(epd, ecq, ecq))
	mem := make([]byte, 64)
	gone := must[*verbs.PD](t)(d.AllocPD())
	if err := d.DeallocPD(gone); err != nil {
		t.Fatal(err)
	}
	calls := map[string]func() error{
		"DeallocPD(theirs)":    func() error { return d.DeallocPD(epd) },
		"DeallocPD(destroyed)": func() error { return d.DeallocPD(gone) },
		"DeallocPD(nil)":       func() error { return d.DeallocPD(nil) },
		"RegMR(their PD)":      func() error { _, err := d.RegMR(epd, mem, 0); return err },
		"RegMR(destroyed PD)":  func() error { _, err := d.RegMR(gone, mem, 0); return err },
		"RegMR(no memory)":     func() error { _, err := d.RegMR(pd, nil, 0); return err },
		"DestroyCQ(theirs)":    func() error { return d.DestroyCQ(ecq) },
		"CreateQP(their PD)":   func() error { _, err := d.CreateQP(epd, cq, cq); return err },
		"CreateQP(their CQ)":   func() error { _, err := d.CreateQP(pd, ecq, cq); return err },
		"CreateQP(nil CQ)":     func() error { _, err := d.CreateQP(pd, cq, nil); return err },
		"CreateQP(huge caps)": func() error {
			_, err := d.CreateQP(pd, cq, cq, device.QPCaps(device.Caps{SendWR: 1 << 40}))
			return err
		},
		"CreateCQ(0)":          func() error { _, err := d.CreateCQ(0); return err },
		"CreateCQ(1<<40)":      func() error { _, err := d.CreateCQ(1 << 40); return err },
		"DestroyQP(theirs)":    func() error { return d.DestroyQP(eqp) },
		"Endpoint(theirs)":     func() error { _, err := d.Endpoint(eqp); return err },
		"WaitCQ(their CQ)":     func() error { _, err := d.PollCQ(t.Context(), ecq, make([]verbs.ExpWC, 1)); return err },
		"WaitCQ(not Waitable)": func() error { _, err := d.PollCQ(t.Context(), cq, make([]verbs.ExpWC, 1)); return err },
		"PollCQ(no room)":      func() error { _, err := d.PollCQ(t.Context(), cq, nil); return err },
		"QueryGID(negative)":   func() error { _, err := d.QueryGID(1, -1); return err },
		"Connect(nil)":         func() error { return device.Connect(nil, device.Endpoint{}, device.Endpoint{}) },
		"ConnectPair(nil)":     func() error { return device.ConnectPair(qp, nil) },
		"Connect(other's local)": func() error {
			return device.Connect(qp, device.Endpoint{Port: 1, QPNum: qp.QPNum + 1, MTU: verbs.MTU1024}, device.Endpoint{MTU: verbs.MTU1024})
		},
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%s = %v, want EINVAL", name, err)
		}
	}
	// Nothing of it reached the other device, or this one's objects.
	for _, c := range []struct {
		d   *device.Device
		qp  *verbs.QP
		cq  *verbs.CQ
		pd  *verbs.PD
		who string
	}{{d, qp, cq, pd, "this"}, {e, eqp, ecq, epd, "the other"}} {
		if err := errors.Join(c.d.DestroyQP(c.qp), c.d.DestroyCQ(c.cq), c.d.DeallocPD(c.pd)); err != nil {
			t.Errorf("%s device's objects: %v", c.who, err)
		}
	}
}

// TestLeaks: Close of the in-process device with objects left says so
// (softdev's own count), and closes the device all the same.
func TestLeaks(t *testing.T) {
	d, err := device.Open(device.SoftdevName)
	if err != nil {
		t.Fatal(err)
	}
	pd := must[*verbs.PD](t)(d.AllocPD())
	cq := must[*verbs.CQ](t)(d.CreateCQ(4, device.Waitable()))
	must[*verbs.QP](t)(d.CreateQP(pd, cq, cq))
	var le *softdev.LeakError
	if err := d.Close(); !errors.As(err, &le) || le.PDs != 1 || le.CQs != 1 || le.QPs != 1 {
		t.Fatalf("Close with a PD, a CQ and a QP left: %v", err)
	}
	if d.Context() != nil {
		t.Fatal("a closed device has a context")
	}
}

// TestCreateOptions: the options reach the device (ibv_query_qp reads
// back what it made).
func TestCreateOptions(t *testing.T) {
	d := open(t)
	pd := must[*verbs.PD](t)(d.AllocPD())
	defer d.DeallocPD(pd)
	cq := must[*verbs.CQ](t)(d.CreateCQ(64, device.CrossChannelCQ(), device.IgnoreOverrun()))
	defer d.DestroyCQ(cq)
	if cq.CQE < 64 {
		t.Errorf("a CQ of 64 entries has %d", cq.CQE)
	}
	caps := device.Caps{SendWR: 32, RecvWR: 16, SendSGE: 3, RecvSGE: 2, Inline: 32}
	for _, c := range []struct {
		name   string
		opts   []device.QPOption
		typ    verbs.QPType
		sigAll int32
	}{
		{"RC", []device.QPOption{device.QPCaps(caps), device.SigAll(), device.CrossChannel(), device.ManagedSend(), device.ManagedRecv()}, verbs.QptRC, 1},
		{"UC", []device.QPOption{device.QPCaps(caps), device.Transport(verbs.QptUC)}, verbs.QptUC, 0},
		{"UD", []device.QPOption{device.QPCaps(caps), device.Transport(verbs.QptUD)}, verbs.QptUD, 0},
	} {
		qp := must[*verbs.QP](t)(d.CreateQP(pd, cq, cq, c.opts...))
		attr, init := must[*verbs.QPAttr](t)(cmem.New[verbs.QPAttr]()), must[*verbs.QPInitAttr](t)(cmem.New[verbs.QPInitAttr]())
		if err := verbs.QueryQP(qp, attr, 0, init); err != nil {
			t.Fatal(err)
		}
		got := init.Cap
		if qp.QPType != c.typ || init.QPType != c.typ || init.SQSigAll != c.sigAll || got.MaxSendWR < 32 || got.MaxRecvWR < 16 ||
			got.MaxSendSGE < 3 || got.MaxRecvSGE < 2 || got.MaxInlineData < 32 {
			t.Errorf("%s: type %v, sq_sig_all %d, caps %+v", c.name, init.QPType, init.SQSigAll, got)
		}
		cmem.Free(attr)
		cmem.Free(init)
		if err := d.DestroyQP(qp); err != nil {
			t.Fatal(err)
		}
	}
}

func contextWithTimeout(t testing.TB, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), d)
}

// pollOnce is one ibv_exp_poll_cq into wc.
func pollOnce(cq *verbs.CQ, wc []verbs.ExpWC) (int, error) { return verbs.ExpPollCQ(cq, wc) }
