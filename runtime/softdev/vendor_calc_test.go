//go:build linux && cgo

package softdev

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/verbsexp/verbsexp/generated/verbs"
)

// The calc tests of the vendor's suite: tc6 (tc_verbs_post_send_calc,
// a SEND with IBV_EXP_SEND_WITH_CALC) and tc7
// (tc_verbs_post_send_rdma_calc, an RDMA_WRITE_WITH_IMM with it). Each
// vendor test takes one of the fixture's operations and runs a list of
// operand pairs through the fixture's calc ping-pong, in which the
// worker, connected to itself, reduces the two 16-byte operands at the
// start of the registered page and delivers the result over the first
// one, five times; each result is unpacked and checked against the host's
// own computation. These tests do the same with the same host-side
// representation (operands widened to 64 bits, big-endian, logical
// operations turned into bitwise ones on 0/1) and the same checks.
//
// The fixture itself refuses, before posting anything, the combinations
// it does not support (EPERM, which the vendor counts as a pass): PROD;
// the bitwise and logical operations on floats; MIN, MAX, MINLOC and
// MAXLOC (signed comparisons it could not express); 16-bit types. So the
// vendor's MAX, MIN and PROD tests (ti_8, ti_9, ti_10) never reach the
// device; here they assert exactly that.

// vdPPOp is the fixture's operation (enum pp_wr_calc_op).
type vdPPOp int

const (
	vdLXOR vdPPOp = iota
	vdBXOR
	vdLOR
	vdBOR
	vdLAND
	vdBAND
	vdADD
	vdMAX
	vdMIN
	vdMAXLOC
	vdMINLOC
	vdPROD
)

var vdPPOpNames = [...]string{"LXOR", "BXOR", "LOR", "BOR", "LAND", "BAND", "ADD", "MAX", "MIN", "MAXLOC", "MINLOC", "PROD"}

func (o vdPPOp) String() string { return vdPPOpNames[o] }

// vdPPType is the fixture's data type (enum pp_wr_data_type).
type vdPPType int

const (
	vdINT8 vdPPType = iota
	vdINT16
	vdINT32
	vdINT64
	vdUINT8
	vdUINT16
	vdUINT32
	vdUINT64
	vdFLOAT32
	vdFLOAT64
)

var vdPPTypeNames = [...]string{"INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64", "FLOAT32", "FLOAT64"}

func (t vdPPType) String() string { return vdPPTypeNames[t] }

// width is the host size of a value of the type, in bytes.
func (t vdPPType) width() int {
	switch t {
	case vdINT8, vdUINT8:
		return 1
	case vdINT16, vdUINT16:
		return 2
	case vdINT32, vdUINT32, vdFLOAT32:
		return 4
	}
	return 8
}

func (t vdPPType) signed() bool { return t <= vdINT64 }
func (t vdPPType) float() bool  { return t == vdFLOAT32 || t == vdFLOAT64 }

// vdOperands are the operand pairs every vendor calc test draws from,
// per data type: the union of the tests' lists (each test runs nearly
// the same list with its own operation), written as the strings the
// fixture parses with strtol, strtoll and strtof.
var vdOperands = []struct {
	typ   vdPPType
	pairs [][2]string
}{
	{vdINT8, [][2]string{{"0", "0"}, {"0", "5"}, {"5", "0"}, {"0", "-5"}, {"-5", "0"}, {"-5", "-5"},
		{"3", "5"}, {"-3", "5"}, {"3", "-5"}, {"-3", "-5"}, {"0x07", "0xF2"}}},
	{vdUINT8, [][2]string{{"0", "0x80"}, {"0x80", "0"}, {"0xF0", "0x01"}, {"0xE0", "0xF0"}}},
	{vdINT16, [][2]string{{"0x8007", "0x07FF"}}},
	{vdINT32, [][2]string{{"1234567", "54321"}}},
	{vdINT64, [][2]string{{"0", "0"}, {"1234567890", "0"}, {"-1234567890", "0"}, {"1234567890", "54321"},
		{"1234567890", "1234567890"}, {"-1234567890", "1234567890"}, {"-1234567890", "-1234567890"}}},
	{vdUINT64, [][2]string{{"0x00", "0x8000000000000000"}, {"0x8000000000000000", "0x00"},
		{"0xF000000000000000", "0x01"}, {"0xE000000000000000", "0xF000000000000000"}}},
	{vdFLOAT32, [][2]string{{"12345.0987", "1234.567"}, {"12345.987", "1234.567"}}},
	{vdFLOAT64, [][2]string{{"0.0", "0.0"}, {"12345678.9087", "12345.5678"}, {"12345678.9087", "12345678.9087"},
		{"-12345678.9087", "12345678.9087"}, {"-12345678.9087", "-12345678.9087"}}},
}

