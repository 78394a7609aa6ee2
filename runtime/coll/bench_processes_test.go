//go:build linux && cgo

package coll

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/internal/multiproc"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/softdev"
)

// Collectives across processes: each rank a process of its own with its
// own softdev device (autonomous: its transport thread runs the send
// queues, as an HCA does, whether or not the host polls), two ways on
// the same device:
//
//   - offloaded: coll's standing schedule (New, then Post and
//     WaitContext; only coll's public API);
//   - stepwise: the same plan driven from Go step by step over plain RC
//     QPs connected across the processes (stepwise_processes_test.go):
//     progress only when the host calls the driver.
//
// Every run gets fresh input and every rank checks its output. Per
// collective, the ranks run the same sequence of phases (n runs each),
// in rounds that rotate the order of the phases (as internal/sidebyside
// does, so that whatever else loads the machine hits every phase
// alike); every rank times each of its runs, and rank 0 gathers every
// rank's medians at the end.
//
// Time per collective, T: from Post (the stepwise start) to the run's
// completion on the rank, runs back to back (the fill before and the
// check after are not timed); the slowest rank's median over all runs.
//
// Host-free fraction (issue 17 item 4; the overlap measure of the
// CORE-Direct papers and of NBCBench): every rank posts, keeps its
// posting thread away from the collective for C (procLoads: busy in k
// chunks with a Test after each, none once the run is complete; or
// asleep), then waits. T' is that run's time from the post to its
// completion after the compute, C_run its time in the compute chunks;
// T' - C_run is what the posting thread spent in the collective's calls
// (post, Tests, the final wait). A rank's free fraction is
//
//	(T + C_run - T') / T = 1 - median(T' - C_run) / T
//
// with T the rank's median alone: 1 when the collective completes
// entirely under the compute, 0 when none of it overlapped (T' = C + T);
// the table gives the mean over the ranks and the least rank's. C is the
// same for both sides: the slower side's median time over the warm-up
// runs (rank 0's, sent to every rank). Busy k = 1 is the papers' post,
// compute, wait; k = 10 gives a CPU-driven collective ten chances to
// progress. Busy compute on this host competes with the device threads
// of every process for the cores, which an HCA's engine does not; idle
// (nanosleep for C) leaves the cores to them, which is the nearer model
// of an HCA under a busy host: the offloaded run can progress, the
// stepwise one only as far as its first step.

// procColl is one benchmarked collective and its size.
type procColl struct {
	label string
	bc    benchCollective
}

func procCollectives() []procColl {
	add, u := verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint
	return []procColl{
		{"barrier", benchBarrier()},
		{"allreduce/1", benchAllreduce(1, add, u)},
		{"allreduce/32", benchAllreduce(32, add, u)},
		{"broadcast/64B", benchBroadcast(64)},
		{"broadcast/64KiB", benchBroadcast(64 << 10)},
		{"allgather/64B", benchAllgather(64)},
	}
}

// The sides, and the compute splits of the overlapped runs (0: alone).
const (
	sideOffloaded = iota
	sideStepwise
)

var procSideNames = [2]string{"offloaded", "stepwise"}

// procLoad is what the host does while a run is in flight: nothing
// (chunks 0: the run alone), or compute for C in chunks with a Test
// after each, busy (a loop on the clock) or idle (asleep: the core is
// free for the device threads, as an HCA needs none).
type procLoad struct {
	chunks int
	idle   bool
}

var procLoads = [4]procLoad{{0, false}, {1, false}, {10, false}, {1, true}}

func (l procLoad) String() string {
	if l.idle {
		return fmt.Sprintf("%d idle chunks", l.chunks)
	}
	return fmt.Sprintf("%d chunks", l.chunks)
}

// procParams size a measurement: Rounds of every phase, each phase of
// as many runs as fit in Budget at the slower side's warm-up time
// (between MinRuns and MaxRuns).
type procParams struct {
	Rounds, MinRuns, MaxRuns int
	Budget                   time.Duration
	Only                     string // if set, only the collective with this label
}

var procDefaults = procParams{Rounds: 7, MinRuns: 10, MaxRuns: 100, Budget: 10 * time.Millisecond}

