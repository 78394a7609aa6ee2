//go:build linux && cgo

package softdev

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/device"
)

// schedule posts a mixed cross-channel schedule on a fresh device and
// returns every completion in the order the shared CQ produced them,
// with the final contents of the data buffer.
func schedule(t *testing.T) ([]wcSum, []byte) {
	f := newFixture(t)
	cq := f.cq(4096, device.CrossChannelCQ())
	const ranks, rounds = 4, 4
	var a, b []*verbs.QP
	for range ranks {
		x := f.qp(cq, cq, device.ManagedSend(), device.QPCaps(device.Caps{SendWR: 16, RecvWR: 16, SendSGE: 2, RecvSGE: 2}))
		y := f.qp(cq, cq)
		if err := device.ConnectPair(x, y); err != nil {
			t.Fatal(err)
		}
		a, b = append(a, x), append(b, y)
	}
	m := f.qp(cq, cq, device.CrossChannel(), device.QPCaps(device.Caps{SendWR: 64, RecvWR: 1}))
	if err := device.ConnectPair(m, m); err != nil {
		t.Fatal(err)
	}
	plain := f.pair(nil, nil)
	for i := range f.buf[:512] {
		f.buf[i] = byte(i * 7)
	}
	id := uint64(0)
	next := func() uint64 { id++; return id }
	for i := range ranks {
		for r := range rounds {
			off := 1024 + (i*rounds+r)*32
			f.postRecv(b[i], f.recv(next(), f.sges(f.mr.Lkey, [2]int{off, 32}), 1))
			f.postSend(a[i], f.send(next(), verbs.ExpWRSend, verbs.ExpSendSignaled,
				f.sges(f.mr.Lkey, [2]int{(i + r) * 8, 8}, [2]int{64 + r*8, 16}), 2))
		}
	}
	// Round r: enable one send on every rank (in reverse order), then
	// wait until the shared CQ has seen that round's completions.
	for r := range rounds {
		for i := ranks - 1; i >= 0; i-- {
			f.postSend(m, f.enable(next(), verbs.ExpWRSendEnable, a[i], 1, verbs.ExpSendSignaled|verbs.ExpSendWaitEnLast))
		}
		// Each wait moves the CQ's wait base by its count: this round's
		// sends, receives and enables, plus the previous round's wait.
		f.postSend(m, f.wait(next(), cq, 2*ranks+ranks+boolInt(r > 0), verbs.ExpSendSignaled|verbs.ExpSendWaitEnLast))
		// Unrelated traffic interleaves with the schedule.
		w := f.write(next(), r*8, 2048+r*8)
		f.postSend(plain.a, w)
		if r == 1 {
			// Half-way: the rounds not yet enabled are reported gated.
			if de := f.progressBlocked(); len(de.Gated) != ranks {
				t.Fatalf("half-way: %v", de)
			}
		}
	}
	var out []wcSum
	for {
		got := f.poll(cq)
		if len(got) == 0 {
			break
		}
		out = append(out, sum(got)...)
	}
	out = append(out, sum(f.poll(plain.cqa))...)
	if _, err := f.d.Progress(); err != nil {
		t.Fatalf("schedule did not finish: %v", err)
	}
	return out, bytes.Clone(f.buf[:4096])
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestDeterminism: the same posts give the same completions in the same
// order, and the same memory.
func TestDeterminism(t *testing.T) {
	c1, m1 := schedule(t)
	c2, m2 := schedule(t)
	if len(c1) != 4*13+4 { // per round 4 enables, 4 sends, 4 receives, 1 wait; 4 writes
		t.Fatalf("%d completions, want 56", len(c1))
	}
	if !reflect.DeepEqual(c1, c2) {
		t.Fatalf("completion sequences differ:\n%+v\n%+v", c1, c2)
	}
	if !bytes.Equal(m1, m2) {
		t.Fatal("memory differs")
	}
	for _, c := range c1 {
		if c.Status != verbs.WCSuccess {
			t.Fatalf("completion %+v", c)
		}
	}
	t.Logf("%d completions, identical in both runs", len(c1))
}
