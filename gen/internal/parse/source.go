package parse

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/verbsexp/verbsexp/internal/inputfile"
)

// Input bounds: what one translation (one target) may read. The real
// headers read ~0.5 MiB, 17 000 lines in 83 files (MLNX_OFED 4.9 with
// glibc's; TestLimitsLeaveRoomForRealHeaders measures them); a
// header beyond these is refused with its name, before the C front end
// allocates for it (cc/v4 takes ~100 bytes of memory per byte of input,
// ~250 per blank line).
const (
	maxHeaderBytes = 4 << 20   // one file
	maxInputBytes  = 8 << 20   // every file of one translation
	maxInputLines  = 256 << 10 // every line of one translation

	// MaxHeaderBytes is maxHeaderBytes for the generator's other reads of
	// the headers (their hashes).
	MaxHeaderBytes = maxHeaderBytes
)

// sourceFS is the cc.Config.FS of every translation: the one way
// modernc.org/cc/v4 reads files (Config.FSOnly), so that it reads only
// what the generator allows:
//
//   - regular files only: a directory, FIFO or device (/dev/zero,
//     /dev/urandom never end; a FIFO blocks) is never opened for reading
//     (opening is non-blocking, and checked with fstat before any read);
//     cc then looks in the next include directory, as gcc does for a
//     directory, and the error names the file (includes.go reports it
//     with the #include's position before the compiler runs);
//   - at most maxHeaderBytes per file, maxInputBytes and maxInputLines in
//     all;
//   - `#pragma once` becomes an include guard (once.go): cc/v4 ignores
//     the pragma and would include such headers forever;
//   - a last line continued with a backslash gets an extra newline: cc/v4
//     joins it onto nothing and then scans a zero-width rune forever
//     (regress-eof-line-continuation);
//   - the headers of the -I directories are checked (macros.go): nesting,
//     expression length and macro expansion work bounded, object-like
//     macros with unbalanced parentheses refused (cc/v4 never returns
//     from `#define X (void *`: regress-unbalanced-macro).
//
// The first refusal is kept in the shared sourceState for Translate to
// report (cc would only say "include file not found").
type sourceFS struct {
	dirs []string // absolute include directories: their headers are checked
	st   *sourceState
}

// sourceState is what one translation has read so far.
type sourceState struct {
	mu      sync.Mutex
	bytes   int
	lines   int
	refused error
	macros  *macroTable
	read    map[string]bool // headers read in the -I directories, relative to theirs
}

func newSourceFS(dirs []string) sourceFS {
	return sourceFS{dirs: dirs, st: &sourceState{macros: newMacroTable(), read: map[string]bool{}}}
}

// refusal returns the first refusal, or nil.
func (s sourceFS) refusal() error {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	return s.st.refused
}

func (s sourceFS) refuse(err error) error {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	if s.st.refused == nil {
		s.st.refused = err
	}
	return err
}

// relPath returns name relative to the -I directory holding it, or ""
// outside them.
func (s sourceFS) relPath(name string) string {
	for _, d := range s.dirs {
		if r, err := filepath.Rel(d, name); err == nil && r != ".." && !strings.HasPrefix(r, "../") {
			return filepath.ToSlash(r)
		}
	}
	return ""
}

// readPaths lists, sorted, the headers read in the -I directories
// (relative to theirs).
func (s sourceFS) readPaths() []string {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	var r []string
	for p := range s.st.read {
		r = append(r, p)
	}
	sort.Strings(r)
	return r
}

func (s sourceFS) Open(name string) (fs.File, error) {
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		if fi.IsDir() {
			// Not an error by itself: gcc, too, skips a directory and
			// looks further.
			return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
		}
		return nil, s.refuse(fmt.Errorf("%s is %s, not a regular file: the generator reads only regular files (a FIFO blocks, a device such as /dev/zero never ends); include a header file instead", name, inputfile.Describe(fi.Mode())))
	}
	return &sourceFile{f: f, name: name, fs: s}, nil
}

// sourceFile reads the whole file, bounded, on the first Read (cc reads
// it whole anyway); Stat alone, as #include lookups do, reads nothing.
type sourceFile struct {
	f    *os.File
	name string
	fs   sourceFS
	r    *bytes.Reader
}

func (e *sourceFile) Stat() (fs.FileInfo, error) { return e.f.Stat() }
func (e *sourceFile) Close() error               { return e.f.Close() }

func (e *sourceFile) Read(p []byte) (int, error) {
	if e.r == nil {
		b, err := e.load()
		if err != nil {
			return 0, e.fs.refuse(err)
		}
		e.r = bytes.NewReader(b)
	}
	return e.r.Read(p)
}

