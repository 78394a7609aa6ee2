//go:build linux && cgo

// Package baseline holds what BenchmarkPostTaskList measures the runtime
// against: the same task list built and posted from C, an empty cgo call
// of the post's shape (with the C post, the floor of one cgo call per
// post), and the naive cgo way that copies Go structs into freshly
// malloc'ed C records on every post.
package baseline

/*
#cgo CFLAGS: -I${SRCDIR}/../../../../headers
#include <stdlib.h>
#include <infiniband/verbs_exp.h>

// A list of T tasks of W RDMA writes each, all of one SGE, in C memory.
struct c_list {
	struct ibv_context *ctx;
	struct ibv_exp_task *tasks;
	struct ibv_exp_send_wr *wrs;
	struct ibv_sge *sges;
};

static struct c_list *c_list_new(struct ibv_context *ctx, struct ibv_qp *qp, int t, int w,
                                 uint64_t addr, uint32_t lkey, uint64_t remote, uint32_t rkey) {
	struct c_list *l = calloc(1, sizeof *l);
	if (l == NULL)
		return NULL;
	l->ctx = ctx;
	l->tasks = calloc(t, sizeof *l->tasks);
	l->wrs = calloc((size_t)t * w, sizeof *l->wrs);
	l->sges = calloc((size_t)t * w, sizeof *l->sges);
	if (l->tasks == NULL || l->wrs == NULL || l->sges == NULL) {
		free(l->tasks);
		free(l->wrs);
		free(l->sges);
		free(l);
		return NULL;
	}
	for (int i = 0; i < t; i++) {
		struct ibv_exp_task *tk = &l->tasks[i];
		tk->task_type = IBV_EXP_TASK_SEND;
		tk->item.qp = qp;
		tk->item.send_wr = &l->wrs[(size_t)i * w];
		tk->next = i + 1 < t ? &l->tasks[i + 1] : NULL;
		for (int j = 0; j < w; j++) {
			size_t n = (size_t)i * w + j;
			struct ibv_exp_send_wr *wr = &l->wrs[n];
			l->sges[n].addr = addr;
			l->sges[n].length = 8;
			l->sges[n].lkey = lkey;
			wr->wr_id = n;
			wr->exp_opcode = IBV_EXP_WR_RDMA_WRITE;
			wr->sg_list = &l->sges[n];
			wr->num_sge = 1;
			wr->wr.rdma.remote_addr = remote;
			wr->wr.rdma.rkey = rkey;
			wr->next = j + 1 < w ? &l->wrs[n + 1] : NULL;
		}
	}
	return l;
}

// c_list_post posts the list n times; it returns the first error.
static int c_list_post(struct c_list *l, long n) {
	struct ibv_exp_task *bad;
	for (long i = 0; i < n; i++) {
		int r = ibv_exp_post_task(l->ctx, l->tasks, &bad);
		if (r != 0)
			return r;
	}
	return 0;
}

// nop3 has the shape of the runtime's post call: three uintptr_t
// arguments, an int64 result.
static int64_t nop3(uintptr_t a, uintptr_t b, uintptr_t c) { return 0; }

static void c_list_free(struct c_list *l) {
	free(l->tasks);
	free(l->wrs);
	free(l->sges);
	free(l);
}
*/
import "C"

import (
	"syscall"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
)

// Write is one RDMA write of the benchmark's lists.
type Write struct {
	Addr, Remote uint64
	Lkey, Rkey   uint32
	Length       uint32
}

// CList is a task list built in C. Copies share it (one pointer to the
// C list's holder): once freed through any, it is freed for all.
type CList struct{ h *clist }

type clist struct{ l *C.struct_c_list } // nil once freed

// NewCList builds t tasks of w writes of w0 on qp, in C.
func NewCList(ctx *verbs.Context, qp *verbs.QP, t, w int, w0 Write) (*CList, error) {
	l := C.c_list_new((*C.struct_ibv_context)(unsafe.Pointer(ctx)), (*C.struct_ibv_qp)(unsafe.Pointer(qp)),
		C.int(t), C.int(w), C.uint64_t(w0.Addr), C.uint32_t(w0.Lkey), C.uint64_t(w0.Remote), C.uint32_t(w0.Rkey))
	if l == nil {
		return nil, syscall.ENOMEM
	}
	return &CList{&clist{l}}, nil
}

// Post posts the list n times from a C loop: one cgo call. EINVAL once
// freed.
func (c *CList) Post(n int) error {
	if c.h.l == nil {
		return syscall.EINVAL
	}
	if r := C.c_list_post(c.h.l, C.long(n)); r != 0 {
		return syscall.Errno(r)
	}
	return nil
}

// Free releases the list; freeing it again does nothing.
func (c *CList) Free() {
	if c.h.l != nil {
		C.c_list_free(c.h.l)
		c.h.l = nil
	}
}

// Nop3 makes n empty cgo calls of the post's shape.
func Nop3(n int, a, b, c uintptr) {
	for i := 0; i < n; i++ {
		C.nop3(C.uintptr_t(a), C.uintptr_t(b), C.uintptr_t(c))
	}
}

// NaiveTask is the Go-side description the naive way starts from.
type NaiveTask struct {
	QP     *verbs.QP
	Writes []Write
}

// PostNaive copies tasks into freshly malloc'ed C records (one allocation
// per task, work request and SGE, as a struct-by-struct binding does),
// posts them with ibv_exp_post_task and frees them.
func PostNaive(ctx *verbs.Context, tasks []NaiveTask) error {
	var allocs []unsafe.Pointer
	alloc := func(n uintptr) unsafe.Pointer {
		p := C.calloc(1, C.size_t(n))
		allocs = append(allocs, p)
		return p
	}
	defer func() {
		for _, p := range allocs {
			C.free(p)
		}
	}()
	var first, prev *verbs.ExpTask
	for _, t := range tasks {
		ct := (*verbs.ExpTask)(alloc(unsafe.Sizeof(verbs.ExpTask{})))
		*ct = verbs.ExpTask{TaskType: verbs.ExpTaskSend}
		ct.Item.QP = t.QP
		var prevWR *verbs.ExpSendWR
		for i, w := range t.Writes {
			wr := (*verbs.ExpSendWR)(alloc(unsafe.Sizeof(verbs.ExpSendWR{})))
			sge := (*verbs.SGE)(alloc(unsafe.Sizeof(verbs.SGE{})))
			*sge = verbs.SGE{Addr: w.Addr, Length: w.Length, Lkey: w.Lkey}
			*wr = verbs.ExpSendWR{WRID: uint64(i), ExpOpcode: verbs.ExpWRRDMAWrite, SGList: sge, NumSGE: 1}
			wr.WR.RDMA().RemoteAddr, wr.WR.RDMA().Rkey = w.Remote, w.Rkey
			if prevWR == nil {
				ct.Item.SetSendWR(wr)
			} else {
				prevWR.Next = wr
			}
			prevWR = wr
		}
		if prev == nil {
			first = ct
		} else {
			prev.Next = ct
		}
		prev = ct
	}
	bad := (**verbs.ExpTask)(alloc(unsafe.Sizeof(uintptr(0))))
	return verbs.ExpPostTask(ctx, first, bad)
}
