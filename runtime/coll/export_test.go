//go:build linux && cgo

package coll

import "github.com/verbsexp/verbsexp/generated/verbs"

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
		return c.build(kind, c.barrier, nil, nil, [2]int{}, i)
	case "allreduce":
		need, err := c.allreduceNeed(in, out, count, verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint)
		if err != nil {
			return nil, err
		}
		return c.build(kind, c.allreduce(count, verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint), in, out, [2]int{need, need}, i)
	case "broadcast":
		return c.build(kind, c.broadcast(root, n), nil, out, [2]int{0, n}, i)
	case "allgather":
		need, err := c.allgatherNeed(out, n)
		if err != nil {
			return nil, err
		}
		return c.build(kind, c.allgather(n), nil, out, [2]int{0, need}, i)
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

// WithoutReady makes the communicators New creates in this process
// trade no ready messages (ready.go) until the returned func is called.
func WithoutReady() (restore func()) {
	readyOff = true
	return func() { readyOff = false }
}
