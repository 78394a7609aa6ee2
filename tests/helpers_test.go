package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// repoRoot is the module root (tests/ is one level down).
func repoRoot(t testing.TB) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// buildGenerator builds the gen command once per test binary.
func buildGenerator(t testing.TB) string {
	t.Helper()
	genOnce.Do(func() {
		dir, err := os.MkdirTemp("", "verbsexp-gen-")
		if err != nil {
			genErr = err
			return
		}
		genBin = filepath.Join(dir, "gen")
		cmd := exec.Command("go", "build", "-o", genBin, "./gen")
		cmd.Dir = repoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			genErr = &buildError{err, string(out)}
		}
	})
	if genErr != nil {
		t.Fatalf("building the generator: %v", genErr)
	}
	return genBin
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

// runIn runs a command in dir and fails the test on error. The command
// does not inherit CGO_CFLAGS (make test OFED_INCLUDE=DIR sets it for the
// runtime's C): packages these tests generate build against their own
// headers unless env says otherwise.
func runIn(t testing.TB, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "CGO_CFLAGS="), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v in %s: %v\n%s", name, args, dir, err, out)
	}
	return string(out)
}
