package parse

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/internal/target"
)

// realHeaders are the include directories of real headers: the
// project's restatement and, where present, the MLNX_OFED releases.
func realHeaders(t *testing.T) []string {
	dirs := []string{"../../../headers"}
	rel, _ := filepath.Glob("/work/ofed/*/include")
	rel2, _ := filepath.Glob("/tmp/ofed/*/include")
	rel = append(rel, rel2...)
	if len(rel) == 0 {
		t.Logf("no MLNX_OFED releases in /work/ofed or /tmp/ofed: measuring headers/ only")
	}
	return append(dirs, rel...)
}

// realCompilers are the installed target compilers (all three where
// make toolchains ran; a missing one is skipped, saying so).
func realCompilers(t *testing.T) []*Compiler {
	var comps []*Compiler
	for _, tg := range target.All {
		if _, err := tg.Compiler(); err != nil {
			t.Logf("SKIP linux/%s: %v", tg.GoArch, err)
			continue
		}
		comp, err := FindCompiler(tg, nil)
		if err != nil {
			t.Fatal(err)
		}
		comps = append(comps, comp)
	}
	if len(comps) == 0 {
		t.Skip("SKIP: no target compiler")
	}
	return comps
}

// TestLimitsLeaveRoomForRealHeaders reads the real headers for every
// target and checks that each input bound is at least 8 times what they
// need, so that no real header comes near a refusal.
func TestLimitsLeaveRoomForRealHeaders(t *testing.T) {
	var worst inputStats
	for _, comp := range realCompilers(t) {
		tg, cfg := comp.Target, comp.Config
		for _, inc := range realHeaders(t) {
			if _, err := os.Stat(filepath.Join(inc, DefaultEntry)); err != nil {
				continue
			}
			u, err := Translate(tg.GoArch, cfg, Options{IncludeDirs: []string{inc}, Entry: DefaultEntry, ScopeDir: DefaultScope, Checked: true}, nil)
			if err != nil {
				t.Fatalf("%s for %s: %v", inc, tg.GoArch, err)
			}
			s := u.stats
			t.Logf("%-24s %-7s %+v", inc, tg.GoArch, s)
			worst = inputStats{Files: max(worst.Files, s.Files), Bytes: max(worst.Bytes, s.Bytes), Lines: max(worst.Lines, s.Lines)}
		}
	}
	t.Logf("worst: %+v", worst)
	for _, c := range []struct {
		what        string
		need, limit int
	}{
		{"bytes read", worst.Bytes, maxInputBytes},
		{"lines read", worst.Lines, maxInputLines},
	} {
		if c.need*8 > c.limit {
			t.Errorf("%s: the real headers need %d, the limit is %d: less than 8 times", c.what, c.need, c.limit)
		}
	}
}

// frontEnd translates header (infiniband/verbs_exp.h of a fresh
// directory) for amd64 in the child process, as the generator does.
func frontEnd(t *testing.T, header string) (*Unit, error) {
	t.Helper()
	tg, _ := target.Lookup("amd64")
	if _, err := tg.Compiler(); err != nil {
		t.Skipf("SKIP: needs the amd64 compiler: %v", err)
	}
	comp, err := FindCompiler(tg, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "infiniband"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, DefaultEntry), []byte(header), 0o644); err != nil {
		t.Fatal(err)
	}
	units, _, errs := TranslateUnits([]*Compiler{comp}, []bool{true}, Options{IncludeDirs: []string{dir}, Entry: DefaultEntry, ScopeDir: DefaultScope, Checked: true}, nil)
	return units[0], errs[0]
}

// TestFrontEndContained: what made the C front end (in the generator's
// process) overflow its stack, loop for ever or run out of memory is, in
// its child process, an error saying which limit it reached, what it was
// reading and, from the expansion scan (expansion.go), the macro that
// made it fail, with its file:line; the generator goes on. (What the scan
// refuses before the child starts: TestExpansionScanRefuses.) The limits
// here are lowered (VERBSEXP_FRONT_END_*) to keep the test quick.
func TestFrontEndContained(t *testing.T) {
	t.Setenv("VERBSEXP_FRONT_END_CPU", "4")
	t.Setenv("VERBSEXP_FRONT_END_MEMORY", "1024")
	for _, c := range []struct{ name, src, want, suspect string }{
		{"50 000 nested parentheses", "#define IBV_P " + strings.Repeat("(", 50000) + "1" + strings.Repeat(")", 50000) + "\n", "it recurses once per level of nesting",
			"/infiniband/verbs_exp.h:1:9: macro IBV_P expands to parentheses, brackets and braces nested 50000 deep, the deepest in the headers: "},
		{"unbalanced macro", "#define X (void *\n", "used up its 4 s of CPU time",
			"/infiniband/verbs_exp.h:1:9: object-like macro X opens more parentheses than it closes"},
		{"a macro of 2 000 000 tokens", "#define IBV_S 1" + strings.Repeat("+1", 1000000) + "\n", "the C front end",
			"/infiniband/verbs_exp.h:1:9: macro IBV_S "},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := frontEnd(t, c.src+"struct ibv_a { int a; };\n")
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "the last header it read: infiniband/verbs_exp.h") || !strings.Contains(err.Error(), c.suspect) {
				t.Fatalf("err = %v\nwant one with %q, %q and the header read", err, c.want, c.suspect)
			}
		})
	}
	// What the guard before the front end refused though gcc and the
	// front end accept it: a macro opening a parenthesis it does not
	// close (libltdl's LT_STMT_START), a thousand nested parentheses.
	u, err := frontEnd(t, "#define LT_STMT_START (void)(\n#define LT_STMT_END )\n#define IBV_N "+strings.Repeat("(", 1000)+"7"+strings.Repeat(")", 1000)+"\nstruct ibv_a { int a; };\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(u.Macros) != 1 || u.Macros[0].Name != "IBV_N" || u.Macros[0].Value.String() != "7" {
		t.Errorf("macros %+v, want IBV_N = 7", u.Macros)
	}
}

