//go:build linux && cgo

package main

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/coll"
	"github.com/verbsexp/verbsexp/runtime/device"
	"github.com/verbsexp/verbsexp/runtime/lease"
)

// TestHelp: -h says what the program does and lists the vendor's flags
// under both names, and exits 0.
func TestHelp(t *testing.T) {
	var out, errs strings.Builder
	if code := ccpingpong([]string{"-h"}, &out, &errs); code != 0 || errs.Len() != 0 {
		t.Fatalf("-h: exit %d, stderr %q", code, errs.String())
	}
	for _, w := range []string{"ccpingpong: a ping-pong of SEND WITH_CALC messages between two processes",
		"-p, --port=PORT", "-c, --calc=OP", "-t, --op_type=TYPE", "-o, --operands=O1,O2,...", "-w, --poll_mqe",
		"-V, --verify", "-r, --rx-depth=DEPTH", "--addr=IP", "connect to the server at HOST"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("-h lacks %q:\n%s", w, out.String())
		}
	}
}

// TestBadFlags: every bad command line exits 2 before opening anything,
// naming the flag and what to do.
func TestBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-s", "8"}, "-s 8: want 16 to"},
		{[]string{"-m", "1500"}, "-m 1500: want 256, 512, 1024, 2048 or 4096"},
		{[]string{"-p", "0"}, "-p 0: want a TCP port"},
		{[]string{"-n", "0"}, "-n 0: want at least 1"},
		{[]string{"-r", "0"}, "-r 0: want at least 1"},
		{[]string{"-l", "16"}, "-l 16: a service level is 0 to 15"},
		{[]string{"-d", "mlx5_0", "-addr", "127.0.0.2"}, "-addr is the software device's (-d softdev)"},
		{[]string{"-G", "nonsense"}, `-G "nonsense": want a GID`},
		{[]string{"-c", "PROD", "-t", "INT64", "-o", "1"}, "-c PROD: the device has no product"},
		{[]string{"-c", "SUM"}, `-c "SUM": unknown operation; use one of XOR, BXOR`},
		{[]string{"-c", "ADD", "-o", "1"}, "-t: -c ADD needs an operand type"},
		{[]string{"-c", "ADD", "-t", "INT128", "-o", "1"}, `-t "INT128": unknown type`},
		{[]string{"-c", "ADD", "-t", "INT64"}, "-o: -c ADD needs operands"},
		{[]string{"-t", "INT64"}, "-t and -o go with -c"},
		{[]string{"-c", "ADD", "-t", "INT8", "-o", "1,200"}, `-o 1,200: operand 2: "200" is not an INT8 (-128 to 127)`},
		{[]string{"-c", "ADD", "-t", "UINT32", "-o", "-1"}, `"-1" is not a UINT32 (0 to 4294967295)`},
		{[]string{"-c", "MAX", "-t", "FLOAT32", "-o", "1,x"}, `"x" is not a FLOAT32`},
		{[]string{"-c", "ADD", "-t", "INT64", "-o", strings.Repeat("1,", 16) + "1"}, "17 operands, more than the 16 SGEs"},
		{[]string{"-s", "32", "-c", "ADD", "-t", "INT64", "-o", "1,2,3"}, "-s 32: 3 operands take 48 bytes of the buffer; give -s 48"},
		{[]string{"-x"}, "flag provided but not defined: -x"},
		{[]string{"host1", "host2"}, `one server address at most, not "host1 host2"`},
	} {
		var out, errs strings.Builder
		code := ccpingpong(c.args, &out, &errs)
		if code != 2 || !strings.Contains(errs.String(), c.want) || !strings.Contains(errs.String(), "(-h lists the options)") || out.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, out.String(), errs.String(), c.want)
		}
	}
}

