package launch_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/abiutil/dynlib"
	"github.com/verbsexp/verbsexp/runtime/softdev/launch"
)

// What a launch refuses, before anything changes.

func TestRefusals(t *testing.T) {
	needVendor(t)
	before := scratchDirs(t)
	t.Run("no library", func(t *testing.T) {
		_, err := launch.Prepare(launch.Options{OFED: t.TempDir(), Driver: vendor.Driver})
		var le *launch.LibraryError
		if !errors.As(err, &le) || !strings.Contains(err.Error(), "libibverbs.so.1") || !strings.Contains(err.Error(), "-ofed-debs") {
			t.Fatalf("Prepare with no library: %v; want a *launch.LibraryError naming the files and what to do", err)
		}
	})
	t.Run("rdma-core's library", func(t *testing.T) {
		dir := "/usr/lib/x86_64-linux-gnu"
		if _, err := os.Stat(filepath.Join(dir, "libibverbs.so.1")); err != nil {
			t.Skipf("SKIPPED: Debian's rdma-core libibverbs.so.1 is not installed (apt-get install libibverbs1; .ci/run installs it)")
		}
		_, err := launch.Prepare(launch.Options{OFED: dir, Driver: vendor.Driver})
		var ae *dynlib.ABIError
		if !errors.As(err, &ae) || !ae.Other || !strings.Contains(err.Error(), "rdma-core") {
			t.Fatalf("Prepare with rdma-core's library: %v; want a *dynlib.ABIError saying it is rdma-core's", err)
		}
	})
	t.Run("no driver", func(t *testing.T) {
		_, err := launch.Prepare(launch.Options{OFED: vendor.Root, Driver: filepath.Join(t.TempDir(), launch.DriverFile)})
		if err == nil || !strings.Contains(err.Error(), "make softdev") {
			t.Fatalf("Prepare without a driver: %v; want the make target that builds it", err)
		}
	})
	t.Run("address served", func(t *testing.T) {
		first, err := launch.Prepare(launch.Options{OFED: vendor.Root, Driver: vendor.Driver})
		if err != nil {
			t.Fatal(err)
		}
		defer first.Close()
		out, err := launched(nil, first.Addr.String(), bin("ibv_devices")).CombinedOutput()
		if err == nil || !regexp.MustCompile(regexp.QuoteMeta(first.Addr.String())+` is already served by another softdev`).Match(out) {
			t.Fatalf("a second launcher for %s: %v\n%s\nwant it to say the address is served", first.Addr, err, out)
		}
	})
	t.Run("no namespaces", func(t *testing.T) {
		// An unprivileged user may not make a mount namespace: the
		// launcher, run as nobody with readable copies of the files,
		// must say so.
		dir, err := os.MkdirTemp("", "softdev-nobody-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		os.Chmod(dir, 0o755)
		for _, f := range []string{vendor.Softdev, vendor.Driver, filepath.Join(vendor.Root, "usr/lib/libibverbs.so.1")} {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command(filepath.Join(dir, "softdev"), "exec", "-ofed", dir, "-driver", filepath.Join(dir, launch.DriverFile), "--", "/bin/true")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		tmp := filepath.Join(dir, "tmp")
		if err := os.Mkdir(tmp, 0o777); err != nil {
			t.Fatal(err)
		}
		os.Chmod(tmp, 0o777)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "TMPDIR=" + tmp, "HOME=" + tmp}
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "cannot make a private mount namespace") {
			t.Fatalf("softdev exec as nobody: %v\n%s\nwant it to say it cannot make a mount namespace", err, out)
		}
		if left, _ := os.ReadDir(tmp); len(left) != 0 {
			t.Errorf("the refused launch left %v in its TMPDIR", left)
		}
	})
	if after := scratchDirs(t); len(after) > len(before) {
		t.Errorf("refused launches left %v", after)
	}
}

