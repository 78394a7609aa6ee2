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
	examplecli.TestUsage(t, "allreduce", "Reduces -count 64-bit values per rank")
	var code int
	var out string
	// An operation the device lacks names the ones it has.
	code, out = examplecli.Run(t, "-op", "min")
	if code != 2 || !strings.Contains(out, "allreduce: -op min: not an operation the device reduces with; choose and, max, or, sum, xor") {
		t.Errorf("-op min: exit %d\n%s", code, out)
	}
	code, out = examplecli.Run(t, "-type", "double")
	if code != 2 || !strings.Contains(out, "allreduce: -type double: not a data type the device reduces; choose float, int, uint") {
		t.Errorf("-type double: exit %d\n%s", code, out)
	}
}
