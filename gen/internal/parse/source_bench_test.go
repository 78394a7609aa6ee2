package parse

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/verbsexp/verbsexp/internal/target"
)

// BenchmarkTranslateHeaders translates headers/ for linux/amd64 (the
// input checks included), the cost the checks are measured against.
func BenchmarkTranslateHeaders(b *testing.B) {
	tg, _ := target.Lookup("amd64")
	comp, err := FindCompiler(tg, nil)
	if err != nil {
		b.Skipf("SKIP: no amd64 compiler: %v", err)
	}
	cfg := comp.Config
	opts := Options{IncludeDirs: []string{"../../../headers"}, Entry: DefaultEntry, ScopeDir: DefaultScope, Checked: true}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Translate("amd64", cfg, opts, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkInputChecks runs the checks of source.go and includes.go on
// the headers of headers/ alone: what they add to a translation.
func BenchmarkInputChecks(b *testing.B) {
	tg, _ := target.Lookup("amd64")
	comp, err := FindCompiler(tg, nil)
	if err != nil {
		b.Skipf("SKIP: no amd64 compiler: %v", err)
	}
	cfg := comp.Config
	dir, _ := filepath.Abs("../../../headers")
	paths, _ := filepath.Glob(filepath.Join(dir, "infiniband", "*.h"))
	var srcs []string
	for _, p := range paths {
		s, err := os.ReadFile(p)
		if err != nil {
			b.Fatal(err)
		}
		srcs = append(srcs, string(s))
	}
	sys := append(append([]string(nil), cfg.IncludePaths...), cfg.SysIncludePaths...)
	b.ReportAllocs()
	for b.Loop() {
		if err := checkIncludes(filepath.Join(dir, DefaultEntry), []string{dir}, sys); err != nil {
			b.Fatal(err)
		}
		tab := newMacroTable()
		for i, s := range srcs {
			if err := checkSource(paths[i], s, tab); err != nil {
				b.Fatal(err)
			}
		}
	}
}
