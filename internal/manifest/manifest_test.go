package manifest

import (
	"strings"
	"testing"

	"github.com/verbsexp/verbsexp/internal/cint"
)

func TestRoundTripKeepsBigAndNegativeValues(t *testing.T) {
	m := &Manifest{Version: Version, Inputs: []Input{{Path: "a.h", SHA256: "00"}}, Arches: map[string]*Arch{
		"amd64": {Constants: []Constant{
			{C: "BIG", Go: "Big", Value: cint.OfUnsigned(1<<64 - 1)},
			{C: "NEG", Go: "Neg", Value: cint.Of(-7)},
			{C: "TOP", Go: "Top", Value: cint.OfUnsigned(1 << 63)},
		}},
	}}
	b, err := Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"value": 18446744073709551615`) || !strings.Contains(string(b), `"value": -7`) {
		t.Fatalf("values not written as JSON integers:\n%s", b)
	}
	back, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range back.Arches["amd64"].Constants {
		if want := m.Arches["amd64"].Constants[i].Value; !c.Value.Equal(want) {
			t.Errorf("%s: %v after round trip, want %v", c.C, c.Value, want)
		}
	}
}

func TestUnmarshalErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"{", "not valid JSON"},
		{"[1]", "not a manifest"},
		{`{"version": 99, "arches": {}, "inputs": []}`, "version 99"},
		{`{"version": 1, "inputs": []}`, `missing required key "arches"`},
		{`{"version": 1, "arches": {}}`, `missing required key "inputs"`},
		{`{"version": 1, "arches": {"amd64": {"records": [{"go": "X"}]}}, "inputs": []}`, "missing c or go"},
		{`{"version": 1, "arches": {"amd64": {"constants": [{"c": "A", "value": 1e99}]}}, "inputs": []}`, "not a 64-bit integer"},
	} {
		_, err := Unmarshal([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Unmarshal(%s) = %v, want an error containing %q", c.in, err, c.want)
		}
	}
}
