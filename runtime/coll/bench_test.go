//go:build linux && cgo

package coll

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/internal/sidebyside"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/softdev"
)

// The benchmarked sizes: small collectives, where the cost is the
// steps, not the bytes.
const (
	benchElements = 1  // allreduce: one 8-byte value (ADD on UINT)
	benchBytes    = 64 // broadcast: the message; allgather: each rank's block
)

// benchCollective is one collective as both sides run it: its plan (the
// stepwise side interprets it), the schedule coll builds from the same
// plan, and the fresh input of run iter and the check of its output.
type benchCollective struct {
	name  string
	plan  stepPlan
	build func(c *Comm, in, out *Memory) (*Schedule, error)
	fill  func(rank, size int, iter uint64, in, out []byte)
	check func(rank, size int, iter uint64, out []byte) error
}

// stamp is word i of rank r's data in run iter: every run's differs, so
// a stale buffer fails the check.
func stamp(iter uint64, r, i int) uint64 { return iter<<32 | uint64(r)<<16 | uint64(i) }

func fillStamps(b []byte, iter uint64, r int) {
	for i := 0; i < len(b)/8; i++ {
		binary.BigEndian.PutUint64(b[i*8:], stamp(iter, r, i))
	}
}

func checkStamps(b []byte, iter uint64, r int) error {
	for i := 0; i < len(b)/8; i++ {
		if got := binary.BigEndian.Uint64(b[i*8:]); got != stamp(iter, r, i) {
			return fmt.Errorf("word %d is %#x, want %#x", i, got, stamp(iter, r, i))
		}
	}
	return nil
}

// arValue is rank r's input of run iter; the sum over the ranks is
// arSum.
func arValue(iter uint64, r int) uint64 { return iter<<20 + uint64(r) + 1 }
func arSum(iter uint64, size int) uint64 {
	return uint64(size)*iter<<20 + uint64(size*(size+1)/2)
}

func benchCollectives(op verbs.ExpCalcOp, typ verbs.ExpCalcDataType) []benchCollective {
	return []benchCollective{benchBarrier(), benchAllreduce(benchElements, op, typ), benchBroadcast(benchBytes), benchAllgather(benchBytes)}
}

func benchBarrier() benchCollective {
	return benchCollective{
		name:  "barrier",
		plan:  func(rank, size int) (*plan, [2]int, int) { return barrierPlan(rank, size), [2]int{}, 0 },
		build: func(c *Comm, _, _ *Memory) (*Schedule, error) { return c.Barrier() },
	}
}

// benchAllreduce reduces count elements with op; the checks are ADD's.
func benchAllreduce(count int, op verbs.ExpCalcOp, typ verbs.ExpCalcDataType) benchCollective {
	return benchCollective{
		name: "allreduce",
		plan: func(rank, size int) (*plan, [2]int, int) {
			pl, scratch := allreducePlan(rank, size, count, op, typ)
			n := count * ElementSize
			return pl, [2]int{n, n}, scratch
		},
		build: func(c *Comm, in, out *Memory) (*Schedule, error) {
			return c.Allreduce(in, out, count, op, typ)
		},
		fill: func(rank, _ int, iter uint64, in, _ []byte) {
			for e := range count {
				PutElement(in, e, arValue(iter, rank)+uint64(e), 0)
			}
		},
		check: func(_, size int, iter uint64, out []byte) error {
			for e := range count {
				if v, _ := Element(out, e); v != arSum(iter, size)+uint64(size*e) {
					return fmt.Errorf("element %d is %d, want %d", e, v, arSum(iter, size)+uint64(size*e))
				}
			}
			return nil
		},
	}
}

