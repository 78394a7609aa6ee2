//go:build linux && cgo

package softdev

import (
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/internal/multiproc"
)

// A mesh is a rule test's ranks, each with its own device: goroutines of
// this process, or processes of their own (multiproc). Every rank has one
// RC QP per other rank, with its own CQ, connected with attributes the
// rule chooses; rank 0 is the requester of every rule, the others its
// responders. The ranks trade what they need through an exchange, as
// separate processes would.

// meshInfo is what a rank tells the others about itself.
type meshInfo struct {
	GID   [16]byte
	QPN   []uint32 // by peer rank
	Addr  uint64   // its buffer, registered as Rkey (remote read and write)
	Rkey  uint32
	Extra []uint32 // rule-specific keys
}

type meshNode struct {
	t          testing.TB
	rank, size int
	f          *fixture
	qp         []*verbs.QP // by peer; nil for itself
	cq         []*verbs.CQ
	peers      []meshInfo
	extra      []uint32
	xchg       func([]byte) ([][]byte, error)
	barrier    func(name string)
	die        func() // the rank's device ends, as if its process died
}

type wireRule struct {
	name string
	// attr is the connection of rank self towards rank peer.
	attr func(self, peer int) linkAttr
	// setup runs after the QPs exist, before they are connected (extra
	// MRs whose keys the others should learn go to n.extra).
	setup func(n *meshNode)
	run   func(n *meshNode)
}

func (n *meshNode) exchange(v meshInfo) []meshInfo {
	n.t.Helper()
	out, err := multiproc.Trade(n.xchg, v)
	if err != nil {
		n.t.Fatalf("rank %d: exchange: %v", n.rank, err)
	}
	return out
}

// build makes the QPs, trades the infos, connects every QP.
func (n *meshNode) build(rule wireRule) {
	n.t.Helper()
	n.qp, n.cq = make([]*verbs.QP, n.size), make([]*verbs.CQ, n.size)
	info := meshInfo{GID: n.f.d.GID(), QPN: make([]uint32, n.size), Addr: n.f.addr(0), Rkey: n.f.mr.Rkey}
	for p := range n.size {
		if p == n.rank {
			continue
		}
		n.cq[p] = n.f.cq(256)
		n.qp[p] = n.f.qp(n.cq[p], n.cq[p])
		info.QPN[p] = n.qp[p].QPNum
	}
	if rule.setup != nil {
		rule.setup(n)
	}
	info.Extra = n.extra
	n.peers = n.exchange(info)
	for p := range n.size {
		if p != n.rank {
			connectOne(n.t, n.qp[p], n.peers[p].QPN[n.rank], n.peers[p].GID, rule.attr(n.rank, p))
		}
	}
	n.barrier("connected")
}

// await polls peer p's CQ until want completions came.
func (n *meshNode) await(p, want int, within time.Duration) []verbs.ExpWC {
	n.t.Helper()
	var got []verbs.ExpWC
	end := time.Now().Add(within)
	for len(got) < want && time.Now().Before(end) {
		got = append(got, n.f.poll(n.cq[p])...)
		if len(got) < want {
			time.Sleep(50 * time.Microsecond)
		}
	}
	if len(got) < want {
		n.t.Fatalf("rank %d: %d of %d completions from rank %d in %v: %+v", n.rank, len(got), want, p, within, sum(got))
	}
	return got
}

// eachPeer runs f for every other rank, at once (the requester talks to
// all its responders together).
func (n *meshNode) eachPeer(f func(p int)) {
	for p := range n.size {
		if p != n.rank {
			f(p)
		}
	}
}

// runMesh runs rule among size ranks of this process (one goroutine,
// one device each).
func runMesh(t *testing.T, size int, rule wireRule) {
	x := newLocalExchange(size)
	t.Run(rule.name, func(t *testing.T) {
		for r := range size {
			t.Run(fmt.Sprint("rank", r), func(t *testing.T) {
				t.Parallel()
				n := &meshNode{t: t, rank: r, size: size, f: newFixture(t), xchg: x.forRank(r)}
				t.Cleanup(func() {
					if t.Failed() {
						x.fail(fmt.Errorf("rank %d failed", r))
					}
				})
				n.barrier = func(name string) {
					if _, err := n.xchg([]byte(name)); err != nil {
						t.Fatalf("rank %d: barrier %s: %v", r, name, err)
					}
				}
				n.die = n.f.kill
				n.build(rule)
				rule.run(n)
			})
		}
	})
}

// meshRank runs this process's rank of rule, when it is one (multiproc).
func meshRank(t *testing.T, s multiproc.Self, rule wireRule) {
	n := &meshNode{t: t, rank: s.Rank, size: s.Size, f: newFixture(t), xchg: s.Exchange()}
	t.Cleanup(func() {
		if t.Failed() {
			s.Abort(fmt.Sprintf("rank %d failed", s.Rank))
		}
	})
	n.barrier = func(name string) {
		if err := s.Barrier(name); err != nil {
			t.Fatalf("rank %d: barrier %s: %v", s.Rank, name, err)
		}
	}
	n.die = func() {
		killSelf()
	}
	n.build(rule)
	rule.run(n)
}

// localExchange is the in-process exchange of runMesh: round k of every
// rank meets round k of the others.
type localExchange struct {
	mu     sync.Mutex
	cond   *sync.Cond
	size   int
	rounds []map[int][]byte
	err    error
}

func newLocalExchange(size int) *localExchange {
	x := &localExchange{size: size}
	x.cond = sync.NewCond(&x.mu)
	return x
}

func (x *localExchange) fail(err error) {
	x.mu.Lock()
	if x.err == nil {
		x.err = err
	}
	x.cond.Broadcast()
	x.mu.Unlock()
}

func (x *localExchange) forRank(r int) func([]byte) ([][]byte, error) {
	round := 0
	return func(b []byte) ([][]byte, error) {
		x.mu.Lock()
		defer x.mu.Unlock()
		for len(x.rounds) <= round {
			x.rounds = append(x.rounds, map[int][]byte{})
		}
		x.rounds[round][r] = b
		x.cond.Broadcast()
		deadline := time.Now().Add(30 * time.Second)
		go func() { time.Sleep(time.Until(deadline)); x.cond.Broadcast() }()
		for len(x.rounds[round]) < x.size && x.err == nil && time.Now().Before(deadline) {
			x.cond.Wait()
		}
		if x.err != nil {
			return nil, x.err
		}
		if len(x.rounds[round]) < x.size {
			return nil, fmt.Errorf("round %d: not every rank came", round)
		}
		out := make([][]byte, x.size)
		for k, v := range x.rounds[round] {
			out[k] = v
		}
		round++
		return out, nil
	}
}

// le64 reads a little-endian uint64.
func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }
