//go:build linux && cgo

package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/runtime/softdev"
)

// Two network namespaces joined by a veth pair are two hosts on one
// machine: each side's device is at its namespace's address, and every
// packet between them crosses the veth. The addresses exist only inside
// the namespaces, which the test creates and always deletes.
const (
	nsPrefix = "ccpingpong-"
	nsNet    = "10.213.7."
)

// netnsHosts creates the two namespaces and the veth pair, and returns
// where the server and the client run. It skips, saying why, where that
// cannot be done.
func netnsHosts(t *testing.T) (srv, cli host) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: the network namespace test needs root (ip netns add); CI runs it as root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("SKIPPED: the network namespace test needs iproute2's ip (apt-get install iproute2; .ci/run installs it)")
	}
	sweepNetns(t)
	var r [4]byte
	rand.Read(r[:])
	tag := fmt.Sprintf("%d-%s", os.Getpid(), hex.EncodeToString(r[:]))
	names := [2]string{nsPrefix + tag + "-s", nsPrefix + tag + "-c"}
	veth := [2]string{"ccs" + hex.EncodeToString(r[:]), "ccc" + hex.EncodeToString(r[:])} // 11 bytes: under IFNAMSIZ
	addrs := [2]string{nsNet + "1", nsNet + "2"}
	for _, n := range names {
		if out, err := exec.Command("ip", "netns", "add", n).CombinedOutput(); err != nil {
			t.Skipf("SKIPPED: ip netns add %s: %v: %s (no CAP_SYS_ADMIN here?)", n, err, out)
		}
		t.Cleanup(func() { deleteNetns(t, n) })
	}
	ip(t, "link", "add", veth[0], "netns", names[0], "type", "veth", "peer", "name", veth[1], "netns", names[1])
	for i, n := range names {
		ip(t, "-n", n, "addr", "add", addrs[i]+"/24", "dev", veth[i])
		ip(t, "-n", n, "link", "set", "lo", "up")
		ip(t, "-n", n, "link", "set", veth[i], "up")
	}
	hostOf := func(i int) host {
		return host{prefix: []string{"ip", "netns", "exec", names[i]}, env: []string{softdev.AddrEnv + "=" + addrs[i]}}
	}
	return hostOf(0), hostOf(1)
}

func ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// deleteNetns kills what still runs in namespace n (only this test's
// processes can be there) and deletes it, which deletes its veth end.
func deleteNetns(t *testing.T, n string) {
	if out, err := exec.Command("ip", "netns", "pids", n).Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	for try := 0; ; try++ {
		out, err := exec.Command("ip", "netns", "del", n).CombinedOutput()
		if err == nil {
			return
		}
		if try == 20 {
			t.Errorf("ip netns del %s: %v: %s (delete it by hand)", n, err, out)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var staleNetns = regexp.MustCompile(`^` + nsPrefix + `(\d+)-[0-9a-f]{8}-[sc]$`)

// sweepNetns deletes namespaces this test left behind in runs that died
// before their cleanup (their pid is gone).
func sweepNetns(t *testing.T) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		m := staleNetns.FindStringSubmatch(f[0])
		if m == nil {
			continue
		}
		if pid, _ := strconv.Atoi(m[1]); pid != os.Getpid() && syscall.Kill(pid, 0) == syscall.ESRCH {
			t.Logf("deleting %s, left by process %d", f[0], pid)
			deleteNetns(t, f[0])
		}
	}
}

// TestNamespaces runs server and client in two namespaces joined by a
// veth pair (MTU 1500: the port's active MTU is 1024): calc results with
// the manager's waits, plain messages of 64 KiB in 64 packets each, and
// a path MTU the port does not have, refused by name.
func TestNamespaces(t *testing.T) {
	srvHost, cliHost := netnsHosts(t)
	n := []string{"-n", "500"}
	srv, cli := pair(t, srvHost, cliHost, append(n, "-c", "ADD", "-t", "INT64", "-o", "1,2", "-w"), append(n, "-c", "ADD", "-t", "INT64", "-o", "1,2", "-w"), 60*time.Second)
	checkRun(t, srv, 500, 8, "500 results of ADD over INT64 checked against Go; the last: 1999")
	checkRun(t, cli, 500, 8, "the last: 2001")
	checkAddresses(t, srv, cli, nsNet+"1", nsNet+"2", 18515)

	srv, cli = pair(t, srvHost, cliHost, []string{"-n", "40", "-s", "65536"}, []string{"-n", "40", "-s", "65536"}, 60*time.Second)
	checkRun(t, srv, 40, 65536, "40 messages of 65536 bytes received and checked byte for byte")
	checkRun(t, cli, 40, 65536, "40 messages of 65536 bytes")

	ctx := t.Context()
	p := start(t, ctx, "server", srvHost.prefix, srvHost.env, "-m", "2048")
	if code := p.wait(t, 30*time.Second); code != 1 {
		t.Fatalf("-m 2048 on a veth: want exit 1: %v", p)
	}
	if _, e := p.output(); !strings.Contains(e, "-m 2048: port 1's active MTU is 1024") {
		t.Fatalf("-m 2048 on a veth: %v", p)
	}
}