// procResult is what the ranks measured for one collective: rank 0
// gathers every rank's figures and reports them.
type procResult struct {
	N        int
	Launcher string `json:"-"` // what started the ranks, when the table compares launchers
	Coll     string
	Runs     int     // per phase and round
	Rounds   int     //
	C        float64 // the host work of an overlapped run, ns
	Ranks    []procFigures
}

// procFigures are one rank's medians, in ns, by side, then by entry of
// procLoads.
type procFigures struct {
	Median [2][len(procLoads)]float64 // the time of a run: from its start to its completion after the compute
	Best   [2][len(procLoads)]float64 // the fastest run: no late peer, nobody descheduled
	// Busy is the median of each overlapped run's total less its time in
	// the compute chunks: what the posting thread spent in the
	// collective's calls (the post, the Tests, the final wait).
	Busy [2][len(procLoads)]float64
	// RNRNaks counts the RNR NAKs the rank's QPs received, by side:
	// sends that found the peer's receive not yet posted, each costing
	// the responder's min_rnr_timer (12: 0.64 ms), as on an HCA.
	RNRNaks [2]uint64
}

// T is a side's time per collective alone: the slowest rank's median
// (a collective is done when it is done everywhere); Best the same of
// the fastest runs.
func (r procResult) T(side int) float64 {
	return r.over(func(f procFigures) float64 { return f.Median[side][0] }, maxOf)
}
func (r procResult) Best(side int) float64 {
	return r.over(func(f procFigures) float64 { return f.Best[side][0] }, maxOf)
}

// Free is a side's host-free fraction with the host's load procLoads[k]
// chunks, the mean over the ranks of (T + C - T') / T with each run's
// own C and T' (1 - Busy / T); FreeMin the least rank's.
func (r procResult) Free(side, k int) float64 {
	return r.over(func(f procFigures) float64 { return 1 - f.Busy[side][k]/f.Median[side][0] }, sumOf) / float64(len(r.Ranks))
}
func (r procResult) FreeMin(side, k int) float64 {
	return r.over(func(f procFigures) float64 { return 1 - f.Busy[side][k]/f.Median[side][0] }, minOf)
}

// RNRNaks sums the ranks' RNR NAKs of a side.
func (r procResult) RNRNaks(side int) uint64 {
	return uint64(r.over(func(f procFigures) float64 { return float64(f.RNRNaks[side]) }, sumOf))
}

func maxOf(a, b float64) float64 { return max(a, b) }
func minOf(a, b float64) float64 { return min(a, b) }
func sumOf(a, b float64) float64 { return a + b }

func (r procResult) over(of func(procFigures) float64, combine func(a, b float64) float64) float64 {
	acc := of(r.Ranks[0])
	for _, f := range r.Ranks[1:] {
		acc = combine(acc, of(f))
	}
	return acc
}

// procSide is one way of running a collective on this process's rank.
type procSide interface {
	begin() error // fresh input, then the run starts
	test() (bool, error)
	wait() error  // until the run is complete on this rank
	check() error // the run's output
	close() error
}

type offProc struct {
	bc         benchCollective
	rank, size int
	ctx        context.Context
	s          *Schedule
	in, out    *Memory
	bufs       []*lease.Buffer
	iter       uint64
}

func newOffProc(ctx context.Context, c *Comm, bc benchCollective) (o *offProc, err error) {
	o = &offProc{bc: bc, rank: c.Rank(), size: c.Size(), ctx: ctx}
	defer func() {
		if err != nil {
			err = errors.Join(err, o.close())
			o = nil
		}
	}()
	_, need, _ := bc.plan(o.rank, o.size)
	mem := func(n int) (*Memory, error) {
		if n == 0 {
			return nil, nil
		}
		b, err := lease.Alloc(n)
		if err != nil {
			return nil, err
		}
		o.bufs = append(o.bufs, b)
		return c.Register(b)
	}
	if o.in, err = mem(need[0]); err != nil {
		return nil, err
	}
	if o.out, err = mem(need[1]); err != nil {
		return nil, err
	}
	if o.s, err = bc.build(c, o.in, o.out); err != nil {
		return nil, err
	}
	return o, nil
}

