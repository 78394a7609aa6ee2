package manifest

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzUnmarshal reads arbitrary bytes as abi.json. Unmarshal must never
// panic; what it accepts must write back (Marshal) into bytes that it
// accepts again and that are a fixed point of Marshal∘Unmarshal.
//
// Seeds: testdata/fuzz/FuzzUnmarshal (small hand-made manifests, edge
// values) and every golden manifest of the generator tests.
func FuzzUnmarshal(f *testing.F) {
	golden, _ := filepath.Glob("../../gen/testdata/golden/*/abi.json")
	if len(golden) == 0 {
		f.Fatal("no golden manifests under ../../gen/testdata/golden")
	}
	for _, p := range golden {
		f.Add(mustRead(f, p))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Unmarshal(data)
		if err != nil {
			if m != nil {
				t.Errorf("Unmarshal returned a manifest with the error %v", err)
			}
			return
		}
		b, err := Marshal(m)
		if err != nil {
			t.Fatalf("accepted manifest does not marshal: %v", err)
		}
		m2, err := Unmarshal(b)
		if err != nil {
			t.Fatalf("accepted manifest does not read back after Marshal: %v\n%s", err, b)
		}
		b2, err := Marshal(m2)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, b2) {
			t.Errorf("Marshal(Unmarshal(Marshal(m))) differs from Marshal(m):\n%s\n---\n%s", b, b2)
		}
	})
}

func mustRead(tb testing.TB, path string) []byte {
	tb.Helper()
	m, err := Read(path)
	if err != nil {
		tb.Fatal(err)
	}
	b, err := Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// TestDuplicatesRefused: a record, member, constant or function listed
// twice is an error, not a manifest that differs from itself (the
// crasher FuzzCompare found: gen/internal/diff/testdata/fuzz/FuzzCompare/
// regress-duplicate-constant).
func TestDuplicatesRefused(t *testing.T) {
	for name, js := range map[string]string{
		"record":   `{"version":1,"inputs":[],"arches":{"amd64":{"records":[{"c":"struct a","go":"A"},{"c":"struct a","go":"A"}]}}}`,
		"field":    `{"version":1,"inputs":[],"arches":{"amd64":{"records":[{"c":"struct a","go":"A","fields":[{"c":"x","go":"X"},{"c":"x","go":"X"}]}]}}}`,
		"constant": `{"version":1,"inputs":[],"arches":{"amd64":{"constants":[{"c":"A","go":"A","value":1},{"c":"A","go":"A"}]}}}`,
		"function": `{"version":1,"inputs":[],"arches":{},"functions":[{"c":"f","go":"F"},{"c":"f","go":"F"}]}`,
	} {
		if _, err := Unmarshal([]byte(js)); err == nil || !strings.Contains(err.Error(), "listed twice") {
			t.Errorf("%s listed twice: err %v", name, err)
		}
	}
	// Nameless entries: the crasher regress-nameless-constant.
	for name, js := range map[string]string{
		"field":    `{"version":1,"inputs":[],"arches":{"amd64":{"records":[{"c":"struct a","go":"A","fields":[{"c":"x"}]}]}}}`,
		"constant": `{"version":1,"inputs":[],"arches":{"amd64":{"constants":[{"go":"A","value":3}]}}}`,
		"function": `{"version":1,"inputs":[],"arches":{},"functions":[{"c":"f"}]}`,
	} {
		if _, err := Unmarshal([]byte(js)); err == nil || !strings.Contains(err.Error(), "missing c or go") {
			t.Errorf("nameless %s: err %v", name, err)
		}
	}
}
