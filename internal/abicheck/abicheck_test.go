package abicheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/verbsexp/verbsexp/internal/manifest"
	"github.com/verbsexp/verbsexp/internal/target"
)

// The fixture: testdata/include/t.h and its manifest, written by hand
// from C's layout rules (the same on the three 64-bit targets).
const (
	fixtureEntry    = "t.h"
	fixtureInclude  = "testdata/include"
	fixtureManifest = "testdata/t.abi.json"
)

func fixture(t *testing.T) *manifest.Manifest {
	t.Helper()
	m, err := manifest.Read(fixtureManifest)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// compilers are the targets whose compiler is installed (all three where
// make toolchains ran; a missing one is skipped, saying so).
func compilers(t *testing.T) []target.Target {
	var ts []target.Target
	for _, tg := range target.All {
		if _, err := tg.Compiler(); err != nil {
			t.Logf("SKIPPED linux/%s: %v", tg.GoArch, err)
			continue
		}
		ts = append(ts, tg)
	}
	if len(ts) == 0 {
		t.Skip("SKIPPED: no target compiler installed")
	}
	return ts
}

// TestCheckHolds: the hand-written manifest holds on every target.
func TestCheckHolds(t *testing.T) {
	for _, tg := range compilers(t) {
		r, err := Check(fixture(t), tg, fixtureEntry, []string{fixtureInclude})
		if err != nil {
			t.Fatal(err)
		}
		if !r.OK() || r.Assertions != 2+2*6+3 {
			t.Errorf("linux/%s: %d assertions, failures %v, other %q", tg.GoArch, r.Assertions, r.Failures, r.Other)
		}
	}
}

// TestCheckNamesEachFailure: a wrong size, a member the header lacks and a
// wrong constant each come back as their own failure, in manifest order,
// with the compiler's complaint, and nothing else is reported.
func TestCheckNamesEachFailure(t *testing.T) {
	for _, tg := range compilers(t) {
		m := fixture(t)
		a := m.Arches[tg.GoArch]
		a.Records[0].Size = 40
		a.Records[0].Fields[3].C = "pair.low" // pair.lo renamed
		a.Constants[1].Value.Bits = 8         // T_KIND_B
		r, err := Check(m, tg, fixtureEntry, []string{fixtureInclude})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range r.Failures {
			got = append(got, f.Msg+" | "+f.Compiler)
		}
		want := []string{
			"struct t_item: size is not 40 on " + tg.GoArch + " | static assertion failed",
			"struct t_item.pair.low: offset is not 16 on " + tg.GoArch + " | ",
			"struct t_item.pair.low: size is not 2 on " + tg.GoArch + " | ",
			"T_KIND_B is not 8 on " + tg.GoArch + " | static assertion failed",
		}
		if len(got) != len(want) || r.Other != "" {
			t.Fatalf("linux/%s failures:\n%s\nother: %q\nwant %d failures", tg.GoArch, strings.Join(got, "\n"), r.Other, len(want))
		}
		for i, w := range want {
			if !strings.HasPrefix(got[i], w) {
				t.Errorf("linux/%s: failure %d = %q, want it to start with %q", tg.GoArch, i, got[i], w)
			}
		}
		if !strings.Contains(got[1], "has no member named 'low'") {
			t.Errorf("linux/%s: the missing member's failure does not quote the compiler: %q", tg.GoArch, got[1])
		}
	}
}

// TestCheckHeadersMissing: headers that are not there are reported as
// such, not as a failure per assertion.
func TestCheckHeadersMissing(t *testing.T) {
	tg := compilers(t)[0]
	r, err := Check(fixture(t), tg, fixtureEntry, []string{t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if r.OK() || len(r.Failures) != 0 || !strings.Contains(r.Other, "t.h: No such file or directory") {
		t.Fatalf("other = %q, %d failures", r.Other, len(r.Failures))
	}
}

// TestCheckNoArch: a manifest without the target's arch is an error, not a
// passing check.
func TestCheckNoArch(t *testing.T) {
	m := fixture(t)
	delete(m.Arches, "arm64")
	arm64, _ := target.Lookup("arm64")
	if _, err := Check(m, arm64, fixtureEntry, []string{fixtureInclude}); err == nil || !strings.Contains(err.Error(), "no linux/arm64") {
		t.Errorf("err = %v", err)
	}
}

// TestCheckRefusesAnotherTargetsCompiler: a compiler that is not the
// target's (VERBSEXP_CC_<ARCH> naming another arch's gcc) is refused
// before its layouts are compared: otherwise every member it lays out
// differently would be blamed on the manifest.
func TestCheckRefusesAnotherTargetsCompiler(t *testing.T) {
	ts := compilers(t)
	if len(ts) < 2 {
		t.Skip("SKIPPED: needs two target compilers to swap them")
	}
	host, _ := ts[0].Compiler()
	other := ts[1]
	t.Setenv(other.EnvVar(), host)
	_, err := Check(fixture(t), other, fixtureEntry, []string{fixtureInclude})
	if err == nil || !strings.Contains(err.Error(), "not "+other.GoArch) || !strings.Contains(err.Error(), other.DebianPkg) {
		t.Fatalf("linux/%s checked with %s: err = %v; want a refusal naming the arch and %s", other.GoArch, host, err, other.DebianPkg)
	}
	if err := Compile("", other, nil); err == nil || !strings.Contains(err.Error(), "not "+other.GoArch) {
		t.Fatalf("Compile with %s for linux/%s: err = %v", host, other.GoArch, err)
	}
}

// TestCheckBitFields: bit-field positions are checked against the
// compiler too (gen check passed a wrong bit offset before): the right
// ones hold on every target, a wrong offset or width fails naming the
// member, the manifest's claim and where the compiler put it.
func TestCheckBitFields(t *testing.T) {
	inc := t.TempDir()
	const h = `#include <stdint.h>
struct t_bits { uint32_t a; unsigned int x:3, y:5; signed char c:2; _Bool b:1; uint64_t w:40; union { int p:7; char q; }; };
`
	if err := os.WriteFile(filepath.Join(inc, "b.h"), []byte(h), 0o644); err != nil {
		t.Fatal(err)
	}
	bf := func(c string, off int64, size int) manifest.Field {
		return manifest.Field{C: c, Go: "X()", BitOffset: &off, BitSize: size}
	}
	fields := func() []manifest.Field {
		return []manifest.Field{bf("x", 32, 3), bf("y", 35, 5), bf("c", 40, 2), bf("b", 42, 1), bf("w", 64, 40), bf("p", 128, 7)}
	}
	for _, tg := range compilers(t) {
		m := &manifest.Manifest{Version: manifest.Version, Inputs: []manifest.Input{}, Arches: map[string]*manifest.Arch{
			tg.GoArch: {Records: []manifest.Record{{C: "struct t_bits", Go: "Bits", Size: 24, Align: 8, Fields: fields()}}},
		}}
		r, err := Check(m, tg, "b.h", []string{inc})
		if err != nil {
			t.Fatal(err)
		}
		if !r.OK() || r.Assertions != 2+6 {
			t.Errorf("linux/%s: %d assertions, failures %v, other %q", tg.GoArch, r.Assertions, r.Failures, r.Other)
		}
		fs := m.Arches[tg.GoArch].Records[0].Fields
		*fs[1].BitOffset = 36
		fs[4].BitSize = 39
		r, err = Check(m, tg, "b.h", []string{inc})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range r.Failures {
			got = append(got, f.Msg+" ("+f.Compiler+")")
		}
		want := []string{
			"struct t_bits.y: bit-field is not 5 bits at bit 36 on " + tg.GoArch + " (the compiler sets 5 bits at bit 35)",
			"struct t_bits.w: bit-field is not 39 bits at bit 64 on " + tg.GoArch + " (the compiler sets 40 bits at bit 64)",
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") || r.Other != "" {
			t.Errorf("linux/%s: failures\n%s\nwant\n%s\n(other %q)", tg.GoArch, strings.Join(got, "\n"), strings.Join(want, "\n"), r.Other)
		}
	}
}
