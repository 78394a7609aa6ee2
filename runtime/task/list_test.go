//go:build linux && cgo

package task

import (
	"errors"
	"math"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/internal/shimtest"
)

// fakeQP and fakeCQ are C records the builders only store pointers to.
func fakeQP(t *testing.T) *verbs.QP {
	qp := shimtest.Calloc[verbs.QP]()
	t.Cleanup(func() { shimtest.Free(unsafe.Pointer(qp)) })
	return qp
}

func fakeCQ(t *testing.T) *verbs.CQ {
	cq := shimtest.Calloc[verbs.CQ]()
	t.Cleanup(func() { shimtest.Free(unsafe.Pointer(cq)) })
	return cq
}

func newList(t *testing.T, ctx *verbs.Context, c Capacity) *List {
	l, err := New(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Free() })
	return l
}

// TestBuildLinksInPlace checks the records the builders leave in C memory:
// tasks linked in order, each task's WRs linked from its item, SGEs
// copied into the arena, and the cross-channel parameters where the
// provider reads them.
func TestBuildLinksInPlace(t *testing.T) {
	ctx := shimtest.Open(true)
	defer shimtest.Close(ctx)
	l := newList(t, ctx, Capacity{Tasks: 3, SendWRs: 5, RecvWRs: 2, SGEs: 4})
	qp, mqp, cq := fakeQP(t), fakeQP(t), fakeCQ(t)

	rt, _ := l.RecvTask(qp)
	r1, _ := l.Recv(10, verbs.SGE{Addr: 0x1000, Length: 64, Lkey: 7})
	st, _ := l.SendTask(qp)
	s1, _ := l.Send(11, verbs.ExpSendSignaled, verbs.SGE{Addr: 0x2000, Length: 8, Lkey: 7}, verbs.SGE{Addr: 0x3000, Length: 8, Lkey: 7})
	s2, _ := l.Calc(12, 0, verbs.ExpCalcOpMaxloc, verbs.ExpCalcDataTypeFloat, verbs.SGE{Addr: 0x4000, Length: 16, Lkey: 7})
	wt, _ := l.SendTask(mqp)
	w, err := l.Wait(21, verbs.ExpSendSignaled|verbs.ExpSendWaitEnLast, cq, 2)
	if err != nil {
		t.Fatal(err)
	}
	e, _ := l.SendEnable(22, verbs.ExpSendWaitEnLast, qp, 3)
	re, _ := l.RecvEnable(23, 0, qp, 0)

	if rt.Next != st || st.Next != wt || wt.Next != nil {
		t.Fatal("tasks are not linked in build order")
	}
	if rt.TaskType != verbs.ExpTaskRecv || rt.Item.QP != qp || rt.Item.RecvWR() != r1 {
		t.Fatal("receive task item wrong")
	}
	if st.Item.SendWR() != s1 || s1.Next != s2 || s2.Next != nil {
		t.Fatal("send WRs not linked from the task item")
	}
	sg := unsafe.Slice(s1.SGList, s1.NumSGE)
	if len(sg) != 2 || sg[1].Addr != 0x3000 || uintptr(unsafe.Pointer(s1.SGList)) < uintptr(l.mem) {
		t.Fatalf("SGEs not copied into the arena: %+v", sg)
	}
	if s2.ExpSendFlags&uint64(verbs.ExpSendWithCalc) == 0 || s2.Op.Calc().CalcOp != verbs.ExpCalcOpMaxloc || s2.Op.Calc().DataType != verbs.ExpCalcDataTypeFloat {
		t.Fatal("calc parameters not set")
	}
	if w.WRID != 21 || w.ExpOpcode != verbs.ExpWRCQEWait || w.Task.CQEWait().CQ != cq || w.Task.CQEWait().CQCount != 2 ||
		w.ExpSendFlags != uint64(verbs.ExpSendSignaled|verbs.ExpSendWaitEnLast) {
		t.Fatalf("wait WR wrong: wr_id %d opcode %v flags %#x", w.WRID, w.ExpOpcode, w.ExpSendFlags)
	}
	if e.WRID != 22 || e.ExpOpcode != verbs.ExpWRSendEnable || e.Task.WQEEnable().QP != qp || e.Task.WQEEnable().WQECount != 3 ||
		e.ExpSendFlags != uint64(verbs.ExpSendWaitEnLast) || w.Next != e {
		t.Fatal("send enable WR wrong")
	}
	if re.WRID != 23 || re.ExpOpcode != verbs.ExpWRRecvEnable || re.Task.WQEEnable().WQECount != 0 || re.ExpSendFlags != 0 || e.Next != re {
		t.Fatal("receive enable WR wrong")
	}
}

