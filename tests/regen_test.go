package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
//
// With VERBSEXP_ACK_BREAKING=1 (make test ACK_BREAKING=1) the baseline is
// not checked: the breaking changes are accepted for this run.
func TestGeneratedIsCurrent(t *testing.T) {
	bin := buildGenerator(t)
	root := repoRoot(t)
	args := []string{"check", "-I", headersDir(t)}
	if os.Getenv("VERBSEXP_ACK_BREAKING") == "1" {
		t.Log("VERBSEXP_ACK_BREAKING=1: breaking changes against tests/testdata/baseline are accepted for this run")
	} else {
		args = append(args, "-baseline", filepath.Join("tests", "testdata", "baseline", "abi.json"),
			"-ack", filepath.Join("tests", "testdata", "baseline", "ack.txt"))
	}
	cmd := exec.Command(bin, append(args, filepath.Join("generated", "verbs"))...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		hint := ""
		if strings.Contains(string(out), "breaking change(s) from") {
			hint = "\nTo accept them all: make abi-baseline (the baseline becomes generated/verbs/abi.json; commit it), or for one run: make test ACK_BREAKING=1"
		}
		t.Fatalf("gen check: %v\n%s%s", err, out, hint)
	}
	t.Logf("%s", out)
}
