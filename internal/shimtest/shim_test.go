//go:build linux && cgo

package shimtest

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/verbsexp/verbsexp/abiutil"
	"github.com/verbsexp/verbsexp/abiutil/dynlib"
	"github.com/verbsexp/verbsexp/generated/verbs"
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

// TestNilContextMember: a CQ or QP whose context is NULL (zeroed, or never
// created by a provider) is refused with EINVAL by the wrappers of the
// inline verbs, which would otherwise crash in the header's own dispatch
// (cq->context->ops.poll_cq) before any provider could check it.
func TestNilContextMember(t *testing.T) {
	cq, qp := Calloc[verbs.CQ](), Calloc[verbs.QP]()
	wc, ewc := Calloc[verbs.WC](), Calloc[verbs.ExpWC]()
	wr, rwr, ewr := Calloc[verbs.SendWR](), Calloc[verbs.RecvWR](), Calloc[verbs.ExpSendWR]()
	defer func() {
		for _, p := range []unsafe.Pointer{unsafe.Pointer(cq), unsafe.Pointer(qp), unsafe.Pointer(wc), unsafe.Pointer(ewc),
			unsafe.Pointer(wr), unsafe.Pointer(rwr), unsafe.Pointer(ewr)} {
			Free(p)
		}
	}()
	calls := map[string]func() error{
		"ibv_poll_cq":       func() error { _, err := verbs.PollCQRaw(cq, 1, wc); return err },
		"ibv_poll_cq slice": func() error { _, err := verbs.PollCQ(cq, unsafe.Slice(wc, 1)); return err },
		"ibv_req_notify_cq": func() error { return verbs.ReqNotifyCQ(cq, 0) },
		"ibv_post_send":     func() error { return verbs.PostSend(qp, wr, nil) },
		"ibv_post_recv":     func() error { return verbs.PostRecv(qp, rwr, nil) },
		"ibv_exp_post_send": func() error { return verbs.ExpPostSend(qp, ewr, nil) },
		"ibv_exp_poll_cq": func() error {
			_, err := verbs.ExpPollCQRaw(cq, 1, ewc, uint32(unsafe.Sizeof(*ewc)))
			return err
		},
		"ibv_exp_poll_cq slice": func() error { _, err := verbs.ExpPollCQ(cq, unsafe.Slice(ewc, 1)); return err },
	}
	for name, call := range calls {
		err := call()
		if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "->context") {
			t.Errorf("%s on a record with a NULL context = %v, want EINVAL naming ->context", name, err)
		}
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

// pollRig is a CQ of ctx and room for 4 completions, in C memory, freed
// with the test.
func pollRig(t *testing.T, ctx *verbs.Context) (*verbs.CQ, *[4]verbs.ExpWC) {
	cq := Calloc[verbs.CQ]()
	t.Cleanup(func() { Free(unsafe.Pointer(cq)) })
	cq.Context = ctx
	wc := Calloc[[4]verbs.ExpWC]()
	t.Cleanup(func() { Free(unsafe.Pointer(wc)) })
	return cq, wc
}

// TestPollCountConvention: a count result, and -ENOSYS as an error.
func TestPollCountConvention(t *testing.T) {
	ctx := Open(true)
	defer Close(ctx)
	cq, wc := pollRig(t, ctx)
	SetPollResult(3, 0)
	n, err := verbs.ExpPollCQRaw(cq, 4, &wc[0], uint32(unsafe.Sizeof(wc[0])))
	if err != nil || n != 3 {
		t.Fatalf("ExpPollCQRaw = %d, %v; want 3, nil", n, err)
	}
	empty := Open(false)
	defer Close(empty)
	cq.Context = empty
	if n, err := verbs.ExpPollCQRaw(cq, 4, &wc[0], uint32(unsafe.Sizeof(wc[0]))); n != 0 || !errors.Is(err, syscall.ENOSYS) {
		t.Fatalf("ExpPollCQRaw without the op = %d, %v; want 0, ENOSYS", n, err)
	}
	if n, err := verbs.ExpPollCQ(cq, wc[:]); n != 0 || !errors.Is(err, syscall.ENOSYS) {
		t.Fatalf("ExpPollCQ without the op = %d, %v; want 0, ENOSYS", n, err)
	}
}

// TestExportedFunctionWithoutLibrary: an exported verb resolves through
// dlopen at first call; without libibverbs the call is an error naming
// the function and the library, never a crash or a link failure. (The
// package provides the device list functions itself, ProvideDeviceList;
// ibv_fork_init it does not.)
func TestExportedFunctionWithoutLibrary(t *testing.T) {
	err := verbs.ForkInit()
	var se *dynlib.SymbolError
	switch {
	case errors.As(err, &se):
		if se.Func != "ibv_fork_init" || !strings.Contains(err.Error(), "libibverbs.so.1") || !errors.Is(err, syscall.ENOSYS) {
			t.Fatalf("error %v does not name ibv_fork_init, libibverbs.so.1 and ENOSYS", err)
		}
		t.Logf("libibverbs is absent here, as expected on CI: %v", err)
	case err == nil:
		t.Logf("libibverbs is installed: ibv_fork_init succeeded")
	default:
		t.Logf("libibverbs is installed and reports: %v", err)
	}
}

// TestNilOutParameter: the failing-request out-parameter may be nil, as C
// allows on a post that succeeds. The trampoline then hands the provider
// a slot of its own, so a failure (the provider writes *bad_task without
// checking, as real ones do) never writes through NULL.
func TestNilOutParameter(t *testing.T) {
	ctx := Open(true)
	defer Close(ctx)
	task, _, _ := taskList(t)
	SetPostTaskResult(0)
	if err := verbs.ExpPostTask(ctx, task, nil); err != nil {
		t.Fatalf("ExpPostTask(ctx, task, nil) = %v, want success", err)
	}
	if _, _, b := Seen(); b == nil {
		t.Fatal("the provider received a NULL bad_task; want the trampoline's slot")
	}
	SetPostTaskResult(int(syscall.EINVAL))
	defer SetPostTaskResult(0)
	if err := verbs.ExpPostTask(ctx, task, nil); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("failing ExpPostTask(ctx, task, nil) = %v, want the provider's EINVAL", err)
	}
	if err := verbs.ExpPostTaskCMem(uintptr(unsafe.Pointer(ctx)), uintptr(unsafe.Pointer(task)), 0); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("failing ExpPostTaskCMem(…, 0) = %v, want the provider's EINVAL", err)
	}
}

