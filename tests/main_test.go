package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/verbsexp/verbsexp/internal/gencmd"
)

// TestMain stops the package in one line when generated/ comes from other
// headers than the ones these tests check it against ($VERBSEXP_HEADERS,
// which make test sets from OFED_INCLUDE, else headers/): after make
// generate OFED_INCLUDE=DIR every comparison with headers/ would fail, in
// hundreds of lines, with advice that undoes the regeneration.
func TestMain(m *testing.M) {
	if msg := originMismatch(); msg != "" {
		fmt.Fprintln(os.Stderr, msg)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// TestGeneratedOrigin repeats TestMain's check inside m.Run, where go
// test records what a test reads: $VERBSEXP_HEADERS and generated/doc.go
// then key the test cache, so a run against other headers is never
// answered from the cache of a run against headers/ (reads in TestMain
// itself are not recorded).
func TestGeneratedOrigin(t *testing.T) {
	if msg := originMismatch(); msg != "" {
		t.Fatal(msg)
	}
}

func originMismatch() string {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Dir(filepath.Dir(file))
	want := headersDirIn(root)
	got, err := gencmd.IncludeDirs(filepath.Join(root, "generated", "verbs"))
	if err != nil {
		return fmt.Sprintf("tests: cannot tell which headers generated/ comes from: %v; run make generate", err)
	}
	got = gencmd.Canonical(got)
	if slices.Equal(got, gencmd.Canonical([]string{want})) {
		return ""
	}
	from := strings.Join(got, " ")
	if slices.Equal(got, gencmd.Canonical([]string{filepath.Join(root, "headers")})) {
		return fmt.Sprintf("tests: generated/ comes from headers/, not VERBSEXP_HEADERS=%s: unset it (make test), or make generate OFED_INCLUDE=%s first", want, want)
	}
	return fmt.Sprintf("tests: generated/ comes from %s (make generate OFED_INCLUDE=%s), not %s: run make test OFED_INCLUDE=%s (or VERBSEXP_HEADERS=%s go test ./tests), or make generate to regenerate it from headers/", from, from, want, from, from)
}

// headersDir is the include directory generated/ is checked against:
// $VERBSEXP_HEADERS, else headers/.
func headersDir(t testing.TB) string { return headersDirIn(repoRoot(t)) }

func headersDirIn(root string) string {
	if d := os.Getenv("VERBSEXP_HEADERS"); d != "" {
		if a, err := filepath.Abs(d); err == nil {
			return a
		}
		return d
	}
	return filepath.Join(root, "headers")
}
