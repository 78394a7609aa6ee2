//go:build linux && cgo

// Command allreduce reduces -count 64-bit values per rank across -ranks
// ranks with a standing allreduce of runtime/coll, on the software
// device: every rank's schedule is built once (recursive doubling from
// CALC sends and waits, any number of ranks) and posted once per
// allreduce, and the device runs it to the end without the CPU. Each
// allreduce gets fresh inputs, and every rank's result is checked
// against Go's after every one.
//
// max runs as MAXLOC on UINT, the one the hardware has, over an
// order-preserving encoding of int and float values; it reports the
// largest value and the rank it came from (the lowest among equals).
//
//	go run ./examples/allreduce -ranks 12 -op sum -type float -iters 100
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/internal/examplecli"
	"github.com/verbsexp/verbsexp/runtime/coll"
	"github.com/verbsexp/verbsexp/runtime/coll/collsoft"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/softdev"
)

func main() {
	examplecli.Usage("allreduce", "Reduces -count 64-bit values per rank across -ranks ranks with a standing\nallreduce of runtime/coll on the software device, -iters times, checking\nevery rank's result against Go's each time.")
	ranks := flag.Int("ranks", 8, "number of ranks, 1 or more")
	op := flag.String("op", "sum", "sum, max (MAXLOC), and, or, xor")
	typ := flag.String("type", "int", "int, uint or float")
	count := flag.Int("count", 1, "values per rank (allreduce elements), 1 to 64")
	iters := flag.Int("iters", 100, "allreduces to run (the schedule is posted again for each)")
	flag.Parse()
	o, ok := ops[*op]
	if !ok {
		fmt.Fprintf(os.Stderr, "allreduce: -op %s: not an operation the device reduces with; choose %s\n", *op, strings.Join(slices.Sorted(maps.Keys(ops)), ", "))
		os.Exit(2)
	}
	t, ok := types[*typ]
	if !ok {
		fmt.Fprintf(os.Stderr, "allreduce: -type %s: not a data type the device reduces; choose %s\n", *typ, strings.Join(slices.Sorted(maps.Keys(types)), ", "))
		os.Exit(2)
	}
	if err := run(*ranks, *count, o, t, *iters, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "allreduce:", err)
		os.Exit(1)
	}
}

var ops = map[string]verbs.ExpCalcOp{
	"sum": verbs.ExpCalcOpAdd, "max": verbs.ExpCalcOpMaxloc,
	"and": verbs.ExpCalcOpBand, "or": verbs.ExpCalcOpBor, "xor": verbs.ExpCalcOpBxor,
}

var types = map[string]verbs.ExpCalcDataType{
	"int": verbs.ExpCalcDataTypeInt, "uint": verbs.ExpCalcDataTypeUint, "float": verbs.ExpCalcDataTypeFloat,
}

// nameOf is the flag value naming v.
func nameOf[T comparable](m map[string]T, v T) string {
	for k, x := range m {
		if x == v {
			return k
		}
	}
	return fmt.Sprint(v)
}

// input is rank r's element e in allreduce it: distinct, mixed signs for
// int, sums exactly representable for float (so any order of additions
// gives the same bits), varied bit patterns for the bitwise operations,
// and different in every allreduce.
func input(r, e, it int, typ verbs.ExpCalcDataType) uint64 {
	m := (r*37 + e*11 + it*5) % 23
	switch typ {
	case verbs.ExpCalcDataTypeInt:
		return uint64(int64(m - 11))
	case verbs.ExpCalcDataTypeFloat:
		return math.Float64bits(float64(m) - 10.5)
	}
	k := uint64(r + 1 + 7*e + 131*it)
	return 0x9e3779b97f4a7c15*k ^ uint64(r)<<((r+it)%64)
}

// result is one element of an allreduce's result: the value as the
// -type names it (decoded from its key for max) and, for max, the rank
// it came from.
type result struct {
	value uint64
	rank  uint64
}

// rank is one rank's memories and schedule.
type rank struct {
	bufs    []*lease.Buffer
	in, out *coll.Memory
	s       *coll.Schedule
}

