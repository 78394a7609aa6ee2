//go:build linux && cgo

package jobcheck

import (
	"context"
	"fmt"
	"time"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/coll"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/softdev"
)

// Allreduce is a rank of a job in a process of its own: New on a
// softdev device of the process's own (at an address of its own)
// through exchange, one ADD allreduce of rank+1 with a deadline, and the
// sum checked.
func Allreduce(exchange Exchange, rank, size int) error {
	dev, err := softdev.Open()
	if err != nil {
		return err
	}
	defer dev.Close()
	c, err := coll.New(dev.Context(), rank, size, exchange, coll.Options{})
	if err != nil {
		return err
	}
	defer c.Close()
	buf, err := lease.Alloc(coll.ElementSize)
	if err != nil {
		return err
	}
	defer buf.Free()
	mem, err := c.Register(buf)
	if err != nil {
		return err
	}
	defer mem.Close()
	s, err := c.Allreduce(mem, mem, 1, verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint)
	if err != nil {
		return err
	}
	defer s.Close()
	coll.PutElement(mem.Bytes(), 0, uint64(rank+1), 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Post(); err != nil {
		return err
	}
	if err := s.WaitContext(ctx); err != nil {
		return err
	}
	if v, _ := coll.Element(mem.Bytes(), 0); v != uint64(size*(size+1)/2) {
		return fmt.Errorf("rank %d: the allreduce of rank+1 over %d ranks gave %d, want %d", rank, size, v, size*(size+1)/2)
	}
	return nil
}
