package parse

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"modernc.org/cc/v4"

	"github.com/verbsexp/verbsexp/gen/internal/cache"
	"github.com/verbsexp/verbsexp/internal/target"
)

func lookupTarget(t *testing.T, goarch string) target.Target {
	t.Helper()
	tg, ok := target.Lookup(goarch)
	if !ok {
		t.Fatalf("no target %s", goarch)
	}
	return tg
}

// foreign returns a target that is not the host's, whose compiler the
// host gcc is not.
func foreign(t *testing.T) target.Target {
	for _, tg := range target.All {
		if tg.GoArch != runtime.GOARCH {
			return tg
		}
	}
	t.Fatal("every target is the host")
	return target.Target{}
}

// script writes an executable shell script and returns its path.
func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fakecc")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func testCache(t *testing.T) *cache.Cache { return cache.At(t.TempDir(), "test") }

// TestConfigMatchesNewConfig: the configuration built from the one
// probe run (-dM -E -v) is cc.NewConfig's for every target compiler,
// field by field.
func TestConfigMatchesNewConfig(t *testing.T) {
	for _, tg := range target.All {
		t.Run(tg.GoArch, func(t *testing.T) {
			comp, err := FindCompiler(tg, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Setenv("CC", comp.Path)
			want, err := cc.NewConfig("linux", tg.GoArch)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{"Predefined", "IncludePaths", "SysIncludePaths", "HostIncludePaths", "HostSysIncludePaths", "CC"} {
				a := reflect.ValueOf(*comp.Config).FieldByName(f).Interface()
				b := reflect.ValueOf(*want).FieldByName(f).Interface()
				if !reflect.DeepEqual(a, b) {
					t.Errorf("%s: probe gives %q, cc.NewConfig %q", f, a, b)
				}
			}
		})
	}
}

// TestConfigCache: a configuration read back from the cache is the one
// the compiler gave; two targets never share an entry; a damaged entry is
// ignored, and rewritten whole.
func TestConfigCache(t *testing.T) {
	c := testCache(t)
	tg := target.All[0]
	fresh, err := FindCompiler(tg, c)
	if err != nil {
		t.Fatal(err)
	}
	entries := cacheEntries(t, c, "cc")
	if len(entries) != 1 {
		t.Fatalf("want one cache entry, have %v", entries)
	}
	cached, err := FindCompiler(tg, c)
	if err != nil {
		t.Fatal(err)
	}
	sameConfig(t, fresh, cached)
	if _, err := FindCompiler(target.All[1], c); err != nil {
		t.Fatal(err)
	}
	if n := len(cacheEntries(t, c, "cc")); n != 2 {
		t.Errorf("two targets: %d entries, want 2", n)
	}
	for _, damage := range []func([]byte) []byte{
		func(b []byte) []byte { return b[:len(b)/2] },                            // truncated
		func(b []byte) []byte { b[len(b)-3] ^= 0x20; return b },                  // a flipped bit
		func(b []byte) []byte { return []byte("{}") },                            // foreign
		func(b []byte) []byte { return append(b[:len(b)-20:len(b)-20], "}"...) }, // cut JSON
	} {
		b, err := os.ReadFile(entries[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(entries[0], damage(append([]byte(nil), b...)), 0o644); err != nil {
			t.Fatal(err)
		}
		again, err := FindCompiler(tg, c)
		if err != nil {
			t.Fatalf("damaged cache entry: %v", err)
		}
		sameConfig(t, fresh, again)
		if after, err := os.ReadFile(entries[0]); err != nil || !reflect.DeepEqual(after, b) {
			t.Errorf("the damaged entry was not rewritten as it was (%v)", err)
		}
	}
	// Whole entries (the checksum holds) whose content is not a usable
	// configuration.
	binary, err := binaryIdentity(fresh.Path)
	if err != nil {
		t.Fatal(err)
	}
	key := factsKey(c, tg, fresh.Path, binary)
	for _, payload := range []string{"", "{}", "[1,2]", `{"Predefined":"#define X 1"}`, "\x00\xff"} {
		c.Put("cc", key, []byte(payload))
		again, err := FindCompiler(tg, c)
		if err != nil {
			t.Fatalf("cache entry %q: %v", payload, err)
		}
		sameConfig(t, fresh, again)
		if b, ok := c.Get("cc", key); !ok || string(b) == payload {
			t.Errorf("cache entry %q was not rewritten", payload)
		}
	}
}

// TestConfigCacheOfTheWrongTarget: an entry under a compiler's key that
// claims another architecture (here amd64's answers stored as arm64's) is
// not trusted: the compiler is asked again and the entry rewritten.
func TestConfigCacheOfTheWrongTarget(t *testing.T) {
	c := testCache(t)
	arm, amd := lookupTarget(t, "arm64"), lookupTarget(t, "amd64")
	truth, err := FindCompiler(arm, c)
	if err != nil {
		t.Fatal(err)
	}
	armEntry := cacheEntries(t, c, "cc")[0]
	if _, err := FindCompiler(amd, c); err != nil {
		t.Fatal(err)
	}
	var amdEntry string
	for _, e := range cacheEntries(t, c, "cc") {
		if e != armEntry {
			amdEntry = e
		}
	}
	b, err := os.ReadFile(amdEntry)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(armEntry, b, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := FindCompiler(arm, c)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got.Config.Predefined, "__aarch64__") || strings.Contains(got.Config.Predefined, "__x86_64__") {
		t.Fatal("the arm64 configuration came from amd64's entry")
	}
	sameConfig(t, truth, got)
	if after, _ := os.ReadFile(armEntry); reflect.DeepEqual(after, b) {
		t.Error("the wrong entry was left in place")
	}
}

// TestWrongCompiler: the host gcc named as a foreign target's compiler
// is refused, naming what it is and what to install.
func TestWrongCompiler(t *testing.T) {
	tg := foreign(t)
	t.Setenv(tg.EnvVar(), "gcc")
	for _, c := range []*cache.Cache{nil, testCache(t)} {
		_, err := FindCompiler(tg, c)
		if err == nil {
			t.Fatalf("%s=gcc accepted for linux/%s", tg.EnvVar(), tg.GoArch)
		}
		host := target.Identify(hostPredefined(t)).Arch
		for _, want := range []string{"gcc is " + host + " (", "not " + tg.GoArch + ": install " + tg.DebianPkg + " or set " + tg.EnvVar() + " to a"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error lacks %q: %v", want, err)
			}
		}
	}
}

func hostPredefined(t *testing.T) string {
	out, err := exec.Command("gcc", "-dM", "-E", "-x", "c", "/dev/null").Output()
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// TestFailingCompiler: a compiler that exits 1, with or without a
// message, or that hangs, is an error saying so; nothing is cached.
func TestFailingCompiler(t *testing.T) {
	tg := foreign(t)
	old := compilerTimeout
	compilerTimeout = 500 * time.Millisecond
	defer func() { compilerTimeout = old }()
	for _, tc := range []struct{ name, cc, want string }{
		{"false", "/bin/false", "`/bin/false -dM -E -v -` failed: exit status 1 (no output)"},
		{"exit1", script(t, "echo 'cc1: fatal error: no license' >&2\nexit 1"), "failed: exit status 1; it said:\ncc1: fatal error: no license"},
		{"silent", script(t, "exit 0"), "printed no predefined macros or include search list"},
		{"hang", script(t, "exec sleep 30"), "did not finish within 500ms and was killed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(tg.EnvVar(), tc.cc)
			c := testCache(t)
			start := time.Now()
			_, err := FindCompiler(tg, c)
			if err == nil {
				t.Fatalf("%s accepted", tc.cc)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "install "+tg.DebianPkg) {
				t.Errorf("error lacks %q or the package: %v", tc.want, err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("took %v", d)
			}
			if e := cacheEntries(t, c, "cc"); len(e) != 0 {
				t.Errorf("a failing compiler's answer was cached: %v", e)
			}
		})
	}
}

// TestMissingLibcHeaders: a cross compiler whose libc directory does not
// exist (a cross gcc installed without libc6-dev-<arch>-cross; here a
// wrapper with the libc directory moved away) is refused, naming the
// package; once the directory exists, the cached configuration (keyed by
// the unchanged compiler binary) is not used again: the compiler is
// asked anew and finds the headers.
func TestMissingLibcHeaders(t *testing.T) {
	tg := lookupTarget(t, "arm64")
	real := tg.GNUTriplet + "-gcc"
	if _, err := exec.LookPath(real); err != nil {
		t.Skipf("SKIP: %s not installed (make toolchains installs it)", real)
	}
	gccInc, err := exec.Command(real, "-print-file-name=include").Output()
	if err != nil {
		t.Fatal(err)
	}
	libc := "/usr/" + tg.GNUTriplet + "/include"
	if _, err := os.Stat(filepath.Join(libc, "stdio.h")); err != nil {
		t.Skipf("SKIP: no libc headers in %s to link to", libc)
	}
	sysroot := t.TempDir()
	moved := filepath.Join(sysroot, "include")
	t.Setenv(tg.EnvVar(), script(t, "exec "+real+" -nostdinc -isystem "+strings.TrimSpace(string(gccInc))+" -idirafter "+moved+` "$@"`))
	c := testCache(t)
	_, err = FindCompiler(tg, c)
	if err == nil {
		t.Fatal("a compiler without libc headers was accepted")
	}
	for _, want := range []string{"finds no C library headers", "it skipped " + moved, "install " + tg.LibcPkg} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if len(cacheEntries(t, c, "cc")) != 1 {
		t.Fatal("the compiler's answer was not cached (the rest of the test proves nothing)")
	}
	if err := os.Symlink(libc, moved); err != nil {
		t.Fatal(err)
	}
	comp, err := FindCompiler(tg, c)
	if err != nil {
		t.Fatalf("after installing the headers: %v", err)
	}
	if !slices.Contains(comp.Config.SysIncludePaths, moved) {
		t.Errorf("the stale cached search list was used: %v", comp.Config.SysIncludePaths)
	}
}

func sameConfig(t *testing.T, a, b *Compiler) {
	t.Helper()
	for _, f := range []string{"Predefined", "IncludePaths", "SysIncludePaths", "HostIncludePaths", "HostSysIncludePaths", "CC"} {
		x := reflect.ValueOf(*a.Config).FieldByName(f).Interface()
		y := reflect.ValueOf(*b.Config).FieldByName(f).Interface()
		if !reflect.DeepEqual(x, y) {
			t.Errorf("%s differs between the compiler's answer and the cache", f)
		}
	}
	if a.ID != b.ID {
		t.Error("compiler IDs differ")
	}
	if len(a.Config.ABI.Types) != len(b.Config.ABI.Types) {
		t.Error("ABI differs")
	}
}

// cacheEntries lists the entries of kind in c.
func cacheEntries(t *testing.T, c *cache.Cache, kind string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(c.Dir(), kind, "*", "*"))
	if err != nil {
		t.Fatal(err)
	}
	var r []string
	for _, p := range m {
		if !strings.HasPrefix(filepath.Base(p), ".") {
			r = append(r, p)
		}
	}
	return r
}
