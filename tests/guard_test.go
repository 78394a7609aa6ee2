package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestShimGuardRejectsOtherHeaders builds the generated package (with cgo)
// against a copy of its headers (headers/ or $VERBSEXP_HEADERS; the copy
// is a temporary directory) in which struct ibv_exp_task has one more
// member: the _Static_asserts in the shims' preamble must stop the build
// and name the record, the member and how to regenerate.
func TestShimGuardRejectsOtherHeaders(t *testing.T) {
	root := repoRoot(t)
	alt := t.TempDir()
	if err := os.CopyFS(alt, os.DirFS(headersDir(t))); err != nil {
		t.Fatal(err)
	}
	exp := filepath.Join(alt, "infiniband", "verbs_exp.h")
	b, err := os.ReadFile(exp)
	if err != nil {
		t.Fatal(err)
	}
	const anchor = "struct ibv_exp_task {"
	if !strings.Contains(string(b), anchor) {
		t.Fatalf("%s not found in verbs_exp.h", anchor)
	}
	changed := strings.Replace(string(b), anchor, anchor+"\n    uint64_t verbsexp_test_extra;", 1)
	if err := os.WriteFile(exp, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-o", os.DevNull, "./generated")
	cmd.Dir = root
	// CGO_CFLAGS come before the package's own -I, so these headers win.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "CGO_CFLAGS=-I"+alt)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatal("the generated package built against headers with a different struct ibv_exp_task")
	}
	for _, want := range []string{"struct ibv_exp_task", "size is not 40", "this package was generated from (go run github.com/verbsexp/verbsexp/gen", "regenerate it with -I naming the headers you build with"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("build output lacks %q:\n%s", want, firstLines(string(out), 20))
		}
	}
	if !strings.Contains(string(out), "struct ibv_exp_task.item") && !strings.Contains(string(out), "struct ibv_exp_task.next") {
		t.Errorf("build output names no member of struct ibv_exp_task:\n%s", firstLines(string(out), 20))
	}
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}
