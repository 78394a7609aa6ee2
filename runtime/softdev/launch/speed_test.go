package launch_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/runtime/softdev/launch"
)

// Speed, side by side in one run (issue 24, section 6).
//
// BenchmarkPerftestVsTCP runs perftest's latency and bandwidth programs
// on softdev (server and client in two processes, each under its own
// softdev exec) and, right after each, the same exchange over a TCP
// socket pair between the same two addresses (two processes again: this
// test binary re-run as a server and a client, each end bound to the
// address its side's device uses), round after round, and prints the
// medians and the ratios against the targets. A latency row has
// two TCP twins: blocking reads, and reads that poll the socket as
// perftest polls its CQ; the target is judged against the polling one
// (the like of perftest's discipline), the other's ratio is printed
// beside it. A blocking ping-pong is 2.8 to 3.5 us one way when the
// kernel runs both ends on one vCPU and 7.5 to 11 us otherwise (this
// project's 2-core VM), and two polling programs, perftest's or TCP's,
// never share one: a polling TCP ping-pong is 4 to 5 us there. BenchmarkProviderPath
// compares, in one process under softdev exec, a post+poll round on the
// driver's device (through the vendor's libibverbs) with the same round on
// an in-process device. make bench-softdev runs both; TestSpeedSmoke runs
// each once with tiny counts (speed is never asserted in a test).

var (
	speedRounds    = flag.Int("speed.rounds", 5, "BenchmarkPerftestVsTCP: rounds (each runs every perftest row and its TCP twin once)")
	speedLatIters  = flag.Int("speed.lat-iters", 1000, "BenchmarkPerftestVsTCP: iterations of each latency run (perftest -n; TCP round trips)")
	speedBWIters   = flag.Int("speed.bw-iters", 5000, "BenchmarkPerftestVsTCP: messages of each bandwidth run (perftest -n; TCP writes)")
	postPollRounds = flag.Int("speed.postpoll-rounds", 201, "BenchmarkProviderPath: interleaved rounds (short ones: on a loaded host most of them then run undisturbed)")
	postPollN      = flag.Int("speed.postpoll-n", 2000, "BenchmarkProviderPath: post+poll rounds per way per round")
	postPollProcs  = flag.Int("speed.postpoll-procs", 3, "BenchmarkProviderPath: processes, one after another (each lays its code out anew); the verdict is the median of their ratios")
)

// speedAddrs are two loopback addresses no softdev serves now, for the
// server's and the client's devices and TCP ends: 127.0.24.x.
func speedAddrs(tb testing.TB) [2]string {
	a := freeWireAddrs(tb, "127.0.24.", 2)
	return [2]string{a[0], a[1]}
}

// freeWireAddrs are n loopback addresses prefix+k (k from 1 to 254) where
// nothing listens on the wire port now. The prefix keeps them out of the
// way of the other tests' devices, which take the first free address
// from 127.0.0.2: one of those would otherwise take an address just freed
// that a test goes on to look at.
func freeWireAddrs(tb testing.TB, prefix string, n int) []string {
	tb.Helper()
	var got []string
	for k := 1; k < 255 && len(got) < n; k++ {
		a := prefix + strconv.Itoa(k)
		l, err := net.Listen("tcp", net.JoinHostPort(a, strconv.Itoa(launch.WirePort)))
		if err != nil {
			continue
		}
		l.Close()
		got = append(got, a)
	}
	if len(got) < n {
		tb.Fatalf("no %d free addresses among %s1-254 (port %d taken on all but %v)", n, prefix, launch.WirePort, got)
	}
	return got
}

// speedRow is one line of the table: a perftest program at one size,
// and its TCP twin.
type speedRow struct {
	prog string
	size int
	bw   bool
	dev  []float64 // per round: t_typical (µs) or BW average (MB/s)
	tcp  []float64 // per round: round trip / 2 (µs, polling reads) or stream (MB/s)
	tcpB []float64 // latency, per round: round trip / 2 with blocking reads (µs)
}

func (r *speedRow) name() string { return fmt.Sprintf("%s/%s", r.prog, sizeName(r.size)) }

func sizeName(n int) string {
	if n >= 1024 && n%1024 == 0 {
		return fmt.Sprintf("%dKiB", n/1024)
	}
	return fmt.Sprintf("%dB", n)
}

