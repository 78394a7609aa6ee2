package parse

import (
	"errors"
	"math"
)

// How cc/v4 expands macros (cpp.go: expand, subst, hsAdd), followed token
// by token but with its work only counted: the expansion work of
// Config.ExpansionLimit (tokens shifted, hide-set entries copied, and,
// while evaluating a macro, the pending tokens copied at each
// expansion). An object-like macro expanded once is remembered
// (expansionMemo) wherever its expansion did not depend on what stands
// around it, so that macros doubling at each level, or a chain of
// 75 000, cost the scan time in proportion to their definitions, not to
// their expansion. Hide sets are the macros whose expansions are on the
// stack, as in gcc; Prosser's intersection for function-like macros is
// taken as that. TestExpansionWorkAsFrontEndCounts compares the counts
// with cc/v4's own: within 1 %.

// ppMacro is one macro as it stands at the end of the headers.
type ppMacro struct {
	name     string
	fn       bool
	params   []string
	variadic bool // the last parameter takes the rest (… or name…)
	body     []xTok
	file     string
	line     int
	seq      int // definition order

	active bool // its expansion is on the stack (its name is in the hide set)
	frame  int  // the index of that frame
	memo   *expansionMemo
	// tooLong: its definition is longer than the scan reads
	// (maxDefinitionTokens); expanding it, the scan gives up.
	tooLong bool
}

func (m *ppMacro) param(s string) int {
	for i, p := range m.params {
		if p == s {
			return i
		}
	}
	return -1
}

// xTok is a token of an expansion: a token, or (memo set) the whole
// expansion of an object-like macro, remembered.
type xTok struct {
	text     string
	kind     tokKind
	noExpand bool // suppressed once by the hide set: never expanded again
	memo     *expansionMemo
}

func (t xTok) is(s string) bool { return t.kind == tkPunct && t.text == s && t.memo == nil }

// tkSpace is the space cc/v4 keeps between the tokens of a replacement
// list (and before an evaluated list's first): one token of work, no
// token of the expression.
const tkSpace tokKind = 0xff

// weight is the number of tokens t stands for, spaces included.
func (t xTok) weight() int64 {
	if t.memo != nil {
		return t.memo.tokens
	}
	return 1
}

// expansionMemo is what an object-like macro expands to wherever it is
// used (its expansion never looked at, or was suppressed by, anything
// around it): its work, as A + B·h + E·p where h is the hide set's size
// and p the tokens pending where it is used, its tokens (kept when
// few), and how its output nests.
type expansionMemo struct {
	a, b, e       int64
	tokens        int64  // tokens, spaces included
	expr          int64  // tokens, spaces not included
	toks          []xTok // the output when there are at most memoTokens, else nil
	net, max, min int64  // nesting: change, highest and lowest relative to its start
	opaque        bool   // balanced, no comma outside parentheses, not starting with '(': safe to hold as one token
}

const memoTokens = 256

// xRun is one expansion: a macro's replacement list as cc/v4 evaluates
// it, or an argument expanded before substitution.
type xRun struct {
	floor   int  // its first frame
	collect bool // keep the output (an argument), else count it
	out     []xTok
	outBase int   // the index of out[0] among the tokens emitted (a counted run keeps only the tail)
	emitted int   // tokens and remembered expansions emitted
	tokens  int64 // output tokens, spaces included
	expr    int64 // output tokens, spaces not included
	depth   int64 // nesting of the output so far
	maxD    int64
	pending int64 // tokens left in its frames
	ec      int64 // expansions that added this run's pending tokens to the work
}

// xFrame is a token sequence being rescanned.
type xFrame struct {
	toks []xTok
	i    int
	m    *ppMacro // nil: a run's own tokens
	run  *xRun

	// For m's memo: the counters when it was pushed, and what its span saw.
	work0, hc0, ec0, h, p, out0, expr0, depth0 int64
	el0                                        int // run.emitted when pushed
	maxD, minD, commaD                         int64
	firstParen                                 bool
	taint                                      int // frames above this index depended on their context
}

