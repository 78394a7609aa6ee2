// Package cint holds a C integer constant: a value of up to 64 bits that
// remembers whether C evaluated it as signed or unsigned, so that
// 1ULL << 63 and -1 both survive the trip to Go source and to JSON.
package cint

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// Value is a C integer constant. Bits holds the two's complement bits;
// Signed says whether they are read as int64.
type Value struct {
	Bits   uint64
	Signed bool
}

// Of returns the signed constant v.
func Of(v int64) Value { return Value{Bits: uint64(v), Signed: true} }

// OfUnsigned returns the unsigned constant v.
func OfUnsigned(v uint64) Value { return Value{Bits: v} }

// Negative reports whether the value is below zero.
func (v Value) Negative() bool { return v.Signed && int64(v.Bits) < 0 }

// Int64 returns the value as int64 and whether it fits.
func (v Value) Int64() (int64, bool) {
	if v.Signed {
		return int64(v.Bits), true
	}
	return int64(v.Bits), v.Bits <= 1<<63-1
}

// String returns the decimal spelling.
func (v Value) String() string {
	if v.Negative() {
		return strconv.FormatInt(int64(v.Bits), 10)
	}
	return strconv.FormatUint(v.Bits, 10)
}

// Equal compares the numeric values, not the signedness.
func (v Value) Equal(w Value) bool {
	return v.Bits == w.Bits && v.Negative() == w.Negative()
}

// Less orders values numerically.
func (v Value) Less(w Value) bool {
	switch {
	case v.Negative() != w.Negative():
		return v.Negative()
	case v.Negative():
		return int64(v.Bits) < int64(w.Bits)
	default:
		return v.Bits < w.Bits
	}
}

// MarshalJSON writes the value as a JSON integer (unsigned up to 2^64-1).
func (v Value) MarshalJSON() ([]byte, error) { return []byte(v.String()), nil }

// UnmarshalJSON reads a JSON integer; negative numbers are signed.
func (v *Value) UnmarshalJSON(b []byte) error {
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("constant value: %v", err)
	}
	s := n.String()
	if u, err := strconv.ParseUint(s, 10, 64); err == nil {
		*v = Value{Bits: u, Signed: u <= 1<<63-1}
		return nil
	}
	i, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("constant value %s is not a 64-bit integer", s)
	}
	*v = Of(i)
	return nil
}
