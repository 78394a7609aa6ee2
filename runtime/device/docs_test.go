//go:build linux && cgo

package device_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocSnippets: every Go block of docs/device.md is part of an
// Example of this package (its code lines, whitespace collapsed, in
// order among one Example's lines), which go test runs: docs are code.
func TestDocSnippets(t *testing.T) {
	md, err := os.ReadFile("../../docs/device.md")
	if err != nil {
		t.Fatal(err)
	}
	space := regexp.MustCompile(`\s+`)
	norm := func(l string) string { return strings.TrimSpace(space.ReplaceAllString(l, " ")) }
	examples := map[string][]string{}
	files, _ := filepath.Glob("*_test.go")
	for _, f := range files {
		fset := token.NewFileSet()
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		af, err := parser.ParseFile(fset, f, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || !strings.HasPrefix(fn.Name.Name, "Example") || fn.Body == nil {
				continue
			}
			body := string(src[fset.Position(fn.Body.Lbrace).Offset:fset.Position(fn.Body.Rbrace).Offset])
			for _, l := range strings.Split(body, "\n") {
				examples[fn.Name.Name] = append(examples[fn.Name.Name], norm(l))
			}
		}
	}
	blocks := 0
	for i, blk := range strings.Split(string(md), "```go\n")[1:] {
		code, _, ok := strings.Cut(blk, "```")
		if !ok {
			t.Fatalf("block %d is not closed", i+1)
		}
		blocks++
		var lines []string
		for _, l := range strings.Split(code, "\n") {
			if l = norm(l); l != "" {
				lines = append(lines, l)
			}
		}
		found := ""
		for name, ex := range examples {
			at := 0
			for _, l := range ex {
				if at < len(lines) && l == lines[at] {
					at++
				}
			}
			if at == len(lines) {
				found = name
			}
		}
		if found == "" {
			t.Errorf("docs/device.md's Go block %d (%q …) is in no Example of runtime/device", i+1, lines[0])
		}
	}
	if blocks < 3 {
		t.Fatalf("docs/device.md has %d Go blocks; expected several", blocks)
	}
}
