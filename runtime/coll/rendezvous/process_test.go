package rendezvous_test

import (
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/internal/multiproc"
	"github.com/verbsexp/verbsexp/runtime/coll"
	"github.com/verbsexp/verbsexp/runtime/coll/internal/jobcheck"
	"github.com/verbsexp/verbsexp/runtime/coll/rendezvous"
)

// The process tests run their ranks as processes of their own
// (internal/multiproc), each given what a torchrun-style launcher gives
// it: RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT; every rank finds
// the job with coll.FromEnv. modeEnv says what a rank does, victim is
// the rank that misbehaves.
const (
	modeEnv     = "VERBSEXP_RENDEZVOUS_MODE"
	victim      = 2
	childRounds = 4
	benchRounds = 200
)

// launcher is the environment of rank of a job of size whose rank 0
// listens at port; the launcher variables of any job this test itself
// runs in are cleared.
func launcher(size int, port, mode string) func(rank int) []string {
	return func(rank int) []string {
		return []string{"RANK=" + strconv.Itoa(rank), "WORLD_SIZE=" + strconv.Itoa(size), "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port,
			modeEnv + "=" + mode, coll.TokenEnv + "=", "PMIX_NAMESPACE=", "PMIX_RANK=", "OMPI_COMM_WORLD_RANK=", "OMPI_COMM_WORLD_SIZE="}
	}
}

// rootLast starts rank 0 300 ms after the others, which retry meanwhile.
func rootLast(rank int) []string {
	if rank == 0 {
		return []string{"sh", "-c", `sleep 0.3; exec "$@"`, "sh"}
	}
	return nil
}

