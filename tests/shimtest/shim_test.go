//go:build linux && cgo

package shimtest

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/verbsexp/verbsexp/abiutil"
	"github.com/verbsexp/verbsexp/abiutil/dynlib"
	verbs "github.com/verbsexp/verbsexp/generated"
)

// taskList builds two linked tasks and a bad_task slot in C memory.
func taskList(t testing.TB) (first, second *verbs.ExpTask, bad **verbs.ExpTask) {
	first, second = Calloc[verbs.ExpTask](), Calloc[verbs.ExpTask]()
	bad = Calloc[*verbs.ExpTask]()
	first.TaskType, first.Next = verbs.ExpTaskSend, second
	second.TaskType = verbs.ExpTaskRecv
	t.Cleanup(func() {
		Free(unsafe.Pointer(first))
		Free(unsafe.Pointer(second))
		Free(unsafe.Pointer(bad))
	})
	return
}

// TestPostTaskPassesPointersThrough: the provider receives the very
// addresses Go passed, through the inline dispatch of ibv_exp_post_task.
func TestPostTaskPassesPointersThrough(t *testing.T) {
	ctx := Open(true)
	defer Close(ctx)
	task, _, bad := taskList(t)
	SetPostTaskResult(0)
	if err := verbs.ExpPostTask(ctx, task, bad); err != nil {
		t.Fatalf("ExpPostTask: %v", err)
	}
	c, tk, b := Seen()
	if c != unsafe.Pointer(ctx) || tk != unsafe.Pointer(task) || b != unsafe.Pointer(bad) {
		t.Fatalf("provider saw ctx %p task %p bad %p; Go passed %p %p %p", c, tk, b, ctx, task, bad)
	}
}

// TestPostTaskErrno: an errno returned by the provider becomes a
// *CallError naming the function, and the out-parameter is set.
func TestPostTaskErrno(t *testing.T) {
	ctx := Open(true)
	defer Close(ctx)
	task, second, bad := taskList(t)
	SetPostTaskResult(int(syscall.EAGAIN))
	defer SetPostTaskResult(0)
	err := verbs.ExpPostTask(ctx, task, bad)
	var ce *abiutil.CallError
	if !errors.As(err, &ce) || ce.Func != "ibv_exp_post_task" || !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("err = %v, want a CallError for ibv_exp_post_task wrapping EAGAIN", err)
	}
	if *bad != second {
		t.Fatalf("bad_task = %p, want the failing task %p", *bad, second)
	}
}

// TestMissingOpIsENOSYS: a provider without the operation makes the
// inline verb return ENOSYS.
func TestMissingOpIsENOSYS(t *testing.T) {
	ctx := Open(false)
	defer Close(ctx)
	task, _, bad := taskList(t)
	if err := verbs.ExpPostTask(ctx, task, bad); !errors.Is(err, syscall.ENOSYS) {
		t.Fatalf("ExpPostTask without the op: %v, want ENOSYS", err)
	}
}

// TestNilRequiredArgument: nil where C would dereference is EINVAL, and
// the provider is never called.
func TestNilRequiredArgument(t *testing.T) {
	ctx := Open(true)
	defer Close(ctx)
	_, _, bad := taskList(t)
	before := Calls()
	err := verbs.ExpPostTask(ctx, nil, bad)
	if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "task") {
		t.Fatalf("ExpPostTask(ctx, nil, …) = %v, want EINVAL naming task", err)
	}
	if _, err := verbs.ExpCreateCQ(nil, 1, nil, nil, 0, nil); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("ExpCreateCQ(nil, …) = %v, want EINVAL", err)
	}
	if Calls() != before {
		t.Fatalf("the provider was called %d times despite nil arguments", Calls()-before)
	}
}

// TestCreateCQPointerConvention: a pointer result comes back typed; NULL
// becomes the errno the provider set.
func TestCreateCQPointerConvention(t *testing.T) {
	ctx := Open(true)
	defer Close(ctx)
	attr := Calloc[verbs.ExpCQInitAttr]()
	defer Free(unsafe.Pointer(attr))
	cq, err := verbs.ExpCreateCQ(ctx, 64, nil, nil, 0, attr)
	if err != nil {
		t.Fatalf("ExpCreateCQ: %v", err)
	}
	defer Free(unsafe.Pointer(cq))
	if cq.CQE != 64 || cq.Context != ctx {
		t.Fatalf("cq.CQE = %d, cq.Context = %p; want 64 and %p (set by the inline verb)", cq.CQE, cq.Context, ctx)
	}
	if _, err := verbs.ExpCreateCQ(ctx, 0, nil, nil, 0, attr); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("ExpCreateCQ(cqe=0) = %v, want EINVAL from the provider", err)
	}
}

// TestPollCountConvention: a count result, and -ENOSYS as an error.
func TestPollCountConvention(t *testing.T) {
	ctx := Open(true)
	defer Close(ctx)
	cq := Calloc[verbs.CQ]()
	defer Free(unsafe.Pointer(cq))
	cq.Context = ctx
	wc := Calloc[[4]verbs.ExpWC]()
	defer Free(unsafe.Pointer(wc))
	SetPollResult(3)
	n, err := verbs.ExpPollCQ(cq, 4, &wc[0], uint32(unsafe.Sizeof(wc[0])))
	if err != nil || n != 3 {
		t.Fatalf("ExpPollCQ = %d, %v; want 3, nil", n, err)
	}
	empty := Open(false)
	defer Close(empty)
	cq.Context = empty
	if n, err := verbs.ExpPollCQ(cq, 4, &wc[0], uint32(unsafe.Sizeof(wc[0]))); n != 0 || !errors.Is(err, syscall.ENOSYS) {
		t.Fatalf("ExpPollCQ without the op = %d, %v; want 0, ENOSYS", n, err)
	}
}

// TestExportedFunctionWithoutLibrary: an exported verb resolves through
// dlopen at first call; without libibverbs the call is an error naming
// the function and the library, never a crash or a link failure.
func TestExportedFunctionWithoutLibrary(t *testing.T) {
	var n int32
	list, err := verbs.GetDeviceList(&n)
	var se *dynlib.SymbolError
	switch {
	case errors.As(err, &se):
		if se.Func != "ibv_get_device_list" || !strings.Contains(err.Error(), "libibverbs.so.1") || !errors.Is(err, syscall.ENOSYS) {
			t.Fatalf("error %v does not name ibv_get_device_list, libibverbs.so.1 and ENOSYS", err)
		}
		t.Logf("libibverbs is absent here, as expected on CI: %v", err)
	case err == nil:
		t.Logf("libibverbs is installed: %d devices", n)
		_ = list
	default:
		t.Logf("libibverbs is installed and reports: %v", err)
	}
}

// TestNilOutParameter: the failing-request out-parameter is required
// (providers write it on failure), so nil is EINVAL before C is reached.
func TestNilOutParameter(t *testing.T) {
	ctx := Open(true)
	defer Close(ctx)
	task, _, _ := taskList(t)
	before := Calls()
	if err := verbs.ExpPostTask(ctx, task, nil); !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "bad_task") {
		t.Fatalf("ExpPostTask(ctx, task, nil) = %v, want EINVAL naming bad_task", err)
	}
	if Calls() != before {
		t.Fatal("the provider was called with a nil bad_task")
	}
}
