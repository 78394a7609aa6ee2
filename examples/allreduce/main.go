//go:build linux && cgo

// Command allreduce reduces one 64-bit value per rank across N ranks
// (2 and up, any count) by recursive doubling, with nothing but
// cross-channel tasks: every rank's schedule is built once and posted
// once per allreduce, and the device runs it to the end without the CPU.
//
// With p the largest power of two not above N, each of the N-p extra
// ranks first sends its value to rank r-p. Then in step j the p ranks
// exchange partial results with rank r^(1<<j) over a queue pair of their
// own for that step. A partial result is never stored: the send of step
// j is a CALC send whose operands are the rank's own value, its extra
// rank's value if it has one, and the j partials received so far (the
// operations are associative and commutative), and it waits (CQE_WAIT,
// WAIT_EN_LAST so that each wait counts from the previous one) for the
// receive of step j-1. A last CALC send over a queue pair connected to
// itself delivers the total into the rank's result slot, and once it has
// landed (another wait) a send passes it on to the extra rank. Values are big-endian 16-byte calc operands (value,
// then an id that MAXLOC reports); max runs as UINT MAXLOC, the one the
// hardware has, on an order-preserving encoding of int and float values.
//
//	go run ./examples/allreduce -ranks 12 -op sum -type float -iters 100
package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"time"
	"unsafe"

	verbs "github.com/verbsexp/verbsexp/generated"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/softdev"
	"github.com/verbsexp/verbsexp/runtime/task"
)

func main() {
	ranks := flag.Int("ranks", 8, "number of ranks, 2 or more")
	op := flag.String("op", "sum", "sum, max (MAXLOC), and, or, xor")
	typ := flag.String("type", "int", "int, uint or float")
	iters := flag.Int("iters", 100, "allreduces to run (the schedule is posted again for each)")
	flag.Parse()
	o, ok := ops[*op]
	t, ok2 := types[*typ]
	if !ok || !ok2 {
		fmt.Fprintln(os.Stderr, "allreduce: unknown -op or -type (see -h)")
		os.Exit(2)
	}
	if err := run(*ranks, o, t, *iters, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "allreduce:", err)
		os.Exit(1)
	}
}

var ops = map[string]verbs.ExpCalcOp{
	"sum": verbs.ExpCalcOpAdd, "max": verbs.ExpCalcOpMaxloc,
	"and": verbs.ExpCalcOpBand, "or": verbs.ExpCalcOpBor, "xor": verbs.ExpCalcOpBxor,
}

var types = map[string]verbs.ExpCalcDataType{
	"int": verbs.ExpCalcDataTypeInt, "uint": verbs.ExpCalcDataTypeUint, "float": verbs.ExpCalcDataTypeFloat,
}

// nameOf is the flag value naming v.
func nameOf[T comparable](m map[string]T, v T) string {
	for k, x := range m {
		if x == v {
			return k
		}
	}
	return fmt.Sprint(v)
}

// input is rank r's value: distinct, mixed signs for int, sums exactly
// representable for float (so any order of additions gives the same
// bits), varied bit patterns for the bitwise operations.
func input(r int, typ verbs.ExpCalcDataType) uint64 {
	switch typ {
	case verbs.ExpCalcDataTypeInt:
		return uint64(int64(r*37%23 - 11))
	case verbs.ExpCalcDataTypeFloat:
		return math.Float64bits(float64(r*37%23) - 10.5)
	}
	return 0x9e3779b97f4a7c15*uint64(r+1) ^ uint64(r)<<(r%64)
}

// orderKey maps a value to a uint64 with the same order, for UINT
// MAXLOC: int by flipping the sign bit, float by flipping the sign bit
// of positives and every bit of negatives. fromKey undoes it.
func orderKey(v uint64, typ verbs.ExpCalcDataType) uint64 {
	switch typ {
	case verbs.ExpCalcDataTypeInt:
		return v ^ 1<<63
	case verbs.ExpCalcDataTypeFloat:
		if v>>63 == 1 {
			return ^v
		}
		return v | 1<<63
	}
	return v
}

