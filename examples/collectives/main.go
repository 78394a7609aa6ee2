//go:build linux && cgo

// Command collectives runs the four standing collectives of
// runtime/coll (barrier, allreduce, broadcast from -root, allgather),
// -iters runs each, and checks every result. Every schedule is built
// once and posted once per run per rank; each run gets fresh data and
// its result is checked on every rank: the barrier completes on no rank
// before the last rank has posted, the allreduce holds Go's sum, the
// broadcast the root's bytes, the allgather every rank's block, and no
// collective writes past the bytes it was given. It prints the median
// time per collective.
//
// By default its -ranks ranks are goroutines of this process, all on one
// software device (from the first rank's post to the last rank's
// completion; the barrier's time includes the check that polls every
// other rank once before the last posts):
//
//	go run ./examples/collectives -ranks 12 -iters 100 -root 5
//
// With -launch env each process is one rank of a job a launcher started
// (coll.FromEnv: mpirun or srun with PMIx, or MASTER_ADDR/MASTER_PORT,
// RANK and WORLD_SIZE for the TCP rendezvous), on its own software
// device (at $VERBSEXP_SOFTDEV_ADDR, or a loopback address of its own);
// the barrier's last rank of each run posts 2 ms after the others, and
// the median of the others' runs must show they waited for it. Rank 0
// prints the table (its own times) and the job's RNR NAKs and
// retransmissions (coll's ready messages keep both at 0):
//
//	mpirun -np 4 collectives -launch env
//	mpirun -np 4 softdev exec -- collectives -launch env -device verbs
//	MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 WORLD_SIZE=4 RANK=r collectives -launch env  (r = 0…3)
package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/verbsexp/verbsexp/abiutil/dynlib"
	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/internal/examplecli"
	"github.com/verbsexp/verbsexp/runtime/coll"
	"github.com/verbsexp/verbsexp/runtime/coll/collsoft"
	_ "github.com/verbsexp/verbsexp/runtime/coll/pmix" // FromEnv under mpirun and srun
	"github.com/verbsexp/verbsexp/runtime/device"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/softdev"
)

// config is what the flags set.
type config struct {
	ranks, iters, root int
	count              int    // allreduce elements
	bytes              int    // broadcast length
	block              int    // allgather bytes per rank
	launch             string // "": in process; "env": one rank per process (coll.FromEnv)
	device             string // "": softdev in process; "verbs[:NAME]": through libibverbs
}

func main() {
	var c config
	examplecli.Usage("collectives", "Runs the four standing collectives of runtime/coll (barrier, allreduce,\nbroadcast, allgather) over -ranks ranks on the software device, -iters\nruns each, checks every result and prints the median time per collective.\nWith -launch env each process is one rank of a job a launcher started\n(mpirun, srun --mpi=pmix, or RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT),\non a softdev device of its own, or with -device verbs on the device\nlibibverbs lists (an HCA, or softdev under softdev exec).")
	flag.StringVar(&c.launch, "launch", "", `"env": this process is one rank of a job its launcher started (mpirun, srun, or MASTER_ADDR/MASTER_PORT with RANK and WORLD_SIZE); -ranks is then the job's size`)
	flag.StringVar(&c.device, "device", "", `with -launch env: "" (a softdev device in this process), "verbs" (the first device libibverbs lists: an HCA, or softdev under softdev exec), or "verbs:NAME"`)
	flag.IntVar(&c.ranks, "ranks", 8, "number of ranks, 1 or more (in one process)")
	flag.IntVar(&c.iters, "iters", 100, "runs of each collective")
	flag.IntVar(&c.root, "root", 0, "the broadcast's root rank")
	flag.IntVar(&c.count, "count", 4, "allreduce elements per rank (uint64 sums), 1 to 64")
	flag.IntVar(&c.bytes, "bytes", 256, "bytes the broadcast sends")
	flag.IntVar(&c.block, "block", 32, "bytes each rank contributes to the allgather")
	flag.Parse()
	if err := run(c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "collectives:", err)
		os.Exit(1)
	}
}

// guard bytes follow every buffer's used part; a collective that writes
// past what it was given changes them.
const guard = 64

const guardByte = 0xa5

// collective is one schedule per rank and how to run and check it.
type collective struct {
	name string
	ss   []*coll.Schedule
	// prepare writes run it's input on every rank; post posts every
	// rank's run (the barrier checks in between); check verifies every
	// rank's result.
	prepare func(it int)
	post    func() error
	check   func(it int) error
	times   []time.Duration
}

