//go:build linux && cgo

package softdev

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/device"
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
// rings are drained (with the timer stopped) only every many posts. Each
// ring has one slot more, for the signaled WR that drain posts.
const ringDepth = 1 << 14

// drain runs the device and frees the ring of each QP, all of whose
// WRs are unsignaled: a queue slot is freed only by a polled CQE (see
// "Post path"), so it posts one signaled write to each and polls its CQ,
// as an application on an HCA must every so often.
func (f *fixture) drain(qps []*verbs.QP, cqs []*verbs.CQ) {
	f.t.Helper()
	for _, qp := range qps {
		f.postSend(qp, f.write(1<<32, 0, 4096))
	}
	f.progress()
	for i, cq := range cqs {
		if got := f.poll(cq); len(got) != 1 || got[0].Status != verbs.WCSuccess {
			f.t.Fatalf("drain: QP %#x: %d CQEs; want 1 successful", qps[i].QPNum, len(got))
		}
	}
}

// BenchmarkPost measures the post path: the cgo call, the header's
// inline dispatch and the device building one 64-byte WQE per WR. The
// device runs (drains the rings) with the timer stopped when they are
// full; ns/WR is the cost per work request.
func BenchmarkPost(b *testing.B) {
	for _, n := range []int{1, 64} {
		b.Run(fmt.Sprintf("exp_post_send/%d", n), func(b *testing.B) {
			f := newFixture(b)
			p := f.pair([]device.QPOption{device.QPCaps(device.Caps{SendWR: ringDepth + 1, RecvWR: 1, SendSGE: 1, RecvSGE: 1})}, nil)
			ws := benchWrites(f, n)
			bad := alloc[*verbs.ExpSendWR](f)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if i%(ringDepth/n) == 0 {
					b.StopTimer()
					f.drain([]*verbs.QP{p.a}, []*verbs.CQ{p.cqa})
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
			var cqs []*verbs.CQ
			for range tasks {
				p := f.pair([]device.QPOption{device.QPCaps(device.Caps{SendWR: per*(ringDepth/64) + 1, RecvWR: 1, SendSGE: 1, RecvSGE: 1})}, nil)
				qps, cqs = append(qps, p.a), append(cqs, p.cqa)
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
					f.drain(qps, cqs)
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
// by one Progress call. The last write is signaled, and its CQE polled
// with the timer stopped, which frees the ring for the next round.
func BenchmarkExecute(b *testing.B) {
	f := newFixture(b)
	p := f.pair([]device.QPOption{device.QPCaps(device.Caps{SendWR: 64, RecvWR: 1, SendSGE: 1, RecvSGE: 1})}, nil)
	ws := benchWrites(f, 64)
	ws[63].ExpSendFlags = uint64(verbs.ExpSendSignaled)
	bad := alloc[*verbs.ExpSendWR](f)
	wc := alloc[verbs.ExpWC](f)
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
		b.StopTimer()
		if n, err := verbs.ExpPollCQRaw(p.cqa, 1, wc, uint32(unsafe.Sizeof(*wc))); n != 1 || err != nil {
			b.Fatal(n, err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*64), "ns/WR")
}
