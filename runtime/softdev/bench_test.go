//go:build linux && cgo

package softdev

import (
	"fmt"
	"testing"

	verbs "github.com/verbsexp/verbsexp/generated"
)

// benchWrites builds n linked, unsignaled 8-byte RDMA writes.
func benchWrites(f *fixture, n int) []*verbs.ExpSendWR {
	ws := make([]*verbs.ExpSendWR, n)
	for i := range ws {
		ws[i] = f.send(uint64(i), verbs.ExpWRRDMAWrite, 0, f.sges(f.mr.Lkey, [2]int{8 * i, 8}), 1)
		ws[i].WR.RDMA().RemoteAddr, ws[i].WR.RDMA().Rkey = f.addr(4096+8*i), f.mr.Rkey
	}
	link(ws...)
	return ws
}

// ringDepth is the send ring of the post benchmarks: deep, so that the
// rings are drained (with the timer stopped) only every many posts.
const ringDepth = 1 << 14

// BenchmarkPost measures the post path: the cgo call, the header's
// inline dispatch and the device building one 64-byte WQE per WR. The
// device runs (drains the rings) with the timer stopped when they are
// full; ns/WR is the cost per work request.
func BenchmarkPost(b *testing.B) {
	for _, n := range []int{1, 64} {
		b.Run(fmt.Sprintf("exp_post_send/%d", n), func(b *testing.B) {
			f := newFixture(b)
			p := f.pair([]QPOption{QPCaps(Caps{SendWR: ringDepth, RecvWR: 1, SendSGE: 1, RecvSGE: 1})}, nil)
			ws := benchWrites(f, n)
			bad := alloc[*verbs.ExpSendWR](f)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if i%(ringDepth/n) == 0 {
					b.StopTimer()
					f.d.Progress()
					b.StartTimer()
				}
				if err := verbs.ExpPostSend(p.a, ws[0], bad); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/WR")
		})
	}
	for _, shape := range [][2]int{{1, 1}, {16, 4}, {64, 4}} {
		tasks, per := shape[0], shape[1]
		b.Run(fmt.Sprintf("post_task/%dx%d", tasks, per), func(b *testing.B) {
			f := newFixture(b)
			var qps []*verbs.QP
			for range tasks {
				p := f.pair([]QPOption{QPCaps(Caps{SendWR: per * (ringDepth / 64), RecvWR: 1, SendSGE: 1, RecvSGE: 1})}, nil)
				qps = append(qps, p.a)
			}
			list := allocN[verbs.ExpTask](f, tasks)
			for i := range list {
				list[i].TaskType = verbs.ExpTaskSend
				list[i].Item.QP = qps[i]
				list[i].Item.SetSendWR(benchWrites(f, per)[0])
				if i+1 < tasks {
					list[i].Next = &list[i+1]
				}
			}
			bad := alloc[*verbs.ExpTask](f)
			ctx := f.d.Context()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if i%(ringDepth/64) == 0 {
					b.StopTimer()
					f.d.Progress()
					b.StartTimer()
				}
				if err := verbs.ExpPostTask(ctx, &list[0], bad); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*tasks*per), "ns/WR")
		})
	}
}

// BenchmarkExecute measures the engine: 64 posted 8-byte RDMA writes run
// by one Progress call.
func BenchmarkExecute(b *testing.B) {
	f := newFixture(b)
	p := f.pair([]QPOption{QPCaps(Caps{SendWR: 64, RecvWR: 1, SendSGE: 1, RecvSGE: 1})}, nil)
	ws := benchWrites(f, 64)
	bad := alloc[*verbs.ExpSendWR](f)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		if err := verbs.ExpPostSend(p.a, ws[0], bad); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if n, err := f.d.Progress(); n != 64 || err != nil {
			b.Fatal(n, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*64), "ns/WR")
}
