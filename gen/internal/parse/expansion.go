package parse

import (
	"bytes"
	"fmt"
	"github.com/verbsexp/verbsexp/internal/abicheck"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"modernc.org/cc/v4"
)

// The C front end evaluates every object-like macro of the headers, the
// system headers' too, as one C expression each (Config.EvalAllMacros),
// where gcc expands a macro only where it is used. Its expansion copies
// each token's hide set and, while evaluating, the tokens still pending
// at each expansion, so a chain of n macros each using the one before
// costs it n³ (800 of them: more than its 20 s of CPU; gcc reads them
// in milliseconds), a macro using the previous one twice doubles, and
// parentheses nested some 40 000 deep overflow its stack. In its child
// process (contain.go) each is the child's death, after its whole CPU
// time or memory, naming only the last header read.
//
// scanExpansion, run in the child before it translates (scanInChild),
// sees them first, from the macros as the target compiler's
// preprocessor leaves them at the end of the headers (`cc -E -dD`:
// conditionals resolved, each with its file and line). It
// expands every object-like macro as cc/v4 will (expandcost.go), counting
// cc/v4's work without doing it, and refuses, naming the macro's
// file:line, what cc/v4 could not finish within its limits: work beyond
// the child's CPU time at a rate no machine reaches, or nesting deeper
// than its stack holds. What it does not refuse it keeps, so that when
// the child fails anyway the error names the macro that made it fail.
// Where the scan cannot follow the input (errGaveUp, errTooLong) it has
// no opinion and the child's limits decide, as before.

// Bounds of the scan.
const (
	// maxScanOutput bounds the preprocessed output read (the real
	// headers: 0.3 MiB); beyond it the scan has no opinion.
	maxScanOutput = 64 << 20
	// frontEndWorkPerSecond is more expansion work than cc/v4 does in a
	// second of CPU on any machine: 14 to 37 million on the one the
	// limits were measured on (chains, doubling macros, long expressions,
	// through function-like macros too). Work beyond the child's CPU
	// limit at this rate is refused: cc/v4 could not have done it.
	frontEndWorkPerSecond = 100_000_000
	// evalTokenWork is what one token of an evaluated macro costs cc/v4
	// to parse and evaluate as an expression, in units of expansion work
	// (measured: ~79; a macro of 600 000 tokens takes it 1.7 s).
	evalTokenWork = 64
	// maxDefinitionTokens bounds the tokens of a #define the scan reads
	// (a longer one it does not follow): the real headers' longest has
	// fewer than 1 000.
	maxDefinitionTokens = 1 << 18
	// maxNesting bounds parentheses, brackets and braces after expansion.
	// cc/v4 recurses once per level and overflows its 256 MiB stack
	// between 30 000 (read) and 50 000 (not); gcc 12's parser crashes
	// near 40 000. Beyond this, neither could read the headers.
	maxNesting = 1 << 16
)

// expansionScan is what the scan of one target's headers found.
type expansionScan struct {
	stats     scanStats
	textDepth int64 // the text's deepest nesting (after expansion), where it is
	textFile  string
	textLine  int
}

// scanExpansion runs cfg's compiler's preprocessor over the entry header
// and evaluates the macros as cc/v4 will, within the work cc/v4 could do
// in cpu seconds. It returns an error naming the macro (or line) cc/v4
// could not get through; nil and no error when the scan cannot tell
// (no compiler, the preprocessor failed, the output is too large, or
// the expansion goes beyond what the scan follows).
func scanExpansion(cfg *cc.Config, dirs []string, entry string, cpu int64) (*expansionScan, error) {
	if cfg.CC == "" {
		return nil, nil
	}
	path := ""
	for _, d := range dirs {
		p := filepath.Join(d, entry)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			path = p
			break
		}
	}
	if path == "" {
		return nil, nil
	}
	args := []string{"-E", "-dD", "-D" + abicheck.RestatementOnly, "-x", "c", path}
	for _, d := range dirs {
		args = append(args, "-I", d)
	}
	out, ok := preprocess(cfg.CC, args)
	if !ok {
		return nil, nil
	}
	t := readPreprocessed(out)
	s := &expansionScan{textDepth: t.textDepth, textFile: t.textFile, textLine: t.textLine}
	if s.textDepth > maxNesting {
		return nil, fmt.Errorf("%s:%d: parentheses, brackets and braces nest more than %d deep here (after macro expansion): %s", s.textFile, s.textLine, maxNesting, tooDeep)
	}
	s.stats = scanTable(t, satMul(cpu, frontEndWorkPerSecond), true)
	st := &s.stats
	switch {
	case st.GaveUp:
		return s, nil // no opinion, but what it found names a suspect
	case st.Depth > maxNesting:
		return nil, fmt.Errorf("%s: macro %s expands to parentheses, brackets and braces nested %d deep: %s", macroPos(st.Deepest), st.Deepest.name, st.Depth, tooDeep)
	case st.Over != nil:
		return nil, fmt.Errorf("%s: macro %s: the C front end the generator reads the headers with (modernc.org/cc/v4) evaluates every object-like macro of the headers, and evaluating those up to this one would take it more than its %d s of CPU time (over %s units of expansion work; it does fewer than %s a second; the MLNX_OFED headers with glibc's need about 100 000 in all): a macro expands without bound, or into a very long expression, or a chain of macros each uses the one before (each link costs it as much as the chain so far): simplify the macros; VERBSEXP_FRONT_END_CPU=seconds raises the limit",
			macroPos(st.Over), st.Over.name, cpu, millions(st.Work), millions(frontEndWorkPerSecond))
	}
	return s, nil
}