func fromKey(k uint64, typ verbs.ExpCalcDataType) uint64 {
	switch typ {
	case verbs.ExpCalcDataTypeInt:
		return k ^ 1<<63
	case verbs.ExpCalcDataTypeFloat:
		if k>>63 == 1 {
			return k &^ (1 << 63)
		}
		return ^k
	}
	return k
}

// A rank's buffer: 16-byte slots (calc operands).
const slot = 16

const (
	slotSelf   = 0 // the rank's value
	slotExtra  = 1 // its extra rank's value
	slotResult = 2 // where the total lands
	slotStep   = 3 // first of the partials received in the steps
)

// rank is one participant's queue pairs, buffers and schedule.
type rank struct {
	id       int
	step     []*verbs.QP // step j's QP, connected to rank r^(1<<j)
	stepCQ   []*verbs.CQ // its receive CQ
	self     *verbs.QP   // connected to itself: delivers the result
	selfCQ   *verbs.CQ
	pair     *verbs.QP // to the extra rank r+p, or (for an extra rank) to r-p
	pairCQ   *verbs.CQ
	scq      *verbs.CQ // send completions (only errors: the sends are unsignaled)
	buf      *lease.Buffer
	mr       *verbs.MR
	list     *task.List
	extraVal bool // a core rank that has an extra rank
}

func (rk *rank) sge(s int) verbs.SGE {
	return verbs.SGE{Addr: rk.buf.Addr() + uint64(s*slot), Length: slot, Lkey: rk.mr.Lkey}
}

func (rk *rank) slot(s int) []byte { return rk.buf.Bytes()[s*slot : (s+1)*slot] }

// world is the device and every rank.
type world struct {
	dev   *softdev.Device
	pd    *verbs.PD
	ranks []*rank
	p, k  int // the power of two and its log
}

func run(n int, op verbs.ExpCalcOp, typ verbs.ExpCalcDataType, iters int, out io.Writer) (err error) {
	if n < 2 || iters < 1 {
		return fmt.Errorf("need -ranks ≥ 2 and -iters ≥ 1, not %d and %d", n, iters)
	}
	dev, err := softdev.Open()
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dev.Close()) }()
	w := &world{dev: dev}
	w.k = bits.Len(uint(n)) - 1
	w.p = 1 << w.k
	if w.pd, err = dev.AllocPD(); err != nil {
		return err
	}
	defer dev.DeallocPD(w.pd)
	defer w.close()
	if err := w.build(n, op, typ); err != nil {
		return err
	}

	want := reference(n, op, typ)
	var busy time.Duration
	executed := 0
	wc := softdev.CallocSlice[verbs.ExpWC](4)
	defer softdev.Free(unsafe.Pointer(&wc[0]))
	for it := 0; it < iters; it++ {
		for _, rk := range w.ranks {
			clear(rk.slot(slotResult))
		}
		start := time.Now()
		for _, rk := range w.ranks {
			if err := rk.list.Post(); err != nil {
				return fmt.Errorf("rank %d: %w", rk.id, err)
			}
		}
		ran, err := dev.Progress()
		busy += time.Since(start)
		executed += ran
		if err != nil {
			return fmt.Errorf("allreduce %d did not finish: %w", it, w.name(err))
		}
		for _, rk := range w.ranks {
			cq := rk.selfCQ
			if rk.id >= w.p {
				cq = rk.pairCQ // an extra rank's result comes over its pair QP
			}
			got, err := verbs.ExpPollCQ(cq, 4, &wc[0], uint32(unsafe.Sizeof(wc[0])))
			if err != nil {
				return err
			}
			if got != 1 || wc[0].Status != verbs.WCSuccess {
				return fmt.Errorf("rank %d: %d result completions (status %v)", rk.id, got, wc[0].Status)
			}
			res := decode(rk.slot(slotResult), op, typ)
			if string(res) != string(want) {
				return fmt.Errorf("allreduce %d, rank %d: result %x, want %x", it, rk.id, res, want)
			}
		}
		if err := w.drainPairs(wc); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "%d ranks, %s over %s: every rank holds %s; %d allreduces, each one post per rank and %d work requests run by the device, %.2f µs per allreduce\n",
		n, nameOf(ops, op), nameOf(types, typ), describe(want, op, typ), iters, executed/iters, float64(busy.Nanoseconds())/1e3/float64(iters))
	return nil
}

