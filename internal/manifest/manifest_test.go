package manifest

import (
	"encoding/json"
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

// TestCraftedNamesRefused: every name of a manifest reaches C (gen
// check's assertions) or reports; one that is not what the generator
// writes is refused with its place before anything is compiled (a record
// name carrying an #include used to pull any file into the compiler's
// output, or /dev/zero into it).
func TestCraftedNamesRefused(t *testing.T) {
	inject := `) == 8, "");` + "\n#include \"/etc/passwd\"\n" + `_Static_assert(1`
	record := func(c, goName, fields string) string {
		return `{"version":1,"inputs":[],"arches":{"amd64":{"records":[{"c":` + quote(c) + `,"go":` + quote(goName) + `,"fields":[` + fields + `]}]}}}`
	}
	field := func(c, goName, typ string) string {
		return record("struct ibv_a", "A", `{"c":`+quote(c)+`,"go":`+quote(goName)+`,"type":`+quote(typ)+`}`)
	}
	cases := map[string]struct{ js, want string }{
		"record c":        {record("struct ibv_a"+inject, "A", ""), "arches.amd64.records[0].c"},
		"record kind":     {record("enum ibv_a", "A", ""), "arches.amd64.records[0].c"},
		"record go":       {record("struct ibv_a", "A B", ""), "arches.amd64.records[0].go"},
		"field c":         {field("a"+inject, "A", "int32"), "arches.amd64.records[0].fields[0].c"},
		"field c space":   {field("a .b", "A", "int32"), "arches.amd64.records[0].fields[0].c"},
		"field go":        {field("a", "A()\n", "int32"), "arches.amd64.records[0].fields[0].go"},
		"field type":      {field("a", "A", "int32; }"), "arches.amd64.records[0].fields[0].type"},
		"constant c":      {`{"version":1,"inputs":[],"arches":{"amd64":{"constants":[{"c":` + quote("A"+inject) + `,"go":"A","value":1}]}}}`, "arches.amd64.constants[0].c"},
		"constant digit":  {`{"version":1,"inputs":[],"arches":{"amd64":{"constants":[{"c":"1A","go":"A","value":1}]}}}`, "arches.amd64.constants[0].c"},
		"constant go":     {`{"version":1,"inputs":[],"arches":{"amd64":{"constants":[{"c":"A","go":"a-b","value":1}]}}}`, "arches.amd64.constants[0].go"},
		"function c":      {`{"version":1,"inputs":[],"arches":{},"functions":[{"c":"f(void);","go":"F"}]}`, "functions[0].c"},
		"arch":            {`{"version":1,"inputs":[],"arches":{"amd64\n#error":{}}}`, "arches"},
		"input path":      {`{"version":1,"inputs":[{"path":"a\nb.h","sha256":"00"}],"arches":{}}`, "inputs[0].path"},
		"input sha256":    {`{"version":1,"inputs":[{"path":"a.h","sha256":"xyz"}],"arches":{}}`, "inputs[0].sha256"},
		"package":         {`{"version":1,"package":"a b","inputs":[],"arches":{}}`, "package"},
		"bidi in c ident": {field("a\u202eb", "A", "int32"), "arches.amd64.records[0].fields[0].c"},
	}
	for name, c := range cases {
		_, err := Unmarshal([]byte(c.js))
		if err == nil || !strings.HasPrefix(err.Error(), c.want+": ") || !strings.Contains(err.Error(), "a manifest gen writes has none such") {
			t.Errorf("%s: err %v, want one starting %q", name, err, c.want+": ")
		}
	}
	// What the generator writes reads: $ and non-ASCII letters in C
	// identifiers (gcc accepts both), accessor selectors, array types.
	ok := field("caf\u00e9.x$1", "Café.X1()", "[4]*unsafe.Pointer")
	if _, err := Unmarshal([]byte(ok)); err != nil {
		t.Errorf("a manifest the generator could write: %v", err)
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
