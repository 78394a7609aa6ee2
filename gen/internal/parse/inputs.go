package parse

import (
	"sync"

	"github.com/verbsexp/verbsexp/gen/internal/cache"
	"github.com/verbsexp/verbsexp/internal/target"
)

// Inputs are a run's inputs, checked: the options with the -I
// directories made absolute, each target's compiler proven its
// target's, the entry header's path, and what the cache holds.
type Inputs struct {
	Opts      Options // IncludeDirs absolute; Checked when the compiler accepted the headers
	Compilers []*Compiler
	// entry is the entry header's path ("" without a compiler to check
	// the headers against: a Config without CC, in tests).
	entry string
	cache *cache.Cache
	// cached[i] is target i's translation from the cache (nil for none),
	// with its sum.
	cached []*Unit
	sums   []string
}

// CheckInputs checks everything a run reads, once, before anything is
// translated:
//
//  1. the entry header is a regular file in an -I directory (CheckEntry:
//     a wrong -I is named, rdma-core's headers recognised);
//  2. every target's compiler runs and is its target's, with its libc
//     headers (FindCompiler, concurrently: each may run its compiler);
//  3. the #include graph from the entry holds regular files of bounded
//     size only (checkIncludes);
//  4. the translated target's compiler accepts the headers
//     (compilerAccepts: the C front end reads only what it accepts), but
//     only when its translation is not in the cache, where it passed the
//     same check with the same files.
//
// A missing or wrong compiler is refused before any other work; c may be
// nil.
func CheckInputs(opts Options, targets []target.Target, c *cache.Cache) (*Inputs, error) {
	if err := CheckEntry(opts); err != nil {
		return nil, err
	}
	dirs, err := absDirs(opts.IncludeDirs)
	if err != nil {
		return nil, err
	}
	opts.IncludeDirs = dirs
	n := len(targets)
	in := &Inputs{Opts: opts, Compilers: make([]*Compiler, n), cache: c}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in.Compilers[i], errs[i] = FindCompiler(t, c)
		}()
	}
	wg.Wait()
	if err := firstError(errs); err != nil {
		return nil, err
	}
	first := in.Compilers[0]
	if in.entry, err = checkEntryIncludes(first.Target.GoArch, first.Config, dirs, opts.Entry); err != nil {
		return nil, err
	}
	in.cached, in.sums = cachedTranslations(in.Compilers, opts, c)
	if in.cached[0] == nil && in.entry != "" && first.Config.CC != "" {
		if err := compilerAccepts(first.Target.GoArch, first.Config, dirs, in.entry); err != nil {
			return nil, err
		}
	}
	in.Opts.Checked = true
	return in, nil
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
