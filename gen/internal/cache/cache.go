// Package cache keeps the generator's intermediate results between runs,
// in os.UserCacheDir()/verbsexp/v2: the target compilers' answers, each
// target's declarations in scope and the rendered package. It is an
// optimisation, never a source of truth:
//
//   - every key includes the generator's version (the build ID of the
//     running executable), so a rebuilt generator never reads what an
//     older one wrote;
//   - every entry carries the sha256 of its payload; a truncated, damaged
//     or foreign entry is ignored and removed, and the caller computes and
//     writes it again;
//   - callers validate what they read (the files an entry depends on, the
//     compiler it describes) before using it;
//   - writes are atomic (a temporary file renamed into place), so
//     concurrent runs and killed runs leave whole entries or none;
//   - the directory is kept under MaxBytes, oldest entries removed first.
//
// VERBSEXP_NO_CACHE=1 turns it off: Open returns nil, and a nil *Cache
// caches nothing.
package cache

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/verbsexp/verbsexp/internal/inputfile"
)

// layout names the directory layout and entry encoding; a change to
// either gets a new directory, so old and new generators never meet.
const layout = "v2"

// magic starts every entry, followed by a line with the entry's key and
// one with the sha256 of the payload (both hex), then the payload. The
// key inside makes an entry copied or renamed under another key a miss.
const magic = "verbsexp-cache " + layout + "\n"

// MaxBytes bounds the cache directory; when a write takes it over, the
// least recently used entries go until it is under three quarters.
var MaxBytes int64 = 256 << 20

// Cache is a cache directory. The zero of *Cache (nil) caches nothing.
type Cache struct {
	dir     string
	version string

	mu      sync.Mutex
	size    int64 // estimated bytes in dir; -1 before the first walk
	pruning bool
}

var (
	versionOnce sync.Once
	genVersion  string
	openMu      sync.Mutex
	opened      = map[string]*Cache{} // one per directory: they share the size estimate
)

// Open returns the user's cache, or nil when caching is off
// (VERBSEXP_NO_CACHE set, no cache directory, or no way to tell this
// generator's version).
func Open() *Cache {
	if os.Getenv("VERBSEXP_NO_CACHE") != "" {
		return nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return nil
	}
	versionOnce.Do(func() { genVersion, _ = version() })
	if genVersion == "" {
		return nil
	}
	dir := filepath.Join(base, "verbsexp", layout)
	openMu.Lock()
	defer openMu.Unlock()
	if c, ok := opened[dir]; ok {
		return c
	}
	c := At(dir, genVersion)
	opened[dir] = c
	return c
}

// At returns a cache in dir with the given version (for tests).
func At(dir, version string) *Cache { return &Cache{dir: dir, version: version, size: -1} }

// Dir is the cache directory ("" for a nil cache).
func (c *Cache) Dir() string {
	if c == nil {
		return ""
	}
	return c.dir
}

// version identifies the running generator: the Go build ID of its
// executable (a hash of every input of the build, so any change to the
// generator's code or its dependencies changes it), or else the sha256
// of the executable.
func version() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	if id, err := goBuildID(exe); err == nil && id != "" {
		return "buildid:" + id, nil
	}
	f, err := os.Open(exe)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// goBuildID reads the Go build ID note of an ELF executable.
func goBuildID(exe string) (string, error) {
	f, err := elf.Open(exe)
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := f.Section(".note.go.buildid")
	if s == nil {
		return "", errors.New("no .note.go.buildid")
	}
	b, err := s.Data()
	if err != nil {
		return "", err
	}
	// namesz, descsz, type, "Go\x00\x00", desc
	if len(b) < 16 {
		return "", errors.New("short note")
	}
	descsz := binary.LittleEndian.Uint32(b[4:8])
	if f.ByteOrder == binary.BigEndian {
		descsz = binary.BigEndian.Uint32(b[4:8])
	}
	if 16+int(descsz) > len(b) || string(b[12:14]) != "Go" {
		return "", errors.New("malformed note")
	}
	return string(b[16 : 16+descsz]), nil
}

// Key is the hash an entry is stored under.
type Key [sha256.Size]byte

func (k Key) String() string { return hex.EncodeToString(k[:]) }

// KeyBuilder hashes the parts of a key: the cache's generator version
// first, then each part with its length, so parts cannot run together.
type KeyBuilder struct{ buf bytes.Buffer }

// NewKey starts the key of an entry of kind.
func (c *Cache) NewKey(kind string) *KeyBuilder {
	k := &KeyBuilder{}
	v := ""
	if c != nil {
		v = c.version
	}
	return k.Add(layout).Add(v).Add(kind)
}

// Add appends a part.
func (k *KeyBuilder) Add(parts ...string) *KeyBuilder {
	for _, p := range parts {
		fmt.Fprintf(&k.buf, "%d:%s;", len(p), p)
	}
	return k
}