// vdCalcState is the calc part of the fixture's context: what
// __create_data_for_calc prepared for the next ping-pong.
type vdCalcState struct {
	op       vdPPOp
	typ      vdPPType
	calcOp   verbs.ExpCalcOp
	dataType verbs.ExpCalcDataType
	gather   *verbs.SGE // two 16-byte entries over net_buf
	nGather  int
}

// errVDPerm is the fixture's "not supported by the unit test" answer.
var errVDPerm = errors.New("EPERM: the fixture does not support this operation")

// vdSupported is the fixture's __query_calc_cap.
func vdSupported(op vdPPOp, typ vdPPType) bool {
	switch op {
	case vdPROD, vdMIN, vdMINLOC, vdMAX, vdMAXLOC:
		return false
	case vdLXOR, vdBXOR, vdLOR, vdBOR, vdLAND, vdBAND:
		return !typ.float()
	}
	return true
}

// vdStrtoll parses as strtol / strtoll do on LP64: base from the prefix,
// saturating at the int64 limits.
func vdStrtoll(s string) int64 {
	v, err := strconv.ParseInt(strings.TrimSpace(s), 0, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		panic(err) // the table above is well formed
	}
	return v
}

func vdStrtof(s string) float32 {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 32)
	if err != nil {
		panic(err)
	}
	return float32(f)
}

// createData is __create_data_for_calc for one pair: each operand is
// stored in the host buffer in its own type (at 16-byte strides), then
// packed into net_buf as the device takes it (widened to 64 bits, 0/1
// for the logical operations, big-endian), and a gather list of one
// 16-byte entry per operand is built. errVDPerm for what the fixture
// refuses.
func (v *vd) createData(pair [2]string, op vdPPOp, typ vdPPType) error {
	c := &v.calc
	*c = vdCalcState{op: op, typ: typ}
	if !vdSupported(op, typ) {
		return errVDPerm
	}
	for i, tok := range pair {
		h := v.host[16*i:]
		switch typ {
		case vdINT8, vdUINT8:
			h[0] = byte(vdStrtoll(tok))
		case vdINT16, vdUINT16:
			return errVDPerm
		case vdINT32, vdUINT32:
			binary.NativeEndian.PutUint32(h, uint32(vdStrtoll(tok)))
		case vdINT64, vdUINT64:
			binary.NativeEndian.PutUint64(h, uint64(vdStrtoll(tok)))
		case vdFLOAT32:
			binary.NativeEndian.PutUint32(h, math.Float32bits(vdStrtof(tok)))
		case vdFLOAT64:
			binary.NativeEndian.PutUint64(h, math.Float64bits(float64(vdStrtof(tok)))) // the fixture uses strtof here too
		}
		// Widen to the device's 64-bit representation.
		var net uint64
		switch typ {
		case vdINT8, vdUINT8:
			net = uint64(h[0])
		case vdINT32, vdUINT32:
			net = uint64(binary.NativeEndian.Uint32(h))
		case vdINT64, vdUINT64, vdFLOAT64:
			net = binary.NativeEndian.Uint64(h)
		case vdFLOAT32:
			net = math.Float64bits(float64(math.Float32frombits(binary.NativeEndian.Uint32(h))))
		}
		if op == vdLXOR || op == vdLOR || op == vdLAND {
			if net != 0 {
				net = 1
			}
		}
		binary.BigEndian.PutUint64(v.net[16*i:], net)
	}
	switch op {
	case vdLXOR, vdBXOR:
		c.calcOp = verbs.ExpCalcOpBxor
	case vdLOR, vdBOR:
		c.calcOp = verbs.ExpCalcOpBor
	case vdLAND, vdBAND:
		c.calcOp = verbs.ExpCalcOpBand
	case vdADD:
		c.calcOp = verbs.ExpCalcOpAdd
	}
	switch {
	case typ.float():
		c.dataType = verbs.ExpCalcDataTypeFloat
	case typ.signed():
		c.dataType = verbs.ExpCalcDataTypeInt
	default:
		c.dataType = verbs.ExpCalcDataTypeUint
	}
	g := vdCN[verbs.SGE](v, len(pair))
	for i := range g {
		g[i] = verbs.SGE{Addr: v.addr(16 * i), Length: 16, Lkey: v.mr.Lkey}
	}
	c.gather, c.nGather = &g[0], len(g)
	return nil
}

