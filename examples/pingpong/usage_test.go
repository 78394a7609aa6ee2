//go:build linux && cgo

package main

import (
	"strings"
	"testing"

	"github.com/verbsexp/verbsexp/internal/examplecli"
)

func TestMain(m *testing.M) { examplecli.Main(m, main) }

// TestUsage: -h says what the program does before its flags (it listed
// only the flags).
func TestUsage(t *testing.T) {
	code, out := examplecli.Run(t, "-h")
	if code != 0 || !strings.HasPrefix(out, "usage: go run ./examples/pingpong [flags]\n\nBounces -rounds messages") || !strings.Contains(out, "Flags:\n  -") || strings.Contains(out, "test.") {
		t.Errorf("-h: exit %d\n%s", code, out)
	}
}
