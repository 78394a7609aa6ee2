//go:build linux && cgo

package task

import (
	"fmt"
	"os"
	"testing"

	"github.com/verbsexp/verbsexp/runtime/lease"
)

// TestMain fails the run if any test leaves a task arena or a lease
// buffer allocated: every C allocation must be freed.
func TestMain(m *testing.M) {
	code := m.Run()
	if n, b := LiveArenas(), lease.LiveBuffers(); code == 0 && (n != 0 || b != 0) {
		fmt.Fprintf(os.Stderr, "LEAK: %d task arenas and %d lease buffers were never freed\n", n, b)
		code = 1
	}
	os.Exit(code)
}
