package tests

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

var (
	genOnce sync.Once
	genBin  string
	genErr  error
)

// TestGeneratedIsCurrent runs the generator exactly as `make generate`
// does, in a scratch copy of the layout, and compares every file with the
// committed generated/: a stale package fails here.
func TestGeneratedIsCurrent(t *testing.T) {
	bin := buildGenerator(t)
	root := repoRoot(t)
	scratch := t.TempDir()
	if err := os.Symlink(filepath.Join(root, "headers"), filepath.Join(scratch, "headers")); err != nil {
		t.Fatal(err)
	}
	runIn(t, scratch, nil, bin, "-I", "headers", "-o", "generated")
	fresh := filepath.Join(scratch, "generated")
	committed := filepath.Join(root, "generated")
	want := listFiles(t, fresh)
	got := listFiles(t, committed)
	for name := range want {
		a, _ := os.ReadFile(filepath.Join(fresh, name))
		b, err := os.ReadFile(filepath.Join(committed, name))
		if err != nil {
			t.Errorf("generated/%s is missing: run make generate", name)
			continue
		}
		if !bytes.Equal(a, b) {
			t.Errorf("generated/%s is stale: run make generate and commit it", name)
		}
	}
	for name := range got {
		if !want[name] {
			t.Errorf("generated/%s is not produced by the generator any more: run make generate", name)
		}
	}
}

func listFiles(t *testing.T, dir string) map[string]bool {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, e := range entries {
		m[e.Name()] = true
	}
	return m
}