// ppPostSend is the ping-pong's post: the calc WR on the worker, as a
// SEND (tc6) or an RDMA_WRITE_WITH_IMM to the start of net_buf (tc7).
func (v *vd) ppPostSend(write bool) error {
	c := &v.calc
	wr := vdC[verbs.ExpSendWR](v)
	wr.WRID = vdSendWRID
	wr.ExpOpcode = verbs.ExpWRSend
	wr.ExpSendFlags = uint64(verbs.ExpSendSignaled | verbs.ExpSendWithCalc)
	wr.SGList, wr.NumSGE = c.gather, int32(c.nGather)
	calc := wr.Op.Calc()
	calc.CalcOp, calc.DataType, calc.DataSize = c.calcOp, c.dataType, verbs.ExpCalcDataSize64Bit
	if write {
		wr.ExpOpcode = verbs.ExpWRRDMAWriteWithImm
		wr.WR.RDMA().RemoteAddr, wr.WR.RDMA().Rkey = v.addr(0), v.mr.Rkey
	}
	return verbs.ExpPostSend(v.qp, wr, vdC[*verbs.ExpSendWR](v))
}

// unpack is __unpack_data_from_calc: the big-endian result at net_buf[0]
// into the host buffer's first value, in the host type.
func (v *vd) unpack() {
	r := binary.BigEndian.Uint64(v.net[:8])
	h := v.host[:]
	switch v.calc.typ {
	case vdINT8, vdUINT8:
		h[0] = byte(r)
	case vdINT32, vdUINT32:
		binary.NativeEndian.PutUint32(h, uint32(r))
	case vdINT64, vdUINT64, vdFLOAT64:
		binary.NativeEndian.PutUint64(h, r)
	case vdFLOAT32:
		binary.NativeEndian.PutUint32(h, math.Float32bits(float32(math.Float64frombits(r))))
	}
}

// verify is the fixture's calc_verify: the host's own op(last result,
// second operand), in the host type, against what the device delivered.
// Integers must match exactly (C's truncation to the type), floats
// within 0.001 (only ADD is supported on them).
func (v *vd) verify() error {
	typ, op := v.calc.typ, v.calc.op
	if typ.float() {
		if typ == vdFLOAT32 {
			a := math.Float32frombits(binary.NativeEndian.Uint32(v.last[:]))
			b := math.Float32frombits(binary.NativeEndian.Uint32(v.host[16:]))
			res := math.Float32frombits(binary.NativeEndian.Uint32(v.host[:]))
			if d := math.Abs(float64((a + b) - res)); !(d < 0.001) {
				return fmt.Errorf("%v + %v = %v, device gave %v", a, b, a+b, res)
			}
			return nil
		}
		a := math.Float64frombits(binary.NativeEndian.Uint64(v.last[:]))
		b := math.Float64frombits(binary.NativeEndian.Uint64(v.host[16:]))
		res := math.Float64frombits(binary.NativeEndian.Uint64(v.host[:]))
		if d := math.Abs((a + b) - res); !(d < 0.001) {
			return fmt.Errorf("%v + %v = %v, device gave %v", a, b, a+b, res)
		}
		return nil
	}
	w := typ.width()
	mask := ^uint64(0) >> (64 - 8*w)
	get := func(b []byte) uint64 { // a value as the host stored it
		switch w {
		case 1:
			return uint64(b[0])
		case 4:
			return uint64(binary.NativeEndian.Uint32(b))
		}
		return binary.NativeEndian.Uint64(b)
	}
	a, b, res := get(v.last[:]), get(v.host[16:]), get(v.host[:])
	truth := func(c bool) uint64 {
		if c {
			return 1
		}
		return 0
	}
	var want uint64
	switch op {
	case vdLXOR:
		want = truth((a != 0) != (b != 0))
	case vdBXOR:
		want = a ^ b
	case vdLOR:
		want = truth(a != 0 || b != 0)
	case vdBOR:
		want = a | b
	case vdLAND:
		want = truth(a != 0 && b != 0)
	case vdBAND:
		want = a & b
	case vdADD:
		want = a + b
	}
	if want&mask != res {
		return fmt.Errorf("%v(%#x, %#x) = %#x, device gave %#x", op, a, b, want&mask, res)
	}
	return nil
}