// benchBroadcast broadcasts n bytes (a multiple of 8) from rank 0.
func benchBroadcast(n int) benchCollective {
	return benchCollective{
		name: "broadcast",
		plan: func(rank, size int) (*plan, [2]int, int) {
			return broadcastPlan(rank, size, 0, n), [2]int{0, n}, 0
		},
		build: func(c *Comm, _, out *Memory) (*Schedule, error) { return c.Broadcast(0, out, n) },
		fill: func(rank, _ int, iter uint64, _, out []byte) {
			if rank == 0 {
				fillStamps(out[:n], iter, 0)
			}
		},
		check: func(_, _ int, iter uint64, out []byte) error { return checkStamps(out[:n], iter, 0) },
	}
}

// benchAllgather gathers a block of block bytes (a multiple of 8) from
// every rank.
func benchAllgather(block int) benchCollective {
	return benchCollective{
		name: "allgather",
		plan: func(rank, size int) (*plan, [2]int, int) {
			return allgatherPlan(rank, size, block), [2]int{0, size * block}, 0
		},
		build: func(c *Comm, _, out *Memory) (*Schedule, error) { return c.Allgather(out, block) },
		fill: func(rank, _ int, iter uint64, _, out []byte) {
			fillStamps(out[rank*block:(rank+1)*block], iter, rank)
		},
		check: func(_, size int, iter uint64, out []byte) error {
			for r := range size {
				if err := checkStamps(out[r*block:(r+1)*block], iter, r); err != nil {
					return fmt.Errorf("block %d: %w", r, err)
				}
			}
			return nil
		},
	}
}

// benchSide is one way of running a collective on every rank: run does
// one collective (fresh input, the collective, every rank's output
// checked), calls counts the cgo calls so far.
type benchSide interface {
	run() error
	calls() int64
	close() error
}

// offloaded runs coll's schedules: one Post per rank, then each rank's
// Wait. The Wait is spelled out (Test, and Progress when a Test finds the
// run incomplete, as Wait does with collsoft's Progress) so that its
// Tests can be counted; on softdev every poll runs the device, so the
// first Test after every rank has posted finds its run complete.
type offloaded struct {
	coll    benchCollective
	dev     *softdev.Device
	comms   []*Comm
	scheds  []*Schedule
	in, out []*Memory // by rank; nil where the collective has none
	bufs    []*lease.Buffer
	iter    uint64
	ncalls  int64
}

// newOffloaded builds size communicators on a device of their own, each
// by its own goroutine as separate processes would (collsoft.World does
// the same; this file is package coll, which collsoft imports), and the
// collective's schedule on each.
func newOffloaded(bc benchCollective, size int) (o *offloaded, err error) {
	o = &offloaded{coll: bc, comms: make([]*Comm, size), in: make([]*Memory, size), out: make([]*Memory, size)}
	defer func() {
		if err != nil {
			err = errors.Join(err, o.close())
			o = nil
		}
	}()
	if o.dev, err = softdev.Open(softdev.SyncCompletions()); err != nil { // the call counts assume a poll shows what its run completed
		return nil, err
	}
	if o.comms, err = NewLocal(size, func(int) *verbs.Context { return o.dev.Context() }, Options{}); err != nil {
		return nil, err
	}
	for r, c := range o.comms {
		_, need, _ := bc.plan(r, size)
		mem := func(n int) (*Memory, error) {
			if n == 0 {
				return nil, nil
			}
			buf, err := lease.Alloc(n)
			if err != nil {
				return nil, err
			}
			o.bufs = append(o.bufs, buf)
			return c.Register(buf)
		}
		if o.in[r], err = mem(need[0]); err != nil {
			return nil, err
		}
		if o.out[r], err = mem(need[1]); err != nil {
			return nil, err
		}
		s, err := bc.build(c, o.in[r], o.out[r])
		if err != nil {
			return nil, err
		}
		o.scheds = append(o.scheds, s)
	}
	return o, nil
}

func bytesOf(m *Memory) []byte {
	if m == nil {
		return nil
	}
	return m.Bytes()
}

