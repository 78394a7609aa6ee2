//go:build linux && cgo

package pmix_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/runtime/coll"
	"github.com/verbsexp/verbsexp/runtime/coll/internal/jobcheck"
)

const benchIterations = 200

// bench is a rank of BenchmarkBootstrap: rank 0 prints how long
// PMIx_Init took and then each of benchIterations bootstraps, in ns.
func bench(job *coll.Job, start time.Time) int {
	initTook := time.Since(start)
	err := jobcheck.Bootstraps(job.Exchange, benchIterations, func(d time.Duration) {
		if job.Rank() == 0 {
			fmt.Printf("time %d\n", d.Nanoseconds())
		}
	})
	if err == nil {
		err = job.Close()
	}
	if err != nil {
		fmt.Printf("error %d: %v\n", job.Rank(), err)
		return 1
	}
	if job.Rank() == 0 {
		fmt.Printf("init %d\n", initTook.Nanoseconds())
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
	b.ReportMetric(jobcheck.Median(times), "ns/op")
	b.ReportMetric(jobcheck.Median(inits), "init-ns")
}
