package launch

import (
	"errors"
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
// Eight goroutines race for one address, 300 times.
func TestListenersRace(t *testing.T) {
	f, addr, err := hold("")
	if err != nil {
		t.Fatal(err)
	}
	f.Close() // free again: the address they race for
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
