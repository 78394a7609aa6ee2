//go:build linux && cgo

package task_test

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/device"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/softdev"
	"github.com/verbsexp/verbsexp/runtime/task"
)

// TestPostQueueFull: a list posted again and again without polling
// fills its QP's send queue; the ENOMEM that ends it says which queue of
// which QP is full and that its CQ must be polled (it was a bare "cannot
// allocate memory" after 64 posts).
func TestPostQueueFull(t *testing.T) {
	dev, err := softdev.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer dev.DeallocPD(pd)
	cq, err := dev.CreateCQ(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.DestroyCQ(cq)
	qp, err := dev.CreateQP(pd, cq, cq)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.DestroyQP(qp)
	if err := device.ConnectPair(qp, qp); err != nil {
		t.Fatal(err)
	}
	buf, err := lease.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	mr, err := dev.RegMR(pd, buf.Bytes(), verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.DeregMR(mr)
	l, err := task.New(dev.Context(), task.Capacity{Tasks: 1, SendWRs: 1, SGEs: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Free()
	l.SendTask(qp)
	l.Send(1, verbs.ExpSendSignaled, verbs.SGE{Addr: buf.Addr(), Length: 8, Lkey: mr.Lkey})
	var perr error
	for n := 0; n < 100000 && perr == nil; n++ {
		perr = l.Post()
	}
	var pe *task.PostError
	if !errors.As(perr, &pe) || !errors.Is(perr, syscall.ENOMEM) {
		t.Fatalf("posting without polling ended with %v, want a *task.PostError wrapping ENOMEM", perr)
	}
	for _, w := range []string{"task 0 (ExpTaskSend, work requests 0..0): cannot allocate memory", fmt.Sprintf("the send queue of QP %d is full", qp.QPNum), "poll that queue's CQ"} {
		if !strings.Contains(perr.Error(), w) {
			t.Errorf("%q does not say %q", perr, w)
		}
	}
}