const tooDeep = "the C front end the generator reads the headers with (modernc.org/cc/v4) recurses once per level and overflows its 256 MiB stack beyond some 40 000 levels (gcc's parser too), so the generator refuses more than 65536: nest them less"

func millions(n int64) string {
	if n >= 10_000_000 {
		return strconv.FormatInt(n/1_000_000, 10) + " million"
	}
	return strconv.FormatInt(n, 10)
}

// suspectPrefix starts the lines the front end's child writes to its
// stderr before it translates: "<childFailureKind> <suspect>", the macro
// to name should it die of that kind (childError reads them).
const suspectPrefix = "verbsexp front end: should it fail: "

// scanInChild runs the scan in the front end's child, before it
// translates: with the first target's compiler (as the compiler check,
// once for all), within the child's CPU limit and memory. It returns the
// refusal to answer for every target ("" for none) and writes the
// suspects to errw.
func scanInChild(req *childRequest, errw io.Writer) string {
	if len(req.Targets) == 0 {
		return ""
	}
	comp, err := req.Targets[0].compiler()
	if err != nil {
		return "" // the translation says why
	}
	dirs, err := absDirs(req.Opts.IncludeDirs)
	if err != nil {
		return ""
	}
	cpu, _ := frontEndLimit("VERBSEXP_FRONT_END_CPU", defaultFrontEndCPU) // checked in childMain
	s, err := scanExpansion(comp.Config, dirs, req.Opts.Entry, cpu)
	if err != nil {
		var arches []string
		for _, t := range req.Targets {
			arches = append(arches, t.GoArch)
		}
		return fmt.Sprintf("linux/%s: %v", strings.Join(arches, ","), err)
	}
	for _, k := range []childFailureKind{failedStack, failedMemory, failedCPU, failedTime} {
		if m := s.suspect(k); m != "" {
			fmt.Fprintf(errw, "%s%d %s\n", suspectPrefix, k, m)
		}
	}
	return ""
}

// preprocess runs the compiler as runBounded does (its timeout, its
// address space), keeping up to maxScanOutput bytes of its output; ok is
// false when it fails or says more.
func preprocess(compiler string, args []string) ([]byte, bool) {
	name := compiler
	if _, err := os.Stat("/bin/sh"); err == nil {
		name, args = "/bin/sh", append([]string{"-c", fmt.Sprintf(`ulimit -v %d 2>/dev/null; exec "$0" "$@"`, compilerMemoryKiB), compiler}, args...)
	}
	out, errOut := &boundedBuffer{max: maxScanOutput + 1}, &boundedBuffer{max: compilerOutputLimit}
	if err := run(name, args, out, errOut); err != nil || len(out.Bytes()) > maxScanOutput {
		return nil, false
	}
	return out.Bytes(), true
}

