package abicheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/verbsexp/verbsexp/internal/manifest"
)

// The C gen check compiles from a manifest, line by line: whatever the
// manifest says, each line is one of these shapes, its names C
// identifiers and member paths, its numbers numbers, its message one C
// string literal. A name that could close the assertion (a crafted
// record name holding `) == 8, ""); #include "/etc/passwd"`) matches none.
var (
	cIdent    = `[A-Za-z_$\p{L}][A-Za-z0-9_$\p{L}\p{Nd}]*`
	cPath     = cIdent + `(?:\.` + cIdent + `)*`
	cRecord   = `(?:struct|union) ` + cIdent
	cNumber   = `-?[0-9]+`
	cString   = `"(?:[^"\\\n]|\\.)*"`
	assertion = regexp.MustCompile(`^_Static_assert\((?:` +
		`sizeof\(` + cRecord + `\) == ` + cNumber + `|` +
		`_Alignof\(` + cRecord + `\) == ` + cNumber + `|` +
		`offsetof\(` + cRecord + `, ` + cPath + `\) == ` + cNumber + `|` +
		`sizeof\(\(\(` + cRecord + ` \*\)0\)->` + cPath + `\) == ` + cNumber + `|` +
		`\(` + cIdent + `\) == (?:[0-9]+ULL|\(-[0-9]+LL\))` +
		`), ` + cString + `\);$`)
	bitObject = regexp.MustCompile(`^const ` + cRecord + ` verbsexp_bits_[0-9]+ = \{ \.` + cPath + ` = -1 \};$`)
)

// checkShape fails t unless src is the fixed head (its comment and the
// two #includes) and then n lines of body.
func checkShape(t *testing.T, src, entry string, n int, body *regexp.Regexp) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(src, "\n"), "\n")
	if len(lines) != headerLines+n {
		t.Fatalf("%d lines for %d checks:\n%s", len(lines), n, src)
	}
	if !strings.HasPrefix(lines[0], "/* ") || !strings.HasSuffix(lines[0], " */") || strings.Count(lines[0], "*/") != 1 ||
		lines[1] != "#include <stddef.h>" || lines[2] != "#include <"+entry+">" {
		t.Fatalf("head is not the fixed one:\n%s", strings.Join(lines[:headerLines], "\n"))
	}
	for i, l := range lines[headerLines:] {
		if !body.MatchString(l) {
			t.Fatalf("line %d is not a check: %q", headerLines+1+i, l)
		}
	}
}

// FuzzCheckSource reads arbitrary bytes as the abi.json gen check
// compiles (a committed package's, or a baseline): a manifest Unmarshal
// accepts gives, for every arch, assertion and bit-field C of the shapes
// above only, one line per check; one it refuses reaches no C at all.
//
// Seeds: testdata/fuzz/FuzzCheckSource (crafted names) and every golden
// manifest of the generator tests.
func FuzzCheckSource(f *testing.F) {
	golden, _ := filepath.Glob("../../gen/testdata/golden/*/abi.json")
	if len(golden) == 0 {
		f.Fatal("no golden manifests under ../../gen/testdata/golden")
	}
	for _, p := range golden {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	const entry = "infiniband/verbs_exp.h"
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := manifest.Unmarshal(data)
		if err != nil {
			return
		}
		for arch, a := range m.Arches {
			src, n, err := Source(m, arch, entry)
			if err != nil {
				t.Fatalf("Source(%s): %v", arch, err)
			}
			checkShape(t, src, entry, n, assertion)
			bits := bitFields(a)
			checkShape(t, bitSource(arch, entry, bits), entry, len(bits), bitObject)
			if n != len(Assertions(a, arch, "", nil)) {
				t.Fatalf("%s: Source counts %d assertions, Assertions lists %d", arch, n, len(Assertions(a, arch, "", nil)))
			}
		}
	})
}

// TestCheckSourceRefusesCraftedNames: the seeds of FuzzCheckSource that
// carry a name breaking out of its assertion are refused by Unmarshal
// (else the fuzz target would pass them through its shapes and fail).
func TestCheckSourceRefusesCraftedNames(t *testing.T) {
	files, _ := filepath.Glob("testdata/fuzz/FuzzCheckSource/crafted-*")
	if len(files) == 0 {
		t.Fatal("no crafted seeds in testdata/fuzz/FuzzCheckSource")
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitN(string(b), "\n", 2)
		if len(lines) < 2 || lines[0] != "go test fuzz v1" {
			t.Fatalf("%s is not a fuzz corpus file", p)
		}
		lit := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(lines[1]), "[]byte("), ")")
		data, err := strconv.Unquote(lit)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if _, err := manifest.Unmarshal([]byte(data)); err == nil {
			t.Errorf("%s: a crafted manifest is accepted", p)
		}
	}
}
