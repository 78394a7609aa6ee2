package parse

import (
	"errors"
	"fmt"
	"os"
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
	if len(rel) == 0 {
		t.Logf("no MLNX_OFED releases in /work/ofed: measuring headers/ only")
	}
	return append(dirs, rel...)
}

// TestLimitsLeaveRoomForRealHeaders reads the real headers for every
// target and checks that each input bound is at least 8 times what they
// need, so that no real header comes near a refusal.
func TestLimitsLeaveRoomForRealHeaders(t *testing.T) {
	var worst inputStats
	for _, tg := range target.All {
		if _, err := tg.Compiler(); err != nil {
			t.Logf("SKIP linux/%s: %v", tg.GoArch, err)
			continue
		}
		comp, err := FindCompiler(tg, nil)
		if err != nil {
			t.Fatal(err)
		}
		cfg := comp.Config
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
			worst = inputStats{
				Files: max(worst.Files, s.Files), Bytes: max(worst.Bytes, s.Bytes), Lines: max(worst.Lines, s.Lines),
				Nesting: max(worst.Nesting, s.Nesting), Run: max(worst.Run, s.Run), MacroTokens: max(worst.MacroTokens, s.MacroTokens),
				MacroWork: max(worst.MacroWork, s.MacroWork), TextWork: max(worst.TextWork, s.TextWork),
			}
		}
	}
	t.Logf("worst: %+v", worst)
	for _, c := range []struct {
		what        string
		need, limit int
	}{
		{"bytes read", worst.Bytes, maxInputBytes},
		{"lines read", worst.Lines, maxInputLines},
		{"nesting", worst.Nesting, maxNesting},
		{"expression tokens", worst.Run, maxRun},
		{"macro expansion tokens", worst.MacroTokens, maxMacroTokens},
		{"macro expansion work", worst.MacroWork, maxExpansionWork},
		{"text expansion work", worst.TextWork, maxExpansionWork},
	} {
		if c.need*8 > c.limit {
			t.Errorf("%s: the real headers need %d, the limit is %d: less than 8 times", c.what, c.need, c.limit)
		}
	}
}

// TestCheckSourceRefusesAmplification: shapes that make cc/v4 recurse
// too deep or expand too much are refused, with the position, however
// the macros build them; ordinary macro use passes.
func TestCheckSourceRefusesAmplification(t *testing.T) {
	double := "#define D(x) x x\n"
	deep := "#define W(x) ((((((((x))))))))\n"
	for _, c := range []struct {
		name, src, want string
	}{
		{"ok", "#define A (1 << 3)\n#define B (A | A)\nstruct s { int x[B]; };\n#if defined(B) && B > 2\n#endif\n", ""},
		{"function-like doubling", double + "#define X D(D(D(D(D(D(D(D(D(D(D(D(D(D(D(D(1-))))))))))))))))\n", "2:9: macro X: expanding the macros up to it takes more than 1048576 tokens of work"},
		{"nested wrapping", deep + "#define Y W(W(W(W(W(W(W(W(W(W(W(W(W(W(W(W(W(W(W(W(W(W(W(W(W(W(W(W(W(W(W(W(W(1)))))))))))))))))))))))))))))))))\n", "2:9: macro Y: parentheses, brackets and braces nest more than 256 deep"},
		{"pasted names", "#define E0 1\n#define E1 (E0+E0)\n#define E2 (E1+E1)\n#define E3 (E2+E2)\n#define E4 (E3+E3)\n#define E5 (E4+E4)\n#define E6 (E5+E5)\n#define E7 (E6+E6)\n#define E8 (E7+E7)\n#define E9 (E8+E8)\n#define E10 (E9+E9)\n#define E11 (E10+E10)\n#define E12 (E11+E11)\n#define E13 (E12+E12)\n#define E14 (E13+E13)\n#define E15 (E14+E14)\n#define E16 (E15+E15)\n#define CAT(a, b) a##b\n#define Z CAT(E, 16)\n", "macro E1"},
		{"text", double + "int a[D(D(D(D(D(D(D(D(D(D(D(D(D(D(D(D(1-))))))))))))))))];\n", "2:7: expanding the macros of the headers up to here takes more than 1048576 tokens of work"},
		{"chain defined later", "#define L1 L0 L0 L0 L0 L0 L0 L0 L0 L0 L0 L0 L0 L0 L0 L0 L0\n#define L2 L1 L1 L1 L1 L1 L1 L1 L1 L1 L1 L1 L1 L1 L1 L1 L1\n#define L3 L2 L2 L2 L2 L2 L2 L2 L2 L2 L2 L2 L2 L2 L2 L2 L2\n#define L4 L3 L3 L3 L3 L3 L3 L3 L3 L3 L3 L3 L3 L3 L3 L3 L3\n#define L0 - - - - - - - - - - - - - - - -\n", "macro L4"},
		{"#if", double + "#if D(D(D(D(D(D(D(D(D(D(D(D(D(D(D(1+))))))))))))))) 1\n#endif\n", "2:5: #if: an expression or declaration longer than 32768 tokens"},
		{"unbalanced", "#define X (void *\n", "1: object-like macro X opens more parentheses than it closes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := checkSource("h.h", c.src, newMacroTable())
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && err == nil:
				t.Fatalf("accepted, want %q", c.want)
			case c.want != "" && !strings.Contains(err.Error(), c.want):
				t.Fatalf("%v\nwant %q", err, c.want)
			}
		})
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
