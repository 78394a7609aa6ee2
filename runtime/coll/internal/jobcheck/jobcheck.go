// Package jobcheck is what the tests of coll's exchanges run as one
// rank of a real job (processes under mpirun, or started one by one for
// the TCP rendezvous): rounds whose every byte is checked, and the
// timing of the two rounds New makes.
package jobcheck

import (
	"bytes"
	"fmt"
	"slices"
	"time"
)

// Exchange is one rank's all-gather (a coll.Exchange).
type Exchange = func(local []byte) ([][]byte, error)

// Contribution is rank's bytes for round: lengths from 0 to 4 KiB as
// rank and round vary, every byte saying whose and which.
func Contribution(rank, round int) []byte {
	b := make([]byte, []int{0, 1, 100, 4096}[(rank+round)%4])
	for i := range b {
		b[i] = byte(rank*31 + round*7 + i)
	}
	return b
}

// Rounds runs n rounds of Contribution through exchange as rank of
// size, checking every byte every rank gets; before, if set, runs
// before each round.
func Rounds(exchange Exchange, rank, size, n int, before func(round int)) error {
	for round := 1; round <= n; round++ {
		if before != nil {
			before(round)
		}
		all, err := exchange(Contribution(rank, round))
		if err != nil {
			return err
		}
		if len(all) != size {
			return fmt.Errorf("round %d: %d entries for %d ranks", round, len(all), size)
		}
		for r, b := range all {
			if want := Contribution(r, round); !bytes.Equal(b, want) {
				return fmt.Errorf("round %d: rank %d's %d bytes are not the %d it sent", round, r, len(b), len(want))
			}
		}
	}
	return nil
}

// Bootstraps runs a warm-up round, then n times what New asks of the
// exchange (an endpoint of 8 ranks' size, then the second round's mark
// and digest), passing each pair's time to took.
func Bootstraps(exchange Exchange, n int, took func(time.Duration)) error {
	endpoint, mark := make([]byte, 56+6*12), make([]byte, 14+32)
	if _, err := exchange(nil); err != nil {
		return err
	}
	for range n {
		t := time.Now()
		for _, b := range [][]byte{endpoint, mark} {
			if _, err := exchange(b); err != nil {
				return err
			}
		}
		took(time.Since(t))
	}
	return nil
}

// Median of v (sorted in place).
func Median(v []float64) float64 {
	slices.Sort(v)
	return v[len(v)/2]
}
