package parse

import (
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"modernc.org/cc/v4"

	"github.com/verbsexp/verbsexp/internal/target"
)

// repeated is f(b, i) for i in [0, n).
func repeated(n int, f func(b *strings.Builder, i int)) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		f(&b, i)
	}
	return b.String()
}

// Macro shapes of the tests: a chain each using the one before (cubic
// for cc/v4), one doubling at each level, the same through
// function-like macros, and one long expression used many times.
func chainMacros(n int) string {
	return "#define IBV_C0 1\n" + repeated(n-1, func(b *strings.Builder, i int) { fmt.Fprintf(b, "#define IBV_C%d (IBV_C%d + 1)\n", i+1, i) })
}

func doublingMacros(n int) string {
	return "#define IBV_E0 1\n" + repeated(n, func(b *strings.Builder, i int) { fmt.Fprintf(b, "#define IBV_E%d (IBV_E%d+IBV_E%d)\n", i+1, i, i) })
}

func functionChain(n int) string {
	return "#define F0(x) (x)\n" + repeated(n-1, func(b *strings.Builder, i int) {
		fmt.Fprintf(b, "#define F%d(x) (F%d(x) + 1)\n#define IBV_K%d F%d(%d)\n", i+1, i, i+1, i+1, i+1)
	})
}

func functionDoubling(n int) string {
	return "#define G0(x) (x)\n" + repeated(n, func(b *strings.Builder, i int) { fmt.Fprintf(b, "#define G%d(x) (G%d(x)+G%d(x))\n", i+1, i, i) }) + fmt.Sprintf("#define IBV_G G%d(1)\n", n)
}

func amplified(n int) string {
	return "#define IBV_A1 1" + strings.Repeat("+1", n-1) + "\n#define IBV_A2 " + strings.Repeat("IBV_A1+", n-1) + "IBV_A1\n"
}

