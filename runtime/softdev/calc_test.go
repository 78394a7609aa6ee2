//go:build linux && cgo

package softdev

import (
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
	"testing"

	verbs "github.com/verbsexp/verbsexp/generated"
)

// calcCase holds the operands of one data type as raw 64-bit words.
var calcOperands = map[verbs.ExpCalcDataType][]uint64{
	verbs.ExpCalcDataTypeInt:  {u64i(-5), u64i(17), u64i(1 << 62), u64i(-3), u64i(1 << 62), u64i(math.MaxInt64)},
	verbs.ExpCalcDataTypeUint: {5, 1<<63 + 7, 0xff00, 3, 1<<63 + 7, 9},
	verbs.ExpCalcDataTypeFloat: {math.Float64bits(1.5), math.Float64bits(-2.25), math.Float64bits(1e10),
		math.Float64bits(3.125), math.Float64bits(1e10), math.Float64bits(-0.1)},
}

func u64i(v int64) uint64 { return uint64(v) }

// maxlocIndexes: operand i carries index maxlocIndexes[i]; operands 2 and
// 4 tie on the largest value for int and float, 1 and 4 for uint.
var maxlocIndexes = []uint64{40, 31, 22, 13, 4, 5}

// expected computes the reduction in Go, operand by operand.
func expected(op verbs.ExpCalcOp, typ verbs.ExpCalcDataType, vals []uint64) []byte {
	out := make([]byte, 8, 16)
	acc := vals[0]
	idx := maxlocIndexes[0]
	greater := func(a, b uint64) (gt, eq bool) {
		switch typ {
		case verbs.ExpCalcDataTypeInt:
			return int64(a) > int64(b), a == b
		case verbs.ExpCalcDataTypeUint:
			return a > b, a == b
		}
		x, y := math.Float64frombits(a), math.Float64frombits(b)
		return x > y, x == y
	}
	for i, v := range vals[1:] {
		switch op {
		case verbs.ExpCalcOpAdd:
			switch typ {
			case verbs.ExpCalcDataTypeInt:
				acc = uint64(int64(acc) + int64(v))
			case verbs.ExpCalcDataTypeUint:
				acc += v
			default:
				acc = math.Float64bits(math.Float64frombits(acc) + math.Float64frombits(v))
			}
		case verbs.ExpCalcOpBand:
			acc &= v
		case verbs.ExpCalcOpBxor:
			acc ^= v
		case verbs.ExpCalcOpBor:
			acc |= v
		case verbs.ExpCalcOpMaxloc:
			gt, eq := greater(v, acc)
			if gt || (eq && maxlocIndexes[i+1] < idx) {
				acc, idx = v, maxlocIndexes[i+1]
			}
		}
	}
	binary.NativeEndian.PutUint64(out, acc)
	if op == verbs.ExpCalcOpMaxloc {
		out = binary.NativeEndian.AppendUint64(out, idx)
	}
	return out
}

// TestCalc: SEND with IBV_EXP_SEND_WITH_CALC for every operation and
// data type; the receiver gets the reduction of the operands.
func TestCalc(t *testing.T) {
	ops := []verbs.ExpCalcOp{verbs.ExpCalcOpAdd, verbs.ExpCalcOpMaxloc, verbs.ExpCalcOpBand, verbs.ExpCalcOpBxor, verbs.ExpCalcOpBor}
	types := []verbs.ExpCalcDataType{verbs.ExpCalcDataTypeInt, verbs.ExpCalcDataTypeUint, verbs.ExpCalcDataTypeFloat}
	f := newFixture(t)
	p := f.pair([]QPOption{QPCaps(Caps{SendWR: 64, RecvWR: 64, SendSGE: 8, RecvSGE: 1})}, nil)
	id := uint64(0)
	for _, op := range ops {
		for _, typ := range types {
			t.Run(fmt.Sprintf("%v/%v", op, typ), func(t *testing.T) {
				id++
				vals := calcOperands[typ]
				size := 8
				if op == verbs.ExpCalcOpMaxloc {
					size = 16
				}
				// Operands at 0, 16, 32, … (value, then index for MAXLOC).
				var ranges [][2]int
				for i, v := range vals {
					binary.NativeEndian.PutUint64(f.buf[16*i:], v)
					binary.NativeEndian.PutUint64(f.buf[16*i+8:], maxlocIndexes[i])
					ranges = append(ranges, [2]int{16 * i, size})
				}
				clear(f.buf[4096 : 4096+32])
				f.postRecv(p.b, f.recv(id, f.sges(f.mr.Lkey, [2]int{4096, 32}), 1))
				w := f.send(id, verbs.ExpWRSend, verbs.ExpSendSignaled|verbs.ExpSendWithCalc, f.sges(f.mr.Lkey, ranges...), len(ranges))
				w.Op.Calc().CalcOp = op
				w.Op.Calc().DataType = typ
				w.Op.Calc().DataSize = verbs.ExpCalcDataSize64Bit
				f.postSend(p.a, w)
				rc := sum(f.poll(p.cqb))
				if len(rc) != 1 || rc[0].Status != verbs.WCSuccess || rc[0].Len != uint32(size) {
					t.Fatalf("receive %+v, want one of %d bytes", rc, size)
				}
				if sc := sum(f.poll(p.cqa)); len(sc) != 1 || sc[0].Len != uint32(size) {
					t.Fatalf("send %+v", sc)
				}
				want := expected(op, typ, vals)
				if got := f.buf[4096 : 4096+size]; !reflect.DeepEqual([]byte(got), want) {
					t.Fatalf("result % x, want % x", got, want)
				}
			})
		}
	}
	// Spot checks of the reference itself.
	if got := binary.NativeEndian.Uint64(expected(verbs.ExpCalcOpMaxloc, verbs.ExpCalcDataTypeInt, calcOperands[verbs.ExpCalcDataTypeInt])[8:]); got != 5 {
		t.Errorf("MAXLOC int index %d, want 5 (MaxInt64 is operand 5)", got)
	}
	if got := binary.NativeEndian.Uint64(expected(verbs.ExpCalcOpMaxloc, verbs.ExpCalcDataTypeUint, calcOperands[verbs.ExpCalcDataTypeUint])[8:]); got != 4 {
		t.Errorf("MAXLOC uint index %d, want 4 (ties with operand 1, index 31)", got)
	}
}

// TestCalcSingleOperand: one operand is its own reduction.
func TestCalcSingleOperand(t *testing.T) {
	f := newFixture(t)
	p := f.pair(nil, nil)
	binary.NativeEndian.PutUint64(f.buf, math.Float64bits(2.5))
	f.postRecv(p.b, f.recv(1, f.sges(f.mr.Lkey, [2]int{100, 8}), 1))
	w := f.send(2, verbs.ExpWRSend, verbs.ExpSendWithCalc, f.sges(f.mr.Lkey, [2]int{0, 8}), 1)
	w.Op.Calc().CalcOp, w.Op.Calc().DataType = verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeFloat
	f.postSend(p.a, w)
	f.poll(p.cqb)
	if got := math.Float64frombits(binary.NativeEndian.Uint64(f.buf[100:])); got != 2.5 {
		t.Fatalf("got %v", got)
	}
}
