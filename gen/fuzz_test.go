package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/format"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/gen/internal/diff"
	"github.com/verbsexp/verbsexp/gen/internal/generate"
	"github.com/verbsexp/verbsexp/gen/internal/parse"
	"github.com/verbsexp/verbsexp/internal/manifest"
	"github.com/verbsexp/verbsexp/internal/target"
)

var updateFuzzSeeds = flag.Bool("update-fuzz-seeds", false, "rewrite gen/testdata/fuzz/FuzzGenerate from the golden inputs and headers/")

// fuzzDeadline bounds one generation inside the fuzzer. It is a hang
// guard, not a speed requirement: fuzz inputs are a few KB and generate
// in well under a second. Go's fuzz worker kills itself after 10 s on one
// input without saying why; this fails first, with a message. Outside
// fuzzing (the seeds under go test) the bound is looser, for a loaded
// machine. An input the C front end never returns from ends at its
// child's CPU limit, lowered to frontEndCPU seconds here.
func fuzzDeadline() time.Duration {
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		return 9 * time.Second
	}
	return 60 * time.Second
}

const frontEndCPU = "1"

// goMaxTypeSize is the gc compiler's limit on the size of a type on the
// 64-bit targets ("type … larger than address space").
const goMaxTypeSize = 1 << 50

// FuzzGenerate feeds arbitrary bytes to the generator as
// infiniband/verbs_exp.h and runs the real pipeline for linux/amd64
// (generate.Run, then generate.Write into a scratch tree). Whatever the
// input, the generator must return an error, or files that are gofmt'd Go
// which type-checks with gc's amd64 sizes (so the layout guards hold) and
// a manifest that reads back and diffs clean against itself; it must not
// panic, hang, or write anywhere but its output directory.
func FuzzGenerate(f *testing.F) {
	amd64, ok := target.Lookup("amd64")
	if !ok {
		f.Fatal("no amd64 target")
	}
	if _, err := amd64.Compiler(); err != nil {
		f.Skipf("SKIP: FuzzGenerate needs the amd64 C compiler: %v", err)
	}
	f.Setenv("VERBSEXP_FRONT_END_CPU", frontEndCPU)
	cwd, err := os.Getwd()
	if err != nil {
		f.Fatal(err)
	}
	before := dirNames(f, cwd)
	f.Fuzz(func(t *testing.T, header []byte) {
		root := t.TempDir()
		inc := filepath.Join(root, "include")
		if err := os.MkdirAll(filepath.Join(inc, "infiniband"), 0o755); err != nil {
			t.Fatal(err)
		}
		hdr := filepath.Join(inc, "infiniband", "verbs_exp.h")
		if err := os.WriteFile(hdr, header, 0o644); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(root, "out", "pkg")
		opts := generate.Options{
			Parse:      parse.Options{IncludeDirs: []string{inc}, Entry: parse.DefaultEntry, ScopeDir: parse.DefaultScope},
			Targets:    []target.Target{amd64},
			Package:    "pkg",
			Command:    "gen -I include -o out/pkg -arch amd64",
			GoGenerate: "go run github.com/verbsexp/verbsexp/gen -I include -o out/pkg -arch amd64",
			CFlags:     []string{"-I" + inc},
		}
		res, runErr, writeErr := runWithDeadline(t, opts, out)

		// Nothing outside out/pkg, the input untouched.
		if b, err := os.ReadFile(hdr); err != nil || !bytes.Equal(b, header) {
			t.Errorf("the input header was changed or removed (%v)", err)
		}
		var stray []string
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			rel, _ := filepath.Rel(root, p)
			switch {
			case err != nil:
				stray = append(stray, rel+": "+err.Error())
			case rel == "." || rel == "include" || rel == "include/infiniband" || rel == "include/infiniband/verbs_exp.h" || rel == "out" || rel == "out/pkg":
			case filepath.Dir(rel) == "out/pkg" && runErr == nil && writeErr == nil && !d.IsDir():
			default:
				stray = append(stray, rel)
			}
			return nil
		})
		if len(stray) > 0 {
			t.Errorf("the generator left files outside its output directory (run error %v, write error %v): %v", runErr, writeErr, stray)
		}
		if after := dirNames(t, cwd); after != before {
			t.Errorf("the working directory changed:\nbefore %s\nafter  %s", before, after)
		}
		if runErr != nil {
			if strings.Contains(runErr.Error(), "goroutine ") {
				t.Errorf("error carries a stack trace: %v", runErr)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("a failed run created %s", out)
			}
			return
		}
		if writeErr != nil {
			t.Fatalf("generated, but writing failed: %v", writeErr)
		}
		checkFiles(t, out, res)
	})
}

