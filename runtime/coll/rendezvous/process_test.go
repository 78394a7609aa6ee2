package rendezvous_test

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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
	tagEnv      = "VERBSEXP_RENDEZVOUS_TAG" // which of two jobs a rank is of
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
			modeEnv + "=" + mode, coll.TokenEnv + "=", "PMIX_NAMESPACE=", "PMIX_RANK=", "OMPI_COMM_WORLD_RANK=", "OMPI_COMM_WORLD_SIZE=",
			coll.JobIDEnv + "=", "TORCHELASTIC_RUN_ID=", "OMPI_MCA_ess_base_jobid=", "SLURM_JOB_ID=", "SLURM_STEP_ID=", "SLURM_STEPID="}
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
	after := regexp.MustCompile(`after ([0-9.]+(?:ns|µs|ms|s)): `) // time.Duration's String below a minute
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

// TestTwoJobsTogether: two jobs of 3 ranks started together (6
// processes at once) with one MASTER_ADDR:MASTER_PORT on loopback and no
// token, each with the identity its launcher's variables give it:
// VERBSEXP_JOB_ID; two steps of one Slurm job (SLURM_JOB_ID equal,
// SLURM_STEP_ID not, as two sruns in one allocation); torchrun's
// TORCHELASTIC_RUN_ID. One job's rank 0 listens (which, is the race's)
// and that job runs its rounds with its own ranks only, every entry
// checked; every process of the other job fails, naming both jobs: its
// rank 0 cannot listen, its other ranks are refused. (Before the
// identities, the ranks of both jobs joined whichever rank 0 listened:
// a round of two jobs' entries, or "two processes say they are rank 1".)
func TestTwoJobsTogether(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  [2][]string // each job's identity variables
		ids  [2]string   // the identities FromEnv makes of them
	}{
		{"VERBSEXP_JOB_ID", [2][]string{{coll.JobIDEnv + "=job-a"}, {coll.JobIDEnv + "=job-b"}}, [2]string{"VERBSEXP_JOB_ID=job-a", "VERBSEXP_JOB_ID=job-b"}},
		{"Slurm steps", [2][]string{{"SLURM_JOB_ID=4242", "SLURM_STEP_ID=0"}, {"SLURM_JOB_ID=4242", "SLURM_STEP_ID=1"}},
			[2]string{"SLURM_JOB_ID=4242 SLURM_STEP_ID=0", "SLURM_JOB_ID=4242 SLURM_STEP_ID=1"}},
		{"torchrun", [2][]string{{"TORCHELASTIC_RUN_ID=4f1c"}, {"TORCHELASTIC_RUN_ID=9e2d"}}, [2]string{"TORCHELASTIC_RUN_ID=4f1c", "TORCHELASTIC_RUN_ID=9e2d"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if self, ok := multiproc.Rank(); ok {
				twoJobsRank(t, self)
				return
			}
			const size = 3
			port := freePort(t)
			env := func(r int) []string {
				j := r / size
				return append(append(launcher(size, port, "twojobs")(r%size), tagEnv+"="+tc.ids[j]), tc.env[j]...)
			}
			job := multiproc.Start(t, 2*size, multiproc.Config{Env: env, Timeout: 60 * time.Second})
			res := job.Wait()
			won := -1
			for j := range 2 {
				if res[j*size].Err == nil {
					if won >= 0 {
						t.Fatalf("both jobs' rank 0 listened at 127.0.0.1:%s:\n%s\n%s", port, res[0].Output, res[size].Output)
					}
					won = j
				}
			}
			if won < 0 {
				t.Fatalf("neither job's rank 0 ran its rounds:\n%s\n%s", res[0].Output, res[size].Output)
			}
			lost := 1 - won
			at := "127.0.0.1:" + port
			rootPid := job.Pid(won * size)
			for _, r := range res {
				j, rank, out := r.Rank/size, r.Rank%size, string(r.Output)
				var want string
				switch {
				case j == won:
					want = fmt.Sprintf("%s: %d rounds, every entry its job's (TCP rendezvous at %s (RANK, WORLD_SIZE), job %s)", tc.ids[j], childRounds, at, tc.ids[j])
				case rank == 0:
					want = fmt.Sprintf("rank 0 of job %q cannot listen at %s: the rendezvous of job %q (rank 0 is pid %d) listens there: two jobs were given one address",
						tc.ids[lost], at, tc.ids[won], rootPid)
				default:
					want = fmt.Sprintf("the rendezvous at %s is job %q's (its rank 0 is pid %d), and this is rank %d of job %q: two jobs were given one address",
						at, tc.ids[won], rootPid, rank, tc.ids[lost])
				}
				if (r.Err == nil) != (j == won) || !strings.Contains(out, want) {
					t.Errorf("process %d (rank %d of job %q) ended with %v, want it to say %q:\n%s", r.Rank, rank, tc.ids[j], r.Err, want, out)
				}
			}
		})
	}
}

