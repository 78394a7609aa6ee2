// Package netns makes hosts for tests that cross a network: network
// namespaces joined by veth pairs, with addresses that exist only inside
// them. A test gets them from Hosts, runs processes in them through
// Host.Wrap, and they are deleted when it ends (and, if a run died
// before its cleanup, at the next run). It needs root and iproute2; a
// test without them is skipped, saying so.
package netns

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
)

const prefix = "vxns-"

// Host is one namespace: its name, the address of its veth end, and the
// name of that end.
type Host struct {
	Name, Addr, Dev string
}

// Wrap is the command that runs a program in the namespace.
func (h Host) Wrap() []string { return []string{"ip", "netns", "exec", h.Name} }

// SetLink takes the host's veth end down or up: its link, as a cable
// pulled out and plugged back.
func (h Host) SetLink(t testing.TB, up bool) {
	t.Helper()
	state := "down"
	if up {
		state = "up"
	}
	run(t, "-n", h.Name, "link", "set", h.Dev, state)
}

// Hosts creates n namespaces (n ≥ 2) on one subnet, subnet.1, subnet.2,
// …: a veth pair for two, a bridge in a namespace of its own for more.
// subnet is three octets of a private range ("10.213.7").
func Hosts(t testing.TB, n int, subnet string) []Host {
	t.Helper()
	tag, r, add := start(t)
	hosts := make([]Host, n)
	for i := range hosts {
		hosts[i] = Host{Name: fmt.Sprintf("%s%s-%d", prefix, tag, i), Addr: fmt.Sprintf("%s.%d", subnet, i+1),
			Dev: fmt.Sprintf("vx%s%d", hex.EncodeToString(r[:3]), i)}
		add(hosts[i].Name)
	}
	if n == 2 {
		run(t, "link", "add", hosts[0].Dev, "netns", hosts[0].Name, "type", "veth", "peer", "name", hosts[1].Dev, "netns", hosts[1].Name)
	} else {
		br := fmt.Sprintf("%s%s-br", prefix, tag)
		add(br)
		run(t, "-n", br, "link", "add", "br0", "type", "bridge")
		run(t, "-n", br, "link", "set", "br0", "up")
		for i, h := range hosts {
			peer := fmt.Sprintf("vb%s%d", hex.EncodeToString(r[:3]), i)
			run(t, "link", "add", h.Dev, "netns", h.Name, "type", "veth", "peer", "name", peer, "netns", br)
			run(t, "-n", br, "link", "set", peer, "master", "br0")
			run(t, "-n", br, "link", "set", peer, "up")
		}
	}
	for _, h := range hosts {
		run(t, "-n", h.Name, "addr", "add", h.Addr+"/24", "dev", h.Dev)
		run(t, "-n", h.Name, "link", "set", "lo", "up")
		run(t, "-n", h.Name, "link", "set", h.Dev, "up")
	}
	return hosts
}

// Isolated creates one namespace with nothing but its loopback
// interface, up: a host of its own, for tests that hold or fill this
// host's loopback addresses and ports (wildcard listeners, hundreds of
// devices) without touching those of anything else running here. Its
// Addr is 127.0.0.1 and its Dev lo.
func Isolated(t testing.TB) Host {
	t.Helper()
	tag, _, add := start(t)
	h := Host{Name: fmt.Sprintf("%s%s-0", prefix, tag), Addr: "127.0.0.1", Dev: "lo"}
	add(h.Name)
	run(t, "-n", h.Name, "link", "set", "lo", "up")
	return h
}

// start checks that namespaces can be made here (skipping the test,
// saying why, if not), deletes those that dead runs left, and returns
// this run's tag (in every name it makes), random bytes for device
// names, and add, which creates a namespace that the test's end deletes.
func start(t testing.TB) (tag string, r [4]byte, add func(name string)) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: network namespaces need root (ip netns add); CI runs this as root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("SKIPPED: network namespaces need iproute2's ip (apt-get install iproute2; .ci/run installs it)")
	}
	sweep(t)
	rand.Read(r[:])
	tag = fmt.Sprintf("%d-%s", os.Getpid(), hex.EncodeToString(r[:]))
	add = func(name string) {
		t.Helper()
		if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
			t.Skipf("SKIPPED: ip netns add %s: %v: %s (no CAP_SYS_ADMIN here?)", name, err, out)
		}
		t.Cleanup(func() { del(t, name) })
	}
	return tag, r, add
}

func run(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// del kills what still runs in namespace name (only the test's processes
// can be there) and deletes it, which deletes its veth ends.
func del(t testing.TB, name string) {
	if out, err := exec.Command("ip", "netns", "pids", name).Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	for try := 0; ; try++ {
		out, err := exec.Command("ip", "netns", "del", name).CombinedOutput()
		if err == nil {
			return
		}
		if try == 20 {
			t.Errorf("ip netns del %s: %v: %s (delete it by hand)", name, err, out)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var stale = regexp.MustCompile(`^` + prefix + `(\d+)-[0-9a-f]{8}-(\d+|br)$`)

// sweep deletes namespaces that runs which died before their cleanup
// left behind (their process is gone).
func sweep(t testing.TB) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		m := stale.FindStringSubmatch(f[0])
		if m == nil {
			continue
		}
		if pid, _ := strconv.Atoi(m[1]); pid != os.Getpid() && syscall.Kill(pid, 0) == syscall.ESRCH {
			t.Logf("deleting %s, left by process %d", f[0], pid)
			del(t, f[0])
		}
	}
}
