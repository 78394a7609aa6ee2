package main

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/internal/manifest"
)

// errorRow is one row of docs/errors.md.
type errorRow struct {
	id   string
	exit int // -1: the run is killed
	want []string
}

const errorsDoc = "../docs/errors.md"

// readErrorsTable parses the table between the errors-table markers.
func readErrorsTable(t *testing.T) []errorRow {
	t.Helper()
	b, err := os.ReadFile(errorsDoc)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	start := strings.Index(s, "<!-- errors-table")
	end := strings.Index(s, "<!-- end errors-table -->")
	if start < 0 || end < start {
		t.Fatalf("%s: no errors-table markers", errorsDoc)
	}
	quoted := regexp.MustCompile("`([^`]+)`")
	var rows []errorRow
	for _, line := range strings.Split(s[start:end], "\n")[1:] {
		if !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "| Row ") || strings.HasPrefix(line, "|---") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) != 4 {
			t.Fatalf("%s: want 4 cells separated by \" | \": %s", errorsDoc, line)
		}
		r := errorRow{id: strings.TrimSpace(cells[0])}
		switch e := strings.TrimSpace(cells[2]); e {
		case "-":
			r.exit = -1
		default:
			if r.exit, err = strconv.Atoi(e); err != nil {
				t.Fatalf("%s: row %s: exit %q", errorsDoc, r.id, e)
			}
		}
		for _, m := range quoted.FindAllStringSubmatch(cells[3], -1) {
			r.want = append(r.want, m[1])
		}
		rows = append(rows, r)
	}
	return rows
}

// errorCase runs one row and returns the exit status (-1 when killed)
// and the output (stderr, then stdout). It checks what the row implies
// beyond the message.
type errorCase func(t *testing.T, bin string) (int, string)

