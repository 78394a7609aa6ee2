//go:build linux && cgo

package device_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/cmem"
	"github.com/verbsexp/verbsexp/runtime/device"
	"github.com/verbsexp/verbsexp/runtime/lease"
	_ "github.com/verbsexp/verbsexp/runtime/softdev" // the in-process device, for VERBSEXP_DEVICE=softdev
)

// Opening the device $VERBSEXP_DEVICE names: here the in-process
// software device, as a program's tests would run it; on a cluster the
// same call opens the HCA.
func Example() {
	os.Setenv(device.Env, device.SoftdevName)
	defer os.Unsetenv(device.Env)

	dev, err := device.Open("") // $VERBSEXP_DEVICE, else the first HCA
	if err != nil {
		log.Fatal(err) // it says which devices there are, or what to import
	}
	defer dev.Close()
	a, err := dev.QueryPort(1)
	fmt.Println(dev.Name(), a.State, err)
	// Output: softdev PortActive <nil>
}

// Two QPs connected through their endpoints, as two processes would
// after trading them (here within one), a SEND from one to the other,
// and the receiver asleep until it comes.
func ExampleConnect() {
	dev, err := device.Open(device.SoftdevName)
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	pd, _ := dev.AllocPD()
	defer dev.DeallocPD(pd)
	scq, _ := dev.CreateCQ(4)
	defer dev.DestroyCQ(scq)
	rcq, _ := dev.CreateCQ(4, device.Waitable()) // slept on below
	defer dev.DestroyCQ(rcq)
	a, _ := dev.CreateQP(pd, scq, scq)
	defer dev.DestroyQP(a)
	b, _ := dev.CreateQP(pd, rcq, rcq)
	defer dev.DestroyQP(b)

	ea, _ := dev.Endpoint(a) // LID, GID, QP number, a random PSN, MTU
	eb, _ := dev.Endpoint(b)
	wire, _ := ea.MarshalBinary() // what a peer process would receive
	var got device.Endpoint
	if err := got.UnmarshalBinary(wire); err != nil {
		log.Fatal(err)
	}
	fmt.Println(device.Connect(a, ea, eb), device.Connect(b, eb, got))

	buf, _ := lease.Alloc(64)
	defer buf.Free()
	mr, _ := dev.RegMR(pd, buf.Bytes(), verbs.AccessLocalWrite)
	defer dev.DeregMR(mr)
	leases := lease.NewTable()
	defer leases.Close()
	dst, _ := leases.Lease(1, buf, 32, 32, mr.Lkey) // until the receive completes
	copy(buf.Bytes(), "over RC")
	sges, _ := cmem.Slice[verbs.SGE](2) // the verbs' records, in C memory
	defer cmem.FreeSlice(sges)
	sges[0], sges[1] = dst, verbs.SGE{Addr: buf.Addr(), Length: 32, Lkey: mr.Lkey}
	recv, _ := cmem.New[verbs.RecvWR]()
	defer cmem.Free(recv)
	*recv = verbs.RecvWR{WRID: 1, SGList: &sges[0], NumSGE: 1}
	send, _ := cmem.New[verbs.ExpSendWR]()
	defer cmem.Free(send)
	*send = verbs.ExpSendWR{WRID: 2, SGList: &sges[1], NumSGE: 1, ExpOpcode: verbs.ExpWRSend}
	fmt.Println(verbs.PostRecv(b, recv, nil), verbs.ExpPostSend(a, send, nil))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wc := make([]verbs.ExpWC, 1)
	n, err := dev.WaitCQ(ctx, rcq, func() (int, error) { return leases.Poll(rcq, wc) })
	fmt.Println(n, err, wc[0].Status, wc[0].ExpOpcode)
	fmt.Printf("%q\n", buf.Bytes()[32:39])
	// Output:
	// <nil> <nil>
	// <nil> <nil>
	// 1 <nil> WCSuccess ExpWCRecv
	// "over RC"
}
