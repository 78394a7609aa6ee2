package parse

import (
	"fmt"
	"strings"
)

// Why this file exists: modernc.org/cc/v4 parses and type-checks with
// recursion, one Go stack frame (or a dozen: ~10 KB per parenthesis) per
// level of an expression, and a Go stack overflow is a fatal error that
// no recover catches. It also evaluates every object-like macro
// (Config.EvalAllMacros), and when its Config.ExpansionLimit runs out
// there it silently leaves the remaining macros without a value: a
// package missing constants, exit 0. So before cc/v4 sees a header of the
// -I directories, the generator expands its macros and its text itself
// (a small expander, no conditionals, no includes) and refuses, with a
// position, what would nest too deep, form too long an expression, or
// cost too much expansion work. The work is counted as cc/v4 counts it
// (tokens processed, hide-set entries copied, and its copying of pending
// tokens while evaluating macros), so that the budget checked here keeps
// cc/v4's own limit, expansionLimit, out of reach.

// Limits on a header's shape, after macro expansion. Each is far above
// what real headers use (TestLimitsLeaveRoomForRealHeaders; figures in
// docs/errors.md) and far below what makes cc/v4 overflow its stack.
const (
	// maxNesting bounds ( [ { nesting. C requires compilers to accept 63
	// levels of parenthesised expressions; the MLNX_OFED headers nest 7
	// deep at most.
	maxNesting = 256
	// maxRun bounds the tokens of one expression or declarator: between
	// ';', '{', '}' and the commas of an initializer or an enum.
	maxRun = 1 << 15
	// maxMacroTokens bounds what one object-like macro expands to: cc/v4
	// evaluates each as one expression.
	maxMacroTokens = 1 << 16
	// maxExpansionWork bounds the expansion work, as cc/v4 counts it, of
	// the macros and of the text of the headers in the -I directories,
	// each; expansionLimit (cc/v4's own bound) is well above both plus
	// what the system headers need.
	maxExpansionWork = 1 << 20
)

// macroDef is one #define.
type macroDef struct {
	name     string
	fn       bool
	params   []string
	variadic int // index of the variadic parameter, -1 for none
	body     []cToken
	file     string
	line     int
	col      int
	user     bool            // in a header of the -I directories: checked
	work     int             // expansion work of its last check
	uses     map[string]bool // names its expansion looked up (recorded in macroTable.usedBy)
}

func (d *macroDef) param(s string) int {
	for i, p := range d.params {
		if p == s {
			return i
		}
	}
	if d.variadic >= 0 && s == "__VA_ARGS__" {
		return d.variadic
	}
	return -1
}

// parseDefine reads a #define line (toks[0] is '#', toks[1] "define").
func parseDefine(file string, toks []cToken) (*macroDef, bool) {
	if len(toks) < 3 || toks[2].kind != tkIdent {
		return nil, false
	}
	n := toks[2]
	d := &macroDef{name: n.text, file: file, line: n.line, col: n.col, variadic: -1}
	rest := toks[3:]
	if len(rest) > 0 && rest[0].is("(") && !rest[0].space {
		d.fn = true
		i := 1
		for ; i < len(rest) && !rest[i].is(")"); i++ {
			switch t := rest[i]; {
			case t.is(","):
			case t.is("..."):
				d.variadic = len(d.params)
				d.params = append(d.params, "__VA_ARGS__")
			case t.kind == tkIdent:
				if i+1 < len(rest) && rest[i+1].is("...") { // gcc's named variadic: args...
					d.variadic = len(d.params)
					i++
				}
				d.params = append(d.params, t.text)
			default:
				return nil, false
			}
		}
		if i >= len(rest) {
			return nil, false
		}
		rest = rest[i+1:]
	}
	d.body = rest
	return d, true
}

// macroTable holds the definitions seen so far in one translation, in
// reading order, and which checked macros used which names (to check them
// again when a name they used is defined later).
type macroTable struct {
	defs     map[string]*macroDef
	usedBy   map[string][]*macroDef // in the order they were checked
	evalWork int                    // sum of work over the checked macros
	textWork int                    // expansion work of the checked headers' text
	stats    *inputStats
}

