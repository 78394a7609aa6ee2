//go:build linux && cgo

package lease

import (
	"fmt"
	"os"
	"testing"
)

// TestMain fails the run if any test leaves a Buffer allocated.
func TestMain(m *testing.M) {
	code := m.Run()
	if n := LiveBuffers(); code == 0 && n != 0 {
		fmt.Fprintf(os.Stderr, "LEAK: %d lease buffers were never freed\n", n)
		code = 1
	}
	os.Exit(code)
}