var errorCases = map[string]errorCase{
	"malformed-c":     headerCase("struct ibv_x { int a }\n"),
	"missing-include": headerCase("#include <no/such/header.h>\n"),
	"unknown-type":    headerCase("struct ibv_x { foo_t a; };\n"),
	"incomplete-type": headerCase("struct ibv_x { struct ibv_undefined u; };\n"),
	"incomplete-enum": headerCase("enum ibv_e;\nstruct ibv_x { enum ibv_e e; };\n"),
	"recursion":       headerCase("struct ibv_r { struct ibv_r self; int a; };\n"),
	"recursion-pointer": headerCase("struct ibv_r { struct ibv_r *next; };\n",
		expectGo("type R struct", "Next *R")),
	"enum-100000":      enum100000,
	"struct-1tib":      headerCase("struct ibv_big { char x[1ULL << 40]; };\n", expectGo("X [1099511627776]byte")),
	"struct-too-large": headerCase("struct ibv_big { char x[1ULL << 55]; };\n"),
	"eof-continuation": headerCase("\"x\\"),
	"truncated-header": headerCase("struct ibv_a { int x; };\nint *"),
	"unbalanced-macro": limitedCase(headerCase("#define X (void *\n")),
	"empty-header":     headerCase(""),
	"name-collision": headerCase(collisionHeader,
		expectGo("type QPCap struct", "type QPCapStruct struct", "QPCapConst  = 2", "QPCapConst2 = 3", "QPCapConst3 = 1")),
	"member-collision": headerCase("struct ibv_x { int qp_num; int QP_num; };\n", expectGo("QPNum  int32", "QPNum_ int32")),
	"no-entry-header": func(t *testing.T, bin string) (int, string) {
		return runGen(t, bin, nil, "-I", t.TempDir(), "-o", filepath.Join(t.TempDir(), "pkg"))
	},
	"include-missing-dir": func(t *testing.T, bin string) (int, string) {
		return runGen(t, bin, nil, "-I", filepath.Join(t.TempDir(), "no-such-dir"), "-o", filepath.Join(t.TempDir(), "pkg"))
	},
	"include-too-deep": func(t *testing.T, bin string) (int, string) {
		inc := writeHeader(t, goodHeader)
		code, out := runGen(t, bin, nil, "-I", filepath.Join(inc, "infiniband"), "-o", filepath.Join(t.TempDir(), "pkg"))
		if !strings.Contains(out, "pass -I "+inc) {
			t.Errorf("the advice does not name %s:\n%s", inc, out)
		}
		return code, out
	},
	"output-under-file": func(t *testing.T, bin string) (int, string) {
		file := filepath.Join(t.TempDir(), "plain")
		if err := os.WriteFile(file, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		return runGen(t, bin, nil, "-I", writeHeader(t, goodHeader), "-o", filepath.Join(file, "pkg"), "-arch", "amd64")
	},
	"output-read-only":     outputReadOnly,
	"output-not-generated": outputNotGenerated,
	"disk-full":            diskFull,
	"interrupted":          interrupted,
	"stale-manifest":       staleManifest,
	"compiler-env-missing": func(t *testing.T, bin string) (int, string) {
		return runGen(t, bin, []string{"VERBSEXP_CC_ARM64=/nonexistent"}, "-I", writeHeader(t, goodHeader), "-o", filepath.Join(t.TempDir(), "pkg"), "-arch", "arm64")
	},
	"compiler-env-command-line": func(t *testing.T, bin string) (int, string) {
		return runGen(t, bin, []string{"VERBSEXP_CC_ARM64=aarch64-linux-gnu-gcc -O2"}, "-I", writeHeader(t, goodHeader), "-o", filepath.Join(t.TempDir(), "pkg"), "-arch", "arm64")
	},
	"compiler-not-on-path": func(t *testing.T, bin string) (int, string) {
		return runGen(t, bin, []string{"PATH=" + t.TempDir(), "VERBSEXP_CC_PPC64LE="}, "-I", writeHeader(t, goodHeader), "-o", filepath.Join(t.TempDir(), "pkg"), "-arch", "ppc64le")
	},
	"too-many-open-files": func(t *testing.T, bin string) (int, string) {
		cmd := exec.Command("/bin/sh", "-c", `ulimit -n 12 && exec "$0" "$@"`, bin, "-I", writeHeader(t, goodHeader), "-o", filepath.Join(t.TempDir(), "pkg"), "-arch", "amd64")
		return runCmd(t, cmd, []string{"VERBSEXP_NO_CACHE=1"})
	},
	"unknown-arch": func(t *testing.T, bin string) (int, string) {
		return runGen(t, bin, nil, "-I", writeHeader(t, goodHeader), "-o", filepath.Join(t.TempDir(), "pkg"), "-arch", "sparc64")
	},
	"no-flags": func(t *testing.T, bin string) (int, string) { return runGen(t, bin, nil) },

	"pragma-once-cycle": filesCase(map[string]string{
		"verbs_exp.h": "#pragma once\n#include <infiniband/b.h>\nstruct ibv_qp_cap { int a; };\nstruct ibv_QP_cap { struct ibv_b b; };\n",
		"b.h":         "#pragma once // comment\n#include <infiniband/verbs_exp.h>\nstruct ibv_b { int y; };\n",
	}, expectGo("type B struct", "QPCap is struct ibv_qp_cap (infiniband/verbs_exp.h:3:1)", "B is struct ibv_b (infiniband/b.h:3:1)"), rssBelow(256<<20)),
	"pragma-once-self":        headerCase("#pragma once\n#include <infiniband/verbs_exp.h>\nstruct ibv_a { int x; };\n", expectGo("type A struct"), rssBelow(256<<20)),
	"macro-deep-parens":       limitedCase(headerCase("#define IBV_P " + strings.Repeat("(", 100000) + "1" + strings.Repeat(")", 100000) + "\n")),
	"macro-deep-parens-50000": limitedCase(headerCase("#define IBV_P " + strings.Repeat("(", 50000) + "1" + strings.Repeat(")", 50000) + "\n")),
	"macro-storm":             headerCase(stormHeader),
	"macro-long-expression":   limitedCase(headerCase("#define IBV_S 1" + strings.Repeat("+1", 2000000) + "\n")),
	"expression-amplified":    limitedCase(headerCase(amplifiedHeader)),
	"macro-exponential":       limitedCase(headerCase(exponentialHeader)),
	"header-too-large":        largeHeaderCase("\n", 100<<20),
	"header-too-large-if0":    largeHeaderCase("#if 0\n"+strings.Repeat("int x;\n", 1000), 100<<20),
	"input-too-large": filesCase(map[string]string{
		"verbs_exp.h": "#include <infiniband/a.h>\n#include <infiniband/b.h>\n#include <infiniband/c.h>\n",
		"a.h":         strings.Repeat("\n", 3<<20),
		"b.h":         strings.Repeat("\n", 3<<20),
		"c.h":         strings.Repeat("\n", 3<<20),
	}),
	"include-device":       headerCase("#include \"/dev/zero\"\n"),
	"include-device-macro": headerCase("#define IBV_SRC \"/dev/urandom\"\n#include IBV_SRC\n"),
	"include-fifo":         includeFIFO,
	"include-directory": func(t *testing.T, bin string) (int, string) {
		inc := writeHeader(t, "#include <infiniband/sub.h>\nstruct ibv_a { int x; };\n")
		if err := os.Mkdir(filepath.Join(inc, "infiniband", "sub.h"), 0o755); err != nil {
			t.Fatal(err)
		}
		return runGen(t, bin, nil, "-I", inc, "-o", filepath.Join(t.TempDir(), "pkg"), "-arch", "amd64")
	},
	"struct-nested-250":      headerCase(nestedHeader("struct", 250), expectGo("func (r *DeepM0M1M2M3M4M5M6M7M8) M9() *DeepM0M1M2M3M4M5M6M7M8M9"), rssBelow(512<<20)),
	"union-nested-250":       headerCase(nestedHeader("union", 250), rssBelow(512<<20)),
	"struct-nested-600":      headerCase(nestedHeader("struct", 600), rssBelow(1<<30)),
	"struct-nested-1001":     headerCase(nestedHeader("struct", 1001)),
	"records-by-value-30":    headerCase(byValueHeader(30), expectGo("func (r *R7) A() *R6"), rssBelow(256<<20)),
	"struct-offset-overflow": headerCase("struct ibv_o { char a[1ULL << 62]; char b[1ULL << 62]; char c[1ULL << 62]; char d[1ULL << 62]; char e; };\n"),
	"enum-beyond-int64": headerCase("enum ibv_u { IBV_U_TOP = 1ULL << 63, IBV_U_MAX = 0xffffffffffffffffULL };\nenum ibv_s { IBV_S_NEG = -1, IBV_S_WRAP = 0x8000000000000000ULL };\nstruct ibv_use { enum ibv_u u; enum ibv_s s; };\n",
		expectGo("type U uint64", "UMax U = 18446744073709551615", "type S int64", "SWrap S = -9223372036854775808")),
	"member-vector":    headerCase("struct ibv_v { char c; int v __attribute__((vector_size(16))); };\n"),
	"member-mode":      headerCase("#include <sys/types.h>\nstruct ibv_r { char c; register_t r; };\n"),
	"generated-c-name": headerCase("struct ibv_m { int a; };\n#define verbsexp_p0 1\n"),
	"scope-typo": func(t *testing.T, bin string) (int, string) {
		out := filepath.Join(t.TempDir(), "pkg")
		if c, o := runGen(t, bin, nil, "-q", "-I", writeHeader(t, goodHeader), "-o", out, "-arch", "amd64"); c != 0 {
			t.Fatalf("good run: %s", o)
		}
		before := snapshot(t, out)
		code, msg := runGen(t, bin, nil, "-I", writeHeader(t, goodHeader), "-o", out, "-arch", "amd64", "-scope", "infiniban")
		if !equalSnapshots(before, snapshot(t, out)) {
			t.Errorf("the existing package was replaced")
		}
		return code, msg
	},
	"output-other-generator":  foreignFileCase("pill_string.go", "// Code generated by \"stringer -type=Pill\"; DO NOT EDIT.\n\npackage pkg\n"),
	"output-foreign-manifest": foreignFileCase("abi.json", "{\"version\": 1, \"generator\": \"someone/else\"}\n"),
	"output-glob":             outputGlob,
	"output-symlink":          outputSymlink,
	"output-dir-read-only":    outputDirReadOnly,
	"entry-directory": func(t *testing.T, bin string) (int, string) {
		inc := t.TempDir()
		if err := os.MkdirAll(filepath.Join(inc, "infiniband", "verbs_exp.h"), 0o755); err != nil {
			t.Fatal(err)
		}
		return runGen(t, bin, nil, "-I", inc, "-o", filepath.Join(t.TempDir(), "pkg"), "-arch", "amd64")
	},
	"missing-output": func(t *testing.T, bin string) (int, string) {
		return runGen(t, bin, nil, "-I", writeHeader(t, goodHeader))
	},
	"bad-package-name": func(t *testing.T, bin string) (int, string) {
		out := filepath.Join(t.TempDir(), "pkg")
		code, s := runGen(t, bin, nil, "-I", writeHeader(t, goodHeader), "-o", out, "-pkg", `verbs; import _ "net/http/pprof"`)
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%s was created", out)
		}
		return code, s
	},
	"reserved-package-name": func(t *testing.T, bin string) (int, string) {
		return runGen(t, bin, nil, "-I", writeHeader(t, goodHeader), "-o", filepath.Join(t.TempDir(), "pkg"), "-pkg", "main")
	},
	"include-unnamable": func(t *testing.T, bin string) (int, string) {
		return runGen(t, bin, nil, "-I", `/opt/ofed"4.9/include`, "-o", filepath.Join(t.TempDir(), "pkg"))
	},
}

