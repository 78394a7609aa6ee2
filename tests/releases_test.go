package tests

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/verbsexp/verbsexp/internal/manifest"
	"github.com/verbsexp/verbsexp/internal/target"
)

var updateReleases = flag.Bool("update-releases", false, "rewrite tests/testdata/releases/summary.md and its copy in docs/releases.md from the committed manifests, and (TestRealReleases) the release manifests from the real headers")

// The cross-channel surface: the task list, the work request it carries,
// and the records ibv_exp_post_task() dispatches through (ibv_context →
// verbs_context.sz/has_comp_mask → verbs_context_exp.lib_exp_post_task).
var (
	surfaceRecords = []string{"struct ibv_exp_task", "struct ibv_exp_send_wr", "struct verbs_context_exp", "struct verbs_context", "struct ibv_context"}
	surfacePrefix  = []string{"IBV_EXP_TASK_", "IBV_EXP_WR_", "IBV_EXP_SEND_", "VERBS_CONTEXT_"}
	surfaceFuncs   = []string{"ibv_exp_post_task", "ibv_exp_post_send"}
)

// diffChange mirrors one change of `gen diff -json`.
type diffChange struct {
	Arch, Kind, Subject, Record, Field, Old, New string
	Breaking                                     bool
}

// releaseManifests lists tests/testdata/releases/<release>.abi.json in
// version order.
func releaseManifests(t *testing.T) []string {
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "tests", "testdata", "releases", "*.abi.json"))
	if err != nil || len(files) < 2 {
		t.Fatalf("want at least two release manifests in tests/testdata/releases, have %d (%v)", len(files), err)
	}
	for _, f := range files {
		if versionKey(release(f)) == nil {
			t.Fatalf("%s: release names are numbers like 4.6", f)
		}
	}
	sort.Slice(files, func(i, j int) bool { return versionLess(release(files[i]), release(files[j])) })
	return files
}

func release(f string) string { return strings.TrimSuffix(filepath.Base(f), ".abi.json") }

// versionKey splits a release name like 4.6 into numbers; nil if it is
// not one.
func versionKey(name string) []int {
	var v []int
	for _, p := range strings.Split(name, ".") {
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil
		}
		v = append(v, n)
	}
	return v
}

// versionLess orders release names numerically (3.4 < 4.0 < 4.10); names
// that are not versions sort after them, by name.
func versionLess(a, b string) bool {
	ka, kb := versionKey(a), versionKey(b)
	if ka == nil || kb == nil {
		if (ka == nil) != (kb == nil) {
			return ka != nil
		}
		return a < b
	}
	for k := 0; k < len(ka) && k < len(kb); k++ {
		if ka[k] != kb[k] {
			return ka[k] < kb[k]
		}
	}
	return len(ka) < len(kb)
}

func sortReleases(rs []realRelease) {
	sort.Slice(rs, func(i, j int) bool { return versionLess(rs[i].name, rs[j].name) })
}

// runDiffJSON runs `gen diff -json` and returns its changes and exit status.
func runDiffJSON(t *testing.T, bin, old, new string) ([]diffChange, int) {
	t.Helper()
	cmd := exec.Command(bin, "diff", "-json", old, new)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if code == 2 {
		t.Fatalf("gen diff %s %s: %s", old, new, errb.String())
	}
	var r struct{ Changes []diffChange }
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("gen diff -json: %v\n%s", err, out.String())
	}
	return r.Changes, code
}

func onSurface(c diffChange) bool {
	for _, r := range surfaceRecords {
		if c.Record == r {
			return true
		}
	}
	for _, p := range surfacePrefix {
		if strings.HasPrefix(c.Subject, p) {
			return true
		}
	}
	for _, f := range surfaceFuncs {
		if c.Subject == f {
			return true
		}
	}
	return false
}

