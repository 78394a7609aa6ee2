// Package gencmd spells the generator command a package records: the first
// line of every generated file and the //go:generate directive of doc.go.
// The generator writes it (Join); gen check and the repository's tests read
// it back (Read) to know which headers a package was generated from.
//
// The spelling is the one go generate reads: words separated by spaces, a
// word with spaces, quotes or backslashes written as a Go string literal.
package gencmd

import (
	"bufio"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"

	"github.com/verbsexp/verbsexp/internal/inputfile"
)

// Prefix is how every recorded command starts: the generator run with go
// run, so the directive works in any module that requires this one.
const Prefix = "go run github.com/verbsexp/verbsexp/gen"

// Quote spells one argument for a recorded command: as is when go generate
// would read it back unchanged, else as a Go string literal.
func Quote(arg string) string {
	if arg != "" && !strings.ContainsFunc(arg, func(r rune) bool {
		return unicode.IsSpace(r) || r == '"' || r == '\\' || r == '`' || !unicode.IsPrint(r)
	}) {
		return arg
	}
	return strconv.Quote(arg)
}

// Join spells the command that runs the generator with args.
func Join(args []string) string {
	var b strings.Builder
	b.WriteString(Prefix)
	for _, a := range args {
		b.WriteString(" ")
		b.WriteString(Quote(a))
	}
	return b.String()
}

// Split reads a command spelled by Join back into its arguments (the
// words after Prefix).
func Split(line string) ([]string, error) {
	rest, ok := strings.CutPrefix(line, Prefix)
	if !ok || rest != "" && rest[0] != ' ' {
		return nil, fmt.Errorf("not a verbsexp generator command (want %q …)", Prefix)
	}
	var args []string
	for {
		rest = strings.TrimLeft(rest, " ")
		if rest == "" {
			return args, nil
		}
		if rest[0] != '"' {
			word, tail, _ := strings.Cut(rest, " ")
			args, rest = append(args, word), tail
			continue
		}
		lit, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return nil, fmt.Errorf("bad quoted word at %q", rest)
		}
		word, _ := strconv.Unquote(lit)
		args, rest = append(args, word), rest[len(lit):]
		if rest != "" && rest[0] != ' ' {
			return nil, fmt.Errorf("no space after the quoted word %s", lit)
		}
	}
}

// DocFile is the generated file whose first line Read takes.
const DocFile = "doc.go"

// Read returns the arguments of the command recorded in pkgDir/doc.go
// (relative paths in them are relative to pkgDir).
func Read(pkgDir string) ([]string, error) {
	file := filepath.Join(pkgDir, DocFile)
	f, _, err := inputfile.Open(file) // a FIFO or a device is refused, not read
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	if !sc.Scan() {
		if sc.Err() != nil {
			return nil, fmt.Errorf("%s: %v", file, sc.Err())
		}
		return nil, fmt.Errorf("%s is empty", file)
	}
	line, ok := strings.CutPrefix(sc.Text(), "// ")
	if !ok {
		return nil, fmt.Errorf("%s:1: no recorded generator command (want \"// %s …\")", file, Prefix)
	}
	args, err := Split(line)
	if err != nil {
		return nil, fmt.Errorf("%s:1: %v", file, err)
	}
	return args, nil
}

// Value returns the values of flag name (given as "-name v" or
// "-name=v"; also with two dashes) in args, in order. Every flag of a
// recorded command takes a value (the boolean -q is never recorded).
func Value(args []string, name string) []string {
	var r []string
	for i := 0; i < len(args); i++ {
		a, ok := strings.CutPrefix(args[i], "-")
		if !ok {
			continue
		}
		a = strings.TrimPrefix(a, "-")
		if n, v, ok := strings.Cut(a, "="); ok {
			if n == name {
				r = append(r, v)
			}
			continue
		}
		if i+1 < len(args) {
			if a == name {
				r = append(r, args[i+1])
			}
			i++
		}
	}
	return r
}

// IncludeDirs returns the -I directories of the command recorded in
// pkgDir, made absolute (relative ones are relative to pkgDir).
func IncludeDirs(pkgDir string) ([]string, error) {
	args, err := Read(pkgDir)
	if err != nil {
		return nil, err
	}
	dirs := Value(args, "I")
	if len(dirs) == 0 {
		return nil, errors.New(filepath.Join(pkgDir, DocFile) + ":1: the recorded command has no -I")
	}
	abs, err := filepath.Abs(pkgDir)
	if err != nil {
		return nil, err
	}
	for i, d := range dirs {
		if !filepath.IsAbs(d) {
			dirs[i] = filepath.Join(abs, d)
		}
	}
	return dirs, nil
}

// Canonical spells directories so that two spellings of one directory
// compare equal: absolute, symbolic links resolved (a directory that
// cannot be resolved stays as far as it got).
func Canonical(dirs []string) []string {
	var r []string
	for _, d := range dirs {
		if a, err := filepath.Abs(d); err == nil {
			d = a
		}
		if e, err := filepath.EvalSymlinks(d); err == nil {
			d = e
		}
		r = append(r, d)
	}
	return r
}
