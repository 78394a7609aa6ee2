package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/verbsexp/verbsexp/internal/manifest"
)

// TestHeadersDeclareOnlyRealFunctions: the generator binds every function
// headers/ declares, so each one must be a function the real MLNX_OFED 4.6
// headers declare too (tests/testdata/releases/4.6.abi.json). A helper of
// headers/' own inline bodies written as a function would become Go API
// and an abi.json entry that no release has, and regenerating from a real
// release would then "remove" it (headers/NOTICE).
func TestHeadersDeclareOnlyRealFunctions(t *testing.T) {
	real, err := manifest.Read(filepath.Join(repoRoot(t), "tests", "testdata", "releases", "4.6.abi.json"))
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]bool{}
	for _, f := range real.Functions {
		declared[f.C] = true
	}
	// headers/ itself, not generated/ (which may come from other headers).
	out := filepath.Join(t.TempDir(), "verbs")
	runIn(t, repoRoot(t), nil, buildGenerator(t), "-q", "-arch", "amd64", "-I", filepath.Join(repoRoot(t), "headers"), "-o", out)
	m, err := manifest.Read(filepath.Join(out, "abi.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Functions) < 30 {
		t.Fatalf("headers/ declares %d functions; expected the cross-channel surface (dozens)", len(m.Functions))
	}
	for _, f := range m.Functions {
		if !declared[f.C] {
			t.Errorf("headers/ declares %s (Go %s), which MLNX_OFED 4.6 does not: make it a macro (see headers/NOTICE)", f.C, f.Go)
		}
	}
}

// TestHeaderLookups runs tests/testdata/headers/lookups.c, which drives
// the op lookups and the comp_mask check of headers/ through
// ibv_exp_post_task on a provider-shaped context, and with
// VERBSEXP_OFED_RELEASES the same program on every real release: the
// restated macros behave as the real headers do.
func TestHeaderLookups(t *testing.T) {
	dirs := map[string]string{"headers/": filepath.Join(repoRoot(t), "headers")}
	for _, r := range realReleases(t, false) {
		dirs[r.name] = r.include
	}
	for name, inc := range dirs {
		t.Run(strings.TrimSuffix(name, "/"), func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "lookups")
			cc := exec.Command("cc", "-std=gnu11", "-Wall", "-Werror", "-Wno-deprecated-declarations", "-I", inc,
				filepath.Join(repoRoot(t), "tests", "testdata", "headers", "lookups.c"), "-o", bin)
			if out, err := cc.CombinedOutput(); err != nil {
				t.Fatalf("compiling lookups.c against %s: %v\n%s", inc, err, out)
			}
			out, err := exec.Command(bin).Output()
			if err != nil || strings.TrimSpace(string(out)) != "ok" {
				t.Fatalf("lookups.c against %s: %v\n%s", inc, err, out)
			}
		})
	}
}

// realRelease is one real MLNX_OFED include tree under $VERBSEXP_OFED_RELEASES.
type realRelease struct{ name, include string }

// realReleases lists $VERBSEXP_OFED_RELEASES/<release>/include trees that
// hold the entry header, in version order. Without the variable it skips
// the test when required, else returns none.
func realReleases(t *testing.T, required bool) []realRelease {
	t.Helper()
	root := os.Getenv("VERBSEXP_OFED_RELEASES")
	if root == "" {
		if required {
			t.Skip("SKIPPED: set VERBSEXP_OFED_RELEASES to a directory of <release>/include trees to test on real MLNX_OFED headers")
		}
		return nil
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var rs []realRelease
	for _, e := range entries {
		inc := filepath.Join(root, e.Name(), "include")
		if _, err := os.Stat(filepath.Join(inc, entry)); err == nil {
			rs = append(rs, realRelease{e.Name(), inc})
		}
	}
	if len(rs) == 0 {
		t.Fatalf("VERBSEXP_OFED_RELEASES=%s holds no <release>/include/%s", root, entry)
	}
	sortReleases(rs)
	return rs
}