func (rk *rank) close() error {
	var errs []error
	if rk.s != nil {
		errs = append(errs, rk.s.Close())
	}
	for _, m := range []*coll.Memory{rk.in, rk.out} {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	for _, b := range rk.bufs {
		errs = append(errs, b.Free())
	}
	return errors.Join(errs...)
}

func (rk *rank) register(c *coll.Comm, n int) (*coll.Memory, error) {
	b, err := lease.Alloc(n)
	if err != nil {
		return nil, err
	}
	rk.bufs = append(rk.bufs, b)
	return c.Register(b)
}

func run(n, count int, op verbs.ExpCalcOp, typ verbs.ExpCalcDataType, iters int, out io.Writer) (err error) {
	if n < 1 || iters < 1 || count < 1 || count > coll.DefaultDepth {
		return fmt.Errorf("need -ranks ≥ 1, -iters ≥ 1 and 1 ≤ -count ≤ %d, not %d, %d and %d", coll.DefaultDepth, n, iters, count)
	}
	dev, err := softdev.Open()
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dev.Close()) }()
	w, err := collsoft.New(dev, n, coll.Options{})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, w.Close()) }()
	calcType := typ
	if op == verbs.ExpCalcOpMaxloc {
		calcType = verbs.ExpCalcDataTypeUint // the hardware's MAXLOC
	}
	ranks := make([]*rank, n)
	defer func() {
		for _, rk := range ranks {
			if rk != nil {
				err = errors.Join(err, rk.close())
			}
		}
	}()
	for r, c := range w.Comms {
		rk := &rank{}
		ranks[r] = rk
		if rk.in, err = rk.register(c, count*coll.ElementSize); err != nil {
			return err
		}
		if rk.out, err = rk.register(c, count*coll.ElementSize); err != nil {
			return err
		}
		if rk.s, err = c.Allreduce(rk.in, rk.out, count, op, calcType); err != nil {
			return err
		}
	}

	times := make([]time.Duration, iters)
	var want []result
	for it := range iters {
		for r, rk := range ranks {
			for e := range count {
				v := input(r, e, it, typ)
				if op == verbs.ExpCalcOpMaxloc {
					v = coll.OrderKey(v, typ)
				}
				coll.PutElement(rk.in.Bytes(), e, v, uint64(r)) // MAXLOC reports the rank
			}
			clear(rk.out.Bytes())
		}
		start := time.Now()
		for _, rk := range ranks {
			if err := rk.s.Post(); err != nil {
				return err
			}
		}
		for _, rk := range ranks {
			if err := rk.s.Wait(); err != nil {
				return fmt.Errorf("allreduce %d: %w", it, err)
			}
		}
		times[it] = time.Since(start)
		want = reference(n, count, it, op, typ)
		for r, rk := range ranks {
			if err := check(rk.out.Bytes(), want, op, typ); err != nil {
				return fmt.Errorf("allreduce %d, rank %d: %w", it, r, err)
			}
		}
	}
	slices.Sort(times)
	fmt.Fprintf(out, "%d ranks, %s over %s, %d per rank: every rank holds %s; %d allreduces, each one ibv_exp_post_task per rank, %.2f µs per allreduce (median)\n",
		n, nameOf(ops, op), nameOf(types, typ), count, describe(want, op, typ), iters, float64(times[iters/2].Nanoseconds())/1e3)
	return nil
}

// check compares one rank's result memory with the reference.
func check(b []byte, want []result, op verbs.ExpCalcOp, typ verbs.ExpCalcDataType) error {
	for e, w := range want {
		v, loc := coll.Element(b, e)
		got := result{value: v}
		if op == verbs.ExpCalcOpMaxloc {
			got = result{coll.FromOrderKey(v, typ), loc}
		}
		if got != w {
			return fmt.Errorf("element %d is %s, want %s", e, describe([]result{got}, op, typ), describe([]result{w}, op, typ))
		}
	}
	return nil
}

// reference computes allreduce it's result in Go.
func reference(n, count, it int, op verbs.ExpCalcOp, typ verbs.ExpCalcDataType) []result {
	out := make([]result, count)
	for e := range out {
		acc, idx := input(0, e, it, typ), uint64(0)
		for r := 1; r < n; r++ {
			v := input(r, e, it, typ)
			switch op {
			case verbs.ExpCalcOpAdd:
				if typ == verbs.ExpCalcDataTypeFloat {
					acc = math.Float64bits(math.Float64frombits(acc) + math.Float64frombits(v))
				} else {
					acc += v
				}
			case verbs.ExpCalcOpBand:
				acc &= v
			case verbs.ExpCalcOpBor:
				acc |= v
			case verbs.ExpCalcOpBxor:
				acc ^= v
			case verbs.ExpCalcOpMaxloc:
				if greater(v, acc, typ) {
					acc, idx = v, uint64(r)
				}
			}
		}
		out[e] = result{value: acc}
		if op == verbs.ExpCalcOpMaxloc {
			out[e].rank = idx
		}
	}
	return out
}

func greater(a, b uint64, typ verbs.ExpCalcDataType) bool {
	switch typ {
	case verbs.ExpCalcDataTypeInt:
		return int64(a) > int64(b)
	case verbs.ExpCalcDataTypeUint:
		return a > b
	}
	return math.Float64frombits(a) > math.Float64frombits(b)
}

// describe prints results as the -op and -type read them (the first
// four of a longer vector).
func describe(rs []result, op verbs.ExpCalcOp, typ verbs.ExpCalcDataType) string {
	var parts []string
	for i, r := range rs {
		if i == 4 {
			parts = append(parts, "…")
			break
		}
		s := fmt.Sprint(r.value)
		switch {
		case op == verbs.ExpCalcOpBand || op == verbs.ExpCalcOpBor || op == verbs.ExpCalcOpBxor:
			s = fmt.Sprintf("%#016x", r.value)
		case typ == verbs.ExpCalcDataTypeInt:
			s = fmt.Sprint(int64(r.value))
		case typ == verbs.ExpCalcDataTypeFloat:
			s = fmt.Sprint(math.Float64frombits(r.value))
		}
		if op == verbs.ExpCalcOpMaxloc {
			s += fmt.Sprintf(" at rank %d", r.rank)
		}
		parts = append(parts, s)
	}
	if len(rs) == 1 {
		return parts[0]
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
