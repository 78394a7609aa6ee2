//go:build linux && cgo

package coll_test

import (
	"errors"
	"fmt"
	"log"
	"sync"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/coll"
	"github.com/verbsexp/verbsexp/runtime/coll/collsoft"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/softdev"
)

// Five ranks sum one value each, three times, with one standing
// allreduce. Each goroutine runs what one process runs on an HCA: New
// with the caller's exchange (here the in-process one), Register, build
// once, then Post and Wait per run. Progress is left nil, as with an
// HCA: Wait polls the run's one completion (on softdev, polling runs the
// device). Its body is the README's "Collectives on the NIC" and the
// package documentation's per-rank flow.
func Example() {
	check := func(err error) {
		if err != nil {
			log.Fatal(err)
		}
	}
	dev, err := softdev.Open() // every rank on one software device; with an HCA each process opens its own
	check(err)
	const size = 5
	world := coll.NewInProcess(size) // with an HCA: MPI_Allgather, PMIx or a key-value store
	results := make([][]uint64, size)
	var wg sync.WaitGroup
	for rank := range size {
		wg.Add(1)
		go func() { // one rank: on an HCA, one process
			defer wg.Done()
			ctx, exchange := dev.Context(), world.For(rank)
			c, err := coll.New(ctx, rank, size, exchange, coll.Options{}) // QPs created, endpoints exchanged, QPs connected
			check(err)
			buf, err := lease.Alloc(coll.ElementSize) // one element: value and location, big-endian
			check(err)
			mem, err := c.Register(buf)
			check(err)
			sum, err := c.Allreduce(mem, mem, 1, verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint) // built once, in place
			check(err)
			for run := range 3 {
				coll.PutElement(mem.Bytes(), 0, uint64(10*run+rank), 0) // this run's input
				check(sum.Post())                                       // one ibv_exp_post_task
				check(sum.Wait())                                       // polls until the run's completion
				v, _ := coll.Element(mem.Bytes(), 0)
				results[rank] = append(results[rank], v)
			}
			check(sum.Close())
			check(mem.Close())
			check(buf.Free())
			check(c.Close()) // a *coll.LeakError if a schedule or memory was left open
		}()
	}
	wg.Wait()
	for rank, r := range results {
		fmt.Println("rank", rank, r)
	}
	check(dev.Close())
	// Output:
	// rank 0 [10 60 110]
	// rank 1 [10 60 110]
	// rank 2 [10 60 110]
	// rank 3 [10 60 110]
	// rank 4 [10 60 110]
}

// world is n ranks on one software device, driven from one goroutine
// (collsoft): post every rank's run, then wait for each.
func world(n int) (*softdev.Device, *collsoft.World) {
	dev, err := softdev.Open()
	if err != nil {
		log.Fatal(err)
	}
	w, err := collsoft.New(dev, n, coll.Options{})
	if err != nil {
		log.Fatal(err)
	}
	return dev, w
}

// register registers n bytes of fresh C memory with c. The buffer
// lives as long as the process (closeAll frees it).
func register(c *coll.Comm, n int) *coll.Memory {
	buf, err := lease.Alloc(n)
	if err != nil {
		log.Fatal(err)
	}
	m, err := c.Register(buf)
	if err != nil {
		log.Fatal(err)
	}
	bufs[m] = buf
	return m
}

var bufs = map[*coll.Memory]*lease.Buffer{}

// closeAll closes the schedules, then the memories and their buffers.
func closeAll(ss []*coll.Schedule, ms []*coll.Memory) {
	for _, s := range ss {
		if err := s.Close(); err != nil {
			log.Fatal(err)
		}
	}
	for _, m := range ms {
		if err := m.Close(); err != nil {
			log.Fatal(err)
		}
		if err := bufs[m].Free(); err != nil {
			log.Fatal(err)
		}
		delete(bufs, m)
	}
}

// runAll posts one run of every rank's schedule, then waits for each.
func runAll(ss []*coll.Schedule) {
	for _, s := range ss {
		if err := s.Post(); err != nil {
			log.Fatal(err)
		}
	}
	for _, s := range ss {
		if err := s.Wait(); err != nil {
			log.Fatal(err)
		}
	}
}

