//go:build linux && cgo

package softdev_test

import (
	"fmt"
	"log"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/cmem"
	"github.com/verbsexp/verbsexp/runtime/device"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/softdev"
)

// The objects of a schedule and the verbs that reach the device: a
// managed QP's send, held until a manager's SEND_ENABLE releases it.
// Its body is the package documentation's snippet.
func Example() {
	d, err := softdev.Open()
	if err != nil {
		log.Fatal(err) // it says why: an address or a port taken (and by whom), no file descriptors, …
	}
	pd, _ := d.AllocPD()
	buf, _ := lease.Alloc(4096) // C memory, registered below
	mr, _ := d.RegMR(pd, buf.Bytes(), verbs.AccessLocalWrite)
	cq, _ := d.CreateCQ(16) // 32 slots: 16 rounded up to a power of two above it
	mgr, _ := d.CreateQP(pd, cq, cq, device.CrossChannel())
	a, _ := d.CreateQP(pd, cq, cq, device.ManagedSend())
	b, _ := d.CreateQP(pd, cq, cq)
	device.ConnectPair(a, b)     // RESET -> INIT -> RTR -> RTS, each with the other's qp_num
	device.ConnectPair(mgr, mgr) // a QP may be connected to itself

	sge, _ := cmem.Slice[verbs.SGE](2)
	sge[0] = verbs.SGE{Addr: buf.Addr(), Length: 8, Lkey: mr.Lkey}
	sge[1] = verbs.SGE{Addr: buf.Addr() + 64, Length: 8, Lkey: mr.Lkey}
	recv, _ := cmem.New[verbs.RecvWR]()
	*recv = verbs.RecvWR{WRID: 1, SGList: &sge[1], NumSGE: 1}
	wrs, _ := cmem.Slice[verbs.ExpSendWR](2)
	wrs[0] = verbs.ExpSendWR{WRID: 2, SGList: &sge[0], NumSGE: 1, ExpOpcode: verbs.ExpWRSend,
		ExpSendFlags: uint64(verbs.ExpSendSignaled)}
	wrs[1] = verbs.ExpSendWR{WRID: 3, ExpOpcode: verbs.ExpWRSendEnable,
		ExpSendFlags: uint64(verbs.ExpSendSignaled | verbs.ExpSendWaitEnLast)}
	wrs[1].Task.WQEEnable().QP, wrs[1].Task.WQEEnable().WQECount = a, 1
	fmt.Println(verbs.PostRecv(b, recv, nil))         // the peer's receive
	fmt.Println(verbs.ExpPostSend(a, &wrs[0], nil))   // held: a is managed
	fmt.Println(verbs.ExpPostSend(mgr, &wrs[1], nil)) // releases it
	wc, _ := cmem.Slice[verbs.ExpWC](4)
	for got := 0; got < 3; { // completions come microseconds after the post, as an HCA's: poll until they do
		n, _ := verbs.ExpPollCQ(cq, wc) // runs the device
		for _, c := range wc[:n] {
			fmt.Println(c.WRID, c.Status, c.ExpOpcode)
		}
		got += int(n)
	}

	cmem.FreeSlice(sge)
	cmem.Free(recv)
	cmem.FreeSlice(wrs)
	cmem.FreeSlice(wc)
	d.DestroyQP(mgr)
	d.DestroyQP(a)
	d.DestroyQP(b)
	d.DestroyCQ(cq)
	d.DeregMR(mr)
	buf.Free()
	d.DeallocPD(pd)
	fmt.Println(d.Close()) // a *LeakError if something was left
	// Output:
	// <nil>
	// <nil>
	// <nil>
	// 3 WCSuccess ExpWCSend
	// 1 WCSuccess ExpWCRecv
	// 2 WCSuccess ExpWCSend
	// <nil>
}
