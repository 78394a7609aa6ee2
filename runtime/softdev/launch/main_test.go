package launch_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/verbsexp/verbsexp/runtime/softdev/internal/vendortest"
)

// vendor is what every test here runs with (vendortest.Prepare).
var vendor vendortest.Stack

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(m.Run()) // a child under softdev exec: it needs none of the stack
	}
	dir, err := os.MkdirTemp("", "softdev-launch-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	vendor = vendortest.Prepare(dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// needVendor skips (or, under make test, fails) a test that needs the
// vendor's stack when it is missing, saying why.
func needVendor(t testing.TB) {
	t.Helper()
	vendor.Need(t, "the vendor's programs under softdev exec")
}

// bin is a vendor program's path.
func bin(name string) string { return filepath.Join(vendor.Root, "usr/bin", name) }
