package coll

import (
	"math/bits"

	"github.com/verbsexp/verbsexp/generated/verbs"
)

// A plan is one rank's part of a collective, independent of any device:
// the messages it sends and receives and the order its manager runs them
// in. The schedule builder turns a plan into a task list (schedule.go);
// the step-by-step driver of the benchmarks runs the same plan from Go.
// Keeping one description for both is what makes the comparison fair.
type plan struct {
	ops []op
	// The reduction of the calc ops (allreduce only).
	calcOp   verbs.ExpCalcOp
	calcType verbs.ExpCalcDataType
}

type opKind uint8

const (
	// opRecv is a receive from peer into rs, posted when the schedule is
	// posted (receives wait for their message, not for the manager).
	opRecv opKind = iota
	// opSend sends rs (gathered) to peer once the manager reaches it.
	opSend
	// opCalc reduces the 16-byte operands rs and sends the result to
	// peer (the rank itself: the manager's loopback).
	opCalc
	// opWait holds the manager until the next n receives from peer have
	// completed.
	opWait
)

// memID names one of a schedule's memories.
type memID uint8

const (
	memIn      memID = iota // the caller's input
	memOut                  // the caller's output (or the in-place buffer)
	memScratch              // the schedule's own: received partials
)

// region is bytes [off, off+len) of one memory.
type region struct {
	mem      memID
	off, len int
}

type op struct {
	kind opKind
	peer int
	rs   []region
	n    int // opWait
}

func (p *plan) recv(peer int, rs ...region) {
	p.ops = append(p.ops, op{kind: opRecv, peer: peer, rs: rs})
}
func (p *plan) send(peer int, rs ...region) {
	p.ops = append(p.ops, op{kind: opSend, peer: peer, rs: rs})
}
func (p *plan) calc(peer int, rs ...region) {
	p.ops = append(p.ops, op{kind: opCalc, peer: peer, rs: rs})
}
func (p *plan) wait(peer, n int) { p.ops = append(p.ops, op{kind: opWait, peer: peer, n: n}) }

// selfRoundTrip gives a plan without messages (one rank) one loopback
// message, so that every schedule completes through a wait like the
// others do.
func (p *plan) selfRoundTrip(self int) {
	if len(p.ops) == 0 {
		p.recv(self)
		p.send(self)
		p.wait(self, 1)
	}
}

// neighbors are the ranks rank exchanges messages with in any plan:
// those at distance ±2^j (mod size). Dissemination (barrier), Bruck
// (allgather) and binomial trees for any root (broadcast) use exactly
// these, and so does recursive doubling with its extra ranks (partners
// r^2^j and r±p differ from r by a power of two). In ascending order.
func neighbors(rank, size int) []int {
	in := make([]bool, size)
	for d := 1; d < size; d <<= 1 {
		in[(rank+d)%size] = true
		in[(rank-d%size+size)%size] = true
	}
	in[rank] = false
	var out []int
	for r, ok := range in {
		if ok {
			out = append(out, r)
		}
	}
	return out
}

// barrierPlan is the dissemination barrier: in step j, send an empty
// message to rank+2^j and wait for the one from rank-2^j; after
// ceil(log2 size) steps every rank has heard, through some chain, from
// every other.
func barrierPlan(rank, size int) *plan {
	p := &plan{}
	for d := 1; d < size; d <<= 1 {
		to, from := (rank+d)%size, (rank-d+size)%size
		p.recv(from)
		p.send(to)
		p.wait(from, 1)
	}
	p.selfRoundTrip(rank)
	return p
}

// ElementSize is the size of one allreduce element: the device's calc
// operand, a big-endian 64-bit value followed by a big-endian 64-bit
// location that only MAXLOC reads and writes.
const ElementSize = 16

