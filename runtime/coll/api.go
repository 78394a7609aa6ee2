//go:build linux && cgo

package coll

import (
	"fmt"
	"math"
	"math/bits"
	"syscall"

	"github.com/verbsexp/verbsexp/generated/verbs"
)

// Barrier builds a standing barrier: a run completes on a rank once
// every rank has posted its run (dissemination, ceil(log2 N) steps of
// empty messages).
func (c *Comm) Barrier() (*Schedule, error) {
	return c.build("barrier", c.barrier, nil, nil, [2]int{}, -1)
}

// The plans of the collectives, as build takes them (their arguments
// checked).
func (c *Comm) barrier() (*plan, int) { return barrierPlan(c.rank, c.size), 0 }
func (c *Comm) allreduce(count int, op verbs.ExpCalcOp, typ verbs.ExpCalcDataType) func() (*plan, int) {
	return func() (*plan, int) { return allreducePlan(c.rank, c.size, count, op, typ) }
}
func (c *Comm) broadcast(root, n int) func() (*plan, int) {
	return func() (*plan, int) { return broadcastPlan(c.rank, c.size, root, n), 0 }
}
func (c *Comm) allgather(block int) func() (*plan, int) {
	return func() (*plan, int) { return allgatherPlan(c.rank, c.size, block), 0 }
}

// Allreduce builds a standing allreduce of count elements: element i of
// out becomes the reduction with op, over every rank, of element i of
// in. Elements are ElementSize bytes in the device's calc format
// (PutElement, Element); in and out may be the same Memory. op and typ
// must be in the device's calc capabilities (ibv_exp_query_device), or
// be MAXLOC on UINT, which the mlx4 and mlx5 providers accept without
// reporting it. For FLOAT ADD every rank combines the operands in the
// same pairs, so all ranks get the same bits when the device reduces a
// CALC's operands in order (softdev does).
func (c *Comm) Allreduce(in, out *Memory, count int, op verbs.ExpCalcOp, typ verbs.ExpCalcDataType) (*Schedule, error) {
	need, err := c.allreduceNeed(in, out, count, op, typ)
	if err != nil {
		return nil, err
	}
	return c.build("allreduce", c.allreduce(count, op, typ), in, out, [2]int{need, need}, -1)
}

// allreduceNeed checks an allreduce's arguments and returns the bytes
// each memory must hold. A run receives count elements from each partner
// (or its own loopback) on one queue, so count is bounded by
// Options.Depth here, on every rank alike, before a plan of count
// elements per step is made.
func (c *Comm) allreduceNeed(in, out *Memory, count int, op verbs.ExpCalcOp, typ verbs.ExpCalcDataType) (int, error) {
	if in == nil || out == nil || count < 1 {
		return 0, fmt.Errorf("coll: allreduce: need input and output memories and count ≥ 1 (count %d): %w", count, syscall.EINVAL)
	}
	if count > c.caps.depth {
		return 0, fmt.Errorf("coll: rank %d: allreduce: %s: a run receives every element on one queue pair, which holds %d (Options.Depth): %w", c.rank, nOf(count, "element"), c.caps.depth, syscall.EINVAL)
	}
	if err := c.canCalc(op, typ); err != nil {
		return 0, err
	}
	if k := bits.Len(uint(c.size)) - 1; k+2 > c.caps.sendSGE {
		return 0, fmt.Errorf("coll: allreduce over %s reduces %d operands in one CALC; the device takes %s: %w", nOf(c.size, "rank"), k+2, nOf(c.caps.sendSGE, "SGE"), syscall.EINVAL)
	}
	return count * ElementSize, nil // count ≤ Depth ≤ 2^20: no overflow
}

// canCalc checks op and typ against the device's calc capabilities.
func (c *Comm) canCalc(op verbs.ExpCalcOp, typ verbs.ExpCalcDataType) error {
	cc := c.caps.calc
	if !c.caps.calcReported || cc.DataSizes&(1<<verbs.ExpCalcDataSize64Bit) == 0 {
		return fmt.Errorf("coll: allreduce: the device reports no 64-bit calc (IBV_EXP_DEVICE_ATTR_CALC_CAP): %w", syscall.EOPNOTSUPP)
	}
	var ops uint64
	switch typ {
	case verbs.ExpCalcDataTypeInt:
		ops = cc.IntOps
	case verbs.ExpCalcDataTypeUint:
		ops = cc.UintOps
	case verbs.ExpCalcDataTypeFloat:
		ops = cc.FpOps
	}
	typeOK := uint(typ) < 64 && cc.DataTypes&(1<<uint(typ)) != 0
	opOK := uint(op) < 64 && ops&(1<<uint(op)) != 0
	if typeOK && (opOK || op == verbs.ExpCalcOpMaxloc && typ == verbs.ExpCalcDataTypeUint) {
		return nil
	}
	return fmt.Errorf("coll: allreduce: the device cannot reduce %v with %v (calc capabilities: types %#x, int ops %#x, uint ops %#x, float ops %#x; MAXLOC on UINT is also accepted): %w",
		typ, op, cc.DataTypes, cc.IntOps, cc.UintOps, cc.FpOps, syscall.EOPNOTSUPP)
}

// Broadcast builds a standing broadcast of the first n bytes of buf from
// root to every rank (binomial tree): root's bytes are sent, the others'
// overwritten.
func (c *Comm) Broadcast(root int, buf *Memory, n int) (*Schedule, error) {
	if root < 0 || root >= c.size || buf == nil || n < 1 {
		return nil, fmt.Errorf("coll: broadcast: root %d of %s, %s: need a root in range, a memory and n ≥ 1: %w", root, nOf(c.size, "rank"), nOf(n, "byte"), syscall.EINVAL)
	}
	return c.build(fmt.Sprintf("broadcast from rank %d", root), c.broadcast(root, n), nil, buf, [2]int{0, n}, -1)
}

// Allgather builds a standing in-place allgather: buf holds size blocks
// of block bytes, block r being rank r's contribution (each rank writes
// its own before posting); a run fills in every other rank's.
func (c *Comm) Allgather(buf *Memory, block int) (*Schedule, error) {
	need, err := c.allgatherNeed(buf, block)
	if err != nil {
		return nil, err
	}
	return c.build("allgather", c.allgather(block), nil, buf, [2]int{0, need}, -1)
}

// allgatherNeed checks an allgather's arguments and returns the bytes
// buf must hold: size blocks, a product checked for overflow.
func (c *Comm) allgatherNeed(buf *Memory, block int) (int, error) {
	if buf == nil || block < 1 {
		return 0, fmt.Errorf("coll: allgather: need a memory and block ≥ 1 (block %d): %w", block, syscall.EINVAL)
	}
	if block > math.MaxInt/c.size {
		return 0, fmt.Errorf("coll: allgather: %s of %d-byte blocks do not fit in an int: %w", nOf(c.size, "rank"), block, syscall.EINVAL)
	}
	return c.size * block, nil
}