// world is the device, this process's ranks' communicators and what
// they registered.
type world struct {
	dev   *softdev.Device // in process, or nil
	vdev  *device.Device  // through libibverbs (-device verbs), or nil
	w     *collsoft.World // in one process
	job   *coll.Job       // -launch env
	local []*coll.Comm    // the ranks this process runs (all of them, or its own)
	bufs  []*lease.Buffer
	mems  []*coll.Memory
	all   []*collective
}

// inProcess is a world of n ranks in this process, on one device.
func inProcess(n int) (*world, error) {
	// Synchronous completions: the early barrier check polls each rank
	// once and counts on that poll to show what its run completed.
	dev, err := softdev.Open(softdev.SyncCompletions())
	if err != nil {
		return nil, err
	}
	w := &world{dev: dev}
	if w.w, err = collsoft.New(dev, n, coll.Options{}); err != nil {
		return nil, errors.Join(err, dev.Close())
	}
	w.local = w.w.Comms
	return w, nil
}

// register gives local rank i n bytes followed by the guard.
func (w *world) register(i, n int) (*coll.Memory, error) {
	b, err := lease.Alloc(n + guard)
	if err != nil {
		return nil, err
	}
	w.bufs = append(w.bufs, b)
	m, err := w.local[i].Register(b)
	if err != nil {
		return nil, err
	}
	w.mems = append(w.mems, m)
	return m, nil
}

func (w *world) close() error {
	var errs []error
	for _, c := range w.all {
		for _, s := range c.ss {
			errs = append(errs, s.Close())
		}
	}
	for _, m := range w.mems {
		errs = append(errs, m.Close())
	}
	for _, b := range w.bufs {
		errs = append(errs, b.Free())
	}
	if w.w != nil {
		errs = append(errs, w.w.Close())
	} else {
		for _, c := range w.local {
			errs = append(errs, c.Close())
		}
	}
	if w.job != nil {
		errs = append(errs, w.job.Close())
	}
	if w.vdev != nil {
		return errors.Join(append(errs, w.vdev.Close())...)
	}
	return errors.Join(append(errs, w.dev.Close())...)
}

func run(cfg config, out io.Writer) (err error) {
	if cfg.launch == "env" {
		return runRank(cfg, out)
	}
	switch {
	case cfg.launch != "":
		return fmt.Errorf("-launch %q: the only launch is env (one rank per process, from the launcher's environment)", cfg.launch)
	case cfg.ranks < 1 || cfg.iters < 1:
		return fmt.Errorf("need -ranks ≥ 1 and -iters ≥ 1, not %d and %d", cfg.ranks, cfg.iters)
	case cfg.root < 0 || cfg.root >= cfg.ranks:
		return fmt.Errorf("-root %d is not a rank of %d", cfg.root, cfg.ranks)
	case cfg.count < 1 || cfg.count > coll.DefaultDepth || cfg.bytes < 1 || cfg.block < 1:
		return fmt.Errorf("need 1 ≤ -count ≤ %d, -bytes ≥ 1 and -block ≥ 1", coll.DefaultDepth)
	}
	w, err := inProcess(cfg.ranks)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, w.close()) }()
	if err := w.build(cfg); err != nil {
		return err
	}
	for _, c := range w.all {
		for it := range cfg.iters {
			c.prepare(it)
			start := time.Now()
			if err := c.post(); err != nil {
				return fmt.Errorf("%s, run %d: %w", c.name, it, err)
			}
			for _, s := range c.ss {
				if err := s.Wait(); err != nil {
					return fmt.Errorf("%s, run %d: %w", c.name, it, err)
				}
			}
			c.times = append(c.times, time.Since(start))
			if err := c.check(it); err != nil {
				return fmt.Errorf("%s, run %d: %w", c.name, it, err)
			}
		}
	}
	fmt.Fprintf(out, "%d ranks on softdev, %d runs of each collective, every result checked on every rank:\n", cfg.ranks, cfg.iters)
	w.table(out)
	return nil
}

func (w *world) build(cfg config) error {
	for _, build := range []func(*world, config) (*collective, error){barrier, allreduce, broadcast, allgather} {
		c, err := build(w, cfg)
		if err != nil {
			return err
		}
		w.all = append(w.all, c)
	}
	return nil
}

func (w *world) table(out io.Writer) {
	for _, c := range w.all {
		fmt.Fprintf(out, "  %-36s %10.2f µs per collective (median)\n", c.name, median(c.times))
	}
}

