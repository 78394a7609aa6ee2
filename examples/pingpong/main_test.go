//go:build linux && cgo

package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/verbsexp/verbsexp/runtime/softdev"
)

func TestPingPong(t *testing.T) {
	for _, c := range []struct{ rounds, size int }{{1, 8}, {16, 64}, {500, 256}, {16384, 8}} {
		var out strings.Builder
		if err := run(c.rounds, c.size, softdev.DefaultLimits, &out); err != nil {
			t.Fatalf("%d rounds of %d bytes: %v", c.rounds, c.size, err)
		}
		if !strings.Contains(out.String(), "data verified") || !strings.Contains(out.String(), "µs per round trip") {
			t.Fatalf("output: %q", out.String())
		}
	}
}

// TestPingPongLimits: a -rounds value beyond a queue's depth names the
// queue, the device limit and the flag that raises it; raised, it runs.
func TestPingPongLimits(t *testing.T) {
	var out strings.Builder
	err := run(20000, 8, softdev.DefaultLimits, &out)
	var le *LimitError
	if !errors.As(err, &le) || le.What != "send queue" || le.Need != 40000 || le.Limit != "max_qp_wr" || le.Max != softdev.DefaultLimits.MaxQPWR {
		t.Fatalf("20000 rounds: %v", err)
	}
	for _, s := range []string{"send queue", "max_qp_wr of 32768", "-max-wr=40000"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("message %q lacks %q", err, s)
		}
	}
	if err := run(20000, 8, softdev.Limits{MaxQPWR: 40000, MaxCQE: softdev.DefaultLimits.MaxCQE}, &out); err != nil {
		t.Fatalf("20000 rounds with -max-wr=40000: %v", err)
	}
	err = run(3000, 8, softdev.Limits{MaxQPWR: 8000, MaxCQE: 2048}, &out)
	if !errors.As(err, &le) || le.What != "receive CQ" || le.Flag != "-max-cqe" {
		t.Fatalf("3000 rounds with max_cqe 2048: %v", err)
	}
}
