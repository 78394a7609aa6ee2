package parse

import (
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
