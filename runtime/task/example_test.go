//go:build linux && cgo

package task_test

import (
	"fmt"
	"log"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/device"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/softdev"
	"github.com/verbsexp/verbsexp/runtime/task"
)

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
