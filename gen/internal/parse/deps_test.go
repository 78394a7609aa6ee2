package parse

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/verbsexp/verbsexp/internal/target"
)

// includeSets are the header directories the dependency tests read:
// headers/ always, and the real releases when VERBSEXP_OFED_INCLUDE or
// VERBSEXP_OFED_RELEASES name them (see tests/doc.go).
func includeSets(t *testing.T) map[string]string {
	sets := map[string]string{"headers": "../../../headers"}
	if d := os.Getenv("VERBSEXP_OFED_INCLUDE"); d != "" {
		sets["ofed"] = d
	}
	if d := os.Getenv("VERBSEXP_OFED_RELEASES"); d != "" {
		m, _ := filepath.Glob(filepath.Join(d, "*", "include", DefaultEntry))
		for _, e := range m {
			inc := filepath.Dir(filepath.Dir(e))
			sets[filepath.Base(filepath.Dir(inc))] = inc
		}
	}
	if len(sets) == 1 {
		t.Log("only headers/: set VERBSEXP_OFED_RELEASES=DIR to include the real releases")
	}
	return sets
}

// TestDepsCoverCompiler: every file the target's compiler reads for the
// headers (gcc -M) is among the files the front end read, with its
// content hashed. A cached translation skips the compiler's check of
// the headers (it passed when the entry was written); that is sound
// because the check reads nothing the entry does not depend on. (The
// lookups that fail are the same too: the front end searches the
// directories the compiler listed, in its order.)
func TestDepsCoverCompiler(t *testing.T) {
	for name, inc := range includeSets(t) {
		for _, tg := range target.All {
			t.Run(name+"/"+tg.GoArch, func(t *testing.T) {
				comp, err := FindCompiler(tg, nil)
				if err != nil {
					t.Fatal(err)
				}
				dir, err := filepath.Abs(inc)
				if err != nil {
					t.Fatal(err)
				}
				rec := newDepRecorder()
				opts := Options{IncludeDirs: []string{dir}, Entry: DefaultEntry, ScopeDir: DefaultScope, record: rec}
				if _, err := Translate(tg.GoArch, comp.Config, opts, nil); err != nil {
					t.Fatal(err)
				}
				deps, ok := rec.deps()
				if !ok {
					t.Fatal("the record of what was read is unusable")
				}
				read := map[string]bool{}
				absent := 0
				for _, d := range deps {
					if strings.HasPrefix(d.State, "sha256:") {
						read[filepath.Clean(d.Path)] = true
					}
					if d.State == depAbsent {
						absent++
					}
				}
				out, _, err := runTool(comp.Path, "-M", "-x", "c", "-I", dir, filepath.Join(dir, DefaultEntry))
				if err != nil {
					t.Fatal(err)
				}
				fields := strings.Fields(strings.ReplaceAll(string(out), "\\\n", " "))
				if len(fields) < 3 {
					t.Fatalf("gcc -M printed %q", out)
				}
				for _, f := range fields[1:] { // fields[0] is the target "verbs_exp.o:"
					if !read[filepath.Clean(f)] {
						t.Errorf("the compiler reads %s, the front end's record lacks it", f)
					}
				}
				t.Logf("%d files read (the compiler: %d), %d failed lookups", len(read), len(fields)-1, absent)
			})
		}
	}
}

// TestDepsRecorder: what the recorder makes of each way the front end
// looks at a path.
func TestDepsRecorder(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a.h")
	if err := os.WriteFile(file, []byte("int a;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rec := newDepRecorder()
	fsys := rec.wrap(newSourceFS([]string{dir}))
	if _, err := fsys.Open(filepath.Join(dir, "missing.h")); err == nil {
		t.Fatal("opened a missing file")
	}
	if _, err := fsys.Open(dir); err == nil {
		t.Fatal("the front end's FS opened a directory")
	}
	for _, p := range []string{file} {
		f, err := fsys.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 100)
		for {
			if _, err := f.Read(buf); err != nil {
				break
			}
		}
		f.Close()
	}
	peek, _ := fsys.Open(filepath.Join(dir, "a.h"))
	peek.Stat()
	peek.Close()
	deps, ok := rec.deps()
	if !ok {
		t.Fatal("unsound record")
	}
	states := map[string]string{}
	for _, d := range deps {
		states[filepath.Base(d.Path)] = d.State
	}
	if states["missing.h"] != depAbsent || states[filepath.Base(dir)] != depDir || !strings.HasPrefix(states["a.h"], "sha256:") {
		t.Errorf("recorded %v", states)
	}
	if !stillValid(deps, []string{dir}, nil) {
		t.Fatal("an unchanged tree is not valid")
	}
	for _, change := range []func(){
		func() { os.WriteFile(file, []byte("int b;\n"), 0o644) },
		func() { os.WriteFile(filepath.Join(dir, "missing.h"), nil, 0o644) },
		func() { os.Remove(file); os.Mkdir(file, 0o755) },
	} {
		change()
		if stillValid(deps, []string{dir}, nil) {
			t.Error("a change went unnoticed")
		}
		os.RemoveAll(file)
		os.Remove(filepath.Join(dir, "missing.h"))
		os.WriteFile(file, []byte("int a;\n"), 0o644)
	}
	// A path that gives two answers in one translation (changed while
	// it was read) makes the record unusable.
	rec2 := newDepRecorder()
	fs2 := rec2.wrap(newSourceFS([]string{dir}))
	fs2.Open(filepath.Join(dir, "late.h"))
	os.WriteFile(filepath.Join(dir, "late.h"), nil, 0o644)
	f, _ := fs2.Open(filepath.Join(dir, "late.h"))
	f.Read(make([]byte, 10))
	f.Close()
	if _, ok := rec2.deps(); ok {
		t.Error("a path that was absent, then read, gave a usable record")
	}
}

// TestUnitRoundTrip: a unit read back from the cache is the unit that
// was stored, for headers/ and the real releases, on every target.
func TestUnitRoundTrip(t *testing.T) {
	c := testCache(t)
	for name, inc := range includeSets(t) {
		for _, tg := range target.All {
			t.Run(name+"/"+tg.GoArch, func(t *testing.T) {
				comp, err := FindCompiler(tg, c)
				if err != nil {
					t.Fatal(err)
				}
				opts := Options{IncludeDirs: []string{inc}, Entry: DefaultEntry, ScopeDir: DefaultScope}
				u, sum, err := TranslateUnit(comp, opts, nil, c)
				if err != nil {
					t.Fatal(err)
				}
				backs, sums, hits := CachedUnits([]*Compiler{comp}, opts, c)
				back, sum2, ok := backs[0], sums[0], hits[0]
				if !ok {
					t.Fatal("not found in the cache")
				}
				if sum == "" || sum != sum2 {
					t.Errorf("sums %q and %q", sum, sum2)
				}
				// JSON: what the unit says (its unexported statistics of
				// the reading are not stored).
				a, _ := json.Marshal(u)
				b, _ := json.Marshal(back)
				if string(a) != string(b) {
					t.Error("the unit read back differs from the one stored")
				}
			})
		}
	}
}
