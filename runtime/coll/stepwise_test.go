//go:build linux && cgo

package coll

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/device"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/softdev"
)

// The benchmarks' baseline: a collective driven from Go step by step
// (post, poll, compute, post) over plain RC queue pairs, neither managed
// nor cross-channel. It interprets the very plan the schedule builder
// turns into a task list (plan.go), so both sides run one algorithm:
//
//   - opRecv: every receive of a run is posted when the run starts, one
//     ibv_post_recv per peer (the peer's receives chained);
//   - opSend, opCalc to a peer: consecutive ones to the same peer (the
//     schedule merges their enables) are one ibv_post_send of a chain;
//     a calc is reduced in Go first, with softdev's calc semantics
//     (stepReduce), into a staging slot the send then carries;
//   - opWait: poll the peer's receive CQ until the wait's receives are
//     there; one poll, and if they are not, the rank yields;
//   - at the end, poll the send CQ until every peer QP's last (signaled)
//     send has completed, as the schedule's closing wait does.
//
// Sends and calcs to the rank itself are the device's loopback in the
// schedule (the manager sends to itself, because only a send computes
// there); here they are done in memory, as any Go driver would, so this
// side makes no cgo call for them: the comparison leans, if anything,
// towards the stepwise side.
//
// Each rank is a small state machine (stepRank.advance) that runs until
// a wait is not met, having polled once. In a world of newStepWorld every
// rank lives on one software device and one goroutine drives them
// round-robin like a progress engine (run); in one of newStepProcess
// (stepwise_processes_test.go) a process holds one rank on its own
// device, connected over the wire to the other processes' ranks, and
// drives it alone (start, test, wait). Everything a run touches is built
// beforehand, in C memory where the verbs read it, so a run allocates
// nothing.
type stepWorld struct {
	dev    *softdev.Device
	ownDev bool // opened by newStepWorld: close closes it
	ranks  []*stepRank
	// calls counts the calls into the generated verbs wrappers (posts
	// and polls), polls the polls among them and empty the polls that
	// found nothing.
	calls, polls, empty int64
	cfree               []func() error // frees the C memory of stepAlloc, at close
	bufs                []*lease.Buffer
	mrs                 []*verbs.MR
	pds                 []*verbs.PD
	qps                 []*verbs.QP
	cqs                 []*verbs.CQ
}

type stepRank struct {
	rank    int
	qps     []*verbs.QP // by peer rank; nil for ranks that are not neighbors
	recvCQs []*verbs.CQ // by peer rank
	sendCQ  *verbs.CQ
	mem     [3][]byte // by memID; nil where the collective has none
	recvs   []stepRecvPost
	prog    []stepOp
	sendQPs int        // peer QPs with sends in a run: each signals its last
	wc      []verbs.WC // C memory
	calcOp  verbs.ExpCalcOp
	calcTyp verbs.ExpCalcDataType
	ready   *stepReady // ready messages, across processes (stepwise_processes_test.go); nil on one device

	// A run's state.
	posted    bool
	pc        int
	credit    []int // by peer: receives polled and not yet taken by a wait
	sendsDone int
	done      bool
}

// stepRecvPost is one peer's receives of a run, chained.
type stepRecvPost struct {
	qp *verbs.QP
	wr *verbs.RecvWR
}

type stepKind uint8

const (
	stepSend  stepKind = iota // reduce the calcs, then one ibv_post_send of wr's chain
	stepLocal                 // a send or calc to the rank itself, in memory
	stepWait                  // n receives from peer
)

type stepOp struct {
	kind  stepKind
	peer  int
	qp    *verbs.QP
	wr    *verbs.SendWR // stepSend: the chain's head
	cq    *verbs.CQ     // stepWait: the peer's receive CQ
	n     int           // stepWait
	calcs []stepCalc    // stepSend: each into its staging slot; stepLocal: at most one
	// stepLocal: the bytes sent (the calc's staging slot for a calc) and
	// the receive's regions they land in.
	src, dst [][]byte
}

