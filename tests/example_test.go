package tests

import (
	"fmt"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
)

// Example_usingThePackage is the README's "Using the package": generated
// records are plain Go values; union members are accessors at fixed
// offsets. (Records handed to a verb belong in C memory; these stay in
// Go.)
func Example_usingThePackage() {
	qp := new(verbs.QP)
	wr := new(verbs.ExpSendWR)
	addr := uint64(0x10000)

	var t verbs.ExpTask            // struct ibv_exp_task
	t.TaskType = verbs.ExpTaskSend // typed enum constant
	t.Item.QP = qp                 // *verbs.QP
	t.Item.SetSendWR(wr)           // member of an anonymous union: accessor
	wr.WR.RDMA().RemoteAddr = addr // named union member: pointer accessor

	fmt.Println(unsafe.Sizeof(t), t.TaskType, t.Item.QP == qp, t.Item.SendWR() == wr)
	fmt.Printf("%#x\n", wr.WR.RDMA().RemoteAddr)
	// Output:
	// 40 ExpTaskSend true true
	// 0x10000
}
