package launch_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// run is one vendor program run through `softdev exec`.
type run struct {
	cmd  *exec.Cmd
	out  output
	err  error
	done chan struct{}
}

// output collects what a run prints, readable while it runs.
type output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// launched is the command line `softdev exec … -- prog args` (prog a
// path), in a network namespace when wrap (ip netns exec NS) is given.
func launched(wrap []string, addr, prog string, args ...string) *exec.Cmd {
	line := append([]string{}, wrap...)
	line = append(line, vendor.Softdev, "exec", "-ofed", vendor.Root, "-driver", vendor.Driver)
	if addr != "" {
		line = append(line, "-addr", addr)
	}
	line = append(line, "--", prog)
	line = append(line, args...)
	cmd := exec.Command(line[0], line[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// start starts cmd, its output collected.
func start(t testing.TB, cmd *exec.Cmd) *run {
	t.Helper()
	r := &run{cmd: cmd, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &r.out, &r.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", strings.Join(cmd.Args, " "), err)
	}
	go func() { r.err = cmd.Wait(); close(r.done) }()
	t.Cleanup(func() { r.kill(); <-r.done })
	return r
}

// kill ends the run and everything it started (its process group).
func (r *run) kill() { syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL) }

// wait waits for the run to end, up to d; at the deadline it is killed
// and the test fails, with its output.
func (r *run) wait(t testing.TB, what string, d time.Duration) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(d):
		r.kill()
		<-r.done
		t.Fatalf("%s did not end within %v (killed); its output:\n%s", what, d, r.out.String())
	}
}

// ok fails the test unless the run exited 0.
func (r *run) ok(t testing.TB, what string) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("%s: %v; its output:\n%s", what, r.err, r.out.String())
	}
}

// freePort is a TCP port nothing listens on now, for a program's own
// handshake (-p): tests run beside other tests.
//
// It is drawn at random below the kernel's ephemeral range (32768 and
// up), which every program that binds port 0 draws from: a port a test
// found free is not handed to another process a moment later.
func freePort(t testing.TB) int {
	t.Helper()
	for range 100 {
		port := 10000 + rand.IntN(20000)
		l, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
		if err == nil {
			l.Close()
			return port
		}
	}
	t.Fatal("no free TCP port in 10000-29999 after 100 tries")
	return 0
}

// listening waits until some socket listens on TCP port (any address),
// read from /proc/PID/net/tcp{,6} (the run's network namespace's) so that
// nothing connects to the server before its client does; false if the
// run ended first or after d.
func listening(r *run, port int, d time.Duration) bool {
	end := time.Now().Add(d)
	hex := fmt.Sprintf(":%04X ", port)
	for time.Now().Before(end) {
		select {
		case <-r.done:
			return false
		default:
		}
		for _, f := range []string{"tcp", "tcp6"} {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", r.cmd.Process.Pid, f))
			sc := bufio.NewScanner(bytes.NewReader(b))
			for sc.Scan() {
				fields := strings.Fields(sc.Text())
				if len(fields) > 3 && strings.HasSuffix(fields[1]+" ", hex) && fields[3] == "0A" {
					return true
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// pair runs a vendor program's server and client, each through its own
// softdev exec (its own device), the client given the server's host, and
// fails the test unless both exit 0 within d. wrap[0] and wrap[1], if
// given, put them in network namespaces; host is where the client finds
// the server's handshake.
type pair struct {
	prog     string
	paths    [2]string // the server's and the client's programs, if not the vendor's prog
	args     []string  // both sides
	portFlag string    // the flag that sets the handshake port: -p
	wrap     [2][]string
	addr     [2]string
	host     string
	d        time.Duration
}

func (p pair) run(t testing.TB) (server, client string) {
	t.Helper()
	return p.runWith(t, nil)
}

// runWith is run with more arguments for one side (extra(0): the
// server's, extra(1): the client's), before the common ones.
func (p pair) runWith(t testing.TB, extra func(side int) []string) (server, client string) {
	t.Helper()
	server, client, err := p.tryWith(t, extra)
	if err != nil {
		t.Fatal(err)
	}
	return server, client
}

// try is run returning why the pair failed instead of failing the test
// (a hang still fails it).
func (p pair) try(t testing.TB) (server, client string, err error) {
	t.Helper()
	return p.tryWith(t, nil)
}

// perftest is run for a perftest program, run again (three tries in
// all) when the program gave up on its own clock: perftest times with the
// TSC and checks its rate against gettimeofday first, and on a loaded
// host that regression can fall below its r^2 of 0.9 ("Correlation
// coefficient … Can't produce a report"), whatever the device did.
func (p pair) perftest(t testing.TB) (server, client string) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		srv, cli, err := p.try(t)
		if err == nil {
			return srv, cli
		}
		if attempt == 3 || !strings.Contains(srv+cli, "Can't produce a report") && !strings.Contains(srv+cli, "Correlation coefficient") {
			t.Fatal(err)
		}
		t.Logf("%s %s: perftest could not calibrate its clock (attempt %d of 3, load average %s): again", p.prog, strings.Join(p.args, " "), attempt, loadavg())
	}
}

func (p pair) tryWith(t testing.TB, extra func(side int) []string) (server, client string, err error) {
	t.Helper()
	port := freePort(t)
	args := append(append([]string{}, p.args...), p.portFlag, strconv.Itoa(port))
	sideArgs := func(i int) []string {
		if extra == nil {
			return args
		}
		return append(extra(i), args...)
	}
	path := func(i int) string {
		if p.paths[i] != "" {
			return p.paths[i]
		}
		return bin(p.prog)
	}
	srv := start(t, launched(p.wrap[0], p.addr[0], path(0), sideArgs(0)...))
	ctx, cancel := context.WithTimeout(context.Background(), p.d)
	defer cancel()
	if !listening(srv, port, p.d) {
		srv.kill()
		<-srv.done
		return srv.out.String(), "", fmt.Errorf("%s server never listened on port %d; its output:\n%s", p.prog, port, srv.out.String())
	}
	host := p.host
	if host == "" {
		host = "127.0.0.1"
	}
	cli := start(t, launched(p.wrap[1], p.addr[1], path(1), append(sideArgs(1), host)...))
	left := time.Until(deadline(ctx))
	cli.wait(t, p.prog+" client", left)
	srv.wait(t, p.prog+" server", time.Until(deadline(ctx))+time.Second)
	if cli.err != nil || srv.err != nil {
		return srv.out.String(), cli.out.String(), fmt.Errorf("%s %s: client: %v, server: %v\nclient output:\n%s\nserver output:\n%s",
			p.prog, strings.Join(args, " "), cli.err, srv.err, cli.out.String(), srv.out.String())
	}
	return srv.out.String(), cli.out.String(), nil
}

func deadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}
