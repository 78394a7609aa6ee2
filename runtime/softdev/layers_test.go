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

// engineOnly are the engine's records that the transport must not see
// the inside of: the device (the transport has its own record, struct
// sd_port, and passes the device back to the engine as an opaque handle)
// and the device's tables.
var engineOnly = []string{"sd_device", "sd_addrset"}

var (
	structDef = regexp.MustCompile(`\bstruct\s+(\w+)\s*\{`)
	// A name declared as a pointer to the engine's device: a variable, a
	// parameter or a field. The terminator tells a prototype's parameter
	// (, or ) in a header, where it names nothing) from a field (;).
	devicePtrDecl = regexp.MustCompile(`\bstruct\s+sd_device\s*\*\s*(?:const\s+)?(\w+)\s*([;,)=\[])`)
)

// checkSeam checks that the transport's files (transport.h and
// transport_*.c; sources as for checkLayers) keep to the narrow seam:
// none defines a record of the engine's (engineOnly), and none reads a
// field through a pointer to the engine's device. The compiler backs the
// second once the first holds (a field of an incomplete type does not
// compile); the check names each use, with its line, where it does not.
func checkSeam(sources map[string]string) []string {
	var bad []string
	for file, src := range sources {
		if l := layerOf(file); l == nil || l.name != "transport" || strings.HasSuffix(file, ".go") {
			continue
		}
		code := cStripComments(src)
		for _, m := range structDef.FindAllStringSubmatchIndex(code, -1) {
			if name := code[m[2]:m[3]]; slicesContains(engineOnly, name) {
				bad = append(bad, fmt.Sprintf("%s:%d: defines struct %s, the engine's: it belongs in engine.h",
					file, lineAt(code, m[0]), name))
			}
		}
		ptrs := map[string]bool{}
		for _, m := range devicePtrDecl.FindAllStringSubmatch(code, -1) {
			if strings.HasSuffix(file, ".h") && m[2] != ";" {
				continue // a prototype's parameter
			}
			ptrs[m[1]] = true
		}
		if h, ok := sources["transport.h"]; ok && file != "transport.h" {
			for _, m := range devicePtrDecl.FindAllStringSubmatch(cStripComments(h), -1) {
				if m[2] == ";" {
					ptrs[m[1]] = true // a field of the seam's records (sd_port.dev, sd_qp.dev)
				}
			}
		}
		for name := range ptrs {
			use := regexp.MustCompile(`\b` + regexp.QuoteMeta(name) + `\s*->\s*(\w+)`)
			for _, m := range use.FindAllStringSubmatchIndex(code, -1) {
				bad = append(bad, fmt.Sprintf("%s:%d: reads %s, a field of the engine's struct sd_device",
					file, lineAt(code, m[0]), code[m[0]:m[1]]))
			}
		}
	}
	sortByPosition(bad)
	return bad
}

// sortByPosition sorts "file:line: ..." reports by file, then line.
func sortByPosition(reports []string) {
	pos := func(r string) (string, int) {
		f, rest, _ := strings.Cut(r, ":")
		l, _, _ := strings.Cut(rest, ":")
		n, _ := strconv.Atoi(l)
		return f, n
	}
	sort.SliceStable(reports, func(i, j int) bool {
		fi, li := pos(reports[i])
		fj, lj := pos(reports[j])
		if fi != fj {
			return fi < fj
		}
		if li != lj {
			return li < lj
		}
		return reports[i] < reports[j]
	})
}

// cStripComments blanks C comments, keeping newlines (line numbers
// stay), so that prose about the device is not read as code.
func cStripComments(src string) string {
	b := []byte(src)
	for i := 0; i+1 < len(b); i++ {
		switch {
		case b[i] == '/' && b[i+1] == '*':
			j := i + 2
			for j+1 < len(b) && !(b[j] == '*' && b[j+1] == '/') {
				j++
			}
			end := min(j+2, len(b))
			for k := i; k < end; k++ {
				if b[k] != '\n' {
					b[k] = ' '
				}
			}
			i = end - 1
		case b[i] == '/' && b[i+1] == '/':
			for ; i < len(b) && b[i] != '\n'; i++ {
				b[i] = ' '
			}
		case b[i] == '"' || b[i] == '\'':
			q := b[i]
			for i++; i < len(b) && b[i] != q && b[i] != '\n'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		}
	}
	return string(b)
}