func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// asRank is one rank's part: FromEnv, then what modeEnv says. A failure
// says how long after the rank's start it came ("after 2.01s: ...").
func asRank(t *testing.T) {
	start := time.Now()
	fail := func(err error) { t.Fatalf("after %v: %v", time.Since(start), err) }
	job, err := coll.FromEnv(coll.JobOptions{Timeout: 2 * time.Second})
	if err != nil {
		fail(err)
	}
	rank, bad := job.Rank(), job.Rank() == victim
	if !strings.HasPrefix(job.Launcher, "TCP rendezvous at ") {
		fail(fmt.Errorf("FromEnv: %q", job.Launcher))
	}
	switch mode := os.Getenv(modeEnv); {
	case mode == "stall" && bad: // never takes part; the others fail at the deadline
		time.Sleep(3 * time.Second)
		return
	case mode == "early" && bad: // fails before the exchange (in New's setup, say), once connected
		time.Sleep(time.Second)
		os.Exit(3)
	case mode == "bench":
		err = jobcheck.Bootstraps(job.Exchange, benchRounds, func(d time.Duration) {
			if rank == 0 {
				fmt.Printf("time %d\n", d.Nanoseconds())
			}
		})
	case mode == "allreduce":
		err = jobcheck.Allreduce(job.Exchange, rank, job.Size())
	default:
		err = jobcheck.Rounds(job.Exchange, rank, job.Size(), childRounds, func(round int) {
			if mode == "kill" && bad && round == 2 {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		})
	}
	if err != nil {
		fail(err)
	}
	if err := job.Close(); err != nil {
		fail(err)
	}
	if rank == 0 { // the listener is gone with Close, before the process
		ln, err := net.Listen("tcp", net.JoinHostPort(os.Getenv("MASTER_ADDR"), os.Getenv("MASTER_PORT")))
		if err != nil {
			fail(fmt.Errorf("the port after Close: %w", err))
		}
		ln.Close()
	}
}

// TestProcesses: 4 and 8 ranks in separate processes, rank 0 started
// last, exchange four rounds through FromEnv's rendezvous, every byte
// checked; rank 0's port is free once it has closed the rendezvous.
func TestProcesses(t *testing.T) {
	for _, size := range []int{4, 8} {
		t.Run(fmt.Sprint(size, "ranks"), func(t *testing.T) {
			if _, ok := multiproc.Rank(); ok {
				asRank(t)
				return
			}
			multiproc.Run(t, size, multiproc.Config{Env: launcher(size, freePort(t), "rounds"), Wrap: rootLast})
		})
	}
}

// TestFromEnvAllreduce: a Go program using coll.FromEnv, as separate
// processes with the TCP rendezvous, each on a softdev device of its
// own: New and an allreduce of rank+1, the sum checked on every rank,
// at 2, 3 and 4 processes. (Before softdev was a network device, New's
// cross-check refused it, the processes' QP numbers repeating at one
// LID; before the cross-check, every rank got a wrong sum and a nil
// error.)
func TestFromEnvAllreduce(t *testing.T) {
	for _, size := range []int{2, 3, 4} {
		t.Run(fmt.Sprint(size, "ranks"), func(t *testing.T) {
			if _, ok := multiproc.Rank(); ok {
				asRank(t)
				return
			}
			multiproc.Run(t, size, multiproc.Config{Env: launcher(size, freePort(t), "allreduce")})
		})
	}
}

// TestProcessFaults: a rank that never starts, stalls before the
// exchange, exits before it or is killed between rounds fails every
// other rank with an error naming it, within a bound: the 2 s deadline
// for the first two; for the others at once, their connection closing
// (the message says which: a rank at the deadline "never joined" or
// "sent nothing", a rank whose process ended "closed its connection").
func TestProcessFaults(t *testing.T) {
	const size = 4
	after := regexp.MustCompile(`after ([0-9.]+m?s): `)
	for _, tc := range []struct {
		mode   string
		says   *regexp.Regexp
		bound  time.Duration
		victim func(err error) bool // how the victim must end
	}{
		{"absent", regexp.MustCompile(`round 1: .*rank 3 never joined within 2s`), 10 * time.Second, nil},
		{"stall", regexp.MustCompile(`round 1: .*rank 2 joined but sent nothing for this round within 2s`), 10 * time.Second,
			func(err error) bool { return err == nil }},
		{"early", regexp.MustCompile(`round 1: .*rank 2 \(at 127\.0\.0\.1:\d+\) closed its connection \(did its process exit\?\)`), 10 * time.Second,
			func(err error) bool { return err != nil && strings.Contains(err.Error(), "exit status 3") }},
		{"kill", regexp.MustCompile(`round 2: .*rank 2 \(at 127\.0\.0\.1:\d+\) closed its connection \(did its process exit\?\)`), 10 * time.Second,
			func(err error) bool { return err != nil && strings.Contains(err.Error(), "signal: killed") }},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			if _, ok := multiproc.Rank(); ok {
				asRank(t)
				return
			}
			started := size
			if tc.mode == "absent" {
				started = size - 1 // rank 3 never starts
			}
			res := multiproc.Start(t, started, multiproc.Config{Env: launcher(size, freePort(t), tc.mode), Timeout: 30 * time.Second}).Wait()
			for _, r := range res {
				out := string(r.Output)
				if r.Rank == victim && tc.victim != nil {
					if !tc.victim(r.Err) {
						t.Errorf("the victim ended with %v:\n%s", r.Err, out)
					}
					continue
				}
				m := after.FindStringSubmatch(out)
				if r.Err == nil || m == nil || !tc.says.MatchString(out) {
					t.Errorf("rank %d ended with %v, want a failure saying %q:\n%s", r.Rank, r.Err, tc.says, out)
					continue
				}
				if took, _ := time.ParseDuration(m[1]); took > tc.bound {
					t.Errorf("rank %d failed after %v, more than %v", r.Rank, took, tc.bound)
				}
			}
		})
	}
}

// BenchmarkBootstrapProcesses: New's two exchange rounds at 8 ranks in
// 8 processes on this host, the median of benchRounds per run (compare
// the PMIx exchange's BenchmarkBootstrap under mpirun).
func BenchmarkBootstrapProcesses(b *testing.B) {
	var times []float64
	for range b.N {
		res := multiproc.Run(b, 8, multiproc.Config{Env: launcher(8, freePort(b), "bench"),
			Args: []string{"-test.run=^TestBootstrapRank$"}})
		for _, line := range strings.Split(string(res[0].Output), "\n") {
			var ns int64
			if _, err := fmt.Sscanf(line, "time %d", &ns); err == nil {
				times = append(times, float64(ns))
			}
		}
	}
	if len(times) < benchRounds {
		b.Fatalf("%d times measured", len(times))
	}
	b.ReportMetric(jobcheck.Median(times), "ns/op")
}

// TestBootstrapRank is a rank of BenchmarkBootstrapProcesses (it does
// nothing unless started as one).
func TestBootstrapRank(t *testing.T) {
	if _, ok := multiproc.Rank(); ok && os.Getenv(modeEnv) == "bench" {
		asRank(t)
	}
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