// releaseSummary renders the release history as markdown: a totals table
// for every consecutive pair, then the cross-channel changes, with
// changes identical on every arch merged and added members listed
// together.
func releaseSummary(t *testing.T) string {
	bin := buildGenerator(t)
	files := releaseManifests(t)
	var totals, surface strings.Builder
	totals.WriteString("| Releases | Breaking | Compatible | Records added | Records removed | Exit |\n|---|---:|---:|---:|---:|---:|\n")
	surface.WriteString("| Releases | Class | Change | Subject | Old → new | Arches |\n|---|---|---|---|---|---|\n")
	for i := 1; i < len(files); i++ {
		pair := release(files[i-1]) + " → " + release(files[i])
		cs, code := runDiffJSON(t, bin, files[i-1], files[i])
		rows := mergeArches(cs)
		var nb, nc, ra, rr int
		for _, r := range rows {
			if r.Breaking {
				nb++
			} else {
				nc++
			}
			switch r.Kind {
			case "record-added":
				ra++
			case "record-removed":
				rr++
			}
		}
		fmt.Fprintf(&totals, "| %s | %d | %d | %d | %d | %d |\n", pair, nb, nc, ra, rr, code)
		n := 0
		for _, r := range groupAdded(rows) {
			if !onSurface(r.diffChange) {
				continue
			}
			class := "compatible"
			if r.Breaking {
				class = "**breaking**"
			}
			oldNew := r.Old + " → " + r.New
			switch {
			case r.Old == "":
				oldNew = "+ " + r.New
			case r.New == "":
				oldNew = "− " + r.Old
			}
			fmt.Fprintf(&surface, "| %s | %s | %s | `%s` | %s | %s |\n", pair, class, r.Kind, r.Subject, oldNew, r.arches)
			n++
		}
		if n == 0 {
			fmt.Fprintf(&surface, "| %s | — | no change | | | |\n", pair)
		}
	}
	return "All records, constants and functions (changes on several arches counted once):\n\n" + totals.String() +
		"\nThe cross-channel surface (" + strings.Join(surfaceRecords, ", ") + "; constants " +
		strings.Join(surfacePrefix, "*, ") + "*; " + strings.Join(surfaceFuncs, ", ") + "):\n\n" + surface.String()
}

type row struct {
	diffChange
	arches string
}

// mergeArches turns per-arch changes into rows, one per change, labelled
// "all" when it occurs on every arch of the diff.
func mergeArches(cs []diffChange) []row {
	all := map[string]bool{}
	for _, c := range cs {
		if c.Arch != "" {
			all[c.Arch] = true
		}
	}
	var rows []row
	where := map[diffChange][]string{}
	for _, c := range cs {
		k := c
		k.Arch = ""
		if _, ok := where[k]; !ok {
			rows = append(rows, row{diffChange: k})
		}
		where[k] = append(where[k], c.Arch)
	}
	for i := range rows {
		as := where[rows[i].diffChange]
		switch {
		case len(as) == 1 && as[0] == "":
			rows[i].arches = "—"
		case len(as) == len(all):
			rows[i].arches = "all"
		default:
			rows[i].arches = strings.Join(as, ", ")
		}
	}
	return rows
}

// groupAdded folds the field-added rows of one record into one row that
// lists the new members.
func groupAdded(rows []row) []row {
	var out []row
	at := map[string]int{}
	for _, r := range rows {
		if r.Kind != "field-added" {
			out = append(out, r)
			continue
		}
		key := r.Record + "\x00" + r.arches
		if i, ok := at[key]; ok {
			out[i].New += ", " + r.Field
			continue
		}
		at[key] = len(out)
		r.Subject, r.New = r.Record, r.Field
		out = append(out, r)
	}
	return out
}

const beginTable, endTable = "<!-- BEGIN release table: go test ./tests -run TestReleaseHistory -update-releases -->\n", "<!-- END release table -->\n"

// TestReleaseHistory recomputes the differ's verdict on every pair of
// consecutive committed release manifests and compares it with the
// reviewed summary in tests/testdata/releases/summary.md and its copy in
// docs/releases.md: a change in the differ's classification shows up here.
func TestReleaseHistory(t *testing.T) {
	got := releaseSummary(t)
	sumFile := filepath.Join(repoRoot(t), "tests", "testdata", "releases", "summary.md")
	docFile := filepath.Join(repoRoot(t), "docs", "releases.md")
	doc, err := os.ReadFile(docFile)
	if err != nil {
		t.Fatal(err)
	}
	i, j := bytes.Index(doc, []byte(beginTable)), bytes.Index(doc, []byte(endTable))
	if i < 0 || j < i {
		t.Fatalf("docs/releases.md lacks the markers %q and %q around the release table", beginTable, endTable)
	}
	if *updateReleases {
		if err := os.WriteFile(sumFile, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		doc = append(append(append([]byte{}, doc[:i+len(beginTable)]...), got...), doc[j:]...)
		if err := os.WriteFile(docFile, doc, 0o644); err != nil {
			t.Fatal(err)
		}
		j = i + len(beginTable) + len(got)
	}
	want, err := os.ReadFile(sumFile)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("the differ's release history differs from %s:\n%s\nIf the change is intended, run go test ./tests -run TestReleaseHistory -update-releases and review the diff.", sumFile, lineDiff(string(want), got))
	}
	if inDoc := string(doc[i+len(beginTable) : j]); inDoc != string(want) {
		t.Errorf("docs/releases.md's table is not tests/testdata/releases/summary.md; run go test ./tests -run TestReleaseHistory -update-releases")
	}
}

