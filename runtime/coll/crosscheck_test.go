//go:build linux && cgo

package coll_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/coll"
	"github.com/verbsexp/verbsexp/runtime/lease"
)

// rewrite changes one endpoint of one rank's view of the first round.
type rewrite struct {
	name   string
	size   int
	viewer int // whose view of the exchange is rewritten (-1: every rank's but the liar's)
	liar   int // whose endpoint is rewritten
	edit   func(liar *coll.Endpoint, all []coll.Endpoint)
	want   string // what every New that finds the rewrite says
}

// qpTo is the index in e.Peers of e's QP to rank r.
func qpTo(e *coll.Endpoint, r int) int {
	for i, q := range e.Peers {
		if q.Rank == r {
			return i
		}
	}
	panic(fmt.Sprintf("rank %d has no QP to rank %d", e.Rank, r))
}

// TestNewRefusesLyingPeers: an exchange that delivers a rewritten
// endpoint (a lying or confused peer, or an exchange that mixed up its
// deliveries) makes New fail on every rank with an error naming the
// ranks involved, never a communicator whose collectives quietly leave
// a contribution out. Before New cross-checked the endpoints, the first
// case (rank 1 telling rank 0 that its QP to rank 0 is rank 2's) gave
// rank 0 and rank 1 wrong sums with a nil Wait.
func TestNewRefusesLyingPeers(t *testing.T) {
	cases := []rewrite{
		{name: "a peer names another rank's QP to one rank", size: 4, viewer: 0, liar: 1,
			edit: func(e *coll.Endpoint, all []coll.Endpoint) {
				e.Peers[qpTo(e, 0)].QPNum = all[2].Peers[qpTo(&all[2], 0)].QPNum
			}, want: "rank 1's QP to rank 0 and rank 2's QP to rank 0 both name QP"},
		{name: "a peer names another rank's QP to every rank", size: 4, viewer: -1, liar: 1,
			edit: func(e *coll.Endpoint, all []coll.Endpoint) {
				e.Peers[qpTo(e, 0)].QPNum = all[2].Peers[qpTo(&all[2], 0)].QPNum
			}, want: "rank 1's QP to rank 0 and rank 2's QP to rank 0 both name QP"},
		{name: "a peer names its own QP twice", size: 5, viewer: -1, liar: 3,
			edit: func(e *coll.Endpoint, all []coll.Endpoint) {
				e.Peers[0].QPNum = e.Peers[1].QPNum
			}, want: "rank 3's QP to rank 0 and rank 3's QP to rank 1 both name QP"},
		{name: "a peer names a manager", size: 3, viewer: -1, liar: 2,
			edit: func(e *coll.Endpoint, all []coll.Endpoint) {
				e.Peers[qpTo(e, 1)].QPNum = all[1].Manager.QPNum
			}, want: "rank 1's manager and rank 2's QP to rank 1 both name QP"},
		{name: "one rank is told another PSN", size: 3, viewer: 2, liar: 0,
			edit: func(e *coll.Endpoint, all []coll.Endpoint) {
				e.Peers[qpTo(e, 2)].PSN ^= 1
			}, want: "ranks 0, 1 received one set, rank 2 received another"},
		{name: "one rank is told another device", size: 2, viewer: 1, liar: 0,
			edit: func(e *coll.Endpoint, all []coll.Endpoint) {
				e.GID[15] ^= 1
			}, want: "rank 0 received one set, rank 1 received another"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sums, errs := allreduceWithRewrite(t, tc)
			for r, err := range errs {
				t.Logf("rank %d: sum %d, %v", r, sums[r], err)
			}
			for r, err := range errs {
				switch {
				case err == nil:
					t.Errorf("rank %d: New and the allreduce succeeded, sum %d (want %d)", r, sums[r], tc.size*(tc.size+1)/2)
				case !errors.Is(err, coll.ErrConflict):
					t.Errorf("rank %d: %v, want an error wrapping ErrConflict", r, err)
				case !strings.Contains(err.Error(), tc.want):
					t.Errorf("rank %d: %v: does not say %q", r, err, tc.want)
				}
			}
		})
	}
}

// allreduceWithRewrite runs New on tc.size in-process ranks through an
// exchange that applies tc's rewrite, and an ADD allreduce of rank+1 on
// every rank whose New succeeded: the sums, and each rank's error (New's
// or the allreduce's). A rank whose New fails fails the exchange for the
// others, who then report its error.
func allreduceWithRewrite(t *testing.T, tc rewrite) ([]uint64, []error) {
	t.Helper()
	dev := openDevice(t)
	x := coll.NewInProcess(tc.size)
	sums, errs := make([]uint64, tc.size), make([]error, tc.size)
	opts := coll.Options{} // no Progress: ranks poll concurrently, as processes would
	var wg sync.WaitGroup
	for rank := range tc.size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			exchange, round := x.For(rank), 0
			if tc.viewer == rank || tc.viewer < 0 && rank != tc.liar {
				exchange = func(local []byte) ([][]byte, error) {
					all, err := x.For(rank)(local)
					if round++; round != 1 || err != nil {
						return all, err
					}
					eps := make([]coll.Endpoint, len(all))
					for r, b := range all {
						if err := eps[r].UnmarshalBinary(b); err != nil {
							return nil, err
						}
					}
					liar := eps[tc.liar]
					liar.Peers = append([]coll.QPAddr(nil), liar.Peers...)
					tc.edit(&liar, eps)
					if all[tc.liar], err = liar.MarshalBinary(); err != nil {
						return nil, err
					}
					return all, nil
				}
			}
			c, err := coll.New(dev.Context(), rank, tc.size, exchange, opts)
			if err != nil {
				errs[rank] = err
				x.Fail(rank, err)
				return
			}
			sums[rank], errs[rank] = allreduceRankPlusOne(c)
			if err := c.Close(); err != nil && errs[rank] == nil {
				errs[rank] = err
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("ranks still running after 20 s")
	}
	return sums, errs
}

// allreduceRankPlusOne runs one ADD allreduce of rank+1 on c.
func allreduceRankPlusOne(c *coll.Comm) (uint64, error) {
	buf, err := lease.Alloc(coll.ElementSize)
	if err != nil {
		return 0, err
	}
	defer buf.Free()
	mem, err := c.Register(buf)
	if err != nil {
		return 0, err
	}
	defer mem.Close()
	s, err := c.Allreduce(mem, mem, 1, verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint)
	if err != nil {
		return 0, err
	}
	defer s.Close()
	coll.PutElement(mem.Bytes(), 0, uint64(c.Rank()+1), 0)
	if err := s.Post(); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := s.WaitContext(ctx); err != nil {
		return 0, err
	}
	v, _ := coll.Element(mem.Bytes(), 0)
	return v, nil
}
