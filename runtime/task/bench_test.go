//go:build linux && cgo

package task_test

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/internal/sidebyside"
	"github.com/verbsexp/verbsexp/runtime/cmem"
	"github.com/verbsexp/verbsexp/runtime/device"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/softdev"
	"github.com/verbsexp/verbsexp/runtime/task"
	"github.com/verbsexp/verbsexp/runtime/task/internal/baseline"
)

// ringSlots is the send ring of the benchmark QP; the benchmark lets the
// device run (outside the timer) before the ring would overflow.
const ringSlots = 1 << 15

// BenchmarkPostTaskList posts a list of <tasks> tasks of <wrs> RDMA writes
// each to the software device, whose post path builds a 64-byte WQE per
// work request. The ways: "go" is this package (the list built once in C
// memory, one ibv_exp_post_task per iteration); "c" is the same list
// built and posted from a C loop; "cgo-nop3" is an empty cgo call of the
// post's shape (three uintptr_t arguments, an int64 result), so that
// c + cgo-nop3 is the floor of any post from Go with one cgo call; "naive"
// copies Go structs into freshly malloc'ed C records on every post. Each
// runs as a sub-benchmark of its own, then go, c and cgo-nop3 interleaved
// in "side-by-side", which reports the medians and the ratios to the
// goals (1×1: go/floor ≤ 1.15; 16×4 and 64×4: go/c ≤ 1.05) and prints
// them.
func BenchmarkPostTaskList(b *testing.B) {
	for _, size := range [][2]int{{1, 1}, {16, 4}, {64, 4}} {
		nt, nw := size[0], size[1]
		b.Run(fmt.Sprintf("%dx%d", nt, nw), func(b *testing.B) {
			env := newBenchEnv(b)
			defer env.close()
			per := (ringSlots - 1) / (nt * nw) // posts before the ring must drain (one slot is drain's NOP)
			drain := env.drain
			run := func(way string, post func(n int) error) {
				b.Run(way, func(b *testing.B) {
					b.ReportAllocs()
					for done := 0; done < b.N; {
						n := min(per, b.N-done)
						if err := post(n); err != nil {
							b.Fatal(err)
						}
						done += n
						b.StopTimer()
						if err := drain(); err != nil {
							b.Fatal(err)
						}
						b.StartTimer()
					}
				})
			}

			l, err := task.New(env.dev.Context(), task.Capacity{Tasks: nt, SendWRs: nt * nw, SGEs: nt * nw})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Free()
			for i := 0; i < nt; i++ {
				l.SendTask(env.qp)
				for j := 0; j < nw; j++ {
					if _, err := l.Write(uint64(i*nw+j), 0, env.w.Remote, env.w.Rkey, verbs.SGE{Addr: env.w.Addr, Length: 8, Lkey: env.w.Lkey}); err != nil {
						b.Fatal(err)
					}
				}
			}
			goPost := func(n int) error {
				for i := 0; i < n; i++ {
					if err := l.Post(); err != nil {
						return err
					}
				}
				return nil
			}
			cl, err := baseline.NewCList(env.dev.Context(), env.qp, nt, nw, env.w)
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Free()
			ctx := uintptr(unsafe.Pointer(env.dev.Context()))
			nop3 := func(n int) error { baseline.Nop3(n, ctx, ctx, ctx); return nil }

			run("go", goPost)
			run("c", cl.Post)
			run("cgo-nop3", nop3)
			naive := make([]baseline.NaiveTask, nt)
			for i := range naive {
				naive[i] = baseline.NaiveTask{QP: env.qp, Writes: make([]baseline.Write, nw)}
				for j := range naive[i].Writes {
					naive[i].Writes[j] = env.w
				}
			}
			run("naive", func(n int) error {
				for i := 0; i < n; i++ {
					if err := baseline.PostNaive(env.dev.Context(), naive); err != nil {
						return err
					}
				}
				return nil
			})

			var res sidebyside.Result
			b.Run("side-by-side", func(b *testing.B) {
				res = sidebyside.Bench(b, per,
					sidebyside.Way{Name: "go", Run: goPost, After: drain},
					sidebyside.Way{Name: "c", Run: cl.Post, After: drain},
					sidebyside.Way{Name: "cgo-nop3", Run: nop3})
				floor := res.Of("c") + res.Of("cgo-nop3")
				b.ReportMetric(floor, "floor-ns/op")
				b.ReportMetric(res.Of("go")/floor, "go/floor")
				b.ReportMetric(res.Ratio("go", "c"), "go/c")
			})
			if res.Names != nil {
				floor := res.Of("c") + res.Of("cgo-nop3")
				goal := fmt.Sprintf("go/floor %.2f (goal ≤ 1.15), go/c %.2f", res.Of("go")/floor, res.Ratio("go", "c"))
				if nt*nw > 1 {
					goal = fmt.Sprintf("go/c %.2f (goal ≤ 1.05), go/floor %.2f", res.Ratio("go", "c"), res.Of("go")/floor)
				}
				fmt.Printf("PostTaskList %dx%d (interleaved medians): %s; floor (c + cgo-nop3) %.1f ns; %s\n",
					nt, nw, res.Summary(), floor, goal)
			}
		})
	}
}

