package coll

import (
	"encoding/binary"

	"github.com/verbsexp/verbsexp/generated/verbs"
)

// PutElement writes element i of an allreduce buffer: value and its
// location (what MAXLOC reports with the largest value; ignored by the
// other operations), both big-endian as the device reads them. Use
// math.Float64bits for FLOAT and uint64(v) for INT.
func PutElement(b []byte, i int, value, loc uint64) {
	e := b[i*ElementSize : (i+1)*ElementSize]
	binary.BigEndian.PutUint64(e, value)
	binary.BigEndian.PutUint64(e[8:], loc)
}

// Element reads element i of an allreduce buffer. loc is meaningful
// after MAXLOC only (other operations write the value alone).
func Element(b []byte, i int) (value, loc uint64) {
	e := b[i*ElementSize : (i+1)*ElementSize]
	return binary.BigEndian.Uint64(e), binary.BigEndian.Uint64(e[8:])
}

// OrderKey maps a 64-bit INT or FLOAT value (int64 bits, or float64 bits
// from math.Float64bits) to a UINT with the same order, so that MAXLOC,
// which the hardware has on UINT only, finds the largest of them: INT by
// flipping the sign bit, FLOAT by setting it on positives and flipping
// every bit of negatives (-0 orders just below +0, NaNs outside the
// infinities). UINT values are their own keys. ^OrderKey orders the other
// way round: MAXLOC of those keys finds the smallest value. FromOrderKey
// undoes it.
func OrderKey(v uint64, typ verbs.ExpCalcDataType) uint64 {
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

// FromOrderKey returns the value whose OrderKey is k.
func FromOrderKey(k uint64, typ verbs.ExpCalcDataType) uint64 {
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
