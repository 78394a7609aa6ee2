//go:build linux && cgo

package task_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// exampleBody returns the source of a function in example_test.go
// between its braces, without the "// Output:" comment, one tab less
// indented: the form a README or doc snippet has.
func exampleBody(t *testing.T, name string) string {
	t.Helper()
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "example_test.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != name {
			continue
		}
		body := string(src[fset.Position(fn.Body.Lbrace).Offset+1 : fset.Position(fn.Body.Rbrace).Offset])
		body = body[:strings.Index(body, "\t// Output:")]
		var lines []string
		for _, l := range strings.Split(strings.Trim(body, "\n"), "\n") {
			lines = append(lines, strings.TrimPrefix(l, "\t"))
		}
		return strings.Join(lines, "\n")
	}
	t.Fatalf("no function %s in example_test.go", name)
	return ""
}

// TestReadmeFirstTaskListIsExampleList: the README's "Post your first
// task list" snippet is ExampleList's body, so it compiles, runs on the
// software device and has its output checked.
func TestReadmeFirstTaskListIsExampleList(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(readme)
	i := strings.Index(s, "## Post your first task list")
	if i < 0 {
		t.Fatal(`README.md has no "## Post your first task list" section`)
	}
	s = s[i:]
	a := strings.Index(s, "```go\n")
	b := strings.Index(s[a+6:], "\n```")
	if a < 0 || b < 0 {
		t.Fatal("the section has no go code block")
	}
	if got, want := s[a+6:a+6+b], exampleBody(t, "ExampleList"); got != want {
		t.Fatalf("README snippet differs from ExampleList's body; copy the body into README.md\n--- README\n%s\n--- ExampleList\n%s", got, want)
	}
}

// TestPackageDocIsExample: the snippet in the package documentation is
// Example's body.
func TestPackageDocIsExample(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var code []string
	for _, l := range strings.Split(string(src), "\n") {
		switch {
		case strings.HasPrefix(l, "//\t"):
			code = append(code, l[3:])
		case l == "//" && len(code) > 0 && !strings.HasPrefix(code[len(code)-1], "\x00"):
			code = append(code, "")
		case len(code) > 0:
			code = append(code, "\x00") // end of the block
		}
	}
	got := strings.Join(code, "\n")
	got = strings.TrimRight(got[:strings.Index(got+"\x00", "\x00")], "\n")
	if want := exampleBody(t, "Example"); got != want {
		t.Fatalf("package doc snippet differs from Example's body\n--- doc.go\n%s\n--- Example\n%s", got, want)
	}
}