// runWithDeadline runs Run and Write, failing the input if they do not
// return within fuzzDeadline().
func runWithDeadline(t *testing.T, opts generate.Options, out string) (*generate.Result, error, error) {
	type result struct {
		res            *generate.Result
		runErr, wrtErr error
		panicked       any
	}
	done := make(chan result, 1)
	go func() {
		var r result
		defer func() {
			if p := recover(); p != nil {
				r.panicked = p
			}
			done <- r
		}()
		r.res, r.runErr = generate.Run(opts)
		if r.runErr == nil {
			r.wrtErr = generate.Write(out, r.res.Files)
		}
	}()
	select {
	case r := <-done:
		if r.panicked != nil {
			t.Fatalf("generator panicked: %v", r.panicked)
		}
		return r.res, r.runErr, r.wrtErr
	case <-time.After(fuzzDeadline()):
		t.Fatalf("generator did not return within %v (hang)", fuzzDeadline())
	}
	return nil, nil, nil
}

// checkFiles verifies a successful run: every file the result lists is on
// disk with the same bytes, nothing else is; Go files are gofmt'd and
// type-check; abi.json reads back and diffs clean against itself.
func checkFiles(t *testing.T, out string, res *generate.Result) {
	t.Helper()
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(res.Files) {
		t.Errorf("%d files on disk, %d generated", len(entries), len(res.Files))
	}
	for _, f := range res.Files {
		if f.Name != filepath.Base(f.Name) || strings.HasPrefix(f.Name, ".") {
			t.Errorf("file name %q is not a plain name", f.Name)
			continue
		}
		if f.Link != "" {
			if !generate.SameFile(filepath.Join(out, f.Name), f) {
				t.Errorf("%s on disk is not a symbolic link to %s", f.Name, f.Link)
			}
			continue
		}
		disk, err := os.ReadFile(filepath.Join(out, f.Name))
		if err != nil || !bytes.Equal(disk, f.Data) {
			t.Errorf("%s on disk differs from the generated bytes (%v)", f.Name, err)
		}
		switch {
		case strings.HasSuffix(f.Name, ".go"):
			if !generate.Owned(filepath.Join(out, f.Name)) {
				t.Errorf("%s lacks the generated-code marker", f.Name)
			}
			if _, err := parser.ParseFile(token.NewFileSet(), f.Name, f.Data, parser.ParseComments); err != nil {
				t.Errorf("%s is not valid Go: %v\n%s", f.Name, err, excerpt(f.Data, err))
				continue
			}
			if fmted, err := format.Source(f.Data); err != nil || !bytes.Equal(fmted, f.Data) {
				t.Errorf("%s is not gofmt'd (%v)", f.Name, err)
			}
		case f.Name == "abi.json":
			m, err := manifest.Unmarshal(f.Data)
			if err != nil {
				t.Errorf("abi.json does not read back: %v", err)
				continue
			}
			if cs := diff.Compare(m, m, diff.Options{EndAnchored: diff.DefaultEndAnchored}); len(cs) != 0 {
				t.Errorf("abi.json diffed with itself reports %d changes, first %+v", len(cs), cs[0])
			}
		}
	}
	if !t.Failed() {
		checkPackageDir(t, out)
	}
}

// srcImporter is shared by all inputs: importing abiutil, syscall and
// strconv from source once per process.
var (
	srcImporterMu sync.Mutex
	srcFset       = token.NewFileSet()
	srcImporter   = importer.ForCompiler(srcFset, "source", nil)
)

type lockedImporter struct{}

func (lockedImporter) Import(path string) (*types.Package, error) {
	srcImporterMu.Lock()
	defer srcImporterMu.Unlock()
	return srcImporter.Import(path)
}

// typeCheck checks the package as gc builds it for linux/amd64 (cgo
// references are accepted unchecked): every name is declared once, every
// layout guard index is in range, and no type is larger than gc allows.
func typeCheck(t *testing.T, fset *token.FileSet, files []*ast.File) {
	t.Helper()
	sizes := types.SizesFor("gc", "amd64")
	var errs []string
	conf := types.Config{
		Importer:    lockedImporter{},
		FakeImportC: true,
		Sizes:       sizes,
		Error: func(err error) {
			if len(errs) < 10 {
				errs = append(errs, err.Error())
			}
		},
	}
	pkg, _ := conf.Check("pkg", fset, files, nil)
	if len(errs) > 0 {
		t.Errorf("generated package does not type-check for linux/amd64:\n%s", strings.Join(errs, "\n"))
		return
	}
	for _, name := range pkg.Scope().Names() {
		tn, ok := pkg.Scope().Lookup(name).(*types.TypeName)
		if !ok {
			continue
		}
		if s := sizes.Sizeof(tn.Type()); s >= goMaxTypeSize || s < 0 {
			t.Errorf("type %s is %d bytes: gc refuses types of 2^50 bytes or more", name, s)
		}
	}
}

func excerpt(src []byte, err error) string {
	m := regexp.MustCompile(`:(\d+):`).FindStringSubmatch(err.Error())
	if m == nil {
		return ""
	}
	n, _ := strconv.Atoi(m[1])
	lines := strings.Split(string(src), "\n")
	lo, hi := max(n-4, 0), min(n+3, len(lines))
	return strings.Join(lines[lo:hi], "\n")
}

// dirNames lists dir's entries (names and sizes of regular files), to
// notice writes into the working directory.
func dirNames(tb testing.TB, dir string) string {
	tb.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	var s []string
	for _, e := range entries {
		s = append(s, e.Name())
	}
	return strings.Join(s, " ")
}

// --- seed corpus ---

const fuzzCorpus = "testdata/fuzz/FuzzGenerate"

// sliceDecls is how many top-level declarations a header slice holds.
const sliceDecls = 4

// slicePrelude makes slices of headers/ self-contained where they can be:
// the system headers and forward declarations of every record the
// restated headers name, so pointers to records of other slices resolve,
// and one record.
// Members of record type defined in another slice stay incomplete: those
// slices exercise the error paths.
func slicePrelude(records []string) string {
	var b strings.Builder
	b.WriteString("#include <stdint.h>\n#include <stddef.h>\n#include <errno.h>\n#include <string.h>\n#include <pthread.h>\n#include <stdio.h>\n#include <stdlib.h>\n")
	for _, r := range records {
		b.WriteString(r + ";\n")
	}
	// A record of its own: a slice of only functions, enums or macros
	// would be refused (nothing to generate) before the later stages.
	b.WriteString("struct ibv_fuzz_slice { int slice; };\n")
	return b.String()
}

var recordRE = regexp.MustCompile(`\b(struct|union) (ibv_\w+|verbs_\w+|mlx\w*|ofa_\w+)\b`)