// suspect names the macro, or the line, that most likely made the child
// fail of kind, with what stands out about it; "" when nothing does.
func (s *expansionScan) suspect(kind childFailureKind) string {
	if s == nil {
		return ""
	}
	st := &s.stats
	deepest := func() string {
		if s.textDepth >= st.Depth && s.textDepth >= 1000 {
			return fmt.Sprintf("%s:%d: parentheses, brackets and braces nest %d deep here after macro expansion, the deepest in the headers", s.textFile, s.textLine, s.textDepth)
		}
		if st.Deepest != nil && st.Depth >= 1000 {
			return fmt.Sprintf("%s: macro %s expands to parentheses, brackets and braces nested %d deep, the deepest in the headers", macroPos(st.Deepest), st.Deepest.name, st.Depth)
		}
		return ""
	}
	longest := func() string {
		if st.Longest != nil && st.Tokens >= 100_000 {
			return fmt.Sprintf("%s: macro %s expands to %d tokens, which the front end evaluates as one expression (the longest in the headers)", macroPos(st.Longest), st.Longest.name, st.Tokens)
		}
		return ""
	}
	costliest := func() string {
		if st.Costliest != nil && st.CostliestWork >= 10_000_000 {
			return fmt.Sprintf("%s: macro %s takes %s units of expansion work to evaluate, the most in the headers (the MLNX_OFED headers with glibc's need about 100 000 in all)", macroPos(st.Costliest), st.Costliest.name, millions(st.CostliestWork))
		}
		return ""
	}
	unbalanced := func() string {
		if m := st.Unbalanced; m != nil {
			return fmt.Sprintf("%s: object-like macro %s opens more parentheses than it closes, and the front end does not return from some such macros", macroPos(m), m.name)
		}
		return ""
	}
	tooLong := func() string {
		if m := st.GaveUpIn; m != nil {
			if st.GaveUpWhy == errTooLong {
				return fmt.Sprintf("%s: macro %s is too long for the generator's scan of the macros to follow (more than %d tokens in its definition, or %d in its expansion)", macroPos(m), m.name, maxDefinitionTokens, maxScanSteps)
			}
			return fmt.Sprintf("%s: macro %s: %v (arguments nested more than %d deep, or remembered expansions pasted)", macroPos(m), m.name, errGaveUp, maxScanArgDepth)
		}
		return ""
	}
	var order []func() string
	switch kind {
	case failedStack:
		order = []func() string{deepest, longest, tooLong}
	case failedMemory:
		order = []func() string{longest, costliest, tooLong, deepest}
	case failedCPU, failedTime:
		order = []func() string{costliest, tooLong, longest, unbalanced}
	}
	for _, f := range order {
		if s := f(); s != "" {
			return s
		}
	}
	return ""
}

// macroPos is file:line:col of m's name in its #define.
func macroPos(m *ppMacro) string {
	return fmt.Sprintf("%s:%d:%d", m.file, m.line, columnOf(m.file, m.line, m.name))
}

// columnOf finds the column of name after "define" on line of file (1
// when it cannot be read there).
func columnOf(file string, line int, name string) int {
	b, err := os.ReadFile(file)
	if err != nil || line < 1 {
		return 1
	}
	lines := bytes.SplitN(b, []byte("\n"), line+1)
	if line > len(lines) {
		return 1
	}
	l := string(lines[line-1])
	if i := strings.Index(l, "define"); i >= 0 {
		if j := strings.Index(l[i:], name); j >= 0 {
			return i + j + 1
		}
	}
	return 1
}

// ppTable holds the macros of `cc -E -dD` output as they stand at its
// end, in the order of their definitions, and the deepest nesting of
// its text.
type ppTable struct {
	defs      map[string]*ppMacro
	order     []*ppMacro
	textDepth int64
	textFile  string
	textLine  int
}

// readPreprocessed reads the output of `cc -E -dD`: line markers
// (# LINE "FILE" FLAGS) give each line its file and line, every #define
// and #undef stands on one line where the directive began.
func readPreprocessed(out []byte) *ppTable {
	t := &ppTable{defs: map[string]*ppMacro{}}
	lx := newLexer(string(out))
	lx.maxDirective = maxDefinitionTokens
	file, base, markerAt := "", 0, 0 // the line after the marker, at markerAt, is base
	var depth int64
	seq := 0
	var buf []cToken
	for {
		ll, ok := lx.next(buf)
		if !ok {
			break
		}
		buf = ll.toks
		toks := ll.toks
		line := base + ll.line - markerAt - 1
		if !ll.directive {
			for _, tk := range toks {
				if tk.kind != tkPunct {
					continue
				}
				switch tk.text {
				case "(", "[", "{":
					if depth++; depth > t.textDepth {
						t.textDepth, t.textFile, t.textLine = depth, file, line
					}
				case ")", "]", "}":
					depth--
				}
			}
			continue
		}
		if len(toks) >= 3 && toks[1].kind == tkNumber && toks[2].kind == tkString {
			n, _ := strconv.Atoi(toks[1].text)
			if f, err := strconv.Unquote(toks[2].text); err == nil {
				file = f
			}
			base, markerAt = n, ll.line
			continue
		}
		if len(toks) < 3 || toks[1].kind != tkIdent || toks[2].kind != tkIdent {
			continue
		}
		switch toks[1].text {
		case "undef":
			delete(t.defs, toks[2].text)
		case "define":
			m := parseDefinition(toks, file, line, seq)
			m.tooLong = ll.cut
			t.defs[m.name] = m
			seq++
		}
	}
	for _, m := range t.defs {
		t.order = append(t.order, m)
	}
	sort.Slice(t.order, func(i, j int) bool { return t.order[i].seq < t.order[j].seq })
	return t
}