// speedRows are the issue's: the latency programs at 2 B, 4 KiB and
// 64 KiB, the bandwidth programs at 64 KiB.
func speedRows() []*speedRow {
	var rows []*speedRow
	for _, prog := range []string{"ib_send_lat", "ib_write_lat"} {
		for _, size := range []int{2, 4096, 65536} {
			rows = append(rows, &speedRow{prog: prog, size: size})
		}
	}
	for _, prog := range []string{"ib_write_bw", "ib_send_bw"} {
		rows = append(rows, &speedRow{prog: prog, size: 65536, bw: true})
	}
	return rows
}

// speedParams say how much to run.
type speedParams struct {
	rounds, latIters, bwIters int
}

// speedTable runs every row's perftest and TCP twin, one after the other,
// rounds times.
func speedTable(tb testing.TB, addrs [2]string, p speedParams) []*speedRow {
	rows := speedRows()
	for range p.rounds {
		for _, r := range rows {
			iters := p.latIters
			if r.bw {
				iters = p.bwIters
			}
			r.dev = append(r.dev, perftestOnce(tb, r, addrs, iters))
			r.tcp = append(r.tcp, tcpOnce(tb, r, addrs, iters, !r.bw))
			if !r.bw {
				r.tcpB = append(r.tcpB, tcpOnce(tb, r, addrs, iters, false))
			}
		}
	}
	return rows
}

// perftestOnce runs the row's program as server (on addrs[0]'s device)
// and client (addrs[1]'s) and returns the client's figure: t_typical
// (latency) or BW average (bandwidth).
func perftestOnce(tb testing.TB, r *speedRow, addrs [2]string, iters int) float64 {
	tb.Helper()
	args := []string{"-s", strconv.Itoa(r.size), "-n", strconv.Itoa(iters)}
	srv, cli := pair{prog: r.prog, args: args, portFlag: "-p", addr: addrs, d: 10 * time.Minute}.perftest(tb)
	f := strings.Fields(perftestRow(cli))
	col := 4 // #bytes #iterations t_min t_max t_typical …
	if r.bw {
		col = 3 // #bytes #iterations BW_peak BW_average MsgRate
	}
	if len(f) <= col || f[0] != strconv.Itoa(r.size) {
		tb.Fatalf("%s %s: no result row in the client's output:\n%s\nserver:\n%s", r.prog, strings.Join(args, " "), cli, srv)
	}
	v, err := strconv.ParseFloat(f[col], 64)
	if err != nil || v <= 0 {
		tb.Fatalf("%s %s: result row %q: column %d is %q", r.prog, strings.Join(args, " "), perftestRow(cli), col, f[col])
	}
	return v
}

// peer is this test binary run as a benchmark peer.
func peer(tb testing.TB, c peerConfig) *exec.Cmd {
	tb.Helper()
	self, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	b, _ := json.Marshal(c)
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), speedPeerEnv+"="+string(b))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

var listeningLine = regexp.MustCompile(`(?m)^listening (\d+)$`)

