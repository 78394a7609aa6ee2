// Package generate runs the pipeline (parse every target → model → layout
// → emit) and writes the package directory atomically.
package generate

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"

	"modernc.org/cc/v4"

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
}

// Run generates the package in memory.
func Run(opts Options) (*Result, error) {
	if err := parse.CheckEntry(opts.Parse); err != nil {
		return nil, err
	}
	// Compiler configurations first and one at a time (cc reads $CC), so a
	// missing cross compiler is reported before any work is done.
	cfgs := make([]*cc.Config, len(opts.Targets))
	for i, t := range opts.Targets {
		cfg, err := parse.Config(t)
		if err != nil {
			return nil, err
		}
		cfgs[i] = cfg
	}
	// One compiler check of the headers for all targets (syntax errors
	// and the inputs cc/v4 cannot survive do not depend on the target).
	if err := parse.CheckWithCompiler(opts.Targets[0].GoArch, cfgs[0], opts.Parse); err != nil {
		return nil, err
	}
	popts := opts.Parse
	popts.Checked = true
	units := make([]*parse.Unit, len(opts.Targets))
	errs := make([]error, len(opts.Targets))
	var cache cc.SourceCache
	var wg sync.WaitGroup
	for i, t := range opts.Targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			units[i], errs[i] = parse.Translate(t.GoArch, cfgs[i], popts, &cache)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
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
	hashes, err := hashInputs(pkg.Inputs)
	if err != nil {
		return nil, err
	}
	shims := shim.Build(pkg, layout.NewPlanner(pkg, 0))
	files, err := emit.Files(emit.Input{
		Pkg: pkg, Plans: plans, Command: opts.Command, GoGenerate: opts.GoGenerate, Hashes: hashes,
		Shims: shims, Entry: opts.Parse.Entry, CFlags: opts.CFlags,
	})
	if err != nil {
		return nil, err
	}
	notes := append(append([]parse.Diag(nil), pkg.Notes...), shims.Skipped...)
	return &Result{Pkg: pkg, Files: files, Notes: notes, Shims: shims}, nil
}

func hashInputs(inputs []parse.Input) ([]string, error) {
	var r []string
	for _, in := range inputs {
		b, err := os.ReadFile(in.Abs)
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
