package tests

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runScript runs a script of the module mod from dir and returns its exit
// status and output.
func runScript(t *testing.T, dir string, env []string, script string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(script, args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "CGO_CFLAGS="), env...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	case err != nil:
		t.Fatalf("%s %v: %v", script, args, err)
	}
	return 0, string(out)
}

// TestRegenerateKeepsUserFiles: make generate (scripts/regenerate) is as
// careful as gen -o: a file in generated/ that the generator did not
// write stops it, with the file named, and nothing is lost. It used to
// move the whole directory away and delete it, exit 0.
func TestRegenerateKeepsUserFiles(t *testing.T) {
	mod := copyModule(t)
	notes := filepath.Join(mod, "generated", "verbs", "NOTES.txt")
	if err := os.WriteFile(notes, []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Headers that change the package compatibly (one more constant), so
	// that the run gets to the replacement.
	h := filepath.Join(mod, "headers", "infiniband", "verbs_exp.h")
	b, err := os.ReadFile(h)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h, append(b, "\n#define IBV_EXP_REGEN_TEST_CONSTANT 7\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := runScript(t, mod, nil, "scripts/regenerate")
	if code == 0 || !strings.Contains(out, "holds NOTES.txt, which the generator did not write") || !strings.Contains(out, "generated/verbs/ left unchanged") {
		t.Errorf("exit %d, want a refusal naming NOTES.txt:\n%s", code, out)
	}
	if b, err := os.ReadFile(notes); err != nil || string(b) != "mine\n" {
		t.Errorf("generated/NOTES.txt lost or changed: %q %v", b, err)
	}
	consts, _ := os.ReadFile(filepath.Join(mod, "generated", "verbs", "consts.go"))
	if strings.Contains(string(consts), "IBV_EXP_REGEN_TEST_CONSTANT") {
		t.Errorf("generated/ was replaced despite the refusal")
	}
	// Moved away, the same run replaces generated/.
	if err := os.Remove(notes); err != nil {
		t.Fatal(err)
	}
	if code, out := runScript(t, mod, nil, "scripts/regenerate"); code != 0 || !strings.Contains(out, "generated/verbs/ replaced") {
		t.Fatalf("without NOTES.txt: exit %d\n%s", code, out)
	}
	consts, _ = os.ReadFile(filepath.Join(mod, "generated", "verbs", "consts.go"))
	if !strings.Contains(string(consts), "IBV_EXP_REGEN_TEST_CONSTANT") {
		t.Errorf("generated/ was not regenerated")
	}
}

// TestRegenerateRelativeDir: a relative DIR is relative to where the
// script runs, not silently to the repository root; the repository's
// headers/ however spelled is headers/.
func TestRegenerateRelativeDir(t *testing.T) {
	mod := copyModule(t)
	sub := filepath.Join(mod, "tests")
	mine := filepath.Join(sub, "myheaders")
	if err := os.CopyFS(mine, os.DirFS(filepath.Join(mod, "headers"))); err != nil {
		t.Fatal(err)
	}
	code, out := runScript(t, sub, nil, "../scripts/regenerate", "--check", "myheaders")
	// generated/ comes from headers/, so it is stale against another
	// directory: what matters is which directory was read.
	if code != 1 || !strings.Contains(out, "stale against "+mine) {
		t.Errorf("--check myheaders from tests/: exit %d, want 1 and %s named:\n%s", code, mine, out)
	}
	if code, out := runScript(t, sub, nil, "../scripts/regenerate", "--check", "../headers"); code != 0 || !strings.Contains(out, "generated/verbs/ is current with headers") {
		t.Errorf("--check ../headers from tests/: exit %d\n%s", code, out)
	}
}

// TestMakePathsWithSpaces: make generate and make abi-check take an
// OFED_INCLUDE with a space (they failed with "/bin/sh: 1: headers: not
// found" and a truncated path).
func TestMakePathsWithSpaces(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("SKIPPED: make(1) not installed")
	}
	mod := copyModule(t)
	spaced := filepath.Join(t.TempDir(), "my headers")
	if err := os.CopyFS(spaced, os.DirFS(filepath.Join(mod, "headers"))); err != nil {
		t.Fatal(err)
	}
	code, out := runScript(t, mod, nil, "make", "--no-print-directory", "generate", "OFED_INCLUDE="+spaced)
	if code != 0 || !strings.Contains(out, "generated/verbs/ replaced with the package generated from "+spaced) {
		t.Fatalf("make generate OFED_INCLUDE=%q: exit %d\n%s", spaced, code, out)
	}
	code, out = runScript(t, mod, nil, "make", "--no-print-directory", "abi-check", "OFED_INCLUDE="+spaced)
	if code != 0 || !strings.Contains(out, "gen check: ok") {
		t.Fatalf("make abi-check OFED_INCLUDE=%q: exit %d\n%s", spaced, code, out)
	}
	// What make cannot pass on is refused before any recipe runs.
	code, out = runScript(t, mod, nil, "make", "--no-print-directory", "generate", "OFED_INCLUDE=/opt/o'fed")
	if code != 2 || !strings.Contains(out, "holds a quote or a $, which make cannot pass on") {
		t.Errorf("make generate OFED_INCLUDE=/opt/o'fed: exit %d\n%s", code, out)
	}
}
