package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// checkPkg generates a one-target package from header into a fresh
// directory and returns the include directory and the package.
func checkPkg(t *testing.T, header string, extra ...string) (inc, pkg string) {
	t.Helper()
	inc = writeHeader(t, header)
	pkg = filepath.Join(t.TempDir(), "verbs")
	args := append([]string{"-q", "-I", inc, "-o", pkg, "-arch", "amd64"}, extra...)
	if code, _, stderr := cli(t, args...); code != 0 {
		t.Fatalf("gen %v: %s", args, stderr)
	}
	return inc, pkg
}

const checkHeader = "#include <stdint.h>\nstruct ibv_ok { uint32_t a; uint64_t b; };\n#define IBV_OK_N 4\n"

func wantAll(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s lacks %q:\n%s", what, sub, s)
		}
	}
}

// TestCheckCurrent: a package checked against the headers it was
// generated from passes every step, with or without the -I flags (then
// they come from its doc.go).
func TestCheckCurrent(t *testing.T) {
	inc, pkg := checkPkg(t, checkHeader)
	for _, args := range [][]string{{"check", "-I", inc, "-arch", "amd64", pkg}, {"check", pkg}} {
		code, out, errs := cli(t, args...)
		if code != 0 {
			t.Fatalf("gen %v: exit %d\n%s%s", args, code, out, errs)
		}
		wantAll(t, "output", out, "1/3 current:  ok", "2/3 C layout: ok", "hold for", "(amd64)", "3/3 baseline: skipped", "gen check: ok")
	}
}

// TestCheckHeaderChanged: after a header change the same package is
// stale, and its manifest no longer holds: exit 1, with the differing
// files, the ABI diff and the failed assertions naming the member, each
// side labelled.
func TestCheckHeaderChanged(t *testing.T) {
	inc, pkg := checkPkg(t, checkHeader)
	changed := strings.Replace(checkHeader, "uint32_t a;", "uint64_t a;", 1)
	if err := os.WriteFile(filepath.Join(inc, "infiniband", "verbs_exp.h"), []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := cli(t, "check", pkg)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, out, errs)
	}
	label := filepath.ToSlash(pkg) + "/"
	wantAll(t, "output", out,
		"1/3 current:  FAIL: "+label+" (committed) is not what gen makes of "+inc+" now (regenerated)",
		"abi.json: differs from line",
		"ABI diff "+label+"abi.json (committed) → regenerated from "+inc,
		"field-resized struct ibv_ok.a",
		"regenerate it: go generate "+pkg,
		"2/3 C layout: FAIL: "+label+"abi.json (committed) is not what the C compilers say on "+inc,
		"struct ibv_ok.a: size is not 4 [amd64] (static assertion failed)",
		"gen check: FAIL: "+label)
}

// TestCheckOtherHeaders: checking with -I other than the package records
// is one line saying which headers it came from and what to do.
func TestCheckOtherHeaders(t *testing.T) {
	inc, pkg := checkPkg(t, checkHeader)
	other := writeHeader(t, checkHeader)
	code, out, errs := cli(t, "check", "-I", other, "-arch", "amd64", pkg)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, out, errs)
	}
	want := "gen check: FAIL: " + filepath.ToSlash(pkg) + "/ was generated from " + inc
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], want) || !strings.Contains(lines[0], "check it with -I "+inc) {
		t.Errorf("want one line starting %q and saying how to check it, got:\n%s", want, out)
	}
	code, out, _ = cli(t, "check", "-I", inc, "-arch", "amd64", "-entry", "infiniband/verbs.h", pkg)
	if code != 1 || !strings.Contains(out, `was generated with -entry "infiniband/verbs_exp.h"`) {
		t.Errorf("-entry mismatch: exit %d\n%s", code, out)
	}
}

