//go:build linux && cgo

package pmix_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/runtime/coll"
	"github.com/verbsexp/verbsexp/runtime/coll/internal/jobcheck"
	"github.com/verbsexp/verbsexp/runtime/coll/pmix"
)

// The tests run this test binary as the ranks of a job under Open MPI's
// mpirun: childEnv names what a rank does, victimEnv which rank misbehaves.
const (
	childEnv  = "VERBSEXP_PMIX_CHILD"
	victimEnv = "VERBSEXP_PMIX_VICTIM"
	victim    = 2
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(child(mode))
	}
	os.Exit(m.Run())
}

const childRounds = 4

// child is one rank: it prints "pid RANK PID" first, then "ok RANK" or
// "error RANK: ..." and returns the exit code.
func child(mode string) int {
	start := time.Now()
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
	launcher, rankVar, sizeVar := "Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"
	if os.Getenv(rankVar) == "" {
		launcher, rankVar, sizeVar = "Slurm", "SLURM_PROCID", "SLURM_NTASKS"
	}
	if want, _ := strconv.Atoi(os.Getenv(rankVar)); job.Launcher != "PMIx" || rank != want {
		return fail(fmt.Errorf("FromEnv: rank %d from %q, %s says %d", rank, job.Launcher, launcher, want))
	}
	if want, _ := strconv.Atoi(os.Getenv(sizeVar)); job.Size() != want {
		return fail(fmt.Errorf("FromEnv: size %d, %s says %d", job.Size(), launcher, want))
	}
	bad := rank == victim
	switch {
	case mode == "lost": // the victim is the one victimEnv names
		v, err := strconv.Atoi(os.Getenv(victimEnv))
		if err != nil {
			return fail(fmt.Errorf("%s=%q: %v", victimEnv, os.Getenv(victimEnv), err))
		}
		return lostRank(job, v)
	case mode == "stall" && bad:
		time.Sleep(time.Hour)
	case mode == "exit" && bad:
		return 3
	case mode == "finalize" && bad:
		if err := job.Close(); err != nil {
			return fail(err)
		}
		return 0
	case mode == "bench":
		return bench(job, start)
	case mode == "allreduce":
		if err := jobcheck.Allreduce(job.Exchange, rank, job.Size()); err != nil {
			return fail(err)
		}
		if err := job.Close(); err != nil {
			return fail(err)
		}
		fmt.Printf("ok %d\n", rank)
		return 0
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
	if err := job.Close(); err == nil {
		return fail(fmt.Errorf("a second Close succeeded"))
	}
	fmt.Printf("ok %d\n", rank)
	return 0
}

// result is what one mpirun run printed and how it ended.
type result struct {
	out  string
	err  error // mpirun's exit
	took time.Duration
	pids map[int]int    // by rank
	ok   map[int]bool   // ranks that printed ok
	errs map[int]string // ranks' errors
}

var linePat = regexp.MustCompile(`^(pid|ok|error) (\S+?):? ?(.*)$`)

// mpirun runs np ranks of this test binary in mode under mpirun.
func mpirun(t testing.TB, np int, mode string, env ...string) result {
	t.Helper()
	path, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("SKIPPED: no mpirun (Debian: apt-get install openmpi-bin; make test installs it)")
	}
	if os.Getenv("PMIX_NAMESPACE") != "" {
		t.Skip("SKIPPED: this test is itself running under a PMIx launcher")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := []string{"--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", strconv.Itoa(np), "-x", childEnv}
	for _, kv := range env {
		args = append(args, "-x", strings.SplitN(kv, "=", 2)[0])
	}
	cmd := exec.CommandContext(ctx, path, append(args, os.Args[0], "-test.run=^$")...)
	cmd.Env = append(append(os.Environ(), childEnv+"="+mode), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("mpirun -np %d (%s) still running after 2 minutes: killed; it printed:\n%s", np, mode, out)
	}
	return parseRun(out, err, time.Since(start))
}

// parseRun is what the ranks of a run printed.
func parseRun(out []byte, err error, took time.Duration) result {
	r := result{out: string(out), err: err, took: took, pids: map[int]int{}, ok: map[int]bool{}, errs: map[int]string{}}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := linePat.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		rank, _ := strconv.Atoi(m[2])
		switch m[1] {
		case "pid":
			r.pids[rank], _ = strconv.Atoi(m[3])
		case "ok":
			r.ok[rank] = true
		case "error":
			r.errs[rank] = m[3]
		}
	}
	return r
}

// noneLeft fails if a rank's process still runs 5 s after mpirun ended.
func noneLeft(t *testing.T, r result) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var alive []int
		for rank, pid := range r.pids {
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if err == nil && !bytes.Contains(stat, []byte(") Z ")) {
				alive = append(alive, rank)
			}
		}
		if len(alive) == 0 {
			return
		}
		if time.Now().After(end) {
			sort.Ints(alive)
			t.Errorf("ranks %v are still running after mpirun exited", alive)
			return
		}
	}
}