// tcpOnce runs the row's TCP twin: a server process on addrs[0], a
// client process on addrs[1], the same message size and count; a
// ping-pong's reads poll if poll.
func tcpOnce(tb testing.TB, r *speedRow, addrs [2]string, iters int, poll bool) float64 {
	tb.Helper()
	c := peerConfig{Addr: addrs[0], Stream: r.bw, Poll: poll, Size: r.size, Iters: iters}
	c.Role = "tcp-server"
	srv := start(tb, peer(tb, c))
	var port string
	for end := time.Now().Add(time.Minute); port == ""; {
		if m := listeningLine.FindStringSubmatch(srv.out.String()); m != nil {
			port = m[1]
			break
		}
		select {
		case <-srv.done:
			tb.Fatalf("the TCP server ended (%v) before it listened:\n%s", srv.err, srv.out.String())
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(end) {
			tb.Fatalf("the TCP server did not listen within a minute:\n%s", srv.out.String())
		}
	}
	c.Role, c.Addr, c.Server = "tcp-client", addrs[1], net.JoinHostPort(addrs[0], port)
	cli := start(tb, peer(tb, c))
	cli.wait(tb, "the TCP client", 10*time.Minute)
	srv.wait(tb, "the TCP server", time.Minute)
	cli.ok(tb, "the TCP client")
	srv.ok(tb, "the TCP server")
	m := regexp.MustCompile(`(?m)^tcp: (.*)$`).FindStringSubmatch(cli.out.String())
	var res tcpResult
	if m == nil || json.Unmarshal([]byte(m[1]), &res) != nil {
		tb.Fatalf("the TCP client reported no result:\n%s", cli.out.String())
	}
	v := res.HalfRTTMicros
	if r.bw {
		v = res.MBps
	}
	if v <= 0 {
		tb.Fatalf("the TCP client reported %+v", res)
	}
	return v
}

// providerPath runs the post+poll peer under softdev exec and returns
// its report.
func providerPath(tb testing.TB, addr string, rounds, n int) postPollResult {
	tb.Helper()
	self, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	b, _ := json.Marshal(peerConfig{Role: "postpoll", Rounds: rounds, N: n})
	cmd := launched(nil, addr, self)
	cmd.Env = append(os.Environ(), speedPeerEnv+"="+string(b))
	r := start(tb, cmd)
	r.wait(tb, "the post+poll process", 20*time.Minute)
	r.ok(tb, "the post+poll process")
	m := regexp.MustCompile(`(?m)^postpoll: (.*)$`).FindStringSubmatch(r.out.String())
	var res postPollResult
	if m == nil || json.Unmarshal([]byte(m[1]), &res) != nil || len(res.NsOp) != 2 {
		tb.Fatalf("the post+poll process reported no result:\n%s", r.out.String())
	}
	if filepath.Base(res.Files[1]) != filepath.Base(vendor.Driver) || res.Files[0] == res.Files[1] {
		tb.Fatalf("post_send of the in-process device is in %q, of the provider's in %q: want this binary, then the driver %s",
			res.Files[0], res.Files[1], vendor.Driver)
	}
	return res
}

// ------------------------------------------------------------------
// The machine, rxe, the table.
// ------------------------------------------------------------------

// machine describes the host: CPUs, their model, the kernel.
func machine() string {
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		if m := regexp.MustCompile(`(?m)^model name\s*:\s*(.*)$`).FindSubmatch(b); m != nil {
			model = " (" + strings.TrimSpace(string(m[1])) + ")"
		}
	}
	return fmt.Sprintf("%d CPUs%s, Linux %s", runtime.NumCPU(), model, kernelRelease())
}

func kernelRelease() string {
	var u syscall.Utsname
	if syscall.Uname(&u) != nil {
		return "?"
	}
	var b []byte
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}

// loadavg is /proc/loadavg's first three fields.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

