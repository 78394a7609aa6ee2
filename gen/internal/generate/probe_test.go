package generate

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
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
