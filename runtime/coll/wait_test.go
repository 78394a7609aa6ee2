//go:build linux && cgo

package coll_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/coll"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/softdev"
)

// TestWaitContext: with no Progress (an HCA's setting) a run whose
// peers never post is not complete, and WaitContext returns the
// context's error instead of polling for ever; the run stays in flight.
func TestWaitContext(t *testing.T) {
	dev, err := softdev.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	comms, err := coll.NewLocal(2, func(int) *verbs.Context { return dev.Context() }, coll.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := comms[0].Barrier()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Post(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := b.WaitContext(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitContext with rank 1 never posting: %v, want DeadlineExceeded", err)
	}
	if err := b.Post(); !errors.Is(err, coll.ErrInFlight) {
		t.Fatalf("Post after the abandoned wait: %v, want coll.ErrInFlight", err)
	}
	b1, err := comms[1].Barrier()
	if err != nil {
		t.Fatal(err)
	}
	if err := b1.Post(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*coll.Schedule{b, b1} {
		if err := s.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range comms {
		if err := c.Close(); err != nil {
			var le *coll.LeakError
			if !errors.As(err, &le) {
				t.Fatal(err)
			}
		}
	}
}

// TestRegisterLeases: a registered Buffer cannot be freed under its MR;
// once its Memory is closed it can.
func TestRegisterLeases(t *testing.T) {
	c := singleRank(t)
	buf, err := lease.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Register(buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := buf.Free(); !errors.Is(err, lease.ErrBusy) {
		t.Fatalf("Free of a registered buffer: %v, want lease.ErrBusy", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := buf.Free(); err != nil {
		t.Fatalf("Free after Memory.Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}
