package parse

import (
	"bytes"
	"crypto/sha256"
	"encoding/gob"
	"encoding/hex"
	"encoding/json"
	"io/fs"

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
type unitEntry struct {
	Deps []dependency
	Unit *Unit
	Sum  string // UnitSum of Unit
}

// UnitSum is a hash of everything in u, for keys that depend on a
// translation (the rendered files).
func UnitSum(u *Unit) (string, error) {
	// JSON, not gob: gob's bytes depend on what the process encoded
	// before (its type ids are global), a key's must not.
	h := sha256.New()
	if err := json.NewEncoder(h).Encode(u); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// frontEndFS is the FS every translation reads through, and what a cached
// translation's dependencies are checked with.
func frontEndFS(dirs []string, refused *error) fs.FS {
	return safeFS{dirs: dirs, refused: refused}
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

// CachedUnit returns comp's translation of the headers from c, and its
// UnitSum, if c holds one whose dependencies all still hold. A damaged
// entry is removed.
func CachedUnit(comp *Compiler, opts Options, c *cache.Cache) (*Unit, string, bool) {
	if c == nil {
		return nil, "", false
	}
	key, dirs, err := unitKey(c, comp, opts)
	if err != nil {
		return nil, "", false
	}
	b, ok := c.Get("unit", key)
	if !ok {
		return nil, "", false
	}
	var e unitEntry
	if gob.NewDecoder(bytes.NewReader(b)).Decode(&e) != nil || e.Unit == nil || e.Unit.GoArch != comp.Target.GoArch || len(e.Deps) == 0 || e.Sum == "" {
		c.Discard("unit", key)
		return nil, "", false
	}
	var refused error
	if !stillValid(frontEndFS(dirs, &refused), e.Deps) || refused != nil {
		return nil, "", false
	}
	return e.Unit, e.Sum, true
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
	sum, err := UnitSum(u)
	if err != nil {
		return u, "", nil
	}
	deps, ok := rec.deps()
	if !ok || len(deps) == 0 {
		return u, sum, nil
	}
	key, _, err := unitKey(c, comp, opts)
	if err != nil {
		return u, sum, nil
	}
	var b bytes.Buffer
	if gob.NewEncoder(&b).Encode(unitEntry{deps, u, sum}) == nil {
		c.Put("unit", key, b.Bytes())
	}
	return u, sum, nil
}
