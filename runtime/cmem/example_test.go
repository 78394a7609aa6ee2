//go:build linux && cgo

package cmem_test

import (
	"fmt"
	"log"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/cmem"
)

// A work request and its gather list in C memory, as the verbs take them,
// without unsafe; a second Free is an error, not a crash.
func Example() {
	sge, err := cmem.Slice[verbs.SGE](2)
	if err != nil {
		log.Fatal(err)
	}
	wr, err := cmem.New[verbs.ExpSendWR]()
	if err != nil {
		log.Fatal(err)
	}
	sge[0] = verbs.SGE{Addr: 0x1000, Length: 64, Lkey: 7}
	sge[1] = verbs.SGE{Addr: 0x2000, Length: 64, Lkey: 7}
	wr.WRID, wr.SGList, wr.NumSGE = 1, &sge[0], int32(len(sge))
	wr.ExpOpcode = verbs.ExpWRSend
	fmt.Println(wr.WRID, wr.NumSGE, wr.SGList.Length)

	fmt.Println(cmem.Free(wr), cmem.FreeSlice(sge))
	fmt.Println(cmem.Free(wr) != nil)
	// Output:
	// 1 2 64
	// <nil> <nil>
	// true
}