// name rewrites a deadlock report's QP numbers as ranks and roles.
func (w *world) name(err error) error {
	var de *softdev.DeadlockError
	if !errors.As(err, &de) {
		return err
	}
	who := map[uint32]string{}
	for _, rk := range w.ranks {
		for j, qp := range rk.step {
			who[qp.QPNum] = fmt.Sprintf("rank %d step %d", rk.id, j)
		}
		if rk.self != nil {
			who[rk.self.QPNum] = fmt.Sprintf("rank %d result", rk.id)
		}
		if rk.pair != nil {
			who[rk.pair.QPNum] = fmt.Sprintf("rank %d pair", rk.id)
		}
	}
	msg := ""
	for _, b := range de.Waits {
		msg += fmt.Sprintf("; %s (QP %#x) waits for base %d + count %d CQEs, has %d", who[b.QPNum], b.QPNum, b.Base, b.Count, b.Produced)
	}
	for _, b := range de.Sends {
		msg += fmt.Sprintf("; %s (QP %#x) finds no receive at %s", who[b.QPNum], b.QPNum, who[b.DestQPNum])
	}
	return fmt.Errorf("%w%s", err, msg)
}

// drainPairs polls the pair QPs' CQs of the core ranks, which get the
// extra values' receive completions.
func (w *world) drainPairs(wc []verbs.ExpWC) error {
	for _, rk := range w.ranks[:w.p] {
		if rk.pairCQ == nil {
			continue
		}
		if _, err := verbs.ExpPollCQ(rk.pairCQ, int32(len(wc)), &wc[0], uint32(unsafe.Sizeof(wc[0]))); err != nil {
			return err
		}
	}
	return nil
}

