package launch_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/softdev/launch"
)

// TestDescendantOutlivesProgram: a program (a shell) that leaves a job
// running and exits. The job inherited the device's listener (fd 3):
// the next launcher at the same address must still get it, and the job
// must keep its files (the sysfs tree) until it ends; then a later
// launch removes the mount point. Before, the job kept the address
// ("already served") and lost its sysfs tree when the launcher removed
// its mount point.
func TestDescendantOutlivesProgram(t *testing.T) {
	needVendor(t)
	addr := freeWireAddrs(t, "127.0.26.", 1)[0]
	dir := t.TempDir()
	// The job waits (at most a minute) for the test's go-ahead, then
	// reads its device's node_desc.
	job := `(i=0; while [ ! -e "$1/go" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done
cat "$SYSFS_PATH/class/infiniband/softdev0/node_desc" >"$1/desc" 2>"$1/err"; touch "$1/done") </dev/null >/dev/null 2>&1 &`
	first := start(t, launched(nil, addr, "/bin/sh", "-c", job, "sh", dir))
	first.wait(t, "the launcher whose program left a job running", time.Minute)
	first.ok(t, "the launcher whose program left a job running")
	if left := scratchOf(t, first.cmd.Process.Pid); len(left) != 1 {
		t.Errorf("the mount point of the job's namespace: %v, want it kept while the job runs", left)
	}

	out, err := launched(nil, addr, bin("ibv_devices")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "softdev0") {
		t.Errorf("the next launcher at %s while the job holds the program's listener: %v\n%s", addr, err, out)
	}

	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(dir, "done")); err == nil {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the job did not finish within a minute of its go-ahead")
		}
	}
	desc, _ := os.ReadFile(filepath.Join(dir, "desc"))
	if want := "softdev " + addr + "\n"; string(desc) != want {
		cerr, _ := os.ReadFile(filepath.Join(dir, "err"))
		t.Errorf("the job read node_desc %q (%s) after its program ended, want %q", desc, strings.TrimSpace(string(cerr)), want)
	}

	// The job has ended (or is ending): a launch removes the mount point.
	for end := time.Now().Add(30 * time.Second); len(scratchOf(t, first.cmd.Process.Pid)) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%v still there 30 s after the job ended, launches between", scratchOf(t, first.cmd.Process.Pid))
		}
		d, err := launch.Prepare(launch.Options{OFED: vendor.Root, Driver: vendor.Driver})
		if err != nil {
			t.Fatal(err)
		}
		d.Close()
	}
}

// scratchOf are the mount points the launcher of pid made.
func scratchOf(t *testing.T, pid int) []string {
	var mine []string
	for _, d := range scratchDirs(t) {
		if strings.HasPrefix(filepath.Base(d), "softdev-exec."+strconv.Itoa(pid)+".") {
			mine = append(mine, d)
		}
	}
	return mine
}

// TestListenerChild is the child of TestListenerCloseOnExec.
func TestListenerChild(t *testing.T) {
	if os.Getenv(childEnv) != "listener" {
		t.Skip("SKIPPED: the child of TestListenerCloseOnExec, run only by it under softdev exec")
	}
	before, err := fdFlags(3)
	if err != nil {
		t.Fatal(err)
	}
	list, err := verbs.GetDeviceList()
	if err != nil || list.Len() != 1 {
		t.Fatalf("GetDeviceList: %d devices, %v", list.Len(), err)
	}
	defer verbs.FreeDeviceList(list)
	ctx, err := verbs.OpenDevice(list.All()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer verbs.CloseDevice(ctx)
	after, err := fdFlags(3)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("child: fd 3 close-on-exec before %v, after %v\n", before&syscall.FD_CLOEXEC != 0, after&syscall.FD_CLOEXEC != 0)
}

func fdFlags(fd int) (int, error) {
	r, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0)
	if e != 0 {
		return 0, fmt.Errorf("fcntl(%d, F_GETFD): %w", fd, e)
	}
	return int(r), nil
}

// TestListenerCloseOnExec: the listener a program inherits (fd 3) is
// not close-on-exec, so that a program that does not open the device (a
// shell) passes it on; once the driver has it, it is, so that what the
// program starts does not hold the address. Before, it never was.
func TestListenerCloseOnExec(t *testing.T) {
	needVendor(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := launched(nil, "", self, "-test.run=^TestListenerChild$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"=listener")
	out, err := cmd.CombinedOutput()
	m := regexp.MustCompile(`child: fd 3 close-on-exec before (\w+), after (\w+)`).FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("the child under softdev exec: %v\n%s", err, out)
	}
	if string(m[1]) != "false" || string(m[2]) != "true" {
		t.Errorf("fd 3 close-on-exec: before opening the device %s, after %s; want false, then true", m[1], m[2])
	}
}
