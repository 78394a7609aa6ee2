//go:build linux && cgo

package task_test

import (
	"errors"
	"testing"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/cmem"
	"github.com/verbsexp/verbsexp/runtime/device"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/softdev"
	"github.com/verbsexp/verbsexp/runtime/task"
)

// FuzzTaskList drives a List with random sequences of builder, Post,
// Reset and Free calls against the software device. Whatever the order,
// misuse must come back as an error (never a crash, never memory
// corruption caught by the race detector or cgocheck), the device must
// never hang (a schedule that cannot finish is a deadlock error), and
// everything must be freeable at the end. A builder's error sticks: until
// Reset or Free, every builder and Post return it and Err reports it.
func FuzzTaskList(f *testing.F) {
	f.Add([]byte{0, 2, 6})                      // one send, post
	f.Add([]byte{1, 3, 3, 0, 2, 2, 6, 10})      // receives and sends
	f.Add([]byte{0, 4, 5, 6, 10})               // wait, enable
	f.Add([]byte{0, 9, 6, 7, 0, 2, 6, 8, 6, 2}) // calc, reset, free, use after free
	f.Add([]byte{6, 7, 8, 8})                   // empty post, double free
	f.Add([]byte{0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 6, 6, 6, 6})
	f.Add([]byte{3, 0, 2, 6, 7, 0, 2, 6, 10}) // an error sticks until Reset
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 256 {
			ops = ops[:256]
		}
		dev, err := softdev.Open()
		if err != nil {
			t.Fatal(err)
		}
		pd, _ := dev.AllocPD()
		cq, _ := dev.CreateCQ(64, device.CrossChannelCQ(), device.IgnoreOverrun())
		caps := device.Caps{SendWR: 16, RecvWR: 16, SendSGE: 2, RecvSGE: 2}
		qa, errA := dev.CreateQP(pd, cq, cq, device.CrossChannel(), device.QPCaps(caps))
		qb, errB := dev.CreateQP(pd, cq, cq, device.CrossChannel(), device.ManagedSend(), device.QPCaps(caps))
		if err := errors.Join(errA, errB, device.ConnectPair(qa, qb)); err != nil {
			t.Fatal(err)
		}
		buf, _ := lease.Alloc(4096)
		mr, err := dev.RegMR(pd, buf.Bytes(), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		wc, err := cmem.Slice[verbs.ExpWC](64)
		if err != nil {
			t.Fatal(err)
		}
		sge := verbs.SGE{Addr: buf.Addr(), Length: 64, Lkey: mr.Lkey}
		operand := verbs.SGE{Addr: buf.Addr() + 64, Length: task.CalcOperandSize, Lkey: mr.Lkey}
		l, err := task.New(dev.Context(), task.Capacity{Tasks: 4, SendWRs: 8, RecvWRs: 8, SGEs: 8})
		if err != nil {
			t.Fatal(err)
		}
		freed := false
		var sticky error // the first builder error since New or Reset
		qp := func(op byte) *verbs.QP {
			if op&0x10 != 0 {
				return qb
			}
			return qa
		}
		for i, op := range ops {
			var err error
			builder := true
			switch op % 11 {
			case 0:
				_, err = l.SendTask(qp(op))
			case 1:
				_, err = l.RecvTask(qp(op))
			case 2:
				_, err = l.Send(uint64(i), verbs.ExpSendSignaled, sge)
			case 3:
				_, err = l.Recv(uint64(i), sge)
			case 4:
				flags := verbs.ExpSendFlags(0)
				if op&0x20 != 0 {
					flags = verbs.ExpSendWaitEnLast
				}
				_, err = l.Wait(uint64(i), flags, cq, int(op>>4))
			case 5:
				_, err = l.SendEnable(uint64(i), verbs.ExpSendFlags(op>>6&1)*verbs.ExpSendWaitEnLast, qb, int(op>>5))
			case 6:
				builder = false
				err = l.Post()
				if sticky != nil && err != sticky {
					t.Fatalf("op %d: Post after the builder error %v = %v", i, sticky, err)
				}
			case 7:
				builder = false
				err = l.Reset()
				if err == nil {
					sticky = nil
				}
			case 8:
				builder = false
				err = l.Free()
				if err == nil {
					freed, sticky = true, nil
				}
			case 9:
				_, err = l.Calc(uint64(i), 0, verbs.ExpCalcOp(op>>4%5), verbs.ExpCalcDataType(op>>6%3), operand, operand)
			case 10:
				builder = false
				_, err = dev.Progress() // a deadlock is reported, not waited for
				verbs.ExpPollCQ(cq, wc)
			}
			if builder && !freed {
				switch {
				case sticky != nil && err != sticky:
					t.Fatalf("op %d (%d) after the builder error %v returned %v", i, op%11, sticky, err)
				case sticky == nil && err != nil:
					sticky = err
				}
			}
			if !freed && l.Err() != sticky {
				t.Fatalf("op %d (%d): Err = %v, want %v", i, op%11, l.Err(), sticky)
			}
			if freed && op%11 != 8 && op%11 != 10 && err == nil {
				t.Fatalf("op %d (%d) succeeded on a freed list", i, op%11)
			}
		}
		if !freed {
			if err := l.Free(); err != nil {
				t.Fatal(err)
			}
		}
		cmem.FreeSlice(wc)
		dev.DestroyQP(qa)
		dev.DestroyQP(qb)
		dev.DestroyCQ(cq)
		dev.DeregMR(mr)
		dev.DeallocPD(pd)
		if err := dev.Close(); err != nil {
			t.Fatal(err)
		}
		if err := buf.Free(); err != nil {
			t.Fatal(err)
		}
	})
}