const vdIters = 5 // ITER_NUM: round trips per operand pair

// ppTest is the fixture's calc ping-pong: post the calc WR; whenever
// both its send and receive completions are in (polled one at a time
// from each CQ), unpack and check the result, which becomes the first
// operand of the next round; five rounds; then repost the receives used.
func (v *vd) ppTest(write bool) error {
	copy(v.last[:], v.host[:8])
	var second [16]byte // bytes 16..31 of net_buf: the device never writes there
	copy(second[:], v.net[16:32])
	if vdIters >= v.qpRx {
		return fmt.Errorf("%d rounds need more than %d receives", vdIters, v.qpRx)
	}
	wc := vdCN[verbs.WC](v, 2)
	pending := vdRecvWRID
	if err := v.ppPostSend(write); err != nil {
		return fmt.Errorf("could not post the calc WR: %w", err)
	}
	pending |= vdSendWRID
	scnt, rcnt := 0, 0
	for rcnt < vdIters || scnt < vdIters {
		ne := 0
		for try := 0; ne < 1 && try < 100; try++ { // the vendor polls for up to 10 s
			n, err := verbs.PollCQ(v.scq, wc[:1])
			if err != nil {
				return err
			}
			m, err := verbs.PollCQ(v.rcq, wc[n:n+1])
			if err != nil {
				return err
			}
			ne = n + m
		}
		if ne < 1 {
			return fmt.Errorf("no completion after %d sends and %d receives", scnt, rcnt)
		}
		for _, c := range wc[:ne] {
			if c.Status != verbs.WCSuccess {
				return fmt.Errorf("wr_id %#x completed with %v", c.WRID, c.Status)
			}
			switch int(c.WRID) {
			case vdSendWRID:
				scnt++
			case vdRecvWRID:
				if write && c.Opcode != verbs.WCRecvRDMAWithImm {
					return fmt.Errorf("the write's receive completed as %v", c.Opcode)
				}
				if got := v.net[16:32]; string(got) != string(second[:]) {
					return fmt.Errorf("round %d: the second operand's bytes changed: % x, were % x", rcnt+1, got, second)
				}
				v.unpack()
				if err := v.verify(); err != nil {
					return fmt.Errorf("round %d: %w", rcnt+1, err)
				}
				copy(v.last[:], v.host[:8])
				rcnt++
			default:
				return fmt.Errorf("completion for unknown wr_id %#x", c.WRID)
			}
			pending &^= int(c.WRID)
			if scnt < vdIters && pending == 0 {
				if err := v.ppPostSend(write); err != nil {
					return fmt.Errorf("could not post the calc WR: %w", err)
				}
				pending = vdRecvWRID | vdSendWRID
			}
		}
	}
	v.postRead(vdIters)
	return nil
}

// vdCalcRun is one vendor calc test: the operation run over every pair of
// every type; it returns how many pairs reached the device.
func vdCalcRun(t *testing.T, op vdPPOp, write bool) int {
	v := newVD(t)
	v.initTest(vdWith(verbs.ExpQPCreateCrossChannel))
	ran := 0
	for _, g := range vdOperands {
		for _, p := range g.pairs {
			err := v.createData(p, op, g.typ)
			if errors.Is(err, errVDPerm) {
				continue // the vendor counts it a pass
			}
			if err == nil {
				err = v.ppTest(write)
				ran++
			}
			if err != nil {
				t.Errorf("%v %v %q: %v", op, g.typ, p, err)
			}
		}
	}
	// Every round was one send and one receive, and every receive used
	// was posted again.
	if _, s, r, _ := v.d.QPStats(v.qp); s.Posted != uint64(ran*vdIters) || s.Done != s.Posted ||
		r.Posted-r.Done != uint64(v.qpRx) {
		t.Errorf("worker queues after %d ping-pongs: send %+v receive %+v", ran, s, r)
	}
	return ran
}

// The calc tests whose operation the fixture supports must have reached
// the device for every integer type and, for ADD, the floats.
func vdCalcMustRun(t *testing.T, op vdPPOp, write bool) {
	if n := vdCalcRun(t, op, write); n == 0 {
		t.Fatalf("no %v pair reached the device", op)
	}
}

// vdCalcNeverRuns is for MAX, MIN and PROD: the fixture refuses every
// pair before posting, so the device sees nothing.
func vdCalcNeverRuns(t *testing.T, op vdPPOp, write bool) {
	if n := vdCalcRun(t, op, write); n != 0 {
		t.Fatalf("%d %v pairs were posted; the fixture refuses them all", n, op)
	}
}

