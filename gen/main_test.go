package main

import (
	"bytes"
	"github.com/verbsexp/verbsexp/internal/target"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// cli runs the command in-process and returns exit code, stdout, stderr.
func cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// writeHeader makes DIR/infiniband/verbs_exp.h with body and returns DIR.
func writeHeader(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "infiniband"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "infiniband", "verbs_exp.h"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

const goodHeader = "#include <stdint.h>\nstruct ibv_ok { uint32_t a; uint64_t b; };\n"

// TestRegenerateInPlace: a second run over its own output replaces it.
func TestRegenerateInPlace(t *testing.T) {
	out := filepath.Join(t.TempDir(), "pkg")
	inc := writeHeader(t, goodHeader)
	for i := 0; i < 2; i++ {
		if code, _, stderr := cli(t, "-q", "-I", inc, "-o", out, "-arch", "amd64"); code != 0 {
			t.Fatalf("run %d: %s", i, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "ztypes_linux_amd64.go")); err != nil {
		t.Fatal(err)
	}
}

// snapshot reads every file of a package directory.
func snapshot(t testing.TB, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		m[e.Name()] = string(b)
	}
	return m
}

func equalSnapshots(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestMissingFlagIsNamed: a run missing -I or -o says which, exit 2.
func TestMissingFlagIsNamed(t *testing.T) {
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"-o", t.TempDir()}, []string{"gen: missing -I DIR (the include directory holding infiniband/verbs_exp.h)"}},
		{[]string{"-I", "headers"}, []string{"gen: missing -o DIR (the output package directory)"}},
		{[]string{"-q"}, []string{"missing -I DIR", "and -o DIR"}},
		{[]string{"-I", "x", "-o", "y", "check"}, []string{`unexpected argument "check"`, "subcommands are gen check and gen diff"}},
	}
	for _, c := range cases {
		code, _, stderr := cli(t, c.args...)
		if code != 2 {
			t.Errorf("gen %v: exit %d, want 2", c.args, code)
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("gen %v: stderr lacks %q:\n%s", c.args, w, stderr)
			}
		}
	}
}

// TestHelpListsSubcommands: gen -h names check, diff and module, and for
// every target the compiler the generator then uses (the host's cc on
// its own architecture: the help once named x86_64-linux-gnu-gcc there).
func TestHelpListsSubcommands(t *testing.T) {
	code, _, stderr := cli(t, "-h")
	if code != 0 {
		t.Errorf("gen -h: exit %d", code)
	}
	for _, w := range []string{"usage: gen -I DIR", "gen check [-I DIR…]", "gen diff [-ack FILE]", "gen module -I DIR -o OUTDIR", "gen -version", "-entry HEADER"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("gen -h lacks %q:\n%s", w, stderr)
		}
	}
	for _, tg := range target.All {
		t.Setenv(tg.EnvVar(), "")
		cc, err := tg.Compiler()
		if err != nil {
			t.Logf("%s: %v", tg.GoArch, err)
			continue
		}
		if line := "  " + tg.GoArch + ": " + filepath.Base(cc); !strings.Contains(stderr, line+" ") && !strings.Contains(stderr, line+",") {
			t.Errorf("gen -h does not name %s, the compiler used for %s, first (want %q):\n%s", filepath.Base(cc), tg.GoArch, line, stderr)
		}
	}
}

// TestVersion: gen -version names the module and its version ("(devel)"
// when built in a checkout, as this test binary is).
func TestVersion(t *testing.T) {
	code, stdout, _ := cli(t, "-version")
	if code != 0 || !strings.HasPrefix(stdout, "gen github.com/verbsexp/verbsexp ") || !strings.Contains(stdout, "(devel)") {
		t.Errorf("gen -version: exit %d, %q", code, stdout)
	}
}