func (o *offloaded) run() error {
	o.iter++
	size := len(o.comms)
	if o.coll.fill != nil {
		for r := range size {
			o.coll.fill(r, size, o.iter, bytesOf(o.in[r]), bytesOf(o.out[r]))
		}
	}
	for _, s := range o.scheds {
		o.ncalls++
		if err := s.Post(); err != nil {
			return err
		}
	}
	for _, s := range o.scheds {
		for polls := 0; ; polls++ {
			o.ncalls++
			done, err := s.Test()
			if err != nil {
				return err
			}
			if done {
				break
			}
			if polls > 0 {
				return fmt.Errorf("offloaded: rank %d: the device is idle and the run is not complete", s.c.rank)
			}
			if _, err := o.dev.Progress(); err != nil {
				return fmt.Errorf("offloaded: rank %d: %w", s.c.rank, err)
			}
		}
	}
	if o.coll.check != nil {
		for r := range size {
			if err := o.coll.check(r, size, o.iter, bytesOf(o.out[r])); err != nil {
				return fmt.Errorf("offloaded %s: run %d, rank %d: %w", o.coll.name, o.iter, r, err)
			}
		}
	}
	return nil
}

func (o *offloaded) calls() int64 { return o.ncalls }

func (o *offloaded) close() error {
	var errs []error
	for _, s := range o.scheds {
		errs = append(errs, s.Close())
	}
	for _, ms := range [][]*Memory{o.in, o.out} {
		for _, m := range ms {
			if m != nil {
				errs = append(errs, m.Close())
			}
		}
	}
	for _, c := range o.comms {
		if c != nil {
			errs = append(errs, c.Close())
		}
	}
	for _, b := range o.bufs {
		errs = append(errs, b.Free())
	}
	if o.dev != nil {
		errs = append(errs, o.dev.Close())
	}
	return errors.Join(errs...)
}

// stepwise runs the same plans from Go (stepwise_test.go).
type stepwise struct {
	coll benchCollective
	w    *stepWorld
	iter uint64
}

func newStepwise(bc benchCollective, size int) (*stepwise, error) {
	w, err := newStepWorld(size, bc.plan)
	if err != nil {
		return nil, err
	}
	return &stepwise{coll: bc, w: w}, nil
}

func (s *stepwise) run() error {
	s.iter++
	size := len(s.w.ranks)
	if s.coll.fill != nil {
		for _, r := range s.w.ranks {
			s.coll.fill(r.rank, size, s.iter, r.mem[memIn], r.mem[memOut])
		}
	}
	if err := s.w.run(); err != nil {
		return err
	}
	if s.coll.check != nil {
		for _, r := range s.w.ranks {
			if err := s.coll.check(r.rank, size, s.iter, r.mem[memOut]); err != nil {
				return fmt.Errorf("stepwise %s: run %d, rank %d: %w", s.coll.name, s.iter, r.rank, err)
			}
		}
	}
	return nil
}

func (s *stepwise) calls() int64 { return s.w.calls }
func (s *stepwise) close() error { return s.w.close() }

// BenchmarkCollective is the cost of one collective over N ranks on
// softdev, all ranks driven from one goroutine, for each collective and
// N = 2, 8, 32, two ways: "offloaded" is coll's standing schedule (one
// Post per rank, then one Wait per rank), "stepwise" the same plan run
// from Go over plain RC QPs (post, poll, compute, post: stepwise_test.go).
// Each reports ns/op and allocs/op for the whole collective (every rank)
// and cgo-calls/op, the calls into the verbs wrappers and coll's Post and
// Test; "side-by-side" runs both interleaved (internal/sidebyside) and
// prints the medians and the ratio stepwise/offloaded.
//
// softdev executes the device in the poller's thread, so the offloaded
// ns/op includes the device's work, which an HCA does off the CPU; the
// cgo calls (what the CPU does per collective) are the figure that
// carries over to hardware.
func BenchmarkCollective(b *testing.B) {
	for _, bc := range benchCollectives(verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint) {
		b.Run(bc.name, func(b *testing.B) {
			for _, size := range []int{2, 8, 32} {
				b.Run(fmt.Sprintf("N=%d", size), func(b *testing.B) { benchPair(b, bc, size) })
			}
		})
	}
}

