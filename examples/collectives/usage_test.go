//go:build linux && cgo

package main

import (
	"testing"

	"github.com/verbsexp/verbsexp/internal/examplecli"
)

func TestMain(m *testing.M) { examplecli.Main(m, main) }

// TestUsage: -h says what the program does before its flags (it listed
// only the flags).
func TestUsage(t *testing.T) {
	examplecli.TestUsage(t, "collectives", "Runs the four standing collectives")
}
