// Package abiutil holds the few helpers that generated binding code calls
// for what Go's type system cannot say directly: bit-fields, members at
// offsets Go would not choose (packed records), and flag-enum names; and
// the check, at a package's first call, that the headers it was generated
// from did not change after it was built (Headers).
//
// The supported targets (linux/amd64, arm64, ppc64le) are all little
// endian, and GCC numbers bit-fields from the least significant bit there,
// so bit b of a record is bit b%8 of byte b/8.
package abiutil

import (
	"strconv"
	"strings"
	"unsafe"
)

// Bits reads the width-bit unsigned field that starts bitOff bits into the
// value at p. width is 1…64.
func Bits(p unsafe.Pointer, bitOff uint, width uint) uint64 {
	var v uint64
	for i := uint(0); i < width; {
		bit := bitOff + i
		b := *(*byte)(unsafe.Add(p, bit/8))
		shift := bit % 8
		n := min(8-shift, width-i)
		v |= uint64(b>>shift&(1<<n-1)) << i
		i += n
	}
	return v
}

// SignedBits reads a signed bit-field, sign-extending it.
func SignedBits(p unsafe.Pointer, bitOff uint, width uint) int64 {
	v := Bits(p, bitOff, width)
	if width < 64 && v&(1<<(width-1)) != 0 {
		v |= ^uint64(0) << width
	}
	return int64(v)
}

// SetBits stores the low width bits of v into the field that starts bitOff
// bits into the value at p, leaving the neighbouring bits as they were.
func SetBits(p unsafe.Pointer, bitOff uint, width uint, v uint64) {
	for i := uint(0); i < width; {
		bit := bitOff + i
		bp := (*byte)(unsafe.Add(p, bit/8))
		shift := bit % 8
		n := min(8-shift, width-i)
		mask := byte(1<<n-1) << shift
		*bp = *bp&^mask | byte(v>>i)<<shift&mask
		i += n
	}
}

// BoolBits converts a bool for SetBits.
func BoolBits(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// Load reads a T stored at p, which need not be aligned for T.
func Load[T any](p unsafe.Pointer) T {
	var v T
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&v)), unsafe.Sizeof(v)), unsafe.Slice((*byte)(p), unsafe.Sizeof(v)))
	return v
}

// Store writes v at p, which need not be aligned for T.
func Store[T any](p unsafe.Pointer, v T) {
	copy(unsafe.Slice((*byte)(p), unsafe.Sizeof(v)), unsafe.Slice((*byte)(unsafe.Pointer(&v)), unsafe.Sizeof(v)))
}

// Flag names one bit of a flag enum.
type Flag struct {
	Value uint64
	Name  string
}

// FlagString spells v as the names of its bits joined by "|", with any
// unnamed remainder in hex: "ExpSendSignaled|ExpSendFence|0x100".
func FlagString(v uint64, flags []Flag, typeName string) string {
	if v == 0 {
		return typeName + "(0)"
	}
	var parts []string
	rest := v
	for _, f := range flags {
		if f.Value != 0 && rest&f.Value == f.Value {
			parts = append(parts, f.Name)
			rest &^= f.Value
		}
	}
	if rest != 0 {
		parts = append(parts, "0x"+strconv.FormatUint(rest, 16))
	}
	return strings.Join(parts, "|")
}
