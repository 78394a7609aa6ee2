//go:build linux && cgo

package shimtest

import (
	"testing"
	"unsafe"

	verbs "github.com/verbsexp/verbsexp/generated"
)

// BenchmarkShimExpPostTask posts one task through the inline dispatch path
// into the test provider: "go" calls the generated wrapper once per
// iteration (one cgo transition each), "c" makes the same b.N calls from a
// C loop, and "cgo-nop" is one cgo call of an empty C function: go ≈ c +
// cgo-nop when the wrapper adds nothing but the transition.
func BenchmarkShimExpPostTask(b *testing.B) {
	ctx := Open(true)
	defer Close(ctx)
	task := Calloc[verbs.ExpTask]()
	bad := Calloc[*verbs.ExpTask]()
	defer Free(unsafe.Pointer(task))
	defer Free(unsafe.Pointer(bad))
	SetPostTaskResult(0)
	b.Run("go", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if err := verbs.ExpPostTask(ctx, task, bad); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cgo-nop", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			Nop()
		}
	})
	b.Run("c", func(b *testing.B) {
		b.ReportAllocs()
		if PostTaskLoop(ctx, task, bad, b.N) != 0 {
			b.Fatal("post_task failed")
		}
	})
}

// BenchmarkShimExpPollCQ is the count convention on the same path.
func BenchmarkShimExpPollCQ(b *testing.B) {
	ctx := Open(true)
	defer Close(ctx)
	cq := Calloc[verbs.CQ]()
	wc := Calloc[[16]verbs.ExpWC]()
	defer Free(unsafe.Pointer(cq))
	defer Free(unsafe.Pointer(wc))
	cq.Context = ctx
	SetPollResult(0)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := verbs.ExpPollCQ(cq, 16, &wc[0], uint32(unsafe.Sizeof(wc[0]))); err != nil {
			b.Fatal(err)
		}
	}
}
