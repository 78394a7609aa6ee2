//go:build linux && cgo

package main

import (
	"strings"
	"testing"
)

func TestPingPong(t *testing.T) {
	for _, c := range []struct{ rounds, size int }{{1, 8}, {16, 64}, {500, 256}} {
		var out strings.Builder
		if err := run(c.rounds, c.size, &out); err != nil {
			t.Fatalf("%d rounds of %d bytes: %v", c.rounds, c.size, err)
		}
		if !strings.Contains(out.String(), "data verified") {
			t.Fatalf("output: %q", out.String())
		}
	}
}
