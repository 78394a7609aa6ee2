// Package multiproc runs a test as several processes: ranks, each the
// test binary itself started again to run only that test, as a launcher
// starts the ranks of a job. A test asks Rank whether it is one of them:
// if it is, it does that rank's part (Self says which rank of how many)
// and returns; if not, it calls Run, which starts the ranks, waits for
// them and fails the test for each one that failed, with its output.
// The tests of this package and of runtime/softdev (TestWireRules...)
// and runtime/coll (TestCollectivesAcrossProcesses) are written so.
//
// Ranks meet through Exchange, a directory of files every rank writes
// one of and reads all of, round by round (the "endpoints through files"
// a user would start with). Every rank runs in its own process group
// and is killed (the group) when the test ends, fails or runs out of
// time, so no rank outlives its test. A rank's output is reported only
// when it fails.
package multiproc

import (
	"bytes"
	"context"
	"encoding/gob"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The environment a rank is started with.
const (
	envRank  = "VERBSEXP_MP_RANK"
	envSize  = "VERBSEXP_MP_SIZE"
	envDir   = "VERBSEXP_MP_DIR"
	envUntil = "VERBSEXP_MP_DEADLINE" // unix nanoseconds: exchanges give up then
)

// Self is what a rank knows of itself.
type Self struct {
	Rank, Size int
	Dir        string    // the job's exchange directory
	Deadline   time.Time // when the parent kills the job
}

// Rank reports whether this process is a rank of a job, and which.
func Rank() (Self, bool) {
	r, err1 := strconv.Atoi(os.Getenv(envRank))
	n, err2 := strconv.Atoi(os.Getenv(envSize))
	until, err3 := strconv.ParseInt(os.Getenv(envUntil), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || os.Getenv(envDir) == "" {
		return Self{}, false
	}
	return Self{Rank: r, Size: n, Dir: os.Getenv(envDir), Deadline: time.Unix(0, until)}, true
}

// Exchange is a rank's side of a file exchange: each call is a round
// that publishes b and returns every rank's contribution, by rank, once
// all have published theirs (the shape of coll.Exchange). It gives up at
// the job's deadline, naming the ranks that never came.
func (s Self) Exchange() func(b []byte) ([][]byte, error) {
	round := 0
	return func(b []byte) ([][]byte, error) {
		round++
		return s.round(strconv.Itoa(round), b)
	}
}

// Trade is one round of an exchange (Self.Exchange, or an in-process
// stand-in of the same shape) for values: v gob-encoded, every rank's
// decoded into a fresh T, by rank.
func Trade[T any](exchange func([]byte) ([][]byte, error), v T) ([]T, error) {
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(v); err != nil {
		return nil, err
	}
	all, err := exchange(b.Bytes())
	if err != nil {
		return nil, err
	}
	out := make([]T, len(all))
	for r, a := range all {
		if err := gob.NewDecoder(bytes.NewReader(a)).Decode(&out[r]); err != nil {
			return nil, fmt.Errorf("rank %d's part: %v", r, err)
		}
	}
	return out, nil
}

// Barrier waits until every rank has reached the barrier of that name.
func (s Self) Barrier(name string) error {
	_, err := s.round("barrier-"+name, nil)
	return err
}

// Abort tells every other rank that this one failed: their exchanges
// return an error naming it instead of waiting for the deadline.
func (s Self) Abort(why string) {
	_ = os.WriteFile(filepath.Join(s.Dir, "abort-"+strconv.Itoa(s.Rank)), []byte(why), 0o644)
}

func (s Self) round(name string, b []byte) ([][]byte, error) {
	dir := filepath.Join(s.Dir, "round-"+name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	tmp := filepath.Join(dir, fmt.Sprintf(".%d.tmp", s.Rank))
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, filepath.Join(dir, strconv.Itoa(s.Rank))); err != nil {
		return nil, err
	}
	all := make([][]byte, s.Size)
	have := make([]bool, s.Size)
	for wait := 50 * time.Microsecond; ; wait = min(2*wait, 5*time.Millisecond) {
		missing := 0
		for r := range s.Size {
			if have[r] {
				continue
			}
			if v, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(r))); err == nil {
				all[r], have[r] = v, true
			} else {
				missing++
			}
		}
		if missing == 0 {
			return all, nil
		}
		if aborts, _ := filepath.Glob(filepath.Join(s.Dir, "abort-*")); len(aborts) > 0 {
			why, _ := os.ReadFile(aborts[0])
			return nil, fmt.Errorf("multiproc: round %s: %s gave up: %s", name, filepath.Base(aborts[0]), why)
		}
		if time.Now().After(s.Deadline) {
			var gone []string
			for r := range s.Size {
				if !have[r] {
					gone = append(gone, strconv.Itoa(r))
				}
			}
			return nil, fmt.Errorf("multiproc: round %s: rank(s) %s never came (the job's deadline passed)", name, strings.Join(gone, ", "))
		}
		time.Sleep(wait)
	}
}

// Config is how Run starts a job.
type Config struct {
	Timeout time.Duration                   // the whole job; default 60 s
	Env     func(rank int) []string         // more environment for a rank (KEY=value)
	Wrap    func(rank int) []string         // a command to run the rank under (e.g. ip netns exec NAME)
	Args    []string                        // more test flags for the ranks
	Expect  func(rank int, err error) error // judges a rank's exit (default: it must succeed)
	// Test is the test the ranks run (default: the calling test, with its
	// subtests); a benchmark names a test that plays the other ranks.
	Test string
	// Ranks below Own are this process's own (Job.Self): Start starts
	// the others.
	Own int
}