// expander expands as cc/v4 does (cpp.go: expand, subst, hsAdd) and
// counts its work in the same units, Config.ExpansionLimit's.
type expander struct {
	defs   map[string]*ppMacro
	frames []xFrame
	h      int64 // macro frames on the stack: the hide set's size
	work   int64
	hc     int64 // sum of the factors of h in the work so far
	steps  int   // tokens the scan itself handled
	args   int   // nesting of argument expansions (Go recursion)
	memo   bool  // remember object-like expansions
	// abandon: the frames being popped were not expanded to their end.
	abandon bool
}

var (
	// errGaveUp: the expansion goes where the scan does not follow it (a
	// remembered expansion pasted, or split by an argument list;
	// arguments nested past maxScanArgDepth).
	errGaveUp = errors.New("the scan cannot follow this expansion")
	// errTooLong: the scan handled maxScanSteps tokens.
	errTooLong = errors.New("the scan handled its maximum of tokens")
)

const (
	// maxScanSteps bounds the tokens the scan handles (shifted, and
	// substituted into function-like macros), and so its time (~0.2 s):
	// function-like macros are not remembered, and their expansion can
	// double at each level. The MLNX_OFED headers with glibc's take
	// ~3 000, the headers of /usr/include, one by one, at most 400 000.
	maxScanSteps = 1 << 21
	// maxScanArgDepth bounds arguments expanded within arguments (the
	// scan recurses there, as cc/v4 does).
	maxScanArgDepth = 1 << 10
)

// sat adds with saturation: work counts can overflow where macros double.
func sat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func satMul(a, b int64) int64 {
	if a != 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}

func (x *expander) top() *xFrame { return &x.frames[len(x.frames)-1] }

func (x *expander) push(toks []xTok, m *ppMacro, r *xRun) {
	f := xFrame{toks: toks, m: m, run: r, work0: x.work, hc0: x.hc, ec0: r.ec, h: x.h, p: r.pending,
		out0: r.tokens, expr0: r.expr, el0: r.emitted, depth0: r.depth, maxD: r.depth, minD: r.depth, commaD: math.MaxInt64, taint: math.MaxInt}
	for _, t := range toks {
		r.pending += t.weight()
	}
	if m != nil {
		m.active, m.frame = true, len(x.frames)
		x.h++
	}
	x.frames = append(x.frames, f)
}

// pop removes the top frame, exhausted, and remembers its macro's
// expansion when it did not depend on its context (and the expansion
// was not abandoned).
func (x *expander) pop() {
	i := len(x.frames) - 1
	f := &x.frames[i]
	r := f.run
	if m := f.m; m != nil {
		m.active = false
		x.h--
		if x.memo && !x.abandon && !m.fn && m.memo == nil && f.taint >= i {
			b, e := x.hc-f.hc0, r.ec-f.ec0
			mm := &expansionMemo{a: x.work - f.work0 - satMul(b, f.h) - satMul(e, f.p), b: b, e: e,
				tokens: r.tokens - f.out0, expr: r.expr - f.expr0, net: r.depth - f.depth0, max: f.maxD - f.depth0, min: f.minD - f.depth0}
			mm.a = max(mm.a, 0)
			mm.opaque = mm.net == 0 && mm.min >= 0 && f.commaD > f.depth0 && !f.firstParen
			if n := r.emitted - f.el0; n <= memoTokens && f.el0 >= r.outBase {
				mm.toks = append(make([]xTok, 0, n), r.out[f.el0-r.outBase:]...)
			}
			m.memo = mm
		}
	}
	if i > 0 {
		p := &x.frames[i-1]
		p.taint = min(p.taint, f.taint)
		if p.run == r {
			p.maxD, p.minD, p.commaD = max(p.maxD, f.maxD), min(p.minD, f.minD), min(p.commaD, f.commaD)
			if p.expr0 == f.expr0 {
				p.firstParen = f.firstParen
			}
		}
	}
	x.frames = x.frames[:i]
}

