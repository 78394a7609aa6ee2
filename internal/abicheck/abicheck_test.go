package abicheck

import (
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/verbsexp/verbsexp/internal/manifest"
	"github.com/verbsexp/verbsexp/internal/target"
)

const entry = "infiniband/verbs_exp.h"

func repoFile(parts ...string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(append([]string{filepath.Dir(file), "..", ".."}, parts...)...)
}

func committed(t *testing.T) *manifest.Manifest {
	t.Helper()
	m, err := manifest.Read(repoFile("generated", "abi.json"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func host(t *testing.T) target.Target {
	tg, ok := target.Lookup(runtime.GOARCH)
	if !ok {
		t.Skipf("SKIPPED: host arch %s is not a target", runtime.GOARCH)
	}
	return tg
}

// TestCheckHolds: the committed manifest holds for headers/.
func TestCheckHolds(t *testing.T) {
	tg := host(t)
	r, err := Check(committed(t), tg, entry, []string{repoFile("headers")})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || r.Assertions < 1000 {
		t.Fatalf("%d assertions, failures %v, other %q", r.Assertions, r.Failures, r.Other)
	}
}

// TestCheckNamesEachFailure: a wrong size, a member the headers lack and a
// wrong constant each come back as their own failure, with the
// compiler's complaint, and nothing else is reported.
func TestCheckNamesEachFailure(t *testing.T) {
	tg := host(t)
	m := committed(t)
	a := m.Arches[tg.GoArch]
	var changed int
	for i := range a.Records {
		r := &a.Records[i]
		if r.C == "struct ibv_exp_task" {
			r.Size += 8
			for j := range r.Fields {
				if r.Fields[j].C == "next" {
					r.Fields[j].C = "next_renamed"
				}
			}
			changed++
		}
	}
	for i := range a.Constants {
		if a.Constants[i].C == "IBV_EXP_TASK_RECV" {
			a.Constants[i].Value.Bits += 1
			changed++
		}
	}
	if changed != 2 {
		t.Fatal("generated/abi.json lacks struct ibv_exp_task or IBV_EXP_TASK_RECV")
	}
	r, err := Check(m, tg, entry, []string{repoFile("headers")})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range r.Failures {
		got = append(got, f.Msg+" | "+f.Compiler)
	}
	want := []string{
		"struct ibv_exp_task: size is not 48 on " + tg.GoArch + " | static assertion failed",
		"struct ibv_exp_task.next_renamed: offset is not",
		"struct ibv_exp_task.next_renamed: size is not",
		"IBV_EXP_TASK_RECV is not",
	}
	if len(got) != len(want) || r.Other != "" {
		t.Fatalf("failures:\n%s\nother: %q\nwant %d failures", strings.Join(got, "\n"), r.Other, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Errorf("failure %d = %q, want it to start with %q", i, got[i], w)
		}
	}
	if !strings.Contains(got[1], "has no member named 'next_renamed'") {
		t.Errorf("the missing member's failure does not quote the compiler: %q", got[1])
	}
}

// TestCheckHeadersMissing: headers that are not there are reported as
// such, not as thousands of failed assertions.
func TestCheckHeadersMissing(t *testing.T) {
	tg := host(t)
	r, err := Check(committed(t), tg, entry, []string{t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if r.OK() || !strings.Contains(r.Other, "infiniband/verbs_exp.h: No such file or directory") {
		t.Fatalf("other = %q, %d failures", r.Other, len(r.Failures))
	}
}