// Result is how a rank ended.
type Result struct {
	Rank   int
	Err    error // its exit status (nil: success)
	Output []byte
}

// Job is a running job.
type Job struct {
	size     int
	t        testing.TB
	cmds     []*exec.Cmd
	outs     []*bytes.Buffer
	exits    []error
	done     []chan struct{} // closed when the rank has exited (exits[r] is set)
	cfg      Config
	start    time.Time
	dir      string
	deadline time.Time
	once     sync.Once
}

// Self is what rank r, one of this process's own (below Config.Own),
// knows of itself: its side of the job's exchange.
func (j *Job) Self(r int) Self {
	return Self{Rank: r, Size: j.size, Dir: j.dir, Deadline: j.deadline}
}

// testName is the test (and subtests) a rank must run: the current one.
func testName(t testing.TB) string {
	parts := strings.Split(t.Name(), "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// Start starts n ranks of the current test and returns the job; Wait
// (or the test's end) collects them.
func Start(t testing.TB, n int, cfg Config) *Job {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = 60 * time.Second
	}
	j := &Job{t: t, cfg: cfg, start: time.Now(), dir: t.TempDir()}
	// Ranks give up waiting for each other a little before they are
	// killed, so that they can still say who never came.
	deadline := j.start.Add(cfg.Timeout - min(cfg.Timeout/5, 5*time.Second))
	j.deadline = deadline
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	name := testName(t)
	if cfg.Test != "" {
		name = "^" + regexp.QuoteMeta(cfg.Test) + "$"
	}
	j.size = n
	j.exits = make([]error, n-cfg.Own)
	for r := cfg.Own; r < n; r++ {
		args := append([]string{"-test.run=" + name, "-test.count=1", "-test.v"}, cfg.Args...)
		argv := append([]string{exe}, args...)
		if cfg.Wrap != nil {
			argv = append(cfg.Wrap(r), argv...)
		}
		c := exec.Command(argv[0], argv[1:]...)
		c.Env = append(os.Environ(), envRank+"="+strconv.Itoa(r), envSize+"="+strconv.Itoa(n),
			envDir+"="+j.dir, envUntil+"="+strconv.FormatInt(deadline.UnixNano(), 10))
		if cfg.Env != nil {
			c.Env = append(c.Env, cfg.Env(r)...)
		}
		out := &bytes.Buffer{}
		c.Stdout, c.Stderr = out, out
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := c.Start(); err != nil {
			j.killAll()
			t.Fatalf("multiproc: starting rank %d: %v", r, err)
		}
		done := make(chan struct{})
		go func() { j.exits[r-cfg.Own] = c.Wait(); close(done) }()
		j.cmds, j.outs, j.done = append(j.cmds, c), append(j.outs, out), append(j.done, done)
	}
	t.Cleanup(j.killAll)
	return j
}

// Kill sends SIGKILL to rank r's process group (a rank that dies).
func (j *Job) Kill(r int) {
	if p := j.cmds[r-j.cfg.Own].Process; p != nil {
		_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
	}
}

// Pid is rank r's process id.
func (j *Job) Pid(r int) int { return j.cmds[r-j.cfg.Own].Process.Pid }

func (j *Job) killAll() {
	j.once.Do(func() {
		for i := range j.cmds {
			j.Kill(i + j.cfg.Own)
		}
		for _, d := range j.done {
			select {
			case <-d:
			case <-time.After(5 * time.Second):
			}
		}
	})
}

// Wait waits for every rank it started (killing them all at the
// timeout) and returns how each ended.
func (j *Job) Wait() []Result {
	j.t.Helper()
	left := time.Until(j.start.Add(j.cfg.Timeout))
	timer := time.NewTimer(max(left, 0))
	defer timer.Stop()
	res := make([]Result, len(j.cmds))
	timedOut := false
	for r, d := range j.done {
		select {
		case <-d:
		case <-timer.C:
			timedOut = true
			j.killAll()
			<-d
		}
		res[r] = Result{Rank: r + j.cfg.Own, Err: j.exits[r]}
	}
	for r := range res {
		res[r].Output = j.outs[r].Bytes()
		if timedOut && res[r].Err != nil {
			res[r].Err = fmt.Errorf("killed after the job's %v: %w", j.cfg.Timeout, res[r].Err)
		}
	}
	return res
}

// Run starts n ranks of the current test, waits for them and fails the
// test, with the rank's output, for each rank that did not end as
// expected (by default: successfully).
func Run(t testing.TB, n int, cfgs ...Config) []Result {
	t.Helper()
	var cfg Config
	if len(cfgs) > 0 {
		cfg = cfgs[0]
	}
	res := Start(t, n, cfg).Wait()
	Check(t, res, cfg.Expect)
	return res
}

// Check fails t for every rank whose end expect refuses (nil expect: any
// failure), with its output.
func Check(t testing.TB, res []Result, expect func(rank int, err error) error) {
	t.Helper()
	for _, r := range res {
		err := r.Err
		if expect != nil {
			err = expect(r.Rank, r.Err)
		}
		if err != nil {
			t.Errorf("rank %d of %d: %v\n%s", r.Rank, len(res), err, indent(r.Output))
		}
	}
}

func indent(b []byte) string {
	s := strings.TrimRight(string(b), "\n")
	return "\t| " + strings.ReplaceAll(s, "\n", "\n\t| ")
}

// Context is a context that ends at the job's deadline.
func (s Self) Context() (context.Context, context.CancelFunc) {
	return context.WithDeadline(context.Background(), s.Deadline)
}
