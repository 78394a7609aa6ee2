package tests

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// headerSet is one include directory and entry header to generate from.
type headerSet struct {
	name, include, entry string
}

// probeHeaderSets are the header sets TestProbesChangeNothing compares
// on: headers/, Debian's rdma-core (verbs.h and mlx5dv.h, when
// libibverbs-dev is installed), and every real release the environment
// names ($VERBSEXP_OFED_RELEASES/<release>/include with verbs_exp.h,
// $VERBSEXP_RDMA_RELEASES/<release>/include with verbs.h and mlx5dv.h).
// Each kind it cannot find is a loud skip of its own.
func probeHeaderSets(t *testing.T) []headerSet {
	sets := []headerSet{{"headers", filepath.Join(repoRoot(t), "headers"), "infiniband/verbs_exp.h"}}
	if _, err := os.Stat(filepath.Join(rdmaCoreInclude, "verbs.h")); err == nil {
		// Only infiniband/, so that every target's compiler takes libc
		// and the kernel's rdma/ headers from its own sysroot.
		inc := t.TempDir()
		if err := os.Symlink(rdmaCoreInclude, filepath.Join(inc, "infiniband")); err != nil {
			t.Fatal(err)
		}
		for _, e := range []string{"infiniband/verbs.h", "infiniband/mlx5dv.h"} {
			sets = append(sets, headerSet{"debian-rdma-core:" + e, inc, e})
		}
	} else {
		t.Logf("SKIPPED: Debian's rdma-core (%s/verbs.h): not installed (apt-get install libibverbs-dev)", rdmaCoreInclude)
	}
	for _, kind := range []struct {
		env     string
		entries []string
	}{
		{"VERBSEXP_OFED_RELEASES", []string{"infiniband/verbs_exp.h"}},
		{"VERBSEXP_RDMA_RELEASES", []string{"infiniband/verbs.h", "infiniband/mlx5dv.h"}},
	} {
		root := os.Getenv(kind.env)
		if root == "" {
			t.Logf("SKIPPED: %s is not set: set it to a directory of <release>/include trees to compare on those real releases", kind.env)
			continue
		}
		dirs, _ := filepath.Glob(filepath.Join(root, "*", "include"))
		sort.Strings(dirs)
		n := 0
		for _, inc := range dirs {
			for _, e := range kind.entries {
				if _, err := os.Stat(filepath.Join(inc, e)); err == nil {
					sets = append(sets, headerSet{filepath.Base(filepath.Dir(inc)) + ":" + e, inc, e})
					n++
				}
			}
		}
		if n == 0 {
			t.Fatalf("%s=%s holds no <release>/include with %v", kind.env, root, kind.entries)
		}
	}
	return sets
}

// TestProbesChangeNothing: the generator translates one target and
// probes the others' compilers for their layouts; the package it writes
// is byte for byte the one it writes translating every target on its
// own (VERBSEXP_NO_PROBES=1, the design before the probes), on every
// header set of probeHeaderSets, and a header set one refuses the other
// refuses with the same message. With VERBSEXP_REFERENCE_GEN naming
// another gen binary (the generator before the probes), its packages are
// compared too.
func TestProbesChangeNothing(t *testing.T) {
	bin := buildGenerator(t)
	ref := os.Getenv("VERBSEXP_REFERENCE_GEN")
	if ref == "" {
		t.Logf("SKIPPED: the comparison with a reference generator: set VERBSEXP_REFERENCE_GEN to a gen binary (e.g. built from the commit before the probes)")
	}
	for _, set := range probeHeaderSets(t) {
		t.Run(set.name, func(t *testing.T) {
			want := generateSet(t, bin, set, "VERBSEXP_NO_PROBES=1")
			got := generateSet(t, bin, set)
			compareSets(t, "translating every target on its own", got, want)
			if ref != "" {
				compareSets(t, "the reference generator", got, generateSet(t, ref, set))
			}
		})
	}
}

// generated is what one run wrote: its files, or its error.
type generated struct {
	files map[string][]byte
	err   string
}

// generateSet runs gen on set without the cache, as "-o pkg" from a
// directory of its own (the recorded command is then the same).
func generateSet(t *testing.T, bin string, set headerSet, env ...string) generated {
	t.Helper()
	parent := t.TempDir()
	cmd := exec.Command(bin, "-q", "-I", set.include, "-entry", set.entry, "-o", "pkg")
	cmd.Dir = parent
	cmd.Env = append(append(os.Environ(), "VERBSEXP_NO_CACHE=1", "VERBSEXP_NO_PROBES="), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return generated{err: strings.TrimSpace(stderr.String())}
	}
	files := map[string][]byte{}
	entries, err := os.ReadDir(filepath.Join(parent, "pkg"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(parent, "pkg", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = b
	}
	return generated{files: files}
}

func compareSets(t *testing.T, what string, got, want generated) {
	t.Helper()
	if got.err != want.err {
		t.Fatalf("%s: the run says\n%s\nnot\n%s", what, got.err, want.err)
	}
	for name, b := range want.files {
		if !bytes.Equal(got.files[name], b) {
			t.Errorf("%s: %s differs", what, name)
		}
	}
	for name := range got.files {
		if _, ok := want.files[name]; !ok {
			t.Errorf("%s: %s is written only with the probes", what, name)
		}
	}
}
