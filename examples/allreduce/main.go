//go:build linux && cgo

// Command allreduce reduces one 64-bit value per rank across N ranks by
// recursive doubling, with nothing but cross-channel tasks: every rank's
// whole schedule is built once and posted once, and the device runs it to
// the end without the CPU.
//
// In step j, rank r exchanges its partial result with rank r^(1<<j) over
// a queue pair of its own for that step. The partial result after j steps
// is never stored: the send of step j is a CALC send whose operands are
// the rank's own value and the j values received so far (the operations
// are associative and commutative), and it waits (CQE_WAIT) for the
// receive of step j-1. A last CALC send over a queue pair connected to
// itself delivers the total into the rank's result buffer.
//
//	go run ./examples/allreduce -ranks 16 -op sum -type float
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
	"unsafe"

	verbs "github.com/verbsexp/verbsexp/generated"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/softdev"
	"github.com/verbsexp/verbsexp/runtime/task"
)

func main() {
	ranks := flag.Int("ranks", 8, "number of ranks, a power of two")
	op := flag.String("op", "sum", "sum, max (MAXLOC), and, or, xor")
	typ := flag.String("type", "int", "int, uint or float")
	flag.Parse()
	o, ok := ops[*op]
	t, ok2 := types[*typ]
	if !ok || !ok2 {
		fmt.Fprintln(os.Stderr, "allreduce: unknown -op or -type")
		os.Exit(2)
	}
	if err := run(*ranks, o, t, os.Stdout); err != nil {
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

// input is rank r's value: distinct, mixed signs for int, exactly
// representable sums for float, varied bit patterns for the bitwise ops.
func input(r int, typ verbs.ExpCalcDataType) uint64 {
	switch typ {
	case verbs.ExpCalcDataTypeInt:
		return uint64(int64(r*37%23 - 11))
	case verbs.ExpCalcDataTypeFloat:
		return math.Float64bits(float64(r*37%23) - 10.5)
	}
	return 0x9e3779b97f4a7c15*uint64(r+1) ^ uint64(r)<<(r%64)
}

// rank is one participant's queue pairs, buffers and schedule.
type rank struct {
	step     []*verbs.QP // step j's QP, connected to rank r^(1<<j)
	stepCQ   []*verbs.CQ // its receive CQ
	self     *verbs.QP   // connected to itself: delivers the result
	selfCQ   *verbs.CQ
	scq      *verbs.CQ
	buf      *lease.Buffer // x0 | B_0 … B_{k-1} | result, elem bytes each
	mr       *verbs.MR
	list     *task.List
	elemSize int
}

func (rk *rank) sge(slot int) verbs.SGE {
	return verbs.SGE{Addr: rk.buf.Addr() + uint64(slot*rk.elemSize), Length: uint32(rk.elemSize), Lkey: rk.mr.Lkey}
}

func run(n int, op verbs.ExpCalcOp, typ verbs.ExpCalcDataType, out io.Writer) (err error) {
	if n < 2 || n&(n-1) != 0 {
		return fmt.Errorf("ranks must be a power of two ≥ 2, not %d", n)
	}
	k := bits.TrailingZeros(uint(n))
	elem := 8
	if op == verbs.ExpCalcOpMaxloc {
		elem = 16 // {value, index}
	}
	dev, err := softdev.Open()
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dev.Close()) }()
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	defer dev.DeallocPD(pd)

	caps := softdev.Caps{SendWR: 4, RecvWR: 2, SendSGE: k + 1, RecvSGE: 1}
	rs := make([]*rank, n)
	for r := range rs {
		rk := &rank{elemSize: elem}
		rs[r] = rk
		defer rk.close(dev)
		if rk.scq, err = dev.CreateCQ(2*k+2, softdev.CrossChannelCQ()); err != nil {
			return err
		}
		for j := 0; j <= k; j++ {
			cq, err := dev.CreateCQ(2, softdev.CrossChannelCQ())
			if err != nil {
				return err
			}
			qp, err := dev.CreateQP(pd, rk.scq, cq, softdev.CrossChannel(), softdev.QPCaps(caps))
			if err != nil {
				return err
			}
			if j < k {
				rk.step, rk.stepCQ = append(rk.step, qp), append(rk.stepCQ, cq)
			} else {
				rk.self, rk.selfCQ = qp, cq
			}
		}
		if rk.buf, err = lease.Alloc((k + 2) * elem); err != nil {
			return err
		}
		if rk.mr, err = dev.RegMR(pd, rk.buf.Pointer(), rk.buf.Len(), verbs.AccessLocalWrite); err != nil {
			return err
		}
		binary.NativeEndian.PutUint64(rk.buf.Bytes(), input(r, typ))
		if elem == 16 {
			binary.NativeEndian.PutUint64(rk.buf.Bytes()[8:], uint64(r))
		}
	}
	for r, rk := range rs {
		for j := 0; j < k; j++ {
			if p := r ^ 1<<j; r < p {
				if err := softdev.Connect(rk.step[j], rs[p].step[j]); err != nil {
					return err
				}
			}
		}
		if err := softdev.Connect(rk.self, rk.self); err != nil {
			return err
		}
	}

	// Each rank's schedule: receives first, then the chain of CALC sends.
	ctx := dev.Context()
	for _, rk := range rs {
		if rk.list, err = task.New(ctx, task.Capacity{Tasks: 2*k + 2, SendWRs: 2*k + 2, RecvWRs: k + 1, SGEs: (k+1)*(k+2)/2 + k + 2}); err != nil {
			return err
		}
		l := rk.list
		for j := 0; j < k; j++ {
			l.RecvTask(rk.step[j])
			if _, err := l.Recv(uint64(j), rk.sge(1+j)); err != nil {
				return err
			}
		}
		l.RecvTask(rk.self)
		if _, err := l.Recv(uint64(k), rk.sge(k+1)); err != nil {
			return err
		}
		for j := 0; j <= k; j++ {
			qp := rk.self
			if j < k {
				qp = rk.step[j]
			}
			l.SendTask(qp)
			if j > 0 {
				if _, err := l.Wait(rk.stepCQ[j-1], 1, true, 0); err != nil {
					return err
				}
			}
			operands := make([]verbs.SGE, j+1) // x0 and B_0 … B_{j-1}
			for i := range operands {
				operands[i] = rk.sge(i)
			}
			if _, err := l.Calc(uint64(100+j), 0, op, typ, operands...); err != nil {
				return err
			}
		}
	}
	for _, rk := range rs {
		if err := rk.list.Post(); err != nil {
			return err
		}
	}
	executed, err := dev.Progress()
	if err != nil {
		return err
	}

	want := reference(n, op, typ)
	wc := softdev.CallocSlice[verbs.ExpWC](4)
	defer softdev.Free(unsafe.Pointer(&wc[0]))
	for r, rk := range rs {
		got, err := verbs.ExpPollCQ(rk.selfCQ, 4, &wc[0], uint32(unsafe.Sizeof(wc[0])))
		if err != nil {
			return err
		}
		if got != 1 || wc[0].Status != verbs.WCSuccess {
			return fmt.Errorf("rank %d: %d result completions (status %v)", r, got, wc[0].Status)
		}
		res := rk.buf.Bytes()[(k+1)*elem : (k+2)*elem]
		if string(res) != string(want) {
			return fmt.Errorf("rank %d: result %x, want %x", r, res, want)
		}
	}
	fmt.Fprintf(out, "%d ranks, %v over %v: every rank holds %s; %d work requests run by the device after one post per rank\n",
		n, op, typ, describe(want, op, typ), executed)
	return nil
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

func (rk *rank) close(dev *softdev.Device) {
	if rk.list != nil {
		rk.list.Free()
	}
	for _, qp := range append(rk.step, rk.self) {
		if qp != nil {
			dev.DestroyQP(qp)
		}
	}
	for _, cq := range append(rk.stepCQ, rk.selfCQ, rk.scq) {
		if cq != nil {
			dev.DestroyCQ(cq)
		}
	}
	if rk.mr != nil {
		dev.DeregMR(rk.mr)
	}
	if rk.buf != nil {
		rk.buf.Free()
	}
}
