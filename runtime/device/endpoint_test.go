//go:build linux && cgo

package device_test

import (
	"bytes"
	"errors"
	"syscall"
	"testing"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/device"
)

var sample = device.Endpoint{Port: 1, LinkLayer: verbs.LinkLayerEthernet, LID: 0x1234,
	GID: [16]byte{10: 0xff, 11: 0xff, 12: 127, 15: 2}, GIDIndex: 3, QPNum: 0xabcdef, PSN: 0x123456, MTU: verbs.MTU2048}

// TestEndpointBytes: an endpoint reads back as it was written, in
// EndpointSize bytes; every damaged or out-of-range encoding is refused
// with ErrBadEndpoint, leaving the endpoint as it was.
func TestEndpointBytes(t *testing.T) {
	b, err := sample.MarshalBinary()
	if err != nil || len(b) != device.EndpointSize {
		t.Fatalf("MarshalBinary: %d bytes, %v", len(b), err)
	}
	var got device.Endpoint
	if err := got.UnmarshalBinary(b); err != nil || got != sample {
		t.Fatalf("read back as %+v, %v; want %+v", got, err, sample)
	}
	set := func(i int, v byte) []byte { c := bytes.Clone(b); c[i] = v; return c }
	for name, bad := range map[string][]byte{
		"empty":          nil,
		"short":          b[:len(b)-1],
		"long":           append(bytes.Clone(b), 0),
		"magic":          set(0, 'x'),
		"version":        set(4, 2),
		"port 0":         set(5, 0),
		"link layer 3":   set(6, 3),
		"QPN of 25 bits": set(26, 1),
		"PSN of 25 bits": set(30, 1),
		"MTU 0":          set(34, 0),
		"MTU 6":          set(34, 6),
	} {
		e := sample
		if err := e.UnmarshalBinary(bad); !errors.Is(err, device.ErrBadEndpoint) || e != sample {
			t.Errorf("%s: %v, endpoint now %+v; want ErrBadEndpoint and no change", name, err, e)
		}
	}
	e := sample
	e.QPNum = 1 << 24
	if _, err := e.MarshalBinary(); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("MarshalBinary of a 25-bit QPN: %v", err)
	}
}

// FuzzEndpoint: whatever a peer sends, UnmarshalBinary returns an error
// or an endpoint that encodes back to the same bytes; it never panics.
func FuzzEndpoint(f *testing.F) {
	b, _ := sample.MarshalBinary()
	f.Add(b)
	f.Add([]byte("vxde"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var e device.Endpoint
		if e.UnmarshalBinary(b) != nil {
			return
		}
		again, err := e.MarshalBinary()
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("%x read as %+v, which encodes as %x (%v)", b, e, again, err)
		}
	})
}