// barrierLag is how much later than the others the barrier's last rank
// of a run posts, across processes.
const barrierLag = 2 * time.Millisecond

// runRank runs this process's rank of a launched job.
func runRank(cfg config, out io.Writer) (err error) {
	job, err := coll.FromEnv(coll.JobOptions{})
	if err != nil {
		return err
	}
	w := &world{job: job}
	var ctx *verbs.Context
	switch name, ok := strings.CutPrefix(cfg.device, "verbs"); {
	case cfg.device == "":
		if w.dev, err = softdev.Open(); err != nil {
			return errors.Join(err, job.Close())
		}
		ctx = w.dev.Context()
	case ok && (name == "" || name[0] == ':'):
		if w.vdev, err = device.Open(strings.TrimPrefix(name, ":")); err != nil {
			return errors.Join(err, job.Close())
		}
		ctx = w.vdev.Context()
	default:
		return errors.Join(fmt.Errorf(`-device %q: want "", "verbs" or "verbs:NAME"`, cfg.device), job.Close())
	}
	defer func() { err = errors.Join(err, w.close()) }()
	cfg.ranks = job.Size()
	switch {
	case cfg.iters < 1:
		return fmt.Errorf("need -iters ≥ 1, not %d", cfg.iters)
	case cfg.root < 0 || cfg.root >= cfg.ranks:
		return fmt.Errorf("-root %d is not a rank of the job's %d", cfg.root, cfg.ranks)
	case cfg.count < 1 || cfg.count > coll.DefaultDepth || cfg.bytes < 1 || cfg.block < 1:
		return fmt.Errorf("need 1 ≤ -count ≤ %d, -bytes ≥ 1 and -block ≥ 1", coll.DefaultDepth)
	}
	start := time.Now()
	c, err := coll.New(ctx, job.Rank(), job.Size(), job.Exchange, coll.Options{})
	if err != nil {
		return fmt.Errorf("rank %d (%s): %w", job.Rank(), job.Launcher, err)
	}
	boot := time.Since(start)
	w.local = []*coll.Comm{c}
	if err := w.build(cfg); err != nil {
		return err
	}
	for _, col := range w.all {
		for it := range cfg.iters {
			col.prepare(it)
			t0 := time.Now()
			if err := col.post(); err != nil {
				return fmt.Errorf("rank %d: %s, run %d: %w", c.Rank(), col.name, it, err)
			}
			if err := col.ss[0].Wait(); err != nil {
				return fmt.Errorf("rank %d: %s, run %d: %w", c.Rank(), col.name, it, err)
			}
			col.times = append(col.times, time.Since(t0))
			if err := col.check(it); err != nil {
				return fmt.Errorf("rank %d: %s, run %d: %w", c.Rank(), col.name, it, err)
			}
		}
	}
	if w.dev == nil {
		// Every verb went to the library: no stand-in of an in-process
		// device is registered in this process.
		if n := dynlib.ProvidedCount(); n != 0 {
			return fmt.Errorf("rank %d: %d functions served by stand-ins on a device opened through libibverbs", c.Rank(), n)
		}
		if c.Rank() == 0 {
			fmt.Fprintf(out, "%d ranks, one per process (%s), each on device %s through libibverbs (no stand-in); New took %v; %d runs of each collective, every result checked on every rank; rank 0's times:\n",
				cfg.ranks, job.Launcher, w.vdev.Name(), boot.Round(time.Microsecond), cfg.iters)
			w.table(out)
		}
		return nil
	}
	// What the wire did, summed over the ranks: a run whose sends
	// outran a peer's receives shows as RNR NAKs (counters an in-process
	// softdev device has; through libibverbs a device has none to give).
	ws := w.dev.Wire().QPs
	all, err := job.Exchange(binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, ws.RNRNaksReceived), ws.Retransmitted))
	if err != nil {
		return fmt.Errorf("rank %d: exchange the wire counters: %w", c.Rank(), err)
	}
	var rnr, retrans uint64
	for r, b := range all {
		if len(b) != 16 {
			return fmt.Errorf("rank %d sent %d bytes of wire counters, not 16", r, len(b))
		}
		rnr, retrans = rnr+binary.BigEndian.Uint64(b), retrans+binary.BigEndian.Uint64(b[8:])
	}
	if c.Rank() == 0 {
		fmt.Fprintf(out, "%d ranks, one per process (%s), each on its own softdev device; New took %v; %d runs of each collective, every result checked on every rank; rank 0's times:\n",
			cfg.ranks, job.Launcher, boot.Round(time.Microsecond), cfg.iters)
		w.table(out)
		fmt.Fprintf(out, "  RNR NAKs received by all ranks: %d; packets sent again: %d\n", rnr, retrans)
	}
	return nil
}