// stepCalc is one calc op: its 16-byte operands and the 16-byte staging
// slot that receives the result.
type stepCalc struct {
	operands [][]byte
	result   []byte
}

// stepReduce is softdev's calc (runtime/softdev/doc.go, "Calc") in Go:
// the operands, each a big-endian 64-bit value and a big-endian id,
// combine in order; the result is the value (8 bytes, big-endian), or
// for MAXLOC the largest value and, among equal ones, the smallest id
// (16 bytes). It returns the result's length.
func stepReduce(op verbs.ExpCalcOp, typ verbs.ExpCalcDataType, operands [][]byte, out []byte) int {
	be := binary.BigEndian
	acc := be.Uint64(operands[0])
	if op == verbs.ExpCalcOpMaxloc {
		id := be.Uint64(operands[0][8:])
		for _, o := range operands[1:] {
			if v, vi := be.Uint64(o), be.Uint64(o[8:]); v > acc || v == acc && vi < id {
				acc, id = v, vi
			}
		}
		be.PutUint64(out, acc)
		be.PutUint64(out[8:], id)
		return 16
	}
	for _, o := range operands[1:] {
		v := be.Uint64(o)
		switch op {
		case verbs.ExpCalcOpAdd:
			if typ == verbs.ExpCalcDataTypeFloat {
				acc = math.Float64bits(math.Float64frombits(acc) + math.Float64frombits(v))
			} else {
				acc += v // two's complement: the same bits for INT and UINT
			}
		case verbs.ExpCalcOpBand:
			acc &= v
		case verbs.ExpCalcOpBxor:
			acc ^= v
		case verbs.ExpCalcOpBor:
			acc |= v
		}
	}
	be.PutUint64(out, acc)
	return 8
}

// scatter copies the first n bytes of the regions src into the regions
// dst, as a send's gather list lands in a receive's scatter list.
func scatter(dst, src [][]byte, n int) {
	var di, doff int
	for _, s := range src {
		for len(s) > 0 && n > 0 && di < len(dst) {
			k := copy(dst[di][doff:], s[:min(len(s), n)])
			s, n, doff = s[k:], n-k, doff+k
			if doff == len(dst[di]) {
				di, doff = di+1, 0
			}
		}
	}
}

// stepPlan is one rank's plan and the memories it needs: input and
// output bytes (as Comm.build's need) and scratch.
type stepPlan func(rank, size int) (pl *plan, need [2]int, scratch int)

// newStepWorld builds size ranks of plans on a device of their own:
// per rank a PD, a send CQ, and per neighbor an RC QP with its own
// receive CQ, connected to the neighbor's QP for this rank; the
// memories; and every WR, SGE and WC of a run.
func newStepWorld(size int, planOf stepPlan) (w *stepWorld, err error) {
	w = &stepWorld{}
	defer func() {
		if err != nil {
			err = errors.Join(err, w.close())
			w = nil
		}
	}()
	if w.dev, err = softdev.Open(softdev.SyncCompletions()); err != nil { // each step polls once for what its run completed
		return nil, err
	}
	w.ownDev = true
	for r := range size {
		pl, need, scratch := planOf(r, size)
		sr, err := w.newRank(r, size, pl, need, scratch)
		if err != nil {
			return nil, fmt.Errorf("stepwise: rank %d: %w", r, err)
		}
		w.ranks = append(w.ranks, sr)
	}
	for _, a := range w.ranks {
		for p, qp := range a.qps {
			if qp != nil && a.rank < p {
				if err := device.ConnectPair(qp, w.ranks[p].qps[a.rank]); err != nil {
					return nil, fmt.Errorf("stepwise: connect ranks %d and %d: %w", a.rank, p, err)
				}
			}
		}
	}
	return w, nil
}

// stepAlloc is cmemSlice, freed at close; out of C memory the test
// cannot go on.
func stepAlloc[T any](w *stepWorld, n int) []T {
	s, err := cmemSlice[T](n)
	if err != nil {
		panic(err)
	}
	w.cfree = append(w.cfree, func() error { free(unsafe.Pointer(&s[0])); return nil })
	return s
}

