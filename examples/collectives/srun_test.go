//go:build linux && cgo

package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/internal/examplecli"
	"github.com/verbsexp/verbsexp/internal/slurmtest"
)

// srunIters is how many runs of each collective a job makes.
const srunIters = 20

// jobTimeout bounds a job; its process group is killed then.
const jobTimeout = 3 * time.Minute

// TestSrun runs the example with -launch env under Slurm's srun, on a
// one-node cluster of the test's own (internal/slurmtest), each rank a
// process on its own softdev device (the test binary running main):
//
//   - srun --mpi=pmix at 2, 4 and 8 ranks: coll.FromEnv finds the PMIx
//     server of Slurm's step daemon;
//   - srun --mpi=none at 8 ranks with MASTER_ADDR=127.0.0.1 and a free
//     MASTER_PORT: the TCP rendezvous, rank and size from SLURM_PROCID
//     and SLURM_NTASKS;
//   - docs/cluster.md's job script for the rendezvous, as written (but for
//     MASTER_PORT, a free port here), under salloc -n 4: MASTER_ADDR the
//     allocation's first node, a token from openssl, srun --mpi=none.
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
	program := []string{exe, "-launch", "env", "-iters", strconv.Itoa(srunIters)}
	for _, job := range []struct {
		mpi string // srun --mpi=
		n   int
	}{{"pmix", 2}, {"pmix", 4}, {"pmix", 8}, {"none", 8}} {
		t.Run(fmt.Sprintf("%s/%dranks", job.mpi, job.n), func(t *testing.T) {
			if !c.HasMPI(job.mpi) {
				t.Skipf("SKIPPED: this Slurm (%s) has no %s plugin: srun --mpi=list offers %v", c.Version, job.mpi, c.MPI)
			}
			env, launcher := []string{examplecli.MainEnv}, "PMIx"
			if job.mpi == "none" {
				port := slurmtest.FreePort(t)
				env = append(env, "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port))
				launcher = fmt.Sprintf("TCP rendezvous at 127.0.0.1:%d (SLURM_PROCID, SLURM_NTASKS)", port) + slurmJob
			}
			ctx, cancel := context.WithTimeout(context.Background(), jobTimeout)
			defer cancel()
			args := append([]string{"--quiet", "--mpi=" + job.mpi, "-n", strconv.Itoa(job.n), "--kill-on-bad-exit=1"}, program...)
			runJob(t, ctx, c.Srun(t, ctx, env, args...), job.n, launcher)
		})
	}
	t.Run("readme-script/4ranks", func(t *testing.T) {
		script := readmeJobScript(t)
		port := slurmtest.FreePort(t)
		if strings.Count(script, "MASTER_PORT=29500") != 1 {
			t.Fatalf("docs/cluster.md's script sets no MASTER_PORT=29500 (the test puts a free port there):\n%s", script)
		}
		script = strings.Replace(script, "MASTER_PORT=29500", "MASTER_PORT="+strconv.Itoa(port), 1)
		if _, err := net.LookupHost(c.Node); err != nil {
			t.Skipf("SKIPPED: this host's name %s, the node's, does not resolve (%v): the script's MASTER_ADDR would not", c.Node, err)
		}
		if _, err := exec.LookPath("openssl"); err != nil {
			t.Skip("SKIPPED: no openssl, which the script makes its token with (apt-get install openssl; make test installs it)")
		}
		dir := t.TempDir()
		prog := fmt.Sprintf("#!/bin/sh\nexec %s\n", strings.Join(program, " "))
		if err := os.WriteFile(filepath.Join(dir, "prog"), []byte(prog), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "job.sh"), []byte(script), 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), jobTimeout)
		defer cancel()
		cmd := c.Job(t, ctx, []string{examplecli.MainEnv}, "salloc", "--quiet", "-n", "4", "sh", "job.sh")
		cmd.Dir = dir
		runJob(t, ctx, cmd, 4, fmt.Sprintf("TCP rendezvous at %s:%d (SLURM_PROCID, SLURM_NTASKS)", c.Node, port)+slurmJob)
	})
}

// readmeJobScript is docs/cluster.md's sh block that runs srun --mpi=none.
func readmeJobScript(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "cluster.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)\n *```sh\n(.*?)\n *```\n").FindAllStringSubmatch(string(b), -1)
	for _, m := range blocks {
		if strings.Contains(m[1], "srun --mpi=none ./prog") {
			var lines []string
			for _, l := range strings.Split(m[1], "\n") {
				lines = append(lines, strings.TrimSpace(l))
			}
			return strings.Join(lines, "\n") + "\n"
		}
	}
	t.Fatal("docs/cluster.md has no sh block running srun --mpi=none ./prog")
	return ""
}

var (
	tableHead = regexp.MustCompile(`^(\d+) ranks, one per process \((.+)\), each on its own softdev device; New took \S+; (\d+) runs of each collective, every result checked on every rank; rank 0's times:$`)
	tableRow  = regexp.MustCompile(`^  (.+?) +([0-9]+\.[0-9]{2}) µs per collective \(median\)$`)
	tableWire = regexp.MustCompile(`^  RNR NAKs received by all ranks: (\d+); packets sent again: (\d+)$`)
)

// slurmJob ends what FromEnv says of a rendezvous under srun: the job's
// identity, from Slurm's job and step ids (two steps of one allocation
// given one address refuse each other's ranks).
const slurmJob = ", job SLURM_JOB_ID=* SLURM_STEP_ID=*"

// runJob runs a job of n ranks (cmd, killed when ctx ends) and checks
// that it succeeded and that rank 0's table, all it printed, says n
// ranks launched by launcher (a * in it stands for a number).
func runJob(t *testing.T, ctx context.Context, cmd *exec.Cmd, n int, launcher string) {
	t.Helper()
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("%v still running after %v: killed; it printed:\n%s", cmd.Args, jobTimeout, out)
	}
	if err != nil {
		t.Fatalf("%v: %v; it printed:\n%s", cmd.Args, err, out)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != 6 {
		t.Fatalf("the job printed %d lines, want rank 0's 6:\n%s", len(lines), out)
	}
	m := tableHead.FindStringSubmatch(lines[0])
	by := regexp.MustCompile("^" + strings.ReplaceAll(regexp.QuoteMeta(launcher), `\*`, `\d+`) + "$")
	if m == nil || m[1] != strconv.Itoa(n) || !by.MatchString(m[2]) || m[3] != strconv.Itoa(srunIters) {
		t.Errorf("rank 0's first line is\n\t%s\nwant %d ranks, (%s), %d runs", lines[0], n, launcher, srunIters)
	}
	for i, name := range []string{"barrier (one rank 2ms late)", "allreduce (sum of 4 uint64)",
		"broadcast (256 bytes from rank 0)", "allgather (32 bytes per rank)"} {
		if m := tableRow.FindStringSubmatch(lines[1+i]); m == nil || m[1] != name {
			t.Errorf("line %d is %q, want %s and its time", 2+i, lines[1+i], name)
		}
	}
	if m := tableWire.FindStringSubmatch(lines[5]); m == nil || m[1] != "0" {
		t.Errorf("the last line is %q, want the job's RNR NAKs, 0", lines[5])
	}
	t.Logf("%s: %v\n%s", strings.Join(cmd.Args[:6], " "), took.Round(time.Millisecond), out)
}
