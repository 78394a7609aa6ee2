package rendezvous_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/runtime/coll/rendezvous"
)

// silentCrowd is a stranger's n connections to addr that say nothing,
// held until stop; with redial, each is opened again as soon as the root
// closes it (a flood).
func silentCrowd(addr string, n int, redial bool) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				c, err := net.Dial("tcp", addr)
				if err != nil {
					time.Sleep(time.Millisecond)
					continue
				}
				mu.Lock()
				open[c] = true
				mu.Unlock()
				io.Copy(io.Discard, c) // until the root closes it (or stop does)
				mu.Lock()
				delete(open, c)
				mu.Unlock()
				c.Close()
				if !redial {
					<-done
					return
				}
			}
		}()
	}
	return func() {
		close(done)
		mu.Lock()
		for c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}
}

// TestSilentCrowd: a stranger holding 100 silent connections to the
// root, opening each again as soon as it is closed, does not keep the
// job's ranks out: the root closes the oldest handshake for each new
// connection (and any that says nothing for 3 s), and a rank whose
// handshake was closed connects again. A 2-rank job with a token
// completes its first round. Before, the 64 handshake slots were held
// 10 s each and every other connection closed at once, the job's ranks'
// too: the job failed at its deadline.
func TestSilentCrowd(t *testing.T) {
	opts := rendezvous.Options{Token: token, Timeout: 20 * time.Second}
	root, err := rendezvous.Join("127.0.0.1:0", 0, 2, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	stop := silentCrowd(root.Addr(), 100, true)
	defer stop()
	time.Sleep(500 * time.Millisecond) // the crowd in place
	start := time.Now()
	rank1, err := rendezvous.Join(root.Addr(), 1, 2, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer rank1.Close()
	errs := each(2, func(rank int) error {
		_, err := []*rendezvous.Rendezvous{root, rank1}[rank].Exchange([]byte{byte(rank)})
		return err
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d with 100 silent connections at the root: %v", r, err)
		}
	}
	t.Logf("the first round took %v with 100 silent connections held at the root", time.Since(start).Round(time.Millisecond))
}

// BenchmarkSilentCrowd measures what TestSilentCrowd checks: a 2-rank
// job's start (join and a first round) while a stranger holds n silent
// connections to its root (held: opened once; flood: opened again as
// soon as closed); the mean of the runs, and the worst.
func BenchmarkSilentCrowd(b *testing.B) {
	for _, tc := range []struct {
		n      int
		redial bool
	}{{0, false}, {100, false}, {100, true}} {
		b.Run(fmt.Sprint(tc.n, map[bool]string{false: "held", true: "flood"}[tc.redial]), func(b *testing.B) {
			opts := rendezvous.Options{Token: token, Timeout: 20 * time.Second}
			var worst time.Duration
			for range b.N {
				b.StopTimer()
				root, err := rendezvous.Join("127.0.0.1:0", 0, 2, opts)
				if err != nil {
					b.Fatal(err)
				}
				stop := silentCrowd(root.Addr(), tc.n, tc.redial)
				time.Sleep(100 * time.Millisecond)
				b.StartTimer()
				start := time.Now()
				rank1, err := rendezvous.Join(root.Addr(), 1, 2, opts)
				if err != nil {
					b.Fatal(err)
				}
				errs := each(2, func(rank int) error {
					_, err := []*rendezvous.Rendezvous{root, rank1}[rank].Exchange(nil)
					return err
				})
				worst = max(worst, time.Since(start))
				b.StopTimer()
				for _, err := range errs {
					if err != nil {
						b.Fatal(err)
					}
				}
				stop()
				rank1.Close()
				root.Close()
			}
			b.ReportMetric(float64(worst.Microseconds()), "worst-µs")
		})
	}
}

// Strangers of another user, on a job without a token (run as root:
// the stranger is this test binary run as nobody).

const strangerEnv = "VERBSEXP_RENDEZVOUS_STRANGER" // mode addr job

// TestStrangerChild is the stranger of TestStrangerUser: as rank 1 it
// joins and offers its bytes; as rank 0 it listens and offers its own,
// until stdin closes. It prints what happened.
func TestStrangerChild(t *testing.T) {
	v := strings.Fields(os.Getenv(strangerEnv))
	if len(v) != 3 {
		t.Skip("SKIPPED: the stranger of TestStrangerUser, run only by it")
	}
	mode, addr, job := v[0], v[1], v[2]
	rank := map[string]int{"join": 1, "listen": 0}[mode]
	r, err := rendezvous.Join(addr, rank, 2, rendezvous.Options{Job: job, Timeout: 20 * time.Second})
	if err != nil {
		fmt.Printf("stranger: %v\n", err)
		return
	}
	defer r.Close()
	if mode == "listen" {
		fmt.Printf("stranger: listening at %s\n", r.Addr())
		go func() { io.Copy(io.Discard, os.Stdin); r.Close() }()
	}
	all, err := r.Exchange([]byte("the stranger's"))
	fmt.Printf("stranger: %q %v\n", all, err)
}

// stranger starts TestStrangerChild as uid 65534 (a copy of this test
// binary that user can run), mode "join" or "listen", and returns its
// command (stdin a pipe) and its output, line by line.
func stranger(t *testing.T, mode, addr, job string) (*exec.Cmd, io.WriteCloser, <-chan string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "rendezvous-stranger-") // (t.TempDir's parent is root's alone)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	exe := filepath.Join(dir, "stranger.test")
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestStrangerChild$")
	cmd.Env = append(os.Environ(), strangerEnv+"="+mode+" "+addr+" "+job, "HOME="+dir)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if s, ok := strings.CutPrefix(sc.Text(), "stranger: "); ok {
				lines <- s
			}
		}
		close(lines)
	}()
	t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	return cmd, in, lines
}

