//go:build linux && cgo

// Package shimtest is a minimal verbs provider written for the tests of the
// generated call wrappers: a struct verbs_context_exp placed in front of a
// struct verbs_context (whose last member is the struct ibv_context), as a
// provider lays them out, with a few operations filled in. The wrappers
// then run the headers' real inline dispatch path into these operations.
package shimtest

/*
#cgo CFLAGS: -I${SRCDIR}/../../headers
#include <errno.h>
#include <stdlib.h>
#include <infiniband/verbs_exp.h>

struct provider {
	struct verbs_context_exp exp; // found by verbs_get_exp_ctx in front of...
	struct verbs_context vctx;    // ...the verbs context ending with ibv_context
};

// What the operations saw, for the tests to compare with what Go passed.
static void *seen_ctx, *seen_task, *seen_bad;
static long calls;
static int post_task_result;
static int poll_result, poll_errno;

// Like a real provider, it writes *bad on failure without checking it.
static int op_post_task(struct ibv_context *ctx, struct ibv_exp_task *task, struct ibv_exp_task **bad) {
	seen_ctx = ctx; seen_task = task; seen_bad = bad; calls++;
	if (post_task_result != 0)
		*bad = task->next != NULL ? task->next : task; // the failing task
	return post_task_result;
}

static struct ibv_cq *op_create_cq(struct ibv_context *ctx, int cqe, struct ibv_comp_channel *ch,
                                   int vector, struct ibv_exp_cq_init_attr *attr) {
	calls++;
	if (cqe <= 0) {
		errno = EINVAL;
		return NULL;
	}
	struct ibv_cq *cq = calloc(1, sizeof *cq);
	cq->cqe = cqe;
	return cq;
}

// What the last poll received: the count, the array and (exp) the stride.
static int seen_n;
static void *seen_wc;
static uint32_t seen_wc_size;

static int op_poll_cq(struct ibv_cq *cq, int n, struct ibv_exp_wc *wc, uint32_t wc_size) {
	calls++;
	seen_n = n; seen_wc = wc; seen_wc_size = wc_size;
	if (poll_result < 0) {
		errno = poll_errno;
		return -1;
	}
	return poll_result < n ? poll_result : n;
}

// ops.poll_cq, the provider's ibv_poll_cq: as op_poll_cq, for struct ibv_wc.
static int op_legacy_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
	calls++;
	seen_n = n; seen_wc = wc; seen_wc_size = 0;
	if (poll_result < 0) {
		errno = poll_errno;
		return -1;
	}
	return poll_result < n ? poll_result : n;
}

// The device list, provided (dynlib.Provide, ProvideDeviceList) in place
// of libibverbs': two devices in an array allocated per call, as
// libibverbs allocates it, and the frees counted.
static struct ibv_device devices[2];
static long list_frees;

struct ibv_device **shimtest_get_device_list(int *num_devices) {
	struct ibv_device **l = calloc(3, sizeof *l);
	if (l == NULL)
		return NULL;
	l[0] = &devices[0];
	l[1] = &devices[1];
	if (num_devices != NULL)
		*num_devices = 2;
	return l;
}

void shimtest_free_device_list(struct ibv_device **list) {
	list_frees++;
	free(list);
}

static long get_list_frees(void) { return list_frees; }

static struct ibv_context *provider_open(int with_ops) {
	struct provider *p = calloc(1, sizeof *p);
	p->vctx.sz = sizeof(struct verbs_context);
	p->vctx.has_comp_mask = VERBS_CONTEXT_EXP;
	p->vctx.context.abi_compat = __VERBS_ABI_IS_EXTENDED;
	pthread_mutex_init(&p->vctx.context.mutex, NULL);
	p->exp.sz = sizeof(struct verbs_context_exp);
	p->vctx.context.ops.poll_cq = op_legacy_poll_cq;
	if (with_ops) {
		p->exp.lib_exp_post_task = op_post_task;
		p->exp.exp_create_cq = op_create_cq;
		p->exp.drv_exp_ibv_poll_cq = op_poll_cq;
	}
	return &p->vctx.context;
}

static void provider_close(struct ibv_context *ctx) {
	free(container_of(ctx, struct provider, vctx.context));
}

// Accessors: cgo cannot reach static variables directly.
static void set_post_task_result(int r) { post_task_result = r; }
static void set_poll_result(int n, int e) { poll_result = n; poll_errno = e; }
static void *get_seen_ctx(void) { return seen_ctx; }
static void *get_seen_task(void) { return seen_task; }
static void *get_seen_bad(void) { return seen_bad; }
static long get_calls(void) { return calls; }
static int get_seen_n(void) { return seen_n; }
static uint32_t exp_wc_size(void) { return sizeof(struct ibv_exp_wc); }
static void *device_at(int i) { return &devices[i]; }
static void *get_seen_wc(void) { return seen_wc; }
static uint32_t get_seen_wc_size(void) { return seen_wc_size; }

// Empty functions: the price of one cgo transition, and of one with the
// post's shape (three uintptr_t arguments, an int64 result).
static int64_t nop3(uintptr_t a, uintptr_t b, uintptr_t c) { return 0; }

// The C baseline of the benchmark: n calls of the inline verb from C.
static int post_task_loop(struct ibv_context *ctx, struct ibv_exp_task *task,
                          struct ibv_exp_task **bad, long n) {
	int r = 0;
	for (long i = 0; i < n; i++)
		r |= ibv_exp_post_task(ctx, task, bad);
	return r;
}
*/
import "C"

