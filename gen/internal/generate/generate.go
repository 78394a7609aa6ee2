// Package generate runs the pipeline (check the inputs → translate once →
// probe every other target → model → layout → emit; see Run) and writes
// the package directory atomically.
package generate

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"go/format"
	"slices"
	"strings"
	"time"

	"github.com/verbsexp/verbsexp/gen/internal/cache"
	"github.com/verbsexp/verbsexp/gen/internal/emit"
	"github.com/verbsexp/verbsexp/gen/internal/layout"
	"github.com/verbsexp/verbsexp/gen/internal/model"
	"github.com/verbsexp/verbsexp/gen/internal/parse"
	"github.com/verbsexp/verbsexp/gen/internal/shim"
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
	// Probed and Translated count the targets whose declarations came
	// from a probe of their compiler and from the C front end.
	Probed, Translated int
	// Stages is the CPU time of each stage of the run, compilers and the
	// front end's child process included (make bench-gen prints them).
	Stages []Stage
}

// Cached counts the steps the cache answered in a run.
type Cached struct {
	Units int  // targets whose declarations came from the cache
	Files bool // the rendered files came from the cache
}

// Stage is one stage of a run and the CPU time it took, and how much of
// it the C compilers took (parse.CompilerCPU).
type Stage struct {
	Name      string
	CPU       time.Duration
	Compilers time.Duration
}

// Run generates the package in memory, in stages:
//
//  1. check the inputs, once (parse.CheckInputs): the entry, the -I
//     directories, every target's compiler, the #include graph, and the
//     headers with the first target's compiler;
//  2. translate once: the first target's declarations from the C front
//     end (parse.Inputs.TranslateFirst);
//  3. probe: every other target's layout from its own compiler, the same
//     declarations (parse.Inputs.Probe; a target that declares otherwise
//     is translated on its own, with a note);
//  4. model: one package, every Go name (model.Build);
//  5. lay out every record for every target (layout);
//  6. emit the files (emit.Files).
//
// Each target's declarations and the rendered files are cached (see
// package cache): a repeated run with unchanged inputs translates,
// probes and renders nothing, and its output is the same bytes as
// without the cache.
func Run(opts Options) (*Result, error) {
	c := cache.Open()
	res := &Result{}
	clock := startStages(&res.Stages)
	// 1. Check the inputs.
	in, err := parse.CheckInputs(opts.Parse, opts.Targets, c)
	if err != nil {
		return nil, err
	}
	clock.done("check inputs")
	// 2. Translate once.
	units, err := in.TranslateFirst()
	if err != nil {
		return nil, err
	}
	clock.done("front end")
	// 3. Probe the other targets.
	if err := in.Probe(units); err != nil {
		return nil, err
	}
	clock.done("probes")
	res.Cached.Units, res.Probed, res.Translated = units.Cached, units.Probed, units.Translated
	// 4. Model.
	pkg, err := model.Build(opts.Package, units.Units)
	if err != nil {
		return nil, err
	}
	if err := checkInScope(opts.Parse, units.Units[0], pkg); err != nil {
		return nil, err
	}
	hashes, sources, err := readInputs(opts, pkg)
	if err != nil {
		return nil, err
	}
	shims := shim.Build(pkg, layout.NewPlanner(pkg, 0))
	check := pkg.Claim("the check of the headers ("+emit.HeadersFile+")", "CheckHeaders", "_", parse.Pos{})
	res.Pkg, res.Shims = pkg, shims
	res.Notes = append(append(append(append(append([]parse.Diag(nil), pkg.Notes...), shims.Skipped...), shims.Renamed...), shims.SliceNotes...), units.Notes...)
	// By position (file, then line and column as numbers), then text.
	slices.SortStableFunc(res.Notes, func(a, b parse.Diag) int {
		return cmp.Or(strings.Compare(a.Pos.File, b.Pos.File), cmp.Compare(a.Pos.Line, b.Pos.Line),
			cmp.Compare(a.Pos.Col, b.Pos.Col), strings.Compare(a.Msg, b.Msg))
	})
	key, keyed := filesKey(c, opts, units.Sums, hashes)
	if keyed {
		if files, ok := cachedFiles(c, key); ok {
			res.Files, res.Cached.Files = files, true
			clock.done("model")
			return res, nil
		}
	}
	// 5. Lay out.
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
	clock.done("model and layout")
	// 6. Emit.
	files, err := emit.Files(emit.Input{
		Pkg: pkg, Plans: plans, Command: opts.Command, GoGenerate: opts.GoGenerate, Hashes: hashes,
		Shims: shims, Entry: opts.Parse.Entry, CFlags: opts.CFlags, Format: cachedFormat(c),
		Sources: sources, HeadersCheck: check,
	})
	if err != nil {
		return nil, err
	}
	if keyed {
		storeFiles(c, key, files)
	}
	res.Files = files
	clock.done("emit")
	return res, nil
}

// cachedFormat formats Go source as go/format.Source does, and keeps
// each file's formatted text in c under the hash of its unformatted
// one: when headers change, most files render the same source as in the
// last run (no layout moves when a constant is added: only consts.go is
// formatted again), and formatting is most of rendering's cost. Without
// a cache it is go/format.Source.
func cachedFormat(c *cache.Cache) func([]byte) ([]byte, error) {
	if c == nil {
		return format.Source
	}
	return func(src []byte) ([]byte, error) {
		sum := sha256.Sum256(src)
		key := c.NewKey("gofmt").Add(hex.EncodeToString(sum[:])).Sum()
		if b, ok := c.Get("gofmt", key); ok {
			return b, nil
		}
		b, err := format.Source(src)
		if err == nil {
			c.Put("gofmt", key, b)
		}
		return b, err
	}
}

// stageClock records the CPU time of consecutive stages.
type stageClock struct {
	stages          *[]Stage
	last, compilers time.Duration
}

func startStages(stages *[]Stage) *stageClock {
	return &stageClock{stages, processCPU(), parse.CompilerCPU()}
}

// done ends the stage name: the CPU time since the last one ended.
func (c *stageClock) done(name string) {
	now, comp := processCPU(), parse.CompilerCPU()
	*c.stages = append(*c.stages, Stage{name, now - c.last, comp - c.compilers})
	c.last, c.compilers = now, comp
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

// encodeFiles stores files as a count, then each name, content and link
// target with its length (uvarints): a megabyte of Go source decodes in
// a copy.
func encodeFiles(files []emit.File) []byte {
	n := binary.MaxVarintLen64
	for _, f := range files {
		n += 3*binary.MaxVarintLen64 + len(f.Name) + len(f.Data) + len(f.Link)
	}
	b := make([]byte, 0, n)
	b = binary.AppendUvarint(b, uint64(len(files)))
	for _, f := range files {
		for _, field := range [][]byte{[]byte(f.Name), f.Data, []byte(f.Link)} {
			b = binary.AppendUvarint(b, uint64(len(field)))
			b = append(b, field...)
		}
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
		link, ok3 := next()
		if !ok1 || !ok2 || !ok3 || len(name) == 0 || len(link) > 0 && (len(data) > 0 || !emit.LinkName(string(name))) {
			return nil, false
		}
		files[i] = emit.File{Name: string(name), Data: data, Link: string(link)}
	}
	return files, len(b) == 0
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
