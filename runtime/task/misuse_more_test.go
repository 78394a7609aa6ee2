//go:build linux && cgo

package task

import (
	"errors"
	"math"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/cmem"
	"github.com/verbsexp/verbsexp/runtime/device"
	"github.com/verbsexp/verbsexp/runtime/softdev"
)

// Misuse of Lists, on the software device through the real inline
// dispatch path: every refusal is its documented error (and EINVAL or
// ENOMEM), leaves the List as it was, and nothing a device would read
// points outside what the caller named.

// rig is a device with a worker QP (managed send), a peer and a
// cross-channel manager, connected, and a registered buffer.
type rig struct {
	dev              *softdev.Device
	pd               *verbs.PD
	cq               *verbs.CQ
	worker, mgr, qp2 *verbs.QP
	buf              []byte
	mr               *verbs.MR
}

func newRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{}
	var err error
	if r.dev, err = softdev.Open(); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	r.pd, err = r.dev.AllocPD()
	must(err)
	r.cq, err = r.dev.CreateCQ(64)
	must(err)
	r.worker, err = r.dev.CreateQP(r.pd, r.cq, r.cq, device.ManagedSend())
	must(err)
	r.mgr, err = r.dev.CreateQP(r.pd, r.cq, r.cq, device.CrossChannel())
	must(err)
	r.qp2, err = r.dev.CreateQP(r.pd, r.cq, r.cq)
	must(err)
	must(device.ConnectPair(r.worker, r.qp2))
	must(device.ConnectPair(r.mgr, r.mgr))
	r.buf, err = cmem.Slice[byte](4096)
	must(err)
	r.mr, err = r.dev.RegMR(r.pd, r.buf, verbs.AccessLocalWrite)
	must(err)
	t.Cleanup(func() {
		r.dev.DeregMR(r.mr)
		for _, q := range []*verbs.QP{r.worker, r.mgr, r.qp2} {
			r.dev.DestroyQP(q)
		}
		r.dev.DestroyCQ(r.cq)
		r.dev.DeallocPD(r.pd)
		if err := r.dev.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		cmem.FreeSlice(r.buf)
	})
	return r
}

func (r *rig) sge(off, n int) verbs.SGE {
	return verbs.SGE{Addr: uint64(uintptr(unsafe.Pointer(&r.buf[off]))), Length: uint32(n), Lkey: r.mr.Lkey}
}

func (r *rig) list(t *testing.T, c Capacity) *List {
	t.Helper()
	l, err := New(r.dev.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Free() })
	return l
}

// counts is what a refused builder must leave unchanged.
func counts(l *List) [4]int { return [4]int{l.nTasks, l.nSends, l.nRecvs, l.nSGEs} }

