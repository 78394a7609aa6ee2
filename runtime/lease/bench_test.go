//go:build linux && cgo

package lease

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/internal/sidebyside"
)

// BenchmarkLeaseOutstanding: one Lease and its Release with 10k, 20k and
// 40k other leases outstanding, each table's leases 64-byte slices of one
// Buffer leased in shuffled order. The three tables are measured
// interleaved (sidebyside): O(log n) shows as 40k/10k near 1 (a scan of
// the outstanding leases, as before, made it 4 and more). build-ms is the
// time to lease all of them, the figure issue 11 quotes (0.9 / 4.0 / 17 s
// with the scan).
func BenchmarkLeaseOutstanding(b *testing.B) {
	const slot = 64
	sizes := []int{10_000, 20_000, 40_000}
	var ways []sidebyside.Way
	builds := map[string]time.Duration{}
	for _, n := range sizes {
		name := fmt.Sprintf("%dk", n/1000)
		buf, err := Alloc((n + 1) * slot)
		if err != nil {
			b.Fatal(err)
		}
		tb := NewTable()
		start := time.Now()
		for i, k := range rand.New(rand.NewPCG(1, 2)).Perm(n) {
			if _, err := tb.Lease(uint64(i), buf, k*slot, slot, 1); err != nil {
				b.Fatal(err)
			}
		}
		builds[name] = time.Since(start)
		defer func() {
			for i := 0; i < n; i++ {
				tb.Release(uint64(i))
			}
			tb.Close()
			buf.Free()
		}()
		ways = append(ways, sidebyside.Way{Name: name, Run: func(ops int) error {
			for i := 0; i < ops; i++ {
				if _, err := tb.Lease(uint64(n), buf, n*slot, slot, 1); err != nil {
					return err
				}
				if err := tb.Release(uint64(n)); err != nil {
					return err
				}
			}
			return nil
		}})
	}
	var res sidebyside.Result
	b.Run("side-by-side", func(b *testing.B) {
		res = sidebyside.Bench(b, 2000, ways...)
		b.ReportMetric(res.Ratio("40k", "10k"), "40k/10k")
		for name, d := range builds {
			b.ReportMetric(float64(d.Microseconds())/1000, name+"-build-ms")
		}
	})
	if res.Names != nil {
		fmt.Printf("LeaseOutstanding (interleaved medians, Lease+Release): %s; 40k/10k %.2f; building 10k/20k/40k leases: %v / %v / %v\n",
			res.Summary(), res.Ratio("40k", "10k"), builds["10k"].Round(time.Millisecond/10), builds["20k"].Round(time.Millisecond/10), builds["40k"].Round(time.Millisecond/10))
	}
}
