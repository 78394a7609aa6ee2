// Package generate runs the pipeline (parse every target → model → layout
// → emit) and writes the package directory atomically.
package generate

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/verbsexp/verbsexp/gen/internal/cache"
	"github.com/verbsexp/verbsexp/gen/internal/emit"
	"github.com/verbsexp/verbsexp/gen/internal/layout"
	"github.com/verbsexp/verbsexp/gen/internal/model"
	"github.com/verbsexp/verbsexp/gen/internal/parse"
	"github.com/verbsexp/verbsexp/gen/internal/shim"
	"github.com/verbsexp/verbsexp/internal/inputfile"
	"github.com/verbsexp/verbsexp/internal/target"
)

// Options is a generator run.
type Options struct {
	Parse      parse.Options
	Targets    []target.Target
	Package    string
	Command    string   // recorded at the top of every file
	GoGenerate string   // directive for doc.go; "" for none
	CFlags     []string // #cgo CFLAGS of shims.go (include directories)
}

// Result is the rendered package and what was noticed on the way.
type Result struct {
	Pkg   *model.Package
	Files []emit.File
	Notes []parse.Diag
	Shims *shim.Plan
	// Cached says which steps were answered by the cache.
	Cached Cached
}

// Cached counts the steps the cache answered in a run.
type Cached struct {
	Units int  // targets whose translation came from the cache
	Files bool // the rendered files came from the cache
}

// Run generates the package in memory. Each target's translation and the
// rendered files are cached (see package cache): a repeated run with
// unchanged inputs translates and renders nothing, and its output is the
// same bytes as without the cache.
func Run(opts Options) (*Result, error) {
	if err := parse.CheckEntry(opts.Parse); err != nil {
		return nil, err
	}
	c := cache.Open()
	n := len(opts.Targets)
	// Every target's compiler is found and proven first (concurrently:
	// each may run its compiler), so a missing or wrong compiler is
	// reported before any work is done.
	comps := make([]*parse.Compiler, n)
	errs := make([]error, n)
	parallel(n, func(i int) { comps[i], errs[i] = parse.FindCompiler(opts.Targets[i], c) })
	if err := firstError(errs); err != nil {
		return nil, err
	}
	// sums identify the translations ("" without a cache).
	units, sums, hit := parse.CachedUnits(comps, opts.Parse, c)
	res := &Result{}
	for _, h := range hit {
		if h {
			res.Cached.Units++
		}
	}
	if res.Cached.Units == n {
		if err := parse.CheckCachedInputs(opts.Targets[0].GoArch, comps[0].Config, opts.Parse); err != nil {
			return nil, err
		}
	} else {
		// One compiler check of the headers for all targets (syntax
		// errors and the inputs cc/v4 cannot survive do not depend on
		// the target). A cached translation passed it with the same
		// files, so it runs only when something is translated.
		if err := parse.CheckWithCompiler(opts.Targets[0].GoArch, comps[0].Config, opts.Parse); err != nil {
			return nil, err
		}
		popts := opts.Parse
		popts.Checked = true
		// In one child process, under limits (parse/contain.go).
		need := make([]bool, n)
		for i := range need {
			need[i] = !hit[i]
		}
		tu, ts, terrs := parse.TranslateUnits(comps, need, popts, c)
		for i := range need {
			if need[i] {
				units[i], sums[i], errs[i] = tu[i], ts[i], terrs[i]
			}
		}
		if err := firstError(errs); err != nil {
			return nil, err
		}
	}
	pkg, err := model.Build(opts.Package, units)
	if err != nil {
		return nil, err
	}
	if err := checkInScope(opts.Parse, units[0], pkg); err != nil {
		return nil, err
	}
	hashes, err := hashInputs(pkg.Inputs)
	if err != nil {
		return nil, err
	}
	shims := shim.Build(pkg, layout.NewPlanner(pkg, 0))
	res.Pkg, res.Shims = pkg, shims
	res.Notes = append(append(append([]parse.Diag(nil), pkg.Notes...), shims.Skipped...), shims.Renamed...)
	// By position (file, then line and column as numbers), then text.
	slices.SortStableFunc(res.Notes, func(a, b parse.Diag) int {
		return cmp.Or(strings.Compare(a.Pos.File, b.Pos.File), cmp.Compare(a.Pos.Line, b.Pos.Line),
			cmp.Compare(a.Pos.Col, b.Pos.Col), strings.Compare(a.Msg, b.Msg))
	})
	key, keyed := filesKey(c, opts, sums, hashes)
	if keyed {
		if files, ok := cachedFiles(c, key); ok {
			res.Files, res.Cached.Files = files, true
			return res, nil
		}
	}
	plans := make([][]*layout.Plan, len(pkg.Arches))
	for i := range pkg.Arches {
		pl := layout.NewPlanner(pkg, i)
		for _, r := range pkg.Records {
			p, err := pl.Plan(r)
			if err != nil {
				return nil, err
			}
			plans[i] = append(plans[i], p)
		}
	}
	files, err := emit.Files(emit.Input{
		Pkg: pkg, Plans: plans, Command: opts.Command, GoGenerate: opts.GoGenerate, Hashes: hashes,
		Shims: shims, Entry: opts.Parse.Entry, CFlags: opts.CFlags,
	})
	if err != nil {
		return nil, err
	}
	if keyed {
		storeFiles(c, key, files)
	}
	res.Files = files
	return res, nil
}