func (o *offProc) begin() error {
	o.iter++
	if o.bc.fill != nil {
		o.bc.fill(o.rank, o.size, o.iter, bytesOf(o.in), bytesOf(o.out))
	}
	return o.s.Post()
}

func (o *offProc) test() (bool, error) { return o.s.Test() }
func (o *offProc) wait() error         { return o.s.WaitContext(o.ctx) }

func (o *offProc) check() error {
	if o.bc.check == nil {
		return nil
	}
	return o.bc.check(o.rank, o.size, o.iter, bytesOf(o.out))
}

func (o *offProc) close() error {
	var errs []error
	if o.s != nil {
		errs = append(errs, o.s.Close())
	}
	for _, m := range []*Memory{o.in, o.out} {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	for _, b := range o.bufs {
		errs = append(errs, b.Free())
	}
	return errors.Join(errs...)
}

type stepProc struct {
	bc   benchCollective
	size int
	ctx  context.Context
	w    *stepWorld
	iter uint64
}

func (s *stepProc) begin() error {
	s.iter++
	if r := s.w.ranks[0]; s.bc.fill != nil {
		s.bc.fill(r.rank, s.size, s.iter, r.mem[memIn], r.mem[memOut])
	}
	return s.w.start()
}

func (s *stepProc) test() (bool, error) { return s.w.test() }
func (s *stepProc) wait() error         { return s.w.wait(s.ctx) }

func (s *stepProc) check() error {
	if s.bc.check == nil {
		return nil
	}
	r := s.w.ranks[0]
	return s.bc.check(r.rank, s.size, s.iter, r.mem[memOut])
}

func (s *stepProc) close() error { return s.w.close() }

// procSink keeps the compute loop from being optimized away.
var procSink uint64

// compute is host work: a busy loop for d of wall-clock time.
func compute(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
		for i := range 64 {
			procSink += uint64(i) * procSink >> 3
		}
	}
}

// runOnce runs one collective on side s: alone (load.chunks 0), or with
// the host computing (or asleep) for c in chunks with a Test after each
// (none once the run is complete), then waiting. It returns the time from the start to the
// run's completion (after the compute) and the part of it spent in the
// compute chunks. The output is checked after the clock stops.
func runOnce(s procSide, load procLoad, c time.Duration) (total, computed time.Duration, err error) {
	t0 := time.Now()
	if err := s.begin(); err != nil {
		return 0, 0, err
	}
	done := false
	for range load.chunks {
		t := time.Now()
		if d := c / time.Duration(load.chunks); load.idle {
			ts := syscall.NsecToTimespec(int64(d))
			_ = syscall.Nanosleep(&ts, nil)
		} else {
			compute(d)
		}
		computed += time.Since(t)
		if !done {
			if done, err = s.test(); err != nil {
				return 0, 0, err
			}
		}
	}
	if !done {
		if err := s.wait(); err != nil {
			return 0, 0, err
		}
	}
	total = time.Since(t0)
	return total, computed, s.check()
}

// procRank is one process's rank of the benchmark.
type procRank struct {
	rank, size int
	ctx        context.Context
	exchange   Exchange
	dev        *softdev.Device
	comm       *Comm
	// ctrl is an offloaded broadcast of three words from rank 0: how
	// rank 0 tells the others what it measured (untimed).
	ctrl    *offProc
	ctrlBuf []byte
}

// runProcRank is a rank of a job: rank and size of the job, its
// exchange, a context that ends at the job's deadline. Rank 0 writes one
// line "procbench {json}" per collective to out.
func runProcRank(ctx context.Context, rank, size int, exchange Exchange, p procParams, out func(string)) (err error) {
	pr := &procRank{rank: rank, size: size, ctx: ctx, exchange: exchange}
	defer func() { err = errors.Join(err, pr.close()) }()
	if pr.dev, err = softdev.Open(softdev.Autonomous()); err != nil {
		return err
	}
	if pr.comm, err = New(pr.dev.Context(), rank, size, exchange, Options{}); err != nil {
		return err
	}
	if pr.ctrl, err = newOffProc(ctx, pr.comm, benchBroadcast(24)); err != nil {
		return err
	}
	pr.ctrl.bc.fill, pr.ctrl.bc.check = nil, nil
	pr.ctrlBuf = pr.ctrl.out.Bytes()
	for _, pc := range procCollectives() {
		if p.Only != "" && pc.label != p.Only {
			continue
		}
		res, err := pr.measure(pc, p)
		if err != nil {
			return fmt.Errorf("%s: %w", pc.label, err)
		}
		if rank == 0 {
			b, _ := json.Marshal(res)
			out("procbench " + string(b))
		}
	}
	return nil
}