// Broadcast from rank 2 of 6: the root's bytes overwrite everyone's.
func ExampleComm_Broadcast() {
	dev, w := world(6)
	const n = len("from rank 2")
	var ss []*coll.Schedule
	var mems []*coll.Memory
	for rank, c := range w.Comms {
		mem := register(c, n)
		copy(mem.Bytes(), fmt.Sprintf("from rank %d", rank))
		s, err := c.Broadcast(2, mem, n)
		if err != nil {
			log.Fatal(err)
		}
		ss, mems = append(ss, s), append(mems, mem)
	}
	runAll(ss)
	for rank, m := range mems {
		fmt.Printf("rank %d: %s\n", rank, m.Bytes()[:n])
	}
	closeAll(ss, mems)
	fmt.Println(w.Close(), dev.Close())
	// Output:
	// rank 0: from rank 2
	// rank 1: from rank 2
	// rank 2: from rank 2
	// rank 3: from rank 2
	// rank 4: from rank 2
	// rank 5: from rank 2
	// <nil> <nil>
}

// Allgather of 3 ranks, one 4-byte block each, in place: each rank
// writes its own block before the post and finds every rank's after.
func ExampleComm_Allgather() {
	dev, w := world(3)
	var ss []*coll.Schedule
	var mems []*coll.Memory
	for rank, c := range w.Comms {
		mem := register(c, 3*4)
		copy(mem.Bytes()[4*rank:], fmt.Sprintf("<%d> ", rank)[:4])
		s, err := c.Allgather(mem, 4)
		if err != nil {
			log.Fatal(err)
		}
		ss, mems = append(ss, s), append(mems, mem)
	}
	runAll(ss)
	for rank, m := range mems {
		fmt.Printf("rank %d: %q\n", rank, m.Bytes())
	}
	// Closing the communicators with their schedules and memories still
	// open closes those too, and says so.
	var leak *coll.LeakError
	fmt.Println(errors.As(w.Close(), &leak), leak)
	fmt.Println(dev.Close())
	for _, m := range mems {
		bufs[m].Free() // the memory is closed: the buffer may go
	}
	// Output:
	// rank 0: "<0> <1> <2> "
	// rank 1: "<0> <1> <2> "
	// rank 2: "<0> <1> <2> "
	// true coll: rank 0 closed with 1 schedule and 1 memory still open (closed now)
	// <nil>
}

// MAXLOC reports the largest value and the location that came with it:
// here each rank's own number (UINT; the mlx4 and mlx5 providers accept
// MAXLOC on UINT without reporting it in the calc capabilities).
func ExampleComm_Allreduce_maxloc() {
	dev, w := world(4)
	var ss []*coll.Schedule
	var mems, outs []*coll.Memory
	for rank, c := range w.Comms {
		in, out := register(c, 2*coll.ElementSize), register(c, 2*coll.ElementSize)
		coll.PutElement(in.Bytes(), 0, uint64([]int{7, 9, 3, 8}[rank]), uint64(rank))
		coll.PutElement(in.Bytes(), 1, uint64([]int{5, 1, 6, 2}[rank]), uint64(rank))
		s, err := c.Allreduce(in, out, 2, verbs.ExpCalcOpMaxloc, verbs.ExpCalcDataTypeUint)
		if err != nil {
			log.Fatal(err)
		}
		ss, mems, outs = append(ss, s), append(mems, in, out), append(outs, out)
	}
	runAll(ss)
	for e := range 2 {
		v, loc := coll.Element(outs[3].Bytes(), e)
		fmt.Printf("element %d: max %d at rank %d\n", e, v, loc)
	}
	closeAll(ss, mems)
	fmt.Println(w.Close(), dev.Close())
	// Output:
	// element 0: max 9 at rank 1
	// element 1: max 6 at rank 2
	// <nil> <nil>
}

// A barrier run completes on a rank only once every rank has posted its
// run; the next post waits for Wait (ErrInFlight before it).
func ExampleComm_Barrier() {
	dev, w := world(3)
	var ss []*coll.Schedule
	for _, c := range w.Comms {
		s, err := c.Barrier()
		if err != nil {
			log.Fatal(err)
		}
		ss = append(ss, s)
	}
	if err := ss[0].Post(); err != nil {
		log.Fatal(err)
	}
	done, err := ss[0].Test()
	fmt.Println("rank 0 alone:", done, err)
	fmt.Println("posted again:", errors.Is(ss[0].Post(), coll.ErrInFlight))
	for _, s := range ss[1:] {
		if err := s.Post(); err != nil {
			log.Fatal(err)
		}
	}
	for rank, s := range ss {
		fmt.Println("rank", rank, "waits:", s.Wait())
	}
	w.Close()
	dev.Close()
	// Output:
	// rank 0 alone: false <nil>
	// posted again: true
	// rank 0 waits: <nil>
	// rank 1 waits: <nil>
	// rank 2 waits: <nil>
}
