package parse

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// A dependency is a path the C front end looked at during a translation
// and what it found there: the translation's result is a function of
// these (and of the compiler's configuration), so a cached result is
// valid while every path still gives the same answer.
type dependency struct {
	Path  string
	State string // depAbsent, depDir, depFile, depUnreadable, or "sha256:" + the hex hash of what was read
}

const (
	depAbsent     = "absent"     // does not exist: a failed #include or __has_include lookup
	depDir        = "dir"        // a directory (an include candidate the front end skips)
	depFile       = "file"       // a file opened but not read (__has_include)
	depUnreadable = "unreadable" // opened, reading failed
)

// depRecorder records every path a translation opens through its FS.
type depRecorder struct {
	mu     sync.Mutex
	states map[string]string
	order  []string
	// unsound is set when the record cannot describe the translation: a
	// path gave two answers, or a file the FS refused exists (cc then
	// opens it itself, behind the recorder's back).
	unsound bool
	open    map[*recordingFile]bool // opened, not closed yet
}

func newDepRecorder() *depRecorder {
	return &depRecorder{states: map[string]string{}, open: map[*recordingFile]bool{}}
}

// wrap returns fsys recording into r; a nil r returns fsys as it is.
func (r *depRecorder) wrap(fsys fs.FS) fs.FS {
	if r == nil {
		return fsys
	}
	return recordingFS{fsys, r}
}

func (r *depRecorder) set(path, state string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old, seen := r.states[path]
	switch {
	case !seen:
		r.states[path] = state
		r.order = append(r.order, path)
	case old == state:
	case old == depFile && state != depAbsent && state != depDir:
		r.states[path] = state // read after a __has_include look
	case state == depFile && old != depAbsent && old != depDir:
	default:
		r.unsound = true
	}
}

// deps returns what was recorded, in first-seen order, and false when
// the record is unusable.
func (r *depRecorder) deps() ([]dependency, bool) {
	r.mu.Lock()
	var open []*recordingFile
	for f := range r.open {
		open = append(open, f)
	}
	r.mu.Unlock()
	for _, f := range open {
		f.settle() // a file cc never closed still counts
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unsound {
		return nil, false
	}
	d := make([]dependency, len(r.order))
	for i, p := range r.order {
		d[i] = dependency{p, r.states[p]}
	}
	return d, true
}

type recordingFS struct {
	fs fs.FS
	r  *depRecorder
}

func (s recordingFS) Open(name string) (fs.File, error) {
	f, err := s.fs.Open(name)
	if err != nil {
		switch state := notOpened(name); state {
		case depAbsent, depDir:
			s.r.set(name, state)
		default:
			// Refused (not a regular file): the translation fails.
			s.r.mu.Lock()
			s.r.unsound = true
			s.r.mu.Unlock()
		}
		return nil, err
	}
	rf := &recordingFile{File: f, name: name, r: s.r, h: sha256.New()}
	s.r.mu.Lock()
	s.r.open[rf] = true
	s.r.mu.Unlock()
	return rf, nil
}

// recordingFile hashes what is read from it; the state is settled on
// Close (cc closes every source it opens).
type recordingFile struct {
	fs.File
	name   string
	r      *depRecorder
	h      hash.Hash
	read   bool // Read was called
	eof    bool // and reached the end
	failed bool // a Read failed
	isDir  bool
}

func (f *recordingFile) Stat() (fs.FileInfo, error) {
	fi, err := f.File.Stat()
	if err == nil && fi.IsDir() {
		f.isDir = true
	}
	return fi, err
}

func (f *recordingFile) Read(p []byte) (int, error) {
	f.read = true
	n, err := f.File.Read(p)
	f.h.Write(p[:n])
	switch {
	case errors.Is(err, io.EOF):
		f.eof = true
	case err != nil:
		f.failed = true
	}
	return n, err
}

func (f *recordingFile) Close() error {
	f.settle()
	return f.File.Close()
}

// settle records what the front end found in the file.
func (f *recordingFile) settle() {
	f.r.mu.Lock()
	open := f.r.open[f]
	delete(f.r.open, f)
	f.r.mu.Unlock()
	if !open {
		return
	}
	if !f.isDir {
		if fi, err := f.File.Stat(); err == nil && fi.IsDir() {
			f.isDir = true
		}
	}
	switch {
	case f.isDir:
		f.r.set(f.name, depDir)
	case f.failed:
		f.r.set(f.name, depUnreadable)
	case f.eof:
		f.r.set(f.name, "sha256:"+hex.EncodeToString(f.h.Sum(nil)))
	case f.read:
		// Partly read: nothing says which part mattered.
		f.r.mu.Lock()
		f.r.unsound = true
		f.r.mu.Unlock()
	default:
		f.r.set(f.name, depFile)
	}
}

// recheckMemo remembers the rechecks of one run: the targets' translations
// share the headers in scope and the lookups in the -I directories, which
// are then read and hashed once.
type recheckMemo struct {
	mu sync.Mutex
	m  map[recheckKey]string
}

type recheckKey struct {
	path string
	open bool // only opened (depFile), not read
}

func newRecheckMemo() *recheckMemo { return &recheckMemo{m: map[recheckKey]string{}} }

// notOpened classifies a path the FS would not open: absent, a directory
// (which the front end's FS does not open either: it looks further, as
// gcc does), or something else it refused ("refused").
func notOpened(path string) string {
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return depAbsent
	case fi.IsDir():
		return depDir
	}
	return "refused"
}

// stillValid reports whether every dependency gives the same answer now
// as it gave the front end's FS (sourceFS), looked at the way that FS
// looks: a file that is not regular is not opened, a regular one is
// hashed as the front end was served it (servedBytes). The FS's checks
// are not run again: they only refuse, and a translation whose every
// file is served the same bytes as before passed them. memo may be nil.
// dirs are the absolute -I directories, whose headers are served marked.
func stillValid(deps []dependency, dirs []string, memo *recheckMemo) bool {
	buf := make([]byte, 64<<10)
	for _, d := range deps {
		k := recheckKey{d.Path, d.State == depFile}
		var state string
		var known bool
		if memo != nil {
			memo.mu.Lock()
			state, known = memo.m[k]
			memo.mu.Unlock()
		}
		if !known {
			state = recheck(d, markName(d.Path, dirs), buf)
			if memo != nil {
				memo.mu.Lock()
				memo.m[k] = state
				memo.mu.Unlock()
			}
		}
		if state != d.State {
			return false
		}
	}
	return true
}

// recheck looks at d.Path the way its recorded state was found: a file
// recorded as read is read and hashed (as served under the marker name
// mark, "" for none), one recorded as only opened is only opened. buf is
// scratch space for the reads.
func recheck(d dependency, mark string, buf []byte) string {
	f, err := os.OpenFile(d.Path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return notOpened(d.Path)
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return depUnreadable
	case fi.IsDir():
		return depDir
	case !fi.Mode().IsRegular():
		return "refused"
	case d.State == depFile:
		return depFile
	}
	var b bytes.Buffer
	for {
		n, err := f.Read(buf)
		b.Write(buf[:n])
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return depUnreadable
		}
		if b.Len() > maxHeaderBytes {
			return "too large"
		}
	}
	served, _ := servedBytes(b.Bytes(), fi, mark)
	sum := sha256.Sum256(served)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// markName is the name a header is marked under (servedBytes): its
// cleaned path when it lies in one of the -I directories dirs, else "".
func markName(path string, dirs []string) string {
	if (sourceFS{dirs: dirs}).relPath(path) == "" {
		return ""
	}
	return filepath.Clean(path)
}
