package tests

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Go's build cache keys a cgo package on its own directory's files and
// flags, not on the headers its preamble includes from elsewhere: after
// a header is edited in place, a plain go build links the package
// compiled from the old one, and its build guards (the _Static_asserts of
// shims.go) never run. These tests edit headers/ in place in a scratch
// copy of the module, as a user would, and build again without -a.

// guardProgram makes its first verb call and prints the error; it exits
// 3 when the error is the package's stale-headers error (ESTALE).
const guardProgram = `package main

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/verbsexp/verbsexp/generated/verbs"
)

func main() {
	err := verbs.ExpPostTask(nil, nil, nil)
	fmt.Println("first call:", err)
	if errors.Is(err, syscall.ESTALE) {
		os.Exit(3)
	}
}
`

// regenerateCommand is what generated/verbs records as the command that
// regenerates it.
const regenerateCommand = "go run github.com/verbsexp/verbsexp/gen -I ../../headers -o ."

// guardCopy copies the module (tracked and untracked files, not ignored
// ones) to a scratch directory, regenerates generated/verbs there with
// the generator of this checkout (as make generate does: -I
// ../../headers), removes the package's header links unless links is
// set (a module zip or a vendored copy has none), adds the guard program
// and builds it once.
func guardCopy(t *testing.T, links bool) string {
	t.Helper()
	if d := os.Getenv("VERBSEXP_HEADERS"); d != "" {
		t.Skipf("SKIPPED: generated/ comes from VERBSEXP_HEADERS=%s, which this test cannot edit in place; it runs on headers/", d)
	}
	bin := buildGenerator(t)
	dst := copyModule(t)
	pkg := filepath.Join(dst, "generated", "verbs")
	runIn(t, pkg, nil, bin, "-q", "-I", "../../headers", "-o", ".")
	entries, err := os.ReadDir(pkg)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if e.Type()&fs.ModeSymlink != 0 && strings.HasPrefix(e.Name(), "zhdr_") {
			n++
			if !links {
				if err := os.Remove(filepath.Join(pkg, e.Name())); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if n == 0 {
		t.Errorf("the generator wrote no header links (zhdr_*.h) into %s", pkg)
	}
	writeFileT(t, filepath.Join(dst, "cmd", "cacheguard", "main.go"), guardProgram)
	build := guardBuild(t, dst)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the guard program before any change: %v\n%s", err, firstLines(string(out), 30))
	}
	return dst
}

// guardBuild is a plain go build of the guard program (no -a, the
// user's build cache, no -trimpath).
func guardBuild(t *testing.T, dir string) *exec.Cmd {
	cmd := exec.Command("go", "build", "-o", "cacheguard", "./cmd/cacheguard")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "CGO_CFLAGS=", "GOFLAGS=", "GOWORK=off")
	return cmd
}

func writeFileT(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// growTask adds a member to struct ibv_exp_task in the copy's headers, in
// place.
func growTask(t *testing.T, dir string) {
	t.Helper()
	exp := filepath.Join(dir, "headers", "infiniband", "verbs_exp.h")
	b, err := os.ReadFile(exp)
	if err != nil {
		t.Fatal(err)
	}
	const anchor = "struct ibv_exp_task {"
	if !strings.Contains(string(b), anchor) {
		t.Fatalf("%q not found in %s", anchor, exp)
	}
	if err := os.WriteFile(exp, []byte(strings.Replace(string(b), anchor, anchor+"\n    uint64_t verbsexp_test_extra;", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCacheSeesHeaders: with the package's header links, a plain go build
// after the headers changed in place compiles the package again, and its
// guards stop the build, saying what to do and naming the record.
func TestCacheSeesHeaders(t *testing.T) {
	dir := guardCopy(t, true)
	growTask(t, dir)
	out, err := guardBuild(t, dir).CombinedOutput()
	if err == nil {
		t.Fatalf("go build succeeded after struct ibv_exp_task grew in place: the cached package was linked, its guards never ran\n%s", out)
	}
	t.Logf("go build after the edit:\n%s", firstLines(string(out), 8))
	for _, want := range []string{"these headers differ from the ones this package was generated from", "struct ibv_exp_task"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("build output lacks %q:\n%s", want, firstLines(string(out), 20))
		}
	}
}

// TestHeadersCheckedAtFirstCall: in a copy without the links (a module
// zip, a vendored copy), a plain go build after the headers changed in
// place links the cached package; the program then fails at its first
// verb call with an error naming the record and the commands that fix it.
func TestHeadersCheckedAtFirstCall(t *testing.T) {
	dir := guardCopy(t, false)
	growTask(t, dir)
	if out, err := guardBuild(t, dir).CombinedOutput(); err != nil {
		// Not what this test is about (the build cache saw the change
		// after all), but what it would make of it: say so.
		t.Fatalf("go build failed without the links (the cache saw the change): %v\n%s", err, firstLines(string(out), 20))
	}
	cmd := exec.Command(filepath.Join(dir, "cacheguard"))
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 3 {
		t.Fatalf("the program did not fail with ESTALE at its first verb call (%v):\n%s", err, out)
	}
	t.Logf("the program after the edit:\n%s", out)
	for _, want := range []string{"struct ibv_exp_task", filepath.Join(dir, "headers", "infiniband", "verbs_exp.h"), regenerateCommand, "go build -a"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the error lacks %q:\n%s", want, out)
		}
	}
}

// TestHeadersInstalledSinceBuild: a program built on the restatement in
// headers/ while /usr/include/infiniband/verbs_exp.h was absent fails at
// its first verb call once that file exists (MLNX_OFED installed since;
// here in a mount namespace of the test's own): its build guards never
// checked the headers its headers now defer to.
func TestHeadersInstalledSinceBuild(t *testing.T) {
	const installed = "/usr/include/infiniband/verbs_exp.h"
	if _, err := os.Stat(installed); err == nil {
		t.Skipf("SKIPPED: %s exists here: the package builds on it, not on the restatement", installed)
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("SKIPPED: no unshare(1) to make a mount namespace holding " + installed)
	}
	if out, err := exec.Command(unshare, "-rm", "true").CombinedOutput(); err != nil {
		t.Skipf("SKIPPED: cannot make a mount namespace here (unshare -rm: %v: %s)", err, out)
	}
	dir := guardCopy(t, false)
	prog := filepath.Join(dir, "cacheguard")
	if out, err := exec.Command(prog).CombinedOutput(); err != nil {
		t.Fatalf("before the install: %v\n%s", err, out)
	}
	// A tmpfs over /usr/include/infiniband (or /usr/include where it is
	// absent) holding verbs_exp.h, in a namespace that ends with the
	// program.
	mnt := filepath.Dir(installed)
	if _, err := os.Stat(mnt); err != nil {
		mnt = filepath.Dir(mnt)
	}
	script := `mount -t tmpfs verbsexp-test "$1" && mkdir -p "$(dirname "$2")" && echo '/* MLNX_OFED */' >"$2" && exec "$3"`
	out, err := exec.Command(unshare, "-rm", "sh", "-c", script, "sh", mnt, installed, prog).CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 3 {
		t.Fatalf("with %s installed since the build, the program did not fail with ESTALE at its first verb call (%v):\n%s", installed, err, out)
	}
	t.Logf("the program with %s installed since:\n%s", installed, out)
	for _, want := range []string{installed, "go build -a"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the error lacks %q:\n%s", want, out)
		}
	}
}