// rxeUnavailable says why the kernel's soft RoCE (rdma_rxe) cannot run
// here, or "" if it is built in, loaded, or could be loaded.
func rxeUnavailable() string {
	if _, err := os.Stat("/sys/module/rdma_rxe"); err == nil {
		return ""
	}
	rel := kernelRelease()
	var why []string
	if _, err := os.Stat("/proc/modules"); err != nil {
		why = append(why, "it has no loadable-module support (no /proc/modules)")
	}
	dir := filepath.Join("/lib/modules", rel)
	if _, err := os.Stat(dir); err != nil {
		why = append(why, "it has no modules directory ("+dir+" is missing)")
	} else if dep, err := os.ReadFile(filepath.Join(dir, "modules.dep")); err == nil && !strings.Contains(string(dep), "/rdma_rxe.ko") {
		why = append(why, "its modules do not include rdma_rxe ("+filepath.Join(dir, "modules.dep")+")")
	}
	if _, err := exec.LookPath("modprobe"); err != nil {
		why = append(why, "there is no modprobe")
	}
	if len(why) == 0 {
		return ""
	}
	return fmt.Sprintf("this kernel (%s) cannot load rdma_rxe and does not have it built in (no /sys/module/rdma_rxe): %s",
		rel, strings.Join(why, "; "))
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// spread is "median [min–max]" of v.
func spread(v []float64, format string) string {
	if len(v) == 1 {
		return fmt.Sprintf(format, v[0])
	}
	return fmt.Sprintf(format+" ["+format+"–"+format+"]", median(v), slices.Min(v), slices.Max(v))
}

// ratio is softdev's figure over TCP's (the ratio of the medians; TCP
// polling for latency), and target whether it meets the issue's: latency
// ≤ 2× TCP's round trip / 2, bandwidth ≥ 0.5× TCP's stream.
func (r *speedRow) ratio() float64 { return median(r.dev) / median(r.tcp) }

func (r *speedRow) target() (string, bool) {
	if r.bw {
		return "≥ 0.5", r.ratio() >= 0.5
	}
	return "≤ 2", r.ratio() <= 2
}

// speedReport formats the table.
func speedReport(rows []*speedRow, addrs [2]string, p speedParams, before, after, rxe string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "perftest on softdev (MLNX_OFED 4.9's libibverbs.so.1, the softdev driver; server %s, client %s) vs TCP between the same addresses\n", addrs[0], addrs[1])
	fmt.Fprintf(&b, "machine: %s; load average %s before, %s after\n", machine(), before, after)
	fmt.Fprintf(&b, "%d round(s), interleaved (perftest, TCP, perftest, TCP, …); latency -n %d, bandwidth -n %d; median [min–max] over the rounds\n",
		p.rounds, p.latIters, p.bwIters)
	fmt.Fprintf(&b, "latency: perftest's t_typical (median round trip / 2) vs the median TCP round trip / 2 (ping-pong, TCP_NODELAY), µs:\n")
	fmt.Fprintf(&b, "  TCP: reads that poll the socket (recv MSG_DONTWAIT), as perftest polls its CQ; the ratio and target are against it\n")
	fmt.Fprintf(&b, "  TCP blocking: blocking reads; last column: softdev's ratio to it\n")
	fmt.Fprintf(&b, "bandwidth: perftest's BW average vs a TCP stream of the same messages (bytes / time, blocking), MB/s (2^20 B/s)\n")
	fmt.Fprintf(&b, "%-13s %-7s %-26s %-26s %-8s %-7s %-41s %s\n", "test", "size", "softdev", "TCP", "ratio", "target", "", "TCP blocking (ratio)")
	for _, r := range rows {
		f := "%.2f"
		if r.bw {
			f = "%.0f"
		}
		var per []float64
		for i := range r.dev {
			per = append(per, r.dev[i]/r.tcp[i])
		}
		tgt, ok := r.target()
		verdict := "met"
		if !ok {
			verdict = "MISSED"
		}
		blocking := ""
		if len(r.tcpB) > 0 {
			blocking = fmt.Sprintf("%s (%.2f)", spread(r.tcpB, f), median(r.dev)/median(r.tcpB))
		}
		fmt.Fprintf(&b, "%-13s %-7s %-26s %-26s %-8s %-7s %-41s %s\n", r.prog, sizeName(r.size), spread(r.dev, f), spread(r.tcp, f),
			fmt.Sprintf("%.2f", r.ratio()), tgt, fmt.Sprintf("%s (per round %s)", verdict, spread(per, "%.2f")), blocking)
	}
	if rxe != "" {
		fmt.Fprintf(&b, "rxe: not run: %s\n", rxe)
	} else {
		fmt.Fprintf(&b, "rxe: rdma_rxe is available on this kernel, but this benchmark does not run it (it needs rdma-core's user space: apt-get install rdma-core ibverbs-providers perftest, and rdma link add): not measured\n")
	}
	return b.String()
}

// postPollReport formats the provider-path comparison of processes run
// one after another. Their verdict is the median of their ratios: a
// process's code layout alone can move its ratio (one process of the
// single-process version came out at 1.065 where nine others gave
// 0.991-1.010).
func postPollReport(res []postPollResult, rounds, n int) string {
	var per []float64
	for _, r := range res {
		for i := range r.Rounds[0] {
			per = append(per, r.Rounds[1][i]/r.Rounds[0][i]) // sorted each: the k-th fastest against the k-th fastest
		}
	}
	ratios := processRatios(res)
	ratio := median(ratios)
	verdict := "met"
	if ratio > 1.05 {
		verdict = "MISSED"
	}
	each := make([]string, len(ratios))
	for i, r := range ratios {
		each[i] = fmt.Sprintf("%.3f", r)
	}
	return fmt.Sprintf("post+poll round (PostRecv, a signaled 8-byte SEND, PollCQ on both CQs; two RC QPs of one device), %d processes one after another, each under softdev exec timing %d interleaved rounds of %d; medians of the processes' medians [min–max]:\n"+
		"  in-process device (softdev.Open(Autonomous())): %s ns/op\n"+
		"  the driver's device (libibverbs):                %s ns/op\n"+
		"  provider / in-process: %.3f, the median of the processes' %s (target ≤ 1.05: %s; k-th fastest rounds: %s)\n",
		len(res), rounds, n, spread(processMedians(res, 0), "%.0f"), spread(processMedians(res, 1), "%.0f"),
		ratio, strings.Join(each, ", "), verdict, spread(per, "%.3f"))
}

