//go:build linux && cgo

package softdev

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"syscall"
	"testing"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/device"
)

// Rule 13: the device reports its calc capabilities: INT, UINT and FLOAT
// data, 64-bit elements, ADD, BAND, BXOR and BOR for every type, as bit
// masks of 1 << value.
func TestRule13CalcCapabilities(t *testing.T) {
	f := newFixture(t)
	attr := alloc[verbs.ExpDeviceAttr](f)
	attr.CompMask = uint32(verbs.ExpDeviceAttrReserved - 1) // everything
	if err := verbs.ExpQueryDevice(f.d.Context(), attr); err != nil {
		t.Fatal(err)
	}
	if attr.ExpDeviceCapFlags&uint64(verbs.ExpDeviceCrossChannel) == 0 || attr.CompMask&uint32(verbs.ExpDeviceAttrCalcCap) == 0 {
		t.Fatalf("cap flags %#x, comp_mask %#x: want cross-channel and the calc capabilities", attr.ExpDeviceCapFlags, attr.CompMask)
	}
	bit := func(v uint32) uint64 { return 1 << v }
	ops := bit(uint32(verbs.ExpCalcOpAdd)) | bit(uint32(verbs.ExpCalcOpBand)) | bit(uint32(verbs.ExpCalcOpBxor)) | bit(uint32(verbs.ExpCalcOpBor))
	c := attr.CalcCap
	if c.DataTypes != bit(uint32(verbs.ExpCalcDataTypeInt))|bit(uint32(verbs.ExpCalcDataTypeUint))|bit(uint32(verbs.ExpCalcDataTypeFloat)) ||
		c.DataSizes != bit(uint32(verbs.ExpCalcDataSize64Bit)) || c.IntOps != ops || c.UintOps != ops || c.FpOps != ops {
		t.Fatalf("calc caps %+v, want types INT|UINT|FLOAT, size 64-bit, ops %#x for each", c, ops)
	}
	if attr.MaxQPWR != int32(DefaultLimits.MaxQPWR) || attr.MaxCQE != int32(DefaultLimits.MaxCQE) {
		t.Fatalf("limits max_qp_wr %d max_cqe %d", attr.MaxQPWR, attr.MaxCQE)
	}
}

// calcCase is one of the vendor's operand pairs: a and b in the C type
// named, reduced with op.
type calcCase struct {
	op   string // LXOR, BXOR, LOR, BOR, LAND, BAND, ADD
	typ  string // int8 … uint64, float32, float64
	a, b string
}

// calcCases re-express the vendor's table: each operation over signed,
// unsigned and floating-point operands of every width, with signs, zero
// and the top bit.
func calcCases() []calcCase {
	pairs := map[string][][2]string{
		"int8":    {{"0", "0"}, {"0", "5"}, {"5", "0"}, {"0", "-5"}, {"-5", "0"}, {"-5", "-5"}, {"3", "5"}, {"-3", "5"}, {"3", "-5"}, {"-3", "-5"}},
		"uint8":   {{"0", "0x80"}, {"0x80", "0"}, {"0xF0", "0x01"}, {"0xE0", "0xF0"}},
		"int32":   {{"1234567", "54321"}},
		"int64":   {{"0", "0"}, {"1234567890", "0"}, {"-1234567890", "0"}, {"1234567890", "54321"}, {"1234567890", "1234567890"}, {"-1234567890", "1234567890"}, {"-1234567890", "-1234567890"}},
		"uint64":  {{"0x00", "0x8000000000000000"}, {"0x8000000000000000", "0x00"}, {"0xF000000000000000", "0x01"}, {"0xE000000000000000", "0xF000000000000000"}},
		"float32": {{"12345.0987", "1234.567"}},
		"float64": {{"0.0", "0.0"}, {"12345678.9087", "12345.5678"}, {"12345678.9087", "12345678.9087"}, {"-12345678.9087", "12345678.9087"}},
	}
	var out []calcCase
	for _, op := range []string{"LXOR", "BXOR", "LOR", "BOR", "LAND", "BAND", "ADD"} {
		for _, typ := range []string{"int8", "uint8", "int32", "int64", "uint64", "float32", "float64"} {
			if typ[0] == 'f' && op != "ADD" {
				continue // the vendor leaves bit operations on floats out
			}
			for _, p := range pairs[typ] {
				out = append(out, calcCase{op, typ, p[0], p[1]})
			}
		}
	}
	return out
}