// emit appends t to the run's output.
func (x *expander) emit(r *xRun, t xTok) {
	f := x.top()
	if r.expr == f.expr0 && t.kind != tkSpace && (t.memo == nil || t.memo.expr > 0) {
		f.firstParen = t.is("(") || t.memo != nil && !t.memo.opaque
	}
	if m := t.memo; m != nil {
		r.expr += m.expr
		f.maxD, f.minD = max(f.maxD, r.depth+m.max), min(f.minD, r.depth+m.min)
		r.maxD = max(r.maxD, r.depth+m.max)
		if !m.opaque {
			f.commaD = min(f.commaD, r.depth+m.min)
		}
		r.depth += m.net
	} else if t.kind != tkSpace {
		r.expr++
	}
	if t.memo == nil && t.kind == tkPunct {
		switch t.text {
		case "(", "[", "{":
			r.depth++
			f.maxD = max(f.maxD, r.depth)
		case ")", "]", "}":
			r.depth--
			f.minD = min(f.minD, r.depth)
		case ",":
			f.commaD = min(f.commaD, r.depth)
		}
	}
	r.maxD = max(r.maxD, r.depth)
	r.tokens += t.weight()
	if r.collect {
		r.out = append(r.out, t)
	} else {
		// Only the tail is kept: a memo keeps at most memoTokens of it.
		if len(r.out) >= 4*memoTokens {
			r.outBase += len(r.out) - memoTokens
			r.out = append(r.out[:0], r.out[len(r.out)-memoTokens:]...)
		}
		r.out = append(r.out, t)
	}
	r.emitted++
}

// next shifts the next token of the run, popping exhausted frames; ok is
// false at its end.
func (x *expander) next(r *xRun) (xTok, bool) {
	for {
		f := x.top()
		if f.i < len(f.toks) {
			t := f.toks[f.i]
			f.i++
			r.pending -= t.weight()
			return t, true
		}
		if len(x.frames)-1 == r.floor {
			return xTok{}, false
		}
		x.pop()
	}
}

// peek returns the next token of the run without shifting it. A look
// past the top frame's end makes the frames it passed depend on their
// context.
func (x *expander) peek(r *xRun) (xTok, bool) {
	for i := len(x.frames) - 1; i >= r.floor; i-- {
		f := &x.frames[i]
		for j := f.i; j < len(f.toks); j++ {
			if f.toks[j].kind == tkSpace {
				continue
			}
			if i < len(x.frames)-1 {
				x.top().taint = min(x.top().taint, i)
			}
			return f.toks[j], true
		}
	}
	x.top().taint = min(x.top().taint, r.floor-1)
	return xTok{}, false
}