// limitedCase runs c with the C front end's child limited to 4 s of CPU
// time and 384 MiB (VERBSEXP_FRONT_END_*): enough for any real header,
// and a refusal within refusalRSS in seconds.
func limitedCase(c errorCase) errorCase {
	return func(t *testing.T, bin string) (int, string) {
		t.Setenv("VERBSEXP_FRONT_END_CPU", "4")
		t.Setenv("VERBSEXP_FRONT_END_MEMORY", "384")
		return c(t, bin)
	}
}

// nestedHeader is struct ibv_deep with n levels of unnamed kw (struct or
// union) members m0 … m<n-1>, one in the other, the int leaf innermost.
func nestedHeader(kw string, n int) string {
	var b strings.Builder
	b.WriteString("struct ibv_deep {\n")
	for i := 0; i < n; i++ {
		b.WriteString(kw + " {\n")
	}
	b.WriteString("int leaf;\n")
	for i := n - 1; i >= 0; i-- {
		fmt.Fprintf(&b, "} m%d;\n", i)
	}
	b.WriteString("};\n")
	return b.String()
}

// byValueHeader: struct ibv_r<k> holds two struct ibv_r<k-1> by value,
// for k = 1…n (a 3^n-step size computation for Go's type checker).
func byValueHeader(n int) string {
	var b strings.Builder
	b.WriteString("struct ibv_r0 { int x; };\n")
	for k := 1; k <= n; k++ {
		fmt.Fprintf(&b, "struct ibv_r%d { struct ibv_r%d a, b; };\n", k, k-1)
	}
	return b.String()
}

// amplifiedHeader: each macro is short, but IBV_A2 expands to a
// 1 000 000-term sum (cc/v4's checker recursed once per term).
var amplifiedHeader = "#define IBV_A1 1" + strings.Repeat("+1", 999) + "\n#define IBV_A2 IBV_A1" + strings.Repeat("+IBV_A1", 999) + "\n"