// inputStats are the maxima one translation reached, for the tests that
// compare the limits with what real headers need.
type inputStats struct {
	Files, Bytes, Lines int
	Nesting, Run        int // after expansion, in text, #if lines and macros
	MacroTokens         int // largest object-like macro expansion
	MacroWork, TextWork int // expansion work, as counted against maxExpansionWork
}

func newMacroTable() *macroTable {
	return &macroTable{defs: map[string]*macroDef{}, usedBy: map[string][]*macroDef{}, stats: &inputStats{}}
}

// hideSet is a persistent list of macro names being expanded.
type hideSet struct {
	name string
	next *hideSet
	n    int
}

func (h *hideSet) has(s string) bool {
	for ; h != nil; h = h.next {
		if h.name == s {
			return true
		}
	}
	return false
}

func (h *hideSet) add(s string) *hideSet {
	n := 1
	if h != nil {
		n = h.n + 1
	}
	return &hideSet{name: s, next: h, n: n}
}

func (h *hideSet) size() int {
	if h == nil {
		return 0
	}
	return h.n
}

// frame is a token sequence being rescanned.
type frame struct {
	toks []cToken
	i    int
	hide *hideSet
}

// expandStop says which limit an expansion exceeded, where.
type expandStop struct{ msg string }

// expander expands a token sequence with the table's definitions as they
// stand, streaming the result to emit with the source token it came from.
type expander struct {
	tab    *macroTable
	work   int
	budget int
	eval   bool            // evaluating a macro: cc/v4 copies the pending tokens at each expansion
	used   map[string]bool // names looked up, noted once each (nil: not recorded)
	note   func(name string)
	emit   func(t, origin cToken) *expandStop
}

// run expands toks; it returns the first limit exceeded, or nil.
func (e *expander) run(toks []cToken) *expandStop {
	frames := []frame{{toks: toks}}
	var origin cToken
	pending := func() int {
		n := 0
		for _, f := range frames {
			n += len(f.toks) - f.i
		}
		return n
	}
	// peek returns the k-th pending token (0 = next).
	peek := func(k int) (cToken, bool) {
		for j := len(frames) - 1; j >= 0; j-- {
			f := &frames[j]
			if r := len(f.toks) - f.i; k < r {
				return f.toks[f.i+k], true
			} else {
				k -= r
			}
		}
		return cToken{}, false
	}
	pop := func() (cToken, *hideSet, bool) {
		for len(frames) > 0 {
			f := &frames[len(frames)-1]
			if f.i < len(f.toks) {
				t := f.toks[f.i]
				f.i++
				return t, f.hide, true
			}
			frames = frames[:len(frames)-1]
		}
		return cToken{}, nil, false
	}
	for {
		t, hide, ok := pop()
		if !ok {
			return nil
		}
		if len(frames) == 1 {
			origin = t // a token of the input itself: where what follows comes from
		}
		if len(frames) > 1 || e.eval {
			e.work++ // the input's own tokens count only when evaluated (bounded by the input size otherwise)
		}
		if e.work > e.budget {
			return e.over(origin)
		}
		if t.kind != tkIdent || hide.has(t.text) {
			if s := e.emit(t, origin); s != nil {
				return s
			}
			continue
		}
		if e.used != nil && !e.used[t.text] {
			e.used[t.text] = true
			e.note(t.text)
		}
		d := e.tab.defs[t.text]
		if d == nil || t.text == "defined" {
			if s := e.emit(t, origin); s != nil {
				return s
			}
			continue
		}
		var args [][]cToken
		rparenHide := hide
		if d.fn {
			n, ok := peek(0)
			if !ok || !n.is("(") {
				if s := e.emit(t, origin); s != nil {
					return s
				}
				continue
			}
			// Collect the arguments up to the matching ')'.
			k, level := 1, 0
			var arg []cToken
			complete := false
			for {
				a, ok := peek(k)
				if !ok {
					break
				}
				k++
				e.work++
				if a.is("(") {
					level++
				} else if a.is(")") {
					if level == 0 {
						args = append(args, arg)
						complete = true
						break
					}
					level--
				} else if a.is(",") && level == 0 {
					args = append(args, arg)
					arg = nil
					continue
				}
				arg = append(arg, a)
			}
			if !complete {
				if s := e.emit(t, origin); s != nil {
					return s
				}
				continue
			}
			for ; k > 0; k-- {
				_, h, _ := pop()
				rparenHide = h
			}
		}
		if e.eval {
			e.work += pending()
		}
		e.work += hide.size() + rparenHide.size()
		body, s := e.subst(d, args, hide.add(d.name), origin)
		if s != nil {
			return s
		}
		if e.work > e.budget {
			return e.over(origin)
		}
		frames = append(frames, frame{toks: body, hide: hide.add(d.name)})
	}
}

