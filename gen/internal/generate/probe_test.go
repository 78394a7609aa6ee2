package generate

import (
	"bytes"
	"fmt"
	"go/format"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/verbsexp/verbsexp/gen/internal/parse"
	"github.com/verbsexp/verbsexp/internal/target"
)

// declarations runs the first three stages of Run on opts for every
// target: with the probes, or (noProbes) translating every target on its
// own, as the generator did before the probes.
func declarations(t *testing.T, opts parse.Options, noProbes bool) *parse.Units {
	t.Helper()
	t.Setenv("VERBSEXP_NO_CACHE", "1")
	if noProbes {
		t.Setenv("VERBSEXP_NO_PROBES", "1")
	} else {
		t.Setenv("VERBSEXP_NO_PROBES", "")
	}
	in, err := parse.CheckInputs(opts, target.All, nil)
	if err != nil {
		t.Fatal(err)
	}
	u, err := in.TranslateFirst()
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Probe(u); err != nil {
		t.Fatal(err)
	}
	return u
}

// goldenHeaders are the constructs of gen/testdata/c, and headers/.
func goldenHeaders() map[string]parse.Options {
	cases := map[string]parse.Options{
		"headers": {IncludeDirs: []string{"../../../headers"}, Entry: parse.DefaultEntry, ScopeDir: parse.DefaultScope},
	}
	files, _ := filepath.Glob("../../testdata/c/*.h")
	for _, f := range files {
		cases[filepath.Base(f)] = parse.Options{IncludeDirs: []string{"../../testdata/c"}, Entry: filepath.Base(f)}
	}
	return cases
}

// releaseHeaders are the real release sets the environment names:
// $VERBSEXP_OFED_RELEASES/<release>/include (MLNX_OFED, verbs_exp.h) and
// $VERBSEXP_RDMA_RELEASES/<release>/include (rdma-core: verbs.h and
// mlx5dv.h), as tests/ finds them.
func releaseHeaders(t *testing.T) map[string]parse.Options {
	cases := map[string]parse.Options{}
	for _, set := range []struct {
		env     string
		entries []string
		scope   string
	}{
		{"VERBSEXP_OFED_RELEASES", []string{parse.DefaultEntry}, parse.DefaultScope},
		{"VERBSEXP_RDMA_RELEASES", []string{"infiniband/verbs.h", "infiniband/mlx5dv.h"}, parse.DefaultScope},
	} {
		root := os.Getenv(set.env)
		if root == "" {
			t.Logf("SKIPPED: %s is not set: no real release of that kind compared", set.env)
			continue
		}
		dirs, _ := filepath.Glob(filepath.Join(root, "*", "include"))
		for _, inc := range dirs {
			for _, e := range set.entries {
				if _, err := os.Stat(filepath.Join(inc, e)); err == nil {
					cases[filepath.Base(filepath.Dir(inc))+":"+e] = parse.Options{IncludeDirs: []string{inc}, Entry: e, ScopeDir: set.scope}
				}
			}
		}
	}
	return cases
}

// TestProbedEqualsTranslated: on headers/ and every construct of the
// golden tests, the declarations arm64 and ppc64le get from a probe of
// their compilers are, field for field, the ones their own translations
// give (sizes, alignments, offsets, bit positions, signedness, lengths,
// values), and no target is translated on its own.
func TestProbedEqualsTranslated(t *testing.T) {
	cases := goldenHeaders()
	for name, opts := range releaseHeaders(t) {
		cases[name] = opts
	}
	for name, opts := range cases {
		t.Run(name, func(t *testing.T) {
			probed := declarations(t, opts, false)
			translated := declarations(t, opts, true)
			if probed.Translated != 1 || probed.Probed != 2 || len(probed.Notes) > 0 {
				t.Errorf("translated %d, probed %d, notes %v; want one translation and two probes", probed.Translated, probed.Probed, probed.Notes)
			}
			if translated.Translated != 3 {
				t.Fatalf("VERBSEXP_NO_PROBES=1 translated %d targets, not 3", translated.Translated)
			}
			for i := 1; i < 3; i++ {
				if d := firstDifference(reflect.ValueOf(probed.Units[i]), reflect.ValueOf(translated.Units[i]), "Unit"); d != "" {
					t.Errorf("linux/%s: the probed declarations differ from the translated ones: %s", target.All[i].GoArch, d)
				}
			}
		})
	}
}