func (pr *procRank) close() error {
	var errs []error
	if pr.ctrl != nil {
		errs = append(errs, pr.ctrl.close())
	}
	if pr.comm != nil {
		errs = append(errs, pr.comm.Close())
	}
	if pr.dev != nil {
		errs = append(errs, pr.dev.Close())
	}
	return errors.Join(errs...)
}

// share sends rank 0's words to every rank.
func (pr *procRank) share(words ...uint64) ([]uint64, error) {
	if pr.rank == 0 {
		for i, w := range words {
			binary.BigEndian.PutUint64(pr.ctrlBuf[8*i:], w)
		}
	}
	if _, _, err := runOnce(pr.ctrl, procLoad{}, 0); err != nil {
		return nil, fmt.Errorf("control broadcast: %w", err)
	}
	for i := range words {
		words[i] = binary.BigEndian.Uint64(pr.ctrlBuf[8*i:])
	}
	return words, nil
}

func median(v []float64) float64 { return quantile(v, 0.5) }

// quantile is the q-quantile of v (the nearest rank; v is not changed).
func quantile(v []float64, q float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[min(int(q*float64(len(s))), len(s)-1)]
}

// procWarm is how many runs of each side come first: untimed for the
// medians, they give C and the runs per phase.
const procWarm = 30

// measure runs one collective both ways on every rank.
func (pr *procRank) measure(pc procColl, p procParams) (res procResult, err error) {
	res = procResult{N: pr.size, Coll: pc.label, Rounds: p.Rounds}
	var sides [2]procSide
	defer func() {
		for _, s := range sides {
			if s != nil {
				err = errors.Join(err, s.close())
			}
		}
	}()
	if sides[sideOffloaded], err = newOffProc(pr.ctx, pr.comm, pc.bc); err != nil {
		return res, err
	}
	// The device's counters sum its QPs: the communicator's (the
	// offloaded side, and the control broadcast) and the stepwise world's.
	rnr0 := pr.dev.Wire().QPs.RNRNaksReceived
	w, err := newStepProcess(pr.dev, pr.rank, pr.size, pc.bc.plan, pr.exchange)
	if err != nil {
		return res, err
	}
	sides[sideStepwise] = &stepProc{bc: pc.bc, size: pr.size, ctx: pr.ctx, w: w}

	var warm [2]float64
	for i, s := range sides {
		ts := make([]float64, procWarm)
		for k := range ts {
			d, _, err := runOnce(s, procLoad{}, 0)
			if err != nil {
				return res, fmt.Errorf("%s warm-up: %w", procSideNames[i], err)
			}
			ts[k] = float64(d)
		}
		warm[i] = median(ts)
	}
	slower := max(warm[0], warm[1])
	runs := min(max(int(float64(p.Budget)/slower), p.MinRuns), p.MaxRuns)
	got, err := pr.share(uint64(runs), uint64(slower))
	if err != nil {
		return res, err
	}
	res.Runs, res.C = int(got[0]), float64(got[1])

	type phase struct{ side, k int }
	var phases []phase
	for k := range procLoads {
		for side := range sides {
			phases = append(phases, phase{side, k})
		}
	}
	// times: each run's total; busy: the host's time outside the
	// compute chunks (the total, alone).
	var times, busy [2][len(procLoads)][]float64
	for round := range p.Rounds {
		for i := range phases {
			ph := phases[(round+i)%len(phases)]
			c := time.Duration(res.C)
			for range res.Runs {
				d, computed, err := runOnce(sides[ph.side], procLoads[ph.k], c)
				if err != nil {
					return res, fmt.Errorf("%s, %v, round %d: %w", procSideNames[ph.side], procLoads[ph.k], round, err)
				}
				times[ph.side][ph.k] = append(times[ph.side][ph.k], float64(d))
				busy[ph.side][ph.k] = append(busy[ph.side][ph.k], float64(d-computed))
			}
		}
	}
	var mine procFigures
	for side := range sides {
		for k := range procLoads {
			mine.Median[side][k] = median(times[side][k])
			mine.Busy[side][k] = median(busy[side][k])
			mine.Best[side][k] = slices.Min(times[side][k])
		}
	}
	st, err := w.wireStats()
	if err != nil {
		return res, err
	}
	mine.RNRNaks = [2]uint64{pr.dev.Wire().QPs.RNRNaksReceived - rnr0 - st.RNRNaksReceived, st.RNRNaksReceived}
	b, err := json.Marshal(mine)
	if err != nil {
		return res, err
	}
	all, err := pr.exchange(b)
	if err != nil {
		return res, fmt.Errorf("gathering the figures: %w", err)
	}
	for r, b := range all {
		var f procFigures
		if err := json.Unmarshal(b, &f); err != nil {
			return res, fmt.Errorf("rank %d's figures: %w", r, err)
		}
		res.Ranks = append(res.Ranks, f)
	}
	return res, nil
}

