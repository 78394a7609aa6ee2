package parse

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// safeFS is the cc.Config.FS of every translation: it reads files from
// the OS like cc would, and keeps two inputs that make
// modernc.org/cc/v4 (v4.34.0) loop forever away from it (both found by
// FuzzGenerate; the target compiler accepts them, so its check in
// Translate does not):
//
//   - a file whose last line is continued (a backslash-newline at the end
//     of the file, which GCC only warns about) gets an extra newline: cc
//     joins such a line onto nothing and then scans a zero-width rune
//     forever (gen/testdata/fuzz/FuzzGenerate/regress-eof-line-continuation);
//   - an object-like #define with more '(' than ')' in a header of the -I
//     directories is refused with an error naming it: cc evaluates every
//     macro (EvalAllMacros) and never returns from `(void *`
//     (gen/testdata/fuzz/FuzzGenerate/regress-unbalanced-macro).
type safeFS struct {
	dirs    []string // absolute include directories: their headers are checked
	refused *error   // set to the first macro refused, for Translate to report
}

func (s safeFS) Open(name string) (fs.File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	check := false
	for _, d := range s.dirs {
		if r, err := filepath.Rel(d, name); err == nil && r != ".." && !strings.HasPrefix(r, "../") {
			check = true
		}
	}
	return &safeFile{f: f, name: name, check: check, refused: s.refused}, nil
}

// safeFile reads the whole file on the first Read (cc reads it whole
// anyway); Stat alone, as #include lookups do, reads nothing.
type safeFile struct {
	f       *os.File
	name    string
	check   bool
	refused *error
	r       *bytes.Reader
}

func (e *safeFile) Stat() (fs.FileInfo, error) { return e.f.Stat() }
func (e *safeFile) Close() error               { return e.f.Close() }

func (e *safeFile) Read(p []byte) (int, error) {
	if e.r == nil {
		b, err := io.ReadAll(e.f)
		if err != nil {
			return 0, err
		}
		if e.check {
			if err := checkMacros(e.name, b); err != nil {
				if e.refused != nil && *e.refused == nil {
					*e.refused = err
				}
				return 0, err
			}
		}
		e.r = bytes.NewReader(endContinuedLine(b))
	}
	return e.r.Read(p)
}

// endContinuedLine appends newlines to b when its last line ends in a
// backslash, so the continuation joins an empty line.
func endContinuedLine(b []byte) []byte {
	t := bytes.TrimSuffix(b, []byte("\n"))
	t = bytes.TrimSuffix(t, []byte("\r"))
	if bytes.HasSuffix(t, []byte("\\")) {
		return append(b, '\n', '\n')
	}
	return b
}

var objectMacroRE = regexp.MustCompile(`^\s*#\s*define\s+([A-Za-z_]\w*)(.*)$`)

// checkMacros refuses object-like macros whose body opens more
// parentheses than it closes (outside string and character literals).
func checkMacros(name string, b []byte) error {
	lines := strings.Split(strings.ReplaceAll(string(b), "\r\n", "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		first := i
		line := lines[i]
		for strings.HasSuffix(line, "\\") && i+1 < len(lines) {
			i++
			line = line[:len(line)-1] + " " + lines[i]
		}
		m := objectMacroRE.FindStringSubmatch(line)
		if m == nil || strings.HasPrefix(m[2], "(") {
			continue // not a #define, or function-like
		}
		if paren(m[2]) > 0 {
			return fmt.Errorf("%s:%d: object-like macro %s opens more parentheses than it closes; the C front end cannot evaluate it (balance them, or make it function-like)", name, first+1, m[1])
		}
	}
	return nil
}

// paren returns the '(' minus ')' count of a macro body, skipping string
// and character literals and comments.
func paren(s string) int {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"', '\'':
			for i++; i < len(s) && s[i] != c; i++ {
				if s[i] == '\\' {
					i++
				}
			}
		case '/':
			if i+1 < len(s) && s[i+1] == '/' {
				return depth
			}
			if i+1 < len(s) && s[i+1] == '*' {
				if j := strings.Index(s[i+2:], "*/"); j >= 0 {
					i += j + 3
				} else {
					return depth
				}
			}
		case '(':
			depth++
		case ')':
			depth--
		}
	}
	return depth
}
