//go:build linux && cgo

package softdev_test

import (
	"fmt"
	"log"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
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
	buf := softdev.CallocSlice[byte](4096) // C memory, registered below
	mr, _ := d.RegMR(pd, unsafe.Pointer(&buf[0]), len(buf), verbs.AccessLocalWrite)
	cq, _ := d.CreateCQ(16) // 32 slots: 16 rounded up to a power of two above it
	mgr, _ := d.CreateQP(pd, cq, cq, softdev.CrossChannel())
	a, _ := d.CreateQP(pd, cq, cq, softdev.ManagedSend())
	b, _ := d.CreateQP(pd, cq, cq)
	softdev.Connect(a, b)     // RESET -> INIT -> RTR -> RTS, each with the other's qp_num
	softdev.Connect(mgr, mgr) // a QP may be connected to itself

	sge := softdev.CallocSlice[verbs.SGE](2)
	sge[0] = verbs.SGE{Addr: uint64(uintptr(unsafe.Pointer(&buf[0]))), Length: 8, Lkey: mr.Lkey}
	sge[1] = verbs.SGE{Addr: sge[0].Addr + 64, Length: 8, Lkey: mr.Lkey}
	recv := softdev.Calloc[verbs.RecvWR]()
	*recv = verbs.RecvWR{WRID: 1, SGList: &sge[1], NumSGE: 1}
	wrs := softdev.CallocSlice[verbs.ExpSendWR](2)
	wrs[0] = verbs.ExpSendWR{WRID: 2, SGList: &sge[0], NumSGE: 1, ExpOpcode: verbs.ExpWRSend,
		ExpSendFlags: uint64(verbs.ExpSendSignaled)}
	wrs[1] = verbs.ExpSendWR{WRID: 3, ExpOpcode: verbs.ExpWRSendEnable,
		ExpSendFlags: uint64(verbs.ExpSendSignaled | verbs.ExpSendWaitEnLast)}
	wrs[1].Task.WQEEnable().QP, wrs[1].Task.WQEEnable().WQECount = a, 1
	badRecv, badSend := softdev.Calloc[*verbs.RecvWR](), softdev.Calloc[*verbs.ExpSendWR]()
	fmt.Println(verbs.PostRecv(b, recv, badRecv))         // the peer's receive
	fmt.Println(verbs.ExpPostSend(a, &wrs[0], badSend))   // held: a is managed
	fmt.Println(verbs.ExpPostSend(mgr, &wrs[1], badSend)) // releases it
	wc := softdev.CallocSlice[verbs.ExpWC](4)
	n, _ := verbs.ExpPollCQ(cq, wc) // runs the device
	for _, c := range wc[:n] {
		fmt.Println(c.WRID, c.Status, c.ExpOpcode)
	}

	for _, p := range []unsafe.Pointer{unsafe.Pointer(&sge[0]), unsafe.Pointer(recv), unsafe.Pointer(&wrs[0]),
		unsafe.Pointer(badRecv), unsafe.Pointer(badSend), unsafe.Pointer(&wc[0])} {
		softdev.Free(p)
	}
	d.DestroyQP(mgr)
	d.DestroyQP(a)
	d.DestroyQP(b)
	d.DestroyCQ(cq)
	d.DeregMR(mr)
	softdev.Free(unsafe.Pointer(&buf[0]))
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