// exponentialHeader: IBV_E39 expands to 2^39 terms (84 s and 8.2 GB, then
// exit 0 with the macros silently missing, before the work bound).
var exponentialHeader = func() string {
	var b strings.Builder
	b.WriteString("#define IBV_E0 1\n")
	for i := 1; i < 40; i++ {
		fmt.Fprintf(&b, "#define IBV_E%d (IBV_E%d+IBV_E%d)\n", i, i-1, i-1)
	}
	return b.String()
}()

// stormHeader is 2.7 MB of macros, each using the one before: the
// front end's evaluation of them costs it the cube of their number.
var stormHeader = func() string {
	var b strings.Builder
	b.WriteString("struct ibv_m { int a; };\n#define IBV_C0 1\n")
	for i := 1; b.Len() < 2_700_000; i++ {
		fmt.Fprintf(&b, "#define IBV_C%d (IBV_C%d + 1)\n", i, i-1)
	}
	return b.String()
}()

// filesCase is headerCase for several headers of infiniband/ (name →
// text; verbs_exp.h is the entry).
func filesCase(files map[string]string, checks ...func(*testing.T, string)) errorCase {
	return func(t *testing.T, bin string) (int, string) {
		return generateTwice(t, bin, writeHeaders(t, files), checks)
	}
}

// writeHeaders writes name → text into DIR/infiniband and returns DIR.
func writeHeaders(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "infiniband"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, "infiniband", name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// largeHeaderCase writes a verbs_exp.h of size bytes: prefix, then
// blank lines (written in pieces: the test itself stays small).
func largeHeaderCase(prefix string, size int) errorCase {
	return func(t *testing.T, bin string) (int, string) {
		inc := writeHeader(t, prefix)
		f, err := os.OpenFile(filepath.Join(inc, "infiniband", "verbs_exp.h"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		chunk := []byte(strings.Repeat("\n", 1<<20))
		for n := len(prefix); n < size; n += len(chunk) {
			if _, err := f.Write(chunk); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		return generateTwice(t, bin, inc, nil)
	}
}

// includeFIFO: a header includes a named pipe (no writer: opening it for
// reading blocks).
func includeFIFO(t *testing.T, bin string) (int, string) {
	fifo := filepath.Join(t.TempDir(), "pipe.h")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("SKIP: include-fifo: cannot make a FIFO here: %v", err)
	}
	return headerCase("#include \""+fifo+"\"\n")(t, bin)
}

// rssBelow checks the peak RSS of the last generator run (its
// getrusage): generous bounds, there to catch a run that reads or
// allocates without bound, not to measure.
func rssBelow(limit int64) func(*testing.T, string) {
	return func(t *testing.T, _ string) {
		t.Helper()
		t.Logf("peak RSS %d MiB", lastMaxRSS>>20)
		if lastMaxRSS > limit {
			t.Errorf("peak RSS %d MiB, want below %d MiB", lastMaxRSS>>20, limit>>20)
		}
	}
}

const collisionHeader = `struct ibv_qp_cap { int a; };
struct ibv_QP_cap { int b; };
#define IBV_QP_CAP 1
enum { ibv_qp__cap = 2, IBV_QP_CAP_ = 3 };
`

// TestErrorsTable runs every row of docs/errors.md.
func TestErrorsTable(t *testing.T) {
	rows := readErrorsTable(t)
	if len(rows) == 0 {
		t.Fatalf("%s: empty table", errorsDoc)
	}
	seen := map[string]bool{}
	bin := genBinary(t)
	for _, r := range rows {
		if seen[r.id] {
			t.Errorf("%s: row %s twice", errorsDoc, r.id)
		}
		seen[r.id] = true
		run, ok := errorCases[r.id]
		if !ok {
			t.Errorf("%s: row %s has no test in errorCases", errorsDoc, r.id)
			continue
		}
		t.Run(r.id, func(t *testing.T) {
			code, out := run(t, bin)
			if code != r.exit {
				t.Fatalf("exit %d, docs/errors.md says %d; output:\n%s", code, r.exit, clip(out))
			}
			for _, w := range r.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q (docs/errors.md):\n%s", w, clip(out))
				}
			}
			if strings.Contains(out, "goroutine ") || strings.Contains(out, "panic:") {
				t.Errorf("a stack trace reached the user:\n%s", clip(out))
			}
		})
	}
	var missing []string
	for id := range errorCases {
		if !seen[id] {
			missing = append(missing, id)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("tests without a row in %s: %v", errorsDoc, missing)
	}
}

var (
	genBinOnce sync.Once
	genBinPath string
	genBinErr  error
)

// genBinary builds the generator once per test process.
func genBinary(t *testing.T) string {
	t.Helper()
	genBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "verbsexp-gen-bin-")
		if err != nil {
			genBinErr = err
			return
		}
		genBinPath = filepath.Join(dir, "gen")
		if out, err := exec.Command("go", "build", "-o", genBinPath, ".").CombinedOutput(); err != nil {
			genBinErr = fmt.Errorf("go build ./gen: %v\n%s", err, out)
		}
	})
	if genBinErr != nil {
		t.Fatal(genBinErr)
	}
	return genBinPath
}

// lastMaxRSS is the peak RSS, in bytes, of the last command runCmd ran
// (the rows run one at a time).
var lastMaxRSS int64

