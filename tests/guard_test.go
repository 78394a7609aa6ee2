package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestShimGuardRejectsOtherHeaders builds the generated package (with cgo)
// against a copy of its headers (headers/ or $VERBSEXP_HEADERS; the copy
// is a temporary directory) in which struct ibv_exp_task has one more
// member: the _Static_asserts in the shims' preamble must stop the build
// and name the record, the member and how to regenerate.
func TestShimGuardRejectsOtherHeaders(t *testing.T) {
	root := repoRoot(t)
	const anchor = "struct ibv_exp_task {"
	alt := headersWith(t, anchor, anchor+"\n    uint64_t verbsexp_test_extra;")
	cmd := exec.Command("go", "build", "-o", os.DevNull, "./generated/verbs")
	cmd.Dir = root
	// CGO_CFLAGS come before the package's own -I, so these headers win.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "CGO_CFLAGS=-I"+alt)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatal("the generated package built against headers with a different struct ibv_exp_task")
	}
	for _, want := range []string{"struct ibv_exp_task", "size is not 40", "this package was generated from (go run github.com/verbsexp/verbsexp/gen", "regenerate it with -I naming the headers you build with", "go tool gen module"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("build output lacks %q:\n%s", want, firstLines(string(out), 20))
		}
	}
	if !strings.Contains(string(out), "struct ibv_exp_task.item") && !strings.Contains(string(out), "struct ibv_exp_task.next") {
		t.Errorf("build output names no member of struct ibv_exp_task:\n%s", firstLines(string(out), 20))
	}
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

// TestShimGuardBounds builds the generated package (with cgo) against
// copies of its headers in which a release's kind of change was made: the
// guards pin layouts and the values the API passes, and hold a bound to
// the relation that keeps code built against the package valid. A new
// flag taking the bit of IBV_EXP_ACCESS_RESERVED, which moves one bit up
// (what 4.9 did to 4.6), and a mask that gains a bit build; a bound that
// moves down, a mask that loses a bit and a changed opcode do not, and
// the build names them.
func TestShimGuardBounds(t *testing.T) {
	const (
		reserved = "IBV_EXP_ACCESS_RESERVED              = 0x0004000000000000"
		mask     = "IBV_EXP_QP_CREATE_MASK                     = 0x13fdc"
		opcode   = "IBV_EXP_WR_SEND_WITH_INV                   = 9,"
	)
	for _, c := range []struct {
		what     string
		old, new string
		fails    string // "" when the build must succeed
	}{
		{"a flag added below a bound that moved up", reserved, "IBV_EXP_ACCESS_VERBSEXP_TEST = 0x0004000000000000,\n    IBV_EXP_ACCESS_RESERVED = 0x0008000000000000", ""},
		{"a mask that gained a bit", mask, "IBV_EXP_QP_CREATE_MASK = 0x33fdc", ""},
		{"a bound that moved down", reserved, "IBV_EXP_ACCESS_RESERVED = 0x0002000000000000", "IBV_EXP_ACCESS_RESERVED is below 1125899906842624"},
		{"a mask that lost a bit", mask, "IBV_EXP_QP_CREATE_MASK = 0x13fd8", "IBV_EXP_QP_CREATE_MASK lacks bits of 81884"},
		{"an opcode renumbered", opcode, "IBV_EXP_WR_SEND_WITH_INV = 72,", "IBV_EXP_WR_SEND_WITH_INV is not 9"},
	} {
		t.Run(strings.ReplaceAll(c.what, " ", "_"), func(t *testing.T) {
			alt := headersWith(t, c.old, c.new)
			cmd := exec.Command("go", "build", "-o", os.DevNull, "./generated/verbs")
			cmd.Dir = repoRoot(t)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "CGO_CFLAGS=-I"+alt)
			out, err := cmd.CombinedOutput()
			switch {
			case c.fails == "" && err != nil:
				t.Errorf("the package does not build against headers with %s:\n%s", c.what, firstLines(string(out), 20))
			case c.fails != "" && err == nil:
				t.Errorf("the package built against headers with %s", c.what)
			case c.fails != "" && !strings.Contains(string(out), c.fails):
				t.Errorf("the build against headers with %s does not say %q:\n%s", c.what, c.fails, firstLines(string(out), 20))
			}
		})
	}
}

// headersWith is a temporary copy of the headers generated/ comes from
// (headers/ or $VERBSEXP_HEADERS) whose verbs_exp.h has old replaced by
// new once.
func headersWith(t *testing.T, old, new string) string {
	t.Helper()
	alt := t.TempDir()
	if err := os.CopyFS(alt, os.DirFS(headersDir(t))); err != nil {
		t.Fatal(err)
	}
	exp := filepath.Join(alt, "infiniband", "verbs_exp.h")
	b, err := os.ReadFile(exp)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), old) {
		t.Fatalf("%q not found in verbs_exp.h", old)
	}
	if err := os.WriteFile(exp, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	return alt
}
