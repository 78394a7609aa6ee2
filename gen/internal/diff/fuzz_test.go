package diff

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/verbsexp/verbsexp/internal/manifest"
)

// FuzzCompare diffs two arbitrary inputs read as manifests. Reading and
// comparing must never panic; a manifest compared with itself reports no
// change; when one direction finds no change the other finds none
// either; every change names its kind, subject and reason; the text and
// JSON reports render (the JSON one as valid JSON).
//
// Seeds: testdata/fuzz/FuzzCompare (small hand-made pairs) and, added
// here, testdata/base.json against every hand-made case and the golden
// manifests of the generator tests against each other.
func FuzzCompare(f *testing.F) {
	base, err := os.ReadFile("testdata/base.json")
	if err != nil {
		f.Fatal(err)
	}
	cases, _ := filepath.Glob("testdata/cases/*.json")
	golden, _ := filepath.Glob("../../testdata/golden/*/abi.json")
	if len(cases) == 0 || len(golden) == 0 {
		f.Fatalf("seed manifests missing: %d cases, %d golden", len(cases), len(golden))
	}
	for _, p := range cases {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(base, b)
	}
	for i, p := range golden {
		a, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		b, err := os.ReadFile(golden[(i+1)%len(golden)])
		if err != nil {
			f.Fatal(err)
		}
		f.Add(a, b)
	}
	opt := Options{EndAnchored: DefaultEndAnchored}
	f.Fuzz(func(t *testing.T, oldData, newData []byte) {
		old, err1 := manifest.Unmarshal(oldData)
		cur, err2 := manifest.Unmarshal(newData)
		for _, m := range []*manifest.Manifest{old, cur} {
			if m == nil {
				continue
			}
			if cs := Compare(m, m, opt); len(cs) != 0 {
				t.Errorf("a manifest compared with itself reports %d change(s), first: %+v", len(cs), cs[0])
			}
		}
		if err1 != nil || err2 != nil {
			return
		}
		cs := Compare(old, cur, opt)
		back := Compare(cur, old, opt)
		if (len(cs) == 0) != (len(back) == 0) {
			t.Errorf("old→new finds %d change(s), new→old %d", len(cs), len(back))
		}
		for _, c := range cs {
			if c.Kind == "" || c.Subject == "" || c.Why == "" || !knownKind(c.Kind) {
				t.Errorf("incomplete change %+v", c)
			}
		}
		rep := NewReport("old.json", "new.json", cs, []string{"field-moved struct x.y"})
		var text, js bytes.Buffer
		rep.WriteText(&text, true)
		if len(cs) > 0 && text.Len() == 0 {
			t.Errorf("%d changes, empty text report", len(cs))
		}
		if err := rep.WriteJSON(&js); err != nil {
			t.Fatalf("WriteJSON: %v", err)
		}
		if !json.Valid(js.Bytes()) {
			t.Errorf("WriteJSON wrote invalid JSON:\n%s", js.Bytes())
		}
	})
}
