//go:build linux && cgo

package shimtest

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	"github.com/verbsexp/verbsexp/abiutil"
	"github.com/verbsexp/verbsexp/generated/verbs"
)

// Example is the README's "Calling the verbs", run against the test
// provider (a context whose post_task fails with EAGAIN and polls three
// completions).
func Example() {
	ctx := Open(true)
	defer Close(ctx)
	task, next, attr := Calloc[verbs.ExpTask](), Calloc[verbs.ExpTask](), Calloc[verbs.ExpCQInitAttr]()
	defer Free(unsafe.Pointer(task))
	defer Free(unsafe.Pointer(next))
	defer Free(unsafe.Pointer(attr))
	task.Next = next
	SetPostTaskResult(int(syscall.EAGAIN))
	defer SetPostTaskResult(0)
	SetPollResult(3, 0)
	defer SetPollResult(0, 0)

	// From here as in the README.
	var bad *verbs.ExpTask // or pass nil: not told which task failed
	if err := verbs.ExpPostTask(ctx, task, &bad); err != nil {
		var ce *abiutil.CallError
		fmt.Println(errors.As(err, &ce), ce.Func, errors.Is(err, syscall.EAGAIN), bad == next)
	}
	cq, err := verbs.ExpCreateCQ(ctx, 64, nil, nil, 0, attr) // (*verbs.CQ, error)
	if err != nil {
		panic(err)
	}
	wc := make([]verbs.ExpWC, 16)
	n, err := verbs.ExpPollCQ(cq, wc) // (int, error)
	fmt.Println(n, err)
	// To here.

	Free(unsafe.Pointer(cq))
	// Output:
	// true ibv_exp_post_task true true
	// 3 <nil>
}