// runGen runs the generator binary with extra environment and returns
// the exit status and stderr followed by stdout.
func runGen(t *testing.T, bin string, env []string, args ...string) (int, string) {
	t.Helper()
	return runCmd(t, exec.Command(bin, args...), env)
}

func runCmd(t *testing.T, cmd *exec.Cmd, env []string) (int, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), env...)
	err := cmd.Run()
	lastMaxRSS = 0
	if cmd.ProcessState != nil {
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			lastMaxRSS = ru.Maxrss << 10
		}
	}
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("%s: %v", cmd, err)
	}
	return code, stderr.String() + stdout.String()
}

// headerCase generates from header for amd64 twice: into a fresh -o
// (a failure must not create it) and over a previous package (a failure
// must leave it as it was). A success must give a package that
// type-checks, whose manifest reads back, and whose Go source holds
// every piece of Go that checks lists.
func headerCase(header string, checks ...func(*testing.T, string)) errorCase {
	return func(t *testing.T, bin string) (int, string) {
		return generateTwice(t, bin, writeHeader(t, header), checks)
	}
}

// refusalRSS bounds the peak RSS of a run that refuses its input: a
// refusal must come before the input is read whole or expanded (the
// hostile rows took up to 24 GB before their checks).
const refusalRSS = 512 << 20

// generateTwice is headerCase for the include directory inc: the checks
// run after a success; a failure must stay below refusalRSS.
func generateTwice(t *testing.T, bin, inc string, checks []func(*testing.T, string)) (int, string) {
	{
		fresh := filepath.Join(t.TempDir(), "pkg")
		code, out := runGen(t, bin, nil, "-I", inc, "-o", fresh, "-arch", "amd64")
		rss := lastMaxRSS
		if code != 0 {
			if rss > refusalRSS {
				t.Errorf("refusing took a peak RSS of %d MiB, want below %d MiB", rss>>20, refusalRSS>>20)
			}
			if _, err := os.Stat(fresh); !os.IsNotExist(err) {
				t.Errorf("a failed run created %s", fresh)
			}
			prev := filepath.Join(t.TempDir(), "pkg")
			if c, o := runGen(t, bin, nil, "-q", "-I", writeHeader(t, goodHeader), "-o", prev, "-arch", "amd64"); c != 0 {
				t.Fatalf("good header: exit %d\n%s", c, o)
			}
			before := snapshot(t, prev)
			if c, _ := runGen(t, bin, nil, "-I", inc, "-o", prev, "-arch", "amd64"); c != code {
				t.Errorf("second run: exit %d, first %d", c, code)
			}
			if !equalSnapshots(before, snapshot(t, prev)) {
				t.Errorf("a failed run changed the previous package in %s", prev)
			}
			if left := scratchDirs(t, filepath.Dir(prev)); len(left) > 0 {
				t.Errorf("a failed run left %v", left)
			}
			return code, out
		}
		checkPackageDir(t, fresh)
		for _, c := range checks {
			lastMaxRSS = rss
			c(t, fresh)
		}
		return code, out
	}
}

// expectGo checks that the package's Go files contain each fragment.
func expectGo(fragments ...string) func(*testing.T, string) {
	return func(t *testing.T, dir string) {
		var all strings.Builder
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, f := range files {
			b, _ := os.ReadFile(f)
			all.Write(b)
		}
		for _, fr := range fragments {
			if !strings.Contains(all.String(), fr) {
				t.Errorf("generated Go lacks %q", fr)
			}
		}
	}
}

// checkPackageDir type-checks the linux/amd64 view of a generated
// package (gc sizes: the layout guards hold) and reads its manifest back.
func checkPackageDir(t *testing.T, dir string) *manifest.Manifest {
	t.Helper()
	ctx := build.Default
	ctx.GOOS, ctx.GOARCH, ctx.CgoEnabled = "linux", "amd64", true
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") {
			continue
		}
		if ok, err := ctx.MatchFile(dir, name); err != nil || !ok {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		t.Fatalf("%s: no Go files for linux/amd64", dir)
	}
	typeCheck(t, fset, files)
	m, err := manifest.Read(filepath.Join(dir, "abi.json"))
	if err != nil {
		t.Fatalf("abi.json: %v", err)
	}
	return m
}

