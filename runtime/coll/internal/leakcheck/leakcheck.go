//go:build linux && cgo

// Package leakcheck is the TestMain of coll's test packages: every
// World, Memory and Schedule a test or example makes must give back the
// C memory it took.
package leakcheck

import (
	"fmt"
	"os"
	"testing"

	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/task"
)

// Main runs m and exits, failing the run if it passed but left a lease
// Buffer or a task list arena allocated.
func Main(m *testing.M) {
	code := m.Run()
	if n, a := lease.LiveBuffers(), task.LiveArenas(); code == 0 && (n != 0 || a != 0) {
		fmt.Fprintf(os.Stderr, "LEAK: %d lease buffers and %d task arenas were never freed\n", n, a)
		code = 1
	}
	os.Exit(code)
}
