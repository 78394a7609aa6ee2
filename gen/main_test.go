package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
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

func TestBadInput(t *testing.T) {
	posRE := regexp.MustCompile(`verbs_exp\.h:\d+:\d+`)
	cases := []struct {
		name     string
		header   string
		args     func(inc, out string) []string
		code     int
		want     []string
		position bool
	}{
		{"syntax error", "struct ibv_x { int a }\n", nil, 1,
			[]string{"do not compile", "fix the header"}, true},
		{"missing include", "#include <no/such/header.h>\n", nil, 1,
			[]string{"include file not found", "add its directory with -I"}, true},
		{"incomplete member type", "struct ibv_x { struct ibv_undefined u; };\n", nil, 1,
			[]string{"incomplete type struct ibv_undefined", "define it"}, true},
		{"no entry header", "", func(inc, out string) []string { return []string{"-I", t.TempDir(), "-o", out} }, 1,
			[]string{"infiniband/verbs_exp.h not found", "pass -I DIR"}, false},
		{"unknown arch", goodHeader, func(inc, out string) []string { return []string{"-I", inc, "-o", out, "-arch", "sparc64"} }, 2,
			[]string{`unknown architecture "sparc64"`, "supported: amd64,arm64,ppc64le"}, false},
		{"no flags", goodHeader, func(inc, out string) []string { return nil }, 2,
			[]string{"usage: gen"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			inc := writeHeader(t, c.header)
			out := filepath.Join(t.TempDir(), "pkg")
			args := []string{"-I", inc, "-o", out}
			if c.args != nil {
				args = c.args(inc, out)
			}
			code, _, stderr := cli(t, args...)
			if code != c.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, c.code, stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			if c.position && !posRE.MatchString(stderr) {
				t.Errorf("stderr has no file:line:col:\n%s", stderr)
			}
			if strings.Contains(stderr, "goroutine ") || strings.Contains(stderr, "panic") {
				t.Errorf("stack trace reached the user:\n%s", stderr)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("a failed run created %s", out)
			}
		})
	}
}

// TestFailedRunKeepsPreviousOutput: a broken header must not touch an
// existing package.
func TestFailedRunKeepsPreviousOutput(t *testing.T) {
	out := filepath.Join(t.TempDir(), "pkg")
	if code, _, stderr := cli(t, "-q", "-I", writeHeader(t, goodHeader), "-o", out, "-arch", "amd64"); code != 0 {
		t.Fatalf("good run failed: %s", stderr)
	}
	before := snapshot(t, out)
	code, _, stderr := cli(t, "-I", writeHeader(t, "struct ibv_x { int a }\n"), "-o", out, "-arch", "amd64")
	if code == 0 {
		t.Fatal("broken header accepted")
	}
	if after := snapshot(t, out); !equalSnapshots(before, after) {
		t.Errorf("failed run changed %s; stderr:\n%s", out, stderr)
	}
	leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(out), ".pkg.new-*"))
	if len(leftovers) > 0 {
		t.Errorf("temporary directories left behind: %v", leftovers)
	}
}

// TestRefusesHandWrittenFiles: -o must not swallow files the generator
// did not write.
func TestRefusesHandWrittenFiles(t *testing.T) {
	out := t.TempDir()
	mine := filepath.Join(out, "mine.go")
	if err := os.WriteFile(mine, []byte("package pkg\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := cli(t, "-I", writeHeader(t, goodHeader), "-o", out, "-arch", "amd64")
	if code != 1 || !strings.Contains(stderr, "mine.go, which the generator did not write") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	if b, err := os.ReadFile(mine); err != nil || string(b) != "package pkg\n" {
		t.Errorf("hand-written file changed or removed: %q %v", b, err)
	}
}

// TestUnwritableOutput: an -o below a regular file cannot be created.
func TestUnwritableOutput(t *testing.T) {
	file := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := cli(t, "-I", writeHeader(t, goodHeader), "-o", filepath.Join(file, "pkg"), "-arch", "amd64")
	if code != 1 || !strings.Contains(stderr, "choose") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
}

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

func snapshot(t *testing.T, dir string) map[string]string {
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
