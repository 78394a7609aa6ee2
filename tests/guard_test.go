package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
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

// buildAgainst builds ./generated/verbs with CGO_CFLAGS=flags and
// returns its output and error. The build cache is not what is tested
// here: a macro no header reads makes every cgo package build afresh
// (as -a would, without rebuilding the standard library).
func buildAgainst(t *testing.T, flags string) (string, error) {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", os.DevNull, "./generated/verbs")
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "CGO_CFLAGS="+strings.TrimSpace(flags+" "+freshBuild()))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// freshBuild is a -D flag of a macro no header reads, whose value is new
// at each call: it changes the cgo packages' build keys.
func freshBuild() string {
	return fmt.Sprintf("-DVERBSEXP_TEST_BUILD=%d", time.Now().UnixNano())
}

// installedHeaders is a copy of the headers generated/verbs comes from,
// with a member added at the front of struct ibv_exp_task, that looks
// installed: without the restatement's marker (a real MLNX_OFED has
// none).
func installedHeaders(t *testing.T) string {
	t.Helper()
	const anchor = "struct ibv_exp_task {"
	alt := headersWith(t, anchor, anchor+"\n    uint64_t verbsexp_test_extra;")
	asInstalled(t, alt)
	return alt
}

// asInstalled makes a copy of the restatement in dir behave as MLNX_OFED's
// own headers: without its marker, and without the deferral to headers
// found after it (which real headers do not have).
func asInstalled(t *testing.T, dir string) {
	t.Helper()
	os.Remove(filepath.Join(dir, "infiniband", "verbsexp_restated.h"))
	for _, f := range []string{"verbs_exp.h", "verbs.h", "ofa_verbs.h"} {
		p := filepath.Join(dir, "infiniband", f)
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		const defer_ = "#if !defined(VERBSEXP_RESTATEMENT_ONLY) && defined(__has_include_next)"
		if err := os.WriteFile(p, []byte(strings.ReplaceAll(string(b), defer_, "#if 0")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGuardChecksSystemHeaders is issue 34's reproducer: in a private
// mount namespace, an overlay on /usr/include whose infiniband/ holds
// headers with a member added to struct ibv_exp_task. The package's own
// headers/ comes first on the include path (gcc ignores -I/usr/include,
// a system directory), but defers to the installed ones: the build fails
// with the guard's advice first, then the record, with or without
// CGO_CFLAGS=-I/usr/include; the same headers at another path fail too.
func TestGuardChecksSystemHeaders(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: needs root for a mount namespace and an overlay on /usr/include (CI runs as root)")
	}
	alt := installedHeaders(t)
	upper, work := t.TempDir(), t.TempDir()
	if err := os.CopyFS(filepath.Join(upper, "infiniband"), os.DirFS(filepath.Join(alt, "infiniband"))); err != nil {
		t.Fatal(err)
	}
	check := func(what, out string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: the package built against installed headers whose struct ibv_exp_task differs", what)
		}
		i := strings.Index(out, "these headers differ from the ones this package was generated from")
		j := strings.Index(out, "struct ibv_exp_task: size is not 40")
		if i < 0 || j < 0 || j < i || strings.Count(out, "regenerate it with -I") != 1 {
			t.Errorf("%s: want the advice first, once, then the record:\n%s", what, firstLines(out, 20))
		}
	}
	for _, flags := range []string{"", "-I/usr/include"} {
		script := `set -e
mount --make-rprivate /
mount -t overlay overlay -o lowerdir=/usr/include,upperdir=` + upper + `,workdir=` + work + ` /usr/include
cd ` + repoRoot(t) + `
CGO_ENABLED=1 CGO_CFLAGS="` + strings.TrimSpace(flags+" "+freshBuild()) + `" go build -o /dev/null ./generated/verbs`
		cmd := exec.Command("unshare", "-m", "sh", "-c", script)
		out, err := cmd.CombinedOutput()
		check("overlay on /usr/include, CGO_CFLAGS="+flags, string(out), err)
	}
	out, err := buildAgainst(t, "-I"+alt)
	check("the same headers at "+alt, out, err)
}

// TestGuardRefusesRDMACore: upstream rdma-core's headers (Debian's
// libibverbs-dev, as CI installs) in a directory named with -I: one
// error saying what was found and what to do, not the restatement mixed
// with rdma-core's verbs.h (858 lines before). In /usr/include they are
// no one's business: the package builds on its restatement.
func TestGuardRefusesRDMACore(t *testing.T) {
	if _, err := os.Stat("/usr/include/infiniband/verbs_api.h"); err != nil {
		t.Skip("SKIPPED: no rdma-core headers in /usr/include (apt-get install libibverbs-dev; .ci/run does)")
	}
	dir := t.TempDir()
	for _, sub := range []string{"infiniband", "rdma"} {
		if _, err := os.Stat(filepath.Join("/usr/include", sub)); err == nil {
			if err := os.CopyFS(filepath.Join(dir, sub), os.DirFS(filepath.Join("/usr/include", sub))); err != nil {
				t.Fatal(err)
			}
		}
	}
	out, err := buildAgainst(t, "-I"+dir)
	if err == nil {
		t.Fatal("the package built with rdma-core's verbs.h named with -I")
	}
	if n := strings.Count(out, "error:"); n != 1 || !strings.Contains(out, "upstream rdma-core's") || !strings.Contains(out, "-entry infiniband/verbs.h") {
		t.Errorf("want one error saying rdma-core's headers were found and what to do, got %d:\n%s", n, firstLines(out, 20))
	}
	if out, err := buildAgainst(t, "-I/usr/include"); err != nil {
		t.Errorf("with rdma-core's headers in /usr/include (and -I/usr/include), the package does not build on its restatement:\n%s", firstLines(out, 20))
	}
}

// TestGuardOtherRelease: headers of another release (3.1 … 4.3 lack the
// macro IBV_EXP_DEVICE_ATTR_RESERVED, and records the package has) stop
// the build at the first macro they lack, in one error that says what to
// do (3.4 printed 1654 lines, the advice first at line 184). With
// VERBSEXP_OFED_RELEASES, on the real 3.1 and 3.4 as well.
func TestGuardOtherRelease(t *testing.T) {
	dirs := map[string]string{"headers without IBV_EXP_DEVICE_ATTR_RESERVED": headersWithout(t, "IBV_EXP_DEVICE_ATTR_RESERVED")}
	if rels := os.Getenv("VERBSEXP_OFED_RELEASES"); rels != "" {
		for _, r := range []string{"3.1", "3.4"} {
			dirs["MLNX_OFED "+r] = filepath.Join(rels, r, "include")
		}
	} else {
		t.Log("NOT RUN on the real 3.1 and 3.4: set VERBSEXP_OFED_RELEASES=DIR (DIR/<release>/include)")
	}
	for what, dir := range dirs {
		out, err := buildAgainst(t, "-I"+dir)
		if err == nil {
			t.Errorf("%s: the package built", what)
			continue
		}
		first := ""
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "error:") {
				first = l
				break
			}
		}
		if n := strings.Count(out, "error:"); n != 1 || !strings.Contains(first, "do not define IBV_EXP_") || !strings.Contains(first, "regenerate it with -I") {
			t.Errorf("%s: want one error naming the macro, with the advice; got %d errors:\n%s", what, n, firstLines(out, 20))
		}
	}
}

// headersWithout is a copy of the headers generated/verbs comes from
// (looking installed, as installedHeaders) without the #define of macro.
func headersWithout(t *testing.T, macro string) string {
	t.Helper()
	alt := t.TempDir()
	if err := os.CopyFS(alt, os.DirFS(headersDir(t))); err != nil {
		t.Fatal(err)
	}
	asInstalled(t, alt)
	exp := filepath.Join(alt, "infiniband", "verbs_exp.h")
	b, err := os.ReadFile(exp)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	removed := false
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "#define" && f[1] == macro {
			removed = true
			continue
		}
		kept = append(kept, l)
	}
	if !removed {
		t.Fatalf("verbs_exp.h has no #define %s", macro)
	}
	if err := os.WriteFile(exp, []byte(strings.Join(kept, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	return alt
}
