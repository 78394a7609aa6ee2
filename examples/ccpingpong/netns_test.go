//go:build linux && cgo

package main

import (
	"strings"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/internal/netns"
	"github.com/verbsexp/verbsexp/runtime/softdev"
)

// Two network namespaces joined by a veth pair are two hosts on one
// machine: each side's device is at its namespace's address, and every
// packet between them crosses the veth (internal/netns creates and
// always deletes them).
const nsNet = "10.213.7."

// netnsHosts creates the two namespaces and returns where the server and
// the client run. It skips, saying why, where that cannot be done.
func netnsHosts(t *testing.T) (srv, cli host) {
	t.Helper()
	hs := netns.Hosts(t, 2, strings.TrimSuffix(nsNet, "."))
	hostOf := func(h netns.Host) host {
		return host{prefix: h.Wrap(), env: []string{softdev.AddrEnv + "=" + h.Addr}}
	}
	return hostOf(hs[0]), hostOf(hs[1])
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
