package abiutil

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

func digests(src string) map[string]string {
	m := map[string]string{}
	for _, r := range RecordDigests([]byte(src)) {
		m[r.Name] = r.Digest
	}
	return m
}

func names(src string) []string {
	var n []string
	for _, r := range RecordDigests([]byte(src)) {
		n = append(n, r.Name)
	}
	return n
}

// TestRecordDigestsFinds: tagged structs and unions, nested ones too, in
// order of first definition; not what comments and strings hold, not
// declarations without a body, not anonymous records.
func TestRecordDigestsFinds(t *testing.T) {
	src := `
/* struct in_comment { int x; }; */
// struct line_comment { int x; };
struct fwd;
typedef struct { int a; } anon_t;
static const char *s = "struct in_string { int x; }";
struct outer {
	struct inner { int x; } in;    /* } a brace in a comment */
	union { int a; long b; } u;    // and { here
	char tag[sizeof("}")];
	struct fwd *p;
};
union value { int i; struct outer o; };
struct __attribute__((packed)) packed_rec { char c; int i; };
struct unbalanced { int a;
`
	got := strings.Join(names(src), ", ")
	want := "struct outer, struct inner, union value, struct packed_rec"
	if got != want {
		t.Errorf("found %s, want %s", got, want)
	}
}

// TestRecordDigestsChange: comments, whitespace and line breaks do not
// change a record's digest; a member does, for the record and the
// records around it, and for no other.
func TestRecordDigestsChange(t *testing.T) {
	base := `struct a { int x; struct b { int y; } b; };
struct c { char z; };
`
	reformatted := `/* a */ struct   a {
	int x;   // x
	struct b {
		int y;
	} b;
};
struct c {   char   z ; } ;
`
	grown := strings.Replace(base, "int y;", "int y; int y2;", 1)
	d0, d1, d2 := digests(base), digests(reformatted), digests(grown)
	for _, n := range []string{"struct a", "struct b", "struct c"} {
		if d0[n] == "" || d0[n] != d1[n] {
			t.Errorf("%s: digest %q, reformatted %q: want equal and set", n, d0[n], d1[n])
		}
	}
	if d0["struct a"] == d2["struct a"] || d0["struct b"] == d2["struct b"] {
		t.Errorf("a member added to struct b left struct a or b as they were")
	}
	if d0["struct c"] != d2["struct c"] {
		t.Errorf("struct c changed with struct b")
	}
}

// TestRecordDigestsStrings: braces in string and character literals are
// not braces, and a literal's contents count.
func TestRecordDigestsStrings(t *testing.T) {
	src := `struct s { char open[sizeof "{"]; char q; } ; struct t { int c['}']; };`
	if got := strings.Join(names(src), ", "); got != "struct s, struct t" {
		t.Fatalf("found %s", got)
	}
	other := strings.Replace(src, `"{"`, `"{{"`, 1)
	if digests(src)["struct s"] == digests(other)["struct s"] {
		t.Error("a changed string literal did not change the digest")
	}
	escaped := `struct e { char x[sizeof "\"}"]; }; struct f { int y; };`
	if got := strings.Join(names(escaped), ", "); got != "struct e, struct f" {
		t.Errorf("with an escaped quote: found %s", got)
	}
}

// TestRecordDigestsTwice: a tag defined twice (#if branches) is listed
// once, digested over both definitions.
func TestRecordDigestsTwice(t *testing.T) {
	src := "#ifdef A\nstruct s { int a; };\n#else\nstruct s { long a; };\n#endif\n"
	if got := strings.Join(names(src), ", "); got != "struct s" {
		t.Fatalf("found %s", got)
	}
	if digests(src)["struct s"] == digests(strings.Replace(src, "long", "short", 1))["struct s"] {
		t.Error("the second definition does not count")
	}
}