// processMedians is each process's median for way i (0: in-process, 1:
// the provider).
func processMedians(res []postPollResult, i int) []float64 {
	var m []float64
	for _, r := range res {
		m = append(m, r.NsOp[i])
	}
	return m
}

// processRatios is each process's provider / in-process.
func processRatios(res []postPollResult) []float64 {
	var q []float64
	for _, r := range res {
		q = append(q, r.NsOp[1]/r.NsOp[0])
	}
	return q
}

// ------------------------------------------------------------------
// Benchmarks and the smoke test.
// ------------------------------------------------------------------

// BenchmarkPerftestVsTCP prints the table (make bench-softdev). It
// ignores -benchtime: -speed.rounds, -speed.lat-iters and
// -speed.bw-iters say how much; each row reports its medians and ratio
// as a sub-benchmark.
func BenchmarkPerftestVsTCP(b *testing.B) {
	needVendor(b)
	addrs := speedAddrs(b)
	p := speedParams{rounds: *speedRounds, latIters: *speedLatIters, bwIters: *speedBWIters}
	before := loadavg()
	rows := speedTable(b, addrs, p)
	after := loadavg()
	for _, r := range rows {
		b.Run(r.name(), func(b *testing.B) {
			unit, perMessage := "us", median(r.dev)*1e3 // ns/op: softdev's time per message
			if r.bw {
				unit, perMessage = "MB/s", float64(r.size)/(median(r.dev)*(1<<20))*1e9
			}
			b.ReportMetric(perMessage, "ns/op")
			b.ReportMetric(median(r.dev), "softdev-"+unit)
			b.ReportMetric(median(r.tcp), "tcp-"+unit)
			if len(r.tcpB) > 0 {
				b.ReportMetric(median(r.tcpB), "tcp-blocking-"+unit)
			}
			b.ReportMetric(r.ratio(), "softdev/tcp")
		})
	}
	fmt.Print(speedReport(rows, addrs, p, before, after, rxeUnavailable()))
}

// BenchmarkProviderPath prints the post+poll comparison: the driver's
// device through libibverbs against an in-process device, interleaved in
// each of a few processes. It ignores -benchtime (-speed.postpoll-rounds,
// -speed.postpoll-n, -speed.postpoll-procs).
func BenchmarkProviderPath(b *testing.B) {
	needVendor(b)
	addrs := speedAddrs(b)
	var res []postPollResult
	for range *postPollProcs {
		res = append(res, providerPath(b, addrs[0], *postPollRounds, *postPollN))
	}
	b.ReportMetric(median(processMedians(res, 0)), "in-process-ns/op")
	b.ReportMetric(median(processMedians(res, 1)), "provider-ns/op")
	b.ReportMetric(median(processRatios(res)), "provider/in-process")
	fmt.Printf("machine: %s; load average %s\n", machine(), loadavg())
	fmt.Print(postPollReport(res, *postPollRounds, *postPollN))
}

// TestSpeedSmoke runs both benchmarks once with tiny counts, so that
// make test keeps them working: every row must come back with a figure
// from perftest and from TCP, and the post+poll process must check every
// completion on both devices. The figures mean nothing at these counts
// and are not judged.
func TestSpeedSmoke(t *testing.T) {
	needVendor(t)
	addrs := speedAddrs(t)
	p := speedParams{rounds: 1, latIters: 20, bwIters: 20}
	rows := speedTable(t, addrs, p)
	if len(rows) != 8 {
		t.Fatalf("%d rows, want 8", len(rows))
	}
	for _, r := range rows {
		blocking := 1
		if r.bw {
			blocking = 0
		}
		if len(r.dev) != 1 || len(r.tcp) != 1 || len(r.tcpB) != blocking {
			t.Errorf("%s: %d perftest, %d TCP and %d blocking TCP figures, want 1, 1 and %d", r.name(), len(r.dev), len(r.tcp), len(r.tcpB), blocking)
		}
	}
	t.Log("\n" + speedReport(rows, addrs, p, loadavg(), loadavg(), rxeUnavailable()))
	var res []postPollResult
	for range 2 {
		r := providerPath(t, addrs[0], 3, 100)
		for i, name := range []string{"in-process", "provider"} {
			if r.Names[i] != name || len(r.Rounds[i]) != 3 || r.NsOp[i] <= 0 {
				t.Errorf("post+poll %s: %q, rounds %v, median %v", name, r.Names[i], r.Rounds[i], r.NsOp[i])
			}
		}
		res = append(res, r)
	}
	t.Log("\n" + postPollReport(res, 3, 100))
}
