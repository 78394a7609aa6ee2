//go:build linux && cgo

package pmix_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/internal/slurmtest"
	"github.com/verbsexp/verbsexp/runtime/coll"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/softdev"
)

// The same ranks as under mpirun (child, in mpirun_test.go), started by
// Slurm's srun --mpi=pmix on a one-node cluster of the test's own
// (internal/slurmtest): the PMIx server is then Slurm's step daemon's.

// srunCluster starts the cluster, or skips t if its Slurm has no pmix
// plugin.
func srunCluster(t *testing.T) *slurmtest.Cluster {
	t.Helper()
	if os.Getenv("PMIX_NAMESPACE") != "" {
		t.Skip("SKIPPED: this test is itself running under a PMIx launcher")
	}
	c := slurmtest.Start(t, 8)
	if !c.HasMPI("pmix") {
		t.Skipf("SKIPPED: this Slurm (%s) has no pmix plugin: srun --mpi=list offers %v", c.Version, c.MPI)
	}
	t.Logf("Slurm: %s", c.Version)
	return c
}

// srun runs np ranks of this test binary in mode under srun --mpi=pmix
// with extra srun flags and environment.
func srun(t *testing.T, c *slurmtest.Cluster, np int, mode string, flags []string, env ...string) result {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append([]string{"--quiet", "--mpi=pmix", "-n", strconv.Itoa(np)}, flags...)
	cmd := c.Srun(t, ctx, append([]string{childEnv + "=" + mode}, env...), append(args, exe, "-test.run=^$")...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("srun -n %d (%s) still running after 2 minutes: killed; it printed:\n%s", np, mode, out)
	}
	return parseRun(out, err, time.Since(start))
}

// TestSrun: under srun --mpi=pmix at 2, 4 and 8 ranks, FromEnv finds
// PMIx, the rank and size agree with Slurm's (SLURM_PROCID,
// SLURM_NTASKS), and four rounds of Exchange give every rank every
// rank's bytes (0 to 4 KiB), each byte checked. (New and the
// collectives under srun: examples/collectives' TestSrun.)
func TestSrun(t *testing.T) {
	c := srunCluster(t)
	for _, np := range []int{2, 4, 8} {
		r := srun(t, c, np, "rounds", []string{"--kill-on-bad-exit=1"})
		if r.err != nil || len(r.ok) != np {
			t.Errorf("-n %d: srun: %v; %d ranks ok; it printed:\n%s", np, r.err, len(r.ok), r.out)
		}
		for rank, e := range r.errs {
			t.Errorf("-n %d: rank %d: %s", np, rank, e)
		}
		noneLeft(t, r)
		t.Logf("srun -n %d: %v", np, r.took.Round(time.Millisecond))
	}
}

// lostRun is the allreduce run after which the victim kills itself.
const lostRun = 3

