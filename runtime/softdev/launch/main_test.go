package launch_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

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
// make test sets it, so CI never passes without these tests having run.
const requireOFED = "VERBSEXP_REQUIRE_OFED"

// vendor is what every test here runs with: the unpacked packages, the
// driver built from this checkout against them, the softdev command.
var vendor struct {
	root    string // the unpacked packages (usr/bin, usr/lib, usr/include)
	driver  string
	softdev string
	why     string // why there is none: the tests skip, or fail (requireOFED), saying it
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "softdev-launch-test-")
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
	if os.Geteuid() != 0 {
		return "the launcher mounts the device's files in a private mount namespace: it needs root"
	}
	return ""
}

// needVendor skips (or, under make test, fails) a test that needs the
// vendor's stack when it is missing, saying why.
func needVendor(t testing.TB) {
	t.Helper()
	if vendor.why == "" {
		return
	}
	if os.Getenv(requireOFED) != "" {
		t.Fatalf("%s is set, and: %s", requireOFED, vendor.why)
	}
	t.Skipf("SKIPPED: %s", vendor.why)
}

// bin is a vendor program's path.
func bin(name string) string { return filepath.Join(vendor.root, "usr/bin", name) }
