package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/gen/internal/generate"
	"github.com/verbsexp/verbsexp/gen/internal/parse"
	"github.com/verbsexp/verbsexp/internal/manifest"
	"github.com/verbsexp/verbsexp/internal/target"
)

var ofed = flag.String("ofed", "", "also benchmark an MLNX_OFED include directory")

// BenchmarkGenerateVsGodefs times, in the same iterations, the full
// three-target generation (parse, model, layout, emit, in memory) and
// `go tool cgo -godefs` producing one target's structs for the same
// records, and reports the medians and their ratio.
func BenchmarkGenerateVsGodefs(b *testing.B) {
	sources := map[string]string{"headers": "../headers"}
	if *ofed != "" {
		sources["ofed"] = *ofed
	}
	var names []string
	for n := range sources {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		inc, err := filepath.Abs(sources[name])
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			opts := generate.Options{
				Parse:   parse.Options{IncludeDirs: []string{inc}, Entry: parse.DefaultEntry, ScopeDir: parse.DefaultScope},
				Targets: target.All,
				Package: "verbs",
				Command: "bench",
			}
			first, err := generate.Run(opts)
			if err != nil {
				b.Fatal(err)
			}
			defs := godefsInput(b, first)
			var gen, godefs []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if _, err := generate.Run(opts); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				cmd := exec.Command("go", "tool", "cgo", "-godefs", "--", "-I", inc, "defs.go")
				cmd.Dir = defs
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("cgo -godefs: %v\n%s", err, out)
				}
				t2 := time.Now()
				gen, godefs = append(gen, t1.Sub(t0)), append(godefs, t2.Sub(t1))
			}
			g, d := median(gen), median(godefs)
			b.ReportMetric(float64(g.Microseconds())/1000, "gen-3arch-ms")
			b.ReportMetric(float64(d.Microseconds())/1000, "godefs-1arch-ms")
			b.ReportMetric(float64(g)/float64(d), "ratio")
		})
	}
}

// godefsInput writes defs.go naming every record of the manifest, the
// same set the generator lays out, into a temporary directory.
func godefsInput(b *testing.B, res *generate.Result) string {
	var data []byte
	for _, f := range res.Files {
		if f.Name == "abi.json" {
			data = f.Data
		}
	}
	m, err := manifest.Unmarshal(data)
	if err != nil {
		b.Fatal(err)
	}
	var src strings.Builder
	src.WriteString("package verbs\n\n/*\n#include <infiniband/verbs_exp.h>\n*/\nimport \"C\"\n\n")
	for i, r := range m.Arches["amd64"].Records {
		kind, tag, _ := strings.Cut(r.C, " ")
		fmt.Fprintf(&src, "type T%d C.%s_%s\n", i, kind, tag)
	}
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "defs.go"), []byte(src.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	return dir
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
