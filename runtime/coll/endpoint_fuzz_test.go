package coll

import (
	"errors"
	"reflect"
	"testing"
)

// FuzzEndpoint feeds UnmarshalBinary arbitrary bytes (an exchange hands
// it whatever the job's transport delivered): it must return an error or
// an endpoint that encodes back to the same bytes, and never panic.
func FuzzEndpoint(f *testing.F) {
	e := Endpoint{Rank: 2, Size: 5, NodeGUID: 0x50f7de0000000003, Port: 1, LinkLayer: 1, LID: 7, MTU: 5,
		Manager: QPAddr{Rank: 2, QPNum: 0x104, PSN: 0xabcdef},
		Peers:   []QPAddr{{Rank: 0, QPNum: 0x110, PSN: 1}, {Rank: 1, QPNum: 0x111, PSN: 2}, {Rank: 3, QPNum: 0x112, PSN: 3}},
		Watch:   []QPAddr{{Rank: 0, QPNum: 0x120, PSN: 4}, {Rank: 1, QPNum: 0x121, PSN: 5}, {Rank: 3, QPNum: 0x122, PSN: 6}},
		Ready:   []QPAddr{{Rank: 0, QPNum: 0x130, PSN: 7}, {Rank: 1, QPNum: 0x131, PSN: 8}, {Rank: 3, QPNum: 0x132, PSN: 9}}}
	e.GID[0], e.GID[15] = 0xfe, 0x01
	b, err := e.MarshalBinary()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(b[:len(b)-1])
	f.Add([]byte("vxep"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var e Endpoint
		if err := e.UnmarshalBinary(b); err != nil {
			if !errors.Is(err, ErrBadEndpoint) {
				t.Fatalf("error %v does not wrap ErrBadEndpoint", err)
			}
			return
		}
		again, err := e.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(again, b) {
			t.Fatalf("decoded %+v encodes to %x, not %x", e, again, b)
		}
	})
}