// encode turns a C literal of the type into the 64-bit word the device
// works on (integers widened with their sign, floats as float64) and the
// calc data type.
func encode(t *testing.T, typ, lit string) (uint64, verbs.ExpCalcDataType) {
	switch typ {
	case "float32", "float64":
		var f float64
		if _, err := fmt.Sscan(lit, &f); err != nil {
			t.Fatal(err)
		}
		if typ == "float32" {
			f = float64(float32(f))
		}
		return math.Float64bits(f), verbs.ExpCalcDataTypeFloat
	}
	var v int64
	if _, err := fmt.Sscanf(lit, "%v", &v); err != nil {
		var u uint64
		if _, err := fmt.Sscanf(lit, "%v", &u); err != nil {
			t.Fatalf("%s %q: %v", typ, lit, err)
		}
		v = int64(u)
	}
	switch typ {
	case "int8":
		return uint64(int64(int8(v))), verbs.ExpCalcDataTypeInt
	case "uint8":
		return uint64(uint8(v)), verbs.ExpCalcDataTypeUint
	case "int32":
		return uint64(int64(int32(v))), verbs.ExpCalcDataTypeInt
	case "int64":
		return uint64(v), verbs.ExpCalcDataTypeInt
	}
	return uint64(v), verbs.ExpCalcDataTypeUint
}

// reduce is the Go reference: the device's operation (logical ones as
// bitwise on 0/1) and the step the operands go through first.
func reduce(op string, typ verbs.ExpCalcDataType) (verbs.ExpCalcOp, func(uint64) uint64, func(a, b uint64) uint64) {
	id := func(v uint64) uint64 { return v }
	bool01 := func(v uint64) uint64 {
		if v != 0 {
			return 1
		}
		return 0
	}
	switch op {
	case "LXOR", "BXOR":
		pre := map[bool]func(uint64) uint64{true: bool01, false: id}[op[0] == 'L']
		return verbs.ExpCalcOpBxor, pre, func(a, b uint64) uint64 { return a ^ b }
	case "LOR", "BOR":
		pre := map[bool]func(uint64) uint64{true: bool01, false: id}[op[0] == 'L']
		return verbs.ExpCalcOpBor, pre, func(a, b uint64) uint64 { return a | b }
	case "LAND", "BAND":
		pre := map[bool]func(uint64) uint64{true: bool01, false: id}[op[0] == 'L']
		return verbs.ExpCalcOpBand, pre, func(a, b uint64) uint64 { return a & b }
	}
	if typ == verbs.ExpCalcDataTypeFloat {
		return verbs.ExpCalcOpAdd, id, func(a, b uint64) uint64 {
			return math.Float64bits(math.Float64frombits(a) + math.Float64frombits(b))
		}
	}
	return verbs.ExpCalcOpAdd, id, func(a, b uint64) uint64 { return a + b }
}

