//go:build cgo

package packed

// Hand-written: checks the generated accessors of packed members against
// the C compiler at run time on the host.

import (
	"testing"
	"unsafe"
)

func TestPackedAgreesWithC(t *testing.T) {
	if got, want := unsafe.Sizeof(Holder{}), cSizeofHolder(); got != want {
		t.Fatalf("Sizeof(Holder) = %d, C says %d", got, want)
	}
	ch := newHolder()
	defer freeHolder(ch)
	h := (*Holder)(unsafe.Pointer(ch))
	h.W.SetAddr(0x0102030405060708)
	h.W.SetLen(0xabcd)
	h.After = 77
	if got := cAddr(ch); got != 0x0102030405060708 {
		t.Errorf("addr: C reads %#x", got)
	}
	if got := cLen(ch); got != 0xabcd {
		t.Errorf("len: C reads %#x", got)
	}
	if got := cAfter(ch); got != 77 {
		t.Errorf("after: C reads %d", got)
	}
	if h.W.Addr() != 0x0102030405060708 || h.W.Len() != 0xabcd {
		t.Errorf("Go reads back addr %#x len %#x", h.W.Addr(), h.W.Len())
	}
}
