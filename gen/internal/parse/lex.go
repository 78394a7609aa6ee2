package parse

// A small C lexer for the #include walk the generator makes before the
// compiler and modernc.org/cc/v4 read the headers (includes.go). It splits
// a file into logical lines (backslash-newlines spliced, comments
// removed) of preprocessing tokens with their physical positions. It is
// not a preprocessor: it never expands, includes or evaluates anything.

// tokKind classifies a preprocessing token.
type tokKind uint8

const (
	tkIdent tokKind = iota + 1
	tkNumber
	tkString // string or character literal, or an <header-name> as one token
	tkPunct
)

// cToken is one preprocessing token; text is a substring of the file.
type cToken struct {
	kind      tokKind
	text      string
	line, col int  // physical position, 1-based (col in bytes)
	space     bool // preceded by white space (or a comment) on its line
}

func (t cToken) is(s string) bool { return t.kind == tkPunct && t.text == s }

// logicalLine is one line after splicing: a directive (# first) or text.
type logicalLine struct {
	toks      []cToken
	directive bool
	line      int // physical line where it starts
	// more: the line goes on (a text line is returned in pieces of at
	// most maxLineTokens tokens); cut: a directive longer than that, whose
	// remaining tokens were skipped.
	more, cut bool
}

// maxLineTokens bounds the tokens the lexer holds for one line: a
// directive longer than that is cut (an #include or #define of a header
// name is far shorter), a text line is returned in pieces.
const maxLineTokens = 1 << 15

// lexer walks the logical lines of src.
type lexer struct {
	src        string
	i          int
	line, col  int
	angleAfter bool // lex <...> as one token (after #include)
	inLine     bool // the previous piece of a text line was returned
	// maxDirective, when set, is where directives are cut instead of
	// maxLineTokens (the expansion scan reads longer #defines).
	maxDirective int
}

func newLexer(src string) *lexer { return &lexer{src: src, line: 1, col: 1} }

// at returns the byte at raw index j after skipping backslash-newlines,
// and the raw index where it stands; 0 (and len(src)) at the end.
func (l *lexer) at(j int) (byte, int) {
	for j < len(l.src) {
		c := l.src[j]
		if c == '\\' {
			if j+1 < len(l.src) && l.src[j+1] == '\n' {
				j += 2
				continue
			}
			if j+2 < len(l.src) && l.src[j+1] == '\r' && l.src[j+2] == '\n' {
				j += 3
				continue
			}
		}
		return c, j
	}
	return 0, j
}

// advanceTo moves up to raw index j (found by at), keeping the
// physical line and column.
func (l *lexer) advanceTo(j int) {
	for l.i < j {
		if l.src[l.i] == '\n' {
			l.line++
			l.col = 1
		} else {
			l.col++
		}
		l.i++
	}
}

// cur returns the current byte after splices (0 at the end) and moves the
// lexer onto it.
func (l *lexer) cur() byte {
	c, j := l.at(l.i)
	l.advanceTo(j)
	return c
}

func (l *lexer) bump() { // past the current (spliced) byte
	l.cur()
	if l.i < len(l.src) {
		l.advanceTo(l.i + 1)
	}
}

