//go:build linux && cgo

package task_test

import (
	"errors"
	"fmt"
	"log"
	"syscall"
	"testing"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/device"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/softdev"
	"github.com/verbsexp/verbsexp/runtime/task"
)

// TestReadmeListTooSmall is issue 34's scenario: the README's first task
// list, its builders unchecked as there, in a List one send work request
// too small (Capacity{SendWRs: 2}). The WAIT does not fit; Post used to
// post the rest and return nil. It must return the capacity error and
// post nothing.
func TestReadmeListTooSmall(t *testing.T) {
	check := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	dev, err := softdev.Open()
	check(err)
	defer func() { check(dev.Close()) }()
	pd, err := dev.AllocPD()
	check(err)
	defer dev.DeallocPD(pd)
	cq, err := dev.CreateCQ(16)
	check(err)
	defer dev.DestroyCQ(cq)
	mcq, err := dev.CreateCQ(16)
	check(err)
	defer dev.DestroyCQ(mcq)
	worker, err := dev.CreateQP(pd, cq, cq, device.ManagedSend())
	check(err)
	defer dev.DestroyQP(worker)
	peer, err := dev.CreateQP(pd, cq, cq)
	check(err)
	defer dev.DestroyQP(peer)
	mgr, err := dev.CreateQP(pd, mcq, mcq, device.CrossChannel())
	check(err)
	defer dev.DestroyQP(mgr)
	check(device.ConnectPair(worker, peer))
	check(device.ConnectPair(mgr, mgr))
	buf, err := lease.Alloc(4096)
	check(err)
	defer buf.Free()
	mr, err := dev.RegMR(pd, buf.Bytes(), verbs.AccessLocalWrite)
	check(err)
	defer dev.DeregMR(mr)
	leases := lease.NewTable()
	src, err := leases.Lease(1, buf, 0, 64, mr.Lkey)
	check(err)
	dst, err := leases.Lease(2, buf, 64, 64, mr.Lkey)
	check(err)
	defer func() { check(errors.Join(leases.Release(1), leases.Release(2), leases.Close())) }()

	l, err := task.New(dev.Context(), task.Capacity{Tasks: 3, SendWRs: 2, RecvWRs: 1, SGEs: 2})
	check(err)
	defer l.Free()
	l.RecvTask(peer)
	l.Recv(2, dst)
	l.SendTask(worker)
	l.Send(1, verbs.ExpSendSignaled, src)
	l.SendTask(mgr)
	l.SendEnable(10, verbs.ExpSendSignaled|verbs.ExpSendWaitEnLast, worker, 1)
	l.Wait(11, verbs.ExpSendSignaled|verbs.ExpSendWaitEnLast, cq, 2) // the third send WR: no room
	err = l.Post()

	var ce *task.CapacityError
	if !errors.As(err, &ce) || ce.What != "send work requests" || ce.Cap != 2 || !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("Post of the README's list with room for 2 send WRs = %v, want its *CapacityError (send work requests, 2)", err)
	}
	if l.Err() != err {
		t.Errorf("Err = %v, want what Post returned", l.Err())
	}
	if _, err := dev.Progress(); err != nil {
		t.Fatal(err)
	}
	for name, qp := range map[string]*verbs.QP{"worker": worker, "peer": peer, "manager": mgr} {
		_, send, recv, err := dev.QPStats(qp)
		check(err)
		if send.Posted != 0 || recv.Posted != 0 {
			t.Errorf("the %s QP had %d sends and %d receives posted, want none", name, send.Posted, recv.Posted)
		}
	}
	for name, q := range map[string]*verbs.CQ{"cq": cq, "manager cq": mcq} {
		st, err := dev.CQStats(q)
		check(err)
		if st.Produced != 0 {
			t.Errorf("%s: %d completions, want none: nothing was to be posted", name, st.Produced)
		}
	}
}

// A List need not be checked builder by builder: its first builder
// error sticks, every builder after it does nothing, and Post returns
// that error without posting. Reset clears it.
func ExampleList_Err() {
	check := func(err error) {
		if err != nil {
			log.Fatal(err)
		}
	}
	dev, err := softdev.Open()
	check(err)
	pd, err := dev.AllocPD()
	check(err)
	cq, err := dev.CreateCQ(8)
	check(err)
	qp, err := dev.CreateQP(pd, cq, cq, device.CrossChannel())
	check(err)
	check(device.ConnectPair(qp, qp))

	l, err := task.New(dev.Context(), task.Capacity{Tasks: 1, SendWRs: 1})
	check(err)
	l.SendTask(qp)
	l.Send(1, verbs.ExpSendSignaled)        // a zero-length send
	l.Wait(2, verbs.ExpSendSignaled, cq, 1) // no room: the error sticks …
	l.SendEnable(3, 0, qp, 0)               // … and this adds nothing
	err = l.Post()                          // posts nothing: the first error
	fmt.Println(err)
	fmt.Println(errors.Is(err, syscall.ENOMEM), err == l.Err())
	_, err = dev.Progress()
	check(err)
	st, err := dev.CQStats(cq)
	check(err)
	fmt.Println("completions:", st.Produced)
	check(l.Reset()) // a new list: no error
	fmt.Println(l.Err())

	check(l.Free())
	check(dev.DestroyQP(qp))
	check(dev.DestroyCQ(cq))
	check(dev.DeallocPD(pd))
	check(dev.Close())
	// Output:
	// task list is full: capacity of 1 send work request reached: size the List for the whole schedule (task.Capacity.SendWRs)
	// true true
	// completions: 0
	// <nil>
}
