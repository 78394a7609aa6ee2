package parse

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/verbsexp/verbsexp/gen/internal/cache"
)

// noProbesEnv set to 1 translates every target on its own, as the
// generator did before probes: the tests compare the two.
const noProbesEnv = "VERBSEXP_NO_PROBES"

// Units are every target's declarations, in target order, and how each
// was had.
type Units struct {
	Units []*Unit
	Sums  []string // identify each (cache keys of what depends on them); "" without a cache
	// Notes say which targets were translated on their own, and why.
	Notes []Diag
	// Cached, Probed and Translated count the targets whose
	// declarations came from the cache, a probe of their compiler, and
	// the C front end.
	Cached, Probed, Translated int
}

// TranslateFirst gives the first target its declarations: from the C
// front end, one translation in its child process (contain.go), unless
// the cache holds them. Every target the cache holds is filled in too.
func (in *Inputs) TranslateFirst() (*Units, error) {
	n := len(in.Compilers)
	r := &Units{Units: make([]*Unit, n), Sums: make([]string, n)}
	for i, u := range in.cached {
		if u != nil {
			r.Units[i], r.Sums[i] = u, in.sums[i]
			r.Cached++
		}
	}
	if r.Units[0] == nil {
		if err := in.translate(r, []int{0}); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Probe gives every other target its declarations: the first's, laid out
// by a probe of the target's own compiler (probe.go), or from the cache.
// A target that declares otherwise than the first (a conditional group
// of the -I headers taken on one of them only, a probe that does not
// compile) is translated on its own, with a note saying where.
func (in *Inputs) Probe(r *Units) error {
	first, firstSum := r.Units[0], r.Sums[0]
	var probe, own []int
	for i := 1; i < len(in.Compilers); i++ {
		switch {
		case r.Units[i] != nil:
		case os.Getenv(noProbesEnv) == "1":
			own = append(own, i)
		default:
			if u, sum, ok := in.cachedProbe(i, firstSum); ok {
				r.Units[i], r.Sums[i] = u, sum
				r.Cached++
				continue
			}
			probe = append(probe, i)
		}
	}
	if len(probe) > 0 {
		differ, err := in.probe(r, first, firstSum, probe)
		if err != nil {
			return err
		}
		for _, i := range probe {
			if d := differ[i]; d != nil {
				arch := in.Compilers[i].Target.GoArch
				r.Notes = append(r.Notes, Diag{Pos: d.Pos, Msg: fmt.Sprintf("linux/%s declares otherwise than linux/%s: %s; it is translated on its own", arch, first.GoArch, d.Msg)})
				own = append(own, i)
			}
		}
	}
	if len(own) > 0 {
		return in.translate(r, own)
	}
	return nil
}

// translate translates the targets idx with the C front end, in one child
// process.
func (in *Inputs) translate(r *Units, idx []int) error {
	need := make([]bool, len(in.Compilers))
	for _, i := range idx {
		need[i] = true
	}
	units, sums, errs := TranslateUnits(in.Compilers, need, in.Opts, in.cache)
	if err := firstError(errs); err != nil {
		return err
	}
	for _, i := range idx {
		r.Units[i], r.Sums[i] = units[i], sums[i]
		r.Translated++
	}
	return nil
}

// probe derives the targets idx from first with their compilers'
// probes, concurrently; differ[i] says why target i cannot be.
func (in *Inputs) probe(r *Units, first *Unit, firstSum string, idx []int) (map[int]*difference, error) {
	dirs := in.Opts.IncludeDirs
	o, err := writeOverlay(dirs, first.Headers)
	if o != nil {
		defer os.RemoveAll(o.dir)
	}
	if err != nil {
		return nil, fmt.Errorf("copying the headers for the probes: %v", err)
	}
	differ := map[int]*difference{}
	errs := make([]error, len(in.Compilers))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, i := range idx {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comp := in.Compilers[i]
			u, d, err := in.probeOne(comp, first, o)
			if err != nil {
				errs[i] = err
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if d != nil {
				differ[i] = d
				return
			}
			r.Units[i] = u
			r.Probed++
		}()
	}
	wg.Wait()
	if err := firstError(errs); err != nil {
		return nil, err
	}
	for _, i := range idx {
		if differ[i] == nil {
			r.Sums[i] = in.storeProbe(i, firstSum, r.Units[i])
		}
	}
	return differ, nil
}

// probeOne compiles comp's probe of first and derives its declarations.
func (in *Inputs) probeOne(comp *Compiler, first *Unit, o *overlay) (*Unit, *difference, error) {
	scratch, err := os.MkdirTemp("", "verbsexp-probe-"+comp.Target.GoArch+"-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(scratch)
	if comp.Target.ByteOrder != "__ORDER_LITTLE_ENDIAN__" {
		return nil, &difference{Msg: "its probe would be read little-endian"}, nil
	}
	plan := newProbePlan(first, in.Opts.Entry, comp.Target.GoArch, o.markers)
	res, d, err := compileProbe(comp, plan, scratch, o.includes, o.real)
	if err != nil || d != nil {
		return nil, d, err
	}
	if len(res.read) == 0 {
		return nil, nil, fmt.Errorf("linux/%s: the probe's dependency list is empty", comp.Target.GoArch)
	}
	var read []string
	for _, p := range res.read[1:] { // the probe's own source first
		p = o.real(p)
		if markName(p, in.Opts.IncludeDirs) != "" {
			read = append(read, filepath.Clean(p))
		}
	}
	u, d := deriveUnit(first, comp.Target.GoArch, plan, res, read, o.pos)
	if d != nil {
		return nil, d, nil
	}
	if in.cache != nil {
		u.probeDeps = in.systemDeps(comp, res.read[1:], o)
	}
	return u, nil, nil
}

// probedKey is the cache key of a target's probed declarations: they
// follow from the first target's (their sum covers the -I headers and
// what the front end read) and the target's compiler and the files it
// read (the entry's dependencies, systemDeps).
func (in *Inputs) probedKey(i int, firstSum string) cache.Key {
	comp := in.Compilers[i]
	return in.cache.NewKey("probed").Add(comp.Target.GoArch, comp.ID, firstSum).Sum()
}

func (in *Inputs) cachedProbe(i int, firstSum string) (*Unit, string, bool) {
	if in.cache == nil || firstSum == "" {
		return nil, "", false
	}
	return loadUnit(in.cache, "probed", in.probedKey(i, firstSum), in.Compilers[i].Target.GoArch, in.Opts.IncludeDirs, nil)
}

func (in *Inputs) storeProbe(i int, firstSum string, u *Unit) string {
	deps := u.probeDeps
	u.probeDeps = nil
	if in.cache == nil || firstSum == "" || deps == nil {
		return ""
	}
	return storeUnit(in.cache, "probed", in.probedKey(i, firstSum), deps, u)
}

// systemDeps are the dependencies of a probe beyond the -I headers: each
// file outside them the compiler read, and, for each, its name in every
// search directory before the one it was found in (absent then: a
// header installed there later would be read instead). nil when a file
// cannot be recorded.
func (in *Inputs) systemDeps(comp *Compiler, read []string, o *overlay) []dependency {
	search := append(append([]string(nil), in.Opts.IncludeDirs...), comp.Config.SysIncludePaths...)
	buf := make([]byte, 64<<10)
	var deps []dependency
	seen := map[string]bool{}
	add := func(d dependency) {
		if !seen[d.Path] {
			seen[d.Path] = true
			deps = append(deps, d)
		}
	}
	for _, p := range read {
		p = filepath.Clean(o.real(p))
		if markName(p, in.Opts.IncludeDirs) != "" {
			continue // in the first's sum
		}
		state := recheck(dependency{Path: p, State: "sha256:"}, "", buf)
		if !strings.HasPrefix(state, "sha256:") {
			return nil
		}
		add(dependency{Path: p, State: state})
		for j, d := range search {
			rel, err := filepath.Rel(d, p)
			if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
				continue
			}
			for _, e := range search[:j] {
				q := filepath.Join(e, rel)
				add(dependency{Path: q, State: recheck(dependency{Path: q, State: "sha256:"}, "", buf)})
			}
			break
		}
	}
	if len(deps) == 0 {
		return nil
	}
	return deps
}