// lineDiff lists the lines only in want (-) and only in got (+).
func lineDiff(want, got string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	w, g := in(want), in(got)
	var b strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if !g[l] {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if !w[l] {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}

// TestReleaseManifestsSelfDiff: every committed release manifest compared
// with itself has no changes and exits 0.
func TestReleaseManifestsSelfDiff(t *testing.T) {
	bin := buildGenerator(t)
	for _, f := range releaseManifests(t) {
		cs, code := runDiffJSON(t, bin, f, f)
		if len(cs) != 0 || code != 0 {
			t.Errorf("%s against itself: %d changes, exit %d; want none, exit 0", release(f), len(cs), code)
		}
	}
}

// servedMarker introduces, in docs/releases.md, the list of releases the
// committed package serves without regenerating; TestRealReleases checks
// it.
const servedMarker = "Served by the committed package without regenerating: "

// compatibleMarker introduces the releases make generate takes without
// ALLOW_BREAKING (compatible with the pinned ABI).
const compatibleMarker = "Regenerated by make generate without ALLOW_BREAKING: "

// TestRealReleases runs the user's loop on every real release under
// $VERBSEXP_OFED_RELEASES (<release>/include), each in a scratch copy of
// this module, printing progress (go test -v):
//
//  1. make generate OFED_INCLUDE=… (scripts/regenerate), again with
//     ALLOW_BREAKING=1 where it refuses the release as breaking against
//     the pinned ABI; the new abi.json must be
//     tests/testdata/releases/<release>.abi.json;
//  2. go vet the package for every target without cgo (its layout guards
//     compile only if Go agrees with the plan) and with cgo (the call shims
//     against the release's headers);
//  3. gen check: current, and every layout equal to each target's compiler;
//  4. the runtime's tests and the examples, compiled against the release's
//     headers (CGO_CFLAGS=-I…);
//
// and, in this checkout, whether the committed package builds against the
// release's headers without regenerating (its shims' _Static_asserts
// decide) and, where it does, the runtime's tests and the examples with
// it on those headers. The releases it serves, and those make generate
// takes without ALLOW_BREAKING, must be the ones docs/releases.md names.
func TestRealReleases(t *testing.T) {
	releases := realReleases(t, true)
	bin := buildGenerator(t)
	root := repoRoot(t)
	var served, compatible []string
	for _, r := range releases {
		t.Run(r.name, func(t *testing.T) {
			progress := func(format string, args ...any) { t.Logf("%s: %s", r.name, fmt.Sprintf(format, args...)) }
			mod := copyModule(t)
			progress("1/5 make generate OFED_INCLUDE=%s (scripts/regenerate)", r.include)
			regen := exec.Command("scripts/regenerate", r.include)
			regen.Dir = mod
			out, err := regen.CombinedOutput()
			var ee *exec.ExitError
			switch {
			case err == nil:
				compatible = append(compatible, r.name)
			case errors.As(err, &ee) && ee.ExitCode() == 1 && strings.Contains(string(out), "ALLOW_BREAKING=1"):
				progress("breaking against the pinned ABI: again with ALLOW_BREAKING=1")
				runIn(t, mod, []string{"ALLOW_BREAKING=1"}, "scripts/regenerate", r.include)
			default:
				t.Fatalf("scripts/regenerate %s: %v\n%s", r.include, err, out)
			}
			want := filepath.Join(root, "tests", "testdata", "releases", r.name+".abi.json")
			got := filepath.Join(mod, "generated", "verbs", "abi.json")
			if *updateReleases {
				b, err := os.ReadFile(got)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(want, b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if a, b := readOrEmpty(want), readOrEmpty(got); a != b {
				t.Errorf("generated/abi.json from %s is not %s: the generator's view of the release changed; if intended, rerun with -update-releases and review the diff", r.include, want)
			}
			for _, tg := range target.All {
				progress("2/5 go vet ./generated for linux/%s without cgo", tg.GoArch)
				runIn(t, mod, []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + tg.GoArch}, "go", "vet", "./generated/verbs")
			}
			progress("2/5 go vet ./generated with cgo (the shims against the release's headers)")
			runIn(t, mod, []string{"CGO_ENABLED=1"}, "go", "vet", "./generated/verbs")
			progress("3/5 gen check (current; C layouts on amd64, arm64, ppc64le)")
			runIn(t, mod, nil, bin, "check", "-I", r.include, "generated/verbs")
			progress("4/5 go test ./runtime/... ./examples/... with CGO_CFLAGS=-I%s", r.include)
			runIn(t, mod, []string{"CGO_ENABLED=1", "CGO_CFLAGS=-I" + r.include}, "go", "test", "-count=1", "./runtime/...", "./examples/...")
			progress("5/5 the committed generated/ against %s without regenerating", r.include)
			cmd := exec.Command("go", "build", "-o", os.DevNull, "./generated/verbs")
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "CGO_CFLAGS=-I"+r.include)
			if out, err := cmd.CombinedOutput(); err == nil {
				progress("5/5 it builds: go test ./runtime/... ./examples/... in this checkout with CGO_CFLAGS=-I%s", r.include)
				runIn(t, root, []string{"CGO_ENABLED=1", "CGO_CFLAGS=-I" + r.include}, "go", "test", "-count=1", "./runtime/...", "./examples/...")
				served = append(served, r.name)
				progress("the committed package serves %s", r.name)
			} else {
				progress("the committed package does not serve %s: %s", r.name, firstError(string(out)))
			}
		})
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "releases.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		marker   string
		measured []string
	}{{servedMarker, served}, {compatibleMarker, compatible}} {
		_, claim, ok := strings.Cut(string(doc), c.marker)
		claim, _, _ = strings.Cut(claim, "\n")
		claim = strings.TrimSuffix(strings.TrimSpace(claim), ".")
		if got := strings.Join(c.measured, ", "); !ok || claim != got {
			t.Errorf("docs/releases.md says %q%q; measured: %s", c.marker, claim, got)
		}
	}
}

// firstError is the first compiler error line of a build's output.
func firstError(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "error:") {
			return strings.TrimSpace(l)
		}
	}
	return firstLines(out, 3)
}