// The environment the parent gives the ranks.
const (
	procEnvParams = "VERBSEXP_PROCBENCH" // JSON of procParams: this process is a benchmark rank
)

func procParamsEnv(p procParams) string {
	b, _ := json.Marshal(p)
	return procEnvParams + "=" + string(b)
}

// procParamsFromEnv is the params a parent gave this rank, if any.
func procParamsFromEnv() (procParams, bool) {
	var p procParams
	v := os.Getenv(procEnvParams)
	if v == "" {
		return p, false
	}
	return p, json.Unmarshal([]byte(v), &p) == nil
}

// parseProcResults reads rank 0's result lines from a job's output.
func parseProcResults(out []byte) ([]procResult, error) {
	var res []procResult
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.Index(line, "procbench {")
		if i < 0 {
			continue
		}
		var r procResult
		if err := json.Unmarshal([]byte(line[i+len("procbench "):]), &r); err != nil {
			return nil, fmt.Errorf("result line %q: %w", line, err)
		}
		res = append(res, r)
	}
	return res, sc.Err()
}

// TestCollectiveProcessesRank is a rank of BenchmarkCollectiveProcesses
// and TestCollectiveProcessesBench (started by them through multiproc);
// on its own it does nothing.
func TestCollectiveProcessesRank(t *testing.T) {
	self, isRank := multiproc.Rank()
	if _, ok := procParamsFromEnv(); !isRank || !ok {
		t.Skip("SKIPPED: a rank of BenchmarkCollectiveProcesses, which starts it; nothing to do on its own")
	}
	ctx, cancel := self.Context()
	defer cancel()
	if err := ProcBenchRank(ctx, self.Rank, self.Size, self.Exchange()); err != nil {
		self.Abort(err.Error())
		t.Fatalf("rank %d of %d: %v", self.Rank, self.Size, err)
	}
}

// procJob is a launcher: it runs the benchmark's ranks as n processes
// with env (procParamsEnv) and returns rank 0's output.
type procJob func(tb testing.TB, n int, env string) []byte

// multiprocJob starts the ranks through multiproc (endpoints through
// files).
func multiprocJob(timeout time.Duration) procJob {
	return func(tb testing.TB, n int, env string) []byte {
		tb.Helper()
		res := multiproc.Run(tb, n, multiproc.Config{Test: "TestCollectiveProcessesRank", Timeout: timeout,
			Env: func(int) []string { return []string{env} }})
		if tb.Failed() {
			tb.FailNow()
		}
		return res[0].Output
	}
}

// procResults runs job and parses rank 0's results.
func procResults(tb testing.TB, job procJob, n int, p procParams) []procResult {
	tb.Helper()
	out := job(tb, n, procParamsEnv(p))
	res, err := parseProcResults(out)
	if err != nil {
		tb.Fatal(err)
	}
	return res
}