// headerSlices cuts the restated headers into chunks of sliceDecls
// top-level declarations (or preprocessor groups), after dropping the
// include guards, the C++ wrappers and includes of each other.
func headerSlices(tb testing.TB) map[string]string {
	tb.Helper()
	paths, err := filepath.Glob("../headers/infiniband/*.h")
	if err != nil || len(paths) == 0 {
		tb.Fatalf("no restated headers in ../headers/infiniband (%v)", err)
	}
	sort.Strings(paths)
	seen := map[string]bool{}
	var records []string
	var texts []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		texts = append(texts, string(b))
		for _, m := range recordRE.FindAllString(string(b), -1) {
			if !seen[m] {
				seen[m] = true
				records = append(records, m)
			}
		}
	}
	sort.Strings(records)
	prelude := slicePrelude(records)
	slices := map[string]string{}
	for i, p := range paths {
		decls := topLevelDecls(texts[i])
		base := strings.TrimSuffix(filepath.Base(p), ".h")
		for j := 0; j < len(decls); j += sliceDecls {
			chunk := strings.Join(decls[j:min(j+sliceDecls, len(decls))], "\n")
			slices[fmt.Sprintf("slice-%s-%03d", base, j/sliceDecls)] = prelude + chunk + "\n"
		}
	}
	return slices
}

var (
	cppOpenRE  = regexp.MustCompile(`(?m)^#ifdef __cplusplus\n(.*\n)*?#endif\n`)
	guardRE    = regexp.MustCompile(`(?m)^#(ifndef|define) [A-Z_]+_H\s*$|^#endif\s*/\*.*_H.*\*/\s*$`)
	projIncRE  = regexp.MustCompile(`(?m)^#include <infiniband/.*>\s*$`)
	commentsRE = regexp.MustCompile(`(?s)/\*.*?\*/`)
)

// topLevelDecls splits a header into its top-level items: a declaration
// ending in ';' at brace depth 0, or a run of preprocessor lines.
func topLevelDecls(src string) []string {
	src = commentsRE.ReplaceAllString(src, "")
	src = cppOpenRE.ReplaceAllString(src, "")
	src = guardRE.ReplaceAllString(src, "")
	src = projIncRE.ReplaceAllString(src, "")
	// The last #endif closes the include guard.
	if i := strings.LastIndex(src, "#endif"); i >= 0 {
		src = src[:i] + src[i+len("#endif"):]
	}
	var decls []string
	var cur strings.Builder
	depth, cond := 0, 0
	flush := func() {
		if s := strings.TrimSpace(cur.String()); s != "" {
			decls = append(decls, s)
		}
		cur.Reset()
	}
	lines := strings.Split(src, "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		trim := strings.TrimSpace(line)
		if depth == 0 && strings.HasPrefix(trim, "#") {
			// A preprocessor line with its continuations; #if groups stay whole.
			cur.WriteString(line + "\n")
			for strings.HasSuffix(strings.TrimSpace(lines[i]), "\\") && i+1 < len(lines) {
				i++
				cur.WriteString(lines[i] + "\n")
			}
			switch {
			case strings.HasPrefix(trim, "#if"):
				cond++
			case strings.HasPrefix(trim, "#endif"):
				cond--
			}
			if cond == 0 {
				flush()
			}
			continue
		}
		cur.WriteString(line + "\n")
		depth += strings.Count(line, "{") - strings.Count(line, "}")
		if depth == 0 && cond == 0 && (strings.HasSuffix(trim, ";") || trim == "}") {
			flush()
		}
	}
	flush()
	return decls
}

// corpusFile is Go's fuzz corpus format for one []byte argument.
func corpusFile(data []byte) []byte {
	return []byte("go test fuzz v1\n[]byte(" + strconv.Quote(string(data)) + ")\n")
}

