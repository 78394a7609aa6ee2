//go:build linux && cgo

package collsoft_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/cmem"
	"github.com/verbsexp/verbsexp/runtime/coll"
	"github.com/verbsexp/verbsexp/runtime/coll/collsoft"
	"github.com/verbsexp/verbsexp/runtime/coll/internal/leakcheck"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/softdev"
)

// TestMain fails the run if any test leaves a lease Buffer or a task
// list arena allocated: every World, Memory and Schedule the tests make
// must give back all it took.
func TestMain(m *testing.M) { leakcheck.Main(m) }

// newWorld opens a device with n ranks on it. Cleanup closes the world
// and the device and fails the test unless both report nothing left
// open: the test must have closed every schedule and memory itself.
func newWorld(t testing.TB, n int) *collsoft.World {
	t.Helper()
	return newWorldOpts(t, n, coll.Options{})
}

func newWorldOpts(t testing.TB, n int, opts coll.Options) *collsoft.World {
	t.Helper()
	dev, err := softdev.Open()
	if err != nil {
		t.Fatal(err)
	}
	w, err := collsoft.New(dev, n, opts)
	if err != nil {
		dev.Close()
		t.Fatalf("collsoft.New(%d ranks): %v", n, err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("N=%d: World.Close: %v", n, err)
		}
		if err := dev.Close(); err != nil {
			t.Errorf("N=%d: softdev Close: %v", n, err)
		}
	})
	return w
}

// region is a registered buffer: its first n bytes are what a
// collective may touch, the rest is canary, all registered, so the
// device would let a wrong SGE write there (softdev refuses only what
// leaves the MR). A region serves one schedule at a time: use sets n
// and rewrites the canary for the next. The test's cleanup closes and
// frees it (before the World's, which would report it as a leak).
type region struct {
	buf *lease.Buffer
	mem *coll.Memory
	n   int
}

// canaryMin is the least canary a region has past any n it is used for.
const canaryMin = 61 // odd, so the canary's end is not aligned either

// canary is the pattern every region's tail holds (grown on demand).
var canary []byte

func canaryFor(n int) []byte {
	for len(canary) < n {
		canary = append(canary, byte(0xA5^len(canary)*7))
	}
	return canary[:n]
}

func newRegion(t testing.TB, c *coll.Comm, max int) *region {
	t.Helper()
	buf, err := lease.Alloc(max + canaryMin)
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Register(buf)
	if err != nil {
		buf.Free()
		t.Fatal(err)
	}
	r := &region{buf: buf, mem: m}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("rank %d: Memory.Close: %v", c.Rank(), err)
		}
		if err := buf.Free(); err != nil {
			t.Errorf("rank %d: Buffer.Free: %v", c.Rank(), err)
		}
	})
	return r.use(max)
}

// use makes the first n bytes the collective's and the rest canary.
func (r *region) use(n int) *region {
	if n+canaryMin > r.buf.Len() {
		panic(fmt.Sprintf("region of %d bytes used for %d", r.buf.Len()-canaryMin, n))
	}
	r.n = n
	tail := r.buf.Bytes()[n:]
	copy(tail, canaryFor(len(tail)))
	return r
}

// data is the bytes the collective owns.
func (r *region) data() []byte { return r.buf.Bytes()[:r.n] }

// checkCanary reports a touched canary byte.
func (r *region) checkCanary() error {
	tail := r.buf.Bytes()[r.n:]
	want := canaryFor(len(tail))
	if i := firstDiff(tail, want); i >= 0 {
		return fmt.Errorf("canary byte %d past the %d-byte region is %#x, want %#x: the schedule wrote outside its region", i, r.n, tail[i], want[i])
	}
	return nil
}

// memories are two regions per rank of a World, registered once and
// used by one schedule after the other (a registration reads
// /proc/self/maps on softdev: doing it per schedule would dominate).
type memories struct{ a, b []*region }

func newMemories(t testing.TB, w *collsoft.World, max int) *memories {
	t.Helper()
	m := &memories{}
	for _, c := range w.Comms {
		m.a, m.b = append(m.a, newRegion(t, c, max)), append(m.b, newRegion(t, c, max))
	}
	return m
}

// run posts one run of every rank's schedule, then waits for each (the
// first Wait runs the device through collsoft's Progress).
func run(ss []*coll.Schedule) error {
	for r, s := range ss {
		if err := s.Post(); err != nil {
			return fmt.Errorf("rank %d: Post: %w", r, err)
		}
	}
	for r, s := range ss {
		if err := s.Wait(); err != nil {
			return fmt.Errorf("rank %d: Wait: %w", r, err)
		}
	}
	return nil
}

