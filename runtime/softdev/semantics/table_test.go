//go:build linux && cgo

package semantics

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/internal/multiproc"
)

// The table and its runner: every case on both paths, each rank a
// process (see the package doc).

// pathKind is how a rank reaches its device.
type pathKind int

const (
	// inProcess: softdev.Open(Autonomous(), InfiniBandPort()), the twin
	// of the driver: its thread runs the queues, its port has a LID.
	inProcess pathKind = iota
	// inProcessDefault: softdev.Open() as most in-process users open it:
	// a RoCE port (the QPs name each other by GID), the send queues run
	// by polls until a QP connects to another device.
	inProcessDefault
	// library: runtime/device.Open under softdev exec, through the
	// vendor's libibverbs and the driver.
	library
)

var paths = []struct {
	name string
	kind pathKind
}{{"inprocess", inProcess}, {"inprocess-default", inProcessDefault}, {"library", library}}

// semCase is one case of the table.
type semCase struct {
	name string
	// ranks is how many devices (processes) the case needs: 1, or 2 for
	// a requester (rank 0) and a responder (rank 1).
	ranks int
	run   func(n *node)
	// responderDies: rank 1 ends by SIGKILL (n.die), as a process on a
	// cluster can, and no other way.
	responderDies bool
	// known is a difference between the paths this case found and that
	// is not fixed yet (a softdev bug): see knownDiff.
	known *knownDiff
}

// knownDiff marks a case that fails on one path for a known softdev bug.
// There the case must still fail, a rank printing want; the subtest then
// skips saying why, loudly. Once the bug is fixed the case passes there,
// and the table fails until the mark is removed: a difference is never
// forgotten, and never silently accepted.
type knownDiff struct {
	path pathKind
	want string // in the failing rank's output
	bug  string // what differs, and where the fix belongs
}

// cases is the table: the CORE-Direct rules, calc, the RC transport, UC
// and UD, and the events.
func cases() []semCase {
	var all []semCase
	for _, group := range [][]semCase{coreDirectCases(), calcCases(), rcCases(), ucudCases(), eventCases()} {
		all = append(all, group...)
	}
	return all
}

// passed is what a rank prints when its part passed and its device was
// released cleanly: the parent wants it from every rank that did not die,
// so that a rank that ran nothing (a subtest name that matched nothing, a
// skip) cannot pass.
const passed = "semantics: rank passed: "

// TestSemantics runs the table: TestSemantics/CASE/PATH.
func TestSemantics(t *testing.T) {
	self, isRank := multiproc.Rank()
	seen := map[string]bool{}
	for _, c := range cases() {
		if seen[c.name] {
			t.Fatalf("two cases are called %s", c.name)
		}
		seen[c.name] = true
		t.Run(c.name, func(t *testing.T) {
			for _, p := range paths {
				t.Run(p.name, func(t *testing.T) {
					if isRank {
						runRank(t, self, c, p.kind)
						return
					}
					runJob(t, c, p.kind)
				})
			}
		})
	}
}

// runJob starts the case's ranks (under softdev exec on the library
// path) and checks how each ended.
func runJob(t *testing.T, c semCase, p pathKind) {
	cfg := multiproc.Config{Timeout: 90 * time.Second, Env: func(int) []string {
		// Under -race a process sleeps 1 s at exit (atexit_sleep_ms) to
		// let late race reports out: a rank reports before it exits.
		return []string{"GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0")}
	}}
	if p == library {
		needVendor(t)
		cfg.Wrap = func(int) []string {
			return []string{vendor.Softdev, "exec", "-ofed", vendor.Root, "-driver", vendor.Driver, "--"}
		}
	}
	cfg.Expect = func(rank int, err error) error {
		if c.responderDies && rank == 1 {
			if killed(err) {
				return nil
			}
			return fmt.Errorf("rank %d was to die by SIGKILL: %v", rank, err)
		}
		return err
	}
	start := time.Now()
	if k := c.known; k != nil && k.path == p {
		res := multiproc.Start(t, c.ranks, cfg).Wait()
		var failed []byte
		for _, r := range res {
			if cfg.Expect(r.Rank, r.Err) != nil {
				failed = append(failed, r.Output...)
			}
		}
		switch {
		case failed == nil:
			t.Fatalf("the case passes on this path now, though marked as a known difference (%s): remove the mark", k.bug)
		case !bytes.Contains(failed, []byte(k.want)):
			multiproc.Check(t, res, cfg.Expect)
			t.Fatalf("the case fails on this path, but not as its known difference says (%q: %s)", k.want, k.bug)
		}
		line := string(failed[bytes.Index(failed, []byte(k.want)):])
		line, _, _ = strings.Cut(line, "\n")
		t.Skipf("SKIPPED: a known difference between the paths, a softdev bug: %s. The case fails here as expected: %s", k.bug, line)
	}
	res := multiproc.Run(t, c.ranks, cfg)
	skip := regexp.MustCompile(`(?m)^\s*--- SKIP`)
	for _, r := range res {
		if r.Err != nil || c.responderDies && r.Rank == 1 {
			continue // reported by multiproc.Run, or not expected to pass
		}
		if !bytes.Contains(r.Output, []byte(passed+t.Name())) || skip.Match(r.Output) {
			t.Errorf("rank %d did not report its part passed (or skipped it):\n%s", r.Rank, r.Output)
		}
	}
	t.Logf("%d rank(s) in %v", c.ranks, time.Since(start).Round(time.Millisecond))
}

