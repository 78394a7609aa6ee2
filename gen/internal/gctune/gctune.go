// Package gctune sets the generator's garbage collection policy: a
// short-lived process that allocates a lot while parsing. The heap may
// grow past the live data by a headroom of 4× the live heap (GC percent
// 400: the real headers, ~30 MB live, see few collections), at most 256
// MiB, but never less than half the live heap (GC percent 50). The
// percent is set again after every collection. Large inputs so keep
// their RSS near what they need instead of 5× it (make bench-scale: 16×
// headers/ peaked at 0.9–1.1 GiB with a fixed 400; 100 000 declarations
// at 7 GB), and unlike a fixed memory limit the headroom grows with the
// live heap: an input whose live heap is above any fixed limit does not
// make the collector run continuously.
package gctune

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
)

const (
	maxPercent   = 400
	minPercent   = 50
	headroomCap  = 256 << 20 // bytes the heap may grow past the live heap, above minPercent's
	startPercent = maxPercent
)

// Start applies the policy to the process, unless GOGC is set (then the
// runtime's own setting stands).
func Start() { start(startPercent) }

// quietPercent puts the first collection where the heap reaches
// headroomCap (the runtime's first goal is 4 MiB × percent/100), the most
// headroom the policy ever allows.
const quietPercent = headroomCap / (4 << 20) * 100

// StartQuiet is Start with no collection before the heap reaches 256
// MiB: the generator's own process allocates ~100 MB on the real headers
// (model, layout, rendering) and then collects not at all. The front
// end's child keeps Start: what it holds when it runs out of memory
// tells deep recursion (stacks) from expansion (heap), which a heap of
// uncollected garbage would blur (contain.go).
func StartQuiet() { start(quietPercent) }

func start(percent int) {
	if os.Getenv("GOGC") != "" {
		return
	}
	debug.SetGCPercent(percent)
	arm()
}

// Percent is the GC percent for a live heap of live bytes: the headroom
// min(4×live, max(256 MiB, live/2)) as a percentage of live.
func Percent(live uint64) int {
	if live == 0 {
		return maxPercent
	}
	headroom := max(min(4*live, headroomCap), live/2)
	return int(min(max(headroom*100/live, minPercent), maxPercent))
}

// sentinel is garbage as soon as it is made: its finalizer runs after
// each collection, re-reads the live heap and sets the percent.
type sentinel struct{ _ *byte } // not zero-size: a finalizer needs a heap block of its own

func arm() {
	runtime.SetFinalizer(&sentinel{}, func(*sentinel) {
		s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		metrics.Read(s)
		if s[0].Value.Kind() == metrics.KindUint64 {
			debug.SetGCPercent(Percent(s[0].Value.Uint64()))
		}
		arm()
	})
}
