package tests

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// run runs a command line with sh in dir and returns its exit status and
// combined output.
func shell(t *testing.T, dir, line string, env ...string) (int, string) {
	t.Helper()
	cmd := exec.Command("sh", "-c", line)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "CGO_CFLAGS=", "MAKEFLAGS="), env...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	}
	t.Fatalf("%s: %v", line, err)
	return 0, ""
}

// printed finds the command a message prints after prefix, up to the end
// of its line or a closing parenthesis.
func printed(t *testing.T, out, prefix string) string {
	t.Helper()
	m := regexp.MustCompile(regexp.QuoteMeta(prefix) + `([^\n()]+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the output does not print %q…:\n%s", prefix, out)
	}
	return strings.TrimSpace(m[1])
}

// TestPrintedNextSteps follows, in a scratch copy of this module, the
// next steps make generate and make abi-check print, running each
// command as printed: a breaking regeneration (make generate refuses and
// names ALLOW_BREAKING=1; with it, it replaces generated/ and names make
// abi-baseline, which make abi-check's failure names too; after it make
// abi-check passes), and headers the runtime cannot use (upstream
// rdma-core's, with ENTRY: refused whatever ALLOW_BREAKING says, with the
// compiler's errors and a gen command into a package of one's own, which
// then works).
func TestPrintedNextSteps(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIPPED in -short: regenerates and builds a copy of the module")
	}
	mod := copyModule(t)
	inc := t.TempDir()
	if err := os.CopyFS(inc, os.DirFS(filepath.Join(repoRoot(t), "headers"))); err != nil {
		t.Fatal(err)
	}
	exp := filepath.Join(inc, "infiniband", "verbs_exp.h")
	b, err := os.ReadFile(exp)
	if err != nil {
		t.Fatal(err)
	}
	// A breaking change the runtime does not mind: a constant renamed.
	const was = "IBV_EXP_DEVICE_SHUTDOWN_PORT "
	if !strings.Contains(string(b), was) {
		t.Fatalf("%q not in verbs_exp.h", was)
	}
	if err := os.WriteFile(exp, []byte(strings.Replace(string(b), was, "IBV_EXP_DEVICE_PORT_SHUTDOWN ", 1)), 0o644); err != nil {
		t.Fatal(err)
	}

	code, out := shell(t, mod, "make generate OFED_INCLUDE="+inc)
	if code == 0 {
		t.Fatalf("make generate took a breaking change:\n%s", out)
	}
	next := printed(t, out, "to accept them run: ")
	if !strings.HasPrefix(next, "make generate ") || !strings.Contains(next, "ALLOW_BREAKING=1") || !strings.Contains(next, "OFED_INCLUDE="+inc) {
		t.Errorf("make generate prints %q, want make generate with ALLOW_BREAKING=1 and OFED_INCLUDE=%s", next, inc)
	}
	code, out = shell(t, mod, next)
	if code != 0 {
		t.Fatalf("%s: exit %d\n%s", next, code, out)
	}
	for _, w := range []string{"generated/verbs/ replaced", "test it with: make test OFED_INCLUDE=" + inc, "accept them with make abi-baseline"} {
		if !strings.Contains(out, w) {
			t.Errorf("%s does not say %q:\n%s", next, w, out)
		}
	}
	// make test runs go test ./... (whose TestGeneratedIsCurrent checks
	// the baseline) and then make abi-check: both must name the way out.
	code, out = shell(t, mod, "go test ./tests -run TestGeneratedIsCurrent -count=1", "VERBSEXP_HEADERS="+inc)
	if code == 0 || !strings.Contains(out, "make abi-baseline") || !strings.Contains(out, "make test ACK_BREAKING=1") {
		t.Errorf("TestGeneratedIsCurrent against the old baseline: exit %d, want a failure naming make abi-baseline and ACK_BREAKING=1:\n%s", code, out)
	}
	if code, out = shell(t, mod, "go test ./tests -run TestGeneratedIsCurrent -count=1", "VERBSEXP_HEADERS="+inc, "VERBSEXP_ACK_BREAKING=1"); code != 0 {
		t.Errorf("TestGeneratedIsCurrent with VERBSEXP_ACK_BREAKING=1 (make test ACK_BREAKING=1): exit %d\n%s", code, out)
	}
	code, out = shell(t, mod, "make abi-check OFED_INCLUDE="+inc)
	if code == 0 || !strings.Contains(out, "abi-check: to accept them all: make abi-baseline") {
		t.Fatalf("make abi-check against the old baseline: exit %d, want a failure naming make abi-baseline:\n%s", code, out)
	}
	if code, out = shell(t, mod, "make abi-check OFED_INCLUDE="+inc+" ACK_BREAKING=1"); code != 0 {
		t.Errorf("make abi-check ACK_BREAKING=1: exit %d\n%s", code, out)
	}
	if code, out = shell(t, mod, "make abi-baseline"); code != 0 {
		t.Fatalf("make abi-baseline: exit %d\n%s", code, out)
	}
	if code, out = shell(t, mod, "make abi-check OFED_INCLUDE="+inc); code != 0 {
		t.Errorf("make abi-check after make abi-baseline: exit %d\n%s", code, out)
	}

	// rdma-core: the runtime cannot use it; never offered ALLOW_BREAKING.
	rdma := "/usr/include"
	if _, err := os.Stat(filepath.Join(rdma, "infiniband", "verbs.h")); err != nil {
		t.Skip("SKIPPED the rdma-core half: no /usr/include/infiniband/verbs.h (apt-get install libibverbs-dev)")
	}
	before := readDir(t, filepath.Join(mod, "generated", "verbs"))
	for _, line := range []string{"make generate OFED_INCLUDE=" + rdma + " ENTRY=infiniband/verbs.h", "make generate OFED_INCLUDE=" + rdma + " ENTRY=infiniband/verbs.h ALLOW_BREAKING=1"} {
		code, out = shell(t, mod, line)
		if code == 0 {
			t.Fatalf("%s replaced the runtime's package with rdma-core's:\n%s", line, out)
		}
		for _, w := range []string{"the runtime does not build against the package generated from " + rdma, "undefined: verbs.Exp", "generate these headers into a package of your own instead: go run ./gen -I " + rdma + " -entry infiniband/verbs.h -o DIR"} {
			if !strings.Contains(out, w) {
				t.Errorf("%s does not say %q:\n%s", line, w, out)
			}
		}
		if strings.Contains(out, "ALLOW_BREAKING=1") && !strings.Contains(line, "ALLOW_BREAKING") {
			t.Errorf("%s offers ALLOW_BREAKING=1 for a package the runtime cannot use:\n%s", line, out)
		}
		if !sameFiles(before, readDir(t, filepath.Join(mod, "generated", "verbs"))) {
			t.Fatalf("%s changed generated/", line)
		}
	}
	own := strings.Replace(printed(t, out, "package of your own instead: "), "DIR", "internal/ibverbs", 1)
	if code, out = shell(t, mod, own); code != 0 {
		t.Errorf("the printed %s: exit %d\n%s", own, code, out)
	}
}
