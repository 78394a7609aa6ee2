//go:build linux && cgo

package semantics

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"syscall"

	"github.com/verbsexp/verbsexp/generated/verbs"
)

// Calc (IBV_EXP_SEND_WITH_CALC): the vendor's tc6 (on SEND) and tc7 (on
// RDMA_WRITE_WITH_IMM) over its operations and operands, MAXLOC, and
// what the providers refuse at post time. runtime/softdev's
// TestRule13Calc* and TestVendorTC6/TC7 state the same rules in-process.

func calcCases() []semCase {
	return []semCase{
		{name: "CalcSend", ranks: 1, run: func(n *node) { calcPingPong(n, verbs.ExpWRSend) }},
		{name: "CalcWriteWithImm", ranks: 1, run: func(n *node) { calcPingPong(n, verbs.ExpWRRDMAWriteWithImm) }},
		{name: "CalcMaxloc", ranks: 1, run: calcMaxloc},
		{name: "CalcRefusals", ranks: 1, run: calcRefusals},
	}
}

// calcOperand is one of the vendor's operand pairs: a and b in the C type
// named, reduced with op.
type calcOperand struct {
	op   string // LXOR, BXOR, LOR, BOR, LAND, BAND, ADD
	typ  string // int8 … uint64, float32, float64
	a, b string
}

// calcOperands re-express the vendor's tables: each operation over signed,
// unsigned and floating-point operands of every width it uses, with
// signs, zero and the top bit (bit operations on floats left out, as the
// vendor's fixture leaves them).
func calcOperands() []calcOperand {
	pairs := map[string][][2]string{
		"int8":    {{"0", "0"}, {"0", "5"}, {"5", "0"}, {"0", "-5"}, {"-5", "0"}, {"-5", "-5"}, {"3", "5"}, {"-3", "5"}, {"3", "-5"}, {"-3", "-5"}, {"0x07", "0xF2"}},
		"uint8":   {{"0", "0x80"}, {"0x80", "0"}, {"0xF0", "0x01"}, {"0xE0", "0xF0"}},
		"int32":   {{"1234567", "54321"}},
		"int64":   {{"0", "0"}, {"1234567890", "0"}, {"-1234567890", "0"}, {"1234567890", "54321"}, {"1234567890", "1234567890"}, {"-1234567890", "1234567890"}, {"-1234567890", "-1234567890"}},
		"uint64":  {{"0x00", "0x8000000000000000"}, {"0x8000000000000000", "0x00"}, {"0xF000000000000000", "0x01"}, {"0xE000000000000000", "0xF000000000000000"}},
		"float32": {{"12345.0987", "1234.567"}, {"12345.987", "1234.567"}},
		"float64": {{"0.0", "0.0"}, {"12345678.9087", "12345.5678"}, {"12345678.9087", "12345678.9087"}, {"-12345678.9087", "12345678.9087"}, {"-12345678.9087", "-12345678.9087"}},
	}
	var out []calcOperand
	for _, op := range []string{"LXOR", "BXOR", "LOR", "BOR", "LAND", "BAND", "ADD"} {
		for _, typ := range []string{"int8", "uint8", "int32", "int64", "uint64", "float32", "float64"} {
			if typ[0] == 'f' && op != "ADD" {
				continue
			}
			for _, p := range pairs[typ] {
				out = append(out, calcOperand{op, typ, p[0], p[1]})
			}
		}
	}
	return out
}

// encode turns a C literal of the type into the 64-bit word the device
// works on (integers widened with their sign, floats as float64) and its
// calc data type.
func encode(typ, lit string) (uint64, verbs.ExpCalcDataType, error) {
	switch typ {
	case "float32", "float64":
		var f float64
		if _, err := fmt.Sscan(lit, &f); err != nil {
			return 0, 0, err
		}
		if typ == "float32" {
			f = float64(float32(f))
		}
		return math.Float64bits(f), verbs.ExpCalcDataTypeFloat, nil
	}
	var v int64
	if _, err := fmt.Sscanf(lit, "%v", &v); err != nil {
		var u uint64
		if _, err := fmt.Sscanf(lit, "%v", &u); err != nil {
			return 0, 0, fmt.Errorf("%s %q: %v", typ, lit, err)
		}
		v = int64(u)
	}
	switch typ {
	case "int8":
		return uint64(int64(int8(v))), verbs.ExpCalcDataTypeInt, nil
	case "uint8":
		return uint64(uint8(v)), verbs.ExpCalcDataTypeUint, nil
	case "int32":
		return uint64(int64(int32(v))), verbs.ExpCalcDataTypeInt, nil
	case "int64":
		return uint64(v), verbs.ExpCalcDataTypeInt, nil
	}
	return uint64(v), verbs.ExpCalcDataTypeUint, nil
}

