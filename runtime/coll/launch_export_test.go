package coll

import "time"

// SetPMIx replaces what RegisterPMIx registered (nil: nothing) and
// returns a function that restores it.
func SetPMIx(join func(time.Duration) (Member, error)) (restore func()) {
	previous := setPMIx(join)
	return func() { setPMIx(previous) }
}