// lostRank is a rank of TestSrunRankKilled: New through the launcher,
// then allreduces of rank+1, each checked; the victim SIGKILLs its own
// process right after posting run lostRun (printing "killing RANK at
// UNIXNANO" first). Every other rank's Wait must then end with an error
// naming the rank lost, as coll's documentation says (Faults): a
// *coll.PeerLostError (a probe found it, a neighbor told, or its own
// send to it exhausted its retries). The rank prints "lost RANK:
// rank PEER after DURATION (TYPE): ERROR" and ends with status 1, as a
// rank whose job lost a member should.
func lostRank(job *coll.Job, victim int) int {
	rank := job.Rank()
	fail := func(err error) int {
		fmt.Printf("error %d: %v\n", rank, err)
		return 1
	}
	dev, err := softdev.Open()
	if err != nil {
		return fail(err)
	}
	defer dev.Close()
	c, err := coll.New(dev.Context(), rank, job.Size(), job.Exchange, coll.Options{})
	if err != nil {
		return fail(err)
	}
	defer c.Close()
	buf, err := lease.Alloc(coll.ElementSize)
	if err != nil {
		return fail(err)
	}
	defer buf.Free()
	mem, err := c.Register(buf)
	if err != nil {
		return fail(err)
	}
	defer mem.Close()
	s, err := c.Allreduce(mem, mem, 1, verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint)
	if err != nil {
		return fail(err)
	}
	defer s.Close()
	n := job.Size()
	for run := 0; ; run++ {
		coll.PutElement(mem.Bytes(), 0, uint64(rank+1), 0)
		if err := s.Post(); err != nil {
			return fail(fmt.Errorf("run %d: %v", run, err))
		}
		if rank == victim && run == lostRun {
			fmt.Printf("killing %d at %d\n", rank, time.Now().UnixNano())
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := s.WaitContext(ctx)
		cancel()
		took := time.Since(start)
		if err == nil {
			if v, _ := coll.Element(mem.Bytes(), 0); v != uint64(n*(n+1)/2) {
				return fail(fmt.Errorf("run %d: sum %d, want %d", run, v, n*(n+1)/2))
			}
			if run > lostRun {
				return fail(fmt.Errorf("run %d completed after rank %d was killed in run %d", run, victim, lostRun))
			}
			continue
		}
		var lost *coll.PeerLostError
		if !errors.As(err, &lost) {
			return fail(fmt.Errorf("run %d: %T, not a *coll.PeerLostError: %v", run, err, err))
		}
		fmt.Printf("lost %d: rank %d after %v (%T): %v\n", rank, lost.Peer, took, lost, err)
		return 1
	}
}

// TestSrunRankKilled: under srun --mpi=pmix at 2, 4 and 8 ranks, the
// last rank SIGKILLs itself mid-allreduce (lostRank). srun is told not
// to kill the job when a task fails (--kill-on-bad-exit=0), so every
// other rank must end on its own: each with a *coll.PeerLostError naming
// the victim, within the bound TestRankKilledMidCollective holds
// coll to (probeAfter, then the QP's timeout 14 × (retry_cnt 7 + 1) ≈
// 0.54 s, with 3 s of slack for a loaded host); srun must say the
// victim was killed and exit non-zero, at most 10 s after the kill; no
// rank is left running.
func TestSrunRankKilled(t *testing.T) {
	c := srunCluster(t)
	const (
		notice   = 250*time.Millisecond + 8*67*time.Millisecond + 3*time.Second
		srunEnds = 10 * time.Second
	)
	lostLine := regexp.MustCompile(`^lost (\d+): rank (\d+) after (\S+) \(\*coll\.PeerLostError\): `)
	killLine := regexp.MustCompile(`(?m)^killing (\d+) at (\d+)$`)
	for _, np := range []int{2, 4, 8} {
		t.Run(fmt.Sprint(np, "ranks"), func(t *testing.T) {
			victim := np - 1
			r := srun(t, c, np, "lost", []string{"--kill-on-bad-exit=0"}, fmt.Sprintf("%s=%d", victimEnv, victim))
			end := time.Now()
			var ee *exec.ExitError
			if !errors.As(r.err, &ee) {
				t.Errorf("srun ended with %v, want a non-zero exit", r.err)
			}
			if want := fmt.Sprintf("srun: error: %s: task %d: Killed", c.Node, victim); !strings.Contains(r.out, want) {
				t.Errorf("srun did not say %q", want)
			}
			m := killLine.FindStringSubmatch(r.out)
			if m == nil || m[1] != strconv.Itoa(victim) {
				t.Fatalf("rank %d did not say it killed itself; srun printed:\n%s", victim, r.out)
			}
			killed, _ := strconv.ParseInt(m[2], 10, 64)
			after := end.Sub(time.Unix(0, killed))
			if after > srunEnds {
				t.Errorf("srun ended %v after the kill, bound %v", after, srunEnds)
			}
			lost := map[int]time.Duration{}
			for _, l := range strings.Split(r.out, "\n") {
				if m := lostLine.FindStringSubmatch(l); m != nil {
					rank, _ := strconv.Atoi(m[1])
					took, _ := time.ParseDuration(m[3])
					if m[2] != strconv.Itoa(victim) {
						t.Errorf("rank %d blames rank %s, not %d: %s", rank, m[2], victim, l)
					}
					if took > notice {
						t.Errorf("rank %d noticed after %v, bound %v", rank, took, notice)
					}
					lost[rank] = took
				}
			}
			for rank := range np - 1 {
				if _, ok := lost[rank]; !ok {
					t.Errorf("rank %d did not end with an error naming rank %d", rank, victim)
				}
			}
			for rank, e := range r.errs {
				t.Errorf("rank %d: %s", rank, e)
			}
			if t.Failed() {
				t.Logf("srun printed:\n%s", r.out)
			}
			noneLeft(t, r)
			t.Logf("srun -n %d: exit %v, %v after the kill (the job %v); ranks noticed after %v",
				np, r.err, after.Round(time.Millisecond), r.took.Round(time.Millisecond), lost)
		})
	}
}
