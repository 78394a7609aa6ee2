//go:build linux && cgo

package task

/*
#include <stdlib.h>

// cgo checks the pointer argument of this call (the rules every verb call
// used to apply to ctx): once, at New, instead of at every post.
static void task_check_ctx(void *ctx) {}
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/verbsexp/verbsexp/abiutil"
	"github.com/verbsexp/verbsexp/generated/verbs"
)

// Capacity sizes a List's arena. Each count is at most MaxCount.
type Capacity struct {
	Tasks, SendWRs, RecvWRs, SGEs int
}

// MaxCount is the largest count of any region of an arena: what C's int
// holds (the verbs count work requests and SGEs in ints).
const MaxCount = math.MaxInt32

// Errors a List reports for misuse; they wrap syscall.EINVAL (capacity
// errors, *CapacityError, wrap ENOMEM) so callers may also test those.
var (
	ErrFreed     = fmt.Errorf("task list was freed (or is nil): %w", syscall.EINVAL)
	ErrEmpty     = fmt.Errorf("task list is empty: %w", syscall.EINVAL)
	ErrNoTask    = fmt.Errorf("no task to add the work request to: call SendTask or RecvTask first: %w", syscall.EINVAL)
	ErrWrongKind = fmt.Errorf("work request does not fit the current task's kind: %w", syscall.EINVAL)
)

// CapacityError says which region of the arena is full.
type CapacityError struct {
	What string
	Cap  int
}

func (e *CapacityError) Error() string {
	r, ok := regions[e.What]
	if !ok {
		return fmt.Sprintf("task list is full: capacity of %d %s reached", e.Cap, e.What)
	}
	what := e.What
	if e.Cap == 1 {
		what = r.one
	}
	return fmt.Sprintf("task list is full: capacity of %d %s reached: size the List for the whole schedule (task.Capacity.%s)", e.Cap, what, r.field)
}

// regions are the arena's regions by CapacityError.What: the Capacity
// field that sizes each, and its name for one.
var regions = map[string]struct{ field, one string }{
	"tasks":                  {"Tasks", "task"},
	"send work requests":     {"SendWRs", "send work request"},
	"receive work requests":  {"RecvWRs", "receive work request"},
	"scatter/gather entries": {"SGEs", "scatter/gather entry"},
}

// Unwrap makes errors.Is(err, syscall.ENOMEM) true.
func (e *CapacityError) Unwrap() error { return syscall.ENOMEM }

// List is a task list in C memory. It is not safe for concurrent use;
// separate Lists may be built and posted from separate goroutines. A copy
// of a List is the same list (its state sits behind one pointer): freed
// through either, it is freed for both, and a second Free is ErrFreed;
// a builder error recorded through either (see Err) is the other's too,
// and a Reset through either clears it for both.
//
// Its builders' errors stick, as a bufio.Writer's do: the first one is
// kept, every builder after it does nothing and returns it, and Post
// returns it without posting. A list built without checking each
// builder is therefore checked whole by Post (or Err): a work request
// that did not fit is never left out of a list that posts.
type List struct {
	*list // nil for the zero List, which is refused as a freed one
}

type list struct {
	ctx   *verbs.Context // also keeps a Go-allocated ctx reachable (Go's heap does not move)
	mem   unsafe.Pointer
	tasks []verbs.ExpTask
	sends []verbs.ExpSendWR
	recvs []verbs.RecvWR
	sges  []verbs.SGE
	bad   **verbs.ExpTask

	nTasks, nSends, nRecvs, nSGEs int
	// The last work request of the current task, to link the next one.
	lastSend *verbs.ExpSendWR
	lastRecv *verbs.RecvWR
	// firstWR[i] is the index of task i's first work request in its slab.
	firstWR []int32

	// What Post passes, as addresses: ctx (checked at New) and the first
	// task and the bad_task slot (in the arena: C memory).
	ctxAddr, tasksAddr, badAddr uintptr

	// err is the first error a builder returned since New or Reset: the
	// list lacks what that builder was asked for, so nothing more is
	// built and Post refuses it.
	err error
}

// New allocates a List for ctx with the given capacity. Counts that are
// negative or above MaxCount, or an arena larger than the address space,
// are refused with EINVAL; an arena the C allocator cannot give, with
// ENOMEM.
func New(ctx *verbs.Context, c Capacity) (*List, error) {
	if ctx == nil {
		return nil, abiutil.NilArg("task.New", "ctx")
	}
	if c.Tasks <= 0 || c.SendWRs < 0 || c.RecvWRs < 0 || c.SGEs < 0 {
		return nil, fmt.Errorf("task.New: capacity %+v: need at least one task and no negative counts: %w", c, syscall.EINVAL)
	}
	if n := max(c.Tasks, c.SendWRs, c.RecvWRs, c.SGEs); n > MaxCount {
		return nil, fmt.Errorf("task.New: capacity %+v: a count of %d is above %d, what the verbs' int counts hold: %w", c, n, MaxCount, syscall.EINVAL)
	}
	offs, size, ok := arenaLayout(c)
	if !ok {
		return nil, fmt.Errorf("task.New: capacity %+v: the arena would not fit in the address space: %w", c, syscall.EINVAL)
	}
	mem := C.calloc(1, C.size_t(size))
	if mem == nil {
		return nil, fmt.Errorf("task.New: cannot allocate %d bytes of C memory: %w", size, syscall.ENOMEM)
	}
	l := &List{&list{
		ctx:     ctx,
		mem:     mem,
		tasks:   unsafe.Slice((*verbs.ExpTask)(unsafe.Add(mem, offs[0])), c.Tasks),
		sends:   unsafe.Slice((*verbs.ExpSendWR)(unsafe.Add(mem, offs[1])), c.SendWRs),
		recvs:   unsafe.Slice((*verbs.RecvWR)(unsafe.Add(mem, offs[2])), c.RecvWRs),
		sges:    unsafe.Slice((*verbs.SGE)(unsafe.Add(mem, offs[3])), c.SGEs),
		bad:     (**verbs.ExpTask)(unsafe.Add(mem, offs[4])),
		firstWR: make([]int32, c.Tasks),
	}}
	// ctx crosses into C at every post as a uintptr, which cgo does not
	// check: check it here, once, as cgo checks a verb's pointer argument.
	C.task_check_ctx(unsafe.Pointer(ctx))
	l.ctxAddr = uintptr(unsafe.Pointer(ctx))
	l.tasksAddr = uintptr(unsafe.Pointer(&l.tasks[0]))
	l.badAddr = uintptr(unsafe.Pointer(l.bad))
	live.Add(1)
	return l, nil
}

// arenaLayout returns the offsets of the tasks, send WRs, receive WRs,
// SGEs and the bad_task slot in an arena for c, and its size; ok is false
// when the size overflows.
func arenaLayout(c Capacity) (offs [5]uintptr, size uintptr, ok bool) {
	regions := [4]struct{ n, size uintptr }{
		{uintptr(c.Tasks), unsafe.Sizeof(verbs.ExpTask{})},
		{uintptr(c.SendWRs), unsafe.Sizeof(verbs.ExpSendWR{})},
		{uintptr(c.RecvWRs), unsafe.Sizeof(verbs.RecvWR{})},
		{uintptr(c.SGEs), unsafe.Sizeof(verbs.SGE{})},
	}
	var end uintptr
	for i, r := range regions {
		if r.n != 0 && r.size > (math.MaxUint-end)/r.n {
			return offs, 0, false
		}
		offs[i] = end
		if end, ok = alignUp(end+r.n*r.size, 16); !ok {
			return offs, 0, false
		}
	}
	offs[4] = end
	if end > math.MaxUint-unsafe.Sizeof(uintptr(0)) {
		return offs, 0, false
	}
	return offs, end + unsafe.Sizeof(uintptr(0)), true
}

// live counts arenas allocated and not yet freed, for leak checks.
var live atomic.Int64

// LiveArenas returns the number of Lists not yet freed: tests and
// long-running programs check it for leaked C memory.
func LiveArenas() int64 { return live.Load() }

// alignUp rounds n up to a multiple of a (a power of two); ok is false
// when that overflows.
func alignUp(n, a uintptr) (uintptr, bool) {
	if n > math.MaxUint-(a-1) {
		return 0, false
	}
	return (n + a - 1) &^ (a - 1), true
}

// freed says whether l is nil, the zero List or freed.
func (l *List) freed() bool { return l == nil || l.list == nil || l.mem == nil }

// Free releases the arena. The List cannot be used afterwards; a second
// Free is an error.
func (l *List) Free() error {
	if l.freed() {
		return fmt.Errorf("task list: double free: %w", ErrFreed)
	}
	C.free(l.mem)
	live.Add(-1)
	l.mem = nil
	l.nTasks, l.nSends, l.nRecvs, l.nSGEs = 0, 0, 0, 0 // Post sees an empty List, then ErrFreed
	l.lastSend, l.lastRecv = nil, nil
	l.tasks, l.sends, l.recvs, l.sges, l.bad = nil, nil, nil, nil, nil
	l.ctxAddr, l.tasksAddr, l.badAddr = 0, 0, 0
	l.err = nil // from now on everything is ErrFreed
	return nil
}

// Reset empties the List for rebuilding; the arena is kept, nothing is
// allocated. It clears a builder error (see Err) with the rest: the
// rebuilt list is a new list.
func (l *List) Reset() error {
	if l.freed() {
		return ErrFreed
	}
	l.nTasks, l.nSends, l.nRecvs, l.nSGEs = 0, 0, 0, 0
	l.lastSend, l.lastRecv = nil, nil
	l.err = nil
	return nil
}

// Err returns the first error a builder returned since New or the last
// Reset, which Post returns instead of posting; ErrFreed for a nil,
// zero or freed List; nil while every builder has succeeded. Neither an
// empty List (Post's ErrEmpty) nor a failed Post (a *PostError) sets
// it: those lists are as built, and may be posted (again).
func (l *List) Err() error {
	if l.freed() {
		return ErrFreed
	}
	return l.err
}

// fail records err, a builder's error, as the List's (the first since
// New or Reset: each builder starts with Err) and returns it.
func (l *List) fail(err error) error {
	l.err = err
	return err
}

// Len returns the number of tasks built (0 for a nil List).
func (l *List) Len() int {
	if l.freed() {
		return 0
	}
	return l.nTasks
}

// SendTask starts a task of send work requests on qp, linked after the
// previous task.
func (l *List) SendTask(qp *verbs.QP) (*verbs.ExpTask, error) {
	return l.newTask(verbs.ExpTaskSend, qp)
}

// RecvTask starts a task of receive work requests on qp.
func (l *List) RecvTask(qp *verbs.QP) (*verbs.ExpTask, error) {
	return l.newTask(verbs.ExpTaskRecv, qp)
}

func (l *List) newTask(kind verbs.ExpTaskType, qp *verbs.QP) (*verbs.ExpTask, error) {
	if err := l.Err(); err != nil { // freed, or an earlier builder failed
		return nil, err
	}
	if qp == nil {
		return nil, l.fail(abiutil.NilArg("task list", "qp"))
	}
	if l.nTasks == len(l.tasks) {
		return nil, l.fail(&CapacityError{"tasks", len(l.tasks)})
	}
	t := &l.tasks[l.nTasks]
	*t = verbs.ExpTask{}
	t.TaskType = kind
	t.Item.QP = qp
	if l.nTasks > 0 {
		l.tasks[l.nTasks-1].Next = t
	}
	if kind == verbs.ExpTaskSend {
		l.firstWR[l.nTasks] = int32(l.nSends)
	} else {
		l.firstWR[l.nTasks] = int32(l.nRecvs)
	}
	l.nTasks++
	l.lastSend, l.lastRecv = nil, nil
	return t, nil
}

// sendWR appends a zeroed send work request to the current send task.
// Its callers have checked Err and record what it returns with fail.
func (l *List) sendWR(wrID uint64, op verbs.ExpWROpcode, flags verbs.ExpSendFlags, sges []verbs.SGE) (*verbs.ExpSendWR, error) {
	t, err := l.current(verbs.ExpTaskSend)
	if err != nil {
		return nil, err
	}
	if l.nSends == len(l.sends) {
		return nil, &CapacityError{"send work requests", len(l.sends)}
	}
	if l.nSGEs+len(sges) > len(l.sges) {
		return nil, &CapacityError{"scatter/gather entries", len(l.sges)}
	}
	if err := checkSGEs(sges); err != nil {
		return nil, err
	}
	wr := &l.sends[l.nSends]
	l.nSends++
	*wr = verbs.ExpSendWR{}
	wr.WRID = wrID
	wr.ExpOpcode = op
	wr.ExpSendFlags = uint64(flags)
	wr.SGList, wr.NumSGE = l.copySGEs(sges)
	if l.lastSend == nil {
		t.Item.SetSendWR(wr)
	} else {
		l.lastSend.Next = wr
	}
	l.lastSend = wr
	return wr, nil
}

// checkSGEs refuses an SGE whose range wraps around the address space:
// a device would read or write from address 0 on.
func checkSGEs(sges []verbs.SGE) error {
	for i, g := range sges {
		if g.Addr > math.MaxUint64-uint64(g.Length) {
			return fmt.Errorf("task list: SGE %d [%#x, +%d) runs past the end of the address space: %w", i, g.Addr, g.Length, syscall.EINVAL)
		}
	}
	return nil
}

// checkRemote refuses an RDMA range [remote, remote + the SGEs' total
// length) that wraps around the address space.
func checkRemote(remote uint64, sges []verbs.SGE) error {
	end := remote
	for _, g := range sges {
		if end > math.MaxUint64-uint64(g.Length) {
			return fmt.Errorf("task list: remote range from %#x runs past the end of the address space: %w", remote, syscall.EINVAL)
		}
		end += uint64(g.Length)
	}
	return nil
}

// copySGEs copies sges into the arena (room was checked) and returns the
// sg_list and num_sge a work request stores.
func (l *List) copySGEs(sges []verbs.SGE) (*verbs.SGE, int32) {
	if len(sges) == 0 {
		return nil, 0
	}
	dst := l.sges[l.nSGEs : l.nSGEs+len(sges)]
	copy(dst, sges)
	l.nSGEs += len(sges)
	return &dst[0], int32(len(sges))
}

func (l *List) current(kind verbs.ExpTaskType) (*verbs.ExpTask, error) {
	if l.nTasks == 0 {
		return nil, ErrNoTask
	}
	t := &l.tasks[l.nTasks-1]
	if t.TaskType != kind {
		return nil, fmt.Errorf("%w: task %d is a %v task", ErrWrongKind, l.nTasks-1, t.TaskType)
	}
	return t, nil
}

// Send appends a SEND of the gathered sges.
func (l *List) Send(wrID uint64, flags verbs.ExpSendFlags, sges ...verbs.SGE) (*verbs.ExpSendWR, error) {
	if err := l.Err(); err != nil {
		return nil, err
	}
	wr, err := l.sendWR(wrID, verbs.ExpWRSend, flags, sges)
	if err != nil {
		return nil, l.fail(err)
	}
	return wr, nil
}

// Write appends an RDMA WRITE of the gathered sges to remote/rkey.
func (l *List) Write(wrID uint64, flags verbs.ExpSendFlags, remote uint64, rkey uint32, sges ...verbs.SGE) (*verbs.ExpSendWR, error) {
	if err := l.Err(); err != nil {
		return nil, err
	}
	if err := checkRemote(remote, sges); err != nil {
		return nil, l.fail(err)
	}
	wr, err := l.sendWR(wrID, verbs.ExpWRRDMAWrite, flags, sges)
	if err != nil {
		return nil, l.fail(err)
	}
	r := wr.WR.RDMA()
	r.RemoteAddr, r.Rkey = remote, rkey
	return wr, nil
}

// Read appends an RDMA READ from remote/rkey into the sges.
func (l *List) Read(wrID uint64, flags verbs.ExpSendFlags, remote uint64, rkey uint32, sges ...verbs.SGE) (*verbs.ExpSendWR, error) {
	if err := l.Err(); err != nil {
		return nil, err
	}
	if err := checkRemote(remote, sges); err != nil {
		return nil, l.fail(err)
	}
	wr, err := l.sendWR(wrID, verbs.ExpWRRDMARead, flags, sges)
	if err != nil {
		return nil, l.fail(err)
	}
	r := wr.WR.RDMA()
	r.RemoteAddr, r.Rkey = remote, rkey
	return wr, nil
}

// CalcOperandSize is the length of each Calc operand's SGE: an 8-byte
// value and an 8-byte id.
const CalcOperandSize = 16

// Calc appends a SEND that reduces its operands with op over 64-bit
// elements of type typ and sends the result (IBV_EXP_SEND_WITH_CALC).
// Each operand is one 16-byte SGE: a big-endian value, then an 8-byte id
// that only MAXLOC reads; the result arrives big-endian (8 bytes, 16 for
// MAXLOC). The posting QP must be cross-channel. No operands, or one
// that is not CalcOperandSize bytes, is refused with EINVAL.
func (l *List) Calc(wrID uint64, flags verbs.ExpSendFlags, op verbs.ExpCalcOp, typ verbs.ExpCalcDataType, operands ...verbs.SGE) (*verbs.ExpSendWR, error) {
	if err := l.Err(); err != nil {
		return nil, err
	}
	if len(operands) == 0 {
		return nil, l.fail(fmt.Errorf("task list Calc: no operands: %w", syscall.EINVAL))
	}
	for i, g := range operands {
		if g.Length != CalcOperandSize {
			return nil, l.fail(fmt.Errorf("task list Calc: operand %d is %d bytes; each is one %d-byte SGE: %w", i, g.Length, CalcOperandSize, syscall.EINVAL))
		}
	}
	wr, err := l.sendWR(wrID, verbs.ExpWRSend, flags|verbs.ExpSendWithCalc, operands)
	if err != nil {
		return nil, l.fail(err)
	}
	c := wr.Op.Calc()
	c.CalcOp, c.DataType, c.DataSize = op, typ, verbs.ExpCalcDataSize64Bit
	return wr, nil
}

// Wait appends a CQE_WAIT with wr_id wrID: the current task's send queue
// stops until cq has produced count more CQEs than its wait base. flags
// are the send flags: verbs.ExpSendSignaled for a completion when the
// wait is met, verbs.ExpSendWaitEnLast to move cq's wait base past this
// wait (without it, chained waits share one base). A count that does not
// fit cq_count (an int32) is refused with an error wrapping EINVAL.
func (l *List) Wait(wrID uint64, flags verbs.ExpSendFlags, cq *verbs.CQ, count int) (*verbs.ExpSendWR, error) {
	if err := l.Err(); err != nil {
		return nil, err
	}
	if cq == nil {
		return nil, l.fail(abiutil.NilArg("task list Wait", "cq"))
	}
	if err := checkCount("Wait", "cq_count", count); err != nil {
		return nil, l.fail(err)
	}
	wr, err := l.sendWR(wrID, verbs.ExpWRCQEWait, flags, nil)
	if err != nil {
		return nil, l.fail(err)
	}
	w := wr.Task.CQEWait()
	w.CQ, w.CQCount = cq, int32(count)
	return wr, nil
}

// SendEnable appends a SEND_ENABLE with wr_id wrID releasing the managed
// send queue of qp up to its enable base plus count (0: every WQE posted
// there by then); flags as for Wait (verbs.ExpSendWaitEnLast moves the
// base). The WQEs released must already be posted. A count that does
// not fit wqe_count (an int32) is refused with an error wrapping EINVAL.
func (l *List) SendEnable(wrID uint64, flags verbs.ExpSendFlags, qp *verbs.QP, count int) (*verbs.ExpSendWR, error) {
	return l.enable("SendEnable", verbs.ExpWRSendEnable, wrID, flags, qp, count)
}

// RecvEnable appends a RECV_ENABLE of the managed receive queue of qp, as
// SendEnable does for send queues.
func (l *List) RecvEnable(wrID uint64, flags verbs.ExpSendFlags, qp *verbs.QP, count int) (*verbs.ExpSendWR, error) {
	return l.enable("RecvEnable", verbs.ExpWRRecvEnable, wrID, flags, qp, count)
}

func (l *List) enable(name string, op verbs.ExpWROpcode, wrID uint64, flags verbs.ExpSendFlags, qp *verbs.QP, count int) (*verbs.ExpSendWR, error) {
	if err := l.Err(); err != nil {
		return nil, err
	}
	if qp == nil {
		return nil, l.fail(abiutil.NilArg("task list "+name, "qp"))
	}
	if err := checkCount(name, "wqe_count", count); err != nil {
		return nil, l.fail(err)
	}
	wr, err := l.sendWR(wrID, op, flags, nil)
	if err != nil {
		return nil, l.fail(err)
	}
	e := wr.Task.WQEEnable()
	e.QP, e.WQECount = qp, int32(count)
	return wr, nil
}

// checkCount refuses counts the C field cannot hold (it would truncate
// them: 1<<32+1 would wait for one CQE).
func checkCount(builder, field string, count int) error {
	if count < 0 || count > math.MaxInt32 {
		return fmt.Errorf("task list %s: count %d does not fit %s (0..%d): %w", builder, count, field, math.MaxInt32, syscall.EINVAL)
	}
	return nil
}

// Recv appends a receive work request scattering into sges to the current
// receive task.
func (l *List) Recv(wrID uint64, sges ...verbs.SGE) (*verbs.RecvWR, error) {
	if err := l.Err(); err != nil {
		return nil, err
	}
	t, err := l.current(verbs.ExpTaskRecv)
	if err != nil {
		return nil, l.fail(err)
	}
	if l.nRecvs == len(l.recvs) {
		return nil, l.fail(&CapacityError{"receive work requests", len(l.recvs)})
	}
	if l.nSGEs+len(sges) > len(l.sges) {
		return nil, l.fail(&CapacityError{"scatter/gather entries", len(l.sges)})
	}
	if err := checkSGEs(sges); err != nil {
		return nil, l.fail(err)
	}
	wr := &l.recvs[l.nRecvs]
	l.nRecvs++
	*wr = verbs.RecvWR{WRID: wrID}
	wr.SGList, wr.NumSGE = l.copySGEs(sges)
	if l.lastRecv == nil {
		t.Item.SetRecvWR(wr)
	} else {
		l.lastRecv.Next = wr
	}
	l.lastRecv = wr
	return wr, nil
}

// PostError is a failed Post: the errno ibv_exp_post_task returned and
// the task it stopped at, as the index the caller built it under. The
// verb does not say which work request inside the task failed; FirstWR
// and NumWRs give the task's range in the List's send or receive slab.
type PostError struct {
	Errno   syscall.Errno
	Task    int // -1 when the verb did not set bad_task
	Kind    verbs.ExpTaskType
	FirstWR int
	NumWRs  int

	full string // for ENOMEM: which queue is full, and what frees it
}

func (e *PostError) Error() string {
	var s string
	switch {
	case e.Task < 0:
		s = "ibv_exp_post_task: " + e.Errno.Error()
	case e.NumWRs == 0:
		s = fmt.Sprintf("ibv_exp_post_task: task %d (%v, no work requests): %v", e.Task, e.Kind, e.Errno)
	default:
		s = fmt.Sprintf("ibv_exp_post_task: task %d (%v, work requests %d..%d): %v",
			e.Task, e.Kind, e.FirstWR, e.FirstWR+e.NumWRs-1, e.Errno)
	}
	return s + e.full
}

// queueFull says, for ENOMEM on task t, which queue is full: a posted
// work request keeps its slot until the completion covering it is
// polled, so a list posted again and again without polling fills it (on
// an HCA its CQ overflows first, and that puts the QP in error).
func queueFull(t *verbs.ExpTask) string {
	q := "send queue"
	if t.TaskType == verbs.ExpTaskRecv {
		q = "receive queue"
	}
	qp := "its QP"
	if t.Item.QP != nil {
		qp = fmt.Sprintf("QP %d", t.Item.QP.QPNum)
	}
	return fmt.Sprintf(": the %s of %s is full: its slots are freed only as their completions are polled; poll that queue's CQ (ibv_exp_poll_cq, lease.Table.Poll) before posting again", q, qp)
}

// Unwrap returns the errno.
func (e *PostError) Unwrap() error { return e.Errno }

// Post posts the whole list with exactly one ibv_exp_post_task call. The
// List is unchanged and may be posted again. After a builder error it
// posts nothing and returns that error (Err).
//
// A *PostError does not stick: the List is as built and may be posted
// again (after ENOMEM, once the full queue's CQ is polled). The verb
// stops at the failing work request and leaves what it posted before
// posted (ibv_exp_post_task's rule): posting the whole List again posts
// that again.
func (l *List) Post() error {
	if l == nil || l.list == nil {
		return ErrFreed
	}
	if l.err != nil { // nil after Free: ErrFreed below
		return l.err
	}
	if l.nTasks == 0 { // also after Free
		if l.mem == nil {
			return ErrFreed
		}
		return fmt.Errorf("task list Post: %w", ErrEmpty)
	}
	*l.bad = nil
	l.tasks[l.nTasks-1].Next = nil
	// The three addresses cross as uintptr, unchecked by cgo: the first
	// task and the bad_task slot are in the arena, C memory by
	// construction (calloc in New), and ctx was checked at New.
	// Go pointers stored into the arena are still caught where they are
	// written (cgocheck2), not here.
	if err := verbs.ExpPostTaskCMem(l.ctxAddr, l.tasksAddr, l.badAddr); err != nil {
		return l.postError(err)
	}
	return nil
}

// postError maps bad_task back to the index the caller built. It runs
// only on failure, so it may allocate.
func (l *List) postError(err error) error {
	var ce *abiutil.CallError
	if !errors.As(err, &ce) {
		return err
	}
	pe := &PostError{Errno: ce.Errno, Task: -1}
	bad := *l.bad
	if bad == nil {
		return pe
	}
	addr, size := uintptr(unsafe.Pointer(bad)), unsafe.Sizeof(verbs.ExpTask{})
	if addr < l.tasksAddr || (addr-l.tasksAddr)%size != 0 || (addr-l.tasksAddr)/size >= uintptr(l.nTasks) {
		return pe // not one of ours; report the errno alone
	}
	off := addr - l.tasksAddr
	i := int(off / size)
	pe.Task, pe.Kind, pe.FirstWR = i, l.tasks[i].TaskType, int(l.firstWR[i])
	end := l.nSends
	if pe.Kind == verbs.ExpTaskRecv {
		end = l.nRecvs
	}
	for j := i + 1; j < l.nTasks; j++ {
		if l.tasks[j].TaskType == pe.Kind {
			end = int(l.firstWR[j])
			break
		}
	}
	pe.NumWRs = end - pe.FirstWR
	if pe.Errno == syscall.ENOMEM {
		pe.full = queueFull(&l.tasks[i])
	}
	return pe
}
