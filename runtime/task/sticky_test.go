//go:build linux && cgo

package task

import (
	"errors"
	"math"
	"syscall"
	"testing"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/internal/shimtest"
)

// Sticky builder errors (issue 34 §3): a List built without checking
// each builder must not post with a work request left out.

// TestStickyEveryBuilder: after a builder error, every builder returns
// that error, returns no record and builds nothing, although each call
// would succeed on a List without it (the capacity leaves room for all).
func TestStickyEveryBuilder(t *testing.T) {
	ctx := shimtest.Open(true)
	defer shimtest.Close(ctx)
	qp, cq := fakeQP(t), fakeCQ(t)
	l := newList(t, ctx, Capacity{Tasks: 4, SendWRs: 16, RecvWRs: 4, SGEs: 16})
	if _, err := l.SendTask(qp); err != nil {
		t.Fatal(err)
	}
	first := second(l.Recv(1)) // a receive on a send task
	if !errors.Is(first, ErrWrongKind) {
		t.Fatalf("Recv on a send task = %v, want ErrWrongKind", first)
	}
	sge := verbs.SGE{Addr: 0x1000, Length: 16, Lkey: 7}
	before := counts(l)
	// In an order in which each would succeed without the first error.
	for _, c := range []struct {
		name  string
		build func() (any, error)
	}{
		{"SendTask", func() (any, error) { return l.SendTask(qp) }},
		{"Send", func() (any, error) { return l.Send(2, 0, sge) }},
		{"Write", func() (any, error) { return l.Write(3, 0, 0x2000, 1, sge) }},
		{"Read", func() (any, error) { return l.Read(4, 0, 0x2000, 1, sge) }},
		{"Calc", func() (any, error) {
			return l.Calc(5, 0, verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint, sge, sge)
		}},
		{"Wait", func() (any, error) { return l.Wait(6, 0, cq, 1) }},
		{"SendEnable", func() (any, error) { return l.SendEnable(7, 0, qp, 1) }},
		{"RecvEnable", func() (any, error) { return l.RecvEnable(8, 0, qp, 1) }},
		{"RecvTask", func() (any, error) { return l.RecvTask(qp) }},
		{"Recv", func() (any, error) { return l.Recv(9, sge) }},
	} {
		rec, err := c.build()
		if err != first {
			t.Errorf("%s after an error = %v, want the first error %v", c.name, err, first)
		}
		if !isNilRecord(rec) {
			t.Errorf("%s after an error returned a record %v", c.name, rec)
		}
		if after := counts(l); after != before {
			t.Errorf("%s after an error built: the List went from %v to %v", c.name, before, after)
		}
	}
	if err := l.Err(); err != first {
		t.Errorf("Err = %v, want %v", err, first)
	}
}

// isNilRecord says whether a builder's record is a nil pointer.
func isNilRecord(rec any) bool {
	switch r := rec.(type) {
	case *verbs.ExpTask:
		return r == nil
	case *verbs.ExpSendWR:
		return r == nil
	case *verbs.RecvWR:
		return r == nil
	}
	return false
}

