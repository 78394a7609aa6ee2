package launch_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPathsWithSpaces: the launcher, its driver beside it, the program
// and $TMPDIR (the mount points) in directories whose names hold spaces:
// the program finds its device. Before, the driver's path was put as it
// was in LD_PRELOAD and in the driver line, both of which split on
// spaces: libibverbs found no driver for the device.
func TestPathsWithSpaces(t *testing.T) {
	needVendor(t)
	dir := filepath.Join(t.TempDir(), "a dir with spaces")
	tmp := filepath.Join(dir, "tmp dir")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range [][2]string{{vendor.Softdev, "softdev"}, {vendor.Driver, filepath.Base(vendor.Driver)}, {bin("ibv_devices"), "ibv devices"}} {
		b, err := os.ReadFile(f[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f[1]), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(filepath.Join(dir, "softdev"), "exec", "-ofed", vendor.Root, "--", filepath.Join(dir, "ibv devices"))
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "softdev0") || strings.Contains(string(out), "Warning") {
		t.Fatalf("%s: %v\n%s\nwant softdev0 listed, no warning", strings.Join(cmd.Args, " "), err, out)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("the launch left %v in its TMPDIR", left)
	}
}
