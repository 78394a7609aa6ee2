package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/verbsexp/verbsexp/internal/target"
)

// rdmaCoreInclude is where Debian's libibverbs-dev installs the upstream
// rdma-core headers (.ci/run installs it).
const rdmaCoreInclude = "/usr/include/infiniband"

// TestRDMACoreHeaders generates from upstream rdma-core's verbs.h and
// mlx5dv.h (no verbs_exp.h: MLNX_OFED ≥ 5.1, Debian libibverbs-dev):
// the package vets for every target, its call shims compile against the
// headers, and gen check finds it current (a second generation gives the
// same bytes) with every layout equal to each target's C compiler.
//
// The include directory holds only a link to infiniband/, so that each
// target's compiler takes libc and the kernel's rdma/ headers from its own
// sysroot rather than the host's /usr/include.
func TestRDMACoreHeaders(t *testing.T) {
	if _, err := os.Stat(filepath.Join(rdmaCoreInclude, "verbs.h")); err != nil {
		t.Skipf("SKIPPED: %s/verbs.h not installed (apt-get install libibverbs-dev): %v", rdmaCoreInclude, err)
	}
	bin := buildGenerator(t)
	inc := t.TempDir()
	if err := os.Symlink(rdmaCoreInclude, filepath.Join(inc, "infiniband")); err != nil {
		t.Fatal(err)
	}
	// Inside the module, so the packages can import abiutil.
	parent, err := os.MkdirTemp(repoRoot(t), ".rdma-core-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(parent)
	for _, c := range []struct{ entry, pkg, doc string }{
		{"infiniband/verbs.h", "ibverbs", "the rdma-core verbs\n(infiniband/verbs.h"},
		{"infiniband/mlx5dv.h", "mlx5dv", "the rdma-core mlx5 direct verbs\n(infiniband/mlx5dv.h"},
	} {
		t.Run(c.pkg, func(t *testing.T) {
			pkg := filepath.Join(parent, c.pkg)
			t.Logf("generating from %s (entry %s)", rdmaCoreInclude, c.entry)
			runIn(t, repoRoot(t), nil, bin, "-q", "-I", inc, "-entry", c.entry, "-o", pkg)
			rel := "./" + strings.TrimPrefix(pkg, repoRoot(t)+"/")
			for _, tg := range target.All {
				t.Logf("go vet %s for linux/%s", rel, tg.GoArch)
				runIn(t, repoRoot(t), []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + tg.GoArch}, "go", "vet", rel)
			}
			t.Logf("go vet %s with cgo (the call shims against the headers)", rel)
			runIn(t, repoRoot(t), []string{"CGO_ENABLED=1"}, "go", "vet", rel)
			out := runIn(t, repoRoot(t), nil, bin, "check", pkg)
			t.Logf("%s", out)
			doc, err := os.ReadFile(filepath.Join(pkg, "doc.go"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(doc), "Go view of "+c.doc) {
				t.Errorf("doc.go does not describe the entry it was generated from (%q):\n%s", c.doc, doc)
			}
		})
	}
}