// TestStickyPostAndReset: whatever the first error (each misuse the
// builders refuse), Post returns it without calling the provider, Err
// returns it, a copy of the List sees it, and Reset (through the copy)
// clears it: the rebuilt list posts.
func TestStickyPostAndReset(t *testing.T) {
	ctx := shimtest.Open(true)
	defer shimtest.Close(ctx)
	qp, cq := fakeQP(t), fakeCQ(t)
	shimtest.SetPostTaskResult(0)
	l := newList(t, ctx, Capacity{Tasks: 2, SendWRs: 2, RecvWRs: 1, SGEs: 2})
	for _, c := range []struct {
		name  string
		build func() error // its last builder fails
		want  error
	}{
		{"no task", func() error { return second(l.Send(1, 0)) }, ErrNoTask},
		{"wrong kind", func() error { l.RecvTask(qp); return second(l.Send(1, 0)) }, ErrWrongKind},
		{"send WRs full", func() error {
			l.SendTask(qp)
			l.Send(1, 0)
			l.Wait(2, 0, cq, 1)
			return second(l.Wait(3, 0, cq, 1))
		}, syscall.ENOMEM},
		{"receive WRs full", func() error { l.RecvTask(qp); l.Recv(1); return second(l.Recv(2)) }, syscall.ENOMEM},
		{"SGEs full", func() error {
			l.SendTask(qp)
			return second(l.Send(1, 0, verbs.SGE{}, verbs.SGE{}, verbs.SGE{}))
		}, syscall.ENOMEM},
		{"tasks full", func() error { l.SendTask(qp); l.SendTask(qp); return second(l.RecvTask(qp)) }, syscall.ENOMEM},
		{"nil QP", func() error { return second(l.SendTask(nil)) }, syscall.EINVAL},
		{"nil CQ", func() error { l.SendTask(qp); return second(l.Wait(1, 0, nil, 1)) }, syscall.EINVAL},
		{"count", func() error { l.SendTask(qp); return second(l.SendEnable(1, 0, qp, math.MaxInt32+1)) }, syscall.EINVAL},
		{"Calc operand", func() error {
			l.SendTask(qp)
			return second(l.Calc(1, 0, verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint, verbs.SGE{Length: 8}))
		}, syscall.EINVAL},
		{"remote range", func() error {
			l.SendTask(qp)
			return second(l.Write(1, 0, math.MaxUint64, 1, verbs.SGE{Length: 2}))
		}, syscall.EINVAL},
	} {
		if err := l.Reset(); err != nil {
			t.Fatal(err)
		}
		first := c.build()
		if !errors.Is(first, c.want) {
			t.Fatalf("%s: %v, want %v", c.name, first, c.want)
		}
		// A later, valid task and work request change nothing.
		l.SendTask(qp)
		l.Send(9, verbs.ExpSendSignaled)
		calls := shimtest.Calls()
		if err := l.Post(); err != first {
			t.Errorf("%s: Post = %v, want the first builder error %v", c.name, err, first)
		}
		if n := shimtest.Calls() - calls; n != 0 {
			t.Errorf("%s: Post after a builder error made %d provider calls, want none", c.name, n)
		}
		if err := l.Err(); err != first {
			t.Errorf("%s: Err = %v, want %v", c.name, err, first)
		}
		cp := *l // the same list
		if err := cp.Err(); err != first {
			t.Errorf("%s: a copy's Err = %v, want %v", c.name, err, first)
		}
		if err := cp.Reset(); err != nil {
			t.Fatal(err)
		}
		if err := l.Err(); err != nil {
			t.Errorf("%s: Err after Reset (through a copy) = %v, want nil", c.name, err)
		}
		l.SendTask(qp)
		l.Send(10, verbs.ExpSendSignaled)
		calls = shimtest.Calls()
		if err := l.Post(); err != nil || shimtest.Calls()-calls != 1 {
			t.Errorf("%s: Post of the list rebuilt after Reset = %v after %d provider calls, want nil after 1", c.name, err, shimtest.Calls()-calls)
		}
	}
}

// TestStickyNotPostErrorsNorEmpty: Post's own errors do not stick. An
// empty List's ErrEmpty leaves it buildable, and a *PostError leaves it
// as built: posted again, it posts.
func TestStickyNotPostErrorsNorEmpty(t *testing.T) {
	ctx := shimtest.Open(true)
	defer shimtest.Close(ctx)
	qp := fakeQP(t)
	l := newList(t, ctx, Capacity{Tasks: 1, SendWRs: 1})
	if err := l.Post(); !errors.Is(err, ErrEmpty) {
		t.Fatalf("Post of an empty List = %v", err)
	}
	if _, err := l.SendTask(qp); err != nil {
		t.Fatalf("SendTask after ErrEmpty: %v", err)
	}
	if _, err := l.Send(1, 0); err != nil {
		t.Fatal(err)
	}
	shimtest.SetPostTaskResult(int(syscall.ENOMEM))
	err := l.Post()
	shimtest.SetPostTaskResult(0)
	var pe *PostError
	if !errors.As(err, &pe) {
		t.Fatalf("Post = %v, want a *PostError", err)
	}
	if err := l.Err(); err != nil {
		t.Errorf("Err after a *PostError = %v, want nil", err)
	}
	if err := l.Post(); err != nil {
		t.Errorf("Post again after a *PostError = %v, want nil", err)
	}
}

// TestStickyFree: Free clears the builder error with the rest; from then
// on everything is ErrFreed, Err included, for the List and its copies,
// as it is for a nil or zero List.
func TestStickyFree(t *testing.T) {
	ctx := shimtest.Open(true)
	defer shimtest.Close(ctx)
	l, err := New(ctx, Capacity{Tasks: 1})
	if err != nil {
		t.Fatal(err)
	}
	cp := *l
	if _, err := l.Send(1, 0); !errors.Is(err, ErrNoTask) {
		t.Fatalf("Send without a task = %v", err)
	}
	if err := cp.Free(); err != nil {
		t.Fatal(err)
	}
	var nilList *List
	for name, l := range map[string]*List{"the freed List": l, "its copy": &cp, "a nil List": nilList, "the zero List": {}} {
		if err := l.Err(); !errors.Is(err, ErrFreed) {
			t.Errorf("%s: Err = %v, want ErrFreed", name, err)
		}
		if err := l.Post(); !errors.Is(err, ErrFreed) {
			t.Errorf("%s: Post = %v, want ErrFreed", name, err)
		}
		if _, err := l.SendTask(fakeQP(t)); !errors.Is(err, ErrFreed) {
			t.Errorf("%s: SendTask = %v, want ErrFreed", name, err)
		}
	}
}