// median is the middle run's time, in µs.
func median(ts []time.Duration) float64 {
	s := slices.Clone(ts)
	slices.Sort(s)
	return float64(s[len(s)/2].Nanoseconds()) / 1e3
}

// postAll posts every rank's run.
func postAll(ss []*coll.Schedule) error {
	for _, s := range ss {
		if err := s.Post(); err != nil {
			return err
		}
	}
	return nil
}

// barrier: each run one rank (a different one each run) posts last, and
// until it has, no other rank's run completes.
func barrier(w *world, cfg config) (*collective, error) {
	c := &collective{name: "barrier"}
	for _, comm := range w.local {
		s, err := comm.Barrier()
		if err != nil {
			return nil, err
		}
		c.ss = append(c.ss, s)
	}
	late := 0
	c.prepare = func(it int) { late = it * 7 % cfg.ranks }
	if w.w == nil { // one rank of a job: the late one posts barrierLag after the others
		c.name = fmt.Sprintf("barrier (one rank %v late)", barrierLag)
		me := w.local[0].Rank()
		var posted time.Time
		c.post = func() error {
			if me == late {
				time.Sleep(barrierLag)
			}
			posted = time.Now()
			return c.ss[0].Post()
		}
		// A rank's single run may finish early when the host descheduled
		// it after the last barrier (two cores, eight ranks): the median
		// of its runs where another rank was late says whether it waited.
		var waited []time.Duration
		c.check = func(it int) error {
			if me != late {
				waited = append(waited, time.Since(posted))
			}
			if it < cfg.iters-1 || len(waited) == 0 {
				return nil
			}
			if m := median(waited); m < float64(barrierLag.Microseconds())/2 {
				return fmt.Errorf("the barrier completed a median %.0f µs after this rank posted, while another rank posted %v later", m, barrierLag)
			}
			return nil
		}
		return c, nil
	}
	c.post = func() error {
		for r, s := range c.ss {
			if r != late {
				if err := s.Post(); err != nil {
					return err
				}
			}
		}
		if err := earlyBarrier(c.ss, late); err != nil {
			return err
		}
		return c.ss[late].Post()
	}
	c.check = func(int) error { return nil } // post checked it
	return c, nil
}

// earlyBarrier polls every rank but late once (each poll runs the
// software device as far as it can go) and fails if one has completed.
func earlyBarrier(ss []*coll.Schedule, late int) error {
	for r, s := range ss {
		if r == late {
			continue
		}
		done, err := s.Test()
		if err != nil {
			return err
		}
		if done {
			return fmt.Errorf("rank %d's barrier completed before rank %d had posted", r, late)
		}
	}
	return nil
}

// allreduce: uint64 sums of cfg.count elements, inputs fresh each run.
func allreduce(w *world, cfg config) (*collective, error) {
	c := &collective{name: fmt.Sprintf("allreduce (sum of %d uint64)", cfg.count)}
	n := cfg.count * coll.ElementSize
	var ins, outs []*coll.Memory
	for i, comm := range w.local {
		in, err := w.register(i, n)
		if err != nil {
			return nil, err
		}
		o, err := w.register(i, n)
		if err != nil {
			return nil, err
		}
		s, err := comm.Allreduce(in, o, cfg.count, verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint)
		if err != nil {
			return nil, err
		}
		c.ss, ins, outs = append(c.ss, s), append(ins, in), append(outs, o)
	}
	input := func(r, e, it int) uint64 { return 0x9e3779b97f4a7c15 * uint64(1+r+cfg.ranks*(e+cfg.count*it)) }
	c.prepare = func(it int) {
		for i := range ins {
			for e := range cfg.count {
				coll.PutElement(ins[i].Bytes(), e, input(w.local[i].Rank(), e, it), 0)
			}
			fill(outs[i].Bytes(), n, 0)
		}
	}
	c.post = func() error { return postAll(c.ss) }
	c.check = func(it int) error {
		for i, o := range outs {
			r := w.local[i].Rank()
			for e := range cfg.count {
				var want uint64
				for q := range cfg.ranks {
					want += input(q, e, it)
				}
				if got, _ := coll.Element(o.Bytes(), e); got != want {
					return fmt.Errorf("rank %d: element %d is %#x, want %#x", r, e, got, want)
				}
			}
			if err := guarded(o.Bytes(), n); err != nil {
				return fmt.Errorf("rank %d: %w", r, err)
			}
		}
		return nil
	}
	return c, nil
}

