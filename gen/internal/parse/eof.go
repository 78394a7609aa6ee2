package parse

import (
	"bytes"
	"io"
	"io/fs"
	"os"
)

// eofSafeFS is the cc.Config.FS of every translation: it reads files from
// the OS like cc would, but ends a file whose last line is continued
// (a backslash-newline at the end of the file, which GCC only warns
// about) with an extra newline. modernc.org/cc/v4 (v4.34.0) joins such a
// line onto nothing and then scans a zero-width rune forever: a header
// ending in `"x\` hangs it (found by FuzzGenerate, see
// gen/testdata/fuzz/FuzzGenerate/regress-eof-line-continuation).
type eofSafeFS struct{}

func (eofSafeFS) Open(name string) (fs.File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	return &eofSafeFile{f: f}, nil
}

// eofSafeFile reads the whole file on the first Read (cc reads it whole
// anyway); Stat alone, as #include lookups do, reads nothing.
type eofSafeFile struct {
	f *os.File
	r *bytes.Reader
}

func (e *eofSafeFile) Stat() (fs.FileInfo, error) { return e.f.Stat() }
func (e *eofSafeFile) Close() error               { return e.f.Close() }

func (e *eofSafeFile) Read(p []byte) (int, error) {
	if e.r == nil {
		b, err := io.ReadAll(e.f)
		if err != nil {
			return 0, err
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
