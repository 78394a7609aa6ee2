package manifest

import (
	"fmt"
	"go/token"
	"regexp"
	"sort"
	"strings"
	"unicode"
)

// The names of a manifest reach C source (gen check compiles an
// assertion per record, member and constant) and reports: each must be
// what the generator writes, checked before anything is compiled. A
// record is "struct TAG" or "union TAG", a member a C member path
// (a.b.c), a constant or function a C identifier; Go names are Go
// identifiers (a member's a selector path, X.Y() for accessors), a
// member's type a Go type expression. Anything else (a name carrying
// "#include", a newline, a quote) is refused with its place.

// CIdentifier reports whether s is an identifier as gcc reads one:
// letters, digits, _ and $ (gcc's extension), not starting with a digit;
// non-ASCII letters and digits count too (gcc 10 and later).
func CIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_' || r == '$' || r < 0x80 && unicode.IsLetter(r):
		case r < 0x80 && unicode.IsDigit(r):
			if i == 0 {
				return false
			}
		case r >= 0x80 && (unicode.IsLetter(r) || unicode.IsDigit(r) && i > 0):
		default:
			return false
		}
	}
	return true
}

// HeaderPath reports whether s is a header path the generator spells in
// C (#include <s>) and in Go comments: relative, of letters, digits and
// _ - . + / only (a > or a newline would end the #include, a */ the Go
// comment around a cgo preamble or a package doc).
func HeaderPath(s string) bool {
	if s == "" || s[0] == '/' {
		return false
	}
	for _, r := range s {
		if !(r < 0x80 && (unicode.IsLetter(r) || unicode.IsDigit(r)) || strings.ContainsRune("_-.+/", r)) {
			return false
		}
	}
	return true
}

// cRecord reports whether s names a record: "struct TAG" or "union TAG".
func cRecord(s string) bool {
	kind, tag, ok := strings.Cut(s, " ")
	return ok && (kind == "struct" || kind == "union") && CIdentifier(tag)
}

// cPath reports whether s is a member path: identifiers joined by dots.
func cPath(s string) bool {
	for _, p := range strings.Split(s, ".") {
		if !CIdentifier(p) {
			return false
		}
	}
	return true
}

// goIdent reports whether s is a Go identifier.
func goIdent(s string) bool { return token.IsIdentifier(s) }

// goSelector reports whether s is a member's Go selector path: Go
// identifiers joined by dots, each possibly a method call "X()".
func goSelector(s string) bool {
	for _, p := range strings.Split(s, ".") {
		if !goIdent(strings.TrimSuffix(p, "()")) {
			return false
		}
	}
	return true
}

// goTypeRE matches the Go types the generator gives members: pointers and
// arrays of a named or predeclared type or unsafe.Pointer.
var goTypeRE = regexp.MustCompile(`^(?:\*|\[[0-9]+\])*(?:unsafe\.Pointer|[\p{L}_][\p{L}\p{Nd}_]*)$`)

// goArchRE matches a GOARCH.
var goArchRE = regexp.MustCompile(`^[a-z][a-z0-9]*$`)

// checkStrings refuses a manifest holding a name the generator would not
// write, before anything uses it.
func checkStrings(m *Manifest) error {
	bad := func(where, what, s string) error {
		return fmt.Errorf("%s: %q is not %s; a manifest gen writes has none such (is this abi.json edited or crafted?)", where, clip(s), what)
	}
	if m.Package != "" && !goIdent(m.Package) {
		return bad("package", "a Go package name", m.Package)
	}
	for i, in := range m.Inputs {
		if strings.ContainsFunc(in.Path, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			return bad(fmt.Sprintf("inputs[%d].path", i), "a header path", in.Path)
		}
		if strings.Trim(in.SHA256, "0123456789abcdef") != "" {
			return bad(fmt.Sprintf("inputs[%d].sha256", i), "a hex sha256", in.SHA256)
		}
	}
	arches := make([]string, 0, len(m.Arches))
	for name := range m.Arches {
		arches = append(arches, name)
	}
	sort.Strings(arches) // the first bad name, whatever the map order
	for _, name := range arches {
		a := m.Arches[name]
		if !goArchRE.MatchString(name) {
			return bad("arches", "a GOARCH", name)
		}
		if a == nil {
			continue
		}
		for i, r := range a.Records {
			at := fmt.Sprintf("arches.%s.records[%d]", name, i)
			if r.C != "" && !cRecord(r.C) {
				return bad(at+".c", `a C record ("struct TAG" or "union TAG")`, r.C)
			}
			if r.Go != "" && !goIdent(r.Go) {
				return bad(at+".go", "a Go type name", r.Go)
			}
			for j, f := range r.Fields {
				at := fmt.Sprintf("%s.fields[%d]", at, j)
				switch {
				case f.C != "" && !cPath(f.C):
					return bad(at+".c", "a C member path (a.b.c)", f.C)
				case f.Go != "" && !goSelector(f.Go):
					return bad(at+".go", "a Go selector (A.B or A.B())", f.Go)
				case f.Type != "" && !goTypeRE.MatchString(f.Type):
					return bad(at+".type", "a Go type", f.Type)
				}
			}
		}
		for i, c := range a.Constants {
			at := fmt.Sprintf("arches.%s.constants[%d]", name, i)
			if c.C != "" && !CIdentifier(c.C) {
				return bad(at+".c", "a C identifier", c.C)
			}
			if c.Go != "" && !goIdent(c.Go) {
				return bad(at+".go", "a Go identifier", c.Go)
			}
		}
	}
	for i, f := range m.Functions {
		at := fmt.Sprintf("functions[%d]", i)
		if f.C != "" && !CIdentifier(f.C) {
			return bad(at+".c", "a C identifier", f.C)
		}
		if f.Go != "" && !goIdent(f.Go) {
			return bad(at+".go", "a Go identifier", f.Go)
		}
	}
	return nil
}

// clip shortens a refused string for the message.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
