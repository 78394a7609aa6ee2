package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

// TestRegenerateSweeps: a make generate killed with SIGKILL leaves its
// scratch directory (.tmp/regen.*, up to 10 MB); the next run removes it,
// and spares those of runs still going (locked) and one made a moment
// ago. Before, they stayed for good.
func TestRegenerateSweeps(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("SKIPPED: flock(1) (util-linux) is not installed: scripts/regenerate sweeps nothing without it")
	}
	mod := copyModule(t)
	tmp := filepath.Join(mod, ".tmp")
	// A run killed mid-way: once its scratch directory holds gen.
	cmd := exec.Command("scripts/regenerate", "--check")
	cmd.Dir = mod
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var killed []string
	for end := time.Now().Add(2 * time.Minute); len(killed) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			cmd.Wait()
			t.Fatal("scripts/regenerate --check built no gen in its scratch directory within 2 minutes")
		}
		if m, _ := filepath.Glob(filepath.Join(tmp, "regen.*", "gen")); len(m) > 0 {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			killed = []string{filepath.Dir(m[0])}
		}
	}
	cmd.Wait()
	if _, err := os.Stat(killed[0]); err != nil {
		t.Fatalf("the killed run left no scratch directory (%v): nothing to sweep", err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(killed[0], old, old); err != nil { // as if killed an hour ago
		t.Fatal(err)
	}
	running := filepath.Join(tmp, "regen.running")
	fresh := filepath.Join(tmp, "regen.fresh")
	for _, d := range []string{running, fresh} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chtimes(running, old, old); err != nil {
		t.Fatal(err)
	}
	lock, err := os.Open(running)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if code, out := runScript(t, mod, nil, "scripts/regenerate", "--check"); code != 0 {
		t.Fatalf("scripts/regenerate --check: exit %d\n%s", code, out)
	}
	left, _ := filepath.Glob(filepath.Join(tmp, "regen.*"))
	if want := []string{fresh, running}; !slices.Equal(left, want) {
		t.Errorf("after a run, .tmp holds %v; want %v (the killed run's %s swept, a running one's and a new one kept)", left, want, filepath.Base(killed[0]))
	}
}