// allreducePlan is recursive doubling over p, the largest power of two
// not above size; each of the size-p extra ranks r ≥ p first hands its
// elements to rank r-p and gets the result back from it at the end. In
// step j a core rank sends partner r^2^j, element by element, the
// reduction of its own input, its extra rank's and the j partials it has
// received (a CALC send, so the device computes it), and receives the
// partner's. The result is one more CALC over all of them, sent to
// itself. Scratch holds the extra rank's elements, then one partial per
// step, each count elements.
func allreducePlan(rank, size, count int, op verbs.ExpCalcOp, typ verbs.ExpCalcDataType) (pl *plan, scratch int) {
	k := bits.Len(uint(size)) - 1
	p := 1 << k
	pl = &plan{calcOp: op, calcType: typ}
	vec := count * ElementSize
	elem := func(m memID, base, e int) region { return region{m, base + e*ElementSize, ElementSize} }
	if rank >= p { // an extra rank
		core := rank - p
		pl.recv(core, region{memOut, 0, vec})
		pl.send(core, region{memIn, 0, vec})
		pl.wait(core, 1)
		return pl, 0
	}
	extra := rank + p
	hasExtra := extra < size
	partial := func(j int) int { return (1 + j) * vec }
	operands := func(e, steps int) []region {
		rs := []region{elem(memIn, 0, e)}
		if hasExtra {
			rs = append(rs, elem(memScratch, 0, e))
		}
		for j := 0; j < steps; j++ {
			rs = append(rs, elem(memScratch, partial(j), e))
		}
		return rs
	}
	if hasExtra {
		pl.recv(extra, region{memScratch, 0, vec})
		pl.wait(extra, 1)
	}
	for j := 0; j < k; j++ {
		partner := rank ^ 1<<j
		for e := 0; e < count; e++ {
			pl.recv(partner, elem(memScratch, partial(j), e))
		}
		for e := 0; e < count; e++ {
			pl.calc(partner, operands(e, j)...)
		}
		pl.wait(partner, count)
	}
	for e := 0; e < count; e++ {
		pl.recv(rank, elem(memOut, 0, e))
	}
	for e := 0; e < count; e++ {
		pl.calc(rank, operands(e, k)...)
	}
	pl.wait(rank, count)
	if hasExtra {
		pl.send(extra, region{memOut, 0, vec})
	}
	return pl, partial(k)
}

// broadcastPlan is a binomial tree rooted at root: in ranks relative to
// the root, rank v receives from v minus its lowest set bit, then sends
// to v+2^i for each 2^i below that bit (every power of two below size
// for the root), largest first.
func broadcastPlan(rank, size, root, n int) *plan {
	p := &plan{}
	v := (rank - root + size) % size
	abs := func(v int) int { return (v + root) % size }
	buf := region{memOut, 0, n}
	mask := 1
	for ; mask < size; mask <<= 1 {
		if v&mask != 0 {
			parent := abs(v - mask)
			p.recv(parent, buf)
			p.wait(parent, 1)
			break
		}
	}
	for m := mask >> 1; m > 0; m >>= 1 {
		if v+m < size {
			p.send(abs(v+m), buf)
		}
	}
	p.selfRoundTrip(rank)
	return p
}

// allgatherPlan is Bruck's allgather without its final rotation: after
// step j rank r holds blocks r … r+2^(j+1)-1 (mod size) in place; in step
// j it sends the first min(2^j, size-2^j) of them to rank r-2^j and
// receives as many, starting at block r+2^j, from rank r+2^j. A run of
// blocks that wraps past the last is two regions, on both sides alike,
// so send and receive describe the same bytes.
func allgatherPlan(rank, size, block int) *plan {
	p := &plan{}
	blocks := func(first, cnt int) []region {
		var rs []region
		for cnt > 0 {
			run := min(cnt, size-first)
			rs = append(rs, region{memOut, first * block, run * block})
			first, cnt = 0, cnt-run
		}
		return rs
	}
	for d := 1; d < size; d <<= 1 {
		cnt := min(d, size-d)
		to, from := (rank-d+size)%size, (rank+d)%size
		p.recv(from, blocks(from, cnt)...)
		p.send(to, blocks(rank, cnt)...)
		p.wait(from, 1)
	}
	p.selfRoundTrip(rank)
	return p
}