func closeAll(t testing.TB, ss []*coll.Schedule) {
	t.Helper()
	for _, s := range ss {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}
}

// calc is one reduction the device offers.
type calc struct {
	op  verbs.ExpCalcOp
	typ verbs.ExpCalcDataType
}

func (c calc) String() string {
	return fmt.Sprintf("%s/%s", opNames[c.op], typeNames[c.typ])
}

var (
	opNames = map[verbs.ExpCalcOp]string{verbs.ExpCalcOpAdd: "ADD", verbs.ExpCalcOpMaxloc: "MAXLOC",
		verbs.ExpCalcOpBand: "BAND", verbs.ExpCalcOpBxor: "BXOR", verbs.ExpCalcOpBor: "BOR"}
	typeNames = map[verbs.ExpCalcDataType]string{verbs.ExpCalcDataTypeInt: "INT",
		verbs.ExpCalcDataTypeUint: "UINT", verbs.ExpCalcDataTypeFloat: "FLOAT"}
)

// deviceCalcs is every op and type softdev reports in its calc
// capabilities (ibv_exp_query_device), plus MAXLOC on UINT, which the
// providers accept without reporting. The test fails if the device
// reports fewer than the 12 the providers have, so a shrinking
// capability set cannot shrink the matrix silently.
func deviceCalcs(t testing.TB) []calc {
	t.Helper()
	dev, err := softdev.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	attr, err := cmem.New[verbs.ExpDeviceAttr]()
	if err != nil {
		t.Fatal(err)
	}
	defer cmem.Free(attr)
	attr.CompMask = uint32(verbs.ExpDeviceAttrCalcCap)
	if err := verbs.ExpQueryDevice(dev.Context(), attr); err != nil {
		t.Fatal(err)
	}
	cc := attr.CalcCap
	var out []calc
	for typ := verbs.ExpCalcDataType(0); typ < verbs.ExpCalcDataTypeNumber; typ++ {
		if cc.DataTypes&(1<<typ) == 0 {
			continue
		}
		ops := map[verbs.ExpCalcDataType]uint64{verbs.ExpCalcDataTypeInt: cc.IntOps,
			verbs.ExpCalcDataTypeUint: cc.UintOps, verbs.ExpCalcDataTypeFloat: cc.FpOps}[typ]
		for op := verbs.ExpCalcOp(0); op < verbs.ExpCalcOpNumber; op++ {
			if ops&(1<<op) != 0 || op == verbs.ExpCalcOpMaxloc && typ == verbs.ExpCalcDataTypeUint {
				out = append(out, calc{op, typ})
			}
		}
	}
	if len(out) != 13 {
		t.Fatalf("the device reports %d op/type pairs (%v), want ADD, BAND, BXOR, BOR on INT, UINT, FLOAT and MAXLOC on UINT", len(out), out)
	}
	return out
}

// elem is one allreduce element.
type elem struct{ v, loc uint64 }

// inputs makes fresh input for one run: per rank, count elements. For
// FLOAT ADD with exact, the values are integers small enough that every
// partial sum is exact, so any order of additions gives the reference's
// bits; otherwise they are arbitrary.
func inputs(rng *rand.Rand, c calc, ranks, count int, exact bool) [][]elem {
	in := make([][]elem, ranks)
	for r := range in {
		in[r] = make([]elem, count)
		for e := range in[r] {
			x := &in[r][e]
			x.loc = rng.Uint64()
			switch {
			case c.op == verbs.ExpCalcOpMaxloc:
				// Few distinct values and locations: ties, whose smallest
				// location must win.
				x.v, x.loc = rng.Uint64N(4)<<62|rng.Uint64N(3), rng.Uint64N(5)
				if rng.IntN(8) == 0 {
					x.v = math.MaxUint64
				}
			case c.typ == verbs.ExpCalcDataTypeFloat && c.op == verbs.ExpCalcOpAdd && exact:
				x.v = math.Float64bits(float64(rng.Int64N(1<<40) - 1<<39))
			case c.typ == verbs.ExpCalcDataTypeFloat && c.op == verbs.ExpCalcOpAdd:
				x.v = math.Float64bits(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(30)-15)))
			default:
				x.v = rng.Uint64()
			}
		}
	}
	return in
}

