//go:build linux

package slurmtest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCluster: the cluster comes up, srun runs 4 tasks on it with
// Slurm's rank and size, and when the test ends nothing uses its
// directory and the directory is gone (stop checks both and fails the
// test otherwise; here checked again from outside).
func TestCluster(t *testing.T) {
	var dir string
	t.Run("run", func(t *testing.T) {
		c := Start(t, 4)
		dir = c.Dir
		t.Logf("%s; srun --mpi=list: %v", c.Version, c.MPI)
		if !strings.HasPrefix(c.Version, "slurm") {
			t.Errorf("srun --version said %q", c.Version)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := c.Srun(t, ctx, nil, "-n", "4", "sh", "-c", `echo "$SLURM_PROCID of $SLURM_NTASKS on $SLURMD_NODENAME"`).CombinedOutput()
		if err != nil {
			t.Fatalf("srun: %v: %s", err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		slices.Sort(lines)
		want := []string{"0 of 4 on " + c.Node, "1 of 4 on " + c.Node, "2 of 4 on " + c.Node, "3 of 4 on " + c.Node}
		if !slices.Equal(lines, want) {
			t.Errorf("srun -n 4 printed %q, want %q", lines, want)
		}
	})
	if dir == "" {
		return
	}
	if users := Users(dir); len(users) > 0 {
		t.Errorf("after the test: %v", users)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s is still there: %v", dir, err)
	}
}

const childEnv = "VERBSEXP_SLURMTEST_CHILD"

// TestKilledTestLeavesNothing: a test process that started a cluster
// and a job step (srun of two tasks that would sleep 10 minutes) is
// killed with SIGKILL, so no cleanup of its runs: the reaper still kills
// the daemons, slurmstepd, the tasks and srun, and deletes the
// directory, within 15 s.
func TestKilledTestLeavesNothing(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		c := Start(t, 2)
		srun := c.Srun(t, context.Background(), nil, "-n", "2", "sh", "-c", "echo started; exec sleep 600")
		out, err := srun.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := srun.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		for range 2 {
			if !sc.Scan() {
				t.Fatalf("srun ended before both tasks started: %v", srun.Wait())
			}
		}
		fmt.Printf("dir %s\n", c.Dir)
		time.Sleep(10 * time.Minute) // until killed
		return
	}
	child := exec.Command(os.Args[0], "-test.run=^TestKilledTestLeavesNothing$", "-test.v")
	child.Env = append(os.Environ(), childEnv+"=1")
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	dir := ""
	sc := bufio.NewScanner(out)
	var said []string
	for dir == "" && sc.Scan() {
		said = append(said, sc.Text())
		if d, ok := strings.CutPrefix(sc.Text(), "dir "); ok {
			dir = d
		}
	}
	if dir == "" {
		if strings.Contains(strings.Join(said, "\n"), "SKIPPED") {
			t.Skipf("the child skipped: %s", strings.Join(said, "\n"))
		}
		t.Fatalf("the child printed no directory:\n%s", strings.Join(said, "\n"))
	}
	before := Users(dir)
	names := map[string]bool{}
	for _, u := range before {
		names[u.Name] = true
	}
	for _, n := range []string{"munged", "slurmctld", "slurmd", "slurmstepd", "srun", "sleep"} {
		if !names[n] {
			t.Errorf("no %s uses %s while the job runs: %v", n, dir, before)
		}
	}
	child.Process.Kill()
	child.Wait()
	start := time.Now()
	for {
		users := Users(dir)
		_, err := os.Stat(dir)
		if len(users) == 0 && os.IsNotExist(err) {
			t.Logf("%d processes used %s; all gone and the directory deleted %v after the test process was killed",
				len(before), dir, time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Since(start) > 15*time.Second {
			t.Fatalf("15 s after the test process was killed: %v still use %s (stat: %v)", users, dir, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSweep: a directory a dead process left, with a process still
// working in it, is stopped and deleted by the next Start's sweep; one
// whose process lives is left alone.
func TestSweep(t *testing.T) {
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	mk := func(pid int) (string, *exec.Cmd) {
		dir := filepath.Join(os.TempDir(), fmt.Sprintf("%s%d-%s", prefix, pid, "5ca1ab1e"))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		sleeper := exec.Command("sleep", "600")
		sleeper.Dir = dir
		sleeper.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := sleeper.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
		return dir, sleeper
	}
	staleDir, staleSleeper := mk(gone.Process.Pid)
	liveDir, _ := mk(os.Getppid()) // go test: alive
	ended := make(chan error, 1)
	go func() { ended <- staleSleeper.Wait() }()
	sweep(t)
	select {
	case err := <-ended:
		if ws, ok := staleSleeper.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
			t.Errorf("the process in the stale directory ended with %v, not SIGKILL", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the process in the stale directory still runs 10 s after the sweep")
	}
	if _, err := os.Stat(staleDir); !os.IsNotExist(err) {
		t.Errorf("the stale directory is still there: %v", err)
	}
	if users := Users(liveDir); len(users) != 1 {
		t.Errorf("the live run's directory: %v use it, want its one sleep", users)
	}
}
