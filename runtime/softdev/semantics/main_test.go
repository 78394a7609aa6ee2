//go:build linux && cgo

package semantics

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/verbsexp/verbsexp/internal/multiproc"
	"github.com/verbsexp/verbsexp/runtime/softdev/launch"
)

// The vendor's packages: $OFED_DEBS, else the copy the project is given
// beside its checkout (../shared/ofed-4.9/debs).
func debsDir() string {
	if d := os.Getenv("OFED_DEBS"); d != "" {
		return d
	}
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "../../../../shared/ofed-4.9/debs")
}

// requireOFED makes a missing vendor stack a failure instead of a skip:
// make test sets it, so CI never passes without the library path.
const requireOFED = "VERBSEXP_REQUIRE_OFED"

// vendor is what the library path runs with: the unpacked packages, the
// driver built from this checkout against them, the softdev command.
var vendor struct {
	root    string
	driver  string
	softdev string
	why     string // why there is none: the library path skips, or fails (requireOFED), saying it
}

func TestMain(m *testing.M) {
	if _, isRank := multiproc.Rank(); isRank {
		os.Exit(m.Run()) // a rank: its parent built everything and passed it on
	}
	dir, err := os.MkdirTemp("", "softdev-semantics-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	vendor.why = setUp(dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func setUp(dir string) string {
	debs := debsDir()
	if _, err := os.Stat(debs); err != nil {
		return fmt.Sprintf("the vendor's MLNX_OFED 4.9 packages are not at %s (set OFED_DEBS to MLNX_OFED's DEBS/MLNX_LIBS, or give the project ../shared/ofed-4.9)", debs)
	}
	if os.Geteuid() != 0 {
		return "the launcher mounts the device's files in a private mount namespace: it needs root"
	}
	root, err := launch.UnpackDebs(debs)
	if err != nil {
		return err.Error()
	}
	src, err := filepath.Abs("..")
	if err != nil {
		return err.Error()
	}
	vendor.root = root
	vendor.driver = filepath.Join(dir, launch.DriverFile)
	if err := (launch.Build{Src: src, OFED: root, Out: vendor.driver}).Driver(); err != nil {
		return err.Error()
	}
	vendor.softdev = filepath.Join(dir, "softdev")
	if out, err := exec.Command("go", "build", "-o", vendor.softdev, "../cmd/softdev").CombinedOutput(); err != nil {
		return fmt.Sprintf("go build ../cmd/softdev: %v: %s", err, out)
	}
	return ""
}

// needVendor skips (or, under make test, fails) a library-path test when
// the vendor's stack is missing, saying why.
func needVendor(t *testing.T) {
	t.Helper()
	if vendor.why == "" {
		return
	}
	if os.Getenv(requireOFED) != "" {
		t.Fatalf("%s is set, and: %s", requireOFED, vendor.why)
	}
	t.Skipf("SKIPPED: the library path: %s", vendor.why)
}
