package generate

import (
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/verbsexp/verbsexp/gen/internal/parse"
	"github.com/verbsexp/verbsexp/internal/target"
)

// These tests prove that the cache never changes the output: a run with
// the cache, warm or cold or damaged, writes the bytes a run without it
// writes, and an entry is used only while everything it depends on (the
// content of every file read, every include lookup that failed, the
// compiler, the generator) is as it was.

func options(targets []target.Target, dirs ...string) Options {
	var cflags []string // the package names each directory as given: its headers are linked
	for _, d := range dirs {
		if !filepath.IsAbs(d) {
			d = "${SRCDIR}/" + d
		}
		cflags = append(cflags, "-I"+d)
	}
	return Options{
		Parse:   parse.Options{IncludeDirs: dirs, Entry: parse.DefaultEntry, ScopeDir: parse.DefaultScope},
		Targets: targets,
		Package: "verbs",
		Command: "test",
		CFlags:  cflags,
	}
}

var amd64Only = []target.Target{target.All[0]}

// run generates with the cache in the test's cache directory.
func run(t *testing.T, opts Options) (map[string]string, Cached) {
	t.Helper()
	res, err := Run(opts)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, f := range res.Files {
		files[f.Name] = string(f.Data)
		if f.Link != "" {
			files[f.Name] = "symbolic link to " + f.Link
		}
	}
	return files, res.Cached
}

// uncached generates with VERBSEXP_NO_CACHE=1.
func uncached(t *testing.T, opts Options) map[string]string {
	t.Helper()
	t.Setenv("VERBSEXP_NO_CACHE", "1")
	defer os.Unsetenv("VERBSEXP_NO_CACHE")
	files, c := run(t, opts)
	if c != (Cached{}) {
		t.Fatalf("VERBSEXP_NO_CACHE=1 still used the cache: %+v", c)
	}
	return files
}

func withCache(t *testing.T) string {
	dir := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", dir)
	t.Setenv("VERBSEXP_NO_CACHE", "")
	return filepath.Join(dir, "verbsexp", "v2")
}

func same(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		for name := range want {
			if got[name] != want[name] {
				t.Errorf("%s: %s differs from the uncached run's", what, name)
			}
		}
		if len(got) != len(want) {
			t.Errorf("%s: %d files, uncached %d", what, len(got), len(want))
		}
	}
}

// TestCacheOnOffCorrupted on headers/ for every target: cold, warm,
// every entry damaged, every entry replaced by another's.
func TestCacheOnOffCorrupted(t *testing.T) {
	dir := withCache(t)
	opts := options(target.All, "../../../headers")
	want := uncached(t, opts)
	cold, c := run(t, opts)
	same(t, "cold cache", cold, want)
	if c != (Cached{}) {
		t.Errorf("cold cache: %+v", c)
	}
	warm, c := run(t, opts)
	same(t, "warm cache", warm, want)
	if c != (Cached{Units: 3, Files: true}) {
		t.Errorf("warm cache: %+v, want everything from the cache", c)
	}
	entries := entryFiles(t, dir)
	saved := map[string][]byte{}
	for _, damage := range []struct {
		name string
		f    func(file string, b []byte) []byte
	}{
		{"flipped", func(_ string, b []byte) []byte { b[len(b)-1-len(b)/7] ^= 4; return b }},
		{"truncated", func(_ string, b []byte) []byte { return b[:len(b)-len(b)/5] }},
		{"emptied", func(_ string, b []byte) []byte { return nil }},
		{"swapped", func(file string, b []byte) []byte {
			// Another entry of the same kind (or, for the only one of
			// its kind, of another kind), whole, under this name.
			for _, e := range entries {
				if e != file && filepath.Dir(filepath.Dir(e)) == filepath.Dir(filepath.Dir(file)) {
					return saved[e]
				}
			}
			for _, e := range entries {
				if e != file {
					return saved[e]
				}
			}
			return b
		}},
	} {
		for _, e := range entries {
			b, err := os.ReadFile(e)
			if err != nil {
				t.Fatal(err)
			}
			saved[e] = b
		}
		for _, e := range entries {
			os.WriteFile(e, damage.f(e, append([]byte(nil), saved[e]...)), 0o644)
		}
		got, c := run(t, opts)
		same(t, damage.name+" entries", got, want)
		if c != (Cached{}) {
			t.Errorf("%s entries were used: %+v", damage.name, c)
		}
		// Rewritten: the next run is warm again.
		got, c = run(t, opts)
		same(t, "after "+damage.name+" entries", got, want)
		if c != (Cached{Units: 3, Files: true}) {
			t.Errorf("after %s entries, not warm again: %+v", damage.name, c)
		}
	}
}

