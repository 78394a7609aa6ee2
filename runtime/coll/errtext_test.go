//go:build linux && cgo

package coll_test

import (
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/coll"
	"github.com/verbsexp/verbsexp/runtime/softdev"
)

// TestErrorTexts: coll's errors say "coll:" once (a rank's prefix over
// an inner coll error used to double it: "coll: rank 0: exchange: coll:
// …", "in flight: coll: a run is in flight …"), count in the singular
// where there is one ("1 schedules"), and a Depth refusal names the rank
// that refuses as well as its peer ("100 receives from rank 0" read, on
// rank 0, as if it received from itself).
func TestErrorTexts(t *testing.T) {
	once := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: no error", what)
		} else if n := strings.Count(err.Error(), "coll: "); n != 1 {
			t.Errorf("%s: %q says \"coll: \" %d times", what, err, n)
		}
	}
	dev, err := softdev.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	inner := errors.New("coll: in-process exchange: rank 1 failed")
	_, err = coll.New(dev.Context(), 0, 2, func([]byte) ([][]byte, error) { return nil, inner }, coll.Options{})
	once("a failed exchange", err)
	if !errors.Is(err, inner) || !strings.HasPrefix(err.Error(), "coll: rank 0: exchange: in-process exchange: rank 1 failed") {
		t.Errorf("a failed exchange: %q (wraps the exchange's error: %v)", err, errors.Is(err, inner))
	}

	_, w := testWorld(t, 3, coll.Options{})
	var bars []*coll.Schedule
	for _, c := range w.Comms {
		b, err := c.Barrier()
		if err != nil {
			t.Fatal(err)
		}
		bars = append(bars, b)
		defer b.Close()
	}
	for _, b := range bars {
		if err := b.Post(); err != nil {
			t.Fatal(err)
		}
	}
	err = bars[0].Post()
	once("a post in flight", err)
	wantErr(t, "a post in flight", err, coll.ErrInFlight, "coll: rank 0: barrier posted while a run of barrier is in flight: wait for it first")
	wantErr(t, "a post in flight", err, syscall.EBUSY)
	for _, b := range bars {
		if err := b.Wait(); err != nil {
			t.Fatal(err)
		}
	}

	// An allreduce of DefaultDepth+1 elements needs more receives on one
	// queue pair per run than the default Depth holds: the refusal names
	// the rank that refuses.
	c := w.Comms[1]
	m := memory(t, c, (coll.DefaultDepth+1)*coll.ElementSize)
	_, err = c.Allreduce(m, m, coll.DefaultDepth+1, verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint)
	once("a Depth refusal", err)
	wantErr(t, "a Depth refusal", err, syscall.EINVAL, "coll: rank 1: allreduce: 65 elements: a run receives every element on one queue pair", "(Options.Depth)")
}
