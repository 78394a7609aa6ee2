//go:build linux && cgo

package pmix_test

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/runtime/coll"
)

const benchIterations = 200

// bench is a rank of BenchmarkBootstrap: after a warm-up round it runs
// benchIterations times what New asks of the exchange (an endpoint of
// 8 ranks' size, then the second round's mark and digest), and rank 0
// prints how long PMIx_Init took and each pair of rounds, in ns.
func bench(job *coll.Job, start time.Time) int {
	initTook := time.Since(start)
	endpoint, mark := make([]byte, 56+6*12), make([]byte, 14+32)
	if _, err := job.Exchange(nil); err != nil {
		fmt.Printf("error %d: %v\n", job.Rank(), err)
		return 1
	}
	if job.Rank() == 0 {
		fmt.Printf("init %d\n", initTook.Nanoseconds())
	}
	for range benchIterations {
		t := time.Now()
		for _, b := range [][]byte{endpoint, mark} {
			if _, err := job.Exchange(b); err != nil {
				fmt.Printf("error %d: %v\n", job.Rank(), err)
				return 1
			}
		}
		if job.Rank() == 0 {
			fmt.Printf("time %d\n", time.Since(t).Nanoseconds())
		}
	}
	if err := job.Close(); err != nil {
		fmt.Printf("error %d: %v\n", job.Rank(), err)
		return 1
	}
	return 0
}

// BenchmarkBootstrap: New's two exchange rounds at 8 ranks under
// mpirun (8 processes on this host), the median of benchIterations per
// mpirun run; init-ns is PMIx_Init and the job size query (FromEnv).
func BenchmarkBootstrap(b *testing.B) {
	var times, inits []float64
	for range b.N {
		r := mpirun(b, 8, "bench")
		if r.err != nil || len(r.errs) > 0 {
			b.Fatalf("mpirun: %v %v:\n%s", r.err, r.errs, r.out)
		}
		for _, line := range bytes.Split([]byte(r.out), []byte("\n")) {
			var what string
			var ns int64
			if _, err := fmt.Sscanf(string(line), "%s %d", &what, &ns); err != nil {
				continue
			}
			switch what {
			case "time":
				times = append(times, float64(ns))
			case "init":
				inits = append(inits, float64(ns))
			}
		}
	}
	if len(times) < benchIterations {
		b.Fatalf("%d times measured", len(times))
	}
	b.ReportMetric(median(times), "ns/op")
	b.ReportMetric(median(inits), "init-ns")
}

func median(v []float64) float64 {
	slices.Sort(v)
	return v[len(v)/2]
}
