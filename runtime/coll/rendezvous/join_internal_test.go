package rendezvous

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestLeavesBeforeFirstRound: a rank connects at Join, so one that goes
// away before its first round (its New failed in setup, say) fails the
// round at once, named, not at the deadline.
func TestLeavesBeforeFirstRound(t *testing.T) {
	root, err := Join("127.0.0.1:0", 0, 3, Options{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	gone, err := Join(root.Addr(), 2, 3, Options{})
	if err != nil {
		t.Fatal(err)
	}
	<-gone.ready
	if gone.dialErr != nil {
		t.Fatal(gone.dialErr)
	}
	gone.Close()
	start := time.Now()
	_, err = root.Exchange(nil)
	if err == nil || !strings.Contains(err.Error(), "rank 2 (at 127.0.0.1:") || !strings.Contains(err.Error(), "closed its connection") {
		t.Errorf("%v, want rank 2 named as gone", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %v", took)
	}
}

// TestCloseWhileConnecting: a connection the root accepted as Close began
// is closed too, so that Close returns. Strangers dial the root without
// a pause while it closes; before the fix, one accepted between Close's
// sweep of the connections and its wait was read forever, and Close with
// it (a CI run hung 10 minutes in TestJoinRefuses).
func TestCloseWhileConnecting(t *testing.T) {
	for i := range 300 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		rt := newRoot(ln, 2, Options{}, make(chan struct{}))
		stop := make(chan struct{})
		var dialers sync.WaitGroup
		for range 2 {
			dialers.Add(1)
			go func() {
				defer dialers.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
						defer c.Close() // open until the end: the root must close its side
					}
				}
			}()
		}
		time.Sleep(time.Duration(i%7) * 100 * time.Microsecond)
		closed := make(chan struct{})
		go func() { rt.close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Fatalf("close %d: not returned in 5 s", i)
		}
		close(stop)
		dialers.Wait()
	}
}
