package main

import (
	"bytes"
	"os"
	"path/filepath"
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
