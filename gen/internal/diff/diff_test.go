package diff

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/verbsexp/verbsexp/internal/manifest"
)

var update = flag.Bool("update", false, "rewrite testdata/cases/*.want from the current differ (review the git diff!)")

func read(t *testing.T, path string) *manifest.Manifest {
	t.Helper()
	m, err := manifest.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func cases(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("testdata/cases/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test manifests in testdata/cases: %v", err)
	}
	return files
}

func compare(t *testing.T, newPath string) *Report {
	t.Helper()
	base := read(t, "testdata/base.json")
	return NewReport("base.json", filepath.Base(newPath), Compare(base, read(t, newPath), Options{EndAnchored: DefaultEndAnchored}), nil)
}

// TestCases compares testdata/base.json with every hand-made variant in
// testdata/cases and checks the text report against NAME.want, which says
// what each change is and whether it breaks.
func TestCases(t *testing.T) {
	for _, file := range cases(t) {
		name := strings.TrimSuffix(filepath.Base(file), ".json")
		t.Run(name, func(t *testing.T) {
			var got bytes.Buffer
			compare(t, file).WriteText(&got, false)
			wantFile := strings.TrimSuffix(file, ".json") + ".want"
			if *update {
				if err := os.WriteFile(wantFile, got.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(wantFile)
			if err != nil {
				t.Fatalf("%v (run go test ./gen/internal/diff -update and review the result)", err)
			}
			if got.String() != string(want) {
				t.Errorf("base.json → %s:\ngot:\n%s\nwant (%s):\n%s", filepath.Base(file), got.String(), wantFile, want)
			}
		})
	}
}

// TestEveryKindIsCovered keeps the case files honest: each class of change
// the differ knows occurs in at least one case, both as breaking and as
// compatible where the rules allow both.
func TestEveryKindIsCovered(t *testing.T) {
	seen := map[Kind]map[bool]bool{}
	for _, file := range cases(t) {
		for _, c := range compare(t, file).Changes {
			if seen[c.Kind] == nil {
				seen[c.Kind] = map[bool]bool{}
			}
			seen[c.Kind][c.Breaking] = true
		}
	}
	for _, k := range allKinds {
		if seen[k] == nil {
			t.Errorf("no case in testdata/cases produces %s", k)
		}
	}
	for _, k := range []Kind{RecordSize, RecordAlign, FieldResized, ConstantChanged, FunctionChanged} {
		if !seen[k][true] || !seen[k][false] {
			t.Errorf("%s: want a breaking and a compatible case, have breaking=%v compatible=%v", k, seen[k][true], seen[k][false])
		}
	}
}

// TestSelfDiffIsEmpty: a manifest compared with itself has no changes.
func TestSelfDiffIsEmpty(t *testing.T) {
	for _, file := range append(cases(t), "testdata/base.json") {
		m := read(t, file)
		if cs := Compare(m, read(t, file), Options{EndAnchored: DefaultEndAnchored}); len(cs) != 0 {
			t.Errorf("%s against itself: %d changes, first %+v", file, len(cs), cs[0])
		}
	}
}

// TestReverse: what one direction adds, the other removes, and breaks.
func TestReverse(t *testing.T) {
	base := read(t, "testdata/base.json")
	for file, want := range map[string]Kind{
		"testdata/cases/record-added.json":   RecordRemoved,
		"testdata/cases/constant-added.json": ConstantRemoved,
		"testdata/cases/function-added.json": FunctionRemoved,
		"testdata/cases/arch-added.json":     ArchRemoved,
	} {
		cs := Compare(read(t, file), base, Options{})
		if len(cs) == 0 || cs[0].Kind != want || !cs[0].Breaking {
			t.Errorf("%s → base.json: got %+v, want a breaking %s", file, cs, want)
		}
	}
}

// TestEndAnchoredOption: without the anchor, growth at the front of
// verbs_context_exp moves every member and breaks.
func TestEndAnchoredOption(t *testing.T) {
	base := read(t, "testdata/base.json")
	grown := read(t, "testdata/cases/anchored-front-growth.json")
	r := NewReport("a", "b", Compare(base, grown, Options{}), nil)
	moved := 0
	for _, c := range r.Changes {
		if c.Kind == FieldMoved && c.Breaking {
			moved++
		}
	}
	if moved != 2*3 { // three members on two arches
		t.Errorf("unanchored front growth: %d breaking moves, want 6", moved)
	}
	if r2 := NewReport("a", "b", Compare(base, grown, Options{EndAnchored: DefaultEndAnchored}), nil); r2.Breaking != 0 {
		t.Errorf("anchored front growth: %d breaking, want 0", r2.Breaking)
	}
}

// TestAcks: an acknowledged breaking change no longer counts as breaking,
// and an ack that matches nothing is reported.
func TestAcks(t *testing.T) {
	acks, err := ReadAcks("testdata/ack.txt")
	if err != nil {
		t.Fatal(err)
	}
	base := read(t, "testdata/base.json")
	r := NewReport("a", "b", Compare(base, read(t, "testdata/cases/field-moved.json"), Options{}), acks)
	if r.Breaking != 0 || r.Acknowledged != 2 {
		t.Errorf("breaking %d acknowledged %d, want 0 and 2 (one move on each of two arches)", r.Breaking, r.Acknowledged)
	}
	if len(r.UnusedAcks) != 1 || r.UnusedAcks[0] != "record-removed struct ibv_gone" {
		t.Errorf("unused acks %q, want the one for struct ibv_gone", r.UnusedAcks)
	}
	if _, err := ReadAcks("testdata/bad-ack.txt"); err == nil || !strings.Contains(err.Error(), `want "KIND SUBJECT"`) {
		t.Errorf("bad ack file: err %v, want one that shows the expected form", err)
	}
}

// TestJSON: -json output carries every change with its arch and class.
func TestJSON(t *testing.T) {
	r := compare(t, "testdata/cases/one-arch.json")
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Changes) != 1 || back.Changes[0].Arch != "arm64" || back.Changes[0].Kind != RecordSize || back.Changes[0].Breaking {
		t.Errorf("got %+v, want one compatible record-size on arm64", back.Changes)
	}
}

// TestReadAcksLongLine: a line beyond maxAckLine is refused with its
// file:line (bufio.Scanner said only "token too long").
func TestReadAcksLongLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ack.txt")
	data := "# acks\nfield-moved struct ibv_exp_task.next\nfield-moved struct ibv_x." + strings.Repeat("a", 70000) + "\n"
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ReadAcks(path)
	if err == nil || !strings.Contains(err.Error(), path+":3: line longer than 65536 bytes") {
		t.Fatalf("err = %v", err)
	}
}
