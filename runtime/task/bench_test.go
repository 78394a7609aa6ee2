//go:build linux && cgo

package task_test

import (
	"fmt"
	"testing"

	verbs "github.com/verbsexp/verbsexp/generated"
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
// work request. Three ways, in one run: "go" is this package (the list
// built once in C memory, one ibv_exp_post_task per iteration); "c" is
// the same list built and posted from C; "naive" copies Go structs into
// freshly malloc'ed C records on every post. The ratios are printed.
func BenchmarkPostTaskList(b *testing.B) {
	for _, size := range [][2]int{{1, 1}, {16, 4}, {64, 4}} {
		nt, nw := size[0], size[1]
		b.Run(fmt.Sprintf("%dx%d", nt, nw), func(b *testing.B) {
			env := newBenchEnv(b)
			defer env.close()
			perOp := map[string]float64{}
			run := func(way string, post func(n int) error) {
				b.Run(way, func(b *testing.B) {
					b.ReportAllocs()
					per := ringSlots / (nt * nw)
					b.ResetTimer()
					for done := 0; done < b.N; {
						n := min(per, b.N-done)
						if err := post(n); err != nil {
							b.Fatal(err)
						}
						done += n
						b.StopTimer()
						env.drain(b)
						b.StartTimer()
					}
					perOp[way] = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
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
			run("go", func(n int) error {
				for i := 0; i < n; i++ {
					if err := l.Post(); err != nil {
						return err
					}
				}
				return nil
			})

			cl := baseline.NewCList(env.dev.Context(), env.qp, nt, nw, env.w)
			defer cl.Free()
			run("c", cl.Post)

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
			if perOp["go"] > 0 && perOp["c"] > 0 {
				fmt.Printf("PostTaskList %dx%d: go %.0f ns, c %.0f ns, naive %.0f ns; go/c %.2f, naive/go %.2f\n",
					nt, nw, perOp["go"], perOp["c"], perOp["naive"], perOp["go"]/perOp["c"], perOp["naive"]/perOp["go"])
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
	if e.cq, err = e.dev.CreateCQ(16, softdev.CrossChannelCQ()); err != nil {
		b.Fatal(err)
	}
	caps := softdev.Caps{SendWR: ringSlots, RecvWR: 1, SendSGE: 1, RecvSGE: 1}
	if e.qp, err = e.dev.CreateQP(e.pd, e.cq, e.cq, softdev.CrossChannel(), softdev.QPCaps(caps)); err != nil {
		b.Fatal(err)
	}
	if err := softdev.Connect(e.qp, e.qp); err != nil {
		b.Fatal(err)
	}
	if e.buf, err = lease.Alloc(4096); err != nil {
		b.Fatal(err)
	}
	if e.mr, err = e.dev.RegMR(e.pd, e.buf.Pointer(), e.buf.Len(), verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		b.Fatal(err)
	}
	e.w = baseline.Write{Addr: e.buf.Addr(), Remote: e.buf.Addr() + 2048, Lkey: e.mr.Lkey, Rkey: e.mr.Rkey, Length: 8}
	return e
}

// drain lets the device run what was posted, emptying the ring.
func (e *benchEnv) drain(b *testing.B) {
	if _, err := e.dev.Progress(); err != nil {
		b.Fatal(err)
	}
}

func (e *benchEnv) close() {
	e.dev.DestroyQP(e.qp)
	e.dev.DestroyCQ(e.cq)
	e.dev.DeregMR(e.mr)
	e.buf.Free()
	e.dev.DeallocPD(e.pd)
	e.dev.Close()
}
