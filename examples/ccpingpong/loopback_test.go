//go:build linux && cgo

package main

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/runtime/softdev"
)

// pingCase is one exchange, and what each side must print last. The
// results are worked out by hand: with ADD and -o a,b on both sides the
// k-th message is a+k·b, so the client (which receives the even ones)
// ends with a+2n·b and the server with a+(2n-1)·b.
type pingCase struct {
	name       string
	srv, cli   []string // flags of each side
	iters, len int      // -n, bytes per message
	srvLast    string
	cliLast    string
}

var pingCases = []pingCase{
	{"add-int64", []string{"-c", "ADD", "-t", "INT64", "-o", "1,2"}, []string{"-c", "ADD", "-t", "INT64", "-o", "1,2"}, 1000, 8,
		"1000 results of ADD over INT64 checked against Go; the last: 3999", "the last: 4001"},
	// 2³¹-1 + k: the 64-bit sums leave INT32's range; shown narrowed.
	{"add-int32-wraps", []string{"-c", "ADD", "-t", "INT32", "-o", "2147483647,1"}, []string{"-c", "ADD", "-t", "INT32", "-o", "2147483647,1"}, 3, 8,
		"the last: -2147483644", "the last: -2147483643"},
	// Different operands on each side: min(9,3)=3 from the client, then
	// min(3,-7)=-7 from the server, and -7 from then on.
	{"min-int64-w", []string{"-c", "MIN", "-t", "INT64", "-o", "5,-7", "-w"}, []string{"-c", "MIN", "-t", "INT64", "-o", "9,3", "-w"}, 200, 16,
		"200 results of MIN over INT64 checked against Go; the last: -7", "the last: -7"},
	// 7 from the client, then max(7, 10 of the server's): 10 from the server.
	{"maxloc-uint64", []string{"-c", "MAXLOC", "-t", "UINT64", "-o", "0,10"}, []string{"-c", "MAXLOC", "-t", "UINT64", "-o", "0,7"}, 50, 16,
		"the last: 10 from the server", "the last: 10 from the server"},
	{"max-float64-w", []string{"-c", "MAX", "-t", "FLOAT64", "-o", "-1.5,-2.25", "-w"}, []string{"-c", "MAX", "-t", "FLOAT64", "-o", "-8,-0.5"}, 100, 16,
		"the last: -0.5", "the last: -0.5"},
	// Logical XOR of truth values: the client sends 1^1=0, the server
	// answers 0^1=1, every time.
	{"xor-int32", []string{"-c", "XOR", "-t", "INT32", "-o", "5,1"}, []string{"-c", "XOR", "-t", "INT32", "-o", "5,1"}, 100, 8,
		"the last: 0", "the last: 1"},
	{"band-uint16", []string{"-c", "BAND", "-t", "UINT16", "-o", "0xffff,0x0ff0,0x3cf3"}, []string{"-c", "BAND", "-t", "UINT16", "-o", "0xffff,0x0ff0"}, 20, 8,
		"the last: 0x0cf0", "the last: 0x0cf0"},
	// 0.5 + k·0.25, exact in FLOAT32 and FLOAT64 alike: 1000.5 and 1000.25.
	{"add-float32", []string{"-c", "ADD", "-t", "FLOAT32", "-o", "0.5,0.25", "-r", "7"}, []string{"-c", "ADD", "-t", "FLOAT32", "-o", "0.5,0.25", "-r", "3"}, 2000, 8,
		"the last: 1000.25", "the last: 1000.5"},
	// Plain SENDs: 64 KiB in 64 packets of -m 1024; and 16 bytes with -w.
	{"plain-64k", []string{"-s", "65536", "-r", "4"}, []string{"-s", "65536"}, 30, 65536,
		"30 messages of 65536 bytes received and checked byte for byte", "30 messages of 65536 bytes"},
	{"plain-16-w", []string{"-s", "16", "-w", "-r", "1"}, []string{"-s", "16", "-w", "-m", "1024"}, 300, 16,
		"300 messages of 16 bytes", "300 messages of 16 bytes"},
}