// TestRunErrors: what only the device can say ends the run with exit 1
// and names the flag.
func TestRunErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-i", "2"}, "-i 2: "},
		{[]string{"-g", "1"}, "-g 1: "},
		{[]string{"-addr", "192.0.2.200"}, "192.0.2.200 is not an address of this host"},
		{[]string{"-addr", "nowhere"}, `"nowhere" is not a unicast IP address`},
		{[]string{"-r", "40000"}, "-r 40000: more receives than a queue of the device holds (max_qp_wr 32768)"},
		{[]string{"-r", "3000000000"}, "-r 3000000000: more receives"},
	} {
		var out, errs strings.Builder
		if code := ccpingpong(c.args, &out, &errs); code != 1 || !strings.Contains(errs.String(), c.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit 1 and %q", c.args, code, errs.String(), c.want)
		}
	}
}

// TestReduce: the Go reference for each operation, by hand, over the
// wire form of the operands (as the device sees them) and as shown.
func TestReduce(t *testing.T) {
	for _, c := range []struct {
		op, typ  string
		mine     string
		side     uint64
		want     string
		wantBits uint64
	}{
		{"ADD", "INT64", "5,-7,1", 0, "-1", math.MaxUint64},
		{"ADD", "INT32", "2147483647,1", 0, "-2147483648", 1 << 31}, // 64-bit sum, shown narrowed
		{"ADD", "UINT8", "255,2", 0, "1", 257},
		{"ADD", "FLOAT64", "0.5,0.25", 0, "0.75", math.Float64bits(0.75)},
		{"ADD", "FLOAT32", "0.1,0.2", 0, "0.3", math.Float64bits(float64(float32(0.1)) + float64(float32(0.2)))},
		{"BAND", "UINT16", "0xfff0,0x0ff3", 0, "0x0ff0", 0x0ff0},
		{"BOR", "INT64", "4,3", 0, "0x0000000000000007", 7},
		{"BXOR", "UINT32", "6,3", 0, "0x00000005", 5},
		{"XOR", "INT64", "5,0", 0, "1", 1},
		{"LAND", "FLOAT64", "0.5,0", 0, "0", 0},
		{"LOR", "INT32", "0,-3", 0, "1", 1},
		{"MAX", "INT64", "-5,-2,-9", 0, "-2", coll.OrderKey(uint64(1<<64-2), verbs.ExpCalcDataTypeInt)},
		{"MIN", "INT64", "-5,-2,-9", 0, "-9", ^coll.OrderKey(uint64(1<<64-9), verbs.ExpCalcDataTypeInt)},
		{"MAX", "FLOAT64", "-0.5,-3,-0.25", 0, "-0.25", coll.OrderKey(math.Float64bits(-0.25), verbs.ExpCalcDataTypeFloat)},
		{"MIN", "FLOAT32", "1.5,-2.5,3", 0, "-2.5", ^coll.OrderKey(math.Float64bits(-2.5), verbs.ExpCalcDataTypeFloat)},
		{"MAXLOC", "UINT64", "3,9,9", 1, "9 from the client", 9},
		{"MINLOC", "INT16", "3,-4", 0, "-4 from the server", ^coll.OrderKey(uint64(1<<64-4), verbs.ExpCalcDataTypeInt)},
	} {
		op, err := lookupOp(c.op)
		if err != nil {
			t.Fatal(err)
		}
		typ, err := lookupType(c.typ)
		if err != nil {
			t.Fatal(err)
		}
		k := calc{op, typ}
		ops, err := k.parseOperands(c.mine, c.side)
		if err != nil {
			t.Fatal(err)
		}
		r := k.reduce(ops)
		if r.value != c.wantBits || k.show(r) != c.want {
			t.Errorf("%s %s over %s: %#x shown %q, want %#x shown %q", c.op, c.typ, c.mine, r.value, k.show(r), c.wantBits, c.want)
		}
	}
}

