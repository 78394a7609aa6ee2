package abiutil

import (
	"math/rand"
	"testing"
	"unsafe"
)

// refBits is the obvious definition over a little-endian bit string.
func refBits(buf []byte, off, width uint) uint64 {
	var v uint64
	for i := uint(0); i < width; i++ {
		bit := off + i
		if buf[bit/8]>>(bit%8)&1 != 0 {
			v |= 1 << i
		}
	}
	return v
}

func TestBitsAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for n := 0; n < 20000; n++ {
		buf := make([]byte, 24)
		rng.Read(buf)
		width := uint(rng.Intn(64) + 1)
		off := uint(rng.Intn(24*8 - int(width) + 1))
		p := unsafe.Pointer(&buf[0])
		if got, want := Bits(p, off, width), refBits(buf, off, width); got != want {
			t.Fatalf("Bits(off=%d,width=%d) = %#x, want %#x", off, width, got, want)
		}
		before := append([]byte(nil), buf...)
		v := rng.Uint64()
		SetBits(p, off, width, v)
		mask := ^uint64(0)
		if width < 64 {
			mask = 1<<width - 1
		}
		if got := refBits(buf, off, width); got != v&mask {
			t.Fatalf("SetBits(off=%d,width=%d,%#x) stored %#x", off, width, v, got)
		}
		for bit := uint(0); bit < 24*8; bit++ {
			if bit >= off && bit < off+width {
				continue
			}
			if buf[bit/8]>>(bit%8)&1 != before[bit/8]>>(bit%8)&1 {
				t.Fatalf("SetBits(off=%d,width=%d) changed bit %d outside the field", off, width, bit)
			}
		}
	}
}

func TestSignedBits(t *testing.T) {
	buf := make([]byte, 8)
	p := unsafe.Pointer(&buf[0])
	SetBits(p, 3, 5, 0x1b) // -5 in 5 bits
	if got := SignedBits(p, 3, 5); got != -5 {
		t.Fatalf("SignedBits = %d, want -5", got)
	}
	SetBits(p, 3, 5, 7)
	if got := SignedBits(p, 3, 5); got != 7 {
		t.Fatalf("SignedBits = %d, want 7", got)
	}
}

func TestLoadStoreUnaligned(t *testing.T) {
	buf := make([]byte, 16)
	p := unsafe.Add(unsafe.Pointer(&buf[0]), 3)
	Store(p, uint64(0x0102030405060708))
	if got := Load[uint64](p); got != 0x0102030405060708 {
		t.Fatalf("Load = %#x", got)
	}
	if buf[3] != 0x08 || buf[10] != 0x01 {
		t.Fatalf("bytes %x: not little endian at offset 3", buf)
	}
}

func TestFlagString(t *testing.T) {
	flags := []Flag{{1, "A"}, {2, "B"}, {8, "D"}}
	for _, c := range []struct {
		v    uint64
		want string
	}{{0, "T(0)"}, {1, "A"}, {3, "A|B"}, {0x19, "A|D|0x10"}, {0x40, "0x40"}} {
		if got := FlagString(c.v, flags, "T"); got != c.want {
			t.Errorf("FlagString(%#x) = %q, want %q", c.v, got, c.want)
		}
	}
}
