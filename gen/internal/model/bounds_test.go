package model

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/verbsexp/verbsexp/internal/cint"
	"github.com/verbsexp/verbsexp/internal/manifest"
)

var updateBounds = flag.Bool("update-bounds", false, "rewrite testdata/bounds.txt from the release manifests (review the git diff!)")

func TestBounds(t *testing.T) {
	type c struct {
		name string
		v    int64
	}
	for _, tc := range []struct {
		what   string
		consts []c
		want   map[string]Bound // the others: NotBound
	}{
		{"one past the last flag", []c{{"X_A", 1}, {"X_B", 2}, {"X_RESERVED", 4}}, map[string]Bound{"X_RESERVED": Reserved}},
		{"numbered and underscored sentinels", []c{{"X_A", 1}, {"X_RESERVED1", 2}, {"Y_A", 1}, {"Y_RESERVED_2", 2}}, map[string]Bound{"X_RESERVED1": Reserved, "Y_RESERVED_2": Reserved}},
		{"a kept value below the real sentinel", []c{{"X_A", 1}, {"X_RESERVED", 2}, {"X_B", 4}, {"X_RESERVED1", 8}}, map[string]Bound{"X_RESERVED1": Reserved}},
		{"a sentinel with no family", []c{{"X_RESERVED", 1}}, map[string]Bound{"X_RESERVED": Reserved}},
		{"a family member as large", []c{{"X_A", 4}, {"X_RESERVED", 4}}, nil},
		{"negative sentinel", []c{{"X_A", -8}, {"X_RESERVED", -1}}, nil},
		{"RESERVED not at the end", []c{{"X_RESERVED_FIELD", 8}, {"X_RESERVED_", 8}}, nil},
		{"all low bits", []c{{"X_MASK", 0}, {"Y_MASK", 1}, {"Z_MASKS", 31}}, map[string]Bound{"X_MASK": Mask, "Y_MASK": Mask, "Z_MASKS": Mask}},
		{"a single higher bit is a flag", []c{{"X_TIMESTAMP_MASK", 2}, {"X_A", 1}}, nil},
		{"union of two or more flags", []c{{"X_A", 4}, {"X_B", 16}, {"X_MASK", 20}}, map[string]Bound{"X_MASK": Mask}},
		{"union of one flag", []c{{"X_A", 4}, {"X_MASK", 4}}, nil},
		{"a bit no flag has", []c{{"X_A", 4}, {"X_B", 16}, {"X_MASK", 28}}, nil},
		{"plain names", []c{{"X_MASKED", 3}, {"X_RESERVED_BITS", 8}, {"MASK", 3}}, nil},
	} {
		var names []string
		var values []cint.Value
		for _, k := range tc.consts {
			names = append(names, k.name)
			values = append(values, cint.Of(k.v))
		}
		for i, b := range Bounds(names, values) {
			if want := tc.want[names[i]]; b != want {
				t.Errorf("%s: %s = %d is a %v, want a %v", tc.what, names[i], tc.consts[i].v, b, want)
			}
		}
	}
}

// TestBoundsOnReleases applies the rule to the manifests of the real
// releases 3.1 … 4.9 (tests/testdata/releases): every constant named like
// a bound gets the verdict reviewed in testdata/bounds.txt, the verdict is
// the same on every arch, and between consecutive releases every bound
// only ever moved the way the rule allows (so the build guards and the
// differ, which both hold bounds to that, accept each release's growth).
func TestBoundsOnReleases(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "tests", "testdata", "releases", "*.abi.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no release manifests in tests/testdata/releases (%v)", err)
	}
	sort.Slice(files, func(i, j int) bool { return versionLess(rel(files[i]), rel(files[j])) })
	var report strings.Builder
	var prev map[string]cint.Value
	var prevBound map[string]Bound
	for _, f := range files {
		m, err := manifest.Read(f)
		if err != nil {
			t.Fatal(err)
		}
		var verdict map[string]Bound
		var values map[string]cint.Value
		for _, arch := range []string{"amd64", "arm64", "ppc64le"} {
			a := m.Arches[arch]
			if a == nil {
				t.Fatalf("%s: no %s", f, arch)
			}
			var names []string
			var vs []cint.Value
			for _, c := range a.Constants {
				names, vs = append(names, c.C), append(vs, c.Value)
			}
			got := map[string]Bound{}
			for i, b := range Bounds(names, vs) {
				got[names[i]] = b
			}
			if verdict == nil {
				verdict, values = got, map[string]cint.Value{}
				for i := range names {
					values[names[i]] = vs[i]
				}
				continue
			}
			for n, b := range got {
				if verdict[n] != b {
					t.Errorf("%s: %s is a %v on %s but a %v on amd64", rel(f), n, b, arch, verdict[n])
				}
			}
		}
		var named []string
		for n := range verdict {
			if _, ok := reservedPrefix(n); ok {
				named = append(named, n)
			} else if _, ok := maskPrefix(n); ok {
				named = append(named, n)
			}
		}
		sort.Strings(named)
		fmt.Fprintf(&report, "%s:\n", rel(f))
		for _, n := range named {
			fmt.Fprintf(&report, "  %-45s %-20s %v\n", n, values[n], verdict[n])
		}
		for n, b := range verdict {
			old, ok := prev[n]
			if !ok || old.Equal(values[n]) || b == NotBound || prevBound[n] != b {
				continue
			}
			switch {
			case b == Reserved && !old.Less(values[n]):
				t.Errorf("%s: reserved bound %s shrank from %s to %s", rel(f), n, old, values[n])
			case b == Mask && old.Bits&values[n].Bits != old.Bits:
				t.Errorf("%s: flag mask %s lost bits: %s to %s", rel(f), n, old, values[n])
			}
		}
		prev, prevBound = values, verdict
	}
	golden := filepath.Join("testdata", "bounds.txt")
	if *updateBounds {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(report.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test ./gen/internal/model -run TestBoundsOnReleases -update-bounds, then review it)", err)
	}
	if string(want) != report.String() {
		t.Errorf("the bounds of the real releases differ from %s; if intended, rerun with -update-bounds and review the diff:\n%s", golden, report.String())
	}
}

func rel(f string) string { return strings.TrimSuffix(filepath.Base(f), ".abi.json") }

func versionLess(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(pa) && i < len(pb); i++ {
		x, _ := strconv.Atoi(pa[i])
		y, _ := strconv.Atoi(pb[i])
		if x != y {
			return x < y
		}
	}
	return len(pa) < len(pb)
}