func (w *stepWorld) newRank(rank, size int, pl *plan, need [2]int, scratch int) (*stepRank, error) {
	d := w.dev
	r := &stepRank{rank: rank, qps: make([]*verbs.QP, size), recvCQs: make([]*verbs.CQ, size),
		credit: make([]int, size), calcOp: pl.calcOp, calcTyp: pl.calcType}
	pd, err := d.AllocPD()
	if err != nil {
		return nil, err
	}
	w.pds = append(w.pds, pd)
	newCQ := func() (*verbs.CQ, error) {
		cq, err := d.CreateCQ(DefaultDepth)
		if err == nil {
			w.cqs = append(w.cqs, cq)
		}
		return cq, err
	}
	if r.sendCQ, err = newCQ(); err != nil {
		return nil, err
	}
	for _, p := range neighbors(rank, size) {
		if r.recvCQs[p], err = newCQ(); err != nil {
			return nil, err
		}
		if r.qps[p], err = d.CreateQP(pd, r.sendCQ, r.recvCQs[p]); err != nil {
			return nil, err
		}
		w.qps = append(w.qps, r.qps[p])
	}

	// The memories, each registered in the rank's PD.
	calcs := 0
	for _, o := range pl.ops {
		if o.kind == opCalc {
			calcs++
		}
	}
	var lkeys [3]uint32
	var staging []byte
	var stagingKey uint32
	register := func(n int) ([]byte, uint32, error) {
		buf, err := lease.Alloc(n)
		if err != nil {
			return nil, 0, err
		}
		w.bufs = append(w.bufs, buf)
		mr, err := d.RegMR(pd, buf.Bytes()[:n], verbs.AccessLocalWrite)
		if err != nil {
			return nil, 0, err
		}
		w.mrs = append(w.mrs, mr)
		return buf.Bytes(), mr.Lkey, nil
	}
	for m, n := range [3]int{need[0], need[1], scratch} {
		if n > 0 {
			if r.mem[m], lkeys[m], err = register(n); err != nil {
				return nil, err
			}
		}
	}
	if calcs > 0 {
		if staging, stagingKey, err = register(calcs * ElementSize); err != nil {
			return nil, err
		}
	}
	bytesOf := func(rs []region) [][]byte {
		out := make([][]byte, len(rs))
		for i, g := range rs {
			out[i] = r.mem[g.mem][g.off : g.off+g.len]
		}
		return out
	}
	sgesOf := func(rs []region) *verbs.SGE {
		if len(rs) == 0 {
			return nil
		}
		sg := stepAlloc[verbs.SGE](w, len(rs))
		for i, g := range rs {
			addr := uint64(uintptr(unsafe.Pointer(&r.mem[g.mem][0]))) + uint64(g.off)
			sg[i] = verbs.SGE{Addr: addr, Length: uint32(g.len), Lkey: lkeys[g.mem]}
		}
		return &sg[0]
	}

	// Receives: one chain per peer, in plan order; those from the rank
	// itself are the destinations of its loopback sends, in order.
	var selfRecvs [][][]byte
	chains := map[int]*verbs.RecvWR{}
	var order []int
	lastSend := map[int]int{} // peer -> index of its last send or calc
	for i, o := range pl.ops {
		switch {
		case o.kind == opRecv && o.peer == rank:
			selfRecvs = append(selfRecvs, bytesOf(o.rs))
		case o.kind == opRecv:
			wr := &stepAlloc[verbs.RecvWR](w, 1)[0]
			*wr = verbs.RecvWR{WRID: uint64(i), SGList: sgesOf(o.rs), NumSGE: int32(len(o.rs))}
			if head, ok := chains[o.peer]; ok {
				for head.Next != nil {
					head = head.Next
				}
				head.Next = wr
			} else {
				chains[o.peer] = wr
				order = append(order, o.peer)
			}
		case (o.kind == opSend || o.kind == opCalc) && o.peer != rank:
			lastSend[o.peer] = i
		}
	}
	for _, p := range order {
		r.recvs = append(r.recvs, stepRecvPost{qp: r.qps[p], wr: chains[p]})
	}
	r.sendQPs = len(lastSend)

	// The walk: what the manager does in the schedule, from Go.
	var tail *verbs.SendWR // the chain being built, to r.prog's last stepSend
	slot := 0
	for i, o := range pl.ops {
		switch {
		case o.kind == opRecv:
		case o.kind == opWait && o.peer == rank: // the loopback is done in memory: nothing to wait for
			tail = nil
		case o.kind == opWait:
			tail = nil
			r.prog = append(r.prog, stepOp{kind: stepWait, peer: o.peer, cq: r.recvCQs[o.peer], n: o.n})
		case o.peer == rank:
			tail = nil
			if len(selfRecvs) == 0 {
				return nil, fmt.Errorf("op %d: a send to itself without a receive", i)
			}
			lo := stepOp{kind: stepLocal, peer: rank, dst: selfRecvs[0]}
			selfRecvs = selfRecvs[1:]
			if o.kind == opCalc {
				c := stepCalc{operands: bytesOf(o.rs), result: staging[slot*ElementSize : (slot+1)*ElementSize]}
				slot++
				lo.calcs, lo.src = []stepCalc{c}, [][]byte{c.result}
			} else {
				lo.src = bytesOf(o.rs)
			}
			r.prog = append(r.prog, lo)
		default:
			wr := &stepAlloc[verbs.SendWR](w, 1)[0]
			*wr = verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend}
			if lastSend[o.peer] == i {
				wr.SendFlags = int32(verbs.SendSignaled)
			}
			var c *stepCalc
			if o.kind == opCalc {
				sg := &stepAlloc[verbs.SGE](w, 1)[0]
				result := staging[slot*ElementSize : (slot+1)*ElementSize]
				n := 8
				if pl.calcOp == verbs.ExpCalcOpMaxloc {
					n = 16
				}
				*sg = verbs.SGE{Addr: uint64(uintptr(unsafe.Pointer(&result[0]))), Length: uint32(n), Lkey: stagingKey}
				slot++
				wr.SGList, wr.NumSGE = sg, 1
				c = &stepCalc{operands: bytesOf(o.rs), result: result}
			} else {
				wr.SGList, wr.NumSGE = sgesOf(o.rs), int32(len(o.rs))
			}
			if last := len(r.prog) - 1; tail != nil && r.prog[last].peer == o.peer {
				tail.Next, tail = wr, wr
			} else {
				r.prog = append(r.prog, stepOp{kind: stepSend, peer: o.peer, qp: r.qps[o.peer], wr: wr})
				tail = wr
			}
			if c != nil {
				last := &r.prog[len(r.prog)-1]
				last.calcs = append(last.calcs, *c)
			}
		}
	}
	r.wc = stepAlloc[verbs.WC](w, 16)
	return r, nil
}

