//go:build linux && cgo

package collsoft_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/verbsexp/verbsexp/runtime/coll/collsoft"
)

// TestBarrierSynchronises: while one rank (each in turn) has not posted its barrier,
// no other rank's run completes: Test says not yet, and Wait, which runs
// the device to a standstill, reports a deadlock whose stuck sends are
// the ones to the late rank. Once it posts, every rank completes, and
// the barrier runs normally after.
func TestBarrierSynchronises(t *testing.T) {
	for _, n := range []int{2, 3, 5, 8, 12, 33} {
		lates := []int{0, n / 2, n - 1} // every rank up to 12
		if n <= 12 {
			lates = nil
			for r := range n {
				lates = append(lates, r)
			}
		}
		for _, late := range lates {
			t.Run(fmt.Sprintf("N=%d/late=%d", n, late), func(t *testing.T) {
				w := newWorld(t, n)
				ss := barrierSchedules(t, w)
				defer closeAll(t, ss)
				if err := run(ss); err != nil { // one normal run first
					t.Fatal(err)
				}
				for r, s := range ss {
					if r != late {
						if err := s.Post(); err != nil {
							t.Fatal(err)
						}
					}
				}
				lateName := fmt.Sprintf("rank %d's ", late)
				for r, s := range ss {
					if r == late {
						continue
					}
					if done, err := s.Test(); done || err != nil {
						t.Fatalf("rank %d: Test before rank %d posted: done %v, %v", r, late, done, err)
					}
					err := s.Wait()
					var d *collsoft.Deadlock
					if !errors.As(err, &d) {
						t.Fatalf("rank %d: Wait before rank %d posted: %v, want a *collsoft.Deadlock", r, late, err)
					}
					toLate := false
					for _, st := range d.Stuck {
						toLate = toLate || strings.HasPrefix(st.Peer, lateName)
					}
					if !toLate {
						t.Errorf("rank %d: the deadlock names no send to rank %d: %v", r, late, d)
					}
				}
				if err := ss[late].Post(); err != nil {
					t.Fatal(err)
				}
				for r, s := range ss {
					if err := s.Wait(); err != nil {
						t.Fatalf("rank %d: Wait after rank %d posted: %v", r, late, err)
					}
				}
				for range 3 {
					if err := run(ss); err != nil {
						t.Fatal(err)
					}
				}
			})
		}
	}
}
