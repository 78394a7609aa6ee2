//go:build linux && cgo

package softdev

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/internal/multiproc"
	"github.com/verbsexp/verbsexp/runtime/device"
)

// TestWireStress: two processes, 64 RC connections between them, 10^5
// messages in all (both ways at once, sizes from 1 byte to 3 path MTUs,
// each checked for its connection, its order and every byte), in bounded
// time and memory: each rank's peak RSS must stay under 256 MiB.
func TestWireStress(t *testing.T) {
	self, isRank := multiproc.Rank()
	if !isRank {
		if testing.Short() {
			t.Skip("SKIPPED in -short: 10^5 messages between two processes")
		}
		for _, r := range multiproc.Run(t, 2, multiproc.Config{Timeout: 240 * time.Second}) {
			for _, l := range strings.Split(string(r.Output), "\n") {
				if strings.HasPrefix(l, "stress:") {
					t.Log(l)
				}
			}
		}
		return
	}
	const (
		conns   = 64
		perConn = 100000 / conns / 2 // each way
		slot    = 3 * 1024
		depth   = 32
	)
	f := newFixture(t)
	peer := 1 - self.Rank
	scq, rcq := f.cq(conns*depth), f.cq(conns*depth)
	qps := make([]*verbs.QP, conns)
	info := meshInfo{GID: f.d.GID(), QPN: make([]uint32, conns)}
	for i := range qps {
		qps[i] = f.qp(scq, rcq, device.QPCaps(device.Caps{SendWR: depth, RecvWR: depth, SendSGE: 1, RecvSGE: 1}))
		info.QPN[i] = qps[i].QPNum
	}
	n := &meshNode{t: t, rank: self.Rank, size: 2, f: f, xchg: self.Exchange()}
	peers := n.exchange(info)
	qpIndex := map[uint32]int{}
	for i, qp := range qps {
		connectOne(t, qp, peers[peer].QPN[i], peers[peer].GID, defaultLink())
		qpIndex[qp.QPNum] = i
	}
	// Receive slots: depth per connection; send slots: depth per connection.
	mem := allocN[byte](f, 2*conns*depth*slot)
	mr := f.reg(mem, verbs.AccessLocalWrite)
	sge := allocN[verbs.SGE](f, 2*conns*depth)
	rwr := allocN[verbs.RecvWR](f, conns*depth)
	swr := allocN[verbs.ExpSendWR](f, conns*depth)
	rbad, sbad := alloc[*verbs.RecvWR](f), alloc[*verbs.ExpSendWR](f)
	at := func(k int) uint64 { return uint64(uintptr(unsafe.Pointer(&mem[k*slot]))) }
	postRecv := func(c, k int) {
		j := c*depth + k
		sge[j] = verbs.SGE{Addr: at(j), Length: slot, Lkey: mr.Lkey}
		rwr[j] = verbs.RecvWR{WRID: uint64(j), SGList: &sge[j], NumSGE: 1}
		if err := verbs.PostRecv(qps[c], &rwr[j], rbad); err != nil {
			t.Fatalf("post recv: %v", err)
		}
	}
	size := func(c, seq int) int { return 1 + (c*7919+seq*104729)%slot }
	fill := func(b []byte, from, c, seq int) {
		binary.LittleEndian.PutUint32(b, uint32(from<<24|c<<16)|uint32(seq))
		for i := 4; i < len(b); i++ {
			b[i] = byte(c + seq + i)
		}
	}
	sent, done, got := make([]int, conns), make([]int, conns), make([]int, conns)
	postSend := func(c int) {
		seq := sent[c]
		j := conns*depth + c*depth + seq%depth
		b := mem[j*slot : j*slot+max(size(c, seq), 4)]
		fill(b, self.Rank, c, seq)
		sge[j] = verbs.SGE{Addr: at(j), Length: uint32(max(size(c, seq), 4)), Lkey: mr.Lkey}
		w := &swr[c*depth+seq%depth]
		*w = verbs.ExpSendWR{WRID: uint64(c), SGList: &sge[j], NumSGE: 1, ExpOpcode: verbs.ExpWRSend,
			ExpSendFlags: uint64(verbs.ExpSendSignaled)}
		if err := verbs.ExpPostSend(qps[c], w, sbad); err != nil {
			t.Fatalf("post send on %d: %v", c, err)
		}
		sent[c]++
	}
	for c := range conns {
		for k := range depth {
			postRecv(c, k)
		}
	}
	n.barrier = func(name string) {
		if err := self.Barrier(name); err != nil {
			t.Fatal(err)
		}
	}
	n.barrier("posted")
	start := time.Now()
	for c := range conns {
		for sent[c] < depth/2 && sent[c] < perConn {
			postSend(c)
		}
	}
	wc := allocN[verbs.ExpWC](f, 64)
	total := 0
	for total < 2*conns*perConn {
		if time.Since(start) > 180*time.Second {
			t.Fatalf("after %v: %d of %d completions", time.Since(start), total, 2*conns*perConn)
		}
		for _, cq := range []*verbs.CQ{scq, rcq} {
			k, err := verbs.ExpPollCQ(cq, wc)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range wc[:k] {
				if w.Status != verbs.WCSuccess {
					t.Fatalf("completion %+v", sum([]verbs.ExpWC{w}))
				}
				total++
				if cq == scq {
					c := int(w.WRID)
					done[c]++
					if sent[c] < perConn {
						postSend(c)
					}
					continue
				}
				c := qpIndex[w.QPNum]
				j := int(w.WRID)
				seq := got[c]
				want := make([]byte, max(size(c, seq), 4))
				fill(want, peer, c, seq)
				if l := int(byteLen(&w)); l != len(want) || string(mem[j*slot:j*slot+l]) != string(want) {
					t.Fatalf("connection %d message %d: %d bytes, not the ones sent", c, seq, l)
				}
				got[c]++
				postRecv(c, j%depth)
			}
		}
	}
	took := time.Since(start)
	n.barrier("done")
	rss := peakRSS(t)
	fmt.Printf("stress: rank %d: %d messages each way over %d connections in %v (%.0f/s), peak RSS %d MiB\n",
		self.Rank, conns*perConn, conns, took.Round(time.Millisecond), float64(2*conns*perConn)/took.Seconds(), rss>>20)
	if rss > 256<<20 {
		t.Errorf("peak RSS %d MiB, want under 256", rss>>20)
	}
}

// peakRSS is the process's VmHWM.
func peakRSS(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/self/status")
	return 0
}
