//go:build linux && cgo

package semantics

import (
	"fmt"
	"os"
	"testing"

	"github.com/verbsexp/verbsexp/internal/multiproc"
	"github.com/verbsexp/verbsexp/runtime/softdev/internal/vendortest"
)

// vendor is what the library path runs with (vendortest.Prepare).
var vendor vendortest.Stack

func TestMain(m *testing.M) {
	if _, isRank := multiproc.Rank(); isRank {
		os.Exit(m.Run()) // a rank: its parent built everything and passed it on
	}
	dir, err := os.MkdirTemp("", "softdev-semantics-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	vendor = vendortest.Prepare(dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// needVendor skips (or, under make test, fails) a library-path test when
// the vendor's stack is missing, saying why.
func needVendor(t *testing.T) {
	t.Helper()
	vendor.Need(t, "the library path")
}
