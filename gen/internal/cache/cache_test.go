package cache

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestPutGet(t *testing.T) {
	c := At(t.TempDir(), "v")
	k := c.NewKey("unit").Add("a", "b").Sum()
	if _, ok := c.Get("unit", k); ok {
		t.Fatal("hit in an empty cache")
	}
	c.Put("unit", k, []byte("payload"))
	b, ok := c.Get("unit", k)
	if !ok || string(b) != "payload" {
		t.Fatalf("got %q %v", b, ok)
	}
	if _, ok := c.Get("files", k); ok {
		t.Error("an entry of one kind found under another")
	}
	c.Discard("unit", k)
	if _, ok := c.Get("unit", k); ok {
		t.Error("discarded entry still found")
	}
}

// TestKeys: parts cannot run together, and the generator's version is
// in every key.
func TestKeys(t *testing.T) {
	c := At(t.TempDir(), "v1")
	if c.NewKey("k").Add("ab", "c").Sum() == c.NewKey("k").Add("a", "bc").Sum() {
		t.Error(`"ab","c" and "a","bc" share a key`)
	}
	if c.NewKey("k").Add("a").Sum() == At(c.Dir(), "v2").NewKey("k").Add("a").Sum() {
		t.Error("two generator versions share a key")
	}
	if c.NewKey("k").Add("a").Sum() == c.NewKey("j").Add("a").Sum() {
		t.Error("two kinds share a key")
	}
	// A new version does not read the old version's entries.
	k1 := c.NewKey("k").Add("a").Sum()
	c.Put("k", k1, []byte("old"))
	v2 := At(c.Dir(), "v2")
	if _, ok := v2.Get("k", v2.NewKey("k").Add("a").Sum()); ok {
		t.Error("a newer generator read an older one's entry")
	}
}

// TestDamagedEntries: whatever happened to an entry's file, Get returns
// the payload that was put or a miss (and removes the file), never
// something else.
func TestDamagedEntries(t *testing.T) {
	c := At(t.TempDir(), "v")
	k := c.NewKey("unit").Add("x").Sum()
	other := c.NewKey("unit").Add("y").Sum()
	payload := bytes.Repeat([]byte("0123456789"), 100)
	c.Put("unit", other, []byte("another entry"))
	otherFile, _ := os.ReadFile(c.path("unit", other))
	damages := map[string]func([]byte) []byte{
		"empty":       func(b []byte) []byte { return nil },
		"truncated":   func(b []byte) []byte { return b[:len(b)-1] },
		"header only": func(b []byte) []byte { return b[:len(magic)+10] },
		"flipped bit": func(b []byte) []byte { b[len(b)-5] ^= 1; return b },
		"sum changed": func(b []byte) []byte { b[len(magic)+2*32+3] ^= 1; return b },
		"appended":    func(b []byte) []byte { return append(b, 'x') },
		"old layout":  func(b []byte) []byte { return bytes.Replace(b, []byte(layout), []byte("v1"), 1) },
		"other key":   func(b []byte) []byte { return append([]byte(nil), otherFile...) },
		"garbage":     func(b []byte) []byte { return []byte("\x00\xff garbage") },
	}
	for name, damage := range damages {
		t.Run(name, func(t *testing.T) {
			c.Put("unit", k, payload)
			file := c.path("unit", k)
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, damage(b), 0o644); err != nil {
				t.Fatal(err)
			}
			if got, ok := c.Get("unit", k); ok {
				t.Fatalf("damaged entry read as %q", got)
			}
			if _, err := os.Stat(file); !os.IsNotExist(err) {
				t.Error("damaged entry left in place")
			}
		})
	}
}

// TestEntryNotAFile: an entry replaced by a FIFO or a link to /dev/zero
// is a miss, removed, and never read (a FIFO blocked Get for ever).
func TestEntryNotAFile(t *testing.T) {
	c := At(t.TempDir(), "v")
	k := c.NewKey("unit").Add("x").Sum()
	for name, mk := range map[string]func(string) error{
		"fifo": func(p string) error { return syscall.Mkfifo(p, 0o644) },
		"zero": func(p string) error { return os.Symlink("/dev/zero", p) },
	} {
		t.Run(name, func(t *testing.T) {
			c.Put("unit", k, []byte("payload"))
			file := c.path("unit", k)
			os.Remove(file)
			if err := mk(file); err != nil {
				t.Skipf("SKIP: cannot make a %s here: %v", name, err)
			}
			done := make(chan bool)
			go func() {
				_, ok := c.Get("unit", k)
				done <- ok
			}()
			select {
			case ok := <-done:
				if ok {
					t.Fatal("read as an entry")
				}
			case <-time.After(20 * time.Second):
				t.Fatal("Get blocked")
			}
			if _, err := os.Lstat(file); !os.IsNotExist(err) {
				t.Error("left in place")
			}
		})
	}
}

func TestNilCache(t *testing.T) {
	var c *Cache
	k := c.NewKey("x").Sum()
	c.Put("x", k, []byte("a"))
	if _, ok := c.Get("x", k); ok {
		t.Error("a nil cache hit")
	}
	c.Discard("x", k)
}

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", dir)
	t.Setenv("VERBSEXP_NO_CACHE", "")
	c := Open()
	if c == nil {
		t.Fatal("no cache")
	}
	if want := filepath.Join(dir, "verbsexp", layout); c.Dir() != want {
		t.Errorf("cache in %s, want %s", c.Dir(), want)
	}
	if !strings.HasPrefix(c.version, "buildid:") {
		t.Errorf("version %q is not the build ID", c.version)
	}
	t.Setenv("VERBSEXP_NO_CACHE", "1")
	if Open() != nil {
		t.Error("VERBSEXP_NO_CACHE=1 does not turn the cache off")
	}
}

// TestSizeBound: the directory stays under MaxBytes; the entries read
// last survive.
func TestSizeBound(t *testing.T) {
	old := MaxBytes
	MaxBytes = 64 << 10
	defer func() { MaxBytes = old }()
	c := At(t.TempDir(), "v")
	keep := c.NewKey("k").Add("keep").Sum()
	c.Put("k", keep, make([]byte, 1000))
	for i := 0; i < 200; i++ {
		c.Put("k", c.NewKey("k").Add(fmt.Sprint(i)).Sum(), make([]byte, 1000))
		if _, ok := c.Get("k", keep); !ok {
			t.Fatalf("after %d writes the entry read each time was pruned", i)
		}
	}
	var total int64
	filepath.WalkDir(c.Dir(), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			fi, _ := d.Info()
			total += fi.Size()
		}
		return nil
	})
	if total > MaxBytes {
		t.Errorf("%d bytes in the cache, bound %d", total, MaxBytes)
	}
	if total < MaxBytes/2 {
		t.Errorf("pruned down to %d bytes, more than needed", total)
	}
}

// TestConcurrentWriters: readers racing with writers of the same key see
// one writer's whole payload or nothing.
func TestConcurrentWriters(t *testing.T) {
	c := At(t.TempDir(), "v")
	k := c.NewKey("k").Sum()
	payloads := map[string]bool{}
	for i := 0; i < 4; i++ {
		payloads[strings.Repeat(fmt.Sprint(i), 50000)] = true
	}
	var wg sync.WaitGroup
	for p := range payloads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 20; j++ {
				c.Put("k", k, []byte(p))
			}
		}()
	}
	errs := make(chan string, 1)
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 50; j++ {
				if b, ok := c.Get("k", k); ok && !payloads[string(b)] {
					select {
					case errs <- fmt.Sprintf("read a payload of %d bytes no writer wrote", len(b)):
					default:
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
