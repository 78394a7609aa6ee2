package coll

import "encoding/binary"

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
