package rendezvous_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	verbs "github.com/verbsexp/verbsexp/generated"
	"github.com/verbsexp/verbsexp/runtime/coll"
	"github.com/verbsexp/verbsexp/runtime/coll/internal/jobcheck"
	"github.com/verbsexp/verbsexp/runtime/coll/rendezvous"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/softdev"
)

// The process tests run this test binary as the ranks of a job, started
// one by one as a shell loop would, each with RANK, WORLD_SIZE,
// MASTER_ADDR and MASTER_PORT: childEnv says what a rank does, victim
// is the rank that misbehaves.
const (
	childEnv    = "VERBSEXP_RENDEZVOUS_CHILD"
	victim      = 2
	childRounds = 4
	benchRounds = 200
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(child(mode))
	}
	os.Exit(m.Run())
}

// child is one rank: it prints "pid RANK PID", then "ok RANK" or
// "error RANK: ...", and returns the exit code.
func child(mode string) int {
	job, err := coll.FromEnv(coll.JobOptions{Timeout: 2 * time.Second})
	if err != nil {
		fmt.Printf("error ?: %v\n", err)
		return 1
	}
	rank := job.Rank()
	fmt.Printf("pid %d %d\n", rank, os.Getpid())
	fail := func(err error) int {
		fmt.Printf("error %d: %v\n", rank, err)
		return 1
	}
	if !strings.HasPrefix(job.Launcher, "TCP rendezvous at ") {
		return fail(fmt.Errorf("FromEnv: %q", job.Launcher))
	}
	bad := rank == victim
	switch {
	case mode == "stall" && bad:
		time.Sleep(time.Hour)
	case mode == "early" && bad: // fails before the exchange (in New's setup, say), once connected
		time.Sleep(time.Second)
		return 3
	case mode == "bench":
		return benchChild(job)
	case mode == "allreduce":
		return allreduceChild(job)
	}
	err = jobcheck.Rounds(job.Exchange, rank, job.Size(), childRounds, func(round int) {
		if mode == "kill" && bad && round == 2 {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	})
	if err != nil {
		return fail(err)
	}
	if err := job.Close(); err != nil {
		return fail(err)
	}
	if rank == 0 { // the listener is gone with Close, before the process
		ln, err := net.Listen("tcp", net.JoinHostPort(os.Getenv("MASTER_ADDR"), os.Getenv("MASTER_PORT")))
		if err != nil {
			return fail(fmt.Errorf("the port after Close: %w", err))
		}
		ln.Close()
	}
	fmt.Printf("ok %d\n", rank)
	return 0
}

// allreduceChild runs New on a softdev device of its own and one ADD
// allreduce of rank+1, printing "sum S" or "refused: ...": a device
// that cannot reach the others' must make New fail (or, once it can,
// the sum be right), never a wrong sum.
func allreduceChild(job *coll.Job) int {
	rank := job.Rank()
	dev, err := softdev.Open()
	if err != nil {
		fmt.Printf("error %d: %v\n", rank, err)
		return 1
	}
	defer dev.Close()
	c, err := coll.New(dev.Context(), rank, job.Size(), job.Exchange, coll.Options{})
	if err != nil {
		fmt.Printf("refused %d: %v\n", rank, err)
		return 1
	}
	defer c.Close()
	buf, err := lease.Alloc(coll.ElementSize)
	if err != nil {
		fmt.Printf("error %d: %v\n", rank, err)
		return 1
	}
	defer buf.Free()
	mem, err := c.Register(buf)
	if err != nil {
		fmt.Printf("error %d: %v\n", rank, err)
		return 1
	}
	defer mem.Close()
	s, err := c.Allreduce(mem, mem, 1, verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint)
	if err != nil {
		fmt.Printf("error %d: %v\n", rank, err)
		return 1
	}
	defer s.Close()
	coll.PutElement(mem.Bytes(), 0, uint64(rank+1), 0)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Post(); err == nil {
		err = s.WaitContext(ctx)
	}
	if err != nil {
		fmt.Printf("error %d: %v\n", rank, err)
		return 1
	}
	v, _ := coll.Element(mem.Bytes(), 0)
	fmt.Printf("sum %d %d\n", rank, v)
	return 0
}

// benchChild times benchRounds bootstraps; rank 0 prints each in ns.
func benchChild(job *coll.Job) int {
	err := jobcheck.Bootstraps(job.Exchange, benchRounds, func(d time.Duration) {
		if job.Rank() == 0 {
			fmt.Printf("time %d\n", d.Nanoseconds())
		}
	})
	if err != nil {
		fmt.Printf("error %d: %v\n", job.Rank(), err)
		return 1
	}
	return 0
}

// ranks is what the processes of one job printed and how each ended.
type ranks struct {
	out  []string // by rank
	exit []int    // exit codes (-1: killed)
	took time.Duration
}

// launch starts size ranks of this test binary in mode, rank 0 last
// (the others retry until it listens), and waits for all of them, for
// at most a minute; the victim of "stall" is killed once the others have
// ended, as a launcher would.
func launch(t testing.TB, size int, mode string) ranks {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res := ranks{out: make([]string, size), exit: make([]int, size)}
	cmds := make([]*exec.Cmd, size)
	outs := make([]bytes.Buffer, size)
	start := time.Now()
	for i := range size {
		rank := size - 1 - i
		if mode == "absent" && rank == victim {
			continue
		}
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+mode, "RANK="+strconv.Itoa(rank), "WORLD_SIZE="+strconv.Itoa(size),
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+port, coll.TokenEnv+"=", "PMIX_NAMESPACE=", "PMIX_RANK=")
		cmd.Stdout, cmd.Stderr = &outs[rank], &outs[rank]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[rank] = cmd
	}
	var wg sync.WaitGroup
	for rank, cmd := range cmds {
		if cmd == nil || mode == "stall" && rank == victim {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); cmd.Wait() }()
	}
	wg.Wait()
	res.took = time.Since(start)
	if mode == "stall" {
		cmds[victim].Process.Kill()
		cmds[victim].Wait()
	}
	if ctx.Err() != nil {
		t.Errorf("the ranks ran for more than a minute: killed")
	}
	for rank, cmd := range cmds {
		if cmd != nil {
			res.out[rank], res.exit[rank] = outs[rank].String(), cmd.ProcessState.ExitCode()
		}
	}
	return res
}

