//go:build linux && cgo

package softdev_test

import (
	"testing"

	"github.com/verbsexp/verbsexp/runtime/internal/doctest"
)

// TestPackageDocIsExample: the package documentation's one snippet is
// Example's body, so it compiles and runs.
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