func lineAt(s string, off int) int { return strings.Count(s[:off], "\n") + 1 }

// TestSeam enforces the narrow seam on the tree: the engine's device
// record is not in transport.h, and the transport reads none of its
// fields (section 8 of issue 24; transport.h's header comment).
func TestSeam(t *testing.T) {
	if bad := checkSeam(softdevSources(t)); len(bad) > 0 {
		t.Errorf("softdev's transport reaches past its seam (keep the transport's state in struct sd_port, "+
			"and ask the engine for the rest through a call up, transport.h):\n\t%s", strings.Join(bad, "\n\t"))
	}
}

// TestSeamChecker shows that checkSeam catches a device record in the
// seam and each way a transport file can read the device, and accepts
// the opaque handle passed back up.
func TestSeamChecker(t *testing.T) {
	checkCases(t, checkSeam, []checkerCase{
		{"transport.h", "struct sd_device;\nstruct sd_port { struct sd_device *dev; };\nvoid sd_lock(struct sd_device *d);\n", ""},
		{"transport_x.c", "void f(struct sd_port *port) { sd_lock(port->dev); /* d->quiet */ }\n", ""},
		{"engine.h", "struct sd_device {\n\tint quiet;\n};\n", ""},
		{"engine_x.c", "void f(struct sd_device *d) { d->quiet = 0; }\n", ""},
		{"transport.h", "struct sd_device;\n\nstruct sd_device {\n\tint quiet;\n};\n", "transport.h:3: defines struct sd_device"},
		{"transport.h", "struct sd_addrset { int n; };\n", "defines struct sd_addrset"},
		{"transport_x.c", "struct sd_device { int quiet; };\n", "transport_x.c:1: defines struct sd_device"},
		{"transport_x.c", "#include \"transport.h\"\n\nvoid f(struct sd_device *d)\n{\n\td->quiet = 0;\n}\n", "transport_x.c:5: reads d->quiet"},
		{"transport_x.c", "static int g(const struct sd_device *dev) { return dev -> links != 0; }\n", "reads dev -> links"},
		{"transport_x.c", "struct sd_net { struct sd_device *dev; };\nvoid f(struct sd_net *n) { lock(&n->dev->lock); }\n", "transport_x.c:2: reads dev->lock"},
	})
	// A field of the seam's records typed as the device (sd_port.dev) is
	// a pointer the transport must not read through either.
	bad := checkSeam(map[string]string{
		"transport.h":   "struct sd_port { struct sd_device *dev; };\n",
		"transport_x.c": "void f(struct sd_port *port) { port->dev->quiet = 0; }\n",
	})
	if len(bad) != 1 || !strings.Contains(bad[0], "transport_x.c:1: reads dev->quiet") {
		t.Errorf("a read through sd_port.dev: want one report, got %q", bad)
	}
}

// TestLayersChecker shows that checkLayers catches each way an include
// can go wrong, and accepts the right ones.
func TestLayersChecker(t *testing.T) {
	checkCases(t, checkLayers, []checkerCase{
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
	})
}

// checkerCase is a source a checker must accept (want "") or report
// once, in a report containing want.
type checkerCase struct{ file, src, want string }

func checkCases(t *testing.T, check func(map[string]string) []string, cases []checkerCase) {
	t.Helper()
	for _, c := range cases {
		bad := check(map[string]string{c.file: c.src})
		switch {
		case c.want == "" && len(bad) != 0:
			t.Errorf("%s %q: want no report, got %q", c.file, c.src, bad)
		case c.want != "" && (len(bad) != 1 || !strings.Contains(bad[0], c.want)):
			t.Errorf("%s %q: want one report containing %q, got %q", c.file, c.src, c.want, bad)
		}
	}
}