// run expands r's frames until they are exhausted.
func (x *expander) run(r *xRun, budget int64) error {
	for {
		t, ok := x.next(r)
		if !ok {
			x.work++ // shifting the end
			return nil
		}
		x.steps++
		x.work = sat(x.work, t.weight())
		if x.steps > maxScanSteps {
			return errTooLong
		}
		if x.work > budget {
			return nil
		}
		m := x.defs[t.text]
		if t.kind != tkIdent || t.noExpand || t.memo != nil || m == nil {
			x.emit(r, t)
			continue
		}
		if m.tooLong {
			return errTooLong
		}
		if m.active {
			// In the hide set: suppressed, here and in every rescan.
			// Frames above its own depended on this context; its own
			// too, unless the name comes from its own list (a direct
			// self-reference): else its expansion went through another
			// macro, X, whose expansion led back to it, and where it is
			// used inside X's, X would be suppressed instead.
			low := m.frame
			if len(x.frames)-1 > m.frame {
				low--
			}
			x.top().taint = min(x.top().taint, low)
			t.noExpand = true
			x.emit(r, t)
			continue
		}
		if !m.fn {
			if mm := m.memo; mm != nil {
				x.work = sat(x.work, sat(mm.a, sat(satMul(mm.b, x.h), satMul(mm.e, r.pending))))
				x.hc = sat(x.hc, mm.b)
				r.ec = sat(r.ec, mm.e)
				if mm.toks != nil {
					for _, u := range mm.toks {
						x.emit(r, u)
					}
					x.steps += len(mm.toks)
				} else if mm.tokens > 0 {
					x.emit(r, xTok{memo: mm})
				}
				continue
			}
			// expand: len(HS) + prependWork; subst: len(IS); hsAdd: 1 + 0 + len(HS ∪ {T}) per token.
			// (After the push, which notes the counters for m's memo:
			// it includes this.)
			b, h, p := int64(len(m.body)), x.h, r.pending
			x.push(m.body, m, r)
			x.work = sat(x.work, sat(h+p+3*b, satMul(h, b)))
			x.hc = sat(x.hc, 1+b)
			r.ec++
			continue
		}
		if n, ok := x.peek(r); !ok || !n.is("(") {
			if ok && n.memo != nil && !n.memo.opaque {
				return errGaveUp
			}
			x.emit(r, t)
			continue
		}
		args, ok, err := x.collect(r)
		if err != nil {
			return err
		}
		if !ok {
			// Unterminated: cc/v4 reports it and the macro has no value.
			x.emit(r, t)
			return nil
		}
		if err := x.invoke(r, m, args, budget); err != nil {
			return err
		}
	}
}

// collect shifts a macro invocation's arguments, through the ')'. Frames
// it runs out of depended on their context.
func (x *expander) collect(r *xRun) ([][]xTok, bool, error) {
	for { // the blanks and the '(' peek found: skipped, no work
		if t, _ := x.next(r); t.is("(") {
			break
		}
	}
	var args [][]xTok
	var arg []xTok
	level := 0
	for {
		f := x.top()
		if f.i >= len(f.toks) && len(x.frames)-1 > r.floor {
			// Running past the end of a frame into the one below.
			f.taint = min(f.taint, len(x.frames)-2)
			x.pop()
			continue
		}
		t, ok := x.next(r)
		if !ok {
			return nil, false, nil
		}
		if x.steps++; x.steps > maxScanSteps {
			return nil, false, errTooLong
		}
		x.work = sat(x.work, t.weight())
		if t.memo != nil && !t.memo.opaque {
			return nil, false, errGaveUp
		}
		switch {
		case t.is("("):
			level++
		case t.is(")"):
			if level == 0 {
				args = append(args, arg)
				for i := range args {
					args[i] = trimSpaces(args[i])
				}
				if len(args) == 1 && len(args[0]) == 0 {
					args = nil
				}
				return args, true, nil
			}
			level--
		case t.is(",") && level == 0:
			args = append(args, arg)
			arg = nil
			continue
		}
		arg = append(arg, t)
	}
}

func trimSpaces(s []xTok) []xTok {
	for len(s) > 0 && s[0].kind == tkSpace {
		s = s[1:]
	}
	for len(s) > 0 && s[len(s)-1].kind == tkSpace {
		s = s[:len(s)-1]
	}
	return s
}

func seqWeight(s []xTok) int64 {
	var n int64
	for _, t := range s {
		n += t.weight()
	}
	return n
}