// TestLexerPositions: positions are physical (after splices and
// comments), directives are recognised, <header> is one token.
func TestLexerPositions(t *testing.T) {
	src := "/* a\n comment */ int x\\\ny; // c\n  # include <a/b.h>\n#define M(a) \\\n  a+1\n"
	lx := newLexer(src)
	var got []string
	for {
		ll, ok := lx.next(nil)
		if !ok {
			break
		}
		for _, tk := range ll.toks {
			got = append(got, fmt.Sprintf("%d:%d:%s:%v", tk.line, tk.col, tk.text, ll.directive))
		}
	}
	want := "2:13:int:false 2:17:xy:false 3:2:;:false 4:3:#:true 4:5:include:true 4:13:<a/b.h>:true 5:1:#:true 5:2:define:true 5:9:M:true 5:10:(:true 5:11:a:true 5:12:):true 6:3:a:true 6:4:+:true 6:5:1:true"
	if s := strings.Join(got, " "); s != want {
		t.Errorf("got  %s\nwant %s", s, want)
	}
}

// TestRunBoundedTimeout: a compiler that does not finish is stopped at
// the timeout, with every process it started.
func TestRunBoundedTimeout(t *testing.T) {
	old := compilerTimeout
	compilerTimeout = 300 * time.Millisecond
	defer func() { compilerTimeout = old }()
	pidFile := filepath.Join(t.TempDir(), "pid")
	start := time.Now()
	_, err := runBounded("/bin/sh", []string{"-c", "sleep 60 & echo $! > " + pidFile + "; wait"})
	var te *timeoutError
	if !errors.As(err, &te) {
		t.Fatalf("err = %v, want a timeout", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("returned after %v", d)
	}
	b, _ := os.ReadFile(pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid == 0 {
		t.Fatal("no pid written")
	}
	// Killed: gone, or a zombie (where nothing reaps orphans).
	time.Sleep(100 * time.Millisecond)
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		if f := strings.Fields(string(st)); len(f) > 2 && f[2] != "Z" {
			t.Errorf("the compiler's child %d survived the timeout (state %s)", pid, f[2])
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// TestRunBoundedOutput: only compilerOutputLimit bytes are kept.
func TestRunBoundedOutput(t *testing.T) {
	out, err := runBounded("/bin/sh", []string{"-c", "head -c 5000000 /dev/zero"})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != compilerOutputLimit {
		t.Errorf("kept %d bytes, want %d", len(out), compilerOutputLimit)
	}
}

// freshProcessEnv marks a test process started by a test to measure in.
const freshProcessEnv = "VERBSEXP_PARSE_TEST_FRESH"

// TestFrontEndLimitsLeaveRoom translates the real headers for every
// target in the front end's child, as the generator does, and checks
// that its CPU time and memory are at most an eighth of the child's
// limits.
//
// It measures in a fresh test process of its own: a child's peak RSS
// (ru_maxrss) includes what its parent held when it forked, and other
// tests of this package (the macro storms) leave the test process large.
func TestFrontEndLimitsLeaveRoom(t *testing.T) {
	if os.Getenv(freshProcessEnv) == "" {
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(self, "-test.run=^TestFrontEndLimitsLeaveRoom$", "-test.v")
		cmd.Env = append(os.Environ(), freshProcessEnv+"=1")
		out, err := cmd.CombinedOutput()
		t.Logf("in a fresh test process:\n%s", out)
		if err != nil {
			t.Fatalf("TestFrontEndLimitsLeaveRoom in a fresh process: %v", err)
		}
		return
	}
	comps := realCompilers(t)
	need := make([]bool, len(comps))
	for i := range need {
		need[i] = true
	}
	for _, inc := range realHeaders(t) {
		if _, err := os.Stat(filepath.Join(inc, DefaultEntry)); err != nil {
			continue
		}
		_, _, errs, ru := translateUnits(comps, need, Options{IncludeDirs: []string{inc}, Entry: DefaultEntry, ScopeDir: DefaultScope, Checked: true}, nil)
		for _, err := range errs {
			if err != nil {
				t.Fatalf("%s: %v", inc, err)
			}
		}
		if ru == nil {
			t.Fatal("no resource usage of the child")
		}
		cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		rss := ru.Maxrss << 10
		t.Logf("%-24s %d targets: CPU %v, peak RSS %d MiB", inc, len(comps), cpu.Round(time.Millisecond), rss>>20)
		if cpu*8 > defaultFrontEndCPU*time.Second {
			t.Errorf("%s: %v of CPU time, the limit is %d s: less than 8 times", inc, cpu, defaultFrontEndCPU)
		}
		if rss*8 > defaultFrontEndMemory<<20 {
			t.Errorf("%s: %d MiB, the limit is %d MiB: less than 8 times", inc, rss>>20, defaultFrontEndMemory)
		}
	}
}