// TestBadPackageName: -pkg takes only a name a package can be imported
// by, refused with exit 2 before any work: the include directory does
// not exist, so a run that started would fail differently (exit 1), and
// no output directory appears.
func TestBadPackageName(t *testing.T) {
	for _, name := range []string{"my-verbs", `verbs; import _ "net/http/pprof"`, "_", "C", "main", "init", "func", "", "9lives"} {
		out := filepath.Join(t.TempDir(), "pkg")
		code, _, stderr := cli(t, "-I", "/nonexistent", "-o", out, "-pkg", name)
		if name == "" {
			// -pkg "" means the default name: the run starts (and fails on -I).
			if code != 1 {
				t.Errorf("-pkg \"\": exit %d, want 1 (the default name, then -I fails)", code)
			}
			continue
		}
		if code != 2 || !strings.Contains(stderr, "-pkg") {
			t.Errorf("-pkg %q: exit %d, stderr %q; want exit 2 naming -pkg", name, code, stderr)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("-pkg %q: %s was created", name, out)
		}
	}
	if code, _, stderr := cli(t, "-q", "-I", writeHeader(t, goodHeader), "-o", filepath.Join(t.TempDir(), "pkg"), "-arch", "amd64", "-pkg", "ibverbs"); code != 0 {
		t.Errorf("-pkg ibverbs: exit %d: %s", code, stderr)
	}
}

// TestDefaultPackageNameFromDirectory: the default name is the output
// directory's, also when it is given as "." (as go generate runs it).
func TestDefaultPackageNameFromDirectory(t *testing.T) {
	for out, want := range map[string]string{"ibverbs": "ibverbs", ".": "ibverbs", "my-verbs": "verbs", "x/main": "verbs"} {
		dir := filepath.Join(t.TempDir(), "ibverbs")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Chdir(filepath.Dir(dir))
		if out == "." {
			t.Chdir(dir)
		}
		if got := packageName(out); got != want {
			t.Errorf("packageName(%q) = %q, want %q", out, got, want)
		}
	}
}

// TestUnusableIncludePath: a directory cgo cannot name in #cgo CFLAGS,
// or with a $ that go generate would expand, is refused with exit 2 and
// a message saying why, before any work.
func TestUnusableIncludePath(t *testing.T) {
	for _, dir := range []string{`/opt/a"b`, `/opt/a\b`, "/opt/$HOME/x", "/opt/a(b)", "/opt/a;b"} {
		out := filepath.Join(t.TempDir(), "pkg")
		code, _, stderr := cli(t, "-I", dir, "-o", out)
		if code != 2 || !strings.Contains(stderr, "cgo cannot name this directory") {
			t.Errorf("-I %q: exit %d, stderr %q", dir, code, stderr)
		}
	}
}

// TestIncludePathWithSpace: -I "a dir with spaces" gives a package that
// builds with cgo (the #cgo flag is quoted) and a //go:generate line that
// go generate reads back into the same command: running it rewrites the
// package byte for byte.
func TestIncludePathWithSpace(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIPPED in -short: builds the package and runs go generate")
	}
	inc := filepath.Join(t.TempDir(), "include dir")
	if err := os.MkdirAll(filepath.Join(inc, "infiniband"), 0o755); err != nil {
		t.Fatal(err)
	}
	header := goodHeader + "static inline int ibv_ok_get(struct ibv_ok *o) { return (int)o->a; }\n"
	if err := os.WriteFile(filepath.Join(inc, "infiniband", "verbs_exp.h"), []byte(header), 0o644); err != nil {
		t.Fatal(err)
	}
	// Inside the module, so the package can import abiutil.
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	parent, err := os.MkdirTemp(root, ".space-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(parent)
	pkg := filepath.Join(parent, "spaced")
	if code, _, stderr := cli(t, "-q", "-I", inc, "-o", pkg, "-arch", "amd64"); code != 0 {
		t.Fatalf("gen: exit %d: %s", code, stderr)
	}
	doc, err := os.ReadFile(filepath.Join(pkg, "doc.go"))
	if err != nil {
		t.Fatal(err)
	}
	wantDirective := `//go:generate go run github.com/verbsexp/verbsexp/gen -I "` + inc + `" -o . -arch amd64`
	if !strings.Contains(string(doc), wantDirective+"\n") {
		t.Errorf("doc.go lacks %s:\n%s", wantDirective, doc)
	}
	before := snapshot(t, pkg)
	rel := "./" + filepath.Base(parent) + "/spaced"
	for _, c := range [][]string{{"vet", rel}, {"generate", rel}} {
		cmd := exec.Command("go", c...)
		cmd.Dir = root
		// Its own headers only (make test OFED_INCLUDE=DIR sets CGO_CFLAGS).
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "CGO_CFLAGS=")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %v: %v\n%s", c, err, out)
		}
	}
	if after := snapshot(t, pkg); !equalSnapshots(before, after) {
		t.Error("go generate with the recorded directive wrote different bytes")
	}
}