// readCorpusFile decodes corpusFile's format.
func readCorpusFile(b []byte) ([]byte, error) {
	s, ok := strings.CutPrefix(string(b), "go test fuzz v1\n")
	if !ok {
		return nil, fmt.Errorf("no 'go test fuzz v1' header")
	}
	s = strings.TrimSpace(s)
	inner, ok := strings.CutPrefix(s, "[]byte(")
	if !ok || !strings.HasSuffix(inner, ")") {
		return nil, fmt.Errorf("not a single []byte value")
	}
	v, err := strconv.Unquote(strings.TrimSuffix(inner, ")"))
	return []byte(v), err
}

// fuzzSeeds are the seeds the corpus must hold: every golden input and
// the slices of headers/.
func fuzzSeeds(tb testing.TB) map[string][]byte {
	seeds := map[string][]byte{}
	golden, _ := filepath.Glob("testdata/c/*.h")
	if len(golden) == 0 {
		tb.Fatal("no golden inputs in testdata/c")
	}
	for _, p := range golden {
		b, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		seeds["golden-"+strings.TrimSuffix(filepath.Base(p), ".h")] = b
	}
	for name, s := range headerSlices(tb) {
		seeds[name] = []byte(s)
	}
	return seeds
}

// TestFuzzGenerateSeeds keeps the seed corpus in step with the golden
// inputs and headers/ (go test ./gen -run TestFuzzGenerateSeeds
// -update-fuzz-seeds rewrites it), and checks that the header slices are
// useful seeds: most of them generate, so the fuzzer starts from inputs
// that reach the model, layout and emit stages.
func TestFuzzGenerateSeeds(t *testing.T) {
	want := fuzzSeeds(t)
	if *updateFuzzSeeds {
		old, _ := filepath.Glob(filepath.Join(fuzzCorpus, "golden-*"))
		olds, _ := filepath.Glob(filepath.Join(fuzzCorpus, "slice-*"))
		for _, p := range append(old, olds...) {
			os.Remove(p)
		}
		if err := os.MkdirAll(fuzzCorpus, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, data := range want {
			if err := os.WriteFile(filepath.Join(fuzzCorpus, name), corpusFile(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, data := range want {
		b, err := os.ReadFile(filepath.Join(fuzzCorpus, name))
		if err != nil {
			t.Errorf("seed %s missing (go test ./gen -run TestFuzzGenerateSeeds -update-fuzz-seeds): %v", name, err)
			continue
		}
		got, err := readCorpusFile(b)
		if err != nil {
			t.Errorf("%s/%s: %v", fuzzCorpus, name, err)
			continue
		}
		if !bytes.Equal(got, data) {
			t.Errorf("seed %s is stale (go test ./gen -run TestFuzzGenerateSeeds -update-fuzz-seeds)", name)
		}
	}
	files, _ := filepath.Glob(filepath.Join(fuzzCorpus, "slice-*"))
	for _, p := range files {
		if _, ok := want[filepath.Base(p)]; !ok {
			t.Errorf("%s is no longer a slice of headers/; rerun with -update-fuzz-seeds", p)
		}
	}
	if testing.Short() {
		return
	}
	amd64, _ := target.Lookup("amd64")
	if _, err := amd64.Compiler(); err != nil {
		t.Skipf("SKIP: generating the seeds needs the amd64 C compiler: %v", err)
	}
	var names []string
	for name := range want {
		if strings.HasPrefix(name, "slice-") {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	ok := 0
	for _, name := range names {
		inc := writeHeader(t, string(want[name]))
		_, err := generate.Run(generate.Options{
			Parse:   parse.Options{IncludeDirs: []string{inc}, Entry: parse.DefaultEntry, ScopeDir: parse.DefaultScope},
			Targets: []target.Target{amd64},
			Package: "pkg",
		})
		if err == nil {
			ok++
		} else {
			t.Logf("%s: %v", name, firstLine(err.Error()))
		}
	}
	t.Logf("%d of %d header slices generate", ok, len(names))
	if ok*2 < len(names) {
		t.Errorf("only %d of %d header slices generate: the slices no longer reach the later stages", ok, len(names))
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