// TestMaxlocTies: among equal values MAXLOC keeps the smallest id, as
// the device does: the server's.
func TestMaxlocTies(t *testing.T) {
	k := calc{calcOps[9], dataTypes[7]} // MAXLOC, UINT64
	if k.op.name != "MAXLOC" || k.typ.name != "UINT64" {
		t.Fatalf("table order changed: %s %s", k.op.name, k.typ.name)
	}
	r := k.reduce([]operand{{5, 1}, {7, 1}, {7, 0}, {2, 0}})
	if r != (operand{7, 0}) {
		t.Fatalf("got %+v, want 7 from id 0", r)
	}
}

// TestHandshakeLine: a line reads back as it was written; damaged lines
// are refused with the field.
func TestHandshakeLine(t *testing.T) {
	e := endpoint{Endpoint: device.Endpoint{LID: 0x12, QPNum: 0x101, PSN: 0xabcdef, MTU: verbs.MTU2048}, size: 4096, iters: 77, calc: "MAXLOC", typ: "UINT64",
		operands: []operand{{0x1122334455667788, 1}, {9, 1}}}
	e.GID[10], e.GID[11], e.GID[12], e.GID[15] = 0xff, 0xff, 127, 2
	line := e.String()
	got, err := parseEndpoint(line)
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != line || got.QPNum != e.QPNum || got.PSN != e.PSN || got.GID != e.GID || got.MTU != e.MTU || len(got.operands) != 2 || got.operands[0] != e.operands[0] {
		t.Fatalf("%q read back as %+v", line, got)
	}
	for _, c := range []struct{ line, want string }{
		{"LID 0x12 QPN 0x101", "the peer does not speak this program's handshake"},
		{"", "the peer does not speak"},
		{strings.Replace(line, " psn=0xabcdef", "", 1), "lacks psn="},
		{line + " psn=1", `field "psn=1": want key=value, each key once`},
		{line + " extra=1", `field "extra=1": unknown key`},
		{strings.Replace(line, "qpn=0x000101", "qpn=0x1000000", 1), "not a 24-bit number"},
		{strings.Replace(line, "gid=", "gid=ab", 1), "want 32 hex digits"},
		{strings.Replace(line, "mtu=2048", "mtu=1500", 1), "not 256, 512"},
		{strings.Replace(line, "iters=77", "iters=-1", 1), "not a count"},
		{strings.Replace(line, "operands=", "operands=zz,", 1), "operand 1: want 32 hex digits"},
	} {
		if _, err := parseEndpoint(c.line); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.line, err, c.want)
		}
	}
}

// TestAgree: what the two sides must share, and the message naming each
// side's flags.
func TestAgree(t *testing.T) {
	base := endpoint{Endpoint: device.Endpoint{MTU: verbs.MTU1024}, size: 4096, iters: 10, calc: "ADD", typ: "INT64"}
	other := base
	other.size, other.operands = 16, []operand{{1, 0}} // calc messages do not depend on -s
	if err := agree(base, other); err != nil {
		t.Fatal(err)
	}
	other = base
	other.iters, other.typ = 11, "UINT64"
	err := agree(base, other)
	if err == nil || err.Error() != "the server runs -n 10, -c ADD -t INT64, the client -n 11, -c ADD -t UINT64: give both the same" {
		t.Fatalf("%v", err)
	}
	plain := endpoint{Endpoint: device.Endpoint{MTU: verbs.MTU1024}, size: 64, iters: 10, calc: "none", typ: "none"}
	big := plain
	big.size = 128
	if err := agree(plain, big); err == nil || !strings.Contains(err.Error(), "-s 64, the client -s 128") {
		t.Fatalf("plain messages of two sizes: %v", err)
	}
}

// testExchange is an exchange over a buffer of its own, without a device:
// what received checks.
func testExchange(t *testing.T, args ...string) (*exchange, []byte) {
	t.Helper()
	cfg, _, err := parseArgs(args, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := lease.Alloc(cfg.size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Free() })
	return newExchange(cfg, &side{buf: b}), b.Bytes()
}