// entryDir is a fresh include directory whose entry header is header.
func entryDir(t *testing.T, header string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "infiniband"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, DefaultEntry), []byte(header), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func amd64Compiler(t *testing.T) *Compiler {
	t.Helper()
	tg, _ := target.Lookup("amd64")
	if _, err := tg.Compiler(); err != nil {
		t.Skipf("SKIP: needs the amd64 compiler: %v", err)
	}
	comp, err := FindCompiler(tg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return comp
}

// TestExpansionWorkAsFrontEndCounts: the scan counts the work of
// evaluating the macros as cc/v4 itself counts it. cc/v4's count is
// found from its Config.ExpansionLimit: the least limit under which
// every macro of the header still gets its value (past it,
// EvalAllMacros stops), less that of an empty header (its own builtin
// text). They agree within 2 % (measured: 0.04–1 %).
func TestExpansionWorkAsFrontEndCounts(t *testing.T) {
	comp := amd64Compiler(t)
	// Only the type macros of the predefined ones, which <builtin>
	// needs: the rest would be evaluated too, in an order that changes
	// from run to run.
	var pre strings.Builder
	for _, l := range strings.Split(comp.Config.Predefined, "\n") {
		if strings.Contains(l, "_TYPE__ ") {
			pre.WriteString(l + "\n")
		}
	}
	// valued translates dir's entry under limit and counts the macros
	// of names with a value (-1: the limit stopped the parse itself).
	valued := func(dir string, limit int, names []string) int {
		cfg := *comp.Config
		cfg.ABILayout, cfg.EvalAllMacros, cfg.UnsignedEnums, cfg.Header = true, true, true, true
		cfg.ExpansionLimit = limit
		cfg.IncludePaths = append([]string{"", dir}, comp.Config.IncludePaths...)
		cfg.SysIncludePaths = append([]string{dir}, comp.Config.SysIncludePaths...)
		ast, err := cc.Translate(&cfg, []cc.Source{
			{Name: "<predefined>", Value: pre.String()},
			{Name: "<builtin>", Value: cc.Builtin},
			{Name: "<verbsexp>", Value: "#include <" + DefaultEntry + ">\n"},
		})
		if err != nil {
			if !strings.Contains(err.Error(), "expansion limit exceeded") {
				t.Fatal(err)
			}
			return -1
		}
		n := 0
		for _, name := range names {
			if m := ast.Macros[name]; m != nil && m.Value() != cc.Unknown {
				n++
			}
		}
		return n
	}
	// frontEndWork is the least limit under which names get as many
	// values as without one.
	frontEndWork := func(dir string, names []string, hi int) int {
		all := valued(dir, 0, names)
		if valued(dir, hi, names) != all {
			t.Fatalf("not every macro has its value under %d", hi)
		}
		lo := 1
		for lo < hi {
			if mid := (lo + hi) / 2; valued(dir, mid, names) == all {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		return lo
	}
	const text = "struct ibv_a { int a; };\n"
	empty := frontEndWork(entryDir(t, text), nil, 1<<20)
	for _, c := range []struct{ name, macros string }{
		{"chain of 60", chainMacros(60)},
		{"doubling 10 times", doublingMacros(10)},
		{"function-like chain of 30", functionChain(30)},
		{"function-like, doubling 8 times", functionDoubling(8)},
		{"60 terms used 60 times", amplified(60)},
	} {
		header := c.macros + text
		tab := readPreprocessed([]byte(header))
		st := scanTable(tab, math.MaxInt64, true)
		var names []string
		for _, m := range tab.order {
			if !m.fn {
				names = append(names, m.name)
			}
		}
		got := frontEndWork(entryDir(t, header), names, 4*int(st.Expansion)+1<<20) - empty
		t.Logf("%-32s scan %7d, cc/v4 %7d (%+.2f %%)", c.name, st.Expansion, got, 100*(float64(st.Expansion)/float64(got)-1))
		if d := math.Abs(float64(st.Expansion)/float64(got) - 1); d > 0.02 {
			t.Errorf("%s: the scan counts %d, cc/v4 %d", c.name, st.Expansion, got)
		}
	}
}

// TestExpansionMemoChangesNothing: remembering object-like expansions
// changes no count the scan makes, on the hostile shapes and on the real
// headers.
func TestExpansionMemoChangesNothing(t *testing.T) {
	comp := amd64Compiler(t)
	real, ok := preprocess(comp.Config.CC, []string{"-E", "-dD", "-x", "c", "../../../headers/" + DefaultEntry, "-I", "../../../headers"})
	if !ok {
		t.Fatal("cc -E -dD of headers/ failed")
	}
	for _, c := range []struct{ name, src string }{
		{"headers/", string(real)},
		{"chain of 300", chainMacros(300)},
		{"doubling 14 times", doublingMacros(14)},
		{"function-like chain of 100", functionChain(100)},
		{"function-like, doubling 10 times", functionDoubling(10)},
		{"300 terms used 300 times", amplified(300)},
		{"self-reference", "#define IBV_R (IBV_R + 1)\n#define IBV_S (IBV_R * IBV_R)\n#define IBV_T IBV_U\n#define IBV_U (IBV_T + IBV_S)\n#define IBV_V (IBV_U, IBV_T)\n"},
		{"pasting", "#define CAT(a, b) a##b\n#define IBV_X1 7\n#define IBV_P CAT(IBV_X, 1)\n#define IBV_Q CAT(IBV_, P) + CAT(IBV_, X1)\n"},
		{"macro before its parentheses", "#define F(x) (x + 1)\n#define IBV_F F\n#define IBV_Y IBV_F(2)\n#define LP (\n#define IBV_Z F LP 3)\n"},
	} {
		with := scanTable(readPreprocessed([]byte(c.src)), math.MaxInt64, true)
		without := scanTable(readPreprocessed([]byte(c.src)), math.MaxInt64, false)
		t.Logf("%-34s work %d, steps %d remembering, %d not", c.name, with.Work, with.Steps, without.Steps)
		if with.Work != without.Work || with.Depth != without.Depth || with.Tokens != without.Tokens || with.Macros != without.Macros || with.GaveUp || without.GaveUp {
			t.Errorf("%s: remembering %+v\nnot remembering %+v", c.name, with, without)
		}
	}
}

// stormHeader is the 2.7 MB header of the issue: ~75 000 macros, each
// using the one before.
func stormHeader() string {
	var b strings.Builder
	b.WriteString("struct ibv_m { int a; };\n#define IBV_C0 1\n")
	for i := 1; b.Len() < 2_700_000; i++ {
		fmt.Fprintf(&b, "#define IBV_C%d (IBV_C%d + 1)\n", i, i-1)
	}
	return b.String()
}

// TestExpansionScanRefuses: what cc/v4 cannot get through is refused
// with the file and line of the macro (or the text) where it happens:
// macros whose evaluation would take the front end past its CPU time,
// nesting deeper than its stack holds; a cheaper chain is not.
func TestExpansionScanRefuses(t *testing.T) {
	comp := amd64Compiler(t)
	deepText := "int ibv_x[" + strings.Repeat("(", 70000) + "1" + strings.Repeat(")", 70000) + "];\n"
	for _, c := range []struct {
		name, header string
		cpu          int64
		want         string // a regular expression
	}{
		{"2.7 MB of chained macros", stormHeader(), defaultFrontEndCPU, `/verbs_exp\.h:(\d+):9: macro IBV_C(\d+): the C front end .* evaluates every object-like macro of the headers, and evaluating those up to this one would take it more than its 20 s of CPU time`},
		{"doubling 39 times, CPU 4 s", doublingMacros(39), 4, `/verbs_exp\.h:(\d+):9: macro IBV_E(\d+): .* more than its 4 s of CPU time`},
		{"100 000 nested parentheses", "\n#define IBV_P " + strings.Repeat("(", 100000) + "1" + strings.Repeat(")", 100000) + "\n", defaultFrontEndCPU, `/verbs_exp\.h:2:9: macro IBV_P expands to parentheses, brackets and braces nested 100000 deep: .*nest them less`},
		{"70 000 nested parentheses in a declaration", "struct ibv_m { int a; };\n" + deepText, defaultFrontEndCPU, `/verbs_exp\.h:2: parentheses, brackets and braces nest more than 65536 deep here`},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			_, err := scanExpansion(comp.Config, []string{entryDir(t, c.header)}, DefaultEntry, c.cpu)
			t.Logf("refused in %v: %v", time.Since(start).Round(time.Millisecond), err)
			if err == nil || !regexp.MustCompile(c.want).MatchString(err.Error()) {
				t.Fatalf("err = %v\nwant %s", err, c.want)
			}
			if m := regexp.MustCompile(`:(\d+):9: macro IBV_[CE](\d+):`).FindStringSubmatch(err.Error()); m != nil {
				// The line is the macro's own: IBV_Cn on line n+2, IBV_En on n+1.
				var line, n int
				fmt.Sscan(m[1], &line)
				fmt.Sscan(m[2], &n)
				if line != n+1 && line != n+2 {
					t.Errorf("macro %s on line %d", m[2], line)
				}
			}
		})
	}
	// What the scan does not follow it does not refuse, but names when
	// the front end fails: 65 537 nested invocations.
	s, err := scanExpansion(comp.Config, []string{entryDir(t, "#define IBV_PP(x) (x)\n#define IBV_Q "+strings.Repeat("IBV_PP(", 65537)+"1"+strings.Repeat(")", 65537)+"\n")}, DefaultEntry, defaultFrontEndCPU)
	if err != nil || s == nil || !s.stats.GaveUp {
		t.Fatalf("65 537 nested invocations: %+v %v, want no opinion", s, err)
	}
	if got := s.suspect(failedStack); !regexp.MustCompile(`/verbs_exp\.h:2:9: macro IBV_Q[ :]`).MatchString(got) {
		t.Errorf("suspect %q", got)
	}
	// Up to the budget: a chain of 200 macros (cc/v4: under a second)
	// is no refusal.
	s, err = scanExpansion(comp.Config, []string{entryDir(t, chainMacros(200))}, DefaultEntry, defaultFrontEndCPU)
	if err != nil || s == nil || s.stats.GaveUp {
		t.Fatalf("chain of 200: %v %v", s, err)
	}
}

// TestExpansionScanLeavesRoomForRealHeaders scans the real headers
// (headers/ and the MLNX_OFED releases present) with every target's
// compiler, and checks that none comes near a refusal: the work at most
// an 8th of what the default CPU limit allows at the scan's rate (in
// fact ~20 000 times below), the nesting at most an 8th of maxNesting,
// and that the scan follows every macro (never gives up).
func TestExpansionScanLeavesRoomForRealHeaders(t *testing.T) {
	budget := int64(defaultFrontEndCPU * frontEndWorkPerSecond)
	for _, comp := range realCompilers(t) {
		for _, inc := range realHeaders(t) {
			if _, err := os.Stat(filepath.Join(inc, DefaultEntry)); err != nil {
				continue
			}
			dirs, _ := absDirs([]string{inc})
			start := time.Now()
			s, err := scanExpansion(comp.Config, dirs, DefaultEntry, defaultFrontEndCPU)
			if err != nil {
				t.Fatalf("%s, linux/%s: %v", inc, comp.Target.GoArch, err)
			}
			if s == nil {
				t.Fatalf("%s, linux/%s: no scan", inc, comp.Target.GoArch)
			}
			st := s.stats
			t.Logf("%-30s %-7s %v: %d macros, work %d, longest %d tokens, nesting %d (text %d), scan steps %d", inc, comp.Target.GoArch, time.Since(start).Round(time.Millisecond), st.Macros, st.Work, st.Tokens, st.Depth, s.textDepth, st.Steps)
			if st.GaveUp {
				t.Errorf("%s, linux/%s: the scan gave up (in %v)", inc, comp.Target.GoArch, st.GaveUpWhy)
			}
			if st.Work*8 > budget {
				t.Errorf("%s, linux/%s: work %d, more than an 8th of %d", inc, comp.Target.GoArch, st.Work, budget)
			}
			if max(st.Depth, s.textDepth)*8 > maxNesting {
				t.Errorf("%s, linux/%s: nesting %d, more than an 8th of %d", inc, comp.Target.GoArch, max(st.Depth, s.textDepth), maxNesting)
			}
		}
	}
}

// TestExpansionScanSystemHeaders scans every header of /usr/include
// that gcc compiles on its own, as the entry with -I /usr/include, and
// fails on any the scan would refuse. It takes minutes, so it runs only
// with VERBSEXP_SCAN_SYSTEM_HEADERS=1 (see docs/errors.md for the
// numbers it gave).
func TestExpansionScanSystemHeaders(t *testing.T) {
	if os.Getenv("VERBSEXP_SCAN_SYSTEM_HEADERS") == "" {
		t.Skip("SKIP: scanning every header of /usr/include takes minutes: set VERBSEXP_SCAN_SYSTEM_HEADERS=1")
	}
	tg, _ := target.Lookup("amd64")
	comp, err := FindCompiler(tg, nil)
	if err != nil {
		t.Skipf("SKIP: needs the amd64 compiler: %v", err)
	}
	var headers []string
	filepath.WalkDir("/usr/include", func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && strings.HasSuffix(p, ".h") {
			headers = append(headers, strings.TrimPrefix(p, "/usr/include/"))
		}
		return nil
	})
	type result struct {
		name string
		st   scanStats
		text int64
	}
	var scanned []result
	compiles, gaveUp := 0, 0
	var most scanStats
	start := time.Now()
	for _, h := range headers {
		if _, err := runBounded(comp.Config.CC, []string{"-fsyntax-only", "-x", "c", "/usr/include/" + h, "-I", "/usr/include"}); err != nil {
			continue
		}
		compiles++
		s, err := scanExpansion(comp.Config, []string{"/usr/include"}, h, defaultFrontEndCPU)
		if err != nil {
			t.Errorf("%s: refused: %v", h, err)
			continue
		}
		if s == nil {
			t.Errorf("%s: no scan", h)
			continue
		}
		if s.stats.GaveUp {
			gaveUp++
			t.Logf("%s: the scan gave up (in %v)", h, s.stats.GaveUpWhy)
		}
		scanned = append(scanned, result{h, s.stats, s.textDepth})
		most.Work = max(most.Work, s.stats.Work)
		most.Tokens = max(most.Tokens, s.stats.Tokens)
		most.Depth = max(most.Depth, s.stats.Depth, s.textDepth)
		most.Steps = max(most.Steps, s.stats.Steps)
	}
	sort.Slice(scanned, func(i, j int) bool { return scanned[i].st.Work > scanned[j].st.Work })
	for _, r := range scanned[:min(10, len(scanned))] {
		t.Logf("costliest: %-50s work %d, longest %d tokens, nesting %d (text %d)", r.name, r.st.Work, r.st.Tokens, r.st.Depth, r.text)
	}
	t.Logf("%d headers, %d compile alone, scanned in %v; %d not followed to the end; at most: work %d (budget %d: ×%.0f), %d tokens, nesting %d, %d steps",
		len(headers), compiles, time.Since(start).Round(time.Second), gaveUp, most.Work, int64(defaultFrontEndCPU*frontEndWorkPerSecond), float64(defaultFrontEndCPU*frontEndWorkPerSecond)/float64(max(most.Work, 1)), most.Tokens, most.Depth, most.Steps)
}
