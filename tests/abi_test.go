package tests

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/verbsexp/verbsexp/internal/abicheck"
	"github.com/verbsexp/verbsexp/internal/manifest"
	"github.com/verbsexp/verbsexp/internal/target"
)

const entry = "infiniband/verbs_exp.h"

// checkManifest compiles the manifest's assertions for every target with
// that target's C compiler, searching includes first, and names each
// assertion that fails.
func checkManifest(t *testing.T, m *manifest.Manifest, includes []string) {
	t.Helper()
	for _, tg := range target.All {
		r, err := abicheck.Check(m, tg, entry, includes)
		if err != nil {
			t.Fatal(err)
		}
		if r.Assertions < 100 {
			t.Fatalf("%s: only %d assertions; the manifest looks empty", tg.GoArch, r.Assertions)
		}
		if r.Other != "" {
			t.Errorf("linux/%s: %s cannot compile the headers:\n%s", tg.GoArch, r.Compiler, r.Other)
		}
		for i, f := range r.Failures {
			if i == 20 {
				t.Errorf("linux/%s: … and %d more", tg.GoArch, len(r.Failures)-i)
				break
			}
			t.Errorf("linux/%s: %s (%s)", tg.GoArch, f.Msg, f.Compiler)
		}
		if r.OK() {
			t.Logf("linux/%s: %d assertions hold", tg.GoArch, r.Assertions)
		}
	}
}

func committedManifest(t *testing.T) *manifest.Manifest {
	m, err := manifest.Read(filepath.Join(repoRoot(t), "generated", "verbs", "abi.json"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestManifestAgreesWithC: every record size, alignment, member offset and
// size, and every constant of generated/abi.json, per target, against the
// C compiler on the headers it comes from (headers/, or
// $VERBSEXP_HEADERS).
func TestManifestAgreesWithC(t *testing.T) {
	checkManifest(t, committedManifest(t), []string{headersDir(t)})
}

// TestManifestAgreesWithRealHeaders checks the restated headers against a
// real MLNX_OFED: the committed manifest must hold for the real
// verbs_exp.h too, on every target.
func TestManifestAgreesWithRealHeaders(t *testing.T) {
	dir := os.Getenv("VERBSEXP_OFED_INCLUDE")
	if dir == "" {
		t.Skip("SKIPPED: set VERBSEXP_OFED_INCLUDE to an MLNX_OFED 4.6 include directory to check headers/ against the real headers")
	}
	checkManifest(t, committedManifest(t), []string{dir})
}
