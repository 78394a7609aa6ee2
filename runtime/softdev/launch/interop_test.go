package launch_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCCPingpongInterop: examples/ccpingpong, the Go port of the
// vendor's cc_pingpong, talks to ibv_cc_pingpong in both directions with
// the same options, each side through the vendor's libibverbs on its own
// softdev device: the vendor's program verifies its results (-V), the Go
// port every result exactly.
func TestCCPingpongInterop(t *testing.T) {
	needVendor(t)
	goPort := filepath.Join(t.TempDir(), "ccpingpong")
	if out, err := exec.Command("go", "build", "-o", goPort, "../../../examples/ccpingpong").CombinedOutput(); err != nil {
		t.Fatalf("go build examples/ccpingpong: %v\n%s", err, out)
	}
	vendor := bin("ibv_cc_pingpong")
	for _, c := range [][]string{
		{"-c", "XOR", "-t", "UINT64", "-o", "5,9"},
		{"-c", "ADD", "-t", "INT64", "-o", "1,2"},
		{"-c", "MAX", "-t", "UINT64", "-o", "7,3"},
	} {
		for _, ev := range [][]string{nil, {"-e"}} {
			for _, sides := range []struct {
				name  string
				paths [2]string
			}{{"go-server", [2]string{goPort, vendor}}, {"vendor-server", [2]string{vendor, goPort}}} {
				args := append(append([]string{"-n", "200"}, c...), ev...)
				t.Run(sides.name+strings.Join(args, "_"), func(t *testing.T) {
					// -V for the vendor's side; the Go port always checks
					// (and takes -d to open the device through libibverbs).
					p := pair{prog: "ibv_cc_pingpong", paths: sides.paths, portFlag: "-p", d: 2 * time.Minute,
						args: args}
					srv, cli := p.runWith(t, func(i int) []string {
						if sides.paths[i] == goPort {
							return []string{"-d", "softdev0"}
						}
						return []string{"-V"}
					})
					for side, out := range map[string]string{"server": srv, "client": cli} {
						if strings.Contains(out, "failed") || !strings.Contains(out, "200 iters in") {
							t.Errorf("%s:\n%s", side, out)
						}
					}
					for _, out := range []string{srv, cli} {
						if strings.Contains(out, "checked against Go") {
							return
						}
					}
					t.Errorf("the Go port did not report its checks:\nserver:\n%s\nclient:\n%s", srv, cli)
				})
			}
		}
	}
}
