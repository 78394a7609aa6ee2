//go:build linux && cgo && pmix

package coll_test

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/runtime/coll"
	_ "github.com/verbsexp/verbsexp/runtime/coll/pmix" // coll.FromEnv's PMIx
)

// The multi-process benchmark (bench_processes_test.go) under Open MPI's
// mpirun, endpoints through the launcher's PMIx server: the way an MPI
// job starts. It links libpmix, so it builds only with -tags pmix
// (make bench-mpirun), leaving the rest of coll's tests free of it.

// mpirunBenchEnv marks a process mpirun started as a rank.
const mpirunBenchEnv = "VERBSEXP_MPIRUN_BENCH"

// TestCollectiveMpirunRank is a rank of the jobs below; on its own it
// does nothing.
func TestCollectiveMpirunRank(t *testing.T) {
	if os.Getenv(mpirunBenchEnv) == "" {
		t.Skip("SKIPPED: a rank of BenchmarkCollectiveMpirun and TestCollectiveMpirunBench, started by mpirun; nothing to do on its own")
	}
	job, err := coll.FromEnv(coll.JobOptions{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if job.Launcher != "PMIx" {
		t.Fatalf("FromEnv found %s, want PMIx", job.Launcher)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
	defer cancel()
	err = coll.ProcBenchRank(ctx, job.Rank(), job.Size(), job.Exchange)
	if cerr := job.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("rank %d of %d: %v", job.Rank(), job.Size(), err)
	}
}

// mpirunJob runs n ranks of this test binary under mpirun (as root it
// needs --allow-run-as-root, on 2 cores --oversubscribe) and returns
// their output; the job is killed, its process group with it, after
// timeout.
func mpirunJob(timeout time.Duration) func(tb testing.TB, n int, env string) []byte {
	return func(tb testing.TB, n int, env string) []byte {
		tb.Helper()
		path, err := exec.LookPath("mpirun")
		if err != nil {
			tb.Skip("SKIPPED: no mpirun (Debian: apt-get install openmpi-bin; make bench-mpirun installs it)")
		}
		if os.Getenv("PMIX_NAMESPACE") != "" {
			tb.Skip("SKIPPED: this process is itself running under a PMIx launcher")
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, path, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
			"-np", strconv.Itoa(n), "-x", mpirunBenchEnv, "-x", "VERBSEXP_PROCBENCH",
			os.Args[0], "-test.run=^TestCollectiveMpirunRank$", "-test.v")
		cmd.Env = append(os.Environ(), mpirunBenchEnv+"=1", env)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil {
			tb.Fatalf("mpirun -np %d still running after %v: killed; it printed:\n%s", n, timeout, out)
		}
		if err != nil {
			tb.Fatalf("mpirun -np %d: %v; it printed:\n%s", n, err, out)
		}
		return out
	}
}

// TestCollectiveMpirunBench: the benchmark's ranks briefly under mpirun
// at 4 processes (coll.ProcSmoke).
func TestCollectiveMpirunBench(t *testing.T) {
	if os.Getenv(mpirunBenchEnv) != "" {
		t.Skip("SKIPPED: a rank")
	}
	coll.ProcSmoke(t, "mpirun", mpirunJob(2*time.Minute), 4)
}

// BenchmarkCollectiveMpirun is BenchmarkCollectiveProcesses with the
// ranks started by mpirun -np 2, 4, 8 and New's exchange through PMIx.
func BenchmarkCollectiveMpirun(b *testing.B) {
	coll.BenchProcesses(b, "mpirun (PMIx exchange)", mpirunJob(10*time.Minute))
}