// TestTwoProcesses runs each case as a server and a client process on
// this host's loopback, each device at a loopback address of its own,
// and checks exit codes, the closing lines and the last result.
func TestTwoProcesses(t *testing.T) {
	for _, c := range pingCases {
		t.Run(c.name, func(t *testing.T) {
			n := []string{"-n", fmt.Sprint(c.iters)}
			srv, cli := pair(t, host{}, host{}, append(n, c.srv...), append(n, c.cli...), 60*time.Second)
			checkRun(t, srv, c.iters, c.len, c.srvLast)
			checkRun(t, cli, c.iters, c.len, c.cliLast)
		})
	}
}

// TestAddresses: the device's address from -addr (the server) and from
// $VERBSEXP_SOFTDEV_ADDR (the client), each side's GID printed and
// learned by the other, the handshake at the server's address and -p;
// and -v, every result as it arrives.
func TestAddresses(t *testing.T) {
	a, b := rand.IntN(200)+20, rand.IntN(250)+2
	srvIP, cliIP := fmt.Sprintf("127.213.%d.%d", a, b), fmt.Sprintf("127.213.%d.%d", a+1, b)
	flags := []string{"-n", "10", "-p", "18600", "-c", "BXOR", "-t", "UINT64", "-o", "0x5,0x3"}
	srv, cli := pair(t, host{}, host{env: []string{softdev.AddrEnv + "=" + cliIP}}, append([]string{"-addr", srvIP}, flags...), append(flags, "-v"), 30*time.Second)
	// The client sends 5^3=6, the server answers 6^3=5, and so on.
	checkRun(t, srv, 10, 8, "the last: 0x0000000000000006")
	checkRun(t, cli, 10, 8, "the last: 0x0000000000000005")
	so, _ := srv.output()
	co, _ := cli.output()
	if n := strings.Count(co, "incoming data is 0x0000000000000005\n"); n != 10 || strings.Contains(so, "incoming") {
		t.Errorf("-v on the client: %d lines of incoming data, want 10 (and none from the server):\n%s", n, co)
	}
	checkAddresses(t, srv, cli, srvIP, cliIP, 18600)
}

// TestRefusals: sides that do not agree both fail at the handshake with
// the reason, before any message; a client without a server says so.
func TestRefusals(t *testing.T) {
	srv, cli := pair(t, host{}, host{}, []string{"-n", "10", "-c", "ADD", "-t", "INT64", "-o", "1"},
		[]string{"-n", "20", "-c", "ADD", "-t", "UINT64", "-o", "1", "-m", "512"}, 30*time.Second)
	want := "the server runs -n 10, -m 1024, -c ADD -t INT64, the client -n 20, -m 512, -c ADD -t UINT64: give both the same"
	for _, p := range []*proc{srv, cli} {
		_, e := p.output()
		if p.code != 1 || !strings.Contains(e, want) {
			t.Errorf("want exit 1 and %q: %v", want, p)
		}
	}
	if _, e := cli.output(); !strings.Contains(e, "the server refused: ") {
		t.Errorf("the client does not say the server refused: %v", cli)
	}

	srv, cli = pair(t, host{}, host{}, []string{"-s", "64"}, []string{"-s", "128"}, 30*time.Second)
	for _, p := range []*proc{srv, cli} {
		if _, e := p.output(); p.code != 1 || !strings.Contains(e, "-s 64, the client -s 128") {
			t.Errorf("plain messages of two sizes: %v", p)
		}
	}
}

// TestUnreachablePeer: a client told a GID where no device listens (-G)
// gets IBV_WC_RETRY_EXC_ERR for its first SEND after timeout × retry_cnt
// and exits 1; its server would wait for ever, as with an HCA, and is
// killed.
func TestUnreachablePeer(t *testing.T) {
	srv := start(t, t.Context(), "server", nil, nil, "-n", "5")
	addr := srv.waitListening(t, 20*time.Second)
	cli := start(t, t.Context(), "client", nil, nil, "-n", "5", "-G", "::ffff:127.213.0.1", addr)
	began := time.Now()
	if code := cli.wait(t, 30*time.Second); code != 1 {
		t.Fatalf("want exit 1: %v", cli)
	}
	if _, e := cli.output(); !strings.Contains(e, "SEND completed with status WCRetryExcErr (12)") {
		t.Fatalf("want RETRY_EXC_ERR: %v", cli)
	}
	t.Logf("the client failed %v after it started", time.Since(began).Round(time.Millisecond))
}
