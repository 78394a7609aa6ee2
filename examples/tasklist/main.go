//go:build linux && cgo

// Command tasklist posts a first cross-channel task list: a worker QP's
// send is held (the QP is created managed) until a manager QP releases it
// with a SEND_ENABLE; the manager then waits (CQE_WAIT) for the send's
// and the receive's completions, and the program sleeps until the
// manager's own completions come. It runs unchanged on an HCA, on softdev
// under `softdev exec`, and on the software device in this process:
//
//	VERBSEXP_DEVICE=softdev go run ./examples/tasklist
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/device"
	"github.com/verbsexp/verbsexp/runtime/lease"
	_ "github.com/verbsexp/verbsexp/runtime/softdev" // VERBSEXP_DEVICE=softdev: the software device, in process
	"github.com/verbsexp/verbsexp/runtime/task"
)

func main() {
	check := func(err error) {
		if err != nil {
			log.Fatal(err)
		}
	}
	dev, err := device.Open("") // $VERBSEXP_DEVICE, else the first device libibverbs lists
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
}