// run runs one collective on every rank, round-robin until all are
// done. Two passes over the ranks in which none posts anything or finds
// a completion mean the run cannot complete (every poll runs the device,
// so a second pass sees whatever the first left): an error, not a hang.
func (w *stepWorld) run() error {
	w.reset()
	left, idle := len(w.ranks), 0
	for left > 0 {
		moved := false
		for _, r := range w.ranks {
			if r.done {
				continue
			}
			m, err := w.advance(r)
			if err != nil {
				return err
			}
			moved = moved || m
			if r.done {
				left--
			}
		}
		if idle++; moved {
			idle = 0
		}
		if idle == 2 {
			return w.stuck()
		}
	}
	return nil
}

// reset readies every rank for a run.
func (w *stepWorld) reset() {
	for _, r := range w.ranks {
		r.posted, r.pc, r.sendsDone, r.done = false, 0, 0, false
		if r.ready != nil {
			clear(r.ready.got)
		}
	}
}

func (w *stepWorld) stuck() error {
	for _, r := range w.ranks {
		if r.done {
			continue
		}
		if r.pc < len(r.prog) {
			o := r.prog[r.pc]
			return fmt.Errorf("stepwise: rank %d cannot complete: waits for %d receives from rank %d, has %d", r.rank, o.n, o.peer, r.credit[o.peer])
		}
		return fmt.Errorf("stepwise: rank %d cannot complete: %d of %d send completions", r.rank, r.sendsDone, r.sendQPs)
	}
	return errors.New("stepwise: stuck with every rank done")
}

