package model

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/gen/internal/parse"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// buildCPU returns the cheapest of three Builds of the units, in CPU time.
func buildCPU(t *testing.T, units func() []*parse.Unit) time.Duration {
	t.Helper()
	best := time.Duration(1 << 62)
	for i := 0; i < 3; i++ {
		u := units()
		runtime.GC()
		start := cpuTime()
		if _, err := Build("p", u); err != nil {
			t.Fatal(err)
		}
		best = min(best, cpuTime()-start)
	}
	return best
}

// manyRecords is n two-member records on each of three targets.
func manyRecords(n int) func() []*parse.Unit {
	return func() []*parse.Unit {
		var units []*parse.Unit
		for _, arch := range []string{"amd64", "arm64", "ppc64le"} {
			u := &parse.Unit{GoArch: arch}
			for i := 0; i < n; i++ {
				u.Records = append(u.Records, &parse.Record{Kind: parse.Struct, Tag: fmt.Sprintf("ibv_s%d", i), Size: 8, Align: 4,
					Pos:     parse.Pos{File: "h.h", Line: i + 1, Col: 1},
					Members: []*parse.Member{{Name: "a", Type: &parse.Type{Kind: parse.Int, Size: 4, Align: 4}}, {Name: "b", Offset: 4, Type: &parse.Type{Kind: parse.Int, Size: 4, Align: 4}}}})
			}
			u.Enums = append(u.Enums, &parse.Enum{Tag: "ibv_e", Size: 4})
			units = append(units, u)
		}
		return units
	}
}

// wideRecord is one record of n members, one of them an unnamed union
// holding a nested struct (so member names are looked up through it).
func wideRecord(n int) func() []*parse.Unit {
	return func() []*parse.Unit {
		var units []*parse.Unit
		for _, arch := range []string{"amd64", "arm64"} {
			rec := &parse.Record{Kind: parse.Struct, Tag: "ibv_wide", Size: int64(4*n + 4), Align: 4}
			inner := &parse.Record{Kind: parse.Struct, Size: 4, Align: 4, Members: []*parse.Member{{Name: "x", Type: &parse.Type{Kind: parse.Int, Size: 4, Align: 4}}}}
			rec.Members = append(rec.Members, &parse.Member{Name: "", Type: &parse.Type{Kind: parse.Nested, Size: 4, Align: 4, Record: &parse.Record{Kind: parse.Union, Size: 4, Align: 4,
				Members: []*parse.Member{{Name: "n", Type: &parse.Type{Kind: parse.Nested, Size: 4, Align: 4, Record: inner}}}}}})
			for i := 0; i < n; i++ {
				rec.Members = append(rec.Members, &parse.Member{Name: fmt.Sprintf("m%d", i), Offset: int64(4 + 4*i), Type: &parse.Type{Kind: parse.Int, Size: 4, Align: 4}})
			}
			units = append(units, &parse.Unit{GoArch: arch, Records: []*parse.Record{rec}})
		}
		return units
	}
}

// TestBuildScalesLinearly: Build's CPU time grows linearly with the
// number of records and of members. Eight times the input may cost at
// most 20 times the CPU time (linear: 8; the quadratic loops Build had,
// comparing every record's C name in a loop over every record and
// looking each member up by name through the record, gave 40 to 60 at
// these sizes); CPU time of the cheapest of three runs, not wall time,
// so that a loaded machine does not make it flaky.
func TestBuildScalesLinearly(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP: TestBuildScalesLinearly builds large packages; not in -short")
	}
	for _, c := range []struct {
		name       string
		small, big func() []*parse.Unit
	}{
		{"records 2500 → 20000", manyRecords(2500), manyRecords(20000)},
		{"members 4000 → 32000", wideRecord(4000), wideRecord(32000)},
	} {
		t.Run(c.name, func(t *testing.T) {
			small, big := buildCPU(t, c.small), buildCPU(t, c.big)
			r := big.Seconds() / small.Seconds()
			t.Logf("CPU %v → %v (×%.1f)", small, big, r)
			if r > 20 {
				t.Errorf("8 times the input took %.1f times the CPU time; want linear growth (at most 20)", r)
			}
		})
	}
}
