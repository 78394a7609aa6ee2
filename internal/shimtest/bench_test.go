//go:build linux && cgo

package shimtest

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/internal/sidebyside"
)

// block is the number of calls each way makes per interleaved round.
const block = 4096

// ways runs each way as a sub-benchmark of its own (for benchstat and
// -benchmem), then all of them interleaved in "side-by-side", which
// reports each one's median and the ratios asked for; the summary line is
// printed once per run.
func ways(b *testing.B, title string, ratios [][2]string, ws ...sidebyside.Way) {
	for _, w := range ws {
		b.Run(w.Name, func(b *testing.B) {
			b.ReportAllocs()
			if err := w.Run(b.N); err != nil {
				b.Fatal(err)
			}
		})
	}
	var last sidebyside.Result
	b.Run("side-by-side", func(b *testing.B) {
		last = sidebyside.Bench(b, block, ws...)
		for _, r := range ratios {
			b.ReportMetric(last.Ratio(r[0], r[1]), r[0]+"/"+r[1])
		}
	})
	if last.Names != nil {
		s := ""
		for _, r := range ratios {
			s += fmt.Sprintf("; %s/%s %.2f", r[0], r[1], last.Ratio(r[0], r[1]))
		}
		fmt.Printf("%s (interleaved medians): %s%s\n", title, last.Summary(), s)
	}
}

// BenchmarkShimExpPostTask posts one task through the inline dispatch path
// into the test provider: "go" is the generated wrapper (errno packed
// with the result in one C value), "previous" the form it replaced (cgo's
// two-result call), "cmem" the address form for C memory
// (ExpPostTaskCMem: no cgo pointer checks), "c" the same calls from a C
// loop and "cgo-nop3" an empty cgo call of the post's shape. go/previous
// is the gain; cmem ≈ c + cgo-nop3 when the wrapper adds nothing but the
// transition.
func BenchmarkShimExpPostTask(b *testing.B) {
	ctx := Open(true)
	defer Close(ctx)
	task := Calloc[verbs.ExpTask]()
	bad := Calloc[*verbs.ExpTask]()
	defer Free(unsafe.Pointer(task))
	defer Free(unsafe.Pointer(bad))
	SetPostTaskResult(0)
	c, t, p := uintptr(unsafe.Pointer(ctx)), uintptr(unsafe.Pointer(task)), uintptr(unsafe.Pointer(bad))
	ways(b, "ShimExpPostTask", [][2]string{{"go", "previous"}, {"cmem", "previous"}},
		sidebyside.Way{Name: "go", Run: func(n int) error {
			for i := 0; i < n; i++ {
				if err := verbs.ExpPostTask(ctx, task, bad); err != nil {
					return err
				}
			}
			return nil
		}},
		sidebyside.Way{Name: "previous", Run: func(n int) error {
			for i := 0; i < n; i++ {
				if err := PreviousExpPostTask(ctx, task, bad); err != nil {
					return err
				}
			}
			return nil
		}},
		sidebyside.Way{Name: "cmem", Run: func(n int) error {
			for i := 0; i < n; i++ {
				if err := verbs.ExpPostTaskCMem(c, t, p); err != nil {
					return err
				}
			}
			return nil
		}},
		sidebyside.Way{Name: "c", Run: func(n int) error {
			if PostTaskLoop(ctx, task, bad, n) != 0 {
				return fmt.Errorf("post_task failed")
			}
			return nil
		}},
		sidebyside.Way{Name: "cgo-nop3", Run: func(n int) error {
			for i := 0; i < n; i++ {
				Nop3(c, t, p)
			}
			return nil
		}},
	)
}

// BenchmarkShimExpPollCQ is the count convention on the same path: the
// generated wrapper against the form it replaced.
func BenchmarkShimExpPollCQ(b *testing.B) {
	ctx := Open(true)
	defer Close(ctx)
	cq := Calloc[verbs.CQ]()
	wc := Calloc[[16]verbs.ExpWC]()
	defer Free(unsafe.Pointer(cq))
	defer Free(unsafe.Pointer(wc))
	cq.Context = ctx
	SetPollResult(0, 0)
	size := uint32(unsafe.Sizeof(wc[0]))
	ways(b, "ShimExpPollCQ", [][2]string{{"go", "previous"}},
		sidebyside.Way{Name: "go", Run: func(n int) error {
			for i := 0; i < n; i++ {
				if _, err := verbs.ExpPollCQRaw(cq, 16, &wc[0], size); err != nil {
					return err
				}
			}
			return nil
		}},
		sidebyside.Way{Name: "previous", Run: func(n int) error {
			for i := 0; i < n; i++ {
				if _, err := PreviousExpPollCQ(cq, 16, &wc[0], size); err != nil {
					return err
				}
			}
			return nil
		}},
	)
}