// Sum returns the key.
func (k *KeyBuilder) Sum() Key { return sha256.Sum256(k.buf.Bytes()) }

func (c *Cache) path(kind string, k Key) string {
	s := k.String()
	return filepath.Join(c.dir, kind, s[:2], s)
}

// Get returns the payload of an entry. A missing entry is a miss; a
// damaged one (wrong header, checksum mismatch, unreadable) is removed
// and is a miss too, so the caller writes it again.
func (c *Cache) Get(kind string, k Key) ([]byte, bool) {
	if c == nil {
		return nil, false
	}
	file := c.path(kind, k)
	b, err := inputfile.Read(file, maxEntryBytes, "not a cache entry")
	if err != nil {
		if errors.Is(err, inputfile.ErrNotRegular) || errors.Is(err, inputfile.ErrTooLarge) {
			os.Remove(file) // a FIFO or a device is never read, and no entry is that large
		}
		return nil, false
	}
	payload, ok := decode(b, k)
	if !ok {
		os.Remove(file)
		return nil, false
	}
	// Recently used entries survive pruning.
	now := time.Now()
	os.Chtimes(file, now, now)
	return payload, true
}

// maxEntryBytes bounds the entries Get reads: the largest, a package's
// rendered files, is ~2 MiB for the real headers.
const maxEntryBytes = 256 << 20

// Discard removes an entry whose payload its reader found unusable.
func (c *Cache) Discard(kind string, k Key) {
	if c == nil {
		return
	}
	os.Remove(c.path(kind, k))
}

func decode(b []byte, k Key) ([]byte, bool) {
	const hexLen = 2 * sha256.Size
	rest, ok := bytes.CutPrefix(b, []byte(magic))
	if !ok || len(rest) < 2*(hexLen+1) || rest[hexLen] != '\n' || rest[2*hexLen+1] != '\n' {
		return nil, false
	}
	key, sum, payload := rest[:hexLen], rest[hexLen+1:2*hexLen+1], rest[2*hexLen+2:]
	want := sha256.Sum256(payload)
	if string(key) != k.String() || string(sum) != hex.EncodeToString(want[:]) {
		return nil, false
	}
	return payload, true
}

// Put stores an entry, atomically. Failures are ignored: they only cost
// a later run the work.
func (c *Cache) Put(kind string, k Key, payload []byte) {
	if c == nil {
		return
	}
	file := c.path(kind, k)
	dir := filepath.Dir(file)
	if os.MkdirAll(dir, 0o755) != nil {
		return
	}
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return
	}
	sum := sha256.Sum256(payload)
	var w bytes.Buffer
	w.Grow(len(magic) + 4*sha256.Size + 2)
	w.WriteString(magic)
	w.WriteString(k.String())
	w.WriteByte('\n')
	w.WriteString(hex.EncodeToString(sum[:]))
	w.WriteByte('\n')
	// The header, then the payload as it is (a megabyte of rendered
	// files is not copied again).
	_, werr := tmp.Write(w.Bytes())
	if werr == nil {
		_, werr = tmp.Write(payload)
	}
	if cerr := tmp.Close(); werr != nil || cerr != nil || os.Rename(tmp.Name(), file) != nil {
		os.Remove(tmp.Name())
		return
	}
	c.grew(int64(w.Len() + len(payload)))
}

// grew accounts for a write and prunes when the directory is over
// MaxBytes. The directory is walked once per Cache, then the estimate
// grows with each write.
func (c *Cache) grew(n int64) {
	c.mu.Lock()
	if c.size >= 0 {
		c.size += n
	}
	walk := (c.size < 0 || c.size > MaxBytes) && !c.pruning
	if walk {
		c.pruning = true
	}
	c.mu.Unlock()
	if !walk {
		return
	}
	size := c.prune()
	c.mu.Lock()
	c.size, c.pruning = size, false
	c.mu.Unlock()
}

// prune removes the least recently used entries while the directory is
// over MaxBytes, down to three quarters of it, and temporary files that
// killed writers left; it returns the bytes left.
func (c *Cache) prune() int64 {
	type entry struct {
		path string
		size int64
		mod  time.Time
	}
	var all []entry
	var total int64
	filepath.WalkDir(c.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".tmp-") {
			if time.Since(fi.ModTime()) > 10*time.Minute {
				os.Remove(p)
			}
			return nil
		}
		all = append(all, entry{p, fi.Size(), fi.ModTime()})
		total += fi.Size()
		return nil
	})
	if total <= MaxBytes {
		return total
	}
	sort.Slice(all, func(i, j int) bool { return all[i].mod.Before(all[j].mod) })
	for _, e := range all {
		if total <= MaxBytes*3/4 {
			break
		}
		if os.Remove(e.path) == nil {
			total -= e.size
		}
	}
	return total
}
