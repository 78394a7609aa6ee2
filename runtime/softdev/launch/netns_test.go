package launch_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/internal/netns"
)

// TestNamespaces: the pingpongs across two network namespaces joined by a
// veth, each side's device at its namespace's address: LIDs resolve
// within the subnet, GIDs name the peer.
func TestNamespaces(t *testing.T) {
	needVendor(t)
	hosts := netns.Hosts(t, 2, "10.217.4")
	for _, prog := range []string{"ibv_rc_pingpong", "ibv_uc_pingpong", "ibv_ud_pingpong", "ibv_srq_pingpong"} {
		for _, opts := range [][]string{{}, {"-g", "0"}, {"-e"}} {
			args := append([]string{"-n", pingpongIters, "-s", "1024"}, opts...)
			t.Run(prog+strings.Join(args, "_"), func(t *testing.T) {
				p := pair{prog: prog, args: args, portFlag: "-p", d: 2 * time.Minute,
					wrap: [2][]string{hosts[0].Wrap(), hosts[1].Wrap()},
					addr: [2]string{hosts[0].Addr, hosts[1].Addr}, host: hosts[0].Addr}
				srv, cli := p.run(t)
				for side, out := range map[string]string{"server": srv, "client": cli} {
					if !strings.Contains(out, pingpongIters+" iters in") {
						t.Errorf("%s %s:\n%s", prog, side, out)
					}
				}
			})
		}
	}
}

// TestAsyncwatch: ibv_asyncwatch, reading the context's async_fd through
// the library, prints the port's events when the link under the device's
// address goes down and comes back.
func TestAsyncwatch(t *testing.T) {
	needVendor(t)
	hosts := netns.Hosts(t, 2, "10.217.5")
	r := start(t, launched(hosts[0].Wrap(), hosts[0].Addr, bin("ibv_asyncwatch")))
	saw := func(what *regexp.Regexp) {
		t.Helper()
		end := time.Now().Add(10 * time.Second)
		for !what.MatchString(r.out.String()) {
			select {
			case <-r.done:
				t.Fatalf("ibv_asyncwatch ended (%v) before it printed %q:\n%s", r.err, what, r.out.String())
			default:
			}
			if time.Now().After(end) {
				t.Fatalf("ibv_asyncwatch did not print %q within 10 s:\n%s", what, r.out.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	saw(regexp.MustCompile(`softdev0: async event FD \d+`))
	hosts[0].SetLink(t, false)
	saw(regexp.MustCompile(`event_type IBV_EVENT_PORT_ERR \(10\), port 1`))
	hosts[0].SetLink(t, true)
	saw(regexp.MustCompile(`event_type IBV_EVENT_PORT_ACTIVE \(9\), port 1`))
	r.kill()
}
