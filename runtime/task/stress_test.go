//go:build linux && cgo

package task_test

import (
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/cmem"
	"github.com/verbsexp/verbsexp/runtime/device"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/softdev"
	"github.com/verbsexp/verbsexp/runtime/task"
)

// TestStressConcurrentLists: 8 goroutines, each with its own task list and
// queue pair pair on one device, post rounds of signaled sends from leased
// buffers for a bounded time, polling completions and ending leases as
// they go. Every completion must arrive exactly once, every message must
// arrive intact, and the device must not read a send buffer after its
// completion (the buffer is poisoned as soon as its lease ends, so a late
// read would deliver poison). Run under -race and cgocheck2 by make.
func TestStressConcurrentLists(t *testing.T) {
	const (
		workers  = 8
		perRound = 8
		msg      = 32
	)
	budget := 300 * time.Millisecond
	if testing.Short() {
		budget = 50 * time.Millisecond
	}
	dev, err := softdev.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := dev.Close(); err != nil {
			t.Errorf("device: %v", err)
		}
	}()
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer dev.DeallocPD(pd)
	leases := lease.NewTable()
	deadline := time.Now().Add(budget)
	var wg sync.WaitGroup
	errs := make([]error, workers)
	rounds := make([]int, workers)
	for g := 0; g < workers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rounds[g], errs[g] = stressWorker(dev, pd, leases, g, perRound, msg, deadline)
		}()
	}
	wg.Wait()
	total := 0
	for g, err := range errs {
		if err != nil {
			t.Errorf("worker %d: %v", g, err)
		}
		total += rounds[g]
	}
	if err := leases.Close(); err != nil {
		t.Errorf("leases: %v", err)
	}
	if total == 0 {
		t.Fatal("no round completed")
	}
	t.Logf("%d workers completed %d rounds of %d messages", workers, total, perRound)
}

func stressWorker(dev *softdev.Device, pd *verbs.PD, leases *lease.Table, g, perRound, msg int, deadline time.Time) (int, error) {
	scq, err := dev.CreateCQ(4*perRound, device.CrossChannelCQ())
	if err != nil {
		return 0, err
	}
	defer dev.DestroyCQ(scq)
	rcq, err := dev.CreateCQ(4*perRound, device.CrossChannelCQ())
	if err != nil {
		return 0, err
	}
	defer dev.DestroyCQ(rcq)
	caps := device.Caps{SendWR: 2 * perRound, RecvWR: 2 * perRound, SendSGE: 1, RecvSGE: 1}
	a, err := dev.CreateQP(pd, scq, rcq, device.CrossChannel(), device.QPCaps(caps))
	if err != nil {
		return 0, err
	}
	defer dev.DestroyQP(a)
	b, err := dev.CreateQP(pd, scq, rcq, device.CrossChannel(), device.QPCaps(caps))
	if err != nil {
		return 0, err
	}
	defer dev.DestroyQP(b)
	if err := device.ConnectPair(a, b); err != nil {
		return 0, err
	}
	sbuf, err := lease.Alloc(perRound * msg)
	if err != nil {
		return 0, err
	}
	defer sbuf.Free()
	rbuf, err := lease.Alloc(perRound * msg)
	if err != nil {
		return 0, err
	}
	defer rbuf.Free()
	smr, err := dev.RegMR(pd, sbuf.Bytes(), verbs.AccessLocalWrite)
	if err != nil {
		return 0, err
	}
	defer dev.DeregMR(smr)
	rmr, err := dev.RegMR(pd, rbuf.Bytes(), verbs.AccessLocalWrite)
	if err != nil {
		return 0, err
	}
	defer dev.DeregMR(rmr)
	l, err := task.New(dev.Context(), task.Capacity{Tasks: 2, SendWRs: perRound, RecvWRs: perRound, SGEs: 2 * perRound})
	if err != nil {
		return 0, err
	}
	defer l.Free()
	wc, err := cmem.Slice[verbs.ExpWC](2 * perRound)
	if err != nil {
		return 0, err
	}
	defer cmem.FreeSlice(wc)

	// At least one round each: on a loaded machine the set-up above
	// may outlast the budget (then no round ran, and the test failed
	// for the machine's load, not for the lists).
	round := 0
	for ; round == 0 || time.Now().Before(deadline); round++ {
		l.Reset()
		l.RecvTask(b)
		for i := 0; i < perRound; i++ {
			if _, err := l.Recv(uint64(i), verbs.SGE{Addr: rbuf.Addr() + uint64(i*msg), Length: uint32(msg), Lkey: rmr.Lkey}); err != nil {
				return round, err
			}
		}
		l.SendTask(a)
		for i := 0; i < perRound; i++ {
			id := uint64(g)<<48 | uint64(round)<<16 | uint64(i)
			binary.LittleEndian.PutUint64(sbuf.Bytes()[i*msg:], id)
			sge, err := leases.Lease(id, sbuf, i*msg, msg, smr.Lkey)
			if err != nil {
				return round, err
			}
			if _, err := l.Send(id, verbs.ExpSendSignaled, sge); err != nil {
				return round, err
			}
		}
		if err := l.Post(); err != nil {
			return round, err
		}
		seen := map[uint64]int{}
		recvs := 0
		for polls := 0; len(seen) < perRound || recvs < perRound; polls++ {
			if polls > 1000 {
				return round, fmt.Errorf("round %d: only %d send and %d receive completions", round, len(seen), recvs)
			}
			n, err := verbs.ExpPollCQ(scq, wc)
			if err != nil {
				return round, err
			}
			for _, c := range wc[:n] {
				if c.Status != verbs.WCSuccess {
					return round, fmt.Errorf("send wr_id %#x: %v", c.WRID, c.Status)
				}
				seen[c.WRID]++
				if seen[c.WRID] > 1 {
					return round, fmt.Errorf("send wr_id %#x completed twice", c.WRID)
				}
				if err := leases.Release(c.WRID); err != nil {
					return round, err
				}
				slot := int(c.WRID & 0xffff)
				copy(sbuf.Bytes()[slot*msg:(slot+1)*msg], poison[:msg]) // the lease is over
			}
			m, err := verbs.ExpPollCQ(rcq, wc)
			if err != nil {
				return round, err
			}
			for _, c := range wc[:m] {
				if c.Status != verbs.WCSuccess {
					return round, fmt.Errorf("receive wr_id %d: %v", c.WRID, c.Status)
				}
				got := binary.LittleEndian.Uint64(rbuf.Bytes()[int(c.WRID)*msg:])
				if want := uint64(g)<<48 | uint64(round)<<16 | c.WRID; got != want {
					return round, fmt.Errorf("receive %d got message %#x, want %#x (a buffer read after its lease ended?)", c.WRID, got, want)
				}
				recvs++
			}
		}
	}
	return round, nil
}

var poison = func() (p [64]byte) {
	for i := range p {
		p[i] = 0xdb
	}
	return
}()