// TestMpirun: under mpirun at 2, 4 and 8 ranks, FromEnv finds PMIx, the
// rank and size agree with Open MPI's, and four rounds of Exchange give
// every rank every rank's bytes (0 to 4 KiB), each byte checked.
func TestMpirun(t *testing.T) {
	for _, np := range []int{2, 4, 8} {
		r := mpirun(t, np, "rounds")
		if r.err != nil || len(r.ok) != np {
			t.Errorf("np %d: mpirun: %v; %d ranks ok; it printed:\n%s", np, r.err, len(r.ok), r.out)
		}
		for rank, e := range r.errs {
			t.Errorf("np %d: rank %d: %s", np, rank, e)
		}
		noneLeft(t, r)
	}
}

// TestMpirunAllreduce: a Go program using coll.FromEnv under mpirun at
// 2, 4 and 8 ranks, each process on a softdev device of its own: New
// through PMIx and an allreduce of rank+1, the sum checked on every rank.
func TestMpirunAllreduce(t *testing.T) {
	for _, np := range []int{2, 4, 8} {
		r := mpirun(t, np, "allreduce")
		if r.err != nil || len(r.ok) != np {
			t.Errorf("np %d: mpirun: %v; %d ranks ok; it printed:\n%s", np, r.err, len(r.ok), r.out)
		}
		noneLeft(t, r)
	}
}

// TestMpirunFaults: a rank that never reaches the exchange (stalls,
// exits, finalizes early, or is killed between rounds) ends the job:
// mpirun exits non-zero within a bound, the rank is named (by the other
// ranks, from PMIx, or by mpirun), no rank completes, and no process is
// left behind.
func TestMpirunFaults(t *testing.T) {
	const np = 4
	// Whoever reports first: the other ranks, from PMIx (the victim
	// published nothing), or mpirun (the victim's exit), racing to end
	// the job.
	var (
		fromPMIx   = regexp.MustCompile(`rank 2 published nothing for this round`)
		fromExit   = regexp.MustCompile(`Process name: \[\[\d+,\d+\],2\]\s+Exit code:\s+3`)
		fromSignal = regexp.MustCompile(`process rank 2 with PID \d+ on node \S+ exited on signal 9`)
	)
	for _, tc := range []struct {
		mode string
		says []*regexp.Regexp // one of them, in a surviving rank's error or mpirun's output
	}{
		{"stall", []*regexp.Regexp{regexp.MustCompile(`rank 2 published nothing for this round within 2s`)}},
		{"finalize", []*regexp.Regexp{fromPMIx}}, // reported gone at once, or at the deadline
		{"exit", []*regexp.Regexp{fromPMIx, fromExit}},
		{"kill", []*regexp.Regexp{regexp.MustCompile(`round 2: .*` + fromPMIx.String()), fromSignal}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			r := mpirun(t, np, tc.mode, fmt.Sprintf("%s=%d", victimEnv, victim))
			if r.err == nil {
				t.Errorf("mpirun exited 0; it printed:\n%s", r.out)
			}
			if r.took > 30*time.Second {
				t.Errorf("mpirun took %v", r.took)
			}
			for rank := range r.ok {
				if rank != victim {
					t.Errorf("rank %d completed its rounds", rank)
				}
			}
			named := false
			for _, re := range tc.says {
				named = named || re.MatchString(r.out)
			}
			if !named {
				t.Errorf("nothing says %q; mpirun printed:\n%s", tc.says, r.out)
			}
			if len(r.pids) != np {
				t.Errorf("%d ranks printed their pid, want %d:\n%s", len(r.pids), np, r.out)
			}
			noneLeft(t, r)
			t.Logf("mpirun: %v after %v; ranks' errors: %v", r.err, r.took.Round(time.Millisecond), r.errs)
		})
	}
}

// TestInitWithoutLauncher: outside a PMIx job, Init fails saying so.
func TestInitWithoutLauncher(t *testing.T) {
	if os.Getenv("PMIX_NAMESPACE") != "" {
		t.Skip("SKIPPED: this test is itself running under a PMIx launcher")
	}
	c, err := pmix.Init(pmix.Options{})
	if err == nil {
		c.Close()
		t.Fatal("Init succeeded without a launcher")
	}
	if !strings.Contains(err.Error(), "PMIx_Init") || !strings.Contains(err.Error(), "mpirun or srun --mpi=pmix") {
		t.Errorf("%v", err)
	}
	if _, err := pmix.Init(pmix.Options{Timeout: -1}); err == nil {
		t.Error("a negative timeout was accepted")
	}
}
