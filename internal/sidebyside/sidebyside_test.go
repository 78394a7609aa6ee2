package sidebyside

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

var sink []*[64]byte

// TestMeasure: every way runs rounds×n times, in rotating order, its
// allocations are counted per operation, and an error stops the run
// naming the way.
func TestMeasure(t *testing.T) {
	order := make([]string, 0, 8)
	runs := map[string]int{"a": 0, "b": 0}
	way := func(name string, alloc bool) Way {
		return Way{Name: name, Run: func(n int) error {
			order = append(order, name)
			for i := 0; i < n; i++ {
				runs[name]++
				if alloc {
					sink = append(sink[:0], new([64]byte))
				}
			}
			return nil
		}}
	}
	res, err := Measure(3, 100, way("a", false), way("b", true))
	if err != nil {
		t.Fatal(err)
	}
	if runs["a"] != 300 || runs["b"] != 300 {
		t.Fatalf("runs = %v, want 300 each", runs)
	}
	if got := strings.Join(order, ""); got != "abbaab" {
		t.Fatalf("order %q, want abbaab (each round starts one way further)", got)
	}
	// runtime.MemStats counts the whole process: a few objects of the
	// runtime's own (a GC cycle's) may fall in a round, as in CI once
	// (0.02 for the way that allocates nothing); one per operation may not.
	if res.Allocs[0] > 0.05 || res.Allocs[1] < 1 || res.Allocs[1] > 1.1 {
		t.Fatalf("allocs/op = %v, want about 0 and about 1", res.Allocs)
	}
	if res.Of("a") <= 0 || res.Ratio("b", "a") <= 0 {
		t.Fatalf("medians %v", res.NsOp)
	}
	for i, r := range res.Rounds {
		if len(r) != 3 || !slices.IsSorted(r) || r[1] != res.NsOp[i] {
			t.Fatalf("%s: rounds %v, want 3 sorted, the middle one the median %v", res.Names[i], r, res.NsOp[i])
		}
	}
	boom := errors.New("boom")
	_, err = Measure(1, 1, Way{Name: "bad", Run: func(int) error { return boom }})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "bad") {
		t.Fatalf("err = %v, want boom naming the way", err)
	}
}
