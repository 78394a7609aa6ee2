package parse

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/verbsexp/verbsexp/internal/inputfile"
)

// overlay is the marked copies of the first translation's -I headers
// that probes read (their -I directories, in the order of the real ones,
// each before its real one).
type overlay struct {
	dir      string
	includes []string
	markers  []string
	pos      map[string]Pos    // marker → the directive it follows
	orig     map[string]string // copy → real header
}

// writeOverlay copies headers (absolute, in the -I directories dirs),
// served as the C front end read them: marked (cond.go). The caller
// removes o.dir.
func writeOverlay(dirs, headers []string) (o *overlay, err error) {
	o = &overlay{pos: map[string]Pos{}, orig: map[string]string{}}
	if o.dir, err = os.MkdirTemp("", "verbsexp-probe-"); err != nil {
		return nil, err
	}
	fs := sourceFS{dirs: dirs}
	for k, d := range dirs {
		o.includes = append(o.includes, filepath.Join(o.dir, strconv.Itoa(k)), d)
	}
	for _, h := range headers {
		k, rel := -1, ""
		for i, d := range dirs {
			if r, err := filepath.Rel(d, h); err == nil && r != ".." && !strings.HasPrefix(r, "../") {
				k, rel = i, filepath.ToSlash(r)
				break
			}
		}
		if k < 0 || fs.relPath(h) == "" {
			return o, fmt.Errorf("%s is not in the -I directories", h)
		}
		b, err := inputfile.Read(h, maxHeaderBytes, "the generator reads headers of at most that size")
		if err != nil {
			return o, err
		}
		fi, err := os.Stat(h)
		if err != nil {
			return o, err
		}
		_, markers, _ := markConditionals(b, h)
		served, _ := servedBytes(b, fi, h)
		copyPath := filepath.Join(o.dir, strconv.Itoa(k), filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(copyPath), 0o755); err != nil {
			return o, err
		}
		if err := os.WriteFile(copyPath, served, 0o644); err != nil {
			return o, err
		}
		o.orig[copyPath] = h
		for _, m := range markers {
			line, _ := strconv.Atoi(m[strings.LastIndexByte(m, '_')+1:])
			o.pos[m] = Pos{File: rel, Line: line, Col: 1}
			o.markers = append(o.markers, m)
		}
	}
	return o, nil
}

// real maps a path the probe's compiler read back to the header it is a
// copy of (other paths stay).
func (o *overlay) real(p string) string {
	if r, ok := o.orig[filepath.Clean(p)]; ok {
		return r
	}
	return p
}
