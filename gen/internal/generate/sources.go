package generate

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/verbsexp/verbsexp/abiutil"
	"github.com/verbsexp/verbsexp/gen/internal/emit"
	"github.com/verbsexp/verbsexp/gen/internal/model"
	"github.com/verbsexp/verbsexp/gen/internal/parse"
	"github.com/verbsexp/verbsexp/internal/inputfile"
)

// readInputs reads every input header once: its SHA-256 (abi.json and
// zheaders.go), and what the package records to link it and to check
// it at run time (emit.Source): its -I directory as the package names
// it, whether it defers to the system's header of its name, and the
// digests of the records of the package it defines.
func readInputs(opts Options, pkg *model.Package) ([]string, []emit.Source, error) {
	dirs := packageIncludes(opts)
	inPkg := map[string]map[string]bool{} // input path → the records it declares
	for _, r := range pkg.Records {
		if r.Nested {
			continue
		}
		if inPkg[r.Pos.File] == nil {
			inPkg[r.Pos.File] = map[string]bool{}
		}
		inPkg[r.Pos.File][r.C] = true
	}
	var hashes []string
	var sources []emit.Source
	for _, in := range pkg.Inputs {
		b, err := inputfile.Read(in.Abs, parse.MaxHeaderBytes, "it changed since it was read (the generator reads headers of at most that size)")
		if err != nil {
			return nil, nil, fmt.Errorf("hashing %s: %v", in.Path, err)
		}
		sum := sha256.Sum256(b)
		hashes = append(hashes, hex.EncodeToString(sum[:]))
		src := emit.Source{Defers: includesNext(b, in.Path)}
		for _, d := range dirs {
			if r, err := filepath.Rel(d.abs, in.Abs); err == nil && filepath.ToSlash(r) == in.Path {
				src.Dir = d.spelled
				break
			}
		}
		for _, r := range abiutil.RecordDigests(b) {
			if inPkg[in.Path][r.Name] {
				src.Records = append(src.Records, r)
			}
		}
		sources = append(sources, src)
	}
	return hashes, sources, nil
}

// includeDir is an -I directory, absolute, and as the package names it.
type includeDir struct{ abs, spelled string }

// packageIncludes pairs each -I directory with its #cgo CFLAGS flag,
// which names it as seen from the package (-I${SRCDIR}/REL or
// -I/ABS, quoted when it holds a space). Directories without a flag
// of that form are left out: their headers are neither linked nor
// checked.
func packageIncludes(opts Options) []includeDir {
	var r []includeDir
	for i, d := range opts.Parse.IncludeDirs {
		if i >= len(opts.CFlags) {
			break
		}
		abs, err := filepath.Abs(d)
		if err != nil {
			continue
		}
		flag := strings.TrimSuffix(strings.TrimPrefix(opts.CFlags[i], `"`), `"`)
		dir, ok := strings.CutPrefix(flag, "-I")
		if !ok {
			continue
		}
		if rel, ok := strings.CutPrefix(dir, "${SRCDIR}/"); ok {
			dir = rel
		} else if !filepath.IsAbs(dir) {
			continue
		}
		r = append(r, includeDir{abs, filepath.ToSlash(dir)})
	}
	return r
}

// includesNext reports whether src includes the next header named path
// (#include_next <path> or "path"): it defers to another of its name,
// found after it on the include path (the system's, where installed).
func includesNext(src []byte, path string) bool {
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(nil, len(src)+1)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		rest, ok := strings.CutPrefix(line, "#")
		if !ok {
			continue
		}
		rest, ok = strings.CutPrefix(strings.TrimSpace(rest), "include_next")
		if !ok {
			continue
		}
		rest = strings.TrimSpace(rest)
		if strings.HasPrefix(rest, "<"+path+">") || strings.HasPrefix(rest, `"`+path+`"`) {
			return true
		}
	}
	return false
}