// reduce is the Go reference: the device's operation (the logical ones as
// bitwise on 0/1, as the vendor's fixture turns them), the step operands
// go through first, and the combination.
func reduce(op string, typ verbs.ExpCalcDataType) (verbs.ExpCalcOp, func(uint64) uint64, func(a, b uint64) uint64) {
	pre := func(v uint64) uint64 { return v }
	if op[0] == 'L' {
		pre = func(v uint64) uint64 {
			if v != 0 {
				return 1
			}
			return 0
		}
	}
	switch op[1:] {
	case "XOR":
		return verbs.ExpCalcOpBxor, pre, func(a, b uint64) uint64 { return a ^ b }
	case "OR":
		return verbs.ExpCalcOpBor, pre, func(a, b uint64) uint64 { return a | b }
	case "AND":
		return verbs.ExpCalcOpBand, pre, func(a, b uint64) uint64 { return a & b }
	}
	if typ == verbs.ExpCalcDataTypeFloat {
		return verbs.ExpCalcOpAdd, pre, func(a, b uint64) uint64 {
			return math.Float64bits(math.Float64frombits(a) + math.Float64frombits(b))
		}
	}
	return verbs.ExpCalcOpAdd, pre, func(a, b uint64) uint64 { return a + b }
}

const calcPage = 4096

// calcWorker is a cross-channel RC QP connected to itself, with a CQ.
func calcWorker(d *dut) (*verbs.QP, *verbs.CQ) {
	cq := d.cq(64)
	qp := d.createQP(qpSpec{scq: cq, rcq: cq, flags: verbs.ExpQPCreateCrossChannel})
	d.connect(qp, d.self(), qp.QPNum, defaultLink())
	return qp, cq
}

// calcPingPong is the vendor's calc ping-pong for every operand pair: the
// worker reduces the two 16-byte operands at offsets 0 and 16 of the page
// (a big-endian value, then an id) and delivers the result over the first
// (a receive of the whole page for SEND; an RDMA write under the rkey,
// whose immediate consumes a receive, for RDMA_WRITE_WITH_IMM), five
// rounds, each result the next round's first operand; each round's
// result is checked against the Go reference, and bytes 16 on are never
// written.
func calcPingPong(n *node, wrOp verbs.ExpWROpcode) {
	t, d := n.t, n.d
	qp, cq := calcWorker(d)
	buf := d.buf[:calcPage]
	ops := calcOperands()
	for _, c := range ops {
		a, typ, err := encode(c.typ, c.a)
		if err != nil {
			t.Fatal(err)
		}
		b, _, err := encode(c.typ, c.b)
		if err != nil {
			t.Fatal(err)
		}
		op, pre, fn := reduce(c.op, typ)
		a, b = pre(a), pre(b)
		clear(buf)
		binary.BigEndian.PutUint64(buf[0:], a)
		binary.BigEndian.PutUint64(buf[8:], 0) // id of operand 0
		binary.BigEndian.PutUint64(buf[16:], b)
		binary.BigEndian.PutUint64(buf[24:], 1) // id of operand 1
		for i := 32; i < calcPage; i++ {
			buf[i] = byte(i)
		}
		tail := bytes.Clone(buf[16:])
		want := a
		for round := range 5 {
			d.postRecv(qp, d.recvBuf(1, 0, calcPage))
			w := d.send(2, wrOp, verbs.ExpSendSignaled|verbs.ExpSendWithCalc, d.sges(d.mr.Lkey, [2]int{0, 16}, [2]int{16, 16}), 2)
			w.Op.Calc().CalcOp, w.Op.Calc().DataType, w.Op.Calc().DataSize = op, typ, verbs.ExpCalcDataSize64Bit
			wantOp := verbs.ExpWCRecv
			if wrOp == verbs.ExpWRRDMAWriteWithImm {
				w.WR.RDMA().RemoteAddr, w.WR.RDMA().Rkey = d.addr(0), d.mr.Rkey
				w.Ex.SetImmData(uint32(round))
				wantOp = verbs.ExpWCRecvRDMAWithImm
			}
			d.postSend(qp, w)
			got := sum(d.await(cq, 2))
			// The receive and the send, whichever completed first: the
			// verbs order only one queue's completions (CompletionJitter
			// reverses these two).
			slices.SortFunc(got, func(a, b wcSum) int { return cmp.Compare(a.ID, b.ID) })
			q := qp.QPNum
			sendOp := verbs.ExpWCSend
			if wrOp == verbs.ExpWRRDMAWriteWithImm {
				sendOp = verbs.ExpWCRDMAWrite
			}
			got[1].Len = 0 // a send's byte_len is not defined (valid for receives only)
			if want := []wcSum{{1, verbs.WCSuccess, wantOp, 8, q}, {2, verbs.WCSuccess, sendOp, 0, q}}; !equalSums(got, want) {
				t.Fatalf("%v round %d: %+v, want %+v", c, round, got, want)
			}
			want = fn(want, b)
			if got := binary.BigEndian.Uint64(buf[0:]); got != want {
				t.Fatalf("%v round %d: result %#x, want %#x", c, round, got, want)
			}
			if !bytes.Equal(buf[16:], tail) {
				t.Fatalf("%v round %d: bytes from 16 on were written", c, round)
			}
		}
	}
	if len(ops) < 100 {
		t.Fatalf("only %d operand pairs", len(ops))
	}
}