// TestCollectiveProcessesBench runs the benchmark's ranks briefly across
// 3 processes (procSmoke).
func TestCollectiveProcessesBench(t *testing.T) {
	if _, isRank := multiproc.Rank(); isRank {
		t.Skip("SKIPPED: the parent of TestCollectiveProcessesRank")
	}
	if testing.Short() {
		t.Skip("SKIPPED in -short: starts 3 processes")
	}
	procSmoke(t, "multiproc", multiprocJob(120*time.Second), 3)
}

// procSmoke runs job's ranks briefly (one round of two runs per phase)
// at n processes: every collective both ways, every run's output
// checked on every rank (a rank fails the job otherwise), and a result
// for each collective, in order, with every time measured.
func procSmoke(t *testing.T, how string, job procJob, n int) {
	res := procResults(t, job, n, procParams{Rounds: 1, MinRuns: 2, MaxRuns: 2, Budget: time.Nanosecond})
	var labels, got []string
	for _, pc := range procCollectives() {
		labels = append(labels, pc.label)
	}
	for _, r := range res {
		got = append(got, r.Coll)
		if r.N != n || r.Runs != 2 || r.Rounds != 1 || len(r.Ranks) != n {
			t.Errorf("%s: N %d, %d runs, %d rounds, figures of %d ranks; want %d, 2, 1, %d", r.Coll, r.N, r.Runs, r.Rounds, len(r.Ranks), n, n)
			continue
		}
		if r.C <= 0 {
			t.Errorf("%s: C %v", r.Coll, r.C)
		}
		for side := range 2 {
			for rank, f := range r.Ranks {
				for k := range procLoads {
					// An overlapped run lasts at least its compute, which
					// is at least C.
					if m := f.Median[side][k]; m <= 0 || k > 0 && m < r.C || f.Busy[side][k] < 0 {
						t.Errorf("%s %s, rank %d, %v: median %v ns (C %v), busy %v ns", r.Coll, procSideNames[side], rank, procLoads[k], m, r.C, f.Busy[side][k])
					}
				}
			}
		}
	}
	if !slices.Equal(got, labels) {
		t.Errorf("results for %q, want %q", got, labels)
	}
	t.Log(procTable(how+", a smoke run (times not meaningful)", res))
}

// BenchmarkCollectiveProcesses: every collective of procCollectives at
// N = 2, 4 and 8 processes started by multiproc (endpoints through
// files), offloaded against stepwise; see the comment at the top of this
// file for what is measured. Each N/collective reports the medians
// (offloaded-ns/op, which is also its ns/op, and stepwise-ns/op), the
// ratio stepwise/offloaded, and the host-free fractions (free1: post,
// compute, wait; free10: a Test after each tenth of the compute;
// free-idle: post, sleep, wait); the
// whole table is printed at the end. It ignores -benchtime: the ranks
// run procDefaults (VERBSEXP_PROCBENCH_ONLY=LABEL: that collective
// alone).
func BenchmarkCollectiveProcesses(b *testing.B) {
	benchProcesses(b, "multiproc (endpoints through files)", multiprocJob(10*time.Minute))
}

// benchProcesses runs job at N = 2, 4, 8, reports each collective's
// figures as a sub-benchmark and prints the table.
func benchProcesses(b *testing.B, how string, job procJob) {
	p := procDefaults
	p.Only = os.Getenv("VERBSEXP_PROCBENCH_ONLY")
	var all []procResult
	for _, n := range []int{2, 4, 8} {
		b.Run("N="+strconv.Itoa(n), func(b *testing.B) {
			res := procResults(b, job, n, p)
			reportProcResults(b, res)
			all = append(all, res...)
		})
	}
	if len(all) > 0 {
		fmt.Print(procTable(how, all))
	}
}

// reportProcResults reports each collective's figures as a
// sub-benchmark of b.
func reportProcResults(b *testing.B, res []procResult) {
	for _, r := range res {
		b.Run(r.Coll, func(b *testing.B) {
			b.ReportMetric(r.T(sideOffloaded), "ns/op")
			b.ReportMetric(r.T(sideOffloaded), "offloaded-ns/op")
			b.ReportMetric(r.T(sideStepwise), "stepwise-ns/op")
			b.ReportMetric(r.T(sideStepwise)/r.T(sideOffloaded), "stepwise/offloaded")
			for side, name := range procSideNames {
				b.ReportMetric(r.Free(side, 1), name+"-free1")
				b.ReportMetric(r.Free(side, 2), name+"-free10")
				b.ReportMetric(r.Free(side, 3), name+"-free-idle")
			}
		})
	}
}

