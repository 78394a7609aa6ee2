package tests

import (
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	genOnce sync.Once
	genBin  string
	genErr  error
)

// TestGeneratedIsCurrent runs gen check on generated/ against the headers
// it comes from (headers/, or $VERBSEXP_HEADERS) and the baseline: the
// package must be what the generator makes of them byte for byte, its
// manifest must hold for every target's C compiler, and nothing may break
// against tests/testdata/baseline unacknowledged.
func TestGeneratedIsCurrent(t *testing.T) {
	bin := buildGenerator(t)
	root := repoRoot(t)
	cmd := exec.Command(bin, "check", "-I", headersDir(t),
		"-baseline", filepath.Join("tests", "testdata", "baseline", "abi.json"),
		"-ack", filepath.Join("tests", "testdata", "baseline", "ack.txt"), "generated")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gen check: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
