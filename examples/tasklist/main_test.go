//go:build linux && cgo

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/runtime/device"
	"github.com/verbsexp/verbsexp/runtime/softdev/launch"
)

// The tests run the program as a child process: the test binary itself
// (TestMain runs main when runMainEnv is set), so that what runs is the
// program's main, with its imports.
const runMainEnv = "TASKLIST_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// want is what the program prints wherever it runs: the receive's
// completion, then the send's, the manager's two, and the message.
const want = `cq: wr_id 2 WCSuccess ExpWCRecv
cq: wr_id 1 WCSuccess ExpWCSend
manager cq: wr_id 10 WCSuccess
manager cq: wr_id 11 WCSuccess
received "hello, cross-channel"
`

// run runs prefix (a launcher, or nothing) and then the program, with env
// added, and returns its standard output; it fails the test on a
// non-zero exit, showing standard error.
func run(t *testing.T, prefix []string, env ...string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	argv := append(append([]string{}, prefix...), self)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), runMainEnv+"=1"), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(argv, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// TestInProcess runs the program on the software device in its own
// process: VERBSEXP_DEVICE=softdev.
func TestInProcess(t *testing.T) {
	if got := run(t, nil, device.Env+"="+device.SoftdevName); got != want {
		t.Fatalf("VERBSEXP_DEVICE=softdev printed\n%s\nwant\n%s", got, want)
	}
}

// TestUnderSoftdevExec runs the same program, unchanged, under `softdev
// exec`: device.Open("") finds softdev0 through the vendor's own
// libibverbs (MLNX_OFED 4.9) and its softdev provider, as it would an
// HCA, and the completion channel is the driver's.
func TestUnderSoftdevExec(t *testing.T) {
	stack := prepare(t)
	prefix := []string{stack.softdev, "exec", "-ofed", stack.root, "-driver", stack.driver, "--"}
	if got := run(t, prefix, device.Env+"="); got != want {
		t.Fatalf("under softdev exec it printed\n%s\nwant\n%s", got, want)
	}
}

// stack is what `softdev exec` runs with: the vendor's packages
// unpacked, the driver built against them, the softdev command.
type stack struct{ root, driver, softdev string }

// requireEnv makes a missing vendor stack a failure instead of a skip,
// as for runtime/softdev's own tests (make test sets it).
const requireEnv = "VERBSEXP_REQUIRE_OFED"

// prepare readies the stack in a temporary directory, or skips (fails
// under requireEnv) saying why it cannot.
func prepare(t *testing.T) stack {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "../..")
	skip := func(why string) {
		if os.Getenv(requireEnv) != "" {
			t.Fatalf("%s is set, and: %s", requireEnv, why)
		}
		t.Skipf("SKIPPED: the program under softdev exec: %s", why)
	}
	if os.Geteuid() != 0 {
		skip("the launcher mounts the device's files in a private mount namespace: it needs root")
	}
	debs := os.Getenv("OFED_DEBS")
	if debs == "" {
		debs = filepath.Join(root, "../shared/ofed-4.9/debs")
	}
	if _, err := os.Stat(debs); err != nil {
		skip("no MLNX_OFED 4.9 packages at " + debs + " (OFED_DEBS): " + launch.GetDebs)
	}
	ofed, err := launch.UnpackDebs(debs)
	if err != nil {
		skip(err.Error())
	}
	dir := t.TempDir()
	s := stack{root: ofed, driver: filepath.Join(dir, launch.DriverFile), softdev: filepath.Join(dir, "softdev")}
	src := filepath.Join(root, "runtime/softdev")
	if err := (launch.Build{Src: src, OFED: ofed, Out: s.driver}).Driver(); err != nil {
		t.Fatalf("building the driver: %v", err)
	}
	build := exec.Command("go", "build", "-o", s.softdev, "./cmd/softdev")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/softdev: %v\n%s", err, out)
	}
	return s
}