func benchPair(b *testing.B, bc benchCollective, size int) {
	off, err := newOffloaded(bc, size)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := off.close(); err != nil {
			b.Error(err)
		}
	}()
	step, err := newStepwise(bc, size)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := step.close(); err != nil {
			b.Error(err)
		}
	}()
	sides := []struct {
		name string
		side benchSide
	}{{"offloaded", off}, {"stepwise", step}}
	perOp := map[string]float64{}
	for _, s := range sides {
		b.Run(s.name, func(b *testing.B) {
			if err := s.side.run(); err != nil { // warm: the first run touches every queue
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			c0 := s.side.calls()
			for range b.N {
				if err := s.side.run(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			perOp[s.name] = float64(s.side.calls()-c0) / float64(b.N)
			b.ReportMetric(perOp[s.name], "cgo-calls/op")
		})
	}
	runN := func(s benchSide) func(int) error {
		return func(n int) error {
			for range n {
				if err := s.run(); err != nil {
					return err
				}
			}
			return nil
		}
	}
	var res sidebyside.Result
	b.Run("side-by-side", func(b *testing.B) {
		// Rounds of about the same length for every N: a run at N=32 is
		// some hundred times one at N=2.
		res = sidebyside.Bench(b, max(1, 128/size),
			sidebyside.Way{Name: "offloaded", Run: runN(off)},
			sidebyside.Way{Name: "stepwise", Run: runN(step)})
		b.ReportMetric(res.Ratio("stepwise", "offloaded"), "stepwise/offloaded")
	})
	if res.Names != nil {
		fmt.Printf("Collective %s N=%d (interleaved medians): %s; stepwise/offloaded %.2f; cgo calls per collective: offloaded %.1f, stepwise %.1f (its posts and one poll per wait: %d)\n",
			bc.name, size, res.Summary(), res.Ratio("stepwise", "offloaded"), perOp["offloaded"], perOp["stepwise"], stepLeast(step.w))
	}
}

// TestStepwiseMatchesOffloaded runs every collective both ways for rank
// counts with and without extra ranks and checks every run's output
// (fill and check as in the benchmark), that the stepwise driver's
// reductions give the device's bytes for every op and type (the same
// plan, so the same operands in the same order: FLOAT ADD included),
// that both sides' call counts are what their designs say, and that a
// run allocates nothing on either side.
func TestStepwiseMatchesOffloaded(t *testing.T) {
	for _, size := range []int{2, 3, 5, 8} {
		for _, bc := range benchCollectives(verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint) {
			t.Run(fmt.Sprintf("%s/N=%d", bc.name, size), func(t *testing.T) {
				off, step := benchSides(t, bc, size)
				for i := 0; i < 3; i++ {
					if err := off.run(); err != nil {
						t.Fatal(err)
					}
					if err := step.run(); err != nil {
						t.Fatal(err)
					}
				}
				c0, s0 := off.calls(), step.calls()
				if err := off.run(); err != nil {
					t.Fatal(err)
				}
				if err := step.run(); err != nil {
					t.Fatal(err)
				}
				// Post and one Test per rank: the first Test runs the device to the end.
				if got := off.calls() - c0; got != int64(2*size) {
					t.Errorf("offloaded: %d cgo calls, want %d (a Post and a Test per rank)", got, 2*size)
				}
				if got, least := step.calls()-s0, stepLeast(step.w); got < least {
					t.Errorf("stepwise: %d cgo calls, fewer than its %d posts and successful polls", got, least)
				}
				for _, s := range []benchSide{off, step} {
					if a := testing.AllocsPerRun(5, func() {
						if err := s.run(); err != nil {
							t.Fatal(err)
						}
					}); a != 0 {
						t.Errorf("%T: %v allocations per run, want 0", s, a)
					}
				}
			})
		}
	}
	type opType struct {
		op  verbs.ExpCalcOp
		typ verbs.ExpCalcDataType
	}
	var all []opType
	for _, typ := range []verbs.ExpCalcDataType{verbs.ExpCalcDataTypeInt, verbs.ExpCalcDataTypeUint, verbs.ExpCalcDataTypeFloat} {
		for _, op := range []verbs.ExpCalcOp{verbs.ExpCalcOpAdd, verbs.ExpCalcOpBand, verbs.ExpCalcOpBxor, verbs.ExpCalcOpBor} {
			all = append(all, opType{op, typ})
		}
	}
	all = append(all, opType{verbs.ExpCalcOpMaxloc, verbs.ExpCalcDataTypeUint})
	for _, ot := range all {
		t.Run(fmt.Sprintf("allreduce/%v/%v", ot.op, ot.typ), func(t *testing.T) {
			const size = 7 // three extra ranks
			bc := benchCollectives(ot.op, ot.typ)[1]
			bc.fill, bc.check = nil, nil // the inputs are written below, the outputs compared
			off, step := benchSides(t, bc, size)
			for it := range 3 {
				for r := range size {
					// Values with ties and large spans, so MAXLOC's ids and
					// FLOAT's rounding both matter.
					v := uint64(r%3)*0x9e3779b97f4a7c15 ^ uint64(it)
					if ot.typ == verbs.ExpCalcDataTypeFloat {
						v = math.Float64bits(float64(r%3)*1e16 + 0.1*float64(r) + float64(it))
					}
					PutElement(off.in[r].Bytes(), 0, v, uint64(size-r))
					PutElement(step.w.ranks[r].mem[memIn], 0, v, uint64(size-r))
				}
				if err := off.run(); err != nil {
					t.Fatal(err)
				}
				if err := step.run(); err != nil {
					t.Fatal(err)
				}
				n := 8
				if ot.op == verbs.ExpCalcOpMaxloc {
					n = 16
				}
				for r := range size {
					got, want := step.w.ranks[r].mem[memOut][:n], off.out[r].Bytes()[:n]
					if string(got) != string(want) {
						t.Fatalf("run %d rank %d: stepwise %x, device %x", it, r, got, want)
					}
				}
			}
		})
	}
}

// stepLeast is the stepwise side's fewest calls for a run: its posts
// and, per wait and for the sends, one poll that finds what it needs.
func stepLeast(w *stepWorld) int64 {
	var n int64
	for _, r := range w.ranks {
		n += int64(len(r.recvs))
		for _, o := range r.prog {
			if o.kind != stepLocal {
				n++ // a post, or a wait's poll
			}
		}
		if r.sendQPs > 0 {
			n++
		}
	}
	return n
}

func benchSides(t *testing.T, bc benchCollective, size int) (*offloaded, *stepwise) {
	off, err := newOffloaded(bc, size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := off.close(); err != nil {
			t.Error(err)
		}
	})
	step, err := newStepwise(bc, size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := step.close(); err != nil {
			t.Error(err)
		}
	})
	return off, step
}

// TestStepwiseStuck: a plan whose send is missing (rank 0 of a barrier
// never sends its first message) is reported naming the rank that waits
// and what for, not a hang.
func TestStepwiseStuck(t *testing.T) {
	w, err := newStepWorld(4, func(rank, size int) (*plan, [2]int, int) {
		pl := barrierPlan(rank, size)
		if rank == 0 {
			for i, o := range pl.ops {
				if o.kind == opSend {
					pl.ops = append(pl.ops[:i], pl.ops[i+1:]...)
					break
				}
			}
		}
		return pl, [2]int{}, 0
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := w.close(); err != nil {
			t.Error(err)
		}
	}()
	err = w.run()
	if want := "stepwise: rank 1 cannot complete: waits for 1 receives from rank 0, has 0"; err == nil || err.Error() != want {
		t.Fatalf("run: %v, want %q", err, want)
	}
}