// TestMisuseNilAndFreedList: a nil List (what a failed New returns), a
// freed one, one whose copy was freed and the zero List refuse
// everything with ErrFreed, which wraps EINVAL (the sentinels did not
// wrap it, though the docs said so).
func TestMisuseNilAndFreedList(t *testing.T) {
	r := newRig(t)
	freed, err := New(r.dev.Context(), Capacity{Tasks: 2, SendWRs: 2, RecvWRs: 1, SGEs: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := freed.Free(); err != nil {
		t.Fatal(err)
	}
	// A List whose copy was freed is freed: the copy shares its state
	// (a second Free used to free the arena again, a Post to post it).
	copied, err := New(r.dev.Context(), Capacity{Tasks: 2, SendWRs: 2, RecvWRs: 1, SGEs: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := copied.SendTask(r.worker); err != nil {
		t.Fatal(err)
	}
	if _, err := copied.Send(1, 0, r.sge(0, 8)); err != nil {
		t.Fatal(err)
	}
	cp := *copied
	if err := cp.Free(); err != nil {
		t.Fatal(err)
	}
	for _, l := range []*List{nil, freed, copied, {}} {
		for name, err := range map[string]error{
			"SendTask":   second(l.SendTask(r.worker)),
			"RecvTask":   second(l.RecvTask(r.qp2)),
			"Send":       second(l.Send(1, 0)),
			"Write":      second(l.Write(1, 0, 0, 0)),
			"Read":       second(l.Read(1, 0, 0, 0)),
			"Calc":       second(l.Calc(1, 0, verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint, r.sge(0, 16))),
			"Wait":       second(l.Wait(1, 0, r.cq, 1)),
			"SendEnable": second(l.SendEnable(1, 0, r.worker, 0)),
			"RecvEnable": second(l.RecvEnable(1, 0, r.worker, 0)),
			"Recv":       second(l.Recv(1)),
			"Post":       l.Post(),
			"Reset":      l.Reset(),
			"Free":       l.Free(),
		} {
			if !errors.Is(err, ErrFreed) || !errors.Is(err, syscall.EINVAL) {
				t.Errorf("%p.%s = %v, want ErrFreed (EINVAL)", l, name, err)
			}
		}
		if l.Len() != 0 {
			t.Errorf("Len of a nil or freed List = %d", l.Len())
		}
	}
	for _, e := range []error{ErrFreed, ErrEmpty, ErrNoTask, ErrWrongKind} {
		if !errors.Is(e, syscall.EINVAL) {
			t.Errorf("%v does not wrap EINVAL", e)
		}
	}
}

func TestMisuseNew(t *testing.T) {
	r := newRig(t)
	closed, err := softdev.Open()
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	for _, c := range []struct {
		name string
		ctx  *verbs.Context
		cap  Capacity
	}{
		{"nil ctx", nil, Capacity{Tasks: 1}},
		{"a closed device's ctx", closed.Context(), Capacity{Tasks: 1}},
		{"no tasks", r.dev.Context(), Capacity{}},
		{"Tasks -1", r.dev.Context(), Capacity{Tasks: -1}},
		{"Tasks MinInt", r.dev.Context(), Capacity{Tasks: math.MinInt}},
		{"SendWRs -1", r.dev.Context(), Capacity{Tasks: 1, SendWRs: -1}},
		{"RecvWRs MinInt", r.dev.Context(), Capacity{Tasks: 1, RecvWRs: math.MinInt}},
		{"SGEs -1", r.dev.Context(), Capacity{Tasks: 1, SGEs: -1}},
		{"Tasks 1<<32+1", r.dev.Context(), Capacity{Tasks: 1<<32 + 1}},
		{"SGEs 1<<63-1", r.dev.Context(), Capacity{Tasks: 1, SGEs: math.MaxInt}},
	} {
		if l, err := New(c.ctx, c.cap); !errors.Is(err, syscall.EINVAL) || l != nil {
			t.Errorf("New(%s) = %v, %v; want EINVAL", c.name, l, err)
		}
	}
}

// TestMisuseBuilders: counts, ranges, operands and arguments the C
// fields cannot hold or a device must not be handed are refused by the
// builders, with nothing appended, and the refusal sticks (Err). Each
// case runs on the List Reset, with one send task.
func TestMisuseBuilders(t *testing.T) {
	r := newRig(t)
	l := r.list(t, Capacity{Tasks: 3, SendWRs: 4, RecvWRs: 2, SGEs: 4})
	if _, err := l.Send(1, 0); !errors.Is(err, ErrNoTask) || !errors.Is(err, syscall.EINVAL) {
		t.Errorf("Send before any task: %v", err)
	}
	top := verbs.SGE{Addr: math.MaxUint64 - 7, Length: 16, Lkey: r.mr.Lkey}
	for _, c := range []struct {
		name string
		call func() error
		want error
	}{
		{"Wait count -1", func() error { return second(l.Wait(1, 0, r.cq, -1)) }, syscall.EINVAL},
		{"Wait count MinInt", func() error { return second(l.Wait(1, 0, r.cq, math.MinInt)) }, syscall.EINVAL},
		{"Wait count MaxInt32+1", func() error { return second(l.Wait(1, 0, r.cq, math.MaxInt32+1)) }, syscall.EINVAL},
		{"Wait count 1<<32+1", func() error { return second(l.Wait(1, 0, r.cq, 1<<32+1)) }, syscall.EINVAL},
		{"Wait count MaxInt", func() error { return second(l.Wait(1, 0, r.cq, math.MaxInt)) }, syscall.EINVAL},
		{"Wait nil CQ", func() error { return second(l.Wait(1, 0, nil, 1)) }, syscall.EINVAL},
		{"SendEnable count -1", func() error { return second(l.SendEnable(1, 0, r.worker, -1)) }, syscall.EINVAL},
		{"SendEnable count 1<<32", func() error { return second(l.SendEnable(1, 0, r.worker, 1<<32)) }, syscall.EINVAL},
		{"SendEnable nil QP", func() error { return second(l.SendEnable(1, 0, nil, 0)) }, syscall.EINVAL},
		{"RecvEnable count 1<<63-1", func() error { return second(l.RecvEnable(1, 0, r.worker, math.MaxInt)) }, syscall.EINVAL},
		{"RecvEnable nil QP", func() error { return second(l.RecvEnable(1, 0, nil, 0)) }, syscall.EINVAL},
		{"Send SGE wrapping the address space", func() error { return second(l.Send(1, 0, top)) }, syscall.EINVAL},
		{"Send SGE at MaxUint64", func() error {
			return second(l.Send(1, 0, verbs.SGE{Addr: math.MaxUint64, Length: 1}))
		}, syscall.EINVAL},
		{"Write remote range wrapping", func() error { return second(l.Write(1, 0, math.MaxUint64-7, 1, r.sge(0, 16))) }, syscall.EINVAL},
		{"Write remote range wrapping over two SGEs", func() error {
			return second(l.Write(1, 0, math.MaxUint64-20, 1, r.sge(0, 16), r.sge(16, 16)))
		}, syscall.EINVAL},
		{"Read remote range wrapping", func() error { return second(l.Read(1, 0, math.MaxUint64, 1, r.sge(0, 1))) }, syscall.EINVAL},
		{"Calc without operands", func() error {
			return second(l.Calc(1, 0, verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint))
		}, syscall.EINVAL},
		{"Calc 8-byte operand", func() error {
			return second(l.Calc(1, 0, verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint, r.sge(0, 16), r.sge(16, 8)))
		}, syscall.EINVAL},
		{"Calc 17-byte operand", func() error {
			return second(l.Calc(1, 0, verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint, r.sge(0, 17)))
		}, syscall.EINVAL},
		{"Calc empty operand", func() error {
			return second(l.Calc(1, 0, verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint, r.sge(0, 0)))
		}, syscall.EINVAL},
		{"five SGEs in room for four", func() error {
			return second(l.Send(1, 0, r.sge(0, 1), r.sge(1, 1), r.sge(2, 1), r.sge(3, 1), r.sge(4, 1)))
		}, syscall.ENOMEM},
		{"Recv on a send task", func() error { return second(l.Recv(1, r.sge(0, 8))) }, ErrWrongKind},
		{"SendTask nil QP", func() error { return second(l.SendTask(nil)) }, syscall.EINVAL},
		{"RecvTask nil QP", func() error { return second(l.RecvTask(nil)) }, syscall.EINVAL},
	} {
		if err := l.Reset(); err != nil {
			t.Fatal(err)
		}
		if _, err := l.SendTask(r.mgr); err != nil {
			t.Fatal(err)
		}
		before := counts(l)
		err := c.call()
		if !errors.Is(err, c.want) {
			t.Errorf("%s = %v, want %v", c.name, err, c.want)
		}
		if after := counts(l); after != before {
			t.Errorf("%s: the List changed from %v to %v", c.name, before, after)
		}
		if l.Err() != err {
			t.Errorf("%s: Err = %v, want the refusal %v", c.name, l.Err(), err)
		}
	}
	// At capacity: each region says so with a *CapacityError (ENOMEM)
	// that names the Capacity field to raise.
	l.Reset()
	l.SendTask(r.mgr)
	for range 4 {
		if _, err := l.Send(2, 0); err != nil {
			t.Fatal(err)
		}
	}
	var ce *CapacityError
	if _, err := l.Send(3, 0); !errors.As(err, &ce) || ce.What != "send work requests" || !errors.Is(err, syscall.ENOMEM) ||
		!strings.Contains(err.Error(), "task.Capacity.SendWRs") {
		t.Errorf("fifth send WR: %v", err)
	}
	l.Reset()
	l.RecvTask(r.qp2)
	l.Recv(4)
	l.Recv(5)
	if _, err := l.Recv(6); !errors.As(err, &ce) || ce.What != "receive work requests" || !strings.Contains(err.Error(), "task.Capacity.RecvWRs") {
		t.Errorf("third receive WR: %v", err)
	}
	l.Reset()
	l.SendTask(r.worker)
	l.SendTask(r.worker)
	l.SendTask(r.worker)
	if _, err := l.SendTask(r.worker); !errors.As(err, &ce) || ce.What != "tasks" || !strings.Contains(err.Error(), "task.Capacity.Tasks") {
		t.Errorf("fourth task: %v", err)
	}
}

// TestMisusePost: what the device refuses comes back as a *PostError
// naming the task; a List edited into a loop is refused by the device,
// not walked for ever; a task with no work requests is reported as such.
func TestMisusePost(t *testing.T) {
	r := newRig(t)
	l := r.list(t, Capacity{Tasks: 4, SendWRs: 4, RecvWRs: 2, SGEs: 4})
	if err := l.Post(); !errors.Is(err, ErrEmpty) || !errors.Is(err, syscall.EINVAL) {
		t.Errorf("Post of an empty List: %v", err)
	}
	// An unknown send flag on the second task's WR.
	l.RecvTask(r.qp2)
	l.Recv(1, r.sge(0, 64))
	l.SendTask(r.mgr)
	l.Send(2, verbs.ExpSendFlags(1)<<40)
	var pe *PostError
	if err := l.Post(); !errors.As(err, &pe) || pe.Errno != syscall.EINVAL || pe.Task != 1 || pe.Kind != verbs.ExpTaskSend || pe.FirstWR != 0 || pe.NumWRs != 1 {
		t.Errorf("Post with a bad send flag: %v (%+v)", err, pe)
	}
	// A CQE_WAIT on a CQ of another device.
	other, err := softdev.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	theirCQ, err := other.CreateCQ(4)
	if err != nil {
		t.Fatal(err)
	}
	defer other.DestroyCQ(theirCQ)
	l.Reset()
	l.SendTask(r.mgr)
	l.Wait(3, 0, theirCQ, 1)
	if err := l.Post(); !errors.As(err, &pe) || pe.Errno != syscall.EINVAL || pe.Task != 0 {
		t.Errorf("Post of a wait on another device's CQ: %v", err)
	}
	// A task without work requests on a destroyed QP.
	dead, err := r.dev.CreateQP(r.pd, r.cq, r.cq)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.dev.DestroyQP(dead); err != nil {
		t.Fatal(err)
	}
	l.Reset()
	l.SendTask(dead)
	if err := l.Post(); !errors.As(err, &pe) || pe.Task != 0 || pe.NumWRs != 0 || !strings.Contains(err.Error(), "no work requests") {
		t.Errorf("Post of an empty task on a destroyed QP: %v", err)
	}
	// The caller edits a task's next back to the first: the device
	// refuses the loop whole (it used to walk it for ever).
	l.Reset()
	t0, _ := l.SendTask(r.mgr)
	l.Send(4, 0)
	t1, _ := l.SendTask(r.mgr)
	l.Send(5, 0)
	l.SendTask(r.mgr)
	l.Send(6, 0)
	t1.Next = t0
	_, before, _, _ := r.dev.QPStats(r.mgr)
	if err := l.Post(); !errors.As(err, &pe) || pe.Errno != syscall.EINVAL || pe.Task != 1 {
		t.Errorf("Post of a list looping back: %v (%+v)", err, pe)
	}
	if _, after, _, _ := r.dev.QPStats(r.mgr); after.Posted != before.Posted {
		t.Errorf("a looping list posted %d WRs", after.Posted-before.Posted)
	}
	// A calc with an operand outside the MR passes the builder (the
	// device checks keys and ranges) and fails when it runs: nothing
	// outside the buffer is read, the completion says why.
	l.Reset()
	l.SendTask(r.mgr)
	outside := r.sge(4096-16, 16)
	outside.Addr += 8
	if _, err := l.Calc(7, verbs.ExpSendSignaled, verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint, outside); err != nil {
		t.Fatal(err)
	}
	l.RecvTask(r.mgr)
	l.Recv(8, r.sge(0, 16))
	if err := l.Post(); err != nil {
		t.Fatalf("Post: %v", err)
	}
	wc := make([]verbs.ExpWC, 4)
	n, err := verbs.ExpPollCQ(r.cq, wc)
	for end := time.Now().Add(10 * time.Second); n == 0 && err == nil && time.Now().Before(end); {
		n, err = verbs.ExpPollCQ(r.cq, wc) // the completion comes microseconds later, as an HCA's
	}
	if err != nil || n < 1 || wc[0].WRID != 7 || wc[0].Status != verbs.WCLocProtErr {
		t.Errorf("calc with an operand past its MR: %d completions %v, first wr_id %d status %v", n, err, wc[0].WRID, wc[0].Status)
	}
}

func second[T any](_ T, err error) error { return err }
