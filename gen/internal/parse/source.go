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
//     (regress-eof-line-continuation).
//
// What cc/v4 makes of what it reads (its recursion, its expansion work,
// the inputs it never returns from) is bounded by the child process it
// runs in (contain.go), not by a second reading of the headers here.
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
	stats   inputStats
	refused error
	read    map[string]bool // headers read in the -I directories, relative to theirs
	// headers are the same, absolute; untraced those whose conditional
	// groups could not be marked (cond.go).
	headers, untraced map[string]bool
}

// inputStats are what one translation read, for the test that compares
// the input bounds with what real headers need.
type inputStats struct {
	Files, Bytes, Lines int
}

func newSourceFS(dirs []string) sourceFS {
	return sourceFS{dirs: dirs, st: &sourceState{read: map[string]bool{}, headers: map[string]bool{}, untraced: map[string]bool{}}}
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

// load reads, bounds and rewrites the file.
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
	st.stats.Files++
	st.stats.Bytes += len(b)
	st.stats.Lines += bytes.Count(b, []byte("\n"))
	total, lines := st.stats.Bytes, st.stats.Lines
	st.mu.Unlock()
	if total > maxInputBytes {
		return nil, fmt.Errorf("%s: the headers read for one target exceed %d MiB in all (the real ones: ~0.5 MiB); the generator stops there so that the C front end's memory stays bounded: check the -I directories and what the headers include", e.name, maxInputBytes>>20)
	}
	if lines > maxInputLines {
		return nil, fmt.Errorf("%s: the headers read for one target exceed %d lines in all (the real ones: ~17 000); the generator stops there so that the C front end's memory stays bounded: check the -I directories and what the headers include", e.name, maxInputLines)
	}
	mark := ""
	if rel := e.fs.relPath(e.name); rel != "" {
		mark = filepath.Clean(e.name)
		st.mu.Lock()
		st.read[rel] = true
		st.headers[mark] = true
		st.mu.Unlock()
		if progress != nil {
			fmt.Fprintf(progress, "%s%s\n", progressPrefix, rel)
		}
	}
	fi, err := e.f.Stat()
	if err != nil {
		fi = nil
	}
	served, traced := servedBytes(b, fi, mark)
	if !traced {
		st.mu.Lock()
		st.untraced[mark] = true
		st.mu.Unlock()
	}
	return served, nil
}

// servedBytes is what the front end gets of a file that passed the
// checks: its bytes b rewritten (a header of the -I directories, named
// mark, with its conditional groups marked (cond.go); pragma once; a
// continued last line). The cache (deps.go) checks a stored
// translation's files with it. traced is false for a header that could
// not be marked.
func servedBytes(b []byte, fi fs.FileInfo, mark string) (served []byte, traced bool) {
	traced = true
	if mark != "" {
		b, _, traced = markConditionals(b, mark)
	}
	if fi != nil {
		b = rewritePragmaOnce(b, fi.ModTime())
	}
	return endContinuedLine(b), traced
}

// headerPaths lists, sorted, the headers read in the -I directories
// (absolute, as opened), and those that could not be marked.
func (s sourceFS) headerPaths() (headers, untraced []string) {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	for p := range s.st.headers {
		headers = append(headers, p)
	}
	for p := range s.st.untraced {
		untraced = append(untraced, p)
	}
	sort.Strings(headers)
	sort.Strings(untraced)
	return headers, untraced
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
