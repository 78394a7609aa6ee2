package main

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/verbsexp/verbsexp/gen/internal/emit"
	"github.com/verbsexp/verbsexp/gen/internal/generate"
	"github.com/verbsexp/verbsexp/gen/internal/parse"
	"github.com/verbsexp/verbsexp/internal/abicheck"
	"github.com/verbsexp/verbsexp/internal/manifest"
	"github.com/verbsexp/verbsexp/internal/target"
)

var update = flag.Bool("update", false, "rewrite gen/testdata/golden from the current generator")

// goldenCases are the C constructs under test: gen/testdata/c/<case>.h,
// expected output in gen/testdata/golden/<case>/.
var goldenCases = []string{"anon", "arrays", "bigenums", "bitfields", "deep", "enums", "flexible", "funcs", "names", "packed"}

func goldenOptions(c string) generate.Options {
	return generate.Options{
		Parse:   parse.Options{IncludeDirs: []string{"testdata/c"}, Entry: c + ".h", ScopeDir: ""},
		Targets: target.All,
		Package: c,
		Command: "gen -I testdata/c -entry " + c + ".h -scope \"\" -pkg " + c,
		CFlags:  []string{"-I${SRCDIR}/../../c"},
	}
}

func generateCase(t *testing.T, c string) []emit.File {
	t.Helper()
	res, err := generate.Run(goldenOptions(c))
	if err != nil {
		t.Fatalf("%s: %v", c, err)
	}
	return res.Files
}

// TestGolden compares the generator's output for each construct with the
// committed expectation, byte for byte. go test ./gen -update rewrites it.
func TestGolden(t *testing.T) {
	for _, c := range goldenCases {
		t.Run(c, func(t *testing.T) {
			files := generateCase(t, c)
			dir := filepath.Join("testdata", "golden", c)
			if *update {
				writeGolden(t, dir, files)
			}
			want := map[string]bool{}
			for _, f := range files {
				want[f.Name] = true
				if _, err := os.Lstat(filepath.Join(dir, f.Name)); err != nil {
					t.Fatalf("%v (run go test ./gen -run TestGolden -update)", err)
				}
				if !generate.SameFile(filepath.Join(dir, f.Name), f) {
					t.Errorf("%s/%s differs from the generator's output (go test ./gen -run TestGolden -update, then review the diff)", dir, f.Name)
				}
			}
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if !want[e.Name()] && generate.Owned(filepath.Join(dir, e.Name())) {
					t.Errorf("%s/%s is a stale generated file", dir, e.Name())
				}
			}
		})
	}
}

func writeGolden(t *testing.T, dir string, files []emit.File) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		p := filepath.Join(dir, f.Name)
		if f.Link != "" {
			os.Remove(p)
			if err := os.Symlink(f.Link, p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDeterministic generates twice and expects identical bytes.
func TestDeterministic(t *testing.T) {
	for _, c := range goldenCases {
		a, b := generateCase(t, c), generateCase(t, c)
		if len(a) != len(b) {
			t.Fatalf("%s: %d files, then %d", c, len(a), len(b))
		}
		for i := range a {
			if a[i].Name != b[i].Name || !bytes.Equal(a[i].Data, b[i].Data) || a[i].Link != b[i].Link {
				t.Errorf("%s: %s differs between two runs", c, a[i].Name)
			}
		}
	}
}

// TestGoldenAgreesWithC compiles each golden manifest's assertions with
// every target's C compiler against the case header.
func TestGoldenAgreesWithC(t *testing.T) {
	for _, c := range goldenCases {
		m, err := manifest.Read(filepath.Join("testdata", "golden", c, "abi.json"))
		if err != nil {
			t.Fatal(err)
		}
		for _, tg := range target.All {
			src, n, err := abicheck.Source(m, tg.GoArch, c+".h")
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				t.Fatalf("%s/%s: no assertions", c, tg.GoArch)
			}
			if err := abicheck.Compile(src, tg, []string{"testdata/c"}); err != nil {
				t.Errorf("%s: %v", c, err)
			}
		}
	}
}

// TestGoldenCompilesEverywhere vets the golden packages for every target
// without cgo (their layout guards fail to compile if Go's layout of a
// generated type is not the one planned), and on the host with cgo.
func TestGoldenCompilesEverywhere(t *testing.T) {
	var pkgs []string
	for _, c := range goldenCases {
		pkgs = append(pkgs, "./testdata/golden/"+c)
	}
	for _, tg := range target.All {
		cmd := exec.Command("go", append([]string{"vet"}, pkgs...)...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOARCH="+tg.GoArch, "GOOS=linux")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("GOARCH=%s go vet %s: %v\n%s", tg.GoArch, strings.Join(pkgs, " "), err, out)
		}
	}
	// With cgo on the host: the shims compile against the case headers and
	// their _Static_asserts hold.
	cmd := exec.Command("go", append([]string{"vet"}, pkgs...)...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("go vet (cgo) %s: %v\n%s", strings.Join(pkgs, " "), err, out)
	}
}

// TestUnwrappableFunctionsAreReported: what cannot be wrapped is named in
// the notes with the reason, and every other function gets a wrapper.
func TestUnwrappableFunctionsAreReported(t *testing.T) {
	res, err := generate.Run(goldenOptions("funcs"))
	if err != nil {
		t.Fatal(err)
	}
	var notes []string
	for _, n := range res.Notes {
		notes = append(notes, n.String())
	}
	all := strings.Join(notes, "\n")
	for _, want := range []string{
		"funcs.h:14:5: function dev_printf is not wrapped: variadic",
		"funcs.h:15:5: function dev_on_event is not wrapped: parameter 2 is a function pointer",
		"funcs.h:16:5: function dev_sum is not wrapped: parameter 1 (p) is passed by value as a record",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("notes lack %q:\n%s", want, all)
		}
	}
	got := map[string]string{}
	for _, w := range res.Shims.Wrappers {
		got[w.Func.C] = string(w.Conv)
	}
	want := map[string]string{"dev_status": "status", "dev_open": "pointer", "dev_close": "void", "dev_guid": "value", "dev_poke": "status", "dev_flag": "status", "dev_name": "pointer", "dev_count": "status", "dev_label": "pointer", "dev_fail": "status"}
	for fn, conv := range want {
		if got[fn] != conv {
			t.Errorf("%s: convention %q, want %q", fn, got[fn], conv)
		}
	}
	if len(got) != len(want) {
		t.Errorf("wrapped %v, want exactly %v", got, want)
	}
	// How each result crosses back: errno with it, in one C value.
	crossing := map[string]string{"dev_status": "packed", "dev_open": "with-errno", "dev_close": "plain", "dev_guid": "plain", "dev_poke": "packed", "dev_flag": "packed", "dev_name": "with-errno", "dev_count": "with-errno", "dev_label": "with-errno", "dev_fail": "packed"}
	for _, w := range res.Shims.Wrappers {
		if string(w.Crossing) != crossing[w.Func.C] {
			t.Errorf("%s: crossing %q, want %q", w.Func.C, w.Crossing, crossing[w.Func.C])
		}
		if w.String != (w.Func.C == "dev_name" || w.Func.C == "dev_label") {
			t.Errorf("%s: String = %v; only dev_name and dev_label return a const char *", w.Func.C, w.String)
		}
	}
}