// firstDifference describes the first exported field where a and b
// differ ("" for none).
func firstDifference(a, b reflect.Value, path string) string {
	if a.Kind() != b.Kind() {
		return path + ": different kinds"
	}
	switch a.Kind() {
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			if a.IsNil() != b.IsNil() {
				return fmt.Sprintf("%s: %v vs %v", path, a, b)
			}
			return ""
		}
		return firstDifference(a.Elem(), b.Elem(), path)
	case reflect.Struct:
		for i := 0; i < a.NumField(); i++ {
			if !a.Type().Field(i).IsExported() {
				continue
			}
			if d := firstDifference(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name); d != "" {
				return d
			}
		}
		return ""
	case reflect.Slice:
		if a.Len() != b.Len() {
			return fmt.Sprintf("%s: %d vs %d elements", path, a.Len(), b.Len())
		}
		for i := 0; i < a.Len(); i++ {
			if d := firstDifference(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i)); d != "" {
				return d
			}
		}
		return ""
	}
	if !reflect.DeepEqual(a.Interface(), b.Interface()) {
		return fmt.Sprintf("%s: %s vs %s", path, strings.TrimSpace(fmt.Sprint(a.Interface())), strings.TrimSpace(fmt.Sprint(b.Interface())))
	}
	return ""
}

// TestProbeDifferences: headers that declare otherwise on arm64 (an
// #ifdef __aarch64__), or whose constant differs with char's signedness,
// or whose constant the compiler cannot evaluate where the front end
// can: the targets concerned are translated on their own, with a note
// that says where and why, the others are probed, and the package is
// the one translating every target on its own writes.
func TestProbeDifferences(t *testing.T) {
	const common = "#include <stdint.h>\nstruct base { uint32_t a; };\n"
	for _, c := range []struct {
		name, header string
		own          []string // targets translated on their own
		note         string   // in every note, with the target's name
	}{
		{"ifdef", common + "struct rec {\n\tuint32_t a;\n#ifdef __aarch64__\n\tuint32_t arm_only;\n#endif\n};\n",
			[]string{"arm64"}, "t.h:5:1: linux/arm64 declares otherwise than linux/amd64: this conditional group is taken on linux/arm64, not on linux/amd64"},
		{"char signedness", common + "#define CHAR_UNSIGNED ((char)-1 > 0)\n",
			[]string{"arm64", "ppc64le"}, "t.h:3:9: linux/%s declares otherwise than linux/amd64: constant CHAR_UNSIGNED is 1 here"},
		{"not a constant for the compiler", common + "#define COMMA (1, 2)\n",
			[]string{"arm64", "ppc64le"}, "linux/%s declares otherwise than linux/amd64: the probe of constant COMMA does not compile with %s: initializer element is not constant"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := tree(t, map[string]string{"t.h": c.header})
			opts := Options{Parse: parse.Options{IncludeDirs: []string{dir}, Entry: "t.h"}, Targets: target.All, Package: "p", Command: "test"}
			t.Setenv("VERBSEXP_NO_PROBES", "1")
			want := uncached(t, opts)
			t.Setenv("VERBSEXP_NO_PROBES", "")
			t.Setenv("VERBSEXP_NO_CACHE", "1")
			res, err := Run(opts)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, f := range res.Files {
				got[f.Name] = string(f.Data)
			}
			same(t, "probed", got, want)
			if res.Translated != 1+len(c.own) || res.Probed != 2-len(c.own) {
				t.Errorf("translated %d, probed %d; want %d and %d", res.Translated, res.Probed, 1+len(c.own), 2-len(c.own))
			}
			for _, arch := range c.own {
				tg, _ := target.Lookup(arch)
				cc, _ := tg.Compiler()
				want := c.note
				if strings.Contains(want, "%s") {
					want = fmt.Sprintf(want, append([]any{arch}, filepath.Base(cc))[:strings.Count(want, "%s")]...)
				}
				found := false
				for _, n := range res.Notes {
					found = found || strings.Contains(n.String(), want)
				}
				if !found {
					t.Errorf("no note %q among %v", want, res.Notes)
				}
			}
		})
	}
}

