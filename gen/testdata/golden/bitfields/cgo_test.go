//go:build cgo

package bitfields

// Hand-written: checks the generated bit-field accessors against the C
// compiler at run time on the host (offsetof cannot name a bit-field, so
// the compile-time assertions of abi.json skip them).

import (
	"testing"
	"unsafe"
)

func TestBitFieldsAgreeWithC(t *testing.T) {
	if got, want := unsafe.Sizeof(Flags{}), cSizeofFlags(); got != want {
		t.Fatalf("Sizeof(Flags) = %d, C says %d", got, want)
	}
	type field struct {
		get func(*Flags) int64
		set func(*Flags, int64)
		val int64
	}
	fields := []field{
		{func(f *Flags) int64 { return int64(f.Valid()) }, func(f *Flags, v int64) { f.SetValid(uint32(v)) }, 1},
		{func(f *Flags) int64 { return int64(f.Mode()) }, func(f *Flags, v int64) { f.SetMode(uint32(v)) }, 5},
		{func(f *Flags) int64 { return int64(f.Delta()) }, func(f *Flags, v int64) { f.SetDelta(int32(v)) }, -9},
		{func(f *Flags) int64 { return int64(f.Wide()) }, func(f *Flags, v int64) { f.SetWide(uint64(v)) }, 0xab_cdef_0123},
		{func(f *Flags) int64 { return int64(f.Rest()) }, func(f *Flags, v int64) { f.SetRest(uint64(v)) }, 0xfe_dcba},
		{func(f *Flags) int64 { return map[bool]int64{true: 1}[f.On()] }, func(f *Flags, v int64) { f.SetOn(v != 0) }, 1},
	}
	cf := newFlags()
	defer freeFlags(cf)
	gf := (*Flags)(unsafe.Pointer(cf))
	gf.Kind, gf.Port = 0x5a, 0xbeef
	for i, f := range fields {
		f.set(gf, f.val)
		if got := cGet(cf, i); got != f.val {
			t.Errorf("field %d: Go stored %d, C reads %d", i, f.val, got)
		}
	}
	for i, f := range fields {
		if got := f.get(gf); got != f.val {
			t.Errorf("field %d: reads back %d after all stores, want %d (a neighbour's store leaked)", i, got, f.val)
		}
		cSet(cf, i, 0)
		if got := f.get(gf); got != 0 {
			t.Errorf("field %d: C cleared it, Go reads %d", i, got)
		}
	}
	if gf.Kind != 0x5a || gf.Port != 0xbeef {
		t.Errorf("plain members changed by bit-field stores: kind %#x port %#x", gf.Kind, gf.Port)
	}
}
