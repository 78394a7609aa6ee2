package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestModuleRefuses: gen module writes nothing when the runtime does not
// build against the package generated from the headers (here headers/
// with struct ibv_exp_task renamed, so the runtime's verbs.ExpTask is
// gone), and says why and what to do; it refuses an -o it did not write,
// and more or less than one -I. (TestUserModule in tests/ walks the
// successful path from another module.)
func TestModuleRefuses(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIPPED in -short: builds a copy of the module")
	}
	inc := t.TempDir()
	if err := os.CopyFS(inc, os.DirFS("../headers")); err != nil {
		t.Fatal(err)
	}
	exp := filepath.Join(inc, "infiniband", "verbs_exp.h")
	b, err := os.ReadFile(exp)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exp, bytes.ReplaceAll(b, []byte("struct ibv_exp_task "), []byte("struct ibv_exp_task_renamed ")), 0o644); err != nil {
		t.Fatal(err)
	}
	foreign := t.TempDir()
	if err := os.WriteFile(filepath.Join(foreign, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "verbsexp")
	for _, c := range []struct {
		what string
		args []string
		code int
		want []string
	}{
		{"runtime does not build", []string{"-I", inc, "-o", out}, 1, []string{
			"was left as it was: the copy of github.com/verbsexp/verbsexp does not build against a package generated from " + inc,
			"runtime/task", "ExpTask", "For other headers generate a package of your own"}},
		{"foreign -o", []string{"-I", "../headers", "-o", foreign}, 1, []string{"holds files gen module did not write (no .verbsexp-module): choose an absent or empty directory"}},
		{"two -I", []string{"-I", "../headers", "-I", inc, "-o", out}, 2, []string{"want one -I DIR"}},
		{"rdma-core headers", []string{"-I", rdmaCoreLike(t), "-o", out}, 1, []string{"look like upstream rdma-core headers", "the runtime needs the experimental verbs"}},
	} {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"module"}, c.args...), &stdout, &stderr)
		if code != c.code {
			t.Errorf("%s: exit %d, want %d\n%s%s", c.what, code, c.code, stdout.String(), stderr.String())
		}
		for _, w := range c.want {
			if !strings.Contains(stderr.String(), w) {
				t.Errorf("%s: stderr lacks %q:\n%s", c.what, w, stderr.String())
			}
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%s: %s was written", c.what, out)
		}
		if b, _ := os.ReadFile(filepath.Join(foreign, "notes.txt")); string(b) != "mine" {
			t.Errorf("%s: the foreign -o was changed", c.what)
		}
		left, _ := filepath.Glob(filepath.Join(filepath.Dir(out), ".*"))
		if len(left) > 0 {
			t.Errorf("%s: left behind: %v", c.what, left)
		}
	}
}

// rdmaCoreLike is an include directory with infiniband/verbs.h and no
// verbs_exp.h.
func rdmaCoreLike(t *testing.T) string {
	d := t.TempDir()
	if err := os.MkdirAll(filepath.Join(d, "infiniband"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "infiniband", "verbs.h"), []byte("struct ibv_context { int x; };\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return d
}