// TestProcesses: 4 and 8 ranks in separate processes, rank 0 started
// last, exchange four rounds through FromEnv's rendezvous, every byte
// checked; rank 0's port is free once it has closed the rendezvous.
func TestProcesses(t *testing.T) {
	for _, size := range []int{4, 8} {
		r := launch(t, size, "rounds")
		for rank, out := range r.out {
			if r.exit[rank] != 0 || !strings.Contains(out, fmt.Sprintf("ok %d\n", rank)) {
				t.Errorf("%d ranks: rank %d exited %d:\n%s", size, rank, r.exit[rank], out)
			}
		}
	}
}

// TestProcessFaults: a rank that never starts, stalls before the
// exchange, exits before it or is killed between rounds fails every
// other rank with an error naming it, within a bound (the 2 s deadline
// for the first two; at once for the others, whose connection closes);
// every process ends.
func TestProcessFaults(t *testing.T) {
	const size = 4
	for _, tc := range []struct {
		mode  string
		says  *regexp.Regexp
		bound time.Duration
	}{
		{"absent", regexp.MustCompile(`round 1: .*rank 2 never joined within 2s`), 15 * time.Second},
		{"stall", regexp.MustCompile(`round 1: .*rank 2 joined but sent nothing for this round within 2s`), 15 * time.Second},
		{"early", regexp.MustCompile(`round 1: .*rank 2 \(at 127\.0\.0\.1:\d+\) closed its connection \(did its process exit\?\)`), 10 * time.Second},
		{"kill", regexp.MustCompile(`round 2: .*rank 2 \(at 127\.0\.0\.1:\d+\) closed its connection \(did its process exit\?\)`), 10 * time.Second},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			r := launch(t, size, tc.mode)
			for rank, out := range r.out {
				if rank == victim {
					if want := map[string]int{"absent": 0, "stall": -1, "early": 3, "kill": -1}[tc.mode]; r.exit[rank] != want {
						t.Errorf("the victim exited %d, want %d (-1: killed)", r.exit[rank], want)
					}
					continue
				}
				if r.exit[rank] != 1 || !tc.says.MatchString(out) {
					t.Errorf("rank %d exited %d, want 1 and %q:\n%s", rank, r.exit[rank], tc.says, out)
				}
			}
			if r.took > tc.bound {
				t.Errorf("the ranks took %v to end, more than %v", r.took, tc.bound)
			}
			t.Logf("after %v: rank 1: %s", r.took.Round(time.Millisecond), strings.TrimSpace(lastLine(r.out[1])))
		})
	}
}

// TestProcessesOnTheirOwnDevices: ranks in separate processes, each on
// a softdev device of its own, with endpoints through the rendezvous:
// New either refuses (softdev devices of different processes could not
// reach each other, and their QP numbers repeat, which New's cross-check
// sees) or the allreduce is right; never a wrong sum with a nil error.
func TestProcessesOnTheirOwnDevices(t *testing.T) {
	for _, size := range []int{2, 3, 4} {
		r := launch(t, size, "allreduce")
		want := fmt.Sprintf(" %d\n", size*(size+1)/2)
		for rank, out := range r.out {
			switch {
			case strings.HasPrefix(lastLine(out), "sum ") && strings.HasSuffix(out, want):
			case strings.Contains(out, "refused") && strings.Contains(out, "the endpoints conflict"):
			default:
				t.Errorf("%d ranks: rank %d exited %d, neither refused by New nor the right sum%s:\n%s", size, rank, r.exit[rank], want, out)
			}
		}
		t.Logf("%d ranks: rank 0: %s", size, lastLine(r.out[0]))
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// BenchmarkBootstrapProcesses: New's two exchange rounds at 8 ranks in
// 8 processes on this host, the median of benchRounds per run (compare
// the PMIx exchange's BenchmarkBootstrap under mpirun).
func BenchmarkBootstrapProcesses(b *testing.B) {
	var times []float64
	for range b.N {
		r := launch(b, 8, "bench")
		for rank, out := range r.out {
			if r.exit[rank] != 0 {
				b.Fatalf("rank %d exited %d:\n%s", rank, r.exit[rank], out)
			}
		}
		sc := bufio.NewScanner(strings.NewReader(r.out[0]))
		for sc.Scan() {
			var ns int64
			if _, err := fmt.Sscanf(sc.Text(), "time %d", &ns); err == nil {
				times = append(times, float64(ns))
			}
		}
	}
	b.ReportMetric(jobcheck.Median(times), "ns/op")
}

// BenchmarkBootstrap: what New asks of the rendezvous at 8 ranks in one
// process (goroutines): join (rank 0 listens, 7 ranks connect and
// authenticate), two rounds, close.
func BenchmarkBootstrap(b *testing.B) {
	opts := rendezvous.Options{Token: token}
	endpoint, mark := make([]byte, 56+6*12), make([]byte, 14+32)
	for range b.N {
		rs := job(b, 8, opts)
		errs := each(8, func(rank int) error {
			for _, x := range [][]byte{endpoint, mark} {
				if _, err := rs[rank].Exchange(x); err != nil {
					return err
				}
			}
			return rs[rank].Close()
		})
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
}
