// Package sidebyside times several ways of doing one operation in
// interleaved rounds (a, b, c, a, b, c, …), so that whatever else loads a
// shared machine hits every way alike, and reports each way's median.
// Benchmarks use it to print ratios against their baselines that hold
// from one run to the next, where consecutive sub-benchmarks would not.
package sidebyside

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// Way is one way of doing the operation.
type Way struct {
	Name string
	// Run does the operation n times; it is timed.
	Run func(n int) error
	// After, if set, runs untimed after each Run (draining a queue, say).
	After func() error
}

// Result holds, per way in the order given, the median time of one
// operation and the heap allocations per operation over all rounds, and
// every round's time of one operation (sorted), for the spread.
type Result struct {
	Names  []string
	NsOp   []float64
	Allocs []float64
	Rounds [][]float64
}

// Of returns the median ns per operation of the way named name.
func (r Result) Of(name string) float64 {
	i := slices.Index(r.Names, name)
	if i < 0 {
		panic("sidebyside: no way named " + name)
	}
	return r.NsOp[i]
}

// Ratio is Of(a) / Of(b).
func (r Result) Ratio(a, b string) float64 { return r.Of(a) / r.Of(b) }

// Summary formats a result as "a 12.3 ns (0 allocs), b 45.6 ns (3 allocs)".
func (r Result) Summary() string {
	var s []string
	for i, name := range r.Names {
		s = append(s, fmt.Sprintf("%s %.1f ns (%.3g allocs)", name, r.NsOp[i], r.Allocs[i]))
	}
	return strings.Join(s, ", ")
}

// mallocs counts heap allocations so far (exactly, as testing does; it
// stops the world briefly, outside the timed part).
func mallocs() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.Mallocs
}

// Measure runs rounds rounds; in each, every way does n operations in
// turn, starting one way further along each round so that no way always
// follows the same one.
func Measure(rounds, n int, ways ...Way) (Result, error) {
	times := make([][]float64, len(ways))
	objs := make([]uint64, len(ways))
	for r := 0; r < rounds; r++ {
		for k := range ways {
			i := (r + k) % len(ways)
			w := ways[i]
			a := mallocs()
			start := time.Now()
			err := w.Run(n)
			d := time.Since(start)
			objs[i] += mallocs() - a
			if err != nil {
				return Result{}, fmt.Errorf("%s: %w", w.Name, err)
			}
			times[i] = append(times[i], float64(d.Nanoseconds())/float64(n))
			if w.After != nil {
				if err := w.After(); err != nil {
					return Result{}, fmt.Errorf("%s: %w", w.Name, err)
				}
			}
		}
	}
	res := Result{}
	for i, w := range ways {
		slices.Sort(times[i])
		res.Names = append(res.Names, w.Name)
		res.NsOp = append(res.NsOp, times[i][len(times[i])/2])
		res.Allocs = append(res.Allocs, float64(objs[i])/float64(rounds*n))
		res.Rounds = append(res.Rounds, times[i])
	}
	return res, nil
}

// Bench is Measure with b.N rounds of n operations each. It reports each
// way's median as the metric "<name>-ns/op" and its allocations as
// "<name>-allocs/op", and returns the result for the caller to report
// ratios (b.ReportMetric(r.Ratio(a, b), "a/b")). The benchmark's own
// ns/op is the time of one round of all ways.
func Bench(b *testing.B, n int, ways ...Way) Result {
	b.Helper()
	b.ResetTimer()
	res, err := Measure(b.N, n, ways...)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	for i, name := range res.Names {
		b.ReportMetric(res.NsOp[i], name+"-ns/op")
		b.ReportMetric(res.Allocs[i], name+"-allocs/op")
	}
	return res
}
