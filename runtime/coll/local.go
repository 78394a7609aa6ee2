//go:build linux && cgo

package coll

import (
	"errors"
	"fmt"
	"sync"
	"syscall"

	"github.com/verbsexp/verbsexp/generated/verbs"
)

// NewLocal creates the size communicators of ranks that live in this
// process (with softdev: all of them), rank r on ctx(r), each by its own
// goroutine as separate processes would do it: New of every rank blocks
// in the exchange (NewInProcess) until all have reached it. If any rank
// fails, the exchange is failed for the others (InProcess.Fail), every
// communicator that was made is closed and the errors are returned.
func NewLocal(size int, ctx func(rank int) *verbs.Context, opts Options) ([]*Comm, error) {
	if size < 1 || size > MaxRanks {
		return nil, fmt.Errorf("coll: NewLocal: %d ranks: need 1 to %d: %w", size, MaxRanks, syscall.EINVAL)
	}
	x := NewInProcess(size)
	comms := make([]*Comm, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = New(ctx(r), r, size, x.For(r), opts)
			if errs[r] != nil {
				x.Fail(r, errs[r])
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, c := range comms {
			if c != nil {
				err = errors.Join(err, c.Close())
			}
		}
		return nil, err
	}
	return comms, nil
}
