package softdev

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// A layer of softdev's C: the files and headers it owns (by name, paths
// relative to runtime/softdev) and the layers whose headers it may
// include besides its own. rank orders them from the bottom: an include
// of a higher rank points up, one of the same rank but another layer
// points sideways, one lower than the layers it may include skips the
// layer between. extern names quoted headers from outside softdev that
// the layer may include.
type cLayer struct {
	name    string
	rank    int
	files   []string // glob patterns of its .c files (and of .go files with a cgo preamble)
	headers []string
	may     []string
	extern  []string
}

// softdevLayers is section 8 of issue 24: the transport below one seam
// (transport.h), the engine above it, and two thin front ends on top.
var softdevLayers = []cLayer{
	{name: "transport", rank: 0, files: []string{"transport_*.c"}, headers: []string{"transport.h"}},
	{name: "engine", rank: 1, files: []string{"engine_*.c"}, headers: []string{"engine.h"}, may: []string{"transport"}},
	{name: "Go front end", rank: 2, files: []string{"front_go*.c", "*.go"}, headers: []string{"front_go.h"},
		may:    []string{"engine"},
		extern: []string{"_cgo_export.h", "../../abiutil/dynlib/dynlib.h"}},
	{name: "libibverbs front end", rank: 2, files: []string{"driver/*.c"}, may: []string{"engine"}},
}

var includeLine = regexp.MustCompile(`^\s*#\s*include\s*([<"])([^>"]*)[>"]`)

// cIncludes returns the #include lines of C source text: line number,
// whether quoted, and the name.
type cInclude struct {
	line   int
	quoted bool
	name   string
}

func cIncludes(src string) []cInclude {
	var out []cInclude
	for i, l := range strings.Split(src, "\n") {
		if m := includeLine.FindStringSubmatch(l); m != nil {
			out = append(out, cInclude{line: i + 1, quoted: m[1] == `"`, name: m[2]})
		}
	}
	return out
}

// cgoIncludes returns the #include lines of a Go file's cgo preamble
// (none if it does not import "C"), numbered as lines of the Go file.
func cgoIncludes(name, src string) ([]cInclude, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.ImportsOnly|parser.ParseComments)
	if err != nil {
		return nil, err
	}
	var out []cInclude
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, s := range g.Specs {
			is := s.(*ast.ImportSpec)
			if p, _ := strconv.Unquote(is.Path.Value); p != "C" {
				continue
			}
			doc := is.Doc
			if doc == nil {
				doc = g.Doc
			}
			if doc == nil {
				continue
			}
			for _, c := range doc.List {
				text := strings.TrimPrefix(c.Text, "//")
				if strings.HasPrefix(c.Text, "/*") {
					text = strings.TrimSuffix(strings.TrimPrefix(c.Text, "/*"), "*/")
				}
				for _, inc := range cIncludes(text) {
					inc.line += fset.Position(c.Pos()).Line - 1
					out = append(out, inc)
				}
			}
		}
	}
	return out, nil
}

// layerOf returns the layer a file (a .c, .go or .h path relative to
// runtime/softdev) belongs to, or nil.
func layerOf(file string) *cLayer {
	for i := range softdevLayers {
		l := &softdevLayers[i]
		pats := l.files
		if strings.HasSuffix(file, ".h") {
			pats = l.headers
		}
		for _, p := range pats {
			if ok, _ := path.Match(p, file); ok {
				return l
			}
		}
	}
	return nil
}

