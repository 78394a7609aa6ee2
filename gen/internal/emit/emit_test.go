package emit

import (
	"bytes"
	"strings"
	"testing"

	"github.com/dave/jennifer/jen"

	"github.com/verbsexp/verbsexp/gen/internal/parse"
	"github.com/verbsexp/verbsexp/gen/internal/shim"
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

// TestGeneratedCNames: every name the preamble declares is one parse
// refuses in the headers (parse.GeneratedCName), so no header macro can
// change the generated C; the project's headers' own verbsexp_ helpers
// are outside that namespace.
func TestGeneratedCNames(t *testing.T) {
	w := &shim.Wrapper{Trampoline: "verbsexp_ExpPostTask", CMem: "ExpPostTaskCMem"}
	for _, n := range []string{cFn, cRes, cErr, cParam(0), cParam(12), cSlot(2), "verbsexp_packed", retStruct("void *"), retStruct("int64_t"), w.Trampoline, w.CMemTrampoline(), "VERBSEXP_REGENERATE", restatedAlone} {
		if !parse.GeneratedCName(n) {
			t.Errorf("%s is declared by the generated C but not reserved", n)
		}
	}
	for _, n := range []string{"verbsexp_comp_mask_ok", "verbsexp_vc_", "verbsexp_ok_", "verbsexp_p", "verbsexp_", "fn", "r", "VERBSEXP_X"} {
		if parse.GeneratedCName(n) {
			t.Errorf("%s is reserved, but the generated C does not declare it", n)
		}
	}
}

// TestRenderAsJennifer: Input.render (jennifer's source, unformatted,
// then Input.Format) gives the bytes jennifer's Render gives, and for Go
// that does not format the same error.
func TestRenderAsJennifer(t *testing.T) {
	good := func() *jen.File {
		f := jen.NewFile("p")
		f.HeaderComment("// a command")
		f.Comment("T is a type.")
		f.Type().Id("T").Struct(jen.Id("A").Int(), jen.Id("Bb").Qual("unsafe", "Pointer"))
		f.Const().Defs(jen.Id("X").Op("=").Lit(1), jen.Id("Yyyy").Op("=").Lit(22))
		return f
	}
	bad := func() *jen.File {
		f := jen.NewFile("p")
		f.Func().Id("init x").Params().Block()
		return f
	}
	var in Input
	for _, c := range []struct {
		name string
		file func() *jen.File
	}{{"good", good}, {"bad", bad}} {
		var buf bytes.Buffer
		wantErr := c.file().Render(&buf)
		got, err := in.render(c.file())
		if (err == nil) != (wantErr == nil) || err != nil && renderError("x.go", err).Error() != renderError("x.go", wantErr).Error() {
			t.Errorf("%s: error %v, jennifer's %v", c.name, err, wantErr)
		}
		if wantErr == nil && !bytes.Equal(got, buf.Bytes()) {
			t.Errorf("%s: rendered\n%s\njennifer renders\n%s", c.name, got, buf.Bytes())
		}
	}
}