// build creates every rank's QPs, buffers and task list.
func (w *world) build(n int, op verbs.ExpCalcOp, typ verbs.ExpCalcDataType) error {
	dev, p, k := w.dev, w.p, w.k
	caps := softdev.QPCaps(softdev.Caps{SendWR: 4, RecvWR: 2, SendSGE: k + 2, RecvSGE: 1})
	newQP := func(rk *rank) (*verbs.QP, *verbs.CQ, error) {
		cq, err := dev.CreateCQ(2, softdev.CrossChannelCQ())
		if err != nil {
			return nil, nil, err
		}
		qp, err := dev.CreateQP(w.pd, rk.scq, cq, softdev.CrossChannel(), caps)
		if err != nil {
			dev.DestroyCQ(cq)
		}
		return qp, cq, err
	}
	for r := 0; r < n; r++ {
		rk := &rank{id: r, extraVal: r < n-p}
		w.ranks = append(w.ranks, rk)
		var err error
		if rk.scq, err = dev.CreateCQ(8, softdev.CrossChannelCQ()); err != nil {
			return err
		}
		if r < p {
			for j := 0; j < k; j++ {
				qp, cq, err := newQP(rk)
				if err != nil {
					return err
				}
				rk.step, rk.stepCQ = append(rk.step, qp), append(rk.stepCQ, cq)
			}
			if rk.self, rk.selfCQ, err = newQP(rk); err != nil {
				return err
			}
		}
		if r >= p || rk.extraVal {
			if rk.pair, rk.pairCQ, err = newQP(rk); err != nil {
				return err
			}
		}
		if rk.buf, err = lease.Alloc((slotStep + k) * slot); err != nil {
			return err
		}
		if rk.mr, err = dev.RegMR(w.pd, rk.buf.Pointer(), rk.buf.Len(), verbs.AccessLocalWrite); err != nil {
			return err
		}
		v := input(r, typ)
		if op == verbs.ExpCalcOpMaxloc {
			v = orderKey(v, typ)
		}
		binary.BigEndian.PutUint64(rk.slot(slotSelf), v)
		binary.BigEndian.PutUint64(rk.slot(slotSelf)[8:], uint64(r)) // MAXLOC reports it
	}
	for r, rk := range w.ranks[:p] {
		for j := 0; j < k; j++ {
			if q := r ^ 1<<j; r < q {
				if err := softdev.Connect(rk.step[j], w.ranks[q].step[j]); err != nil {
					return err
				}
			}
		}
		if err := softdev.Connect(rk.self, rk.self); err != nil {
			return err
		}
		if rk.extraVal {
			if err := softdev.Connect(rk.pair, w.ranks[r+p].pair); err != nil {
				return err
			}
		}
	}
	typCalc := typ
	if op == verbs.ExpCalcOpMaxloc {
		typCalc = verbs.ExpCalcDataTypeUint // the hardware's MAXLOC
	}
	for _, rk := range w.ranks {
		var err error
		if rk.list, err = task.New(dev.Context(), task.Capacity{Tasks: 2*k + 5, SendWRs: 2*k + 4, RecvWRs: k + 2, SGEs: (k + 3) * (k + 3)}); err != nil {
			return err
		}
		if rk.id >= p {
			err = rk.extraSchedule()
		} else {
			err = rk.coreSchedule(k, op, typCalc)
		}
		if err != nil {
			return fmt.Errorf("rank %d schedule: %w", rk.id, err)
		}
	}
	return nil
}

// extraSchedule: receive the result, send the value to rank r-p.
func (rk *rank) extraSchedule() error {
	l := rk.list
	l.RecvTask(rk.pair)
	if _, err := l.Recv(1, rk.sge(slotResult)); err != nil {
		return err
	}
	l.SendTask(rk.pair)
	_, err := l.Send(2, 0, rk.sge(slotSelf))
	return err
}

// coreSchedule: the receives first (partials, the extra value, the
// result), then the chain of CALC sends, each waiting for the receive
// before it.
func (rk *rank) coreSchedule(k int, op verbs.ExpCalcOp, typ verbs.ExpCalcDataType) error {
	l := rk.list
	for j := 0; j < k; j++ {
		l.RecvTask(rk.step[j])
		if _, err := l.Recv(uint64(j), rk.sge(slotStep+j)); err != nil {
			return err
		}
	}
	if rk.extraVal {
		l.RecvTask(rk.pair)
		if _, err := l.Recv(uint64(k), rk.sge(slotExtra)); err != nil {
			return err
		}
	}
	l.RecvTask(rk.self)
	if _, err := l.Recv(uint64(k+1), rk.sge(slotResult)); err != nil {
		return err
	}
	operands := []verbs.SGE{rk.sge(slotSelf)}
	if rk.extraVal {
		operands = append(operands, rk.sge(slotExtra))
	}
	last := verbs.ExpSendWaitEnLast // each wait counts from the one before on its CQ
	for j := 0; j <= k; j++ {
		qp := rk.self
		if j < k {
			qp = rk.step[j]
		}
		l.SendTask(qp)
		switch {
		case j > 0:
			if _, err := l.Wait(uint64(200+j), last, rk.stepCQ[j-1], 1); err != nil {
				return err
			}
		case rk.extraVal:
			if _, err := l.Wait(200, last, rk.pairCQ, 1); err != nil {
				return err
			}
		}
		if _, err := l.Calc(uint64(100+j), 0, op, typ, operands...); err != nil {
			return err
		}
		if j < k {
			operands = append(operands, rk.sge(slotStep+j))
		}
	}
	if rk.extraVal { // once the total has landed here, send it to the extra rank
		l.SendTask(rk.pair)
		if _, err := l.Wait(300, last, rk.selfCQ, 1); err != nil {
			return err
		}
		if _, err := l.Send(301, 0, rk.sge(slotResult)); err != nil {
			return err
		}
	}
	return nil
}

