//go:build linux && cgo

package softdev

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/device"
)

// TestAllreduceSchedule: an N-rank allreduce by recursive doubling, each
// rank's whole schedule one ExpPostTask call made before anything runs;
// the device alone executes it. Rank r at step k sends its partial A[k]
// to partner r^(1<<k) and reduces A[k] with what arrives (R[k]) through a
// calc SEND to itself, giving A[k+1]. Values are big-endian in 16-byte
// slots (a calc operand each). Its manager QP orders it: enable the
// send, wait for the partner's data, enable the calc, wait for the
// result; every enable and wait moves its base (WAIT_EN_LAST), so each
// counts from the one before on the same queue or CQ.
func TestAllreduceSchedule(t *testing.T) {
	for _, n := range []int{2, 4, 8} {
		for _, op := range []verbs.ExpCalcOp{verbs.ExpCalcOpAdd, verbs.ExpCalcOpBxor} {
			t.Run(fmt.Sprintf("%d/%v", n, op), func(t *testing.T) { allreduce(t, n, op) })
		}
	}
}

func allreduce(t *testing.T, n int, op verbs.ExpCalcOp) {
	f := newFixture(t)
	steps := 0
	for 1<<steps < n {
		steps++
	}
	caps := device.QPCaps(device.Caps{SendWR: 16, RecvWR: 16, SendSGE: 2, RecvSGE: 1})
	const slot = 16
	type rank struct {
		qps    []*verbs.QP
		rcqs   []*verbs.CQ
		self   *verbs.QP
		selfCQ *verbs.CQ
		mgr    *verbs.QP
		mgrCQ  *verbs.CQ
		base   int // f.buf offset: A[0..steps] then R[0..steps-1], 16 bytes each
	}
	ranks := make([]rank, n)
	quiet := f.cq(4096, device.CrossChannelCQ()) // send completions nobody polls
	for r := range ranks {
		rk := &ranks[r]
		rk.base = r * 512
		for range steps {
			cq := f.cq(16, device.CrossChannelCQ())
			rk.rcqs = append(rk.rcqs, cq)
			rk.qps = append(rk.qps, f.qp(quiet, cq, device.ManagedSend(), caps))
		}
		rk.selfCQ = f.cq(16, device.CrossChannelCQ())
		rk.self = f.qp(quiet, rk.selfCQ, device.CrossChannel(), device.ManagedSend(), caps) // calc needs cross-channel
		rk.mgrCQ = f.cq(16)
		rk.mgr = f.qp(rk.mgrCQ, rk.mgrCQ, device.CrossChannel(), device.QPCaps(device.Caps{SendWR: 64, RecvWR: 1}))
		if err := device.ConnectPair(rk.self, rk.self); err != nil {
			t.Fatal(err)
		}
		if err := device.ConnectPair(rk.mgr, rk.mgr); err != nil {
			t.Fatal(err)
		}
	}
	for r := range ranks {
		for k := range steps {
			if p := r ^ 1<<k; p > r {
				if err := device.ConnectPair(ranks[r].qps[k], ranks[p].qps[k]); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	want := uint64(0)
	for r := range ranks {
		v := uint64(r*r*1000 + 7*r + 1)
		binary.BigEndian.PutUint64(f.buf[ranks[r].base:], v)
		if op == verbs.ExpCalcOpAdd {
			want += v
		} else {
			want ^= v
		}
	}

	for r := range ranks {
		rk := &ranks[r]
		a := func(k int) int { return rk.base + slot*k }
		rr := func(k int) int { return rk.base + slot*(steps+1) + slot*k }
		var tasks []verbs.ExpTask
		add := func(typ verbs.ExpTaskType, qp *verbs.QP, set func(*verbs.ExpTask)) {
			tasks = append(tasks, verbs.ExpTask{TaskType: typ})
			tasks[len(tasks)-1].Item.QP = qp
			set(&tasks[len(tasks)-1])
		}
		var mgr []*verbs.ExpSendWR
		for k := range steps {
			add(verbs.ExpTaskRecv, rk.qps[k], func(x *verbs.ExpTask) {
				x.Item.SetRecvWR(f.recv(uint64(k), f.sges(f.mr.Lkey, [2]int{rr(k), slot}), 1))
			})
			add(verbs.ExpTaskRecv, rk.self, func(x *verbs.ExpTask) {
				x.Item.SetRecvWR(f.recv(uint64(k), f.sges(f.mr.Lkey, [2]int{a(k + 1), slot}), 1))
			})
			add(verbs.ExpTaskSend, rk.qps[k], func(x *verbs.ExpTask) {
				x.Item.SetSendWR(f.send(uint64(k), verbs.ExpWRSend, 0, f.sges(f.mr.Lkey, [2]int{a(k), slot}), 1))
			})
			add(verbs.ExpTaskSend, rk.self, func(x *verbs.ExpTask) {
				w := f.send(uint64(k), verbs.ExpWRSend, verbs.ExpSendWithCalc, f.sges(f.mr.Lkey, [2]int{a(k), slot}, [2]int{rr(k), slot}), 2)
				w.Op.Calc().CalcOp, w.Op.Calc().DataType = op, verbs.ExpCalcDataTypeUint
				x.Item.SetSendWR(w)
			})
			if k > 0 {
				mgr = append(mgr, f.wait(100, rk.selfCQ, 1, verbs.ExpSendWaitEnLast))
			}
			mgr = append(mgr,
				f.enable(101, verbs.ExpWRSendEnable, rk.qps[k], 1, verbs.ExpSendWaitEnLast),
				f.wait(102, rk.rcqs[k], 1, verbs.ExpSendWaitEnLast),
				f.enable(103, verbs.ExpWRSendEnable, rk.self, 1, verbs.ExpSendWaitEnLast))
		}
		mgr = append(mgr, f.wait(999, rk.selfCQ, 1, verbs.ExpSendSignaled|verbs.ExpSendWaitEnLast))
		add(verbs.ExpTaskSend, rk.mgr, func(x *verbs.ExpTask) { x.Item.SetSendWR(link(mgr...)) })

		list := allocN[verbs.ExpTask](f, len(tasks))
		copy(list, tasks)
		for i := range list[:len(list)-1] {
			list[i].Next = &list[i+1]
		}
		bad := alloc[*verbs.ExpTask](f)
		if err := verbs.ExpPostTask(f.d.Context(), &list[0], bad); err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if _, err := f.d.Progress(); err != nil {
		t.Fatal(err)
	}
	for r := range ranks {
		rk := &ranks[r]
		if got := sum(f.poll(rk.mgrCQ)); len(got) != 1 || got[0].ID != 999 || got[0].Status != verbs.WCSuccess {
			t.Fatalf("rank %d manager: %+v", r, got)
		}
		if got := binary.BigEndian.Uint64(f.buf[rk.base+slot*steps:]); got != want {
			t.Errorf("rank %d: %d, want %d", r, got, want)
		}
	}
}