// calcRounds runs the vendor's calc ping-pong on the rig's worker (cross
// channel, connected to itself): the two operands are 16-byte gather
// entries at offsets 0 and 16 of the page (a big-endian value, then an
// id); the result arrives big-endian at offset 0 (a receive of the whole
// page for SEND, an RDMA write under the rkey with an immediate for
// RDMA_WRITE_WITH_IMM) and is the first operand of the next of five
// rounds; bytes 16 and on are never written.
func calcRounds(t *testing.T, r *rig, wrOp verbs.ExpWROpcode, c calcCase) {
	t.Helper()
	a, typ := encode(t, c.typ, c.a)
	b, _ := encode(t, c.typ, c.b)
	op, pre, fn := reduce(c.op, typ)
	a, b = pre(a), pre(b)
	clear(r.buf[:page])
	binary.BigEndian.PutUint64(r.buf[0:], a)
	binary.BigEndian.PutUint64(r.buf[8:], 0) // id of operand 0
	binary.BigEndian.PutUint64(r.buf[16:], b)
	binary.BigEndian.PutUint64(r.buf[24:], 1) // id of operand 1
	for i := 32; i < page; i++ {
		r.buf[i] = byte(i)
	}
	tail := bytes.Clone(r.buf[16:page])
	want := a
	for round := range 5 {
		w := r.send(sendWRID, wrOp, verbs.ExpSendSignaled|verbs.ExpSendWithCalc, r.sges(r.mr.Lkey, [2]int{0, 16}, [2]int{16, 16}), 2)
		w.Op.Calc().CalcOp, w.Op.Calc().DataType, w.Op.Calc().DataSize = op, typ, verbs.ExpCalcDataSize64Bit
		if wrOp == verbs.ExpWRRDMAWriteWithImm {
			w.WR.RDMA().RemoteAddr, w.WR.RDMA().Rkey = r.addr(0), r.mr.Rkey
			w.Ex.SetImmData(uint32(round))
		}
		r.mustPost(r.qp, w)
		d := r.drain()
		d.expect(t, 1, 1, 0)
		if d.r[0].ID != recvWRID || d.r[0].Len != 8 {
			t.Fatalf("%v round %d: receive %+v, want an 8-byte result", c, round, d.r[0])
		}
		if wrOp == verbs.ExpWRRDMAWriteWithImm && d.r[0].Op != verbs.ExpWCRecvRDMAWithImm {
			t.Fatalf("%v: receive opcode %v", c, d.r[0].Op)
		}
		want = fn(want, b)
		if got := binary.BigEndian.Uint64(r.buf[0:]); got != want {
			t.Fatalf("%v round %d: result %#x, want %#x", c, round, got, want)
		}
		if !bytes.Equal(r.buf[16:page], tail) {
			t.Fatalf("%v round %d: bytes from 16 on were written", c, round)
		}
	}
	r.postRecvs(5) // as many as the rounds took
}

// Rule 13: calc on SEND and on RDMA_WRITE_WITH_IMM, big-endian operands
// and results, over the vendor's operations, types and operands.
func TestRule13Calc(t *testing.T) {
	cases := calcCases()
	for _, wrOp := range []verbs.ExpWROpcode{verbs.ExpWRSend, verbs.ExpWRRDMAWriteWithImm} {
		t.Run(fmt.Sprint(wrOp), func(t *testing.T) {
			r := newRig(t, rigConfig{worker: []device.QPOption{device.CrossChannel()}})
			for _, c := range cases {
				calcRounds(t, r, wrOp, c)
			}
		})
	}
	if len(cases) < 100 {
		t.Fatalf("only %d cases", len(cases))
	}
}

// MAXLOC works on UINT, as on mlx4 and mlx5: the largest value with its
// id (the smallest id among equals), 16 bytes, big-endian.
func TestRule13Maxloc(t *testing.T) {
	r := newRig(t, rigConfig{worker: []device.QPOption{device.CrossChannel()}})
	vals := []uint64{5, 1<<63 + 7, 0xff00, 1<<63 + 7}
	idsIn := []uint64{40, 31, 22, 13}
	for i := range vals {
		binary.BigEndian.PutUint64(r.buf[2*page+16*i:], vals[i])
		binary.BigEndian.PutUint64(r.buf[2*page+16*i+8:], idsIn[i])
	}
	sg := r.sges(r.mr.Lkey, [2]int{2 * page, 16}, [2]int{2*page + 16, 16}, [2]int{2*page + 32, 16}, [2]int{2*page + 48, 16})
	w := r.send(1, verbs.ExpWRSend, verbs.ExpSendSignaled|verbs.ExpSendWithCalc, sg, 4)
	w.Op.Calc().CalcOp, w.Op.Calc().DataType = verbs.ExpCalcOpMaxloc, verbs.ExpCalcDataTypeUint
	r.mustPost(r.qp, w)
	d := r.drain()
	d.expect(t, 1, 1, 0)
	if d.r[0].Len != 16 || binary.BigEndian.Uint64(r.buf[0:]) != 1<<63+7 || binary.BigEndian.Uint64(r.buf[8:]) != 13 {
		t.Fatalf("MAXLOC: %d bytes, value %#x id %d", d.r[0].Len, binary.BigEndian.Uint64(r.buf[0:]), binary.BigEndian.Uint64(r.buf[8:]))
	}
}

