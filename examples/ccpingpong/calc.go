//go:build linux && cgo

package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/coll"
)

// An operation of -c: what the user asks for, and how the device runs it.
// The device has ADD, BAND, BOR, BXOR and (on UINT) MAXLOC on 64-bit
// values; the logical operations run as the bitwise ones on 0/1 operands,
// and MAX, MIN, MAXLOC and MINLOC as UINT MAXLOC on coll.OrderKey's
// order-preserving keys (MIN on complemented ones).
type calcOp struct {
	name    string
	dev     verbs.ExpCalcOp
	logical bool // operands become 0 or 1
	keyed   bool // runs as UINT MAXLOC on order keys
	min     bool // on complemented keys: the largest key is the smallest value
	loc     bool // the result names where it came from (the operand's id: its side)
}

var calcOps = []calcOp{
	{name: "XOR", dev: verbs.ExpCalcOpBxor, logical: true},
	{name: "BXOR", dev: verbs.ExpCalcOpBxor},
	{name: "LOR", dev: verbs.ExpCalcOpBor, logical: true},
	{name: "BOR", dev: verbs.ExpCalcOpBor},
	{name: "LAND", dev: verbs.ExpCalcOpBand, logical: true},
	{name: "BAND", dev: verbs.ExpCalcOpBand},
	{name: "ADD", dev: verbs.ExpCalcOpAdd},
	{name: "MAX", dev: verbs.ExpCalcOpMaxloc, keyed: true},
	{name: "MIN", dev: verbs.ExpCalcOpMaxloc, keyed: true, min: true},
	{name: "MAXLOC", dev: verbs.ExpCalcOpMaxloc, keyed: true, loc: true},
	{name: "MINLOC", dev: verbs.ExpCalcOpMaxloc, keyed: true, min: true, loc: true},
}

// refusedOps are names the vendor's program knows that no device runs.
var refusedOps = map[string]string{
	"PROD": "the device has no product (verbs_exp.h has no IBV_EXP_CALC_OP for it)",
}

// A data type of -t: how operands are read and results shown. The device
// computes on 64 bits: narrower operands are widened (sign-extended for
// INT, zero-extended for UINT, exactly for FLOAT32) and results are shown
// narrowed back, as the vendor's program does.
type dataType struct {
	name string
	kind verbs.ExpCalcDataType // INT, UINT or FLOAT
	bits int
}

var dataTypes = []dataType{
	{"INT8", verbs.ExpCalcDataTypeInt, 8}, {"INT16", verbs.ExpCalcDataTypeInt, 16},
	{"INT32", verbs.ExpCalcDataTypeInt, 32}, {"INT64", verbs.ExpCalcDataTypeInt, 64},
	{"UINT8", verbs.ExpCalcDataTypeUint, 8}, {"UINT16", verbs.ExpCalcDataTypeUint, 16},
	{"UINT32", verbs.ExpCalcDataTypeUint, 32}, {"UINT64", verbs.ExpCalcDataTypeUint, 64},
	{"FLOAT32", verbs.ExpCalcDataTypeFloat, 32}, {"FLOAT64", verbs.ExpCalcDataTypeFloat, 64},
}

func names[T any](xs []T, name func(T) string) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = name(x)
	}
	return strings.Join(s, ", ")
}

func lookupOp(s string) (calcOp, error) {
	for _, o := range calcOps {
		if o.name == s {
			return o, nil
		}
	}
	if why, ok := refusedOps[s]; ok {
		return calcOp{}, fmt.Errorf("-c %s: %s; use one of %s", s, why, names(calcOps, func(o calcOp) string { return o.name }))
	}
	return calcOp{}, fmt.Errorf("-c %q: unknown operation; use one of %s", s, names(calcOps, func(o calcOp) string { return o.name }))
}

func lookupType(s string) (dataType, error) {
	for _, t := range dataTypes {
		if t.name == s {
			return t, nil
		}
	}
	return dataType{}, fmt.Errorf("-t %q: unknown type; use one of %s", s, names(dataTypes, func(t dataType) string { return t.name }))
}

// calc is a -c, -t pair: everything the ping-pong needs to build the
// operands and to check the results.
type calc struct {
	op  calcOp
	typ dataType
}

// wireType is the data type the device is told: UINT for the keyed and
// logical operations (keys and truth values are unsigned), else -t's.
func (c calc) wireType() verbs.ExpCalcDataType {
	if c.op.keyed || c.op.logical {
		return verbs.ExpCalcDataTypeUint
	}
	return c.typ.kind
}

// resultLen is the payload of a calc SEND: the value, or value and id
// for MAXLOC.
func (c calc) resultLen() int {
	if c.op.dev == verbs.ExpCalcOpMaxloc {
		return coll.ElementSize
	}
	return 8
}

// operand is one 16-byte calc operand as it sits in memory: the value the
// device reads and the id MAXLOC reports.
type operand struct {
	value, id uint64
}

// parseOperands reads -o for side (0 the server, 1 the client; the id
// MAXLOC and MINLOC report).
func (c calc) parseOperands(s string, side uint64) ([]operand, error) {
	if s == "" {
		return nil, fmt.Errorf("-o: -c %s needs operands: a comma-separated list such as -o 3,4", c.op.name)
	}
	var out []operand
	for i, f := range strings.Split(s, ",") {
		v, err := c.parse(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("-o %s: operand %d: %w", s, i+1, err)
		}
		o := operand{value: c.encode(v)}
		if c.op.loc {
			o.id = side
		}
		out = append(out, o)
	}
	return out, nil
}