// parseDefinition reads a #define line (toks[0] '#', toks[1] "define").
func parseDefinition(toks []cToken, file string, line, seq int) *ppMacro {
	m := &ppMacro{name: toks[2].text, file: file, line: line, seq: seq}
	rest := toks[3:]
	if len(rest) > 0 && rest[0].is("(") && !rest[0].space {
		m.fn = true
		i := 1
		for ; i < len(rest) && !rest[i].is(")"); i++ {
			switch p := rest[i]; {
			case p.is("..."):
				m.variadic = true
				m.params = append(m.params, "__VA_ARGS__")
			case p.kind == tkIdent:
				if i+1 < len(rest) && rest[i+1].is("...") { // gcc's named variadic: args...
					m.variadic = true
					i++
				}
				m.params = append(m.params, p.text)
			}
		}
		rest = rest[min(i+1, len(rest)):]
	}
	m.body = make([]xTok, 0, len(rest))
	for i, r := range rest {
		// A space where the definition has one, as cc/v4 keeps it,
		// except next to ## and after # (gone in subst, an estimate).
		if i > 0 && r.space && !r.is("##") && !rest[i-1].is("##") && !rest[i-1].is("#") {
			m.body = append(m.body, xTok{kind: tkSpace, text: " "})
		}
		m.body = append(m.body, xTok{text: r.text, kind: r.kind})
	}
	return m
}

// scanStats is what evaluating the object-like macros costs, and the
// macros that stand out.
type scanStats struct {
	Macros        int   // evaluated
	Work          int64 // expansion work, with evalTokenWork per token evaluated
	Expansion     int64 // expansion work alone, as cc/v4 counts it (Config.ExpansionLimit)
	Steps         int64 // tokens the scan itself handled
	Deepest       *ppMacro
	Depth         int64 // its nesting
	Longest       *ppMacro
	Tokens        int64 // its tokens
	Costliest     *ppMacro
	CostliestWork int64
	Unbalanced    *ppMacro // the first that opens more parentheses than it closes
	Over          *ppMacro // where the budget ran out (nil: it did not)
	GaveUp        bool     // the scan could not follow the expansion of every macro
	GaveUpIn      *ppMacro // it gave up in this one's
	GaveUpWhy     error    // errTooLong or errGaveUp
}

// scanTable evaluates t's object-like macros, in the order of their
// definitions, until their work passes budget or one nests more than
// maxNesting deep. memo off is for the test that the memo changes no
// count.
func scanTable(t *ppTable, budget int64, memo bool) scanStats {
	x := &expander{defs: t.defs, memo: memo}
	var st scanStats
	var evalWork int64
	for _, m := range t.order {
		if m.fn || len(m.body) == 0 {
			continue
		}
		st.Macros++
		w0 := x.work
		var r *xRun
		err := errTooLong
		if !m.tooLong {
			r, err = x.evaluate(m, budget-evalWork)
		}
		if err != nil {
			st.GaveUp, st.GaveUpIn, st.GaveUpWhy = true, m, err
			break
		}
		evalWork = sat(evalWork, satMul(r.expr, evalTokenWork))
		if w := sat(x.work-w0, satMul(r.expr, evalTokenWork)); w > st.CostliestWork {
			st.Costliest, st.CostliestWork = m, w
		}
		if r.maxD > st.Depth {
			st.Deepest, st.Depth = m, r.maxD
		}
		if r.expr > st.Tokens {
			st.Longest, st.Tokens = m, r.expr
		}
		if r.depth > 0 && st.Unbalanced == nil {
			st.Unbalanced = m
		}
		if sat(x.work, evalWork) > budget {
			st.Over = m
			break
		}
		if r.maxD > maxNesting {
			break
		}
	}
	st.Work, st.Expansion, st.Steps = sat(x.work, evalWork), x.work, int64(x.steps)
	return st
}
