//go:build linux && cgo

package coll

import verbs "github.com/verbsexp/verbsexp/generated"

// Hooks for the external tests: broken schedules and what a schedule
// counts.

// DropWait builds one of the four collectives as its public builder
// does, but leaves out the plan's i-th wait (the done wait still counts
// it, so a run cannot complete): kind is "barrier", "allreduce" (count
// elements of ADD on UINT, in and out), "broadcast" (from root, n bytes
// of out) or "allgather" (blocks of n bytes in out).
func DropWait(c *Comm, kind string, i int, in, out *Memory, count, root, n int) (*Schedule, error) {
	switch kind {
	case "barrier":
		return c.build(kind, barrierPlan(c.rank, c.size), nil, nil, [2]int{}, 0, i)
	case "allreduce":
		pl, scratch := allreducePlan(c.rank, c.size, count, verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint)
		need := count * ElementSize
		return c.build(kind, pl, in, out, [2]int{need, need}, scratch, i)
	case "broadcast":
		return c.build(kind, broadcastPlan(c.rank, c.size, root, n), nil, out, [2]int{0, n}, 0, i)
	case "allgather":
		return c.build(kind, allgatherPlan(c.rank, c.size, n), nil, out, [2]int{0, c.size * n}, 0, i)
	}
	panic("DropWait: no collective " + kind)
}

// PlanWaits is the number of waits in rank's plan of the collective
// DropWait builds with the same arguments.
func PlanWaits(kind string, rank, size, count, root, n int) int {
	var pl *plan
	switch kind {
	case "barrier":
		pl = barrierPlan(rank, size)
	case "allreduce":
		pl, _ = allreducePlan(rank, size, count, verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint)
	case "broadcast":
		pl = broadcastPlan(rank, size, root, n)
	case "allgather":
		pl = allgatherPlan(rank, size, n)
	default:
		panic("PlanWaits: no collective " + kind)
	}
	waits := 0
	for _, o := range pl.ops {
		if o.kind == opWait {
			waits++
		}
	}
	return waits
}

// DoneCount is the count of the schedule's done wait: the signaled
// waits of a run.
func DoneCount(s *Schedule) int { return s.waits }