// TestMisuse: each misuse is its builder's error, and sticks (the
// List's Err) until Reset; Post of an empty list is ErrEmpty, which does
// not stick; a freed List is ErrFreed.
func TestMisuse(t *testing.T) {
	ctx := shimtest.Open(true)
	defer shimtest.Close(ctx)
	qp := fakeQP(t)
	l := newList(t, ctx, Capacity{Tasks: 1, SendWRs: 1, SGEs: 1})
	if err := l.Post(); !errors.Is(err, ErrEmpty) || !errors.Is(err, syscall.EINVAL) {
		t.Errorf("Post of an empty list: %v", err)
	}
	if err := l.Err(); err != nil {
		t.Errorf("Err after Post of an empty list = %v, want nil (ErrEmpty is Post's, not a builder's)", err)
	}
	for _, c := range []struct {
		name  string
		build func() error // the last call misuses the List
		want  error
	}{
		{"Send before a task", func() error { return second(l.Send(1, 0)) }, ErrNoTask},
		{"Recv on a send task", func() error { l.SendTask(qp); return second(l.Recv(1)) }, ErrWrongKind},
		{"two SGEs in a list with room for one", func() error {
			l.SendTask(qp)
			return second(l.Send(1, 0, verbs.SGE{}, verbs.SGE{}))
		}, syscall.ENOMEM},
		{"WR over capacity", func() error { l.SendTask(qp); l.Send(1, 0); return second(l.Send(2, 0)) }, syscall.ENOMEM},
		{"task over capacity", func() error { l.SendTask(qp); return second(l.SendTask(qp)) }, syscall.ENOMEM},
		{"nil QP", func() error { return second(l.SendTask(nil)) }, syscall.EINVAL},
	} {
		if err := l.Reset(); err != nil {
			t.Fatal(err)
		}
		err := c.build()
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if got := l.Err(); got == nil || got != err {
			t.Errorf("%s: Err = %v, want the builder's error %v", c.name, got, err)
		}
	}
	if err := l.Free(); err != nil {
		t.Fatal(err)
	}
	if err := l.Post(); !errors.Is(err, ErrFreed) {
		t.Errorf("Post after Free: %v", err)
	}
	if err := l.Err(); !errors.Is(err, ErrFreed) {
		t.Errorf("Err after Free: %v", err)
	}
	if err := l.Free(); !errors.Is(err, ErrFreed) {
		t.Errorf("double Free: %v", err)
	}
	if _, err := New(nil, Capacity{Tasks: 1}); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("New(nil ctx): %v", err)
	}
	if _, err := New(ctx, Capacity{}); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("New with no tasks: %v", err)
	}
}

