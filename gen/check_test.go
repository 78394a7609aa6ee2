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

// TestCheckCraftedManifest: a package whose abi.json names a record with
// an #include in it is refused before any compiler runs (it used to put
// the included file into the compiler's output, and /dev/zero into its
// memory), exit 2, naming the place.
func TestCheckCraftedManifest(t *testing.T) {
	_, pkg := checkPkg(t, checkHeader)
	secret := filepath.Join(t.TempDir(), "secret.h")
	if err := os.WriteFile(secret, []byte("THE SECRET CONTENTS\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(pkg, "abi.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	inject := `struct ibv_ok) == 16, \"\");\n#include \"` + secret + `\"\n_Static_assert(sizeof(struct ibv_ok`
	crafted := strings.Replace(string(b), `"c": "struct ibv_ok"`, `"c": "`+inject+`"`, 1)
	if crafted == string(b) {
		t.Fatal("abi.json has no struct ibv_ok record to craft")
	}
	if err := os.WriteFile(p, []byte(crafted), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := cli(t, "check", pkg)
	if code != 2 || !strings.Contains(errs, "arches.amd64.records[0].c") || !strings.Contains(errs, "is not a C record") {
		t.Errorf("exit %d, want 2 and the refused name's place\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if strings.Contains(out+errs, "THE SECRET") {
		t.Errorf("the included file reached the output:\n%s%s", out, errs)
	}
}

// TestHeaderPathFlags: -entry and -scope reach an #include and Go
// comments (the package doc, the cgo preamble that records the command):
// an entry whose path holds */ used to close doc.go's comment and put
// the rest of the path into the package as Go code.
func TestHeaderPathFlags(t *testing.T) {
	inc := t.TempDir()
	evil := `x*/func init(){panic(1)}/*/v.h`
	if err := os.MkdirAll(filepath.Join(inc, filepath.Dir(evil)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(inc, evil), []byte("struct ibv_v { int a; };\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-entry", evil, "-scope", ""}, "-entry \"x*/func init(){panic(1)}/*/v.h\": want a header path"},
		{[]string{"-entry", "/usr/include/stdio.h"}, "want a header path relative to an -I directory"},
		{[]string{"-entry", "infiniband/verbs_exp.h>\n#include </dev/zero"}, "-entry"},
		{[]string{"-scope", "infiniband*/"}, "-scope \"infiniband*/\": want a directory"},
	} {
		out := filepath.Join(t.TempDir(), "pkg")
		args := append([]string{"-I", inc, "-o", out, "-arch", "amd64"}, c.args...)
		code, _, errs := cli(t, args...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("gen %q: exit %d, want 2 and %q:\n%s", args, code, c.want, errs)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("gen %q wrote %s", args, out)
		}
	}
}

// TestCheckBitFieldMoved: a manifest whose bit-field position is wrong
// fails gen check's C layout step naming the member (it passed before:
// bit-fields were not checked against the compiler).
func TestCheckBitFieldMoved(t *testing.T) {
	_, pkg := checkPkg(t, "struct ibv_b { unsigned int a:3, b:5; };\n")
	p := filepath.Join(pkg, "abi.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	moved := strings.Replace(string(b), `"bit_offset": 3,`, `"bit_offset": 4,`, 1)
	if moved == string(b) {
		t.Fatalf("abi.json has no bit-field at bit 3:\n%s", b)
	}
	if err := os.WriteFile(p, []byte(moved), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := cli(t, "check", pkg)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, out, errs)
	}
	wantAll(t, "output", out, "2/3 C layout: FAIL", "struct ibv_b.b: bit-field is not 5 bits at bit 4 [amd64] (the compiler sets 5 bits at bit 3)")
}

// TestRedefinedMacros: a constant #undef'd and defined again, or defined
// twice differently, has the value C code sees, its last definition's
// (it disappeared from the package, exit 0); one #undef'd for good stays
// out; gen check agrees with the compiler on every one of them.
func TestRedefinedMacros(t *testing.T) {
	const h = `#define IBV_Q 3
#undef IBV_Q
#define IBV_Q 4
#define IBV_R 1
#define IBV_S 5
#define IBV_S 6
#define IBV_T 7
#undef IBV_T
#define IBV_V IBV_Q
#undef IBV_Q
#define IBV_Q (IBV_R + 10)
struct ibv_u { int a; };
`
	_, pkg := checkPkg(t, h)
	b, err := os.ReadFile(filepath.Join(pkg, "consts.go"))
	if err != nil {
		t.Fatal(err)
	}
	consts := strings.Join(strings.Fields(string(b)), " ") // gofmt aligns the comments
	wantAll(t, "consts.go", consts, "Q = 11 // IBV_Q (infiniband/verbs_exp.h:11:9)", "S = 6 // IBV_S (infiniband/verbs_exp.h:6:9)", "V = 11 // IBV_V", "R = 1 // IBV_R")
	if strings.Contains(consts, "IBV_T") {
		t.Errorf("IBV_T, #undef'd for good, is in the package:\n%s", consts)
	}
	if code, out, errs := cli(t, "check", pkg); code != 0 {
		t.Errorf("gen check: exit %d\n%s%s", code, out, errs)
	}
}
