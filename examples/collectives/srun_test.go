//go:build linux && cgo

package main

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/internal/examplecli"
	"github.com/verbsexp/verbsexp/internal/slurmtest"
)

// TestSrun runs the example with -launch env under Slurm's srun, on a
// one-node cluster of the test's own (internal/slurmtest), each rank a
// process on its own softdev device (the test binary running main):
//
//   - srun --mpi=pmix at 2, 4 and 8 ranks: coll.FromEnv finds the PMIx
//     server of Slurm's step daemon;
//   - srun --mpi=none at 2, 4 and 8 ranks with MASTER_ADDR=127.0.0.1 and
//     a free MASTER_PORT: the TCP rendezvous, rank and size from
//     SLURM_PROCID and SLURM_NTASKS, as the README says.
//
// Every run of every collective is checked on every rank: a rank whose
// check fails exits 1, and then so does srun (--kill-on-bad-exit ends
// the others at once). Rank 0's table must say the job's size and how
// it was launched, give the four collectives a time each, and count no
// RNR NAK.
func TestSrun(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIPPED in -short: starts a Slurm cluster and jobs of up to 8 processes")
	}
	c := slurmtest.Start(t, 8)
	t.Logf("Slurm: %s", c.Version)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const iters = 20
	head := regexp.MustCompile(`^(\d+) ranks, one per process \((.+)\), each on its own softdev device; New took \S+; (\d+) runs of each collective, every result checked on every rank; rank 0's times:$`)
	row := regexp.MustCompile(`^  (.+?) +([0-9]+\.[0-9]{2}) µs per collective \(median\)$`)
	wire := regexp.MustCompile(`^  RNR NAKs received by all ranks: (\d+); packets sent again: (\d+)$`)
	for _, mode := range []string{"pmix", "rendezvous"} {
		for _, n := range []int{2, 4, 8} {
			t.Run(fmt.Sprintf("%s/%dranks", mode, n), func(t *testing.T) {
				env := []string{examplecli.MainEnv}
				mpi, launcher := "pmix", "PMIx"
				if mode == "rendezvous" {
					if !c.HasMPI("none") {
						t.Fatalf("srun --mpi=list offers %v, no none", c.MPI)
					}
					port := slurmtest.FreePort(t)
					env = append(env, "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port))
					mpi, launcher = "none", fmt.Sprintf("TCP rendezvous at 127.0.0.1:%d (SLURM_PROCID, SLURM_NTASKS)", port)
				} else if !c.HasMPI("pmix") {
					t.Skipf("SKIPPED: this Slurm (%s) has no pmix plugin: srun --mpi=list offers %v", c.Version, c.MPI)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
				defer cancel()
				start := time.Now()
				out, err := c.Srun(t, ctx, env, "--quiet", "--mpi="+mpi, "-n", strconv.Itoa(n), "--kill-on-bad-exit=1",
					exe, "-launch", "env", "-iters", strconv.Itoa(iters)).CombinedOutput()
				took := time.Since(start)
				if ctx.Err() != nil {
					t.Fatalf("srun still running after 3 minutes: killed; it printed:\n%s", out)
				}
				if err != nil {
					t.Fatalf("srun: %v; it printed:\n%s", err, out)
				}
				lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
				if len(lines) != 6 {
					t.Fatalf("srun printed %d lines, want rank 0's 6:\n%s", len(lines), out)
				}
				m := head.FindStringSubmatch(lines[0])
				if m == nil || m[1] != strconv.Itoa(n) || m[2] != launcher || m[3] != strconv.Itoa(iters) {
					t.Errorf("rank 0's first line is\n\t%s\nwant %d ranks, (%s), %d runs", lines[0], n, launcher, iters)
				}
				for i, name := range []string{"barrier (one rank 2ms late)", "allreduce (sum of 4 uint64)",
					"broadcast (256 bytes from rank 0)", "allgather (32 bytes per rank)"} {
					if m := row.FindStringSubmatch(lines[1+i]); m == nil || m[1] != name {
						t.Errorf("line %d is %q, want %s and its time", 2+i, lines[1+i], name)
					}
				}
				if m := wire.FindStringSubmatch(lines[5]); m == nil || m[1] != "0" {
					t.Errorf("the last line is %q, want the job's RNR NAKs, 0", lines[5])
				}
				t.Logf("srun --mpi=%s -n %d: %v\n%s", mpi, n, took.Round(time.Millisecond), out)
			})
		}
	}
}
