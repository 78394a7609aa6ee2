//go:build linux && cgo

package coll_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/task"
)

// TestMain fails the run if any test or example leaves a lease Buffer
// or a task list arena allocated.
func TestMain(m *testing.M) {
	code := m.Run()
	if n, a := lease.LiveBuffers(), task.LiveArenas(); code == 0 && (n != 0 || a != 0) {
		fmt.Fprintf(os.Stderr, "LEAK: %d lease buffers and %d task arenas were never freed\n", n, a)
		code = 1
	}
	os.Exit(code)
}