// enum100000 generates a 100 000-member enum and checks every value made
// it to the manifest and the Go constants.
func enum100000(t *testing.T, bin string) (int, string) {
	const n = 100000
	var h strings.Builder
	h.WriteString("enum ibv_big {\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&h, "\tIBV_BIG_%d = %d,\n", i, i*3)
	}
	h.WriteString("};\nstruct ibv_use { enum ibv_big e; };\n")
	inc := writeHeader(t, h.String())
	out := filepath.Join(t.TempDir(), "pkg")
	start := time.Now()
	code, msg := runGen(t, bin, nil, "-I", inc, "-o", out, "-arch", "amd64")
	t.Logf("100 000-member enum: %v (not asserted)", time.Since(start))
	if code != 0 {
		return code, msg
	}
	m, err := manifest.Read(filepath.Join(out, "abi.json"))
	if err != nil {
		t.Fatal(err)
	}
	cs := m.Arches["amd64"].Constants
	if len(cs) != n {
		t.Fatalf("manifest has %d constants, want %d", len(cs), n)
	}
	for i, c := range cs {
		if want := fmt.Sprintf("IBV_BIG_%d", i); c.C != want || c.Value.String() != strconv.Itoa(i*3) {
			t.Fatalf("constant %d is %s = %s, want %s = %d", i, c.C, c.Value, want, i*3)
		}
	}
	src, err := os.ReadFile(filepath.Join(out, "consts.go"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parser.ParseFile(token.NewFileSet(), "consts.go", src, 0); err != nil {
		t.Fatalf("consts.go: %v", err)
	}
	if !bytes.Contains(src, []byte("BigEnum99999 BigEnum = 299997")) && !bytes.Contains(src, []byte("Big99999 Big = 299997")) {
		t.Errorf("consts.go lacks the last enumerator with its value")
	}
	return code, msg
}

// foreignFileCase: -o holds the generator's package and one more file,
// another tool's; the run is refused and nothing changes.
func foreignFileCase(name, data string) errorCase {
	return func(t *testing.T, bin string) (int, string) {
		out := filepath.Join(t.TempDir(), "pkg")
		if c, o := runGen(t, bin, nil, "-q", "-I", writeHeader(t, goodHeader), "-o", out, "-arch", "amd64"); c != 0 {
			t.Fatalf("good run: %s", o)
		}
		if err := os.WriteFile(filepath.Join(out, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		before := snapshot(t, out)
		code, msg := runGen(t, bin, nil, "-I", writeHeader(t, collisionHeader), "-o", out, "-arch", "amd64")
		if !equalSnapshots(before, snapshot(t, out)) {
			t.Errorf("-o changed")
		}
		return code, msg
	}
}

// outputGlob: -o DIR/* (unexpanded), where DIR holds a user directory that
// an old glob-based clean-up matched (.mydata.new-keep, old enough).
func outputGlob(t *testing.T, bin string) (int, string) {
	parent := t.TempDir()
	keep := filepath.Join(parent, ".mydata.new-keep")
	if err := os.MkdirAll(keep, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(keep, "data"), []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour)
	os.Chtimes(keep, past, past)
	code, msg := runGen(t, bin, nil, "-I", writeHeader(t, goodHeader), "-o", filepath.Join(parent, "*"), "-arch", "amd64", "-pkg", "pkg")
	if b, err := os.ReadFile(filepath.Join(keep, "data")); err != nil || string(b) != "precious" {
		t.Errorf("%s was touched: %q %v", keep, b, err)
	}
	return code, msg
}

// outputSymlink: -o is a symbolic link to a generated package: the
// package it points to is replaced, the link stays.
func outputSymlink(t *testing.T, bin string) (int, string) {
	dir := t.TempDir()
	target := filepath.Join(dir, "real")
	if c, o := runGen(t, bin, nil, "-q", "-I", writeHeader(t, goodHeader), "-o", target, "-arch", "amd64"); c != 0 {
		t.Fatalf("good run: %s", o)
	}
	link := filepath.Join(dir, "pkg")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	code, msg := runGen(t, bin, nil, "-I", writeHeader(t, collisionHeader), "-o", link, "-arch", "amd64")
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("-o is no longer a symbolic link (%v)", err)
	}
	if b, _ := os.ReadFile(filepath.Join(target, "consts.go")); !strings.Contains(string(b), "QPCapConst") {
		t.Errorf("the link's target was not regenerated")
	}
	if left := append(scratchDirs(t, dir), scratchDirs(t, filepath.Dir(target))...); len(left) > 0 {
		t.Errorf("scratch directories left: %v", left)
	}
	return code, msg
}

// outputDirReadOnly: -o is a package directory without write permission
// (mode 0555) in a writable parent, regenerated by its owner (not root,
// whom permissions do not stop: as root, the test runs the generator as
// nobody). The swapped-out previous package used to stay behind for good.
func outputDirReadOnly(t *testing.T, bin string) (int, string) {
	parent, err := os.MkdirTemp("", "verbsexp-ro-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(parent)
	var cred *syscall.Credential
	if os.Getuid() == 0 {
		cred = &syscall.Credential{Uid: 65534, Gid: 65534}
		for _, p := range []string{parent, filepath.Dir(bin)} {
			if err := os.Chmod(p, 0o777); err != nil {
				t.Fatal(err)
			}
		}
	}
	incs := []string{writeHeader(t, goodHeader), writeHeader(t, collisionHeader)}
	for _, inc := range incs {
		// Readable by nobody: t.TempDir is 0700.
		for p := inc; p != filepath.Dir(filepath.Dir(inc)); p = filepath.Dir(p) {
			os.Chmod(p, 0o755)
		}
	}
	out := filepath.Join(parent, "pkg")
	run := func(inc string) (int, string) {
		cmd := exec.Command(bin, "-I", inc, "-o", out, "-arch", "amd64")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		return runCmd(t, cmd, []string{"HOME=" + parent, "XDG_CACHE_HOME=" + parent + "/cache"})
	}
	if c, o := run(incs[0]); c != 0 {
		if strings.Contains(o, "operation not permitted") {
			t.Skipf("SKIP: output-dir-read-only: cannot run as nobody here: %s", o)
		}
		t.Fatalf("good run: %s", o)
	}
	if err := os.Chmod(out, 0o555); err != nil {
		t.Fatal(err)
	}
	code, msg := run(incs[1])
	if left := scratchDirs(t, parent); len(left) > 0 {
		t.Errorf("left next to -o: %v", left)
	}
	if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o555 {
		t.Errorf("-o mode %v, want the previous 0555 (%v)", fi.Mode(), err)
	}
	return code, msg
}

// outputNotGenerated: -o holds a file the generator did not write.
func outputNotGenerated(t *testing.T, bin string) (int, string) {
	out := t.TempDir()
	mine := filepath.Join(out, "mine.go")
	if err := os.WriteFile(mine, []byte("package pkg\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, msg := runGen(t, bin, nil, "-I", writeHeader(t, goodHeader), "-o", out, "-arch", "amd64")
	if b, err := os.ReadFile(mine); err != nil || string(b) != "package pkg\n" {
		t.Errorf("hand-written file changed or removed: %q %v", b, err)
	}
	return code, msg
}

// outputReadOnly regenerates over a package on a tmpfs remounted
// read-only, in a private mount namespace.
func outputReadOnly(t *testing.T, bin string) (int, string) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("SKIP: output-read-only needs unshare(1) to mount a read-only tmpfs privately; not installed")
	}
	mnt := t.TempDir()
	errFile := filepath.Join(t.TempDir(), "stderr")
	script := `set -e
mount -t tmpfs -o size=16m verbsexp "$MNT"
"$BIN" -q -I "$INC1" -o "$MNT/pkg" -arch amd64
before=$(cat "$MNT"/pkg/* | sha256sum)
mount -o remount,ro "$MNT"
rc=0
"$BIN" -I "$INC2" -o "$MNT/pkg" -arch amd64 2>"$ERR" || rc=$?
after=$(cat "$MNT"/pkg/* | sha256sum)
left=$(ls -A "$MNT" | grep -v '^pkg$' || true)
echo "rc=$rc same=$([ "$before" = "$after" ] && echo yes || echo no) left=$left"
`
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script)
	env := []string{"MNT=" + mnt, "BIN=" + bin, "INC1=" + writeHeader(t, goodHeader), "INC2=" + writeHeader(t, collisionHeader), "ERR=" + errFile}
	code, out := runCmd(t, cmd, env)
	if code != 0 {
		t.Skipf("SKIP: output-read-only: cannot mount a private read-only tmpfs here (unshare -m: exit %d): %s", code, strings.TrimSpace(out))
	}
	m := regexp.MustCompile(`rc=(\d+) same=(\w+) left=(.*)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("unexpected script output: %s", out)
	}
	if m[2] != "yes" {
		t.Errorf("the failed run changed the package on the read-only file system")
	}
	if strings.TrimSpace(m[3]) != "" {
		t.Errorf("left next to the package: %s", m[3])
	}
	msg, _ := os.ReadFile(errFile)
	rc, _ := strconv.Atoi(m[1])
	return rc, string(msg)
}

// diskFull regenerates over a package with RLIMIT_FSIZE below the size
// of the new consts.go.
func diskFull(t *testing.T, bin string) (int, string) {
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("SKIP: disk-full needs prlimit(1) (util-linux) to set RLIMIT_FSIZE; not installed")
	}
	out := filepath.Join(t.TempDir(), "pkg")
	if c, o := runGen(t, bin, nil, "-q", "-I", writeHeader(t, goodHeader), "-o", out, "-arch", "amd64"); c != 0 {
		t.Fatalf("good run: %s", o)
	}
	before := snapshot(t, out)
	var h strings.Builder
	h.WriteString("struct ibv_disk { int a; };\n")
	for i := 0; i < 3000; i++ {
		fmt.Fprintf(&h, "#define IBV_FILLER_CONSTANT_NUMBER_%d %d\n", i, i)
	}
	code, msg := runCmd(t, exec.Command(prlimit, "--fsize=65536", bin, "-I", writeHeader(t, h.String()), "-o", out, "-arch", "amd64"), nil)
	if !equalSnapshots(before, snapshot(t, out)) {
		t.Errorf("a failed write changed the previous package")
	}
	if left := scratchDirs(t, filepath.Dir(out)); len(left) > 0 {
		t.Errorf("a failed write left %v", left)
	}
	return code, msg
}

// interrupted kills the generator while it replaces a package: at the
// swap itself (strace injects SIGKILL into the rename system calls), and
// at timed points of a slow run. After each kill -o must hold the
// previous package or the new one, complete; a normal run then succeeds.
func interrupted(t *testing.T, bin string) (int, string) {
	// Every run writes "-o pkg" from the parent directory, so that the
	// recorded command, and so the bytes, are the same wherever it is.
	parent, wantParent := t.TempDir(), t.TempDir()
	out := filepath.Join(parent, "pkg")
	gen := func(dir string, args ...string) *exec.Cmd {
		cmd := exec.Command(bin, append(args, "-o", "pkg", "-arch", "amd64")...)
		cmd.Dir = dir
		return cmd
	}
	good := writeHeader(t, goodHeader)
	if c, o := runCmd(t, gen(parent, "-q", "-I", good), nil); c != 0 {
		t.Fatalf("good run: %s", o)
	}
	prev := snapshot(t, out)
	newInc := writeHeader(t, collisionHeader)
	if c, o := runCmd(t, gen(wantParent, "-q", "-I", newInc), nil); c != 0 {
		t.Fatalf("new header: %s", o)
	}
	next := snapshot(t, filepath.Join(wantParent, "pkg"))
	state := func(when string) {
		t.Helper()
		switch got := snapshot(t, out); {
		case equalSnapshots(got, prev):
			t.Logf("killed %s: -o holds the previous package", when)
		case equalSnapshots(got, next):
			t.Logf("killed %s: -o holds the new package", when)
		default:
			t.Errorf("killed %s: -o holds neither package complete: %d files", when, len(got))
		}
	}
	killedStatus := -1
	if strace, err := exec.LookPath("strace"); err != nil {
		t.Logf("strace(1) not installed: the kill at the swap itself is not tested, only the timed kills")
	} else {
		const renames = "rename,renameat,renameat2"
		for _, when := range []string{"1", "2"} {
			cmd := gen(parent, "-q", "-I", newInc)
			cmd.Args = append([]string{strace, "-f", "-qq", "-o", "/dev/null", "-e", "trace=" + renames, "-e", "inject=" + renames + ":signal=KILL:when=" + when}, cmd.Args...)
			cmd.Path = strace
			code, msg := runCmd(t, cmd, nil)
			if strings.Contains(msg, "ptrace") || strings.Contains(msg, "Operation not permitted") {
				t.Logf("strace cannot trace here (%s): the kill at the swap is not tested", strings.TrimSpace(msg))
				break
			}
			left := scratchDirs(t, parent)
			t.Logf("strace inject at rename #%s: exit %d, %d scratch directories left", when, code, len(left))
			if when == "1" && len(left) == 0 {
				t.Errorf("killed at the swap, the run left no scratch directory: the clean-up below is not tested")
			}
			state("at rename #" + when)
			// Back to the previous package for the next kill point: this
			// run removes what the killed one left.
			if c, o := runCmd(t, gen(parent, "-q", "-I", good), nil); c != 0 {
				t.Fatalf("restoring: %s", o)
			}
			if left := scratchDirs(t, parent); len(left) > 0 {
				t.Errorf("the run after the kill at rename #%s left the killed run's scratch directories: %v", when, left)
			}
		}
	}
	// Timed kills during a slow run (the 3 s enum): whatever stage it is in.
	var h strings.Builder
	h.WriteString("enum ibv_slow {\n")
	for i := 0; i < 60000; i++ {
		fmt.Fprintf(&h, "\tIBV_SLOW_%d,\n", i)
	}
	h.WriteString("};\n")
	slow := writeHeader(t, h.String())
	for _, d := range []time.Duration{300 * time.Millisecond, 1200 * time.Millisecond} {
		cmd := gen(parent, "-q", "-I", slow)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(d)
		cmd.Process.Signal(syscall.SIGKILL)
		err := cmd.Wait()
		got := snapshot(t, out)
		if equalSnapshots(got, prev) {
			t.Logf("killed after %v (%v): previous package intact", d, err)
		} else if _, ok := got["consts.go"]; ok && strings.Contains(got["consts.go"], "IBV_SLOW_59999") {
			t.Logf("killed after %v: the run had already finished; new package complete", d)
			if c, o := runCmd(t, gen(parent, "-q", "-I", good), nil); c != 0 {
				t.Fatalf("restoring: %s", o)
			}
			prev = snapshot(t, out)
		} else {
			t.Errorf("killed after %v: -o holds neither package complete", d)
		}
	}
	left := scratchDirs(t, filepath.Dir(out))
	t.Logf("scratch directories left by the timed kills: %d", len(left))
	code, msg := runCmd(t, gen(parent, "-q", "-I", newInc), nil)
	if code != 0 {
		t.Fatalf("the run after the kills failed: %s", msg)
	}
	if !equalSnapshots(snapshot(t, out), next) {
		t.Errorf("the run after the kills did not write the new package")
	}
	if left := scratchDirs(t, filepath.Dir(out)); len(left) > 0 {
		t.Errorf("the run after the kills left the killed runs' scratch directories: %v", left)
	}
	return killedStatus, ""
}

// staleManifest: scripts/regenerate --check against headers/ plus one
// constant reports generated/ as stale.
func staleManifest(t *testing.T, bin string) (int, string) {
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("../headers")); err != nil {
		t.Fatal(err)
	}
	h := filepath.Join(dir, "infiniband", "verbs_exp.h")
	b, err := os.ReadFile(h)
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, "\n#define IBV_EXP_ERRORS_TABLE_STALE 1\n"...)
	if err := os.WriteFile(h, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("scripts/regenerate", "--check", dir)
	cmd.Dir = ".."
	return runCmd(t, cmd, nil)
}

// scratchDirs lists the generator's scratch directories in dir (named
// .verbsexp-gen.…, see generate.Write).
func scratchDirs(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var r []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".verbsexp-gen.") {
			r = append(r, e.Name())
		}
	}
	return r
}

func clip(s string) string {
	if len(s) > 3000 {
		return s[:3000] + "\n…"
	}
	return s
}