// packageDir makes a package directory holding a generated file, and an
// include directory beside it holding one header; the Headers returned
// records it as the generator does.
func packageDir(t *testing.T, header string) (*Headers, string) {
	t.Helper()
	root := t.TempDir()
	pkg := filepath.Join(root, "pkg")
	inc := filepath.Join(root, "include", "sub")
	for _, d := range []string{pkg, inc} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	here := filepath.Join(pkg, "zheaders.go")
	if err := os.WriteFile(here, []byte("package pkg\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hp := filepath.Join(inc, "h.h")
	if err := os.WriteFile(hp, []byte(header), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(header))
	return &Headers{
		Package: "pkg",
		Command: "gen -I ../include -o .",
		Here:    func() string { return here },
		Files:   []HeaderFile{{Dir: "../include", Path: "sub/h.h", SHA256: hex.EncodeToString(sum[:]), Records: RecordDigests([]byte(header))}},
	}, hp
}

const header = "struct task { int type; void *next; };\nstruct other { int x; };\n"

// TestHeadersUnchanged: the headers the package was generated from pass.
func TestHeadersUnchanged(t *testing.T) {
	h, _ := packageDir(t, header)
	if err := h.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestHeadersChanged: a header changed in place fails every call with a
// *HeadersError naming the file, the record that changed (not the one
// that did not) and the command, and the first answer sticks.
func TestHeadersChanged(t *testing.T) {
	h, hp := packageDir(t, header)
	if err := os.WriteFile(hp, []byte(strings.Replace(header, "void *next;", "void *next; int extra;", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	err := h.Err()
	var he *HeadersError
	if !errors.As(err, &he) || !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("error %v (%T): want a *HeadersError that is ESTALE", err, err)
	}
	msg := err.Error()
	for _, want := range []string{hp, "changed (struct task)", "gen -I ../include -o .", "go build -a"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q: %s", want, msg)
		}
	}
	if strings.Contains(msg, "struct other") {
		t.Errorf("message names a record that did not change: %s", msg)
	}
	if err := os.WriteFile(hp, []byte(header), 0o644); err != nil {
		t.Fatal(err)
	}
	if h.Err() != err {
		t.Error("the answer did not stick: the headers are read again")
	}
}

// TestHeadersChangedOutsideRecords: a change that leaves every record as
// it was still fails (a constant may have changed), and says so.
func TestHeadersChangedOutsideRecords(t *testing.T) {
	h, hp := packageDir(t, header)
	if err := os.WriteFile(hp, []byte(header+"enum { NEW_FLAG = 4 };\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := h.Err()
	if err == nil || !strings.Contains(err.Error(), "none of the package's records did") {
		t.Fatalf("error %v", err)
	}
}

// TestHeadersSkipped: without a source tree to compare with (-trimpath,
// a binary run elsewhere) or with the header gone, there is nothing to
// say.
func TestHeadersSkipped(t *testing.T) {
	for _, c := range []struct {
		what string
		here func(real string) string
	}{
		{"-trimpath", func(string) string { return "example.com/m/pkg/zheaders.go" }},
		{"another machine", func(real string) string { return filepath.Join(filepath.Dir(real), "gone", "zheaders.go") }},
	} {
		h, hp := packageDir(t, header)
		real := h.Here()
		h.Here = func() string { return c.here(real) }
		os.WriteFile(hp, []byte("struct task { char changed; };"), 0o644)
		if err := h.Err(); err != nil {
			t.Errorf("%s: %v", c.what, err)
		}
	}
	h, hp := packageDir(t, header)
	os.Remove(hp)
	if err := h.Err(); err != nil {
		t.Errorf("header removed: %v", err)
	}
}

// TestHeadersInstalledSince: a build of the restatement, made while the
// headers it defers to were absent, fails once they exist; a build that
// did not compile the restatement does not.
func TestHeadersInstalledSince(t *testing.T) {
	installed := filepath.Join(t.TempDir(), "verbs_exp.h")
	for _, restated := range []bool{false, true} {
		h, _ := packageDir(t, header)
		h.Installed, h.Restated = []string{installed}, restated
		if err := h.Err(); err != nil {
			t.Fatalf("restated %v, nothing installed: %v", restated, err)
		}
	}
	if err := os.WriteFile(installed, []byte("/* MLNX_OFED */"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, restated := range []bool{false, true} {
		h, _ := packageDir(t, header)
		h.Installed, h.Restated = []string{installed}, restated
		err := h.Err()
		switch {
		case !restated && err != nil:
			t.Errorf("a build that did not compile the restatement: %v", err)
		case restated && (err == nil || !errors.Is(err, syscall.ESTALE) || !strings.Contains(err.Error(), installed) || !strings.Contains(err.Error(), "go build -a")):
			t.Errorf("a build of the restatement, %s installed since: %v", installed, err)
		}
	}
}

// TestHeadersOnce: concurrent first calls read the headers once and all
// get the same answer (run with -race).
func TestHeadersOnce(t *testing.T) {
	h, hp := packageDir(t, header)
	os.WriteFile(hp, []byte("struct task { char changed; };"), 0o644)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = h.Err() }()
	}
	wg.Wait()
	for _, err := range errs {
		if err == nil || err != errs[0] {
			t.Fatalf("answers %v", errs)
		}
	}
}

// BenchmarkHeadersErr is the cost every wrapper call pays after the first.
func BenchmarkHeadersErr(b *testing.B) {
	h := &Headers{}
	h.Err()
	for b.Loop() {
		if h.Err() != nil {
			b.Fatal("error")
		}
	}
}
