//go:build linux && cgo

// Package collsoft runs coll's communicators on softdev: every rank of
// a World is a communicator on one software device in this process,
// connected through coll's in-process exchange, and a run that cannot
// complete is reported as a Deadlock naming each stuck queue by rank and
// role, never a hang. Tests, examples and the benchmarks use it; with an
// HCA, create one coll.Comm per process with coll.New instead.
package collsoft

import (
	"errors"
	"fmt"
	"strings"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/coll"
	"github.com/verbsexp/verbsexp/runtime/softdev"
)

// World is size ranks on one software device.
type World struct {
	Dev   *softdev.Device
	Comms []*coll.Comm // by rank
}

// New creates size communicators on dev (coll.NewLocal), with
// opts.Progress set to run dev and name what is stuck.
func New(dev *softdev.Device, size int, opts coll.Options) (*World, error) {
	if size < 1 {
		return nil, fmt.Errorf("collsoft: %d ranks: need at least one", size)
	}
	w := &World{Dev: dev}
	opts.Progress = w.progress
	comms, err := coll.NewLocal(size, func(int) *verbs.Context { return dev.Context() }, opts)
	if err != nil {
		return nil, err
	}
	w.Comms = comms
	return w, nil
}

// Close closes every communicator.
func (w *World) Close() error {
	var errs []error
	for _, c := range w.Comms {
		if c != nil {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

// Deadlock is a run that cannot complete: softdev's report with each
// queue named by rank and role.
type Deadlock struct {
	Stuck []Stuck
	Err   *softdev.DeadlockError
}

// Stuck is one queue that cannot proceed.
type Stuck struct {
	Rank  int    // whose queue
	QP    string // "rank 3's manager", "rank 3's QP to rank 5"
	QPNum uint32
	WRID  uint64
	// For a wait: the CQ, and the count it needs past its base.
	CQ             string
	Count          int32
	Base, Produced uint64
	// For a send: the QP without a receive for it.
	Peer string
}

func (d *Deadlock) Error() string {
	var b strings.Builder
	b.WriteString("deadlock:")
	for _, s := range d.Stuck {
		switch {
		case s.CQ != "":
			fmt.Fprintf(&b, " %s (QP %#x) waits on %s for %d CQEs past base %d, %d produced;", s.QP, s.QPNum, s.CQ, s.Count, s.Base, s.Produced-s.Base)
		case s.Peer != "":
			fmt.Fprintf(&b, " %s (QP %#x) has a send (wr_id %#x) that %s has no receive for;", s.QP, s.QPNum, s.WRID, s.Peer)
		default:
			fmt.Fprintf(&b, " %s (QP %#x) holds wr_id %#x that no enable released;", s.QP, s.QPNum, s.WRID)
		}
	}
	return strings.TrimSuffix(b.String(), ";")
}

func (d *Deadlock) Unwrap() error { return d.Err }

// progress runs the device and names a deadlock.
func (w *World) progress() error {
	_, err := w.Dev.Progress()
	if err == nil {
		return nil // before errors.As, whose target escapes: Wait calls this every run
	}
	var de *softdev.DeadlockError
	if !errors.As(err, &de) {
		return err
	}
	d := &Deadlock{Err: de}
	for _, b := range de.Waits {
		s := w.stuck(b.QPNum, b.WRID)
		s.CQ, s.Count, s.Base, s.Produced = w.nameCQ(b.CQ, b.CQHandle), b.Count, b.Base, b.Produced
		d.Stuck = append(d.Stuck, s)
	}
	for _, b := range de.Sends {
		s := w.stuck(b.QPNum, b.WRID)
		s.Peer = w.nameQP(b.DestQPNum)
		d.Stuck = append(d.Stuck, s)
	}
	for _, b := range de.Gated {
		d.Stuck = append(d.Stuck, w.stuck(b.QPNum, b.WRID))
	}
	return d
}

func (w *World) stuck(qpn uint32, wrID uint64) Stuck {
	s := Stuck{Rank: -1, QP: w.nameQP(qpn), QPNum: qpn, WRID: wrID}
	if _, rank, ok := w.Comms[0].Describe(qpn); ok {
		s.Rank = rank
	}
	return s
}

func (w *World) nameQP(qpn uint32) string {
	if name, _, ok := w.Comms[0].Describe(qpn); ok {
		return name
	}
	return fmt.Sprintf("QP %#x (not of this world)", qpn)
}

func (w *World) nameCQ(cq *verbs.CQ, handle uint32) string {
	for _, c := range w.Comms {
		if name, ok := c.DescribeCQ(cq); ok {
			return name
		}
	}
	return fmt.Sprintf("CQ %d", handle)
}
