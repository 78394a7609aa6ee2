package launch

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
)

// TestListenersRace: launchers choosing their address at the same
// moment may all bind the same one (each sets SO_REUSEADDR, which lets
// sockets bind together while none listens); only the first to listen
// gets it, and every other must see the address as taken, exactly as
// when it finds it bound and listening, so that it moves on to the next
// address instead of failing with "listening at 127.0.0.x: address
// already in use" (once in about 800 launches 16 at a time, before).
// Eight goroutines race for one address, 300 times: a free one drawn at
// random in 127.96-127.127, where no launcher choosing its own address
// (127.0.x.y upward) would take it between two rounds.
func TestListenersRace(t *testing.T) {
	var addr netip.Addr
	for range 100 {
		a := netip.AddrFrom4([4]byte{127, byte(96 + rand.IntN(32)), byte(rand.IntN(256)), byte(1 + rand.IntN(254))})
		if f, err := listenAt(a); err == nil {
			f.Close() // free again: the address they race for
			addr = a
			break
		}
	}
	if !addr.IsValid() {
		t.Fatal("no free address among 100 drawn in 127.96-127.127")
	}
	for round := range 300 {
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, 8)
		won := 0
		var mu sync.Mutex
		for g := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				l, err := listenAt(addr)
				errs[g] = err
				if err == nil {
					mu.Lock()
					won++
					mu.Unlock()
					defer l.Close()
				}
			}()
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			var inUse *AddressInUseError
			if err != nil && !errors.As(err, &inUse) {
				t.Fatalf("round %d: %v; want the address reported taken (*AddressInUseError)", round, err)
			}
		}
		if won == 0 {
			t.Fatalf("round %d: nobody got %s: %v", round, addr, errs)
		}
	}
}