// reduce is the Go reference: element e of the result combines element
// e of every rank's input.
func reduce(c calc, in [][]elem) []elem {
	out := append([]elem(nil), in[0]...)
	for _, row := range in[1:] {
		for e, x := range row {
			a := &out[e]
			switch c.op {
			case verbs.ExpCalcOpAdd:
				if c.typ == verbs.ExpCalcDataTypeFloat {
					a.v = math.Float64bits(math.Float64frombits(a.v) + math.Float64frombits(x.v))
				} else {
					a.v += x.v // INT wraps as UINT does
				}
			case verbs.ExpCalcOpBand:
				a.v &= x.v
			case verbs.ExpCalcOpBor:
				a.v |= x.v
			case verbs.ExpCalcOpBxor:
				a.v ^= x.v
			case verbs.ExpCalcOpMaxloc:
				if x.v > a.v || x.v == a.v && x.loc < a.loc {
					*a = x
				}
			}
		}
	}
	return out
}

// arRun is one allreduce schedule on every rank, with its memories.
type arRun struct {
	c       calc
	count   int
	inPlace bool
	ins     []*region
	outs    []*region // == ins in place
	ss      []*coll.Schedule
}

func newAllreduce(t testing.TB, w *collsoft.World, m *memories, c calc, count int, inPlace bool) *arRun {
	t.Helper()
	a, err := buildAllreduce(w, m, c, count, inPlace)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// buildAllreduce builds the allreduce on every rank, or returns the
// first rank's error (with what it built closed).
func buildAllreduce(w *collsoft.World, m *memories, c calc, count int, inPlace bool) (*arRun, error) {
	a := &arRun{c: c, count: count, inPlace: inPlace}
	n := count * coll.ElementSize
	for r, cm := range w.Comms {
		in := m.a[r].use(n)
		out := in
		if !inPlace {
			out = m.b[r].use(n)
		}
		s, err := cm.Allreduce(in.mem, out.mem, count, c.op, c.typ)
		if err != nil {
			for _, s := range a.ss {
				s.Close()
			}
			return nil, fmt.Errorf("N=%d rank %d: Allreduce(%v, count %d): %w", len(w.Comms), cm.Rank(), c, count, err)
		}
		a.ins, a.outs, a.ss = append(a.ins, in), append(a.outs, out), append(a.ss, s)
	}
	return a, nil
}

func (a *arRun) close(t testing.TB) { t.Helper(); closeAll(t, a.ss) }

// once writes fresh input (and garbage into separate outputs), runs the
// schedule once on every rank and checks every rank's result against
// the reference, the canaries and, out of place, that the input is
// unchanged. With exact false (FLOAT ADD of arbitrary values) it checks
// that every rank got the same bits, and that they are the sum to
// within rounding.
func (a *arRun) once(rng *rand.Rand, exact bool) error {
	exact = exact || a.c != calc{verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeFloat}
	in := inputs(rng, a.c, len(a.ss), a.count, exact)
	for r := range a.ss {
		for e, x := range in[r] {
			coll.PutElement(a.ins[r].data(), e, x.v, x.loc)
		}
		if !a.inPlace {
			fill(rng, a.outs[r].data())
		}
	}
	var saved [][]byte
	if !a.inPlace {
		for _, reg := range a.ins {
			saved = append(saved, bytes.Clone(reg.data()))
		}
	}
	if err := run(a.ss); err != nil {
		return err
	}
	want := reduce(a.c, in)
	maxloc := a.c.op == verbs.ExpCalcOpMaxloc
	for r := range a.ss {
		for _, reg := range []*region{a.ins[r], a.outs[r]} {
			if err := reg.checkCanary(); err != nil {
				return fmt.Errorf("rank %d: %w", r, err)
			}
		}
		if !a.inPlace && !bytes.Equal(saved[r], a.ins[r].data()) {
			return fmt.Errorf("rank %d: the input memory changed: a schedule must only read it", r)
		}
		for e := range a.count {
			v, loc := coll.Element(a.outs[r].data(), e)
			v0, _ := coll.Element(a.outs[0].data(), e)
			switch {
			case exact && v != want[e].v, maxloc && loc != want[e].loc:
				return fmt.Errorf("rank %d element %d: got %#x loc %d, want %#x loc %d (%s)", r, e, v, loc, want[e].v, want[e].loc, describe(a.c, in, e))
			case v != v0:
				return fmt.Errorf("rank %d element %d: %#x, rank 0 got %#x: ranks disagree", r, e, v, v0)
			case !exact && !closeSum(in, e, v):
				return fmt.Errorf("rank %d element %d: %g is not the sum %g to within rounding", r, e, math.Float64frombits(v), math.Float64frombits(want[e].v))
			}
		}
	}
	return nil
}

// closeSum says whether got is the float sum of element e within the
// rounding error bound of any order of n-1 additions.
func closeSum(in [][]elem, e int, got uint64) bool {
	var sum, abs float64
	for _, row := range in {
		x := math.Float64frombits(row[e].v)
		sum += x
		abs += math.Abs(x)
	}
	return math.Abs(math.Float64frombits(got)-sum) <= 2*float64(len(in))*0x1p-52*abs
}

func describe(c calc, in [][]elem, e int) string {
	s := fmt.Sprintf("%v over", c)
	for r, row := range in {
		if r == 8 {
			return s + " …"
		}
		s += fmt.Sprintf(" %#x/%d", row[e].v, row[e].loc)
	}
	return s
}

// bcRun is one broadcast schedule on every rank.
type bcRun struct {
	root int
	bufs []*region
	ss   []*coll.Schedule
}

func newBroadcast(t testing.TB, w *collsoft.World, m *memories, root, n int) *bcRun {
	t.Helper()
	b := &bcRun{root: root}
	for r, cm := range w.Comms {
		reg := m.a[r].use(n)
		s, err := cm.Broadcast(root, reg.mem, n)
		if err != nil {
			t.Fatalf("N=%d rank %d: Broadcast(root %d, %d bytes): %v", len(w.Comms), cm.Rank(), root, n, err)
		}
		b.bufs, b.ss = append(b.bufs, reg), append(b.ss, s)
	}
	return b
}

func (b *bcRun) close(t testing.TB) { t.Helper(); closeAll(t, b.ss) }

// once fills the root's buffer with fresh bytes and every other rank's
// with garbage, runs, and checks that all hold the root's bytes.
func (b *bcRun) once(rng *rand.Rand) error {
	for _, reg := range b.bufs {
		fill(rng, reg.data())
	}
	want := bytes.Clone(b.bufs[b.root].data())
	if err := run(b.ss); err != nil {
		return err
	}
	for r, reg := range b.bufs {
		if err := reg.checkCanary(); err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
		if i := firstDiff(reg.data(), want); i >= 0 {
			return fmt.Errorf("rank %d: byte %d of %d is %#x, root %d sent %#x", r, i, len(want), reg.data()[i], b.root, want[i])
		}
	}
	return nil
}

// agRun is one allgather schedule on every rank.
type agRun struct {
	block int
	bufs  []*region
	ss    []*coll.Schedule
}

func newAllgather(t testing.TB, w *collsoft.World, m *memories, block int) *agRun {
	t.Helper()
	a := &agRun{block: block}
	for r, cm := range w.Comms {
		reg := m.a[r].use(len(w.Comms) * block)
		s, err := cm.Allgather(reg.mem, block)
		if err != nil {
			t.Fatalf("N=%d rank %d: Allgather(block %d): %v", len(w.Comms), cm.Rank(), block, err)
		}
		a.bufs, a.ss = append(a.bufs, reg), append(a.ss, s)
	}
	return a
}

func (a *agRun) close(t testing.TB) { t.Helper(); closeAll(t, a.ss) }

// once gives every rank a fresh block (and garbage in the others'),
// runs, and checks that every rank holds every block.
func (a *agRun) once(rng *rand.Rand) error {
	size := len(a.ss)
	want := make([]byte, size*a.block)
	fill(rng, want)
	for r, reg := range a.bufs {
		fill(rng, reg.data())
		copy(reg.data()[r*a.block:(r+1)*a.block], want[r*a.block:])
	}
	if err := run(a.ss); err != nil {
		return err
	}
	for r, reg := range a.bufs {
		if err := reg.checkCanary(); err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
		if i := firstDiff(reg.data(), want); i >= 0 {
			return fmt.Errorf("rank %d: byte %d (block %d) is %#x, rank %d contributed %#x", r, i, i/a.block, reg.data()[i], i/a.block, want[i])
		}
	}
	return nil
}

// barrierSchedules builds a barrier on every rank.
func barrierSchedules(t testing.TB, w *collsoft.World) []*coll.Schedule {
	t.Helper()
	var ss []*coll.Schedule
	for _, cm := range w.Comms {
		s, err := cm.Barrier()
		if err != nil {
			t.Fatalf("N=%d rank %d: Barrier: %v", len(w.Comms), cm.Rank(), err)
		}
		ss = append(ss, s)
	}
	return ss
}

func fill(rng *rand.Rand, b []byte) {
	for len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, rng.Uint64())
		b = b[8:]
	}
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
}

// firstDiff is the first index where a and b (of one length) differ, or
// -1.
func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}