// broadcast: the root sends cfg.bytes fresh random bytes; every other
// rank's buffer holds other bytes before the run.
func broadcast(w *world, cfg config) (*collective, error) {
	c := &collective{name: fmt.Sprintf("broadcast (%d bytes from rank %d)", cfg.bytes, cfg.root)}
	var bufs []*coll.Memory
	for i, comm := range w.local {
		m, err := w.register(i, cfg.bytes)
		if err != nil {
			return nil, err
		}
		s, err := comm.Broadcast(cfg.root, m, cfg.bytes)
		if err != nil {
			return nil, err
		}
		c.ss, bufs = append(c.ss, s), append(bufs, m)
	}
	want := make([]byte, cfg.bytes)
	c.prepare = func(it int) {
		rnd := rand.New(rand.NewPCG(uint64(it), 1))
		for i := range want {
			want[i] = byte(rnd.Uint32())
		}
		for i, m := range bufs {
			if w.local[i].Rank() == cfg.root {
				fill(m.Bytes(), cfg.bytes, 0)
				copy(m.Bytes(), want)
			} else {
				fill(m.Bytes(), cfg.bytes, ^want[0]) // differs from the root's at least in byte 0
			}
		}
	}
	c.post = func() error { return postAll(c.ss) }
	c.check = func(int) error {
		for i, m := range bufs {
			r := w.local[i].Rank()
			if got := m.Bytes()[:cfg.bytes]; !bytes.Equal(got, want) {
				return fmt.Errorf("rank %d holds %x…, the root sent %x…", r, got[:min(8, len(got))], want[:min(8, len(want))])
			}
			if err := guarded(m.Bytes(), cfg.bytes); err != nil {
				return fmt.Errorf("rank %d: %w", r, err)
			}
		}
		return nil
	}
	return c, nil
}

// allgather: each rank writes a fresh block of its own and 0xff over
// the others' before the run.
func allgather(w *world, cfg config) (*collective, error) {
	c := &collective{name: fmt.Sprintf("allgather (%d bytes per rank)", cfg.block)}
	n := cfg.ranks * cfg.block
	var bufs []*coll.Memory
	for i, comm := range w.local {
		m, err := w.register(i, n)
		if err != nil {
			return nil, err
		}
		s, err := comm.Allgather(m, cfg.block)
		if err != nil {
			return nil, err
		}
		c.ss, bufs = append(c.ss, s), append(bufs, m)
	}
	want := make([]byte, n)
	c.prepare = func(it int) {
		rnd := rand.New(rand.NewPCG(uint64(it), 2))
		for i := range want {
			want[i] = byte(rnd.Uint32())
		}
		for i, m := range bufs {
			r := w.local[i].Rank()
			fill(m.Bytes(), n, 0xff)
			copy(m.Bytes()[r*cfg.block:(r+1)*cfg.block], want[r*cfg.block:])
		}
	}
	c.post = func() error { return postAll(c.ss) }
	c.check = func(int) error {
		for i, m := range bufs {
			r := w.local[i].Rank()
			got := m.Bytes()[:n]
			for q := range cfg.ranks {
				blk := got[q*cfg.block : (q+1)*cfg.block]
				if !bytes.Equal(blk, want[q*cfg.block:(q+1)*cfg.block]) {
					return fmt.Errorf("rank %d: block %d is %x…, rank %d wrote %x…", r, q, blk[:min(8, len(blk))], q, want[q*cfg.block:][:min(8, cfg.block)])
				}
			}
			if err := guarded(m.Bytes(), n); err != nil {
				return fmt.Errorf("rank %d: %w", r, err)
			}
		}
		return nil
	}
	return c, nil
}

// fill sets b[:used] to v and the guard after it to guardByte.
func fill(b []byte, used int, v byte) {
	for i := range b {
		if i < used {
			b[i] = v
		} else {
			b[i] = guardByte
		}
	}
}

// guarded checks the guard after b[:used].
func guarded(b []byte, used int) error {
	for i := used; i < len(b); i++ {
		if b[i] != guardByte {
			return fmt.Errorf("byte %d, past the %d the collective was given, was written (%#x)", i, used, b[i])
		}
	}
	return nil
}