// twoJobsRank is a process of TestTwoJobsTogether: once all 6 have
// started, FromEnv and childRounds rounds whose every entry must be of
// this process's job; then it waits for the other 5 before it closes
// (a rank 0 that closed at once, its job done, would leave the other
// job's late ranks nobody to be refused by: they would find no root).
func twoJobsRank(t *testing.T, self multiproc.Self) {
	if err := self.Barrier("started"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	job, err := coll.FromEnv(coll.JobOptions{Timeout: 10 * time.Second})
	if err == nil {
		tag, rank := os.Getenv(tagEnv), job.Rank()
		for round := 1; round <= childRounds && err == nil; round++ {
			var all [][]byte
			if all, err = job.Exchange(tagged(tag, rank, round)); err == nil {
				for r, b := range all {
					if want := tagged(tag, r, round); string(b) != string(want) {
						err = fmt.Errorf("round %d: rank %d's entry is %q, not %q: two jobs' ranks met", round, r, b, want)
					}
				}
			}
		}
		if err == nil {
			fmt.Printf("%s: %d rounds, every entry its job's (%s)\n", tag, childRounds, job.Launcher)
		}
	}
	if err != nil {
		t.Errorf("after %v: %v", time.Since(start), err)
	}
	if err := self.Barrier("done"); err != nil {
		t.Error(err)
	}
	if job != nil {
		job.Close()
	}
}

// TestRendezvousJobScript: scripts/rendezvous-job gives each job an
// identity of its own (VERBSEXP_JOB_ID=rendezvous-job-PID). Two of it
// started together on one MASTER_PORT, 2 ranks each: one job runs its
// rounds, every entry its own (its ranks then wait until the other
// script has ended), and the other script exits non-zero, a rank of it
// naming both jobs.
func TestRendezvousJobScript(t *testing.T) {
	if os.Getenv(modeEnv) == "script" {
		scriptRank(t)
		return
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("SKIPPED: scripts/rendezvous-job needs bash")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	port, dir := freePort(t), t.TempDir()
	type run struct {
		cmd  *exec.Cmd
		out  bytes.Buffer
		done chan struct{}
		err  error
	}
	runs := make([]*run, 2)
	ended := make(chan int, 2)
	for i := range runs {
		r := &run{done: make(chan struct{})}
		r.cmd = exec.Command("../../../scripts/rendezvous-job", "2", exe, "-test.run=^TestRendezvousJobScript$", "-test.count=1")
		r.cmd.Env = append(os.Environ(), "MASTER_PORT="+port, modeEnv+"=script", tagEnv+"="+dir, coll.TokenEnv+"=", "PMIX_NAMESPACE=", "PMIX_RANK=",
			"TORCHELASTIC_RUN_ID=", "OMPI_MCA_ess_base_jobid=", "SLURM_JOB_ID=", "SLURM_STEP_ID=", "SLURM_STEPID=")
		r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
		if err := r.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { r.err = r.cmd.Wait(); close(r.done); ended <- i }()
		runs[i] = r
	}
	defer func() {
		for _, r := range runs {
			select {
			case <-r.done:
			default:
				r.cmd.Process.Signal(syscall.SIGTERM) // its trap ends its ranks
				<-r.done
			}
		}
	}()
	var lost int
	select {
	case lost = <-ended:
	case <-time.After(60 * time.Second):
		t.Fatalf("neither job ended within 60 s:\n%s\n%s", &runs[0].out, &runs[1].out)
	}
	if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	won := 1 - lost
	select {
	case <-runs[won].done:
	case <-time.After(60 * time.Second):
		t.Fatalf("the other job did not end within 60 s:\n%s", &runs[won].out)
	}
	ids := [2]string{}
	for i, r := range runs {
		ids[i] = fmt.Sprintf("VERBSEXP_JOB_ID=rendezvous-job-%d", r.cmd.Process.Pid)
	}
	if runs[won].err != nil || strings.Count(runs[won].out.String(), "2 rounds, every entry its job's") != 2 {
		t.Errorf("job %s: %v:\n%s", ids[won], runs[won].err, &runs[won].out)
	}
	out := runs[lost].out.String()
	if runs[lost].err == nil || !strings.Contains(out, "two jobs were given one address") || !strings.Contains(out, fmt.Sprintf("%q", ids[won])) ||
		!strings.Contains(out, fmt.Sprintf("%q", ids[lost])) {
		t.Errorf("job %s ended with %v, want a failure naming it and %s:\n%s", ids[lost], runs[lost].err, ids[won], out)
	}
}

// scriptRank is a rank of TestRendezvousJobScript: two rounds of tagged
// entries, every one checked, then a wait for the test's release.
func scriptRank(t *testing.T) {
	job, err := coll.FromEnv(coll.JobOptions{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	tag, rank := os.Getenv(coll.JobIDEnv), job.Rank()
	for round := 1; round <= 2; round++ {
		all, err := job.Exchange(tagged(tag, rank, round))
		if err != nil {
			t.Fatal(err)
		}
		for r, b := range all {
			if want := tagged(tag, r, round); string(b) != string(want) {
				t.Fatalf("round %d: rank %d's entry is %q, not %q: two jobs' ranks met", round, r, b, want)
			}
		}
	}
	fmt.Printf("rank %d of %s: 2 rounds, every entry its job's\n", rank, tag)
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(os.Getenv(tagEnv), "release")); err == nil {
			break
		}
	}
	job.Close()
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