// load reads, bounds, checks and rewrites the file.
func (e *sourceFile) load() ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(e.f, maxHeaderBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxHeaderBytes {
		return nil, fmt.Errorf("%s is larger than %d MiB: the generator reads headers of at most %d MiB each (the largest real one is ~0.1 MiB), so that the C front end's memory stays bounded", e.name, maxHeaderBytes>>20, maxHeaderBytes>>20)
	}
	st := e.fs.st
	st.mu.Lock()
	st.bytes += len(b)
	st.lines += bytes.Count(b, []byte("\n"))
	total, lines := st.bytes, st.lines
	st.macros.stats.Files++
	st.macros.stats.Bytes, st.macros.stats.Lines = total, lines
	st.mu.Unlock()
	if total > maxInputBytes {
		return nil, fmt.Errorf("%s: the headers read for one target exceed %d MiB in all (the real ones: ~0.5 MiB); the generator stops there so that the C front end's memory stays bounded: check the -I directories and what the headers include", e.name, maxInputBytes>>20)
	}
	if lines > maxInputLines {
		return nil, fmt.Errorf("%s: the headers read for one target exceed %d lines in all (the real ones: ~17 000); the generator stops there so that the C front end's memory stays bounded: check the -I directories and what the headers include", e.name, maxInputLines)
	}
	if rel := e.fs.relPath(e.name); rel != "" {
		st.mu.Lock()
		st.read[rel] = true
		err := checkSource(e.name, string(b), st.macros)
		st.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	fi, err := e.f.Stat()
	if err != nil {
		fi = nil
	}
	return servedBytes(b, fi), nil
}

// servedBytes is what the front end gets of a file that passed the
// checks: its bytes b rewritten (pragma once, a continued last line). The
// cache (deps.go) checks a stored translation's files with it.
func servedBytes(b []byte, fi fs.FileInfo) []byte {
	if fi != nil {
		b = rewritePragmaOnce(b, fi.ModTime())
	}
	return endContinuedLine(b)
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

// checkSource checks a header of the -I directories before cc/v4 reads
// it: its macros (defined into tab, in order) and its text, expanded with
// the macros defined so far, must stay within the limits of macros.go.
// Conditional compilation is ignored: every branch is checked.
func checkSource(name, src string, tab *macroTable) error {
	lx := newLexer(src)
	text := shape{stats: tab.stats}
	var chunk []cToken
	flush := func() error {
		if len(chunk) == 0 {
			return nil
		}
		e := &expander{tab: tab, budget: maxExpansionWork - tab.textWork}
		e.emit = func(t, origin cToken) *expandStop {
			if what := text.add(t); what != "" {
				return &expandStop{fmt.Sprintf("%d:%d: %s", origin.line, origin.col, what)}
			}
			return nil
		}
		s := e.run(chunk)
		tab.textWork += e.work
		tab.stats.TextWork = tab.textWork
		chunk = chunk[:0]
		if s != nil {
			return fmt.Errorf("%s:%s", name, s.msg)
		}
		return nil
	}
	var buf []cToken
	depth := 0 // ( and [ open in chunk: a macro's arguments may go on
	for {
		ll, ok := lx.next(buf)
		if !ok {
			break
		}
		if !ll.directive {
			chunk = append(chunk, ll.toks...)
			buf = ll.toks
			for _, t := range ll.toks {
				switch t.text {
				case "(", "[":
					depth++
				case ")", "]":
					depth--
				}
			}
			// Expand what is complete: nothing open that a macro call
			// could continue, and not ending in a name that a '(' on the
			// next line could make a call.
			if len(chunk) == 0 {
				continue
			}
			if last := chunk[len(chunk)-1]; depth <= 0 && last.kind != tkIdent || len(chunk) > 4*maxLineTokens {
				if err := flush(); err != nil {
					return err
				}
				depth = 0
			}
			continue
		}
		if err := flush(); err != nil {
			return err
		}
		depth = 0
		toks := append([]cToken(nil), ll.toks...) // a definition keeps its tokens
		buf = ll.toks
		if len(toks) < 2 || toks[1].kind != tkIdent {
			continue
		}
		if err := checkDirective(name, toks, tab); err != nil {
			return err
		}
		if ll.cut {
			return fmt.Errorf("%s:%d: a directive longer than %d tokens; the generator refuses it (its expressions and macros are bounded to %d tokens)", name, ll.line, maxLineTokens, maxRun)
		}
	}
	return flush()
}

// checkDirective checks and records one directive line (toks[1] is its
// name).
func checkDirective(name string, toks []cToken, tab *macroTable) error {
	switch toks[1].text {
	case "define":
		d, ok := parseDefine(name, toks)
		if !ok {
			return nil // malformed: the compiler has reported it
		}
		d.user = true
		body := shape{stats: tab.stats}
		depth := 0
		for _, t := range d.body {
			if what := body.add(t); what != "" {
				return fmt.Errorf("%s:%d:%d: macro %s: %s", name, t.line, t.col, d.name, what)
			}
			switch {
			case t.is("("):
				depth++
			case t.is(")"):
				depth--
			}
		}
		if !d.fn && depth > 0 {
			return fmt.Errorf("%s:%d: object-like macro %s opens more parentheses than it closes; the C front end cannot evaluate it (balance them, or make it function-like)", name, d.line, d.name)
		}
		return tab.define(d)
	case "undef":
		if len(toks) > 2 {
			tab.undef(toks[2].text)
		}
	case "if", "elif":
		cond := shape{stats: tab.stats}
		e := &expander{tab: tab, budget: maxExpansionWork - tab.textWork}
		e.emit = func(t, origin cToken) *expandStop {
			if what := cond.add(t); what != "" {
				return &expandStop{fmt.Sprintf("%d:%d: #%s: %s", origin.line, origin.col, toks[1].text, what)}
			}
			return nil
		}
		s := e.run(withoutDefined(toks[2:]))
		tab.textWork += e.work
		tab.stats.TextWork = tab.textWork
		if s != nil {
			return fmt.Errorf("%s:%s", name, s.msg)
		}
	}
	return nil
}

// withoutDefined drops the operands of `defined`, which #if does not
// expand.
func withoutDefined(toks []cToken) []cToken {
	var r []cToken
	for i := 0; i < len(toks); i++ {
		if t := toks[i]; t.kind == tkIdent && t.text == "defined" {
			if i+1 < len(toks) && toks[i+1].is("(") {
				i += 3
			} else {
				i++
			}
			r = append(r, cToken{kind: tkNumber, text: "1", line: t.line, col: t.col})
			continue
		}
		r = append(r, toks[i])
	}
	return r
}
