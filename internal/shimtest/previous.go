//go:build linux && cgo

package shimtest

// The previous form of the generated wrappers, kept verbatim (renamed) as
// the baseline of BenchmarkShim*: cgo's two-result call r, err := C.f()
// (errno read by cgo as a second result and boxed into an error), into a
// trampoline returning the plain int. generated/shims.go no longer has it.

/*
#cgo CFLAGS: -I${SRCDIR}/../../headers
#include <infiniband/verbs_exp.h>

static int32_t previous_ExpPollCQ(void * p0, int32_t p1, void * p2, uint32_t p3) { return ibv_exp_poll_cq(p0, p1, p2, p3); }
static int32_t previous_ExpPostTask(void * p0, void * p1, void * p2) { return ibv_exp_post_task(p0, p1, p2); }
*/
import "C"

import (
	"syscall"
	"unsafe"

	"github.com/verbsexp/verbsexp/abiutil"
	"github.com/verbsexp/verbsexp/generated/verbs"
)

// errnoOf extracts the errno of a two-result cgo call.
func errnoOf(err error) syscall.Errno {
	e, _ := err.(syscall.Errno)
	return e
}

// PreviousExpPollCQ is ExpPollCQ as it was generated before.
func PreviousExpPollCQ(ibcq *verbs.CQ, numEntries int32, wc *verbs.ExpWC, wcSize uint32) (int32, error) {
	if ibcq == nil {
		return 0, abiutil.NilArg("ibv_exp_poll_cq", "ibcq")
	}
	if wc == nil {
		return 0, abiutil.NilArg("ibv_exp_poll_cq", "wc")
	}
	r, errno := C.previous_ExpPollCQ(unsafe.Pointer(ibcq), C.int32_t(numEntries), unsafe.Pointer(wc), C.uint32_t(wcSize))
	if r < 0 {
		return 0, abiutil.Status("ibv_exp_poll_cq", int64(r), errnoOf(errno))
	}
	return int32(r), nil
}

// PreviousExpPostTask is ExpPostTask as it was generated before.
func PreviousExpPostTask(context *verbs.Context, task *verbs.ExpTask, badTask **verbs.ExpTask) error {
	if context == nil {
		return abiutil.NilArg("ibv_exp_post_task", "context")
	}
	if task == nil {
		return abiutil.NilArg("ibv_exp_post_task", "task")
	}
	if badTask == nil {
		return abiutil.NilArg("ibv_exp_post_task", "bad_task")
	}
	r, errno := C.previous_ExpPostTask(unsafe.Pointer(context), unsafe.Pointer(task), unsafe.Pointer(badTask))
	return abiutil.Status("ibv_exp_post_task", int64(r), errnoOf(errno))
}