// TestNotesOnceSortedQuietUnderGoGenerate: the generator's notes come
// sorted by position (line 9 before line 10: they were sorted as text),
// once when the package changes, not again when a run rewrites the same
// bytes; go generate (GOFILE and GOPACKAGE set) prints nothing on
// success; "see notes" appears only when a function was skipped.
func TestNotesOnceSortedQuietUnderGoGenerate(t *testing.T) {
	header := strings.Repeat("\n", 8) + "#define IBV_QP_CAP 1\n#define IBV_SGE 2\nstruct ibv_qp_cap { int a; };\nstruct ibv_sge { int b; };\n"
	inc := writeHeader(t, header)
	out := filepath.Join(t.TempDir(), "pkg")
	args := []string{"-I", inc, "-o", out, "-arch", "amd64"}
	code, stdout, stderr := cli(t, args...)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	nine, ten := strings.Index(stderr, "verbs_exp.h:9:"), strings.Index(stderr, "verbs_exp.h:10:")
	if nine < 0 || ten < 0 || nine > ten {
		t.Errorf("the notes of lines 9 and 10 are missing or out of order:\n%s", stderr)
	}
	if strings.Contains(stdout, "see notes") || !strings.Contains(stdout, "call wrappers\n") {
		t.Errorf("the summary points at notes about skipped functions when none was skipped:\n%s", stdout)
	}
	code, stdout, stderr = cli(t, args...)
	if code != 0 || strings.Contains(stderr, "note:") || !strings.Contains(stdout, "was current: the same") {
		t.Errorf("a second run over the same package: exit %d, want no notes and \"was current\":\n%s%s", code, stdout, stderr)
	}
	if err := os.WriteFile(filepath.Join(inc, "infiniband", "verbs_exp.h"), []byte(header+"struct ibv_more { int c; };\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr = cli(t, args...); code != 0 || !strings.Contains(stderr, "verbs_exp.h:9:") {
		t.Errorf("a run that changes the package: exit %d, want the notes again:\n%s%s", code, stdout, stderr)
	}
	t.Setenv("GOFILE", "doc.go")
	t.Setenv("GOPACKAGE", "pkg")
	if code, stdout, stderr = cli(t, args...); code != 0 || stdout != "" || stderr != "" {
		t.Errorf("under go generate: exit %d, printed %q %q; want silence", code, stdout, stderr)
	}
}

// TestRecordedThroughLink: with -o a symbolic link into another directory,
// the recorded command is spelled from the package directory itself,
// where go generate runs it (it was spelled from the link's directory, so
// its -I pointed the wrong way), and running it there writes the same
// bytes.
func TestRecordedThroughLink(t *testing.T) {
	root := t.TempDir()
	inc := filepath.Join(root, "include")
	if err := os.CopyFS(inc, os.DirFS(writeHeader(t, goodHeader))); err != nil {
		t.Fatal(err)
	}
	pkg := filepath.Join(root, "internal", "verbs")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("internal", "verbs"), filepath.Join(root, "vlink")); err != nil {
		t.Fatal(err)
	}
	t.Chdir(root)
	if code, out, errs := cli(t, "-q", "-I", "include", "-o", "vlink", "-arch", "amd64"); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	doc, err := os.ReadFile(filepath.Join(pkg, "doc.go"))
	if err != nil {
		t.Fatal(err)
	}
	const want = "//go:generate go run github.com/verbsexp/verbsexp/gen -I ../../include -o . -arch amd64"
	if !strings.Contains(string(doc), want) {
		t.Fatalf("doc.go does not record %q:\n%s", want, doc)
	}
	before := map[string]string{}
	entries, _ := os.ReadDir(pkg)
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(pkg, e.Name()))
		before[e.Name()] = string(b)
	}
	t.Chdir(pkg)
	if code, out, errs := cli(t, "-q", "-I", "../../include", "-o", ".", "-arch", "amd64"); code != 0 {
		t.Fatalf("the recorded command, run in the package: exit %d\n%s%s", code, out, errs)
	}
	for name, b := range before {
		if now, _ := os.ReadFile(filepath.Join(pkg, name)); string(now) != b {
			t.Errorf("%s: the recorded command run in the package writes other bytes", name)
		}
	}
}