func next(t *testing.T, lines <-chan string, what string) string {
	t.Helper()
	select {
	case s, ok := <-lines:
		if !ok {
			t.Fatalf("the stranger ended before %s", what)
		}
		return s
	case <-time.After(30 * time.Second):
		t.Fatalf("the stranger said nothing of %s within 30 s", what)
	}
	return ""
}

// TestStrangerUser: a job without a token admits only its own user's
// processes (and root's), the job's identity, known to anyone, being no
// secret. A process of another user that joins as rank 1 before the real
// one is refused (told why) and rank 0 takes the real rank 1's bytes; one
// that listens at the job's address before rank 0 is refused by the
// job's ranks, which fail saying so. Before, the stranger became rank 1
// (rank 0 took its bytes as rank 1's endpoint) or rank 0 (the job's
// ranks took its result).
func TestStrangerUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: running the stranger as another user (uid 65534) needs root")
	}
	const job = "VERBSEXP_JOB_ID=strangers"
	t.Run("joins as rank 1", func(t *testing.T) {
		root, err := rendezvous.Join("127.0.0.1:0", 0, 2, rendezvous.Options{Job: job, Timeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		type result struct {
			all [][]byte
			err error
		}
		got := make(chan result, 1)
		go func() { all, err := root.Exchange([]byte("rank 0's")); got <- result{all, err} }()
		_, _, lines := stranger(t, "join", root.Addr(), job)
		said := next(t, lines, "its join")
		if !strings.Contains(said, "refused this connection: a process of uid 65534") {
			t.Errorf("the stranger: %s\nwant it refused, told why", said)
		}
		rank1, err := rendezvous.Join(root.Addr(), 1, 2, rendezvous.Options{Job: job, Timeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer rank1.Close()
		if _, err := rank1.Exchange([]byte("rank 1's")); err != nil {
			t.Errorf("the real rank 1: %v", err)
		}
		r := <-got
		if r.err != nil || len(r.all) != 2 || string(r.all[1]) != "rank 1's" {
			t.Errorf("rank 0's round: %q %v; want rank 1's entry from the real rank 1", r.all, r.err)
		}
	})
	t.Run("listens as rank 0", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		_, in, lines := stranger(t, "listen", addr, job)
		if said := next(t, lines, "its listening"); !strings.HasPrefix(said, "listening at ") {
			t.Fatalf("the stranger: %s", said)
		}
		rank1, err := rendezvous.Join(addr, 1, 2, rendezvous.Options{Job: job, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer rank1.Close()
		all, err := rank1.Exchange([]byte("rank 1's"))
		if err == nil || !strings.Contains(err.Error(), "what listens at "+addr+" is a process of uid 65534") {
			t.Errorf("rank 1 with a stranger listening at the job's address: %q %v; want it to refuse the stranger, saying so", all, err)
		}
		if _, err := rendezvous.Join(addr, 0, 2, rendezvous.Options{Job: job}); err == nil || !strings.Contains(err.Error(), "a process of another user (uid 65534) listens there") {
			t.Errorf("rank 0 where a stranger listens: %v; want it to say so", err)
		}
		in.Close()
	})
}

// TestLoopbackIPv6: a job without a token on ::1 (the kernel's IPv6
// socket table tells the users apart there).
func TestLoopbackIPv6(t *testing.T) {
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("SKIPPED: no IPv6 loopback here: %v", err)
	}
	ln.Close()
	root, err := rendezvous.Join("[::1]:0", 0, 3, rendezvous.Options{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rs := []*rendezvous.Rendezvous{root}
	for r := 1; r < 3; r++ {
		c, err := rendezvous.Join(root.Addr(), r, 3, rendezvous.Options{Timeout: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, c)
	}
	for r, err := range rounds(rs, 2, 10) {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	closeAll(t, rs)
}