// TestCheckBaseline: a breaking change from the baseline fails step 3
// until the ack file lists it; an ack that matches nothing is noted.
func TestCheckBaseline(t *testing.T) {
	_, old := checkPkg(t, checkHeader)
	_, pkg := checkPkg(t, strings.Replace(checkHeader, "uint32_t a;", "uint64_t a;", 1))
	base := filepath.Join(old, "abi.json")
	code, out, errs := cli(t, "check", "-baseline", base, pkg)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, out, errs)
	}
	wantAll(t, "output", out, "1/3 current:  ok", "3/3 baseline: FAIL: ", base+" (baseline) to "+filepath.ToSlash(pkg)+"/abi.json (committed)", "field-resized struct ibv_ok.a", "adding its \"KIND SUBJECT\" line")
	ack := filepath.Join(t.TempDir(), "ack.txt")
	// An ack file that does not exist yet acknowledges nothing.
	code, out, errs = cli(t, "check", "-baseline", base, "-ack", ack, pkg)
	if code != 1 {
		t.Fatalf("with an ack file that does not exist: exit %d, want 1\n%s%s", code, out, errs)
	}
	wantAll(t, "output", out, "field-resized struct ibv_ok.a", ack+" (it does not exist yet: create it)")
	if code, out, errs = cli(t, "check", "-baseline", filepath.Join(pkg, "abi.json"), "-ack", ack, pkg); code != 0 {
		t.Fatalf("nothing to acknowledge and no ack file: exit %d, want 0\n%s%s", code, out, errs)
	}
	wantAll(t, "output", out, "3/3 baseline: ok: nothing breaks", "no "+ack+" yet: nothing acknowledged")
	acks := "# reviewed\nfield-retyped struct ibv_ok.a\nfield-resized struct ibv_ok.a\nfield-removed struct ibv_ok.nothing\n"
	if err := os.WriteFile(ack, []byte(acks), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs = cli(t, "check", "-baseline", base, "-ack", ack, pkg)
	if code != 0 {
		t.Fatalf("with the ack file: exit %d\n%s%s", code, out, errs)
	}
	wantAll(t, "output", out, "3/3 baseline: ok: nothing breaks", `acknowledged "field-removed struct ibv_ok.nothing" matches no breaking change`)
}

// TestCheckUsage: unusable command lines and packages exit 2 with a
// message on stderr that says what to pass.
func TestCheckUsage(t *testing.T) {
	_, pkg := checkPkg(t, checkHeader)
	noManifest := t.TempDir()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"check"}, "want one argument, PKGDIR"},
		{[]string{"check", "-ack", "x.txt", pkg}, "give -baseline FILE too"},
		{[]string{"check", noManifest}, "no abi.json: is " + filepath.ToSlash(noManifest) + "/ a package written by gen?"},
		{[]string{"check", filepath.Join(pkg, "abi.json")}, "is not a directory"},
		{[]string{"check", "-baseline", "/nonexistent/abi.json", pkg}, "baseline: open /nonexistent/abi.json"},
		{[]string{"check", "-pkg", "my-verbs", pkg}, `-pkg "my-verbs" is not a Go package name`},
	}
	for _, c := range cases {
		code, out, errs := cli(t, c.args...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("gen %v: exit %d, stderr %q (stdout %q); want exit 2 and %q", c.args, code, errs, out, c.want)
		}
	}
	if code, _, errs := cli(t, "check", "-h"); code != 0 || !strings.Contains(errs, "usage: gen check") || !strings.Contains(errs, "-baseline FILE") {
		t.Errorf("gen check -h: exit %d\n%s", code, errs)
	}
}

// TestCheckSpelling: a package generated with a relative -I is current
// when checked with the absolute spelling of the same directory (and
// from another working directory): its #cgo CFLAGS keep ${SRCDIR}.
func TestCheckSpelling(t *testing.T) {
	inc := writeHeader(t, checkHeader)
	t.Chdir(filepath.Dir(inc))
	if code, _, stderr := cli(t, "-q", "-I", filepath.Base(inc), "-o", "verbs", "-arch", "amd64"); code != 0 {
		t.Fatal(stderr)
	}
	pkg, _ := filepath.Abs("verbs")
	t.Chdir(t.TempDir())
	code, out, errs := cli(t, "check", "-I", inc, "-arch", "amd64", pkg)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
}
