package main

import (
	"bytes"
	"io/fs"
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

// TestModuleRerunOnItsOwnOutput runs gen module again on the copy it
// wrote, as a user of the copy would: -I the copy's headers/ (a link to
// the real headers, inside -o) by a relative path, then through a link
// of the user's by an absolute one. The copy used to link headers/ to
// that path, that is to itself, after saying that every package builds.
// Each re-run must keep the link to the real headers and build; an -I
// that really lies inside -o, and the self-link such a copy was left
// with, are refused with nothing changed.
func TestModuleRerunOnItsOwnOutput(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIPPED in -short: builds a copy of the module")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// A user's module requiring this one, where gen module runs.
	if err := os.WriteFile(filepath.Join(base, "go.mod"), []byte("module example.com/app\n\ngo 1.26\n\nrequire "+ModulePath+" v0.0.0\n\nreplace "+ModulePath+" => "+root+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	inc := filepath.Join(base, "include")
	if err := os.CopyFS(inc, os.DirFS("../headers")); err != nil {
		t.Fatal(err)
	}
	entry, err := os.ReadFile(filepath.Join(inc, "infiniband", "verbs_exp.h"))
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(base)
	const out = "third_party/verbsexp"
	module := func(include, o string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := run([]string{"module", "-I", include, "-o", o}, &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	// linked checks the copy: headers/ links to the real headers as -I
	// named them (relative for a relative -I, so that the user's checkout
	// may move; absolute for an absolute one), and so reads them;
	// generated/verbs is current against them; the copy holds no tests
	// and no test data.
	linked := func(what string, absolute bool) {
		t.Helper()
		want := "../../include"
		if absolute {
			want = inc
		}
		if target, err := os.Readlink(filepath.Join(out, "headers")); err != nil || target != want {
			t.Errorf("%s: %s/headers links to %q (%v), want %s", what, out, target, err, want)
		}
		filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
			if err == nil && (strings.HasSuffix(p, "_test.go") || d.IsDir() && d.Name() == "testdata") {
				t.Errorf("%s: the copy holds %s: it should hold what builds the module's packages only", what, p)
			}
			return nil
		})
		if b, err := os.ReadFile(filepath.Join(out, "headers", "infiniband", "verbs_exp.h")); err != nil || !bytes.Equal(b, entry) {
			t.Errorf("%s: the headers do not read through %s/headers: %v", what, out, err)
		}
		var stdout, stderr bytes.Buffer
		if code := run([]string{"check", out + "/generated/verbs"}, &stdout, &stderr); code != 0 {
			t.Errorf("%s: gen check %s/generated/verbs: exit %d\n%s%s", what, out, code, stdout.String(), stderr.String())
		}
	}
	if code, o, e := module("include", out); code != 0 {
		t.Fatalf("first run: exit %d\n%s%s", code, o, e)
	}
	linked("first run", false)

	for _, c := range []struct {
		what, include, out string
		absolute           bool
	}{
		{"-I the copy's headers/, relative", "./" + out + "/headers/", out, false},
		{"-I a link to the copy's headers/, absolute", "mine", filepath.Join(base, out), true},
	} {
		if c.include == "mine" {
			c.include = filepath.Join(base, "mine")
			if err := os.Symlink(filepath.Join(base, out, "headers"), c.include); err != nil {
				t.Fatal(err)
			}
		}
		code, o, e := module(c.include, c.out)
		if code != 0 {
			t.Errorf("%s: exit %d\n%s%s", c.what, code, o, e)
			continue
		}
		if !strings.Contains(o, "every package builds against it") {
			t.Errorf("%s: output:\n%s", c.what, o)
		}
		linked(c.what, c.absolute)
	}

	// Refused, nothing changed: headers really inside -o, and the copy
	// the bug left (headers/ a link to itself).
	inside := filepath.Join(out, "vendor-include")
	if err := os.CopyFS(inside, os.DirFS(filepath.Join(root, "headers"))); err != nil {
		t.Fatal(err)
	}
	marker, _ := os.ReadFile(filepath.Join(out, moduleMarker))
	for _, c := range []struct {
		what, include string
		prepare       func()
		want          string
	}{
		{"-I inside -o", inside, func() {}, "-I " + inside + " is " + filepath.Join(base, inside) + ", inside -o " + filepath.Join(base, out) + ", which gen module replaces as a whole"},
		{"-I a link into -o", "into", func() { os.Symlink(filepath.Join(base, inside), "into") }, "inside -o"},
		{"-I the self-linked headers/", out + "/headers", func() {
			os.Remove(filepath.Join(out, "headers"))
			os.Symlink(filepath.Join(base, out, "headers"), filepath.Join(out, "headers"))
		}, "its symbolic links lead in a circle"},
	} {
		c.prepare()
		code, o, e := module(c.include, out)
		if code != 1 || !strings.Contains(e, c.want) {
			t.Errorf("%s: exit %d, want 1 and %q\n%s%s", c.what, code, c.want, o, e)
		}
		if b, _ := os.ReadFile(filepath.Join(out, moduleMarker)); !bytes.Equal(b, marker) {
			t.Errorf("%s: the copy was replaced", c.what)
		}
		if _, err := os.Stat(filepath.Join(inside, "infiniband", "verbs_exp.h")); err != nil {
			t.Errorf("%s: %v", c.what, err)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(base, "third_party", ".*")); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}
