package emit

import (
	"bytes"
	"strings"
	"testing"

	"github.com/dave/jennifer/jen"
)

// TestRenderErrorHasNoSource: Go that does not format is reported in one
// line, as the generator's bug, without jennifer's dump of the source
// (which reached users whole).
func TestRenderErrorHasNoSource(t *testing.T) {
	f := jen.NewFile("p")
	f.Comment("a line of the source that must not be shown")
	f.Func().Id("init x").Params().Block()
	var buf bytes.Buffer
	err := f.Render(&buf)
	if err == nil {
		t.Fatal("invalid Go rendered")
	}
	msg := renderError("doc.go", err).Error()
	if strings.Contains(msg, "must not be shown") || strings.Contains(msg, "\n") {
		t.Errorf("message carries the source:\n%s", msg)
	}
	if !strings.HasPrefix(msg, "internal error: the generated doc.go does not parse (") || !strings.HasSuffix(msg, "please report it with the headers and flags you used") {
		t.Errorf("message %q", msg)
	}
}