// pollRound is a CQ of the test provider that reports 4 completions per
// poll (the op does nothing else: the wrappers are what is timed), and a
// cleanup.
func pollRound() (*verbs.CQ, func()) {
	ctx := Open(true)
	cq := Calloc[verbs.CQ]()
	cq.Context = ctx
	SetPollResult(4, 0)
	return cq, func() {
		SetPollResult(0, 0)
		Free(unsafe.Pointer(cq))
		Close(ctx)
	}
}

// BenchmarkSliceExpPollCQ: the slice form (ExpPollCQ(cq, wc)) against
// the pointer form it stands beside (ExpPollCQRaw(cq, n, &wc[0],
// size)), interleaved, on a Go slice of 16: slice/raw is what the slice
// costs (the bar: at most 1.05), both 0 allocs/op. struct ibv_exp_wc
// holds a pointer (qp), so cgo checks the 16 elements of a Go slice for
// Go pointers on every call, either way; "slice-c" and "raw-c" poll into
// C memory, where it checks nothing, and the wrappers are the rest.
func BenchmarkSliceExpPollCQ(b *testing.B) {
	cq, done := pollRound()
	defer done()
	wc := make([]verbs.ExpWC, 16)
	size := uint32(unsafe.Sizeof(wc[0]))
	cwc := Calloc[[16]verbs.ExpWC]()
	defer Free(unsafe.Pointer(cwc))
	ways(b, "SliceExpPollCQ", [][2]string{{"slice", "raw"}, {"slice-c", "raw-c"}},
		sidebyside.Way{Name: "slice-c", Run: func(n int) error {
			for i := 0; i < n; i++ {
				if _, err := verbs.ExpPollCQ(cq, cwc[:]); err != nil {
					return err
				}
			}
			return nil
		}},
		sidebyside.Way{Name: "raw-c", Run: func(n int) error {
			for i := 0; i < n; i++ {
				if _, err := verbs.ExpPollCQRaw(cq, int32(len(cwc)), &cwc[0], size); err != nil {
					return err
				}
			}
			return nil
		}},
		sidebyside.Way{Name: "slice", Run: func(n int) error {
			for i := 0; i < n; i++ {
				if _, err := verbs.ExpPollCQ(cq, wc); err != nil {
					return err
				}
			}
			return nil
		}},
		sidebyside.Way{Name: "raw", Run: func(n int) error {
			for i := 0; i < n; i++ {
				if _, err := verbs.ExpPollCQRaw(cq, int32(len(wc)), &wc[0], size); err != nil {
					return err
				}
			}
			return nil
		}},
	)
}

// BenchmarkSlicePollCQ: PollCQ(cq, wc) against PollCQRaw(cq, n, &wc[0])
// (ibv_poll_cq through ops.poll_cq), as BenchmarkSliceExpPollCQ.
func BenchmarkSlicePollCQ(b *testing.B) {
	cq, done := pollRound()
	defer done()
	wc := make([]verbs.WC, 16)
	ways(b, "SlicePollCQ", [][2]string{{"slice", "raw"}},
		sidebyside.Way{Name: "slice", Run: func(n int) error {
			for i := 0; i < n; i++ {
				if _, err := verbs.PollCQ(cq, wc); err != nil {
					return err
				}
			}
			return nil
		}},
		sidebyside.Way{Name: "raw", Run: func(n int) error {
			for i := 0; i < n; i++ {
				if _, err := verbs.PollCQRaw(cq, int32(len(wc)), &wc[0]); err != nil {
					return err
				}
			}
			return nil
		}},
	)
}

// BenchmarkSliceDeviceList: a list taken and freed, GetDeviceList and
// FreeDeviceList (a List: registered, and its free checked) against
// GetDeviceListRaw(&n) and FreeDeviceListRaw, through the provided
// functions (a calloc and a free in C, as libibverbs' own do).
// "raw-c" keeps the count in C memory, so that its one allocation per
// call (&n escapes to the heap) is not what is compared.
func BenchmarkSliceDeviceList(b *testing.B) {
	count := Calloc[int32]()
	defer Free(unsafe.Pointer(count))
	ways(b, "SliceDeviceList", [][2]string{{"slice", "raw"}, {"slice", "raw-c"}},
		sidebyside.Way{Name: "slice", Run: func(n int) error {
			for i := 0; i < n; i++ {
				l, err := verbs.GetDeviceList()
				if err != nil {
					return err
				}
				if err := verbs.FreeDeviceList(l); err != nil {
					return err
				}
			}
			return nil
		}},
		sidebyside.Way{Name: "raw", Run: func(n int) error {
			for i := 0; i < n; i++ {
				var k int32
				l, err := verbs.GetDeviceListRaw(&k)
				if err != nil {
					return err
				}
				if err := verbs.FreeDeviceListRaw(l); err != nil {
					return err
				}
			}
			return nil
		}},
		sidebyside.Way{Name: "raw-c", Run: func(n int) error {
			for i := 0; i < n; i++ {
				l, err := verbs.GetDeviceListRaw(count)
				if err != nil {
					return err
				}
				if err := verbs.FreeDeviceListRaw(l); err != nil {
					return err
				}
			}
			return nil
		}},
	)
}