// TestPostTaskCMem: the address form reaches the provider with the same
// addresses, through the same trampoline, with the same conventions.
func TestPostTaskCMem(t *testing.T) {
	ctx := Open(true)
	defer Close(ctx)
	task, second, bad := taskList(t)
	c, tk, b := uintptr(unsafe.Pointer(ctx)), uintptr(unsafe.Pointer(task)), uintptr(unsafe.Pointer(bad))
	SetPostTaskResult(0)
	if err := verbs.ExpPostTaskCMem(c, tk, b); err != nil {
		t.Fatalf("ExpPostTaskCMem: %v", err)
	}
	if sc, st, sb := Seen(); uintptr(sc) != c || uintptr(st) != tk || uintptr(sb) != b {
		t.Fatalf("provider saw %p %p %p; Go passed %#x %#x %#x", sc, st, sb, c, tk, b)
	}
	SetPostTaskResult(int(syscall.EAGAIN))
	defer SetPostTaskResult(0)
	if err := verbs.ExpPostTaskCMem(c, tk, b); !errors.Is(err, syscall.EAGAIN) || *bad != second {
		t.Fatalf("ExpPostTaskCMem = %v, bad_task %p; want EAGAIN and %p", err, *bad, second)
	}
	before := Calls()
	if err := verbs.ExpPostTaskCMem(0, tk, b); !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "context") {
		t.Fatalf("ExpPostTaskCMem(0, …) = %v, want EINVAL naming context", err)
	}
	if err := verbs.ExpPostTaskCMem(c, 0, b); !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "task") {
		t.Fatalf("ExpPostTaskCMem(…, 0, …) = %v, want EINVAL naming task", err)
	}
	if Calls() != before {
		t.Fatal("the provider was called with a zero address")
	}
}

// TestCountErrno: a count of -1 carries errno back (packed with the result).
func TestCountErrno(t *testing.T) {
	ctx := Open(true)
	defer Close(ctx)
	cq, wc := pollRig(t, ctx)
	SetPollResult(-1, syscall.EIO)
	defer SetPollResult(0, 0)
	n, err := verbs.ExpPollCQ(cq, wc[:])
	var ce *abiutil.CallError
	if n != 0 || !errors.As(err, &ce) || ce.Errno != syscall.EIO || ce.Func != "ibv_exp_poll_cq" {
		t.Fatalf("ExpPollCQ failing with EIO = %d, %v; want 0 and a CallError of ibv_exp_poll_cq with EIO", n, err)
	}
}

// TestStringResults: functions returning const char * return a Go string
// (a copy). They are exported, so they need libibverbs; with it absent
// the error names the function and the library.
func TestStringResults(t *testing.T) {
	s, err := verbs.WCStatusStr(verbs.WCSuccess)
	var se *dynlib.SymbolError
	switch {
	case errors.As(err, &se):
		t.Logf("libibverbs is absent here: %v", err)
		if s != "" || se.Func != "ibv_wc_status_str" {
			t.Fatalf("WCStatusStr without the library = %q, %v", s, err)
		}
	case err != nil:
		t.Fatalf("WCStatusStr: %v", err)
	default:
		if s != "success" {
			t.Fatalf("WCStatusStr(WCSuccess) = %q, want \"success\" (libibverbs' own text)", s)
		}
		if s, err := verbs.WCStatusStr(verbs.WCStatus(9999)); err != nil || s == "" {
			t.Fatalf("WCStatusStr(9999) = %q, %v; want libibverbs' text for an unknown status", s, err)
		}
	}
}

// TestNoTwoResultCgoCalls: no wrapper in generated/shims.go uses cgo's
// two-result form (r, err := C.f()); errno always crosses inside the
// trampoline's one result.
func TestNoTwoResultCgoCalls(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "../../generated/verbs/shims.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	ast.Inspect(f, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok && isC(call.Fun) {
			calls++
		}
		as, ok := n.(*ast.AssignStmt)
		if !ok || len(as.Lhs) < 2 || len(as.Rhs) != 1 {
			return true
		}
		if call, ok := as.Rhs[0].(*ast.CallExpr); ok && isC(call.Fun) {
			t.Errorf("%s: two-result cgo call", fset.Position(as.Pos()))
		}
		return true
	})
	if calls < 50 {
		t.Fatalf("found %d calls into C in generated/shims.go; the scan is broken", calls)
	}
}

func isC(e ast.Expr) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == "C" && strings.HasPrefix(sel.Sel.Name, "verbsexp_")
}
