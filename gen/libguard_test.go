package main

import (
	"os"
	"strings"
	"testing"

	"github.com/verbsexp/verbsexp/gen/internal/generate"
	"github.com/verbsexp/verbsexp/gen/internal/parse"
	"github.com/verbsexp/verbsexp/gen/internal/shim"
	"github.com/verbsexp/verbsexp/internal/target"
)

// TestLibraryGuard: a package of the MLNX_OFED legacy verbs (headers/,
// entry verbs_exp.h) refuses a libibverbs.so.1 without the legacy marker
// at run time, in its Go lookups and in its C stubs; a package generated
// from upstream rdma-core's verbs.h (Debian's libibverbs-dev) has no
// guard: that library is its own.
func TestLibraryGuard(t *testing.T) {
	run := func(dir, entry string) (*generate.Result, map[string]string) {
		t.Helper()
		res, err := generate.Run(generate.Options{
			Parse:   parse.Options{IncludeDirs: []string{dir}, Entry: entry, ScopeDir: parse.DefaultScope},
			Targets: target.All[:1],
			Package: "verbs",
			Command: "gen -I " + dir + " -entry " + entry,
		})
		if err != nil {
			t.Fatalf("%s/%s: %v", dir, entry, err)
		}
		files := map[string]string{}
		for _, f := range res.Files {
			files[f.Name] = string(f.Data)
		}
		return res, files
	}
	legacy, files := run("../headers", parse.DefaultEntry)
	if legacy.Shims.Guard == nil || *legacy.Shims.Guard != shim.LegacyGuard {
		t.Fatalf("headers/ (legacy verbs): guard %+v, want shim.LegacyGuard", legacy.Shims.Guard)
	}
	for _, want := range []string{
		`dynlib.New("libibverbs.so.1", "libibverbs.so").Require(dynlib.Guard{`,
		`Symbol:      "ibv_exp_cmd_query_device",`,
		`OtherSymbol: "_verbs_init_and_alloc_context",`,
		`-entry infiniband/verbs.h`,
	} {
		if !strings.Contains(files["shims.go"], want) {
			t.Errorf("legacy shims.go lacks %q", want)
		}
	}
	if !strings.Contains(files["stubs_linux.c"], `verbsexp_dynlib_resolve(verbsexp_libs, "ibv_exp_cmd_query_device", name)`) {
		t.Errorf("legacy stubs_linux.c does not resolve under the guard:\n%s", files["stubs_linux.c"][:800])
	}

	const rdma = "/usr/include"
	if _, err := os.Stat(rdma + "/infiniband/verbs.h"); err != nil {
		t.Skipf("SKIPPED the rdma-core half: %v (apt-get install libibverbs-dev)", err)
	}
	if _, err := os.Stat(rdma + "/infiniband/verbs_exp.h"); err == nil {
		t.Skipf("SKIPPED the rdma-core half: %s holds MLNX_OFED's legacy verbs_exp.h, not rdma-core", rdma)
	}
	up, files := run(rdma, "infiniband/verbs.h")
	if up.Shims.Guard != nil {
		t.Fatalf("rdma-core's verbs.h: guard %+v, want none", up.Shims.Guard)
	}
	if want := "var libibverbs = dynlib.New(\"libibverbs.so.1\", \"libibverbs.so\")\n"; !strings.Contains(files["shims.go"], want) {
		t.Errorf("rdma-core shims.go lacks %q", want)
	}
	if !strings.Contains(files["stubs_linux.c"], "verbsexp_dynlib_resolve(verbsexp_libs, NULL, name)") {
		t.Error("rdma-core stubs_linux.c resolves under a guard")
	}
}