// parse reads one operand as -t says, into its 64-bit form: int64 bits
// for INT, uint64 for UINT, float64 bits for FLOAT.
func (c calc) parse(s string) (uint64, error) {
	t := c.typ
	switch t.kind {
	case verbs.ExpCalcDataTypeInt:
		v, err := strconv.ParseInt(s, 0, t.bits)
		if err != nil {
			return 0, fmt.Errorf("%q is not an %s (%d to %d)", s, t.name, int64(-1)<<(t.bits-1), ^uint64(0)>>(65-t.bits))
		}
		return uint64(v), nil
	case verbs.ExpCalcDataTypeUint:
		v, err := strconv.ParseUint(s, 0, t.bits)
		if err != nil {
			return 0, fmt.Errorf("%q is not a %s (0 to %d)", s, t.name, ^uint64(0)>>(64-t.bits))
		}
		return v, nil
	}
	v, err := strconv.ParseFloat(s, t.bits)
	if err != nil {
		return 0, fmt.Errorf("%q is not a %s", s, t.name)
	}
	return math.Float64bits(v), nil
}

// encode maps a 64-bit value to what the device reduces.
func (c calc) encode(v uint64) uint64 {
	switch {
	case c.op.logical:
		if c.truth(v) {
			return 1
		}
		return 0
	case c.op.keyed:
		k := coll.OrderKey(v, c.typ.kind)
		if c.op.min {
			k = ^k
		}
		return k
	}
	return v
}

func (c calc) truth(v uint64) bool {
	if c.typ.kind == verbs.ExpCalcDataTypeFloat {
		return math.Float64frombits(v) != 0
	}
	return v != 0
}

// decode is encode's inverse for a result (logical results are 0 or 1
// already).
func (c calc) decode(w uint64) uint64 {
	if !c.op.keyed {
		return w
	}
	if c.op.min {
		w = ^w
	}
	return coll.FromOrderKey(w, c.typ.kind)
}

// reduce is what the device must deliver for a calc SEND of these
// operands, computed in Go: the operation over the 64-bit words in
// order, with the wire type's arithmetic (ADD wraps for INT and UINT, is
// IEEE for FLOAT; MAXLOC keeps the largest value and, among equal ones,
// the smallest id).
func (c calc) reduce(ops []operand) operand {
	acc := ops[0]
	if c.op.dev != verbs.ExpCalcOpMaxloc {
		acc.id = 0 // not part of the result
	}
	for _, o := range ops[1:] {
		switch c.op.dev {
		case verbs.ExpCalcOpAdd:
			if c.wireType() == verbs.ExpCalcDataTypeFloat {
				acc.value = math.Float64bits(math.Float64frombits(acc.value) + math.Float64frombits(o.value))
			} else {
				acc.value += o.value
			}
		case verbs.ExpCalcOpBand:
			acc.value &= o.value
		case verbs.ExpCalcOpBor:
			acc.value |= o.value
		case verbs.ExpCalcOpBxor:
			acc.value ^= o.value
		case verbs.ExpCalcOpMaxloc:
			if o.value > acc.value || o.value == acc.value && o.id < acc.id {
				acc = o
			}
		}
	}
	return acc
}

// show prints a result as -c and -t read it: narrowed to the type's
// width, a truth value for the logical operations, with its side for
// MAXLOC and MINLOC.
func (c calc) show(r operand) string {
	if c.op.logical {
		return strconv.FormatUint(r.value, 10)
	}
	v := c.decode(r.value)
	bitwise := c.op.dev == verbs.ExpCalcOpBand || c.op.dev == verbs.ExpCalcOpBor || c.op.dev == verbs.ExpCalcOpBxor
	narrow := v << (64 - c.typ.bits) >> (64 - c.typ.bits)
	var s string
	switch {
	case c.typ.kind == verbs.ExpCalcDataTypeFloat && c.typ.bits == 32:
		s = strconv.FormatFloat(float64(float32(math.Float64frombits(v))), 'g', -1, 32)
	case c.typ.kind == verbs.ExpCalcDataTypeFloat:
		s = strconv.FormatFloat(math.Float64frombits(v), 'g', -1, 64)
	case bitwise:
		s = fmt.Sprintf("0x%0*x", c.typ.bits/4, narrow)
	case c.typ.kind == verbs.ExpCalcDataTypeInt:
		s = strconv.FormatInt(int64(v)<<(64-c.typ.bits)>>(64-c.typ.bits), 10)
	default:
		s = strconv.FormatUint(narrow, 10)
	}
	if c.op.loc {
		s += " from the " + sideName(r.id)
	}
	return s
}

func sideName(id uint64) string {
	switch id {
	case 0:
		return "server"
	case 1:
		return "client"
	}
	return fmt.Sprintf("side %d", id)
}

// put writes operands into b as the device reads them.
func putOperands(b []byte, ops []operand) {
	for i, o := range ops {
		coll.PutElement(b, i, o.value, o.id)
	}
}