// What calc refuses at post time, with EINVAL and bad_wr.
func TestRule13CalcRefusals(t *testing.T) {
	r := newRig(t, rigConfig{worker: []device.QPOption{device.CrossChannel()}, sendWR: 64})
	mk := func(op verbs.ExpCalcOp, typ verbs.ExpCalcDataType, size verbs.ExpCalcDataSize, wrOp verbs.ExpWROpcode, lens ...int) *verbs.ExpSendWR {
		var rs [][2]int
		for i, n := range lens {
			rs = append(rs, [2]int{32 * i, n})
		}
		w := r.send(9, wrOp, verbs.ExpSendWithCalc, r.sges(r.mr.Lkey, rs...), len(rs))
		w.Op.Calc().CalcOp, w.Op.Calc().DataType, w.Op.Calc().DataSize = op, typ, size
		return w
	}
	add, u, s64 := verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint, verbs.ExpCalcDataSize64Bit
	for name, w := range map[string]*verbs.ExpSendWR{
		"8-byte operand":   mk(add, u, s64, verbs.ExpWRSend, 8, 16),
		"no operand":       mk(add, u, s64, verbs.ExpWRSend),
		"maxloc on int":    mk(verbs.ExpCalcOpMaxloc, verbs.ExpCalcDataTypeInt, s64, verbs.ExpWRSend, 16, 16),
		"maxloc on float":  mk(verbs.ExpCalcOpMaxloc, verbs.ExpCalcDataTypeFloat, s64, verbs.ExpWRSend, 16, 16),
		"unknown op":       mk(verbs.ExpCalcOpNumber, u, s64, verbs.ExpWRSend, 16),
		"unknown type":     mk(add, verbs.ExpCalcDataTypeNumber, s64, verbs.ExpWRSend, 16),
		"unknown size":     mk(add, u, verbs.ExpCalcDataSizeNumber, verbs.ExpWRSend, 16),
		"on rdma write":    mk(add, u, s64, verbs.ExpWRRDMAWrite, 16),
		"on rdma read":     mk(add, u, s64, verbs.ExpWRRDMARead, 16),
		"on send with imm": mk(add, u, s64, verbs.ExpWRSendWithImm, 16),
	} {
		if bad, err := r.post(r.qp, w); !isErrno(err, syscall.EINVAL) || bad != w {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, s, _, _ := r.d.QPStats(r.qp); s.Posted != 0 {
		t.Fatalf("refused calc WRs were posted: %+v", s)
	}
}

// A single operand is its own reduction (float, big-endian).
func TestCalcSingleOperand(t *testing.T) {
	r := newRig(t, rigConfig{worker: []device.QPOption{device.CrossChannel()}})
	binary.BigEndian.PutUint64(r.buf[page:], math.Float64bits(2.5))
	w := r.send(2, verbs.ExpWRSend, verbs.ExpSendWithCalc, r.sges(r.mr.Lkey, [2]int{page, 16}), 1)
	w.Op.Calc().CalcOp, w.Op.Calc().DataType = verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeFloat
	r.mustPost(r.qp, w)
	r.drain().expect(t, 0, 1, 0)
	if got := math.Float64frombits(binary.BigEndian.Uint64(r.buf[0:])); got != 2.5 {
		t.Fatalf("got %v", got)
	}
}
