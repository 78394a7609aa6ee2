package tests

import (
	"go/ast"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/verbsexp/verbsexp/internal/gencmd"
)

// Docs are code: every Go snippet of README.md and of a package doc
// comment must be the body (or part of the body) of an Example function,
// which go test compiles and runs. TestReadmeSnippetsAreExamples and
// TestPackageDocSnippetsAreExamples check it with one rule: the snippet's
// code lines, whitespace collapsed, occur in the same order among the
// lines of one Example function (comment-only lines of the snippet may be
// prose the Example replaces with checks; its import lines must be
// imports of the Example's file). A snippet of //go:generate lines only
// must have the form the generator records.

// snippet is one Go code block of a document.
type snippet struct {
	where string // file:line
	lines []string
}

// example is one Example function: its file's imports and its body lines.
type example struct {
	where   string
	imports []string
	lines   []string
}

var spaces = regexp.MustCompile(`\s+`)

func normalize(line string) string { return strings.TrimSpace(spaces.ReplaceAllString(line, " ")) }

// examples reads every Example function of the module's _test.go files
// under dir ("" for all), skipping testdata and hidden directories.
func examples(t *testing.T, dir string) []example {
	t.Helper()
	root := repoRoot(t)
	base := filepath.Join(root, dir)
	var exs []example
	err := filepath.WalkDir(base, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != base && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			if dir != "" && path != base {
				return filepath.SkipDir // one package
			}
			return nil
		}
		if !strings.HasSuffix(name, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		if err != nil {
			return err
		}
		var imports []string
		for _, im := range f.Imports {
			s := im.Path.Value
			if im.Name != nil {
				s = im.Name.Name + " " + s
			}
			imports = append(imports, s)
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || !strings.HasPrefix(fd.Name.Name, "Example") || fd.Body == nil {
				continue
			}
			body := string(src[fset.Position(fd.Body.Lbrace).Offset+1 : fset.Position(fd.Body.Rbrace).Offset])
			var lines []string
			for _, l := range strings.Split(body, "\n") {
				if l = normalize(l); l != "" {
					lines = append(lines, l)
				}
			}
			rel, _ := filepath.Rel(root, path)
			exs = append(exs, example{where: rel + ":" + fd.Name.Name, imports: imports, lines: lines})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return exs
}

// inExample says which Example holds the snippet, or "" with the first
// line no Example matches from its start.
func inExample(s snippet, exs []example) (string, string) {
	var code, imports []string
	for _, l := range s.lines {
		l = normalize(l)
		switch {
		case l == "", strings.HasPrefix(l, "//"):
		case strings.HasPrefix(l, "import "):
			imports = append(imports, strings.TrimPrefix(l, "import "))
		default:
			code = append(code, l)
		}
	}
	best := ""
	bestN := -1
	for _, ex := range exs {
		if !containsAll(ex.imports, imports) {
			continue
		}
		i := 0
		for _, l := range ex.lines {
			if i < len(code) && l == code[i] {
				i++
			}
		}
		if i == len(code) {
			return ex.where, ""
		}
		if i > bestN {
			bestN, best = i, code[i]
		}
	}
	if bestN < 0 {
		if len(imports) > 0 {
			return "", "(no Example's file imports " + strings.Join(imports, ", ") + ")"
		}
		return "", "(no Example functions here)"
	}
	return "", best
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			if h == w {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// directiveOnly reports a snippet made of //go:generate lines, and checks
// each has the form the generator records (gencmd.Join: -I DIR … -o .).
func directiveOnly(t *testing.T, s snippet) bool {
	for _, l := range s.lines {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "//go:generate ") {
			return false
		}
	}
	for _, l := range s.lines {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		args, err := gencmd.Split(strings.TrimPrefix(l, "//go:generate "))
		if err != nil || len(gencmd.Value(args, "I")) == 0 || !slicesEqualTail(args, []string{"-o", "."}) {
			t.Errorf("%s: %q is not a directive gen writes (want //go:generate %s -I DIR … -o .): %v", s.where, l, gencmd.Prefix, err)
		}
	}
	return true
}

func slicesEqualTail(args, tail []string) bool {
	if len(args) < len(tail) {
		return false
	}
	for i, w := range tail {
		if args[len(args)-len(tail)+i] != w {
			return false
		}
	}
	return true
}

// readmeSnippets are the ```go blocks of a markdown file.
func readmeSnippets(t *testing.T, file string) []snippet {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var ss []snippet
	var cur *snippet
	for i, l := range strings.Split(string(b), "\n") {
		switch {
		case cur == nil && strings.TrimSpace(l) == "```go":
			cur = &snippet{where: filepath.Base(file) + ":" + strconv.Itoa(i+1)}
		case cur != nil && strings.TrimSpace(l) == "```":
			ss = append(ss, *cur)
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, l)
		}
	}
	return ss
}

// docFiles are the documents whose Go snippets must be code that runs:
// README.md and every docs/*.md.
func docFiles(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(repoRoot(t), "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join(repoRoot(t), "README.md")}, docs...)
}

// TestReadmeSnippetsAreExamples: every ```go block of README.md and
// docs/*.md is (part of) an Example somewhere in the module, or, when it
// is a whole program (package main), the main.go of one of examples/,
// which their tests run.
func TestReadmeSnippetsAreExamples(t *testing.T) {
	exs := examples(t, "")
	total := 0
	for _, file := range docFiles(t) {
		ss := readmeSnippets(t, file)
		if filepath.Base(file) == "README.md" && len(ss) < 1 {
			t.Fatalf("README.md has %d Go snippets; expected its first program", len(ss))
		}
		total += len(ss)
		for _, s := range ss {
			if directiveOnly(t, s) {
				continue
			}
			if prog, ok := wholeProgram(s); ok {
				if where := exampleProgram(t, prog); where == "" {
					t.Errorf("%s: this program is no examples/*/main.go as it is (byte for byte, tabs as tabs): make it one, which a test runs", s.where)
				} else {
					t.Logf("%s is %s", s.where, where)
				}
				continue
			}
			if where, missing := inExample(s, exs); where == "" {
				t.Errorf("%s: this snippet is in no Example (first line not found in order: %q); make it the body of an Example function", s.where, missing)
			} else {
				t.Logf("%s is in %s", s.where, where)
			}
		}
	}
	t.Logf("%d Go snippets in README.md and docs/ checked", total)
}

// wholeProgram says whether a snippet is a whole program (a package main
// clause), and gives its text.
func wholeProgram(s snippet) (string, bool) {
	for _, l := range s.lines {
		if strings.TrimSpace(l) == "package main" {
			return strings.Join(s.lines, "\n"), true
		}
	}
	return "", false
}

// exampleProgram names the examples/*/main.go whose text is prog, or "".
func exampleProgram(t *testing.T, prog string) string {
	t.Helper()
	mains, err := filepath.Glob(filepath.Join(repoRoot(t), "examples", "*", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mains {
		if b, err := os.ReadFile(m); err == nil && strings.TrimSpace(string(b)) == strings.TrimSpace(prog) {
			rel, _ := filepath.Rel(repoRoot(t), m)
			return rel
		}
	}
	return ""
}

// docBlock is the ```sh block of README.md or docs/*.md that contains
// marker, as the shell would read it, and the file it is in.
func docBlock(t *testing.T, marker string) (block, file string) {
	t.Helper()
	for _, f := range docFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, part := range strings.Split(string(b), "```")[1:] {
			if body, ok := strings.CutPrefix(part, "sh\n"); ok && strings.Contains(body, marker) {
				return body, f
			}
		}
	}
	t.Fatalf("neither README.md nor docs/*.md has an sh block with %q", marker)
	return "", ""
}

// TestPackageDocSnippetsAreExamples: every code block of a package doc
// comment that is Go (it parses as statements or declarations) is (part
// of) an Example of that package.
func TestPackageDocSnippetsAreExamples(t *testing.T) {
	root := repoRoot(t)
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (name == "testdata" || name == "generated" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil || f.Doc == nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		var p comment.Parser
		for _, blk := range p.Parse(f.Doc.Text()).Content {
			code, ok := blk.(*comment.Code)
			if !ok {
				continue
			}
			s := snippet{where: rel + " (package doc)", lines: strings.Split(code.Text, "\n")}
			if !isGo(code.Text) || directiveOnly(t, s) {
				continue
			}
			checked++
			if where, missing := inExample(s, examples(t, filepath.Dir(rel))); where == "" {
				t.Errorf("%s: this snippet is in no Example of the package (first line not found in order: %q); make it the body of an Example function", s.where, missing)
			} else {
				t.Logf("%s is in %s", s.where, where)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d package doc snippets checked", checked)
}

// isGo says whether a code block is Go source: statements or
// declarations (usage lines, shell commands and tables are not).
func isGo(src string) bool {
	fset := token.NewFileSet()
	if _, err := parser.ParseFile(fset, "", "package p\nfunc _() {\n"+src+"\n}\n", 0); err == nil {
		return true
	}
	_, err := parser.ParseFile(fset, "", "package p\n"+src+"\n", 0)
	return err == nil
}

// TestGoDocShowsRegenerateCommand: go doc ./generated/verbs, which says go
// generate regenerates the package, shows the command it runs (the
// //go:generate line itself is not part of the documentation).
func TestGoDocShowsRegenerateCommand(t *testing.T) {
	args, err := gencmd.Read(filepath.Join(repoRoot(t), "generated", "verbs"))
	if err != nil {
		t.Fatal(err)
	}
	out := runIn(t, repoRoot(t), nil, "go", "doc", "./generated/verbs")
	if cmd := gencmd.Join(args); !strings.Contains(out, "regenerates the package; it runs") || !strings.Contains(out, "    "+cmd+"\n") {
		t.Errorf("go doc ./generated/verbs does not show %q:\n%s", cmd, firstLines(out, 25))
	}
}
