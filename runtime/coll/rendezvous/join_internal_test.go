package rendezvous

import (
	"strings"
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