// advance runs rank r until it waits for something that has not come
// (having polled once) or is done; it says whether r posted or polled
// anything.
func (w *stepWorld) advance(r *stepRank) (moved bool, err error) {
	if !r.posted {
		for _, p := range r.recvs {
			w.calls++
			if err := verbs.PostRecv(p.qp, p.wr, nil); err != nil {
				return false, fmt.Errorf("stepwise: rank %d: %w", r.rank, err)
			}
		}
		if r.ready != nil {
			if err := w.sendReady(r); err != nil {
				return false, err
			}
		}
		r.posted, moved = true, true
	}
	for ; r.pc < len(r.prog); r.pc++ {
		o := &r.prog[r.pc]
		switch o.kind {
		case stepSend:
			if r.ready != nil {
				ok, err := w.takeReady(r, o.peer)
				if err != nil {
					return moved, err
				}
				if !ok {
					return moved, nil
				}
			}
			for i := range o.calcs {
				c := &o.calcs[i]
				stepReduce(r.calcOp, r.calcTyp, c.operands, c.result)
			}
			w.calls++
			if err := verbs.PostSend(o.qp, o.wr, nil); err != nil {
				return moved, fmt.Errorf("stepwise: rank %d: send to rank %d: %w", r.rank, o.peer, err)
			}
			moved = true
		case stepLocal:
			n := math.MaxInt
			if len(o.calcs) > 0 {
				c := &o.calcs[0]
				n = stepReduce(r.calcOp, r.calcTyp, c.operands, c.result)
			}
			scatter(o.dst, o.src, n)
		case stepWait:
			if r.credit[o.peer] < o.n {
				got, err := w.poll(r, o.cq)
				if err != nil {
					return moved, err
				}
				r.credit[o.peer] += got
				moved = moved || got > 0
				if r.credit[o.peer] < o.n {
					return moved, nil
				}
			}
			r.credit[o.peer] -= o.n
		}
	}
	if r.sendsDone < r.sendQPs {
		got, err := w.poll(r, r.sendCQ)
		if err != nil {
			return moved, err
		}
		r.sendsDone += got
		moved = moved || got > 0
		if r.sendsDone < r.sendQPs {
			return moved, nil
		}
	}
	r.done = true
	return true, nil
}

// poll polls cq once and checks what it found.
func (w *stepWorld) poll(r *stepRank, cq *verbs.CQ) (int, error) {
	w.calls++
	w.polls++
	n, err := verbs.PollCQ(cq, r.wc)
	if err != nil {
		return 0, fmt.Errorf("stepwise: rank %d: %w", r.rank, err)
	}
	if n == 0 {
		w.empty++
	}
	for _, c := range r.wc[:n] {
		if c.Status != verbs.WCSuccess {
			return 0, fmt.Errorf("stepwise: rank %d: completion of op %d on QP %#x: %v", r.rank, c.WRID, c.QPNum, c.Status)
		}
	}
	return int(n), nil
}

// close destroys everything the world made and closes the device if it
// opened it.
func (w *stepWorld) close() error {
	if w.dev == nil {
		return nil
	}
	var errs []error
	for _, qp := range w.qps {
		errs = append(errs, w.dev.DestroyQP(qp))
	}
	for _, cq := range w.cqs {
		errs = append(errs, w.dev.DestroyCQ(cq))
	}
	for _, mr := range w.mrs {
		errs = append(errs, w.dev.DeregMR(mr))
	}
	for _, b := range w.bufs {
		errs = append(errs, b.Free())
	}
	for _, pd := range w.pds {
		errs = append(errs, w.dev.DeallocPD(pd))
	}
	for _, free := range w.cfree {
		errs = append(errs, free())
	}
	if w.ownDev {
		errs = append(errs, w.dev.Close())
	}
	w.dev = nil
	return errors.Join(errs...)
}