// checkLayers checks the includes of softdev's C files, headers and cgo
// preambles (sources: path relative to runtime/softdev -> text) and
// returns what breaks the layering, one line each, sorted.
func checkLayers(sources map[string]string) []string {
	var bad []string
	report := func(file string, line int, format string, args ...any) {
		bad = append(bad, fmt.Sprintf("%s:%d: %s", file, line, fmt.Sprintf(format, args...)))
	}
	for file, src := range sources {
		incs := cIncludes(src)
		if strings.HasSuffix(file, ".go") {
			var err error
			if incs, err = cgoIncludes(file, src); err != nil {
				report(file, 0, "%v", err)
				continue
			}
			if len(incs) == 0 {
				continue // no cgo: no layer
			}
		}
		own := layerOf(file)
		if own == nil {
			report(file, 1, "belongs to no layer: name it transport_*.c, engine_*.c or front_go*.c (or put it in driver/), "+
				"headers transport.h, engine.h, front_go.h")
			continue
		}
		for _, inc := range incs {
			if !inc.quoted {
				continue // the C library's and the verbs headers: below every layer
			}
			line := inc.line
			if strings.HasSuffix(inc.name, ".c") {
				report(file, line, "includes %s: a .c file (go build does not track it; build it as its own file)", inc.name)
				continue
			}
			target := path.Clean(path.Join(path.Dir(file), inc.name))
			if slicesContains(own.extern, inc.name) {
				continue
			}
			to := layerOf(target)
			switch {
			case to == nil || !strings.HasSuffix(target, ".h") || strings.HasPrefix(target, "../"):
				report(file, line, "includes %s, which belongs to no layer of softdev (%s)", inc.name, own.name)
			case to == own || slicesContains(own.may, to.name):
				// its own layer, or the one right below it
			case to.rank > own.rank:
				report(file, line, "includes %s: points up, from the %s to the %s", inc.name, own.name, to.name)
			case to.rank == own.rank:
				report(file, line, "includes %s: points sideways, from the %s to the %s", inc.name, own.name, to.name)
			default:
				report(file, line, "includes %s: skips a layer, from the %s down to the %s (include %s's header)",
					inc.name, own.name, to.name, strings.Join(own.may, ", "))
			}
		}
	}
	sort.Strings(bad)
	return bad
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// softdevSources reads the package's C files, headers and non-test Go
// files, and driver/'s C files.
func softdevSources(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, pat := range []string{"*.c", "*.h", "*.go", "driver/*.c", "driver/*.h"} {
		names, err := filepath.Glob(pat)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if strings.HasSuffix(n, "_test.go") {
				continue // cgo is not allowed in tests
			}
			b, err := os.ReadFile(n)
			if err != nil {
				t.Fatal(err)
			}
			out[filepath.ToSlash(n)] = string(b)
		}
	}
	return out
}

// TestLayers enforces section 8 of issue 24 on the tree: every C file and
// header of softdev belongs to a layer by its name, and every include
// points at its own layer's header or the one right below.
func TestLayers(t *testing.T) {
	src := softdevSources(t)
	for _, want := range []string{"transport.h", "engine.h", "front_go.h", "driver/driver.c"} {
		if _, ok := src[want]; !ok {
			t.Errorf("%s is missing: the layering expects it", want)
		}
	}
	if bad := checkLayers(src); len(bad) > 0 {
		t.Errorf("softdev's C breaks its layering (transport < engine < front ends, doc.go):\n\t%s", strings.Join(bad, "\n\t"))
	}
}

// TestLayersChecker shows that checkLayers catches each way an include
// can go wrong, and accepts the right ones.
func TestLayersChecker(t *testing.T) {
	cases := []struct {
		file, src string
		want      string // "" for none, else a substring of the single report
	}{
		{"transport_x.c", "#include <errno.h>\n#include \"transport.h\"\n", ""},
		{"engine_x.c", "#include \"engine.h\"\n#include \"transport.h\"\n", ""},
		{"engine.h", "#include \"transport.h\"\n", ""},
		{"front_go.c", "#include \"engine.h\"\n#include \"front_go.h\"\n#include \"_cgo_export.h\"\n", ""},
		{"driver/driver.c", "#include <infiniband/driver.h>\n#include \"../engine.h\"\n", ""},
		{"x.go", "package softdev\n\n// #include \"engine.h\"\nimport \"C\"\n", ""},
		{"transport_x.c", "#include \"transport.h\"\n#include \"engine.h\"\n", "transport_x.c:2: includes engine.h: points up"},
		{"transport.h", "#include \"engine.h\"\n", "transport.h:1: includes engine.h: points up"},
		{"engine_x.c", "#include \"front_go.h\"\n", "points up, from the engine to the Go front end"},
		{"driver/driver.c", "#include \"../front_go.h\"\n", "points sideways, from the libibverbs front end to the Go front end"},
		{"front_go.c", "#include \"transport.h\"\n", "skips a layer"},
		{"x.go", "package softdev\n\n/*\n#include \"transport.h\"\n*/\nimport \"C\"\n", "x.go:4: includes transport.h: skips a layer"},
		{"engine_x.c", "#include \"softdev.h\"\n", "belongs to no layer"},
		{"provider.c", "#include \"engine.h\"\n", "provider.c:1: belongs to no layer"},
		{"engine_x.c", "#include \"transport_rc.c\"\n", "a .c file"},
		{"driver/driver.c", "#include \"../driver/x.h\"\n", "belongs to no layer"},
	}
	for _, c := range cases {
		bad := checkLayers(map[string]string{c.file: c.src})
		switch {
		case c.want == "" && len(bad) != 0:
			t.Errorf("%s %q: want no report, got %q", c.file, c.src, bad)
		case c.want != "" && (len(bad) != 1 || !strings.Contains(bad[0], c.want)):
			t.Errorf("%s %q: want one report containing %q, got %q", c.file, c.src, c.want, bad)
		}
	}
}
