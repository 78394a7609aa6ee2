//go:build linux && cgo

package coll_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/verbsexp/verbsexp/runtime/coll"
)

func randomEndpoint(rng *rand.Rand, peers int) coll.Endpoint {
	e := coll.Endpoint{Rank: rng.IntN(1 << 20), Size: rng.IntN(1<<20) + 1, NodeGUID: rng.Uint64(),
		Port: uint8(rng.Uint32()), LinkLayer: uint8(rng.Uint32()), LID: uint16(rng.Uint32()), MTU: uint8(rng.Uint32()),
		Progressed: rng.IntN(2) == 1, Manager: coll.QPAddr{Rank: rng.IntN(1 << 20), QPNum: rng.Uint32(), PSN: rng.Uint32() & 0xffffff}}
	for i := range e.GID {
		e.GID[i] = byte(rng.Uint32())
	}
	for range peers {
		e.Peers = append(e.Peers, coll.QPAddr{Rank: rng.IntN(1 << 20), QPNum: rng.Uint32(), PSN: rng.Uint32() & 0xffffff})
		e.Watch = append(e.Watch, coll.QPAddr{Rank: rng.IntN(1 << 20), QPNum: rng.Uint32(), PSN: rng.Uint32() & 0xffffff})
		e.Ready = append(e.Ready, coll.QPAddr{Rank: rng.IntN(1 << 20), QPNum: rng.Uint32(), PSN: rng.Uint32() & 0xffffff})
	}
	return e
}

// TestEndpointRoundTrip: what MarshalBinary encodes, UnmarshalBinary
// gives back field for field, for 0 to 20 peers.
func TestEndpointRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for peers := range 21 {
		e := randomEndpoint(rng, peers)
		b, err := e.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var got coll.Endpoint
		if err := got.UnmarshalBinary(b); err != nil {
			t.Fatalf("%d peers: %v", peers, err)
		}
		if peers == 0 {
			got.Peers, got.Watch, got.Ready = nil, nil, nil // decoded as empty slices
		}
		if !reflect.DeepEqual(got, e) {
			t.Errorf("%d peers: decoded %+v, encoded %+v", peers, got, e)
		}
	}
	e := coll.Endpoint{Peers: make([]coll.QPAddr, 1<<16)}
	if _, err := e.MarshalBinary(); err == nil || !strings.Contains(err.Error(), "do not fit") {
		t.Errorf("an endpoint of 65536 peers: %v, want an error", err)
	}
}

// TestEndpointGarbage: every malformed encoding is ErrBadEndpoint,
// never a panic or a half-decoded endpoint passed off as good: empty,
// every truncation, a wrong magic or version, trailing bytes, a peer
// count that disagrees with the length, and random bytes. (Versions 1
// and 2, without the watch and ready QPs, are refused too.)
func TestEndpointGarbage(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	e := randomEndpoint(rng, 3)
	good, err := e.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	bad := map[string][]byte{"empty": nil, "magic": append([]byte("VXEP"), good[4:]...),
		"version": append(append([]byte("vxep"), 2), good[5:]...), "trailing": append(append([]byte{}, good...), 0),
		"one peer too many": append(append([]byte{}, good...), make([]byte, 3*12)...)}
	for n := range len(good) {
		bad[fmt.Sprintf("truncated to %d bytes", n)] = good[:n]
	}
	lying := append([]byte{}, good...)
	lying[len(good)-3*3*12-1]++ // the peer count
	bad["peer count"] = lying
	flag := append([]byte{}, good...)
	flag[5+37] = 2 // Progressed is 0 or 1
	bad["flag byte"] = flag
	for i := range 200 {
		b := make([]byte, rng.IntN(120))
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		if i%2 == 0 && len(b) >= 5 {
			copy(b, "vxep\x03") // get past the magic
		}
		bad[fmt.Sprintf("random %d", i)] = b
	}
	for what, b := range bad {
		var got coll.Endpoint
		err := got.UnmarshalBinary(b)
		if !errors.Is(err, coll.ErrBadEndpoint) {
			t.Errorf("%s (%d bytes): %v, want ErrBadEndpoint", what, len(b), err)
		}
	}
}