// TestProbeRefusedHeaders: headers arm64's compiler refuses (#error on
// __aarch64__) fail as they do without probes: with the C front end's
// error of translating linux/arm64.
func TestProbeRefusedHeaders(t *testing.T) {
	dir := tree(t, map[string]string{"t.h": "struct rec { int a; };\n#ifdef __aarch64__\n#error not on arm64\n#endif\n"})
	opts := Options{Parse: parse.Options{IncludeDirs: []string{dir}, Entry: "t.h"}, Targets: target.All, Package: "p", Command: "test"}
	t.Setenv("VERBSEXP_NO_CACHE", "1")
	t.Setenv("VERBSEXP_NO_PROBES", "1")
	_, want := Run(opts)
	t.Setenv("VERBSEXP_NO_PROBES", "")
	_, got := Run(opts)
	if want == nil || got == nil || got.Error() != want.Error() {
		t.Errorf("with probes: %v\nwithout: %v", got, want)
	}
}

// TestFilesFormatted: every Go file of headers/' package and of every
// golden construct is as gofmt writes it, shims.go too, whose preamble
// is put in after formatting (emit.Input.shimsFile).
func TestFilesFormatted(t *testing.T) {
	t.Setenv("VERBSEXP_NO_CACHE", "1")
	for name, po := range goldenHeaders() {
		res, err := Run(Options{Parse: po, Targets: target.All, Package: "p", Command: "test"})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, f := range res.Files {
			if !strings.HasSuffix(f.Name, ".go") {
				continue
			}
			b, err := format.Source(f.Data)
			if err != nil || !bytes.Equal(b, f.Data) {
				t.Errorf("%s: %s is not as gofmt writes it (%v)", name, f.Name, err)
			}
		}
	}
}

// TestProbesOnFuzzCorpus: on every input of FuzzGenerate's corpus
// (gen/testdata/fuzz/FuzzGenerate: the odd headers fuzzing found, and
// the golden constructs), generating for every target with the probes
// writes what translating every target on its own writes, or fails with
// the same error. (~1 minute: every input is generated twice.)
func TestProbesOnFuzzCorpus(t *testing.T) {
	files, err := filepath.Glob("../../testdata/fuzz/FuzzGenerate/*")
	if err != nil || len(files) < 10 {
		t.Fatalf("the fuzz corpus holds %d inputs (%v)", len(files), err)
	}
	t.Setenv("VERBSEXP_NO_CACHE", "1")
	t.Setenv("VERBSEXP_FRONT_END_CPU", "4") // as FuzzGenerate: the inputs that hang the front end end sooner
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitN(string(b), "\n", 3)
		if len(lines) < 2 || !strings.HasPrefix(lines[1], "[]byte(") {
			t.Fatalf("%s: not a corpus file of one []byte", f)
		}
		header, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(lines[1]), "[]byte("), ")"))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		t.Run(filepath.Base(f), func(t *testing.T) {
			dir := tree(t, map[string]string{"infiniband/verbs_exp.h": header})
			opts := Options{Parse: parse.Options{IncludeDirs: []string{dir}, Entry: parse.DefaultEntry, ScopeDir: parse.DefaultScope}, Targets: target.All, Package: "p", Command: "test"}
			t.Setenv("VERBSEXP_NO_PROBES", "1")
			want, wantErr := Run(opts)
			t.Setenv("VERBSEXP_NO_PROBES", "")
			got, gotErr := Run(opts)
			if (wantErr == nil) != (gotErr == nil) || wantErr != nil && wantErr.Error() != gotErr.Error() {
				t.Fatalf("with the probes: %v\ntranslating every target: %v", gotErr, wantErr)
			}
			if wantErr != nil {
				return
			}
			if len(got.Files) != len(want.Files) {
				t.Fatalf("%d files, not %d", len(got.Files), len(want.Files))
			}
			for i, f := range want.Files {
				if !bytes.Equal(got.Files[i].Data, f.Data) {
					t.Errorf("%s differs", f.Name)
				}
			}
		})
	}
}