// invoke substitutes args into m's replacement list (subst) and pushes
// the result for rescanning.
func (x *expander) invoke(r *xRun, m *ppMacro, args [][]xTok, budget int64) error {
	// len(HS) + len(rparen.hs) + prependWork.
	x.work = sat(x.work, 2*x.h+r.pending)
	x.hc += 2
	r.ec++
	x.work = sat(x.work, int64(len(m.body)))
	arg := func(i int) []xTok {
		if m.variadic && i == len(m.params)-1 {
			var v []xTok
			for j := i; j < len(args); j++ {
				if j > i {
					v = append(v, xTok{kind: tkPunct, text: ","})
				}
				v = append(v, args[j]...)
			}
			return v
		}
		if i < len(args) {
			return args[i]
		}
		return nil
	}
	expanded := make([][]xTok, len(m.params)) // each parameter's argument, expanded once
	done := make([]bool, len(m.params))
	n := len(m.body)
	for _, a := range args {
		n += len(a)
	}
	out := make([]xTok, 0, n)
	var fromArgs int64
	b := m.body
	for i := 0; i < len(b); i++ {
		t := b[i]
		pasteNext := i+1 < len(b) && b[i+1].is("##")
		pastePrev := i > 0 && b[i-1].is("##")
		switch p := m.param(t.text); {
		case t.is("#") && i+1 < len(b) && m.param(b[i+1].text) >= 0:
			a := arg(m.param(b[i+1].text))
			x.work = sat(x.work, seqWeight(a))
			out = append(out, xTok{kind: tkString, text: `"…"`})
			i++
		case t.is("##") && i+1 < len(b):
			next := []xTok{b[i+1]}
			if q := m.param(b[i+1].text); q >= 0 {
				next = arg(q)
			}
			i++
			if len(next) == 0 || len(out) == 0 {
				out = append(out, next...)
				continue
			}
			x.work = sat(x.work, int64(len(out)+len(next)))
			l := out[len(out)-1]
			if l.memo != nil || next[0].memo != nil {
				return errGaveUp
			}
			pasted := xTok{text: l.text + next[0].text, kind: l.kind}
			if l.kind != tkIdent {
				pasted.kind = next[0].kind
			}
			out = append(append(out[:len(out)-1], pasted), next[1:]...)
		case t.kind == tkIdent && p >= 0 && (pasteNext || pastePrev):
			a := arg(p)
			fromArgs += seqWeight(a)
			out = append(out, a...)
		case t.kind == tkIdent && p >= 0:
			e := expanded[p]
			if done[p] {
				x.work = sat(x.work, seqWeight(e))
			} else {
				var err error
				if e, err = x.expandArg(arg(p), budget); err != nil {
					return err
				}
				expanded[p], done[p] = e, true
			}
			fromArgs += seqWeight(e)
			out = append(out, e...)
		default:
			out = append(out, t)
		}
		if x.work > budget {
			return nil
		}
	}
	// hsAdd: 1 + len(v.hs) + len(HS') per token; an argument's tokens
	// carry the hide set of where they stood (~h).
	if x.steps += len(out); x.steps > maxScanSteps {
		return errTooLong
	}
	w := seqWeight(out)
	x.work = sat(x.work, sat(2*w, satMul(x.h, sat(w, fromArgs))))
	x.hc = sat(x.hc, sat(w, fromArgs))
	x.push(out, m, r)
	return nil
}

// expandArg expands an argument before substitution, as its own run.
func (x *expander) expandArg(a []xTok, budget int64) ([]xTok, error) {
	if x.args++; x.args > maxScanArgDepth {
		return nil, errGaveUp
	}
	defer func() { x.args-- }()
	r := &xRun{floor: len(x.frames), collect: true}
	x.push(a, nil, r)
	err := x.run(r, budget)
	x.unwind(r)
	return r.out, err
}

// unwind pops r's frames: those above its first were left unfinished.
func (x *expander) unwind(r *xRun) {
	abandon := x.abandon
	x.abandon = len(x.frames) > r.floor+1
	for len(x.frames) > r.floor {
		x.pop()
	}
	x.abandon = abandon
}

// evaluate expands m's replacement list as cc/v4's evalAllMacros does
// (its hide set empty) and returns the run (its output counted).
func (x *expander) evaluate(m *ppMacro, budget int64) (*xRun, error) {
	r := &xRun{floor: len(x.frames)}
	x.push(append([]xTok{{kind: tkSpace}}, m.body...), nil, r)
	err := x.run(r, budget)
	x.unwind(r)
	return r, err
}
