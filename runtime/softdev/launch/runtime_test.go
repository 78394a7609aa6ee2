package launch_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/abiutil/dynlib"
	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/coll"
	"github.com/verbsexp/verbsexp/runtime/device"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/task"
)

// The runtime through the vendor's libibverbs: a process under softdev
// exec opens the device with runtime/device, as it would an HCA, and
// runs runtime/task (a task list posted with one ibv_exp_post_task),
// runtime/lease (the buffers leased until their completions are polled)
// and runtime/coll (four ranks' collectives, NewLocal, every result
// checked) on it; nothing is served by a stand-in.

// TestRuntimeChild is the child of TestRuntimeThroughTheLibrary.
func TestRuntimeChild(t *testing.T) {
	if os.Getenv(childEnv) != "runtime" {
		t.Skip("SKIPPED: the child of TestRuntimeThroughTheLibrary, run only by it under softdev exec")
	}
	dev, err := device.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := dev.Close(); err != nil {
			t.Error(err)
		}
	}()
	t.Run("task and lease", func(t *testing.T) { taskAndLease(t, dev.Context()) })
	t.Run("coll", func(t *testing.T) { collectives(t, dev.Context()) })
	if n := dynlib.ProvidedCount(); n != 0 {
		t.Errorf("%d functions served by stand-ins, want none", n)
	}
	fmt.Println("child: done")
}

// taskAndLease: a QP connected to itself by its own LID, a task list of a
// receive task and a send task (the send signaled), posted ten times;
// each time the sent half of the buffer lands in the other half, and the
// leases end when the completions are polled.
func taskAndLease(t *testing.T, ctx *verbs.Context) {
	pd, err := verbs.AllocPD(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer verbs.DeallocPD(pd)
	buf, err := lease.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	mr, err := verbs.RegMR(pd, buf.Pointer(), uint64(buf.Len()), int32(verbs.AccessLocalWrite))
	if err != nil {
		t.Fatal(err)
	}
	defer verbs.DeregMR(mr)
	var cattr verbs.ExpCQInitAttr
	cq, err := verbs.ExpCreateCQ(ctx, 16, nil, nil, 0, &cattr)
	if err != nil {
		t.Fatal(err)
	}
	defer verbs.DestroyCQ(cq)
	qattr := verbs.ExpQPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QptRC, PD: pd,
		Cap:      verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1},
		CompMask: uint32(verbs.ExpQPInitAttrPD)}
	qp, err := verbs.ExpCreateQP(ctx, &qattr)
	if err != nil {
		t.Fatal(err)
	}
	defer verbs.DestroyQP(qp)
	var port verbs.PortAttr
	if err := verbs.QueryPort(ctx, 1, &port); err != nil {
		t.Fatal(err)
	}
	if err := selfConnect(qp, port.LID, port.ActiveMTU); err != nil {
		t.Fatal(err)
	}

	leases := lease.NewTable()
	defer func() {
		if err := leases.Close(); err != nil {
			t.Error(err)
		}
	}()
	l, err := task.New(ctx, task.Capacity{Tasks: 2, SendWRs: 1, RecvWRs: 1, SGEs: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Free()
	b := buf.Bytes()
	var wc [2]verbs.ExpWC
	for run := range 10 {
		for i := range 32 {
			b[i], b[32+i] = byte(run*7+i), 0
		}
		// Each run leases what its WRs name until Poll releases it.
		recv, err := leases.Lease(1, buf, 32, 32, mr.Lkey)
		if err != nil {
			t.Fatal(err)
		}
		send, err := leases.Lease(2, buf, 0, 32, mr.Lkey)
		if err != nil {
			t.Fatal(err)
		}
		if run == 0 { // a standing list: built once, posted every run
			l.RecvTask(qp)
			l.Recv(1, recv)
			l.SendTask(qp)
			l.Send(2, verbs.ExpSendSignaled, send)
		}
		if err := l.Post(); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		got := 0
		for end := time.Now().Add(10 * time.Second); got < 2; {
			n, err := leases.Poll(cq, wc[:])
			if err != nil {
				t.Fatalf("run %d: %v", run, err)
			}
			for _, c := range wc[:n] {
				if c.Status != verbs.WCSuccess {
					t.Fatalf("run %d: wr_id %d: %v", run, c.WRID, c.Status)
				}
			}
			got += n
			if time.Now().After(end) {
				t.Fatalf("run %d: %d of 2 completions in 10 s", run, got)
			}
		}
		if leases.Outstanding() != 0 {
			t.Fatalf("run %d: %d leases outstanding after both completions", run, leases.Outstanding())
		}
		if !bytes.Equal(b[:32], b[32:64]) {
			t.Fatalf("run %d: the receive holds %x, the send %x", run, b[32:64], b[:32])
		}
	}
}

// selfConnect brings qp to RTS connected to itself, as coll connects
// its QPs.
func selfConnect(qp *verbs.QP, lid uint16, mtu verbs.MTU) error {
	return connectTo(qp, qp.QPNum, lid, mtu)
}

// collectives: four ranks of this process on the device, an allreduce
// and a barrier posted twenty times, every sum checked on every rank.
func collectives(t *testing.T, ctx *verbs.Context) {
	const n = 4
	comms, err := coll.NewLocal(n, func(int) *verbs.Context { return ctx }, coll.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var closers []func() error
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			if err := closers[i](); err != nil {
				t.Error(err)
			}
		}
	}()
	var all, bars []*coll.Schedule
	var mems []*coll.Memory
	for _, c := range comms {
		closers = append(closers, c.Close)
		b, err := lease.Alloc(coll.ElementSize)
		if err != nil {
			t.Fatal(err)
		}
		closers = append(closers, b.Free)
		m, err := c.Register(b)
		if err != nil {
			t.Fatal(err)
		}
		closers = append(closers, m.Close)
		s, err := c.Allreduce(m, m, 1, verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint)
		if err != nil {
			t.Fatal(err)
		}
		bar, err := c.Barrier()
		if err != nil {
			t.Fatal(err)
		}
		closers = append(closers, s.Close, bar.Close)
		all, bars, mems = append(all, s), append(bars, bar), append(mems, m)
	}
	for run := range 20 {
		for r, m := range mems {
			coll.PutElement(m.Bytes(), 0, uint64(r+1+run), 0)
		}
		for _, ss := range [][]*coll.Schedule{all, bars} {
			for _, s := range ss {
				if err := s.Post(); err != nil {
					t.Fatalf("run %d: %v", run, err)
				}
			}
			for _, s := range ss {
				if err := s.Wait(); err != nil {
					t.Fatalf("run %d: %v", run, err)
				}
			}
		}
		want := uint64(n*(n+1)/2 + n*run)
		for r, m := range mems {
			if v, _ := coll.Element(m.Bytes(), 0); v != want {
				t.Fatalf("run %d: rank %d's sum is %d, want %d", run, r, v, want)
			}
		}
	}
}

// TestRuntimeThroughTheLibrary runs TestRuntimeChild under softdev exec.
func TestRuntimeThroughTheLibrary(t *testing.T) {
	needVendor(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := launched(nil, "", self, "-test.run=^TestRuntimeChild$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"=runtime")
	out, err := cmd.CombinedOutput()
	var skipped = regexp.MustCompile(`(?m)^\s*--- SKIP`)
	if err != nil || !strings.Contains(string(out), "child: done") || skipped.Match(out) {
		t.Fatalf("runtime/task, lease and coll through the vendor's libibverbs: %v\n%s", errors.Join(err), out)
	}
}