// next returns the next logical line; ok is false at the end of src.
func (l *lexer) next(buf []cToken) (ll logicalLine, ok bool) {
	if l.i >= len(l.src) {
		return ll, false
	}
	ll.toks = buf[:0]
	ll.line = l.line
	space := false
	first := !l.inLine
	l.inLine = false
	for {
		c := l.cur()
		if l.i >= len(l.src) {
			return ll, true
		}
		switch {
		case c == '\n':
			l.bump()
			l.angleAfter = false
			return ll, true
		case c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v':
			l.bump()
			space = true
			continue
		case c == '/':
			if n, _ := l.at(l.i + 1); n == '*' {
				l.bump()
				l.bump()
				for l.i < len(l.src) {
					if c := l.cur(); c == '*' {
						l.bump()
						if l.cur() == '/' {
							l.bump()
							break
						}
						continue
					}
					l.bump()
				}
				space = true
				continue
			} else if n == '/' {
				for l.i < len(l.src) && l.cur() != '\n' {
					l.bump()
				}
				space = true
				continue
			}
		}
		t := cToken{line: l.line, col: l.col, space: space}
		start := l.i
		switch {
		case isIdentStart(c):
			for isIdentChar(l.cur()) && l.i < len(l.src) {
				l.bump()
			}
			t.kind = tkIdent
		case isDigit(c) || c == '.' && isDigitAt(l, l.i+1):
			l.bump()
			for {
				c := l.cur()
				if l.i >= len(l.src) {
					break
				}
				if (c == '+' || c == '-') && (l.src[l.i-1]|0x20 == 'e' || l.src[l.i-1]|0x20 == 'p') {
					l.bump()
					continue
				}
				if !isIdentChar(c) && c != '.' {
					break
				}
				l.bump()
			}
			t.kind = tkNumber
		case c == '"' || c == '\'':
			l.lexQuoted(c)
			t.kind = tkString
		case c == '<' && l.angleAfter:
			l.bump()
			for l.i < len(l.src) && l.cur() != '>' && l.cur() != '\n' {
				l.bump()
			}
			if l.cur() == '>' {
				l.bump()
			}
			t.kind = tkString
		default:
			l.bump()
			t.kind = tkPunct
			l.punct(c)
		}
		t.text = spliced(l.src[start:l.i])
		if first {
			ll.directive = t.is("#") || t.is("%:")
			first = false
		} else if ll.directive && len(ll.toks) == 1 && t.kind == tkIdent && (t.text == "include" || t.text == "include_next") {
			l.angleAfter = true
		} else {
			l.angleAfter = false
		}
		if len(ll.toks) >= maxLineTokens {
			if !ll.directive {
				ll.toks = append(ll.toks, t)
				ll.more = true
				l.inLine = true
				return ll, true
			}
			if len(ll.toks) >= max(l.maxDirective, maxLineTokens) {
				ll.cut = true
				continue
			}
		}
		ll.toks = append(ll.toks, t)
		space = false
	}
}

// lexQuoted moves past a string or character literal opened by q; an
// unterminated one ends at the end of the line.
func (l *lexer) lexQuoted(q byte) {
	l.bump()
	for l.i < len(l.src) {
		c := l.cur()
		switch c {
		case '\\':
			l.bump()
			if l.cur() != '\n' {
				l.bump()
			}
			continue
		case '\n':
			return
		case q:
			l.bump()
			return
		}
		l.bump()
	}
}

// punct extends a punctuator whose first byte c was consumed.
func (l *lexer) punct(c byte) {
	n, _ := l.at(l.i)
	two := string([]byte{c, n})
	switch two {
	case "->", "++", "--", "&&", "||", "==", "!=", "<=", ">=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "##", "<:", ":>", "<%", "%>", "%:":
		l.bump()
	case "<<", ">>":
		l.bump()
		if m, _ := l.at(l.i); m == '=' {
			l.bump()
		}
	case "..":
		if m, j := l.at(l.i + 1); m == '.' {
			_ = j
			l.bump()
			l.bump()
		}
	}
}

// spliced removes backslash-newlines from a token's text (rare: only
// allocates when there is one).
func spliced(s string) string {
	for i := 0; i+1 < len(s); i++ {
		if s[i] == '\\' && (s[i+1] == '\n' || s[i+1] == '\r') {
			b := make([]byte, 0, len(s))
			for j := 0; j < len(s); j++ {
				if s[j] == '\\' && j+1 < len(s) && s[j+1] == '\n' {
					j++
					continue
				}
				if s[j] == '\\' && j+2 < len(s) && s[j+1] == '\r' && s[j+2] == '\n' {
					j += 2
					continue
				}
				b = append(b, s[j])
			}
			return string(b)
		}
	}
	return s
}

func isIdentStart(c byte) bool {
	return c == '_' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}
func isIdentChar(c byte) bool { return isIdentStart(c) || isDigit(c) }
func isDigit(c byte) bool     { return c >= '0' && c <= '9' }
func isDigitAt(l *lexer, j int) bool {
	c, _ := l.at(j)
	return isDigit(c)
}