// ProcLauncher is a way to start a job's ranks for BenchLaunchers: its
// name in the table and its job function.
type ProcLauncher struct {
	Name string
	Job  func(tb testing.TB, n int, env string) []byte
}

// BenchLaunchers is benchProcesses under each launcher in turn at each
// N (so that what else loads the host falls on all of them alike), with
// one table: per N and collective, a row for each launcher.
func BenchLaunchers(b *testing.B, how string, launchers []ProcLauncher) {
	p := procDefaults
	p.Only = os.Getenv("VERBSEXP_PROCBENCH_ONLY")
	var all []procResult
	for _, n := range []int{2, 4, 8} {
		for _, l := range launchers {
			b.Run(fmt.Sprintf("N=%d/%s", n, l.Name), func(b *testing.B) {
				res := procResults(b, l.Job, n, p)
				for i := range res {
					res[i].Launcher = l.Name
				}
				reportProcResults(b, res)
				all = append(all, res...)
			})
		}
	}
	order := map[string]int{}
	for i, pc := range procCollectives() {
		order[pc.label] = i
	}
	slices.SortStableFunc(all, func(x, y procResult) int {
		if x.N != y.N {
			return x.N - y.N
		}
		return order[x.Coll] - order[y.Coll]
	})
	if len(all) > 0 {
		fmt.Print(procTable(how, all))
	}
}

// The benchmark for launchers whose exchange this package's own tests
// cannot link (bench_mpirun_test.go, package coll_test: PMIx).

// BenchProcesses is benchProcesses.
func BenchProcesses(b *testing.B, how string, job func(tb testing.TB, n int, env string) []byte) {
	benchProcesses(b, how, job)
}

// ProcSmoke is procSmoke.
func ProcSmoke(t *testing.T, how string, job func(tb testing.TB, n int, env string) []byte, n int) {
	procSmoke(t, how, job, n)
}

// ProcBenchRank is a rank of a job the launcher started with the
// environment its job function got; it prints rank 0's results.
func ProcBenchRank(ctx context.Context, rank, size int, exchange Exchange) error {
	p, ok := procParamsFromEnv()
	if !ok {
		return fmt.Errorf("%s is not set (or not JSON): not a benchmark rank", procEnvParams)
	}
	return runProcRank(ctx, rank, size, exchange, p, func(s string) { fmt.Println(s) })
}

// procTable formats results as a Markdown table.
func procTable(how string, rs []procResult) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nCollectives across processes, %s: medians per collective (µs), host-free fraction (k = compute chunks)\n\n", how)
	// A launcher column when the rows compare launchers.
	launchers := slices.ContainsFunc(rs, func(r procResult) bool { return r.Launcher != "" })
	cell := func(l string) string {
		if !launchers {
			return ""
		}
		return " " + l + " |"
	}
	sb.WriteString("| N |" + cell("launcher") + " collective | runs | offloaded µs (best) | stepwise µs (best) | stepwise/offloaded | C µs | free offloaded k=1 (min) | k=10 | idle | free stepwise k=1 (min) | k=10 | idle | RNR NAKs off/step |\n")
	sep := "|---|"
	if launchers {
		sep += "---|"
	}
	sb.WriteString(sep + "---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		free := func(side, k int) string { return fmt.Sprintf("%.2f (%.2f)", r.Free(side, k), r.FreeMin(side, k)) }
		fmt.Fprintf(&sb, "| %d |%s %s | %d×%d | %.1f (%.1f) | %.1f (%.1f) | %.2f | %.0f | %s | %s | %s | %s | %s | %s | %d/%d |\n",
			r.N, cell(r.Launcher), r.Coll, r.Rounds, r.Runs, r.T(0)/1e3, r.Best(0)/1e3, r.T(1)/1e3, r.Best(1)/1e3, r.T(1)/r.T(0),
			r.C/1e3, free(0, 1), free(0, 2), free(0, 3), free(1, 1), free(1, 2), free(1, 3), r.RNRNaks(0), r.RNRNaks(1))
	}
	return sb.String()
}
