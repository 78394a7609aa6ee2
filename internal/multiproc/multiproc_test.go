package multiproc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Three ranks trade their rank numbers over two rounds of the file
// exchange; every rank checks what it got.
func TestExchange(t *testing.T) {
	if s, ok := Rank(); ok {
		x := s.Exchange()
		for round := range 2 {
			all, err := x([]byte(fmt.Sprintf("rank %d round %d", s.Rank, round)))
			if err != nil {
				t.Fatal(err)
			}
			for r, b := range all {
				if want := fmt.Sprintf("rank %d round %d", r, round); string(b) != want {
					t.Fatalf("round %d: rank %d sent %q, want %q", round, r, b, want)
				}
			}
		}
		return
	}
	Run(t, 3, Config{Timeout: 30 * time.Second})
}

// A rank that never reaches the exchange: the others give up at the
// deadline naming it; a rank that fails is reported with its output.
func TestExchangeMissingRank(t *testing.T) {
	if s, ok := Rank(); ok {
		if s.Rank == 2 {
			return // never exchanges
		}
		_, err := s.Exchange()([]byte("x"))
		if err == nil || !strings.Contains(err.Error(), "rank(s) 2 never came") {
			t.Fatalf("exchange without rank 2: %v", err)
		}
		fmt.Println("saw:", err)
		return
	}
	res := Run(t, 3, Config{Timeout: 3 * time.Second})
	for _, r := range res[:2] {
		if !bytes.Contains(r.Output, []byte("never came")) {
			t.Errorf("rank %d did not report the missing rank:\n%s", r.Rank, r.Output)
		}
	}
}

// Kill ends a rank with SIGKILL; Expect sees it as such.
func TestKill(t *testing.T) {
	if _, ok := Rank(); ok {
		time.Sleep(time.Minute)
		return
	}
	j := Start(t, 2, Config{Timeout: 20 * time.Second})
	time.Sleep(100 * time.Millisecond)
	j.Kill(1)
	j.Kill(0)
	for _, r := range j.Wait() {
		var ee *exec.ExitError
		if !errors.As(r.Err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("rank %d ended with %v, want SIGKILL", r.Rank, r.Err)
		}
	}
	for r := range 2 {
		if syscall.Kill(j.Pid(r), 0) == nil {
			t.Errorf("rank %d (pid %d) still runs", r, j.Pid(r))
		}
	}
	_ = os.Getpid
}