// calcMaxloc: MAXLOC works on UINT, as on mlx4 and mlx5: the largest
// value with its id (the smallest id among equals), 16 bytes, big-endian.
func calcMaxloc(n *node) {
	t, d := n.t, n.d
	qp, cq := calcWorker(d)
	const in = 2 * calcPage
	vals := []uint64{5, 1<<63 + 7, 0xff00, 1<<63 + 7}
	ids := []uint64{40, 31, 22, 13}
	for i := range vals {
		binary.BigEndian.PutUint64(d.buf[in+16*i:], vals[i])
		binary.BigEndian.PutUint64(d.buf[in+16*i+8:], ids[i])
	}
	d.postRecv(qp, d.recvBuf(1, 0, calcPage))
	w := d.send(2, verbs.ExpWRSend, verbs.ExpSendSignaled|verbs.ExpSendWithCalc,
		d.sges(d.mr.Lkey, [2]int{in, 16}, [2]int{in + 16, 16}, [2]int{in + 32, 16}, [2]int{in + 48, 16}), 4)
	w.Op.Calc().CalcOp, w.Op.Calc().DataType, w.Op.Calc().DataSize = verbs.ExpCalcOpMaxloc, verbs.ExpCalcDataTypeUint, verbs.ExpCalcDataSize64Bit
	d.postSend(qp, w)
	got := sum(d.await(cq, 2))
	slices.SortFunc(got, func(a, b wcSum) int { return cmp.Compare(a.ID, b.ID) }) // either may complete first
	if got[0].ID != 1 || got[0].Status != verbs.WCSuccess || got[0].Len != 16 || got[1].Status != verbs.WCSuccess {
		t.Fatalf("MAXLOC: %+v, want a 16-byte receive and the send", got)
	}
	if v, id := binary.BigEndian.Uint64(d.buf[0:]), binary.BigEndian.Uint64(d.buf[8:]); v != 1<<63+7 || id != 13 {
		t.Fatalf("MAXLOC: value %#x id %d, want %#x and 13", v, id, uint64(1<<63+7))
	}
}

// calcRefusals: what calc refuses at post time, with EINVAL and bad_wr
// naming the WR; nothing refused ever completes.
func calcRefusals(n *node) {
	t, d := n.t, n.d
	qp, cq := calcWorker(d)
	mk := func(op verbs.ExpCalcOp, typ verbs.ExpCalcDataType, size verbs.ExpCalcDataSize, wrOp verbs.ExpWROpcode, lens ...int) *verbs.ExpSendWR {
		var rs [][2]int
		for i, n := range lens {
			rs = append(rs, [2]int{32 * i, n})
		}
		w := d.send(9, wrOp, verbs.ExpSendSignaled|verbs.ExpSendWithCalc, d.sges(d.mr.Lkey, rs...), len(rs))
		w.Op.Calc().CalcOp, w.Op.Calc().DataType, w.Op.Calc().DataSize = op, typ, size
		return w
	}
	add, u, s64 := verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint, verbs.ExpCalcDataSize64Bit
	for _, c := range []struct {
		name string
		w    *verbs.ExpSendWR
	}{
		{"8-byte operand", mk(add, u, s64, verbs.ExpWRSend, 8, 16)},
		{"no operand", mk(add, u, s64, verbs.ExpWRSend)},
		{"maxloc on int", mk(verbs.ExpCalcOpMaxloc, verbs.ExpCalcDataTypeInt, s64, verbs.ExpWRSend, 16, 16)},
		{"maxloc on float", mk(verbs.ExpCalcOpMaxloc, verbs.ExpCalcDataTypeFloat, s64, verbs.ExpWRSend, 16, 16)},
		{"unknown op (no PROD exists)", mk(verbs.ExpCalcOpNumber, u, s64, verbs.ExpWRSend, 16)},
		{"unknown type", mk(add, verbs.ExpCalcDataTypeNumber, s64, verbs.ExpWRSend, 16)},
		{"unknown size", mk(add, u, verbs.ExpCalcDataSizeNumber, verbs.ExpWRSend, 16)},
		{"on rdma write", mk(add, u, s64, verbs.ExpWRRDMAWrite, 16)},
		{"on rdma read", mk(add, u, s64, verbs.ExpWRRDMARead, 16)},
		{"on send with imm", mk(add, u, s64, verbs.ExpWRSendWithImm, 16)},
	} {
		if bad, err := d.post(qp, c.w); !isCallErrno(err, "ibv_exp_post_send", syscall.EINVAL) || bad != c.w {
			t.Errorf("%s: %v (bad_wr %p, the WR %p), want EINVAL naming it", c.name, err, bad, c.w)
		}
	}
	// A refused SEND that was posted all the same would find this receive.
	d.postRecv(qp, d.recvBuf(1, 0, calcPage))
	if got := d.quiet(cq); len(got) != 0 {
		t.Fatalf("refused calc WRs completed: %+v", sum(got))
	}
}