func (w *world) close() {
	for _, rk := range w.ranks {
		if rk.list != nil {
			rk.list.Free()
		}
		for _, qp := range append(append([]*verbs.QP{}, rk.step...), rk.self, rk.pair) {
			if qp != nil {
				w.dev.DestroyQP(qp)
			}
		}
		for _, cq := range append(append([]*verbs.CQ{}, rk.stepCQ...), rk.selfCQ, rk.pairCQ, rk.scq) {
			if cq != nil {
				w.dev.DestroyCQ(cq)
			}
		}
		if rk.mr != nil {
			w.dev.DeregMR(rk.mr)
		}
		if rk.buf != nil {
			rk.buf.Free()
		}
	}
}

// decode turns a result slot back into the reference's form: the value
// in host order, and for MAXLOC the rank it came from.
func decode(b []byte, op verbs.ExpCalcOp, typ verbs.ExpCalcDataType) []byte {
	v := binary.BigEndian.Uint64(b)
	if op != verbs.ExpCalcOpMaxloc {
		return binary.NativeEndian.AppendUint64(nil, v)
	}
	out := binary.NativeEndian.AppendUint64(nil, fromKey(v, typ))
	return binary.NativeEndian.AppendUint64(out, binary.BigEndian.Uint64(b[8:]))
}

// reference computes the expected result in Go.
func reference(n int, op verbs.ExpCalcOp, typ verbs.ExpCalcDataType) []byte {
	acc, idx := input(0, typ), uint64(0)
	for r := 1; r < n; r++ {
		v := input(r, typ)
		switch op {
		case verbs.ExpCalcOpAdd:
			switch typ {
			case verbs.ExpCalcDataTypeFloat:
				acc = math.Float64bits(math.Float64frombits(acc) + math.Float64frombits(v))
			default:
				acc += v
			}
		case verbs.ExpCalcOpBand:
			acc &= v
		case verbs.ExpCalcOpBor:
			acc |= v
		case verbs.ExpCalcOpBxor:
			acc ^= v
		case verbs.ExpCalcOpMaxloc:
			if greater(v, acc, typ) {
				acc, idx = v, uint64(r)
			}
		}
	}
	out := binary.NativeEndian.AppendUint64(nil, acc)
	if op == verbs.ExpCalcOpMaxloc {
		out = binary.NativeEndian.AppendUint64(out, idx)
	}
	return out
}

func greater(a, b uint64, typ verbs.ExpCalcDataType) bool {
	switch typ {
	case verbs.ExpCalcDataTypeInt:
		return int64(a) > int64(b)
	case verbs.ExpCalcDataTypeUint:
		return a > b
	}
	return math.Float64frombits(a) > math.Float64frombits(b)
}

func describe(b []byte, op verbs.ExpCalcOp, typ verbs.ExpCalcDataType) string {
	v := binary.NativeEndian.Uint64(b)
	s := fmt.Sprint(v)
	switch typ {
	case verbs.ExpCalcDataTypeInt:
		s = fmt.Sprint(int64(v))
	case verbs.ExpCalcDataTypeFloat:
		s = fmt.Sprint(math.Float64frombits(v))
	}
	if op == verbs.ExpCalcOpMaxloc {
		s += fmt.Sprintf(" at rank %d", binary.NativeEndian.Uint64(b[8:]))
	}
	if op == verbs.ExpCalcOpBand || op == verbs.ExpCalcOpBor || op == verbs.ExpCalcOpBxor {
		s = fmt.Sprintf("%#016x", v)
	}
	return s
}