// benchEnv is a device with a QP connected to itself and one registered
// 4 KiB buffer that every write reads from and writes to.
type benchEnv struct {
	dev *softdev.Device
	pd  *verbs.PD
	cq  *verbs.CQ
	qp  *verbs.QP
	buf *lease.Buffer
	mr  *verbs.MR
	w   baseline.Write
	nop *verbs.ExpSendWR // signaled: drain posts it to free the ring
	bad **verbs.ExpSendWR
	wc  *verbs.ExpWC
}

func newBenchEnv(b *testing.B) *benchEnv {
	e := &benchEnv{}
	var err error
	if e.dev, err = softdev.Open(); err != nil {
		b.Fatal(err)
	}
	if e.pd, err = e.dev.AllocPD(); err != nil {
		b.Fatal(err)
	}
	if e.cq, err = e.dev.CreateCQ(16, device.CrossChannelCQ()); err != nil {
		b.Fatal(err)
	}
	caps := device.Caps{SendWR: ringSlots, RecvWR: 1, SendSGE: 1, RecvSGE: 1}
	if e.qp, err = e.dev.CreateQP(e.pd, e.cq, e.cq, device.CrossChannel(), device.QPCaps(caps)); err != nil {
		b.Fatal(err)
	}
	if err := device.ConnectPair(e.qp, e.qp); err != nil {
		b.Fatal(err)
	}
	if e.buf, err = lease.Alloc(4096); err != nil {
		b.Fatal(err)
	}
	if e.mr, err = e.dev.RegMR(e.pd, e.buf.Bytes(), verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		b.Fatal(err)
	}
	e.w = baseline.Write{Addr: e.buf.Addr(), Remote: e.buf.Addr() + 2048, Lkey: e.mr.Lkey, Rkey: e.mr.Rkey, Length: 8}
	if e.nop, err = cmem.New[verbs.ExpSendWR](); err != nil {
		b.Fatal(err)
	}
	if e.bad, err = cmem.New[*verbs.ExpSendWR](); err != nil {
		b.Fatal(err)
	}
	if e.wc, err = cmem.New[verbs.ExpWC](); err != nil {
		b.Fatal(err)
	}
	e.nop.ExpOpcode, e.nop.ExpSendFlags = verbs.ExpWRNop, uint64(verbs.ExpSendSignaled)
	return e
}

// drain lets the device run what was posted and empties the ring: the
// writes are unsignaled, and a queue slot is freed only by a polled CQE
// (as on mlx4 and mlx5), so it posts a signaled NOP behind them and
// polls its CQE, which frees every slot up to it.
func (e *benchEnv) drain() error {
	if err := verbs.ExpPostSend(e.qp, e.nop, e.bad); err != nil {
		return err
	}
	if _, err := e.dev.Progress(); err != nil {
		return err
	}
	if n, err := verbs.ExpPollCQRaw(e.cq, 1, e.wc, uint32(unsafe.Sizeof(*e.wc))); n != 1 || err != nil || e.wc.Status != verbs.WCSuccess {
		return fmt.Errorf("drain: polled %d CQEs (%v), status %v; want the NOP's", n, err, e.wc.Status)
	}
	return nil
}

func (e *benchEnv) close() {
	e.dev.DestroyQP(e.qp)
	e.dev.DestroyCQ(e.cq)
	e.dev.DeregMR(e.mr)
	e.buf.Free()
	e.dev.DeallocPD(e.pd)
	e.dev.Close()
	cmem.Free(e.nop)
	cmem.Free(e.bad)
	cmem.Free(e.wc)
}