func (e *expander) over(origin cToken) *expandStop {
	return &expandStop{fmt.Sprintf("%d:%d: expanding the macros of the headers up to here takes more than %d tokens of work as the C front end counts it (the real headers: ~40 000); the generator stops there so that exponential or runaway macros cannot exhaust time and memory: simplify the macros", origin.line, origin.col, maxExpansionWork)}
}

// subst replaces the parameters of d's body by the arguments (expanded,
// except next to # and ##), as the C preprocessor does, and counts the
// work: the body, and the hide set given to each token.
func (e *expander) subst(d *macroDef, args [][]cToken, hide *hideSet, origin cToken) ([]cToken, *expandStop) {
	if !d.fn {
		e.work += len(d.body) * (2 + hide.size())
		return d.body, nil
	}
	var expanded map[int][]cToken
	arg := func(i int) []cToken {
		if d.variadic >= 0 && i == d.variadic {
			var r []cToken
			for j := i; j < len(args); j++ {
				if j > i {
					r = append(r, cToken{kind: tkPunct, text: ","})
				}
				r = append(r, args[j]...)
			}
			return r
		}
		if i < len(args) {
			return args[i]
		}
		return nil
	}
	var out []cToken
	b := d.body
	for i := 0; i < len(b); i++ {
		t := b[i]
		switch {
		case (t.is("#") || t.is("%:")) && i+1 < len(b) && d.param(b[i+1].text) >= 0:
			out = append(out, cToken{kind: tkString, text: `"…"`, line: t.line, col: t.col})
			i++
			continue
		case t.kind == tkIdent && d.param(t.text) >= 0:
			p := d.param(t.text)
			paste := i+1 < len(b) && b[i+1].is("##") || i > 0 && b[i-1].is("##")
			if paste {
				out = append(out, arg(p)...)
				continue
			}
			if expanded == nil {
				expanded = map[int][]cToken{}
			}
			x, ok := expanded[p]
			if !ok {
				sub := &expander{tab: e.tab, budget: e.budget, work: e.work, used: e.used, note: e.note}
				sub.emit = func(t, _ cToken) *expandStop {
					x = append(x, t)
					if len(x) > maxMacroTokens {
						return &expandStop{fmt.Sprintf("%d:%d: an argument of macro %s expands to more than %d tokens; the generator refuses larger expansions: simplify the macros", origin.line, origin.col, d.name, maxMacroTokens)}
					}
					return nil
				}
				if s := sub.run(arg(p)); s != nil {
					return nil, s
				}
				e.work = sub.work
				expanded[p] = x
			}
			e.work += len(x)
			out = append(out, x...)
			continue
		case t.is("##") && len(out) > 0 && i+1 < len(b):
			// Paste the last token with the next one (after substitution).
			next := []cToken{b[i+1]}
			if p := d.param(b[i+1].text); p >= 0 {
				next = arg(p)
			}
			i++
			if len(next) == 0 {
				continue
			}
			l := out[len(out)-1]
			pasted := l
			pasted.text = l.text + next[0].text
			if l.kind != tkIdent {
				pasted.kind = next[0].kind
			}
			out[len(out)-1] = pasted
			out = append(out, next[1:]...)
			continue
		}
		out = append(out, t)
	}
	e.work += len(out) * (2 + hide.size())
	return out, nil
}

// shape follows the nesting and expression length of a token stream.
type shape struct {
	stack  []byte // open brackets
	run    int    // tokens since the last separator
	tokens int
	stats  *inputStats // where the maxima are recorded (nil: not)
}