// scratchDirs are the launches' mount points in $TMPDIR.
func scratchDirs(t *testing.T) []string {
	m, err := filepath.Glob(filepath.Join(os.TempDir(), "softdev-exec.*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Faults, as on a cluster.

// TestKilledPeer: a server killed with SIGKILL mid-run: its client ends
// with "transport retry counter exceeded" (IBV_WC_RETRY_EXC_ERR) within
// the QP's retry budget and some slack, and the dead one's launcher
// leaves nothing: it exits with 137, its address takes a listener again,
// its mount point is gone. The program is ib_write_bw, whose client
// always has RDMA WRITEs outstanding: a peer that only waits for a
// receive (a pingpong's client between its send's ACK and the reply)
// would wait for ever, on an HCA as here (RC has no keepalive).
func TestKilledPeer(t *testing.T) {
	needVendor(t)
	port := freePort(t)
	args := []string{"-n", "100000000", "-s", "4096", "-p", strconv.Itoa(port)}
	addr := freeWireAddrs(t, "127.0.25.", 1)[0] // not one the other tests' devices take, see freeWireAddrs
	srv := start(t, launched(nil, addr, bin("ib_write_bw"), args...))
	if !listening(srv, port, time.Minute) {
		t.Fatalf("the server never listened:\n%s", srv.out.String())
	}
	cli := start(t, launched(nil, "", bin("ib_write_bw"), append(args, "127.0.0.1")...))
	prog := program(t, srv, "ib_write_bw")
	// Mid-run: once the client's device sends to the server's (a
	// connection established to the server's device's wire port).
	for end := time.Now().Add(time.Minute); !wireEstablished(t, addr); {
		if time.Now().After(end) {
			t.Fatalf("the client's device never reached the server's:\n%s\nserver:\n%s", cli.out.String(), srv.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	syscall.Kill(prog, syscall.SIGKILL)
	killed := time.Now()
	// timeout 14 (67 ms) times retry_cnt 7 plus the first try: 0.54 s.
	const bound = 8*67*time.Millisecond + 3*time.Second
	cli.wait(t, "the client of a killed server", bound+10*time.Second)
	took := time.Since(killed)
	if cli.err == nil || !strings.Contains(cli.out.String(), "Failed status 12") {
		t.Fatalf("the client of a killed server: %v\n%s\nwant it to fail with status 12 (IBV_WC_RETRY_EXC_ERR)", cli.err, cli.out.String())
	}
	if took > bound {
		t.Errorf("the client took %v to fail, bound %v", took, bound)
	}
	srv.wait(t, "the killed server's launcher", 10*time.Second)
	var ee *exec.ExitError
	if !errors.As(srv.err, &ee) || ee.ExitCode() != 128+int(syscall.SIGKILL) {
		t.Errorf("the killed server's launcher ended with %v, want exit status 137", srv.err)
	}
	if l, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(launch.WirePort))); err != nil {
		t.Errorf("%s:%d still taken after the launcher ended: %v", addr, launch.WirePort, err)
	} else {
		l.Close()
	}
	for _, d := range scratchDirs(t) {
		if strings.Contains(filepath.Base(d), "."+strconv.Itoa(srv.cmd.Process.Pid)+".") {
			t.Errorf("the launcher left %s", d)
		}
	}
	t.Logf("the client failed %v after the kill (bound %v)", took.Round(time.Millisecond), bound)
}

// TestStoppedPeer: a server stopped (SIGSTOP) and continued (SIGCONT)
// within the client's retry budget: the run completes.
func TestStoppedPeer(t *testing.T) {
	needVendor(t)
	port := freePort(t)
	args := []string{"-n", "3000", "-s", "64", "-p", strconv.Itoa(port)}
	srv := start(t, launched(nil, "", bin("ibv_rc_pingpong"), args...))
	if !listening(srv, port, time.Minute) {
		t.Fatalf("the server never listened:\n%s", srv.out.String())
	}
	cli := start(t, launched(nil, "", bin("ibv_rc_pingpong"), append(args, "127.0.0.1")...))
	prog := program(t, srv, "ibv_rc_pingpong")
	time.Sleep(100 * time.Millisecond)
	syscall.Kill(prog, syscall.SIGSTOP)
	time.Sleep(200 * time.Millisecond) // well within 8 × 67 ms
	syscall.Kill(prog, syscall.SIGCONT)
	cli.wait(t, "the client", 2*time.Minute)
	srv.wait(t, "the server", 10*time.Second)
	cli.ok(t, "the client of a stopped and continued server")
	srv.ok(t, "the stopped and continued server")
}

// program is the pid of the program a launch runs (the launcher's child,
// once it has become the program).
func program(t *testing.T, r *run, name string) int {
	t.Helper()
	end := time.Now().Add(30 * time.Second)
	for time.Now().Before(end) {
		procs, _ := filepath.Glob("/proc/[0-9]*/stat")
		for _, p := range procs {
			// pid (comm) state ppid …: comm may hold spaces, not ")".
			b, _ := os.ReadFile(p)
			open, shut := strings.IndexByte(string(b), '('), strings.LastIndexByte(string(b), ')')
			if open < 0 || shut < open {
				continue
			}
			f := strings.Fields(string(b[shut+1:]))
			if len(f) > 1 && f[1] == strconv.Itoa(r.cmd.Process.Pid) && string(b[open+1:shut]) == name {
				pid, _ := strconv.Atoi(strings.TrimSpace(string(b[:open])))
				return pid
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no %s under launcher %d", name, r.cmd.Process.Pid)
	return 0
}

// wireEstablished says whether the device at addr has a wire connection
// established (/proc/net/tcp: local address addr, the wire port at
// either end, state 01): one a peer opened to it, or one it opened to a
// peer, which then sends back on it.
func wireEstablished(t *testing.T, addr string) bool {
	ip := net.ParseIP(addr).To4()
	if ip == nil {
		t.Fatalf("%s: not an IPv4 address", addr)
	}
	local := fmt.Sprintf("%02X%02X%02X%02X:", ip[3], ip[2], ip[1], ip[0])
	wire := fmt.Sprintf(":%04X", launch.WirePort)
	b, _ := os.ReadFile("/proc/net/tcp")
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 3 && strings.HasPrefix(f[1], local) && (strings.HasSuffix(f[1], wire) || strings.HasSuffix(f[2], wire)) && f[3] == "01" {
			return true
		}
	}
	return false
}
