package parse

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/verbsexp/verbsexp/internal/inputfile"
)

// checkIncludes walks the #include graph of the headers in the -I
// directories, from the entry, before the target compiler or cc/v4 reads
// any of them: every header an #include names must be a regular file of
// at most maxHeaderBytes, and those of the -I directories at most
// maxInputBytes in all. A FIFO would block the compiler forever, and
// /dev/zero makes it allocate without bound (cc1 reached 24 GB); a
// directory is what gcc reports as "No such file or directory". The error
// gives the position of the #include.
//
// Each name is resolved as gcc does (the including file's directory for
// "…", then the -I directories, then the system ones; #include_next
// after the directory the including file was found in) and only the file
// gcc would open is checked. An #include of a macro cannot be resolved
// here; the compiler's timeout (compilerTimeout) bounds that case.
// Conditional compilation is ignored: an #include in a branch that is
// never taken is checked too.
func checkIncludes(entry string, dirs, sysDirs []string) error {
	w := &includeWalk{dirs: dirs, sysDirs: sysDirs, seen: map[string]bool{}, names: map[string]string{}}
	return w.file(entry)
}

type includeWalk struct {
	dirs, sysDirs []string
	seen          map[string]bool
	bytes         int
	names         map[string]string // object-like macros defined as one "…" or <…>
}

func (w *includeWalk) inDirs(p string) bool {
	for _, d := range w.dirs {
		if r, err := filepath.Rel(d, p); err == nil && r != ".." && !strings.HasPrefix(r, "../") {
			return true
		}
	}
	return false
}

// file checks the includes of one header of the -I directories.
func (w *includeWalk) file(path string) error {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		real = path
	}
	if w.seen[real] {
		return nil
	}
	w.seen[real] = true
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil // the compiler reports it
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil // checked by the caller
	}
	b, err := io.ReadAll(io.LimitReader(f, maxHeaderBytes+1))
	if err != nil {
		return nil
	}
	if len(b) > maxHeaderBytes {
		return fmt.Errorf("%s is larger than %d MiB: the generator reads headers of at most %d MiB each (the largest real one is ~0.1 MiB), so that the compiler's and the C front end's memory stay bounded", path, maxHeaderBytes>>20, maxHeaderBytes>>20)
	}
	if w.bytes += len(b); w.bytes > maxInputBytes {
		return fmt.Errorf("%s: the headers of the -I directories that the entry includes exceed %d MiB in all (the real ones: ~0.2 MiB); the generator stops there so that the compiler's and the C front end's memory stay bounded", path, maxInputBytes>>20)
	}
	lx := newLexer(string(b))
	var buf []cToken
	for {
		ll, ok := lx.next(buf)
		if !ok {
			return nil
		}
		t := ll.toks
		buf = t[:0]
		if !ll.directive || len(t) < 3 || t[1].kind != tkIdent {
			continue
		}
		next := false
		switch t[1].text {
		case "define":
			// An object-like macro: no ( right after its name.
			if t[2].kind == tkIdent && (len(t) == 3 || !t[3].is("(") || t[3].space) {
				if n := headerName(t[3:]); n != "" {
					w.names[t[2].text] = n
				}
			}
			continue
		case "include", "import":
		case "include_next":
			next = true
		default:
			continue
		}
		arg := t[2]
		if arg.kind == tkIdent && len(t) == 3 && w.names[arg.text] != "" {
			arg.text = w.names[arg.text] // #include NAME, NAME a header name
			arg.kind = tkString
		}
		if arg.kind != tkString || len(arg.text) < 2 || (arg.text[0] != '"' && arg.text[0] != '<') {
			continue // a macro the walk cannot resolve: the compiler's timeout bounds it
		}
		name := arg.text[1 : len(arg.text)-1]
		target, err := w.resolve(path, name, arg.text[0] == '"', next)
		if err != nil {
			return fmt.Errorf("%s:%d:%d: #%s %s: %v", path, arg.line, arg.col, t[1].text, arg.text, err)
		}
		if target != "" && w.inDirs(target) {
			if err := w.file(target); err != nil {
				return err
			}
		}
	}
}

// resolve finds the file gcc would open for an #include of name from
// file, and refuses it unless it is a regular file. It returns "" when
// nothing is found (the compiler reports it).
func (w *includeWalk) resolve(from, name string, quoted, next bool) (string, error) {
	var cands []string
	if filepath.IsAbs(name) {
		cands = []string{name}
	} else {
		var search []string
		if quoted && !next {
			search = append(search, filepath.Dir(from))
		}
		search = append(append(search, w.dirs...), w.sysDirs...)
		if next {
			// After the directory the including file was found in.
			for i, d := range search {
				if strings.HasPrefix(from, filepath.Clean(d)+"/") {
					search = search[i+1:]
					break
				}
			}
		}
		for _, d := range search {
			cands = append(cands, filepath.Join(d, name))
		}
	}
	dir := ""
	for _, c := range cands {
		fi, err := os.Stat(c)
		if err != nil {
			continue
		}
		if fi.IsDir() {
			if dir == "" {
				dir = c
			}
			continue // gcc skips a directory and looks further
		}
		if !fi.Mode().IsRegular() {
			return "", fmt.Errorf("%s is %s, not a header file: the generator and the compiler read only regular files (a FIFO blocks, a device such as /dev/zero never ends); include a header file", c, inputfile.Describe(fi.Mode()))
		}
		if fi.Size() > maxHeaderBytes {
			return "", fmt.Errorf("%s is larger than %d MiB: the generator reads headers of at most %d MiB each (the largest real one is ~0.1 MiB)", c, maxHeaderBytes>>20, maxHeaderBytes>>20)
		}
		return c, nil
	}
	if dir != "" {
		return "", fmt.Errorf("%s is a directory, not a header file, and no include directory holds a header of that name; include the header itself, or add the directory that holds it with -I", dir)
	}
	return "", nil
}

// headerName returns the header name a macro body spells: one string
// literal, or < … > (as tokens); "" otherwise.
func headerName(body []cToken) string {
	if len(body) == 1 && body[0].kind == tkString && strings.HasPrefix(body[0].text, `"`) {
		return body[0].text
	}
	if len(body) >= 3 && body[0].is("<") && body[len(body)-1].is(">") {
		var b strings.Builder
		for _, t := range body {
			b.WriteString(t.text)
		}
		return b.String()
	}
	return ""
}