// add takes the next token; it returns what limit it exceeds, if any.
func (s *shape) add(t cToken) string {
	s.tokens++
	s.run++
	if t.kind == tkPunct {
		switch t.text {
		case "(", "[", "{", "<:", "<%":
			s.stack = append(s.stack, t.text[0])
			if t.text == "{" || t.text == "<%" {
				s.run = 0
			}
			if len(s.stack) > maxNesting {
				return fmt.Sprintf("parentheses, brackets and braces nest more than %d deep here (after macro expansion); the generator refuses deeper nesting, which the C front end it uses cannot parse safely (it recurses once per level)", maxNesting)
			}
		case ")", "]", "}", ":>", "%>":
			if len(s.stack) > 0 {
				s.stack = s.stack[:len(s.stack)-1]
			}
			if t.text == "}" || t.text == "%>" {
				s.run = 0
			}
		case ";":
			s.run = 0
		case ",":
			if len(s.stack) == 0 || s.stack[len(s.stack)-1] == '{' || s.stack[len(s.stack)-1] == '<' {
				s.run = 0
			}
		}
	}
	if st := s.stats; st != nil {
		st.Nesting = max(st.Nesting, len(s.stack))
		st.Run = max(st.Run, s.run)
	}
	if s.run > maxRun {
		return fmt.Sprintf("an expression or declaration longer than %d tokens (after macro expansion); the generator refuses longer ones, which the C front end it uses cannot check safely (it recurses once per operator)", maxRun)
	}
	return ""
}

// checkMacro expands an object-like macro as cc/v4 evaluates it and
// refuses it when it exceeds a limit.
func (tab *macroTable) checkMacro(d *macroDef) error {
	tab.evalWork -= d.work
	d.work = 0
	sh := shape{stats: tab.stats}
	var used []string
	e := &expander{tab: tab, budget: maxExpansionWork - tab.evalWork, eval: true, used: map[string]bool{}}
	e.note = func(n string) { used = append(used, n) }
	e.emit = func(t, origin cToken) *expandStop {
		if what := sh.add(t); what != "" {
			return &expandStop{fmt.Sprintf("%d:%d: macro %s: %s", d.line, d.col, d.name, what)}
		}
		if sh.tokens > maxMacroTokens {
			return &expandStop{fmt.Sprintf("%d:%d: macro %s expands to more than %d tokens; the generator evaluates every macro as one C expression and refuses larger ones: simplify it", d.line, d.col, d.name, maxMacroTokens)}
		}
		return nil
	}
	if s := e.run([]cToken{{kind: tkIdent, text: d.name, line: d.line, col: d.col}}); s != nil {
		msg := s.msg
		if strings.Contains(msg, "tokens of work") {
			msg = fmt.Sprintf("%d:%d: macro %s: expanding the macros up to it takes more than %d tokens of work as the C front end counts it (the real headers: ~100); the generator stops there so that exponential or runaway macros cannot exhaust time and memory: simplify the macros", d.line, d.col, d.name, maxExpansionWork)
		}
		return fmt.Errorf("%s:%s", d.file, msg)
	}
	d.work = e.work
	tab.evalWork += d.work
	if st := tab.stats; st != nil {
		st.MacroTokens = max(st.MacroTokens, sh.tokens)
		st.MacroWork = max(st.MacroWork, tab.evalWork)
	}
	for _, n := range used {
		if n != d.name && !d.uses[n] {
			if d.uses == nil {
				d.uses = map[string]bool{}
			}
			d.uses[n] = true
			tab.usedBy[n] = append(tab.usedBy[n], d)
		}
	}
	return nil
}

// define records d and checks again the checked macros that used its
// name (their expansion may have grown).
func (tab *macroTable) define(d *macroDef) error {
	if old := tab.defs[d.name]; old != nil {
		tab.evalWork -= old.work
		old.work = 0
	}
	tab.defs[d.name] = d
	if d.user && !d.fn {
		if err := tab.checkMacro(d); err != nil {
			return err
		}
	}
	return tab.recheck(d.name, map[string]bool{})
}

func (tab *macroTable) undef(name string) {
	if old := tab.defs[name]; old != nil {
		tab.evalWork -= old.work
		old.work = 0
	}
	delete(tab.defs, name)
}

// recheck checks the macros that used name, and those that used them.
func (tab *macroTable) recheck(name string, seen map[string]bool) error {
	if seen[name] {
		return nil
	}
	seen[name] = true
	for _, d := range tab.usedBy[name] {
		if tab.defs[d.name] != d || d.fn {
			continue
		}
		if err := tab.checkMacro(d); err != nil {
			return err
		}
		if err := tab.recheck(d.name, seen); err != nil {
			return err
		}
	}
	return nil
}
