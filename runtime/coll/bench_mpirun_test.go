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

	"github.com/verbsexp/verbsexp/internal/slurmtest"
	"github.com/verbsexp/verbsexp/runtime/coll"
	_ "github.com/verbsexp/verbsexp/runtime/coll/pmix" // coll.FromEnv's PMIx
)

// The multi-process benchmark (bench_processes_test.go) under the
// launchers of MPI jobs, endpoints through the launcher's PMIx server:
// Open MPI's mpirun, and Slurm's srun --mpi=pmix on a one-node cluster
// the benchmark runs itself (internal/slurmtest). It links libpmix, so
// it builds only with -tags pmix (make bench-mpirun), leaving the rest
// of coll's tests free of it.

// launcherBenchEnv marks a process a launcher started as a rank.
const launcherBenchEnv = "VERBSEXP_LAUNCHER_BENCH"

// TestCollectiveLauncherRank is a rank of the jobs below; on its own it
// does nothing.
func TestCollectiveLauncherRank(t *testing.T) {
	if os.Getenv(launcherBenchEnv) == "" {
		t.Skip("SKIPPED: a rank of BenchmarkCollectiveLaunchers and TestCollective{Mpirun,Srun}Bench, started by mpirun or srun; nothing to do on its own")
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

// rankArgs run TestCollectiveLauncherRank alone.
var rankArgs = []string{"-test.run=^TestCollectiveLauncherRank$", "-test.v"}

// runJob runs a launcher's command and returns its output; the job is
// killed, its process group with it, when ctx ends.
func runJob(tb testing.TB, ctx context.Context, what string, cmd *exec.Cmd) []byte {
	tb.Helper()
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		tb.Fatalf("%s still running at its deadline: killed; it printed:\n%s", what, out)
	}
	if err != nil {
		tb.Fatalf("%s: %v; it printed:\n%s", what, err, out)
	}
	return out
}

// mpirunJob runs n ranks of this test binary under mpirun (as root it
// needs --allow-run-as-root, on 2 cores --oversubscribe) and returns
// their output; the job is killed after timeout.
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
		cmd := exec.CommandContext(ctx, path, append([]string{"--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
			"-np", strconv.Itoa(n), "-x", launcherBenchEnv, "-x", "VERBSEXP_PROCBENCH", os.Args[0]}, rankArgs...)...)
		cmd.Env = append(os.Environ(), launcherBenchEnv+"=1", env)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		return runJob(tb, ctx, "mpirun -np "+strconv.Itoa(n), cmd)
	}
}

// srunJob is mpirunJob under srun --mpi=pmix on cluster c.
func srunJob(c *slurmtest.Cluster, timeout time.Duration) func(tb testing.TB, n int, env string) []byte {
	return func(tb testing.TB, n int, env string) []byte {
		tb.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := c.Srun(tb, ctx, []string{launcherBenchEnv + "=1", env}, append([]string{"--quiet", "--mpi=pmix", "-n", strconv.Itoa(n),
			"--kill-on-bad-exit=1", os.Args[0]}, rankArgs...)...)
		return runJob(tb, ctx, "srun --mpi=pmix -n "+strconv.Itoa(n), cmd)
	}
}

// srunCluster starts a cluster for srunJob, or skips tb if its Slurm
// has no pmix plugin.
func srunCluster(tb testing.TB) *slurmtest.Cluster {
	tb.Helper()
	if os.Getenv("PMIX_NAMESPACE") != "" {
		tb.Skip("SKIPPED: this process is itself running under a PMIx launcher")
	}
	c := slurmtest.Start(tb, 8)
	if !c.HasMPI("pmix") {
		tb.Skipf("SKIPPED: this Slurm (%s) has no pmix plugin: srun --mpi=list offers %v", c.Version, c.MPI)
	}
	return c
}

// TestCollectiveMpirunBench: the benchmark's ranks briefly under mpirun
// at 4 processes (coll.ProcSmoke).
func TestCollectiveMpirunBench(t *testing.T) {
	if os.Getenv(launcherBenchEnv) != "" {
		t.Skip("SKIPPED: a rank")
	}
	coll.ProcSmoke(t, "mpirun", mpirunJob(2*time.Minute), 4)
}

// TestCollectiveSrunBench: the same under srun --mpi=pmix.
func TestCollectiveSrunBench(t *testing.T) {
	if os.Getenv(launcherBenchEnv) != "" {
		t.Skip("SKIPPED: a rank")
	}
	c := srunCluster(t)
	coll.ProcSmoke(t, "srun --mpi=pmix ("+c.Version+")", srunJob(c, 2*time.Minute), 4)
}

// BenchmarkCollectiveLaunchers is BenchmarkCollectiveProcesses with the
// ranks started by mpirun -np N and by srun --mpi=pmix -n N (N = 2, 4,
// 8), New's exchange through PMIx, in one table (a row per launcher).
// Without Slurm here (or root), the srun rows are left out, saying why.
func BenchmarkCollectiveLaunchers(b *testing.B) {
	launchers := []coll.ProcLauncher{{Name: "mpirun", Job: mpirunJob(10 * time.Minute)}}
	how := "mpirun -np N"
	if err := slurmtest.Available(); err != nil {
		b.Logf("NO srun ROWS: %v", err)
	} else {
		c := srunCluster(b)
		launchers = append(launchers, coll.ProcLauncher{Name: "srun", Job: srunJob(c, 10*time.Minute)})
		how += " and srun --mpi=pmix -n N (" + c.Version + ", a one-node cluster)"
	}
	coll.BenchLaunchers(b, how+"; PMIx exchange", launchers)
}
