//go:build linux && cgo

package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/coll"
)

// TestAllreduce runs the example for every rank count from 1 to 16
// (powers of two and the others, with their extra ranks) with sums,
// maxima (MAXLOC) and the bitwise operations over every data type, three
// allreduces each with fresh inputs, every rank's result checked against
// Go after each (run fails otherwise); then the line it prints.
func TestAllreduce(t *testing.T) {
	line := regexp.MustCompile(`^\d+ ranks, \w+ over \w+, \d+ per rank: every rank holds .+; 3 allreduces, each one ibv_exp_post_task per rank, [0-9.]+ µs per allreduce \(median\)\n$`)
	for n := 1; n <= 16; n++ {
		for _, opName := range []string{"sum", "max", "and", "or", "xor"} {
			for _, typName := range []string{"int", "uint", "float"} {
				count := 1 + n%3 // one to three elements
				t.Run(fmt.Sprintf("%d/%s/%s/%d", n, opName, typName, count), func(t *testing.T) {
					var out strings.Builder
					if err := run(n, count, ops[opName], types[typName], 3, &out); err != nil {
						t.Fatal(err)
					}
					if !line.MatchString(out.String()) {
						t.Fatalf("output %q", out.String())
					}
				})
			}
		}
	}
}

// TestResultLine: what the example prints for a known case (12 ranks'
// int maximum of allreduce 2, MAXLOC naming the lowest rank among equal
// values) agrees with reference.
func TestResultLine(t *testing.T) {
	var out strings.Builder
	if err := run(12, 1, ops["max"], types["int"], 3, &out); err != nil {
		t.Fatal(err)
	}
	want := reference(12, 1, 2, ops["max"], types["int"])[0]
	max, at := int64(-1<<63), -1
	for r := range 12 {
		if v := int64(input(r, 0, 2, types["int"])); v > max {
			max, at = v, r
		}
	}
	if want != (result{uint64(max), uint64(at)}) {
		t.Fatalf("reference %+v, by hand %d at rank %d", want, max, at)
	}
	if s := fmt.Sprintf("every rank holds %d at rank %d;", max, at); !strings.Contains(out.String(), s) {
		t.Errorf("output %q lacks %q", out.String(), s)
	}
}

// TestCheckCatches: the result check fails on a wrong value, a wrong
// MAXLOC rank and a wrong later element.
func TestCheckCatches(t *testing.T) {
	typ := types["float"]
	want := reference(5, 2, 0, ops["max"], typ)
	b := make([]byte, 2*coll.ElementSize)
	put := func(e int, r result) { coll.PutElement(b, e, coll.OrderKey(r.value, typ), r.rank) }
	put(0, want[0])
	put(1, want[1])
	if err := check(b, want, ops["max"], typ); err != nil {
		t.Fatalf("the right result: %v", err)
	}
	for _, bad := range []struct {
		e int
		r result
	}{
		{0, result{want[0].value ^ 1, want[0].rank}},
		{0, result{want[0].value, want[0].rank + 1}},
		{1, result{want[1].value ^ 1<<52, want[1].rank}},
	} {
		put(0, want[0])
		put(1, want[1])
		put(bad.e, bad.r)
		if err := check(b, want, ops["max"], typ); err == nil {
			t.Errorf("element %d = %+v passed the check", bad.e, bad.r)
		}
	}
	sum := reference(3, 1, 0, ops["sum"], verbs.ExpCalcDataTypeUint)
	coll.PutElement(b, 0, sum[0].value+1, 0)
	if err := check(b, sum, ops["sum"], verbs.ExpCalcDataTypeUint); err == nil {
		t.Error("a wrong sum passed the check")
	}
}
