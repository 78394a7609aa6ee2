// Package doctest keeps the Go snippets of package docs and of the README
// identical to the Example functions that compile and run them: tests
// extract both and compare.
package doctest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
)

// ExampleBody returns the source of the function name in the Go file
// path, between its braces and before its "// Output:" comment, one tab
// less indented: the form a snippet has.
func ExampleBody(path, name string) (string, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
	if err != nil {
		return "", err
	}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != name || fn.Body == nil {
			continue
		}
		body := string(src[fset.Position(fn.Body.Lbrace).Offset+1 : fset.Position(fn.Body.Rbrace).Offset])
		if i := strings.Index(body, "\t// Output:"); i >= 0 {
			body = body[:i]
		}
		var lines []string
		for _, l := range strings.Split(strings.Trim(body, "\n"), "\n") {
			lines = append(lines, strings.TrimPrefix(l, "\t"))
		}
		return strings.Join(lines, "\n"), nil
	}
	return "", fmt.Errorf("%s: no function %s", path, name)
}

// DocSnippets returns the code blocks (lines indented by a tab) of the
// package doc comment in the Go file path, each without the comment
// markers and the tab; a blank comment line between indented lines
// belongs to the block.
func DocSnippets(path string) ([]string, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var blocks []string
	var cur []string
	flush := func() {
		for len(cur) > 0 && cur[len(cur)-1] == "" {
			cur = cur[:len(cur)-1]
		}
		if len(cur) > 0 {
			blocks = append(blocks, strings.Join(cur, "\n"))
		}
		cur = nil
	}
lines:
	for _, l := range strings.Split(string(src), "\n") {
		switch {
		case strings.HasPrefix(l, "package "):
			break lines
		case strings.HasPrefix(l, "//\t"):
			cur = append(cur, l[3:])
		case l == "//" && len(cur) > 0:
			cur = append(cur, "")
		default:
			flush()
		}
	}
	flush()
	return blocks, nil
}

// MarkdownBlock returns the first ```go block after the heading in the
// Markdown file path.
func MarkdownBlock(path, heading string) (string, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := string(src)
	i := strings.Index(s, heading)
	if i < 0 {
		return "", fmt.Errorf("%s has no %q section", path, heading)
	}
	s = s[i:]
	a := strings.Index(s, "```go\n")
	if a < 0 {
		return "", fmt.Errorf("%s: section %q has no go code block", path, heading)
	}
	b := strings.Index(s[a+6:], "\n```")
	if b < 0 {
		return "", fmt.Errorf("%s: unterminated go code block in %q", path, heading)
	}
	return s[a+6 : a+6+b], nil
}