import (
	"sync"
	"syscall"
	"unsafe"

	"github.com/verbsexp/verbsexp/abiutil/dynlib"
	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/internal/verbsabi"
)

// Open returns a context of the test provider; withOps false leaves the
// experimental operations NULL (the verbs then report ENOSYS).
func Open(withOps bool) *verbs.Context {
	w := 0
	if withOps {
		w = 1
	}
	return (*verbs.Context)(unsafe.Pointer(C.provider_open(C.int(w))))
}

// Close frees a context from Open.
func Close(ctx *verbs.Context) { C.provider_close((*C.struct_ibv_context)(unsafe.Pointer(ctx))) }

// Calloc returns n zeroed bytes of C memory, as T.
func Calloc[T any]() *T {
	var zero T
	return (*T)(C.calloc(1, C.size_t(unsafe.Sizeof(zero))))
}

// Free releases C memory from Calloc.
func Free(p unsafe.Pointer) { C.free(p) }

// SetPostTaskResult makes the post_task operation return r (an errno).
func SetPostTaskResult(r int) { C.set_post_task_result(C.int(r)) }

// SetPollResult makes poll_cq report n completions, or fail with errno
// e when n is negative (returning -1, as libibverbs' convention has it).
func SetPollResult(n int, e syscall.Errno) { C.set_poll_result(C.int(n), C.int(e)) }

// Seen returns the arguments the last post_task operation received.
func Seen() (ctx, task, bad unsafe.Pointer) {
	return C.get_seen_ctx(), C.get_seen_task(), C.get_seen_bad()
}

// Calls counts the operations called so far.
func Calls() int64 { return int64(C.get_calls()) }

// SeenPoll returns what the last poll operation received: its count, its
// array and (ibv_exp_poll_cq; 0 for ibv_poll_cq) the element size.
func SeenPoll() (n int, wc unsafe.Pointer, wcSize uint32) {
	return int(C.get_seen_n()), C.get_seen_wc(), uint32(C.get_seen_wc_size())
}

// ProvideDeviceList registers the provider's ibv_get_device_list (and
// ibv_exp_get_device_list) and ibv_free_device_list with dynlib for the
// generated package's library, in place of libibverbs' (none is
// installed here, or it is rdma-core's, which the package's guard
// refuses). Call it before the first lookup of these functions, once.
var ProvideDeviceList = sync.OnceValue(func() error {
	for _, p := range []struct {
		name string
		fn   unsafe.Pointer
	}{
		{"ibv_get_device_list", C.shimtest_get_device_list},
		{"ibv_exp_get_device_list", C.shimtest_get_device_list},
		{"ibv_free_device_list", C.shimtest_free_device_list},
	} {
		if err := dynlib.Provide("libibverbs.so.1", verbsabi.LegacySymbol, p.name, p.fn); err != nil {
			return err
		}
	}
	return nil
})

// ExpWCSize is C's sizeof(struct ibv_exp_wc).
func ExpWCSize() uint32 { return uint32(C.exp_wc_size()) }

// Device returns the provided list's device i (0 or 1).
func Device(i int) *verbs.Device { return (*verbs.Device)(C.device_at(C.int(i))) }

// ListFrees counts the arrays the provided ibv_free_device_list freed.
func ListFrees() int64 { return int64(C.get_list_frees()) }

// Nop3 makes one cgo call of the post's shape that does nothing.
func Nop3(a, b, c uintptr) int64 {
	return int64(C.nop3(C.uintptr_t(a), C.uintptr_t(b), C.uintptr_t(c)))
}

// PostTaskLoop calls ibv_exp_post_task n times from C.
func PostTaskLoop(ctx *verbs.Context, task *verbs.ExpTask, bad **verbs.ExpTask, n int) int {
	return int(C.post_task_loop((*C.struct_ibv_context)(unsafe.Pointer(ctx)), (*C.struct_ibv_exp_task)(unsafe.Pointer(task)),
		(**C.struct_ibv_exp_task)(unsafe.Pointer(bad)), C.long(n)))
}