// parallel runs f(0) … f(n-1) concurrently and waits for them.
func parallel(n int, f func(int)) {
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i)
		}()
	}
	wg.Wait()
}

// firstError returns the first error in target order, so the report does
// not depend on which goroutine finished first.
func firstError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// filesKey keys the rendered files by everything rendering reads: the
// options (package name, command, flags, targets, entry), every target's
// declarations (the sums parse.CachedUnits and parse.TranslateUnit
// return) and the hashes of the headers in scope. Rendering is a function
// of these and of the generator's code (in every key).
func filesKey(c *cache.Cache, opts Options, sums, hashes []string) (cache.Key, bool) {
	if c == nil || slices.Contains(sums, "") {
		return cache.Key{}, false
	}
	o, err := json.Marshal(opts)
	if err != nil {
		return cache.Key{}, false
	}
	k := c.NewKey("files").Add(string(o))
	k.Add(sums...)
	k.Add(hashes...)
	return k.Sum(), true
}

func cachedFiles(c *cache.Cache, key cache.Key) ([]emit.File, bool) {
	b, ok := c.Get("files", key)
	if !ok {
		return nil, false
	}
	files, ok := decodeFiles(b)
	if !ok {
		c.Discard("files", key)
		return nil, false
	}
	return files, true
}

func storeFiles(c *cache.Cache, key cache.Key, files []emit.File) {
	c.Put("files", key, encodeFiles(files))
}

// encodeFiles stores files as a count, then each name and content with
// its length (uvarints): a megabyte of Go source decodes in a copy.
func encodeFiles(files []emit.File) []byte {
	var b []byte
	b = binary.AppendUvarint(b, uint64(len(files)))
	for _, f := range files {
		b = binary.AppendUvarint(b, uint64(len(f.Name)))
		b = append(b, f.Name...)
		b = binary.AppendUvarint(b, uint64(len(f.Data)))
		b = append(b, f.Data...)
	}
	return b
}

func decodeFiles(b []byte) ([]emit.File, bool) {
	next := func() ([]byte, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, false
		}
		r := b[k : k+int(n)]
		b = b[k+int(n):]
		return r, true
	}
	n, k := binary.Uvarint(b)
	if k <= 0 || n == 0 || n > uint64(len(b)) {
		return nil, false
	}
	b = b[k:]
	files := make([]emit.File, n)
	for i := range files {
		name, ok1 := next()
		data, ok2 := next()
		if !ok1 || !ok2 || len(name) == 0 {
			return nil, false
		}
		files[i] = emit.File{Name: string(name), Data: data}
	}
	return files, len(b) == 0
}

func hashInputs(inputs []parse.Input) ([]string, error) {
	var r []string
	for _, in := range inputs {
		b, err := inputfile.Read(in.Abs, parse.MaxHeaderBytes, "it changed since it was read (the generator reads headers of at most that size)")
		if err != nil {
			return nil, fmt.Errorf("hashing %s: %v", in.Path, err)
		}
		sum := sha256.Sum256(b)
		r = append(r, hex.EncodeToString(sum[:]))
	}
	return r, nil
}

// checkInScope refuses a package without records: a -scope that names no
// header read (a typo: -scope infiniban) or headers that declare no
// struct or union would otherwise replace -o with an empty package.
func checkInScope(opts parse.Options, u *parse.Unit, pkg *model.Package) error {
	if len(pkg.Records) > 0 {
		return nil
	}
	var in []string
	tops := map[string]bool{}
	var dirs []string
	for _, p := range u.Read {
		if opts.ScopeDir == "" || strings.HasPrefix(p, opts.ScopeDir+"/") {
			in = append(in, p)
		}
		top, _, ok := strings.Cut(p, "/")
		if !ok {
			top = `"" (the -I directories themselves)`
		}
		if !tops[top] {
			tops[top] = true
			dirs = append(dirs, top)
		}
	}
	if len(in) == 0 {
		read := "no header was read from the -I directories"
		if len(dirs) > 0 {
			read = "the headers read from the -I directories are under: " + strings.Join(dirs, ", ")
		}
		return fmt.Errorf("-scope %q: no header in scope (%s); pass -scope with one of them, or -scope \"\" for every header of the -I directories (nothing was written)", opts.ScopeDir, read)
	}
	if len(in) > 5 {
		in = append(in[:5], "…")
	}
	return fmt.Errorf("-scope %q: the headers in scope (%s) declare no struct or union: there is nothing to generate (nothing was written)", opts.ScopeDir, strings.Join(in, ", "))
}