// TestReceivedChecks: the check of every receive fails on a wrong result,
// a wrong MAXLOC id, a byte written beyond the result, a wrong length, and
// for plain messages on a wrong stamp or byte; it passes the right ones.
func TestReceivedChecks(t *testing.T) {
	// A server with -o 10,5 whose peer has -o 1,2: its first receive is
	// 1+2 = 3; it sends 3+5 = 8, and the peer answers 8+2 = 10.
	round := func() (*exchange, []byte) {
		x, b := testExchange(t, "-s", "64", "-c", "ADD", "-t", "INT64", "-o", "10,5")
		x.peer = []operand{{1, 0}, {2, 0}}
		binary.BigEndian.PutUint64(b, 3)
		if err := x.received(verbs.WC{ByteLen: 8}, 0); err != nil {
			t.Fatalf("the right result: %v", err)
		}
		x.prepare(1)
		if x.sent == nil || *x.sent != (operand{8, 0}) {
			t.Fatalf("the SEND delivers %+v, want 8", x.sent)
		}
		binary.BigEndian.PutUint64(b, 10)
		return x, b
	}
	x, _ := round()
	if err := x.received(verbs.WC{ByteLen: 8}, 1); err != nil || x.last.value != 10 {
		t.Fatalf("the second result: %v, last %+v", err, x.last)
	}
	for _, bad := range []struct {
		name string
		set  func(b []byte)
		n    uint32
		want string
	}{
		{"wrong value", func(b []byte) { b[7] = 11 }, 8, "result 2 is 11, want 10"},
		{"wrong length", func(b []byte) {}, 16, "receive 2: 16 bytes, want 8"},
		{"id written", func(b []byte) { b[15] = 1 }, 8, "result 2 is 10, want 10 (bits 0x000000000000000a id 1, want"},
		{"operand written", func(b []byte) { b[16] = 1 }, 8, "receive 2 wrote byte 16, beyond its 8-byte result (operand 2)"},
	} {
		x, b := round()
		bad.set(b)
		if err := x.received(verbs.WC{ByteLen: bad.n}, 1); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want %q", bad.name, err, bad.want)
		}
	}

	// MAXLOC: the id is part of the result.
	m, mb := testExchange(t, "-c", "MAXLOC", "-t", "UINT64", "-o", "0,4")
	m.peer = []operand{{0, 1}, {7, 1}}
	coll.PutElement(mb, 0, 7, 0)
	if err := m.received(verbs.WC{ByteLen: 16}, 0); err == nil || !strings.Contains(err.Error(), "result 1 is 7 from the server, want 7 from the client") {
		t.Errorf("MAXLOC with the wrong id: %v", err)
	}

	// Plain messages: the peer's pattern, stamped with the message number.
	p, pb := testExchange(t, "-s", "64")
	copy(pb, p.msg[1])
	stamp(pb, 4)
	if err := p.received(verbs.WC{ByteLen: 64}, 4); err != nil {
		t.Fatalf("the right message: %v", err)
	}
	if err := p.received(verbs.WC{ByteLen: 64}, 5); err == nil || !strings.Contains(err.Error(), "stamped 4 and 4, want 5") {
		t.Errorf("an old message: %v", err)
	}
	pb[30] ^= 1
	if err := p.received(verbs.WC{ByteLen: 64}, 4); err == nil || !strings.Contains(err.Error(), "byte 30 is") {
		t.Errorf("a changed byte: %v", err)
	}
	pb[30] ^= 1
	copy(pb, p.msg[0]) // this side's own message, reflected
	stamp(pb, 4)
	if err := p.received(verbs.WC{ByteLen: 64}, 4); err == nil {
		t.Error("the server's own message passed as the client's")
	}
	if err := p.received(verbs.WC{ByteLen: 63}, 4); err == nil || !strings.Contains(err.Error(), "63 bytes, want 64") {
		t.Errorf("a short message: %v", err)
	}
}
