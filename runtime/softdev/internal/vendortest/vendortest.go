// Package vendortest prepares what tests that run programs under
// `softdev exec` need: MLNX_OFED 4.9's packages unpacked, the driver
// built from this checkout against them, and the softdev command. The
// launcher's tests (runtime/softdev/launch) and the library path of the
// semantics table (runtime/softdev/semantics) share it.
package vendortest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/verbsexp/verbsexp/runtime/softdev/launch"
)

// RequireEnv makes a missing vendor stack a failure instead of a skip:
// make test sets it when the packages are there, and CI always, so that
// a run with them never passes without the tests that need them.
const RequireEnv = "VERBSEXP_REQUIRE_OFED"

// SkipLogEnv names a file to which every test skipped for want of the
// vendor's packages appends a line: make test counts them at its end.
const SkipLogEnv = "VERBSEXP_OFED_SKIPLOG"

// Stack is what the tests run with, or why there is none.
type Stack struct {
	Root    string // the unpacked packages (usr/bin, usr/lib, usr/include)
	Driver  string // libsoftdev-rdmav2.so, built against Root
	Softdev string // the softdev command
	Why     string // why there is none: the tests skip, or fail (RequireEnv), saying it
}

// softdevDir is runtime/softdev in this checkout: the driver's sources
// and the softdev command's package.
func softdevDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "../..")
}

// DebsDir is where the vendor's packages are: $OFED_DEBS, else the copy
// the project is given beside its checkout (../shared/ofed-4.9/debs).
func DebsDir() string {
	if d := os.Getenv("OFED_DEBS"); d != "" {
		return d
	}
	return filepath.Join(softdevDir(), "../../../shared/ofed-4.9/debs")
}

// Prepare unpacks the packages (into launch's cache) and builds the
// driver and the softdev command into dir.
func Prepare(dir string) Stack {
	debs := DebsDir()
	if _, err := os.Stat(debs); err != nil {
		return Stack{Why: fmt.Sprintf("no MLNX_OFED 4.9 packages at %s (OFED_DEBS, or ../shared/ofed-4.9/debs beside the checkout): %s", debs, launch.GetDebs)}
	}
	root, err := launch.UnpackDebs(debs)
	if err != nil {
		return Stack{Why: err.Error()}
	}
	src := softdevDir()
	s := Stack{Root: root, Driver: filepath.Join(dir, launch.DriverFile), Softdev: filepath.Join(dir, "softdev")}
	if err := (launch.Build{Src: src, OFED: root, Out: s.Driver}).Driver(); err != nil {
		return Stack{Why: err.Error()}
	}
	build := exec.Command("go", "build", "-o", s.Softdev, "./cmd/softdev")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		return Stack{Why: fmt.Sprintf("go build ./cmd/softdev: %v: %s", err, out)}
	}
	if os.Geteuid() != 0 {
		return Stack{Why: "the launcher mounts the device's files in a private mount namespace: it needs root"}
	}
	return s
}

// Need skips (or, under RequireEnv, fails) a test that needs the stack
// when there is none, saying why; what names what is skipped.
func (s Stack) Need(t testing.TB, what string) {
	t.Helper()
	if s.Why == "" {
		return
	}
	if os.Getenv(RequireEnv) != "" {
		t.Fatalf("%s is set, and: %s", RequireEnv, s.Why)
	}
	LogSkip(t.Name(), what)
	t.Skipf("SKIPPED: %s: %s", what, s.Why)
}

// LogSkip records in $VERBSEXP_OFED_SKIPLOG that test did not run for
// want of the vendor's packages (what: what it would have run).
func LogSkip(test, what string) {
	p := os.Getenv(SkipLogEnv)
	if p == "" {
		return
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	pkg, _ := os.Getwd()                            // go test runs each package in its directory
	fmt.Fprintf(f, "%s\t%s\t%s\n", pkg, test, what) // one write: lines of parallel packages do not interleave
}