// TestCountsMustFit: counts the C fields (int32) cannot hold are refused,
// not truncated (1<<32+1 would wait for one CQE), and nothing is added.
func TestCountsMustFit(t *testing.T) {
	ctx := shimtest.Open(true)
	defer shimtest.Close(ctx)
	qp, cq := fakeQP(t), fakeCQ(t)
	l := newList(t, ctx, Capacity{Tasks: 1, SendWRs: 4})
	for _, n := range []int{1<<32 + 1, math.MaxInt32 + 1, -1} {
		for _, c := range []struct {
			name, field string
			call        func() error
		}{
			{"Wait", "cq_count", func() error { return second(l.Wait(1, 0, cq, n)) }},
			{"SendEnable", "wqe_count", func() error { return second(l.SendEnable(1, 0, qp, n)) }},
			{"RecvEnable", "wqe_count", func() error { return second(l.RecvEnable(1, 0, qp, n)) }},
		} {
			l.Reset() // the refusal sticks: each case on a new list
			if _, err := l.SendTask(qp); err != nil {
				t.Fatal(err)
			}
			if err := c.call(); !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), c.field) {
				t.Errorf("%s count %d: %v", c.name, n, err)
			}
			if l.nSends != 0 {
				t.Errorf("%s count %d: %d WRs built", c.name, n, l.nSends)
			}
		}
	}
	l.Reset()
	l.SendTask(qp)
	if w, err := l.Wait(1, 0, cq, math.MaxInt32); err != nil || w.Task.CQEWait().CQCount != math.MaxInt32 {
		t.Fatalf("the largest count: %v", err)
	}
	if l.nSends != 1 {
		t.Fatalf("%d WRs built, want only the last", l.nSends)
	}
}

// TestPostOnceZeroCopy: one ibv_exp_post_task call, with the arena's own
// first task; no allocation; posting again works without rebuilding.
func TestPostOnceZeroCopy(t *testing.T) {
	ctx := shimtest.Open(true)
	defer shimtest.Close(ctx)
	qp := fakeQP(t)
	l := newList(t, ctx, Capacity{Tasks: 2, SendWRs: 2, SGEs: 2})
	first, _ := l.SendTask(qp)
	l.Send(1, 0, verbs.SGE{Addr: 1, Length: 1})
	l.SendTask(qp)
	l.Send(2, 0)
	shimtest.SetPostTaskResult(0)
	before := shimtest.Calls()
	if err := l.Post(); err != nil {
		t.Fatal(err)
	}
	if got := shimtest.Calls() - before; got != 1 {
		t.Fatalf("Post made %d provider calls, want 1", got)
	}
	c, tk, _ := shimtest.Seen()
	if c != unsafe.Pointer(ctx) || tk != unsafe.Pointer(first) {
		t.Fatalf("provider saw ctx %p task %p, want %p %p", c, tk, ctx, first)
	}
	if a := testing.AllocsPerRun(100, func() { l.Post() }); a != 0 {
		t.Fatalf("Post allocates %.1f times per call", a)
	}
	if a := testing.AllocsPerRun(100, func() {
		l.Reset()
		l.SendTask(qp)
		l.Send(3, 0, verbs.SGE{Addr: 1, Length: 1})
	}); a != 0 {
		t.Fatalf("Reset and rebuild allocate %.1f times", a)
	}
}

// TestPostErrorMapsBadTask: the provider fails at the second task; the
// error names it by index, with its WR range and the errno.
func TestPostErrorMapsBadTask(t *testing.T) {
	ctx := shimtest.Open(true)
	defer shimtest.Close(ctx)
	qp := fakeQP(t)
	l := newList(t, ctx, Capacity{Tasks: 3, SendWRs: 5})
	l.SendTask(qp)
	l.Send(1, 0)
	l.Send(2, 0)
	l.SendTask(qp) // the provider reports task->next: this one
	l.Send(3, 0)
	l.Send(4, 0)
	l.Send(5, 0)
	shimtest.SetPostTaskResult(int(syscall.ENOMEM))
	defer shimtest.SetPostTaskResult(0)
	err := l.Post()
	var pe *PostError
	if !errors.As(err, &pe) || !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("Post = %v, want a PostError wrapping ENOMEM", err)
	}
	if pe.Task != 1 || pe.Kind != verbs.ExpTaskSend || pe.FirstWR != 2 || pe.NumWRs != 3 {
		t.Fatalf("PostError %+v, want task 1 with send WRs 2..4", pe)
	}
}
