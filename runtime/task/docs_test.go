//go:build linux && cgo

package task_test

import (
	"testing"

	"github.com/verbsexp/verbsexp/runtime/internal/doctest"
)

// TestReadmeFirstTaskListIsExampleList: the README's "Post your first
// task list" snippet is ExampleList's body, so it compiles, runs on the
// software device and has its output checked.
func TestReadmeFirstTaskListIsExampleList(t *testing.T) {
	got, err := doctest.MarkdownBlock("../../README.md", "## Post your first task list")
	if err != nil {
		t.Fatal(err)
	}
	want, err := doctest.ExampleBody("example_test.go", "ExampleList")
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("README snippet differs from ExampleList's body; copy the body into README.md\n--- README\n%s\n--- ExampleList\n%s", got, want)
	}
}

// TestPackageDocIsExample: the one snippet of the package documentation
// is Example's body.
func TestPackageDocIsExample(t *testing.T) {
	blocks, err := doctest.DocSnippets("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	want, err := doctest.ExampleBody("example_test.go", "Example")
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 1 || blocks[0] != want {
		t.Fatalf("package doc has %d snippets; want one, Example's body\n--- doc.go\n%q\n--- Example\n%s", len(blocks), blocks, want)
	}
}