// killed says whether a rank ended by SIGKILL: its process killed, or
// (library path) its launcher exiting 137 for it, as a shell would.
func killed(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && (ws.Signaled() && ws.Signal() == syscall.SIGKILL || ws.Exited() && ws.ExitStatus() == 128+int(syscall.SIGKILL))
}

// node is a rank of a running case.
type node struct {
	t          *testing.T
	rank, size int
	d          *dut
	self       multiproc.Self
	xchg       func([]byte) ([][]byte, error)
}

func runRank(t *testing.T, self multiproc.Self, c semCase, p pathKind) {
	if self.Size != c.ranks {
		t.Fatalf("started as rank %d of %d; the case has %d", self.Rank, self.Size, c.ranks)
	}
	t.Cleanup(func() { // the last cleanup: after the device is released
		if t.Failed() {
			self.Abort(fmt.Sprintf("rank %d failed", self.Rank))
			return
		}
		fmt.Printf("%s%s\n", passed, t.Name())
	})
	n := &node{t: t, rank: self.Rank, size: self.Size, self: self, xchg: self.Exchange()}
	n.d = openDUT(t, p)
	c.run(n)
}

// exchange trades v with the other ranks (gob) and returns everyone's,
// by rank, decoded into fresh Ts.
func exchange[T any](n *node, v T) []T {
	n.t.Helper()
	out, err := multiproc.Trade(n.xchg, v)
	if err != nil {
		n.t.Fatalf("rank %d: exchange: %v", n.rank, err)
	}
	return out
}

func (n *node) barrier(name string) {
	n.t.Helper()
	if err := n.self.Barrier(name); err != nil {
		n.t.Fatalf("rank %d: barrier %s: %v", n.rank, name, err)
	}
}

// die ends this rank as a crashed process does: SIGKILL, its device (and,
// on the library path, its launcher's listener) gone with it.
func (n *node) die() {
	os.Stdout.Sync()
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // never reached
}

// ---- two devices ----

// peerInfo is what a rank tells the other of itself.
type peerInfo struct {
	Addr  addr
	QPN   uint32
	Buf   uint64 // its default buffer, registered as Rkey
	Rkey  uint32
	Extra []uint32 // case-specific keys
	Pid   int
}

// wire is a rank's RC QP connected to the other rank's, with its CQ.
type wire struct {
	qp   *verbs.QP
	cq   *verbs.CQ
	peer peerInfo
}

// wireUp makes this rank's QP and CQ (256 entries), trades what the other
// rank needs (extra: keys of MRs setup made), and connects with attr's
// attributes for this rank; both ranks are connected when it returns.
func (n *node) wireUp(attr func(rank int) link, setup func() []uint32) *wire {
	n.t.Helper()
	return n.wireUpWith(attr, setup, nil)
}

// wireUpWith is wireUp with edit applied to what this rank learnt of the
// other before it connects (a wrong QP number, a LID nobody has).
func (n *node) wireUpWith(attr func(rank int) link, setup func() []uint32, edit func(*peerInfo)) *wire {
	n.t.Helper()
	if n.size != 2 {
		n.t.Fatalf("wireUp needs two ranks, the case has %d", n.size)
	}
	d := n.d
	w := &wire{cq: d.cq(256)}
	w.qp = d.createQP(qpSpec{scq: w.cq, rcq: w.cq})
	me := peerInfo{Addr: d.self(), QPN: w.qp.QPNum, Buf: d.addr(0), Rkey: d.mr.Rkey, Pid: os.Getpid()}
	if setup != nil {
		me.Extra = setup()
	}
	all := exchange(n, me)
	w.peer = all[1-n.rank]
	if edit != nil {
		edit(&w.peer)
	}
	d.connect(w.qp, w.peer.Addr, w.peer.QPN, attr(n.rank))
	n.barrier("connected")
	return w
}

// plain: both ranks with defaultLink.
func plain(int) link { return defaultLink() }

// requester edits rank 0's attributes, responder rank 1's.
func requester(edit func(*link)) func(rank int) link {
	return func(rank int) link {
		l := defaultLink()
		if rank == 0 {
			edit(&l)
		}
		return l
	}
}

func responder(edit func(*link)) func(rank int) link {
	return func(rank int) link {
		l := defaultLink()
		if rank == 1 {
			edit(&l)
		}
		return l
	}
}
