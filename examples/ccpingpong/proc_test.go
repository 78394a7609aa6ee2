//go:build linux && cgo

package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The process tests run the program as two processes. By default the
// test binary runs itself as the program (TestMain, when runMainEnv is
// set); make examples gives -ccpingpong.bin, the example built with go
// build.
var binFlag = flag.String("ccpingpong.bin", "", "run this ccpingpong binary instead of the test binary as the program")

const runMainEnv = "CCPINGPONG_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		os.Exit(ccpingpong(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func program(t *testing.T) string {
	if *binFlag != "" {
		return *binFlag
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// proc is one running process of the program.
type proc struct {
	name   string
	cmd    *exec.Cmd
	mu     sync.Mutex
	stdout bytes.Buffer
	stderr bytes.Buffer
	lines  chan string // stdout, line by line
	done   chan struct{}
	code   int
}

// start runs prefix (a command that runs what follows it, as ip netns
// exec does; may be empty) then the program with args and extra
// environment. The process and its group are killed when ctx ends.
func start(t *testing.T, ctx context.Context, name string, prefix []string, env []string, args ...string) *proc {
	t.Helper()
	argv := append(append(append([]string{}, prefix...), program(t)), args...)
	p := &proc{name: name, lines: make(chan string, 1024), done: make(chan struct{})}
	p.cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
	p.cmd.Env = append(append(os.Environ(), runMainEnv+"=1"), env...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.cmd.Cancel = func() error { return syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) }
	p.cmd.WaitDelay = 5 * time.Second
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = &lockedWriter{&p.mu, &p.stderr}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.stdout.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		io.Copy(io.Discard, out)
		err := p.cmd.Wait()
		p.mu.Lock()
		p.code = p.cmd.ProcessState.ExitCode()
		if err != nil && p.code == 0 {
			p.code = -1
		}
		p.mu.Unlock()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	})
	return p
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// output is what the process printed so far.
func (p *proc) output() (stdout, stderr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stdout.String(), p.stderr.String()
}

func (p *proc) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("%s (exit %d):\n--- stdout\n%s--- stderr\n%s", p.name, p.code, p.stdout.String(), p.stderr.String())
}

var waitingLine = regexp.MustCompile(`^  waiting for a client at (\S+):(\d+)$`)

// waitListening waits for the server's "waiting for a client" line and
// returns the address it gives.
func (p *proc) waitListening(t *testing.T, within time.Duration) string {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		select {
		case l := <-p.lines:
			if m := waitingLine.FindStringSubmatch(l); m != nil {
				return m[1]
			}
		case <-p.done:
			t.Fatalf("the server ended before it listened: %v", p)
		case <-timer.C:
			t.Fatalf("the server did not listen within %v: %v", within, p)
		}
	}
}

// wait waits for the process to end, at most within.
func (p *proc) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(within):
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		t.Fatalf("%s did not finish within %v (killed): %v", p.name, within, p)
	}
	return 0
}

// host is where one side runs: a command prefix and environment (for a
// network namespace), or nothing for this host's loopback.
type host struct {
	prefix []string
	env    []string
}

// pair runs a server and a client with their arguments (the client gets
// the server's address appended) and returns both once they ended.
func pair(t *testing.T, srvHost, cliHost host, srvArgs, cliArgs []string, within time.Duration) (srv, cli *proc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within+10*time.Second)
	t.Cleanup(cancel)
	srv = start(t, ctx, "server", srvHost.prefix, srvHost.env, srvArgs...)
	addr := srv.waitListening(t, within)
	cli = start(t, ctx, "client", cliHost.prefix, cliHost.env, append(append([]string{}, cliArgs...), addr)...)
	cli.wait(t, within)
	srv.wait(t, within)
	return srv, cli
}

var (
	bytesLine = regexp.MustCompile(`(?m)^(\d+) bytes in ([0-9.]+) seconds = ([0-9.]+) Mbit/sec$`)
	itersLine = regexp.MustCompile(`(?m)^(\d+) iters in ([0-9.]+) seconds = ([0-9.]+) usec/iter$`)
)

// checkRun checks that p ended with 0 and printed the closing lines for
// iters exchanges of msgBytes, then last (the line that follows them).
func checkRun(t *testing.T, p *proc, iters, msgBytes int, last string) {
	t.Helper()
	out, _ := p.output()
	if p.code != 0 {
		t.Fatalf("%v", p)
	}
	b, it := bytesLine.FindStringSubmatch(out), itersLine.FindStringSubmatch(out)
	if b == nil || it == nil || b[1] != fmt.Sprint(2*iters*msgBytes) || it[1] != fmt.Sprint(iters) {
		t.Fatalf("%s: want the closing lines for %d iters of %d bytes: %v", p.name, iters, msgBytes, p)
	}
	if !strings.Contains(out, last) {
		t.Fatalf("%s: want %q: %v", p.name, last, p)
	}
	t.Logf("%s: %s, %s", p.name, b[0], it[0])
}

// checkAddresses checks that each side printed its GID (its device's
// address) and learned the other's, and that the server took the
// handshake at its own address and port.
func checkAddresses(t *testing.T, srv, cli *proc, srvIP, cliIP string, port int) {
	t.Helper()
	so, _ := srv.output()
	co, _ := cli.output()
	for _, w := range []struct{ out, want string }{
		{so, "GID ::ffff:" + srvIP + " : MQPN"}, {so, fmt.Sprintf("waiting for a client at %s:%d", srvIP, port)},
		{so, "remote address: LID 0x0000, QPN"}, {so, "GID ::ffff:" + cliIP + "\n"},
		{co, "GID ::ffff:" + cliIP + " : MQPN"}, {co, "GID ::ffff:" + srvIP + "\n"},
	} {
		if !strings.Contains(w.out, w.want) {
			t.Errorf("want %q in\n%s", w.want, w.out)
		}
	}
}