func readOrEmpty(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// copyModule copies this module's files (tracked and untracked, not
// ignored) to a scratch directory: a checkout in which generated/ can be
// replaced. Symbolic links are copied as links (generated/verbs holds
// links to its headers, as a checkout does).
func copyModule(t *testing.T) string {
	t.Helper()
	root := repoRoot(t)
	out := runIn(t, root, nil, "git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	dst := t.TempDir()
	for _, name := range strings.Split(strings.TrimRight(out, "\x00"), "\x00") {
		src := filepath.Join(root, name)
		st, err := os.Lstat(src)
		if err != nil || !st.Mode().IsRegular() && st.Mode()&fs.ModeSymlink == 0 {
			continue // deleted in the work tree
		}
		p := filepath.Join(dst, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, st.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// TestCommittedPackageOnReleases decides from the committed manifests
// what README's "Which headers the runtime builds against" table says of
// the committed package on every release 3.1 … 4.9: on 4.6 and 4.9 every
// record and member of generated/abi.json has its layout, and every
// constant its value or, for a bound, a value gen diff accepts (so the
// build guards hold); on every other release some record or member
// differs or is missing (so they refuse). TestRealReleases builds it for
// the releases whose headers it has.
func TestCommittedPackageOnReleases(t *testing.T) {
	bin := buildGenerator(t)
	committedFile := filepath.Join(repoRoot(t), "generated", "verbs", "abi.json")
	committed, err := manifest.Read(committedFile)
	if err != nil {
		t.Fatal(err)
	}
	serves := map[string]bool{"4.6": true, "4.9": true}
	for _, f := range releaseManifests(t) {
		rel := release(f)
		m, err := manifest.Read(f)
		if err != nil {
			t.Fatal(err)
		}
		var differ []string
		for arch, a := range committed.Arches {
			ra := m.Arches[arch]
			if ra == nil {
				t.Fatalf("%s has no %s", f, arch)
			}
			recs := map[string]manifest.Record{}
			for _, r := range ra.Records {
				recs[r.C] = r
			}
			for _, r := range a.Records {
				o, ok := recs[r.C]
				if !ok || o.Size != r.Size || o.Align != r.Align {
					differ = append(differ, arch+" "+r.C)
					continue
				}
				fields := map[string]manifest.Field{}
				for _, x := range o.Fields {
					fields[x.C] = x
				}
				for _, x := range r.Fields {
					if y, ok := fields[x.C]; !ok || y.Offset != x.Offset || y.Size != x.Size || y.BitSize != x.BitSize {
						differ = append(differ, arch+" "+r.C+"."+x.C)
					}
				}
			}
		}
		changes, _ := runDiffJSON(t, bin, committedFile, f)
		var values []string
		for _, c := range changes {
			if (c.Kind == "constant-changed" && c.Breaking) || c.Kind == "constant-removed" {
				values = append(values, c.Arch+" "+c.Subject)
			}
		}
		sort.Strings(differ)
		switch {
		case serves[rel] && (len(differ) > 0 || len(values) > 0):
			t.Errorf("%s: the committed package's guards would fail: layouts %v, values %v", rel, differ, values)
		case !serves[rel] && len(differ) == 0:
			t.Errorf("%s: every layout of the committed package holds (values that differ: %v): the README says its guards refuse %s", rel, values, rel)
		}
		t.Logf("%s: %d layouts and %d values differ from the committed package or are missing", rel, len(differ), len(values))
	}
}
