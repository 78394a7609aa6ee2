package main

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// scaleSizes are the synthetic header sets: N renamed copies of headers/.
var scaleSizes = []int{1, 4, 16}

// BenchmarkGenerateScale generates, with the built generator as a
// subprocess for all three targets, from synthetic header sets of 1×, 4×
// and 16× the restated headers (each copy's identifiers renamed with a
// _kN suffix, so every declaration is new) and reports the median wall
// time per size, the log-log slope of time against size (1.0 is linear)
// and each size's peak RSS (getrusage ru_maxrss of the process).
//
//	make bench-scale
func BenchmarkGenerateScale(b *testing.B) {
	bin := genBinaryB(b)
	type point struct {
		n     int
		decls int
		time  time.Duration
		rss   int64 // KiB
	}
	var pts []point
	for _, n := range scaleSizes {
		inc, decls := scaleHeaders(b, n)
		var times []time.Duration
		var rss int64
		runs := max(b.N, 3)
		for i := 0; i < runs; i++ {
			out := filepath.Join(b.TempDir(), "pkg")
			cmd := exec.Command(bin, "-q", "-I", inc, "-entry", "infiniband/scale.h", "-o", out)
			// The work itself, every run: the cache would answer the
			// repeated runs.
			cmd.Env = append(os.Environ(), "VERBSEXP_NO_CACHE=1")
			start := time.Now()
			if msg, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("%d×: %v\n%s", n, err, msg)
			}
			times = append(times, time.Since(start))
			if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
				rss = max(rss, ru.Maxrss)
			}
			os.RemoveAll(out)
		}
		sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
		pts = append(pts, point{n, decls, times[len(times)/2], rss})
	}
	// Least-squares slope of log(time) against log(size).
	var sx, sy, sxx, sxy float64
	for _, p := range pts {
		x, y := math.Log(float64(p.n)), math.Log(p.time.Seconds())
		sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
	}
	k := float64(len(pts))
	slope := (k*sxy - sx*sy) / (k*sxx - sx*sx)
	fmt.Printf("\nscale  header lines  time (median)  peak RSS\n")
	for _, p := range pts {
		fmt.Printf("%4d×  %12d  %13v  %6.0f MiB\n", p.n, p.decls, p.time.Round(time.Millisecond), float64(p.rss)/1024)
		b.ReportMetric(p.time.Seconds()*1000, fmt.Sprintf("ms-%dx", p.n))
		b.ReportMetric(float64(p.rss)/1024, fmt.Sprintf("rss-MiB-%dx", p.n))
	}
	last, prev := pts[len(pts)-1], pts[len(pts)-2]
	tail := math.Log(last.time.Seconds()/prev.time.Seconds()) / math.Log(float64(last.n)/float64(prev.n))
	fmt.Printf("fitted exponent (log-log slope of time vs size): %.2f (1.0 = linear; below 1 at small sizes: fixed start-up cost)\n", slope)
	fmt.Printf("slope between the two largest sizes: %.2f\n", tail)
	b.ReportMetric(tail, "exponent-tail")
	fmt.Printf("peak RSS at 16×: %.0f MiB\n", float64(pts[len(pts)-1].rss)/1024)
	fmt.Printf("goals: slope between 4× and 16× ≤ 1.0, peak RSS at 16× below 1026 MiB\n\n")
	b.ReportMetric(slope, "exponent")
}

var scaleRenameRE = regexp.MustCompile(`\b_*(?:ibv_|IBV_|verbs_|VERBS_|VERBS|vext_|VEXT_|verbsexp_|VERBSEXP_|ofa_|OFA_|INFINIBAND_)\w*`)
var scaleIncludeRE = regexp.MustCompile(`<infiniband/(\w+)\.h>`)

// scaleHeaders writes n renamed copies of headers/infiniband/*.h and an
// entry header infiniband/scale.h including every copy; it returns the
// include directory and the number of header lines.
func scaleHeaders(b *testing.B, n int) (string, int) {
	b.Helper()
	paths, err := filepath.Glob("../headers/infiniband/*.h")
	if err != nil || len(paths) == 0 {
		b.Fatalf("no headers in ../headers/infiniband: %v", err)
	}
	dir := b.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "infiniband"), 0o755); err != nil {
		b.Fatal(err)
	}
	var entry strings.Builder
	decls := 0
	for k := 1; k <= n; k++ {
		suffix := fmt.Sprintf("_k%d", k)
		for _, p := range paths {
			src, err := os.ReadFile(p)
			if err != nil {
				b.Fatal(err)
			}
			s := scaleRenameRE.ReplaceAllString(string(src), "${0}"+suffix)
			s = scaleIncludeRE.ReplaceAllStringFunc(s, func(inc string) string {
				base := strings.TrimSuffix(scaleIncludeRE.FindStringSubmatch(inc)[1], suffix)
				return "<infiniband/" + base + suffix + ".h>"
			})
			decls += strings.Count(s, "\n")
			name := strings.TrimSuffix(filepath.Base(p), ".h") + suffix + ".h"
			if err := os.WriteFile(filepath.Join(dir, "infiniband", name), []byte(s), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		fmt.Fprintf(&entry, "#include <infiniband/verbs_exp%s.h>\n", suffix)
	}
	if err := os.WriteFile(filepath.Join(dir, "infiniband", "scale.h"), []byte(entry.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	return dir, decls
}

// genBinaryB builds the generator for a benchmark.
func genBinaryB(b *testing.B) string {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "gen")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		b.Fatalf("go build ./gen: %v\n%s", err, out)
	}
	return bin
}
