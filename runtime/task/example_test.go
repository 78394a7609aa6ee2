//go:build linux && cgo

package task_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/device"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/softdev"
	"github.com/verbsexp/verbsexp/runtime/task"
)

// A first task list: the worker's send waits until a manager QP releases
// it; the manager then waits for the send's and the receive's
// completions, and the program sleeps until the manager's completions
// come. Its body is examples/tasklist's main, which the README shows, on
// the in-process software device (the program opens the device
// $VERBSEXP_DEVICE names, else the first HCA).
func ExampleList() {
	check := func(err error) {
		if err != nil {
			log.Fatal(err)
		}
	}
	dev, err := device.Open(device.SoftdevName) // examples/tasklist opens "": $VERBSEXP_DEVICE, else the first HCA
	check(err)
	pd, err := dev.AllocPD()
	check(err)
	cq, err := dev.CreateCQ(16) // the send and receive completions
	check(err)
	mcq, err := dev.CreateCQ(16, device.Waitable()) // the manager's, slept on below
	check(err)
	worker, err := dev.CreateQP(pd, cq, cq, device.ManagedSend()) // sends wait for a SEND_ENABLE
	check(err)
	peer, err := dev.CreateQP(pd, cq, cq)
	check(err)
	mgr, err := dev.CreateQP(pd, mcq, mcq, device.CrossChannel()) // may post waits and enables
	check(err)
	check(device.ConnectPair(worker, peer)) // loopback RC connection
	check(device.ConnectPair(mgr, mgr))

	buf, err := lease.Alloc(4096) // page-aligned C memory
	check(err)
	mr, err := dev.RegMR(pd, buf.Bytes(), verbs.AccessLocalWrite)
	check(err)
	copy(buf.Bytes(), "hello, cross-channel")
	leases := lease.NewTable()
	src, err := leases.Lease(1, buf, 0, 64, mr.Lkey) // held until wr_id 1 completes
	check(err)
	dst, err := leases.Lease(2, buf, 64, 64, mr.Lkey)
	check(err)

	l, err := task.New(dev.Context(), task.Capacity{Tasks: 3, SendWRs: 3, RecvWRs: 1, SGEs: 2})
	check(err)
	l.RecvTask(peer)
	l.Recv(2, dst) // the peer's receive, posted first
	l.SendTask(worker)
	l.Send(1, verbs.ExpSendSignaled, src) // held: the worker is managed
	l.SendTask(mgr)
	l.SendEnable(10, verbs.ExpSendSignaled|verbs.ExpSendWaitEnLast, worker, 1) // release the send …
	l.Wait(11, verbs.ExpSendSignaled|verbs.ExpSendWaitEnLast, cq, 2)           // … then wait for 2 CQEs on cq
	check(l.Post())                                                            // one ibv_exp_post_task, or the first builder's error

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mwc := make([]verbs.ExpWC, 2)
	for m := 0; m < len(mwc); {
		n, err := dev.PollCQ(ctx, mcq, mwc[m:]) // sleeps until the manager's CQ has completions
		check(err)
		m += n
	}
	wc := make([]verbs.ExpWC, 4)
	n, err := leases.Poll(cq, wc) // there since the CQE_WAIT completed; ends the leases it sees
	check(err)
	for _, c := range wc[:n] {
		fmt.Println("cq: wr_id", c.WRID, c.Status, c.ExpOpcode)
	}
	for _, c := range mwc {
		fmt.Println("manager cq: wr_id", c.WRID, c.Status)
	}
	fmt.Printf("received %q\n", buf.Bytes()[64:84])

	check(l.Free())
	check(leases.Close())
	check(dev.DeregMR(mr))
	check(buf.Free())
	for _, qp := range []*verbs.QP{mgr, peer, worker} {
		check(dev.DestroyQP(qp))
	}
	check(dev.DestroyCQ(cq))
	check(dev.DestroyCQ(mcq))
	check(dev.DeallocPD(pd))
	check(dev.Close()) // an error if anything was left
	// Output:
	// cq: wr_id 2 WCSuccess ExpWCRecv
	// cq: wr_id 1 WCSuccess ExpWCSend
	// manager cq: wr_id 10 WCSuccess
	// manager cq: wr_id 11 WCSuccess
	// received "hello, cross-channel"
}

// The package documentation's list: a send posted with one call, its
// completion polled. Its body is the snippet in the package doc.
func Example() {
	dev, err := softdev.Open()
	if err != nil {
		log.Fatal(err) // it says why: an address or a port taken (and by whom), …
	}
	defer dev.Close()
	pd, _ := dev.AllocPD()
	defer dev.DeallocPD(pd)
	cq, _ := dev.CreateCQ(8)
	defer dev.DestroyCQ(cq)
	qp, _ := dev.CreateQP(pd, cq, cq)
	defer dev.DestroyQP(qp)
	device.ConnectPair(qp, qp) // a QP connected to itself
	buf, _ := lease.Alloc(64)
	defer buf.Free()
	mr, _ := dev.RegMR(pd, buf.Bytes(), verbs.AccessLocalWrite)
	defer dev.DeregMR(mr)

	l, _ := task.New(dev.Context(), task.Capacity{Tasks: 2, SendWRs: 1, RecvWRs: 1, SGEs: 2})
	defer l.Free()
	l.RecvTask(qp)
	l.Recv(1, verbs.SGE{Addr: buf.Addr() + 32, Length: 32, Lkey: mr.Lkey})
	l.SendTask(qp)
	l.Send(2, verbs.ExpSendSignaled, verbs.SGE{Addr: buf.Addr(), Length: 32, Lkey: mr.Lkey})
	err = l.Post() // one ibv_exp_post_task; a *task.PostError names the task that failed

	wc := make([]verbs.ExpWC, 2)
	n := 0
	for n < 2 { // the completions come microseconds later, as an HCA's
		k, _ := verbs.ExpPollCQ(cq, wc[n:])
		n += int(k)
	}
	fmt.Println(err, n, wc[0].WRID, wc[1].WRID)
	// Output: <nil> 2 1 2
}
