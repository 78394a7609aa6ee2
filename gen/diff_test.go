package main

import (
	"encoding/json"
	"strings"
	"testing"
)

const diffData = "internal/diff/testdata/"

// TestDiffExitStatus: 0 without breaking changes, 1 with, 2 on bad input,
// each with a message that says what is wrong and what to do.
func TestDiffExitStatus(t *testing.T) {
	base := diffData + "base.json"
	cases := []struct {
		name string
		args []string
		code int
		out  []string // substrings of stdout
		err  []string // substrings of stderr
	}{
		{"self", []string{base, base}, 0, []string{"no changes"}, nil},
		{"compatible", []string{base, diffData + "cases/record-grew.json"}, 0, []string{"0 breaking", "record-size struct ibv_exp_task: 32 → 40"}, nil},
		{"breaking", []string{base, diffData + "cases/field-moved.json"}, 1, []string{"1 breaking", "field-moved struct ibv_exp_task.next"}, []string{"1 breaking change(s)", "-ack file"}},
		{"acknowledged", []string{"-ack", diffData + "ack.txt", base, diffData + "cases/field-moved.json"}, 0, []string{"1 acknowledged", "Breaking, acknowledged"}, nil},
		{"verbose", []string{"-v", base, diffData + "cases/anchored-front-growth.json"}, 0, []string{"members keep their distance from the end"}, nil},
		{"not JSON", []string{diffData + "bad/notjson.json", base}, 2, nil, []string{"old manifest", "notjson.json: line 3: not valid JSON"}},
		{"missing arches", []string{base, diffData + "bad/noarches.json"}, 2, nil, []string{"new manifest", `missing required key "arches"`}},
		{"missing go name", []string{base, diffData + "bad/nogoname.json"}, 2, nil, []string{"records[0]: missing c or go"}},
		{"other version", []string{diffData + "bad/version2.json", base}, 2, nil, []string{"manifest version 2", "regenerate it"}},
		{"no such file", []string{base, diffData + "nonexistent.json"}, 2, nil, []string{"no such file"}},
		{"bad ack file", []string{"-ack", diffData + "bad-ack.txt", base, base}, 2, nil, []string{"bad-ack.txt:2", `want "KIND SUBJECT"`}},
		{"one argument", []string{base}, 2, nil, []string{"usage: gen diff"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errs := cli(t, append([]string{"diff"}, c.args...)...)
			if code != c.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, c.code, out, errs)
			}
			for _, s := range c.out {
				if !strings.Contains(out, s) {
					t.Errorf("stdout lacks %q:\n%s", s, out)
				}
			}
			for _, s := range c.err {
				if !strings.Contains(errs, s) {
					t.Errorf("stderr lacks %q:\n%s", s, errs)
				}
			}
		})
	}
}

// TestDiffJSON: -json is machine-readable and keeps the exit status.
func TestDiffJSON(t *testing.T) {
	code, out, _ := cli(t, "diff", "-json", diffData+"base.json", diffData+"cases/constant-changed.json")
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	var r struct {
		Breaking int
		Changes  []struct {
			Arch, Kind, Subject, Old, New string
			Breaking                      bool
		}
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("-json output is not JSON: %v\n%s", err, out)
	}
	if r.Breaking != 2 || len(r.Changes) != 2 || r.Changes[0].Kind != "constant-changed" || r.Changes[0].Old != "0" || r.Changes[0].New != "7" {
		t.Errorf("got %+v, want IBV_EXP_TASK_SEND 0 → 7 on amd64 and arm64", r)
	}
}
