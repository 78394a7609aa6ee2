//go:build linux && cgo

package coll

import (
	"fmt"
	"slices"
	"testing"

	"github.com/verbsexp/verbsexp/generated/verbs"
)

// planCase is one collective's plans on every rank of a world, with the
// sizes of the memories its schedules lease.
type planCase struct {
	name    string
	plans   []*plan
	sizes   [][3]int                      // by rank: memIn, memOut, memScratch bytes (0: none)
	ownOnly func(rank int, r region) bool // a region a receive must never cover
	result  int                           // bytes a calc delivers
}

func planCases(n int) []planCase {
	var cs []planCase
	bar := planCase{name: "barrier"}
	for r := range n {
		bar.plans, bar.sizes = append(bar.plans, barrierPlan(r, n)), append(bar.sizes, [3]int{})
	}
	cs = append(cs, bar)
	for _, count := range []int{1, 3} {
		for _, op := range []verbs.ExpCalcOp{verbs.ExpCalcOpAdd, verbs.ExpCalcOpMaxloc} {
			c := planCase{name: fmt.Sprintf("allreduce %v of %d", op, count), result: 8,
				ownOnly: func(_ int, r region) bool { return r.mem == memIn }}
			if op == verbs.ExpCalcOpMaxloc {
				c.result = 16
			}
			for r := range n {
				pl, scratch := allreducePlan(r, n, count, op, verbs.ExpCalcDataTypeUint)
				c.plans = append(c.plans, pl)
				c.sizes = append(c.sizes, [3]int{count * ElementSize, count * ElementSize, scratch})
			}
			cs = append(cs, c)
		}
	}
	for root := range n {
		c := planCase{name: fmt.Sprintf("broadcast from %d", root),
			ownOnly: func(rank int, _ region) bool { return rank == root }}
		for r := range n {
			c.plans, c.sizes = append(c.plans, broadcastPlan(r, n, root, 13)), append(c.sizes, [3]int{0, 13, 0})
		}
		cs = append(cs, c)
	}
	const block = 13
	ag := planCase{name: "allgather", ownOnly: func(rank int, r region) bool {
		return r.off < (rank+1)*block && rank*block < r.off+r.len
	}}
	for r := range n {
		ag.plans, ag.sizes = append(ag.plans, allgatherPlan(r, n, block)), append(ag.sizes, [3]int{0, n * block, 0})
	}
	return append(cs, ag)
}

// TestPlansStayInTheirMemories checks every plan of every collective
// at N = 1 … 64 on every rank without a device: every region lies inside
// the memory the schedule leases ([0, need) of the caller's, the whole
// scratch), so a schedule can neither read nor write outside what the
// caller registered, on either side of it; no receive lands in the
// allreduce input, the broadcast root's buffer or a rank's own
// allgather block; every message matches its receive in order and size
// on the peer; every peer is a neighbor (the only ranks New connects);
// and every receive is waited for.
func TestPlansStayInTheirMemories(t *testing.T) {
	for n := 1; n <= 64; n++ {
		for _, c := range planCases(n) {
			if err := checkPlans(n, c); err != nil {
				t.Fatalf("N=%d %s: %v", n, c.name, err)
			}
		}
	}
}

func checkPlans(n int, c planCase) error {
	sent := map[[2]int][]int{}   // [from, to] → message sizes in order
	posted := map[[2]int][]int{} // [to, from] → receive capacities in order
	for rank, pl := range c.plans {
		nb := append(neighbors(rank, n), rank)
		recvs, waited := map[int]int{}, map[int]int{}
		for i, o := range pl.ops {
			if !slices.Contains(nb, o.peer) {
				return fmt.Errorf("rank %d op %d: peer %d is not a neighbor", rank, i, o.peer)
			}
			bytes := 0
			for _, r := range o.rs {
				size := c.sizes[rank][r.mem]
				if r.off < 0 || r.len <= 0 || r.off > size-r.len {
					return fmt.Errorf("rank %d op %d: region [%d, %d) of memory %d is outside its %d bytes", rank, i, r.off, r.off+r.len, r.mem, size)
				}
				bytes += r.len
			}
			switch o.kind {
			case opRecv:
				for _, r := range o.rs {
					if c.ownOnly != nil && c.ownOnly(rank, r) {
						return fmt.Errorf("rank %d op %d: a receive into [%d, %d) of memory %d, which only this rank writes", rank, i, r.off, r.off+r.len, r.mem)
					}
				}
				recvs[o.peer]++
				posted[[2]int{rank, o.peer}] = append(posted[[2]int{rank, o.peer}], bytes)
			case opSend:
				sent[[2]int{rank, o.peer}] = append(sent[[2]int{rank, o.peer}], bytes)
			case opCalc:
				for _, r := range o.rs {
					if r.len != ElementSize {
						return fmt.Errorf("rank %d op %d: a calc operand of %d bytes", rank, i, r.len)
					}
				}
				sent[[2]int{rank, o.peer}] = append(sent[[2]int{rank, o.peer}], -c.result) // a calc result: fits a 16-byte receive
			case opWait:
				waited[o.peer] += o.n
				if waited[o.peer] > recvs[o.peer] {
					return fmt.Errorf("rank %d op %d: waits for %d receives from %d, %d posted before it", rank, i, waited[o.peer], o.peer, recvs[o.peer])
				}
			}
		}
		for p, k := range recvs {
			if waited[p] != k {
				return fmt.Errorf("rank %d: %d receives from %d, %d waited for", rank, k, p, waited[p])
			}
		}
	}
	for pair, sizes := range sent {
		caps := posted[[2]int{pair[1], pair[0]}]
		if len(caps) != len(sizes) {
			return fmt.Errorf("rank %d sends %d messages to %d, which posts %d receives for them", pair[0], len(sizes), pair[1], len(caps))
		}
		for i, s := range sizes {
			if s < 0 && (caps[i] != ElementSize) || s >= 0 && caps[i] != s {
				return fmt.Errorf("message %d from %d to %d: %d bytes (negative: a calc result) into a receive of %d", i, pair[0], pair[1], s, caps[i])
			}
		}
	}
	for pair, caps := range posted {
		if _, ok := sent[[2]int{pair[1], pair[0]}]; !ok {
			return fmt.Errorf("rank %d posts %d receives from %d, which sends it nothing", pair[0], len(caps), pair[1])
		}
	}
	return nil
}