func entryFiles(t *testing.T, dir string) []string {
	var r []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasPrefix(d.Name(), ".") {
			r = append(r, p)
		}
		return nil
	})
	if len(r) < 7 {
		t.Fatalf("%d cache entries; want 3 compilers, 3 translations, 1 package", len(r))
	}
	return r
}

// tree writes files (path → content) under a new directory.
func tree(t *testing.T, files map[string]string) string {
	dir := t.TempDir()
	for p, s := range files {
		write(t, filepath.Join(dir, p), s)
	}
	return dir
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// check generates, and compares with an uncached run; it returns the
// output and what came from the cache.
func check(t *testing.T, what string, opts Options) (map[string]string, Cached) {
	t.Helper()
	want := uncached(t, opts)
	got, c := run(t, opts)
	same(t, what, got, want)
	return got, c
}

// changes runs once (warming the cache), applies change, and checks that
// the next run does not reuse the translation and equals an uncached
// run, and differs from the first run's output.
func changes(t *testing.T, opts Options, change func()) {
	t.Helper()
	before, _ := check(t, "before", opts)
	if _, c := run(t, opts); c.Units != len(opts.Targets) {
		t.Fatalf("the second run did not use the cache (%+v): the test proves nothing", c)
	}
	change()
	after, c := check(t, "after the change", opts)
	if c.Units != 0 {
		t.Errorf("a stale translation was used: %+v", c)
	}
	if reflect.DeepEqual(before, after) {
		t.Error("the change did not change the output: the test proves nothing")
	}
}

const entryHeader = "#include <stdint.h>\n#include <infiniband/extra.h>\nstruct ibv_a { uint32_t a; EXTRA };\n"

// TestCacheShadowing: a header added to an earlier -I directory shadows
// the one that was read: the translation is not reused.
func TestCacheShadowing(t *testing.T) {
	withCache(t)
	first := t.TempDir()
	second := tree(t, map[string]string{
		"infiniband/verbs_exp.h": entryHeader,
		"infiniband/extra.h":     "#define EXTRA int b;\n",
	})
	changes(t, options(amd64Only, first, second), func() {
		write(t, filepath.Join(first, "infiniband/extra.h"), "#define EXTRA long long b[4];\n")
	})
}

// TestCacheShadowingSystemHeader: a system header (<stdint.h>) added to
// an -I directory, which is searched before the system directories.
func TestCacheShadowingSystemHeader(t *testing.T) {
	withCache(t)
	inc := tree(t, map[string]string{
		"infiniband/verbs_exp.h": entryHeader,
		"infiniband/extra.h":     "#define EXTRA\n",
	})
	changes(t, options(amd64Only, inc), func() {
		write(t, filepath.Join(inc, "stdint.h"), "typedef unsigned long long uint32_t;\n")
	})
}

// TestCacheHasInclude: a file that a __has_include found missing appears.
func TestCacheHasInclude(t *testing.T) {
	withCache(t)
	inc := tree(t, map[string]string{
		"infiniband/verbs_exp.h": "#if __has_include(<infiniband/opt.h>)\n#include <infiniband/opt.h>\n#endif\nstruct ibv_a { int a; };\n",
	})
	changes(t, options(amd64Only, inc), func() {
		write(t, filepath.Join(inc, "infiniband/opt.h"), "struct ibv_opt { int o; };\n")
	})
}

// TestCacheEditedHeader: an in-scope header and an out-of-scope one
// (outside infiniband/, so no input hash of the package covers it).
func TestCacheEditedHeader(t *testing.T) {
	withCache(t)
	inc := tree(t, map[string]string{
		"infiniband/verbs_exp.h": "#include <sys_side.h>\n#include <infiniband/extra.h>\nstruct ibv_a { side_t a; EXTRA };\n",
		"infiniband/extra.h":     "#define EXTRA int b;\n",
		"sys_side.h":             "typedef int side_t;\n",
	})
	opts := options(amd64Only, inc)
	changes(t, opts, func() { write(t, filepath.Join(inc, "infiniband/extra.h"), "#define EXTRA short b;\n") })
	changes(t, opts, func() { write(t, filepath.Join(inc, "sys_side.h"), "typedef long side_t;\n") })
}

// TestCacheSystemHeader: a header of the compiler's own include path
// (here a directory a wrapper compiler adds with -isystem) changes.
func TestCacheSystemHeader(t *testing.T) {
	withCache(t)
	sys := tree(t, map[string]string{"sys_side.h": "typedef int side_t;\n"})
	wrapper := filepath.Join(t.TempDir(), "cc")
	write(t, wrapper, "#!/bin/sh\nexec cc -isystem "+sys+` "$@"`+"\n")
	os.Chmod(wrapper, 0o755)
	t.Setenv(target.All[0].EnvVar(), wrapper)
	inc := tree(t, map[string]string{"infiniband/verbs_exp.h": "#include <sys_side.h>\nstruct ibv_a { side_t a; };\n"})
	changes(t, options(amd64Only, inc), func() { write(t, filepath.Join(sys, "sys_side.h"), "typedef long side_t;\n") })
}

// TestCacheCompiler: another compiler (here one predefining a macro the
// headers test) for the same target is another key.
func TestCacheCompiler(t *testing.T) {
	withCache(t)
	inc := tree(t, map[string]string{"infiniband/verbs_exp.h": "#ifdef WIDE\nstruct ibv_a { long a; };\n#else\nstruct ibv_a { int a; };\n#endif\n"})
	opts := options(amd64Only, inc)
	changes(t, opts, func() {
		wrapper := filepath.Join(t.TempDir(), "cc")
		write(t, wrapper, "#!/bin/sh\nexec cc -DWIDE \"$@\"\n")
		os.Chmod(wrapper, 0o755)
		t.Setenv(target.All[0].EnvVar(), wrapper)
	})
}

// TestCacheCompilerBinary: a compiler binary that changed on disk (here
// a wrapper rewritten with the same content: another inode and time) is
// asked again, and what depends on it is not reused.
func TestCacheCompilerBinary(t *testing.T) {
	withCache(t)
	wrapper := filepath.Join(t.TempDir(), "cc")
	write(t, wrapper, "#!/bin/sh\nexec cc \"$@\"\n")
	os.Chmod(wrapper, 0o755)
	t.Setenv(target.All[0].EnvVar(), wrapper)
	inc := tree(t, map[string]string{"infiniband/verbs_exp.h": "struct ibv_a { int a; };\n"})
	opts := options(amd64Only, inc)
	want, _ := check(t, "first", opts)
	if _, c := run(t, opts); c.Units != 1 {
		t.Fatalf("not cached: %+v", c)
	}
	os.Remove(wrapper)
	write(t, wrapper, "#!/bin/sh\nexec cc \"$@\"\n")
	os.Chmod(wrapper, 0o755)
	got, c := run(t, opts)
	if c.Units != 0 {
		t.Errorf("a translation by the replaced compiler binary was reused: %+v", c)
	}
	same(t, "after replacing the compiler", got, want)
}

// TestCacheRefusedInclude: a FIFO appears where an #include in a branch
// never taken points. The uncached run refuses it (the #include walk
// checks every #include before the compiler runs); so must a run whose
// translations are all cached, although none of them opened the path.
func TestCacheRefusedInclude(t *testing.T) {
	withCache(t)
	inc := tree(t, map[string]string{"infiniband/verbs_exp.h": "#if 0\n#include <infiniband/fifo.h>\n#endif\nstruct ibv_a { int a; };\n"})
	opts := options(amd64Only, inc)
	check(t, "before", opts)
	if _, c := run(t, opts); c.Units != 1 {
		t.Fatalf("not cached: %+v", c)
	}
	if err := syscall.Mkfifo(filepath.Join(inc, "infiniband/fifo.h"), 0o644); err != nil {
		t.Skipf("SKIP: cannot make a FIFO here: %v", err)
	}
	t.Setenv("VERBSEXP_NO_CACHE", "1")
	_, uncachedErr := Run(opts)
	t.Setenv("VERBSEXP_NO_CACHE", "")
	_, cachedErr := Run(opts)
	if uncachedErr == nil {
		t.Fatal("the uncached run accepted the FIFO: the test proves nothing")
	}
	if cachedErr == nil || cachedErr.Error() != uncachedErr.Error() {
		t.Errorf("cached run: %v\nuncached run: %v", cachedErr, uncachedErr)
	}
}

// wrap makes each target's compiler a wrapper adding its system
// directories (-isystem, in order): dirs[goarch], or others.
func wrap(t *testing.T, dirs map[string][]string, others ...string) {
	for _, tg := range target.All {
		cc, err := tg.Compiler()
		if err != nil {
			t.Skipf("SKIP: no %s compiler: %v", tg.GoArch, err)
		}
		args := ""
		ds, ok := dirs[tg.GoArch]
		if !ok {
			ds = others
		}
		for _, d := range ds {
			args += " -isystem " + d
		}
		wrapper := filepath.Join(t.TempDir(), "cc")
		write(t, wrapper, "#!/bin/sh\nexec "+cc+args+` "$@"`+"\n")
		os.Chmod(wrapper, 0o755)
		t.Setenv(tg.EnvVar(), wrapper)
	}
}

// probedChanges is changes for a change that only arm64's probe sees:
// the next run takes the other targets from the cache and probes arm64
// again.
func probedChanges(t *testing.T, opts Options, change func()) {
	t.Helper()
	before, _ := check(t, "before", opts)
	if _, c := run(t, opts); c.Units != 3 {
		t.Fatalf("the second run did not use the cache (%+v): the test proves nothing", c)
	}
	change()
	after, c := check(t, "after the change", opts)
	if c.Units != 2 {
		t.Errorf("arm64's probe was reused, or more than it was not: %+v", c)
	}
	if reflect.DeepEqual(before, after) {
		t.Error("the change did not change the output: the test proves nothing")
	}
}

// sideHeader includes a header of the compilers' system directories.
const sideHeader = "#include <sys_side.h>\nstruct ibv_a { side_t a; };\n"

// TestCacheProbedSystemHeader: a header only arm64's compiler reads (from
// a system directory its wrapper adds) changes.
func TestCacheProbedSystemHeader(t *testing.T) {
	withCache(t)
	arm := tree(t, map[string]string{"sys_side.h": "typedef int side_t;\n"})
	wrap(t, map[string][]string{"arm64": {arm}}, tree(t, map[string]string{"sys_side.h": "typedef int side_t;\n"}))
	inc := tree(t, map[string]string{"infiniband/verbs_exp.h": sideHeader})
	probedChanges(t, options(target.All, inc), func() { write(t, filepath.Join(arm, "sys_side.h"), "typedef long side_t;\n") })
}

// TestCacheProbedShadowing: a header appears in a system directory arm64
// searches before the one its compiler read it from.
func TestCacheProbedShadowing(t *testing.T) {
	withCache(t)
	early, late := t.TempDir(), tree(t, map[string]string{"sys_side.h": "typedef int side_t;\n"})
	wrap(t, map[string][]string{"arm64": {early, late}}, tree(t, map[string]string{"sys_side.h": "typedef int side_t;\n"}))
	inc := tree(t, map[string]string{"infiniband/verbs_exp.h": sideHeader})
	probedChanges(t, options(target.All, inc), func() { write(t, filepath.Join(early, "sys_side.h"), "typedef long long side_t;\n") })
}

// TestCacheFormatsChangedSourcesOnly: after a header change that adds a
// constant, the run formats again only the Go sources that changed
// (consts.go, and zheaders.go, which records the header's digest:
// shims.go changes only in its cgo preamble, which is put in after
// formatting); the others' formatted text comes from the cache
// (one "gofmt" entry per source formatted), and the package is the one
// an uncached run writes.
func TestCacheFormatsChangedSourcesOnly(t *testing.T) {
	dir := withCache(t)
	inc := tree(t, map[string]string{"infiniband/verbs_exp.h": "#include <stdint.h>\nstruct ibv_a { uint32_t a; };\nint ibv_f(struct ibv_a *a);\n#define IBV_X 1\n"})
	opts := options(target.All, inc)
	check(t, "first", opts)
	formatted := func() int {
		n := 0
		filepath.WalkDir(filepath.Join(dir, "gofmt"), func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && !strings.HasPrefix(d.Name(), ".") {
				n++
			}
			return nil
		})
		return n
	}
	before := formatted()
	if before < 6 {
		t.Fatalf("%d formatted files in the cache after the first run; want every Go file's", before)
	}
	write(t, filepath.Join(inc, "infiniband/verbs_exp.h"), "#include <stdint.h>\nstruct ibv_a { uint32_t a; };\nint ibv_f(struct ibv_a *a);\n#define IBV_X 1\n#define IBV_Y 2\n")
	check(t, "after adding a constant", opts)
	if n := formatted() - before; n != 2 {
		t.Errorf("%d files formatted again after a constant was added; want 2 (consts.go, zheaders.go)", n)
	}
}
