package parse

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/gob"
	"encoding/hex"
	"fmt"
	"sync"

	"modernc.org/cc/v4"

	"github.com/verbsexp/verbsexp/gen/internal/cache"
)

// A translation is cached as its Unit (plain data; a cc/v4 AST cannot be
// stored) with its dependencies: every path the front end opened (each
// #include candidate, found or not, and each __has_include probe) with
// what it found there, the hash of the bytes read included. The key
// holds the generator's version, the compiler (Compiler.ID: its binary,
// predefined macros and search lists) and the options; an entry is used
// only while every dependency gives the same answer, so an edited
// header, a new header in an earlier -I directory or a newly installed
// libc header misses.
//
// An entry is two gob streams, the dependencies (with the unit's sum)
// and the unit, the first preceded by its length: a stale entry is
// recognised without decoding its unit.
type unitDeps struct {
	Deps []dependency
	Sum  string // UnitSum of the unit
}

// unitSum identifies a translation by what produced it: the unit's key
// (generator, compiler, options) and its dependencies, which determine
// it. Keys that depend on a translation (the rendered files) use it.
func unitSum(key cache.Key, deps []dependency) string {
	h := sha256.New()
	h.Write(key[:])
	for _, d := range deps {
		fmt.Fprintf(h, "%d:%s%d:%s", len(d.Path), d.Path, len(d.State), d.State)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func unitKey(c *cache.Cache, comp *Compiler, opts Options) (cache.Key, []string, error) {
	dirs, err := absDirs(opts.IncludeDirs)
	if err != nil {
		return cache.Key{}, nil, err
	}
	k := c.NewKey("unit").Add(comp.Target.GoArch, comp.ID, opts.Entry, opts.ScopeDir)
	for _, d := range dirs {
		k.Add("-I", d)
	}
	return k.Sum(), dirs, nil
}

// cachedTranslations is CachedUnits for a run's inputs.
func cachedTranslations(comps []*Compiler, opts Options, c *cache.Cache) ([]*Unit, []string) {
	units, sums, _ := CachedUnits(comps, opts, c)
	return units, sums
}

// CachedUnits returns, for each compiler, its translation of the headers
// from c and a sum identifying it, where c holds one whose dependencies
// all still hold (hit[i]). A damaged entry is removed. The targets are
// looked up concurrently, and the files they share checked once.
func CachedUnits(comps []*Compiler, opts Options, c *cache.Cache) (units []*Unit, sums []string, hit []bool) {
	n := len(comps)
	units, sums, hit = make([]*Unit, n), make([]string, n), make([]bool, n)
	if c == nil {
		return
	}
	memo := newRecheckMemo()
	var wg sync.WaitGroup
	for i, comp := range comps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			units[i], sums[i], hit[i] = cachedUnit(comp, opts, c, memo)
		}()
	}
	wg.Wait()
	return
}

func cachedUnit(comp *Compiler, opts Options, c *cache.Cache, memo *recheckMemo) (*Unit, string, bool) {
	key, dirs, err := unitKey(c, comp, opts)
	if err != nil {
		return nil, "", false
	}
	return loadUnit(c, "unit", key, comp.Target.GoArch, dirs, memo)
}

// loadUnit returns the unit of goarch stored under key in c, and its sum,
// while every dependency still holds (dirs are the -I directories, whose
// headers are served marked). A damaged entry is removed.
func loadUnit(c *cache.Cache, kind string, key cache.Key, goarch string, dirs []string, memo *recheckMemo) (*Unit, string, bool) {
	b, ok := c.Get(kind, key)
	if !ok {
		return nil, "", false
	}
	damaged := func() (*Unit, string, bool) {
		c.Discard(kind, key)
		return nil, "", false
	}
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return damaged()
	}
	var d unitDeps
	if gob.NewDecoder(bytes.NewReader(b[k:k+int(n)])).Decode(&d) != nil || len(d.Deps) == 0 || d.Sum != unitSum(key, d.Deps) {
		return damaged()
	}
	if !stillValid(d.Deps, dirs, memo) {
		return nil, "", false
	}
	var u Unit
	if gob.NewDecoder(bytes.NewReader(b[k+int(n):])).Decode(&u) != nil || u.GoArch != goarch {
		return damaged()
	}
	return &u, d.Sum, true
}

// storeUnit stores u under key with its dependencies and returns its sum
// ("" when it cannot be stored).
func storeUnit(c *cache.Cache, kind string, key cache.Key, deps []dependency, u *Unit) string {
	sum := unitSum(key, deps)
	var d, un bytes.Buffer
	if gob.NewEncoder(&d).Encode(unitDeps{deps, sum}) != nil || gob.NewEncoder(&un).Encode(u) != nil {
		return ""
	}
	b := binary.AppendUvarint(nil, uint64(d.Len()))
	b = append(append(b, d.Bytes()...), un.Bytes()...)
	c.Put(kind, key, b)
	return sum
}

// TranslateUnit is Translate for comp that records what the front end
// read and stores the result in c. With a nil c it only translates, and
// the sum is "".
func TranslateUnit(comp *Compiler, opts Options, src *cc.SourceCache, c *cache.Cache) (*Unit, string, error) {
	if c == nil {
		u, err := Translate(comp.Target.GoArch, comp.Config, opts, src)
		return u, "", err
	}
	rec := newDepRecorder()
	opts.record = rec
	u, err := Translate(comp.Target.GoArch, comp.Config, opts, src)
	if err != nil {
		return nil, "", err
	}
	deps, ok := rec.deps()
	key, _, err := unitKey(c, comp, opts)
	if !ok || len(deps) == 0 || err != nil {
		return u, "", nil // translated, but not cacheable: nothing depends on it
	}
	return u, storeUnit(c, "unit", key, deps, u), nil
}