// tc6 ti_1..ti_10: calc on SEND.
func TestVendorTC6CalcSendTI1LXOR(t *testing.T) { vdCalcMustRun(t, vdLXOR, false) }
func TestVendorTC6CalcSendTI2BXOR(t *testing.T) { vdCalcMustRun(t, vdBXOR, false) }
func TestVendorTC6CalcSendTI3LOR(t *testing.T)  { vdCalcMustRun(t, vdLOR, false) }
func TestVendorTC6CalcSendTI4BOR(t *testing.T)  { vdCalcMustRun(t, vdBOR, false) }
func TestVendorTC6CalcSendTI5LAND(t *testing.T) { vdCalcMustRun(t, vdLAND, false) }
func TestVendorTC6CalcSendTI6BAND(t *testing.T) { vdCalcMustRun(t, vdBAND, false) }
func TestVendorTC6CalcSendTI7ADD(t *testing.T)  { vdCalcMustRun(t, vdADD, false) }
func TestVendorTC6CalcSendTI8MAX(t *testing.T)  { vdCalcNeverRuns(t, vdMAX, false) }
func TestVendorTC6CalcSendTI9MIN(t *testing.T)  { vdCalcNeverRuns(t, vdMIN, false) }
func TestVendorTC6CalcSendTI10PROD(t *testing.T) {
	vdCalcNeverRuns(t, vdPROD, false)
}

// tc7 ti_1..ti_10: calc on RDMA_WRITE_WITH_IMM to the start of the page.
func TestVendorTC7CalcWriteImmTI1LXOR(t *testing.T) { vdCalcMustRun(t, vdLXOR, true) }
func TestVendorTC7CalcWriteImmTI2BXOR(t *testing.T) { vdCalcMustRun(t, vdBXOR, true) }
func TestVendorTC7CalcWriteImmTI3LOR(t *testing.T)  { vdCalcMustRun(t, vdLOR, true) }
func TestVendorTC7CalcWriteImmTI4BOR(t *testing.T)  { vdCalcMustRun(t, vdBOR, true) }
func TestVendorTC7CalcWriteImmTI5LAND(t *testing.T) { vdCalcMustRun(t, vdLAND, true) }
func TestVendorTC7CalcWriteImmTI6BAND(t *testing.T) { vdCalcMustRun(t, vdBAND, true) }
func TestVendorTC7CalcWriteImmTI7ADD(t *testing.T)  { vdCalcMustRun(t, vdADD, true) }
func TestVendorTC7CalcWriteImmTI8MAX(t *testing.T)  { vdCalcNeverRuns(t, vdMAX, true) }
func TestVendorTC7CalcWriteImmTI9MIN(t *testing.T)  { vdCalcNeverRuns(t, vdMIN, true) }
func TestVendorTC7CalcWriteImmTI10PROD(t *testing.T) {
	vdCalcNeverRuns(t, vdPROD, true)
}

// Past the fixture's own refusals: what the device does with the
// combinations the fixture keeps away from it. MAX and MIN reach an HCA
// as MAXLOC (MIN on negated values), which mlx4 and mlx5 take on UINT
// only; on INT or FLOAT the post is refused at once, and the calc API
// has no PROD to ask for.
func TestVendorCalcRefusedCombinations(t *testing.T) {
	v := newVD(t)
	v.initTest(vdWith(verbs.ExpQPCreateCrossChannel))
	if err := v.createData([2]string{"3", "5"}, vdADD, vdINT64); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		op  verbs.ExpCalcOp
		typ verbs.ExpCalcDataType
		ok  bool
	}{
		{verbs.ExpCalcOpMaxloc, verbs.ExpCalcDataTypeInt, false},
		{verbs.ExpCalcOpMaxloc, verbs.ExpCalcDataTypeFloat, false},
		{verbs.ExpCalcOpNumber, verbs.ExpCalcDataTypeInt, false}, // no opcode PROD exists at all
		{verbs.ExpCalcOpMaxloc, verbs.ExpCalcDataTypeUint, true},
	} {
		v.calc.calcOp, v.calc.dataType = c.op, c.typ
		err := v.ppPostSend(false)
		if c.ok != (err == nil) || (!c.ok && !errors.Is(err, syscall.EINVAL)) {
			t.Errorf("calc %v on %v: %v", c.op, c.typ, err)
		}
	}
}
