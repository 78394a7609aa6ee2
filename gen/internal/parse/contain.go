package parse

import (
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"modernc.org/cc/v4"

	"github.com/verbsexp/verbsexp/gen/internal/cache"
	"github.com/verbsexp/verbsexp/gen/internal/gctune"
	"github.com/verbsexp/verbsexp/internal/inputfile"
	"github.com/verbsexp/verbsexp/internal/target"
)

// The C front end, modernc.org/cc/v4, runs in a child process: the
// generator's own executable, started again with frontEndEnv set, under
// limits on its memory, CPU time and stack. cc/v4 recurses once per
// level of nesting (a Go stack overflow is fatal, no recover catches
// it), never returns from some inputs gcc accepts (`#define X (void *`),
// and may expand macros without bound. In the child, any of that is the
// child's death, which the parent reports with the headers it was
// reading; the generator itself never dies of it. The front end's own
// expansion limit is off (Config.ExpansionLimit 0): reached during
// EvalAllMacros it would silently leave macros without a value, while
// running out of memory or time is an error. So nothing decides what the
// headers may hold but gcc and these limits, far above what real headers
// need (TestFrontEndLimitsLeaveRoom). The expansion scan (expansion.go)
// runs first: what the child could not get through within them it
// refuses at once, with the macro's file and line, and when the child
// fails anyway it names the macro that made it fail.

// frontEndEnv marks the child: its value is "child".
const frontEndEnv = "VERBSEXP_FRONT_END"

// The child's limits. The CPU time can be raised with
// VERBSEXP_FRONT_END_CPU (seconds) and the memory with
// VERBSEXP_FRONT_END_MEMORY (MiB), for headers far larger than real
// ones; the real headers take 0.5–0.8 s and at most 145 MiB for three
// targets (TestFrontEndLimitsLeaveRoom).
const (
	defaultFrontEndCPU    = 20      // seconds
	defaultFrontEndMemory = 2 << 10 // MiB the Go runtime may hold (see watchMemory)
	frontEndStack         = 256 << 20
	// frontEndWall bounds the child in wall time too, should it ever
	// block: CPU time does not pass then.
	frontEndWall = 10 * time.Minute
)

func init() {
	if os.Getenv(frontEndEnv) == "child" {
		os.Exit(childMain(os.Stdin, os.Stdout, os.Stderr))
	}
}

// frontEndLimit reads a limit from the environment, or def.
func frontEndLimit(name string, def int64) (int64, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive number", name, v)
	}
	return n, nil
}

// childRequest is what the parent sends the child on its stdin.
type childRequest struct {
	Targets []childTarget
	Opts    Options
	Cache   bool // use the cache (cache.Open), as the parent does
}

// childTarget is a Compiler as the child rebuilds it.
type childTarget struct {
	GoArch, Path, Name, ID string
	Facts                  compilerFacts
}

// childResponse is what the child writes on its stdout.
type childResponse struct {
	Units []*Unit
	Sums  []string
	Errs  []string // per target, "" for none
	// CompilerCPU is the child's compilers' CPU time (nanoseconds: the
	// expansion scan's preprocessor), for the parent's CompilerCPU.
	CompilerCPU int64
}

// progressPrefix starts the lines the child writes to its stderr for
// each header of the -I directories it reads: the parent names the last
// one when the child dies.
const progressPrefix = "verbsexp front end: reading "

// progress is where the child reports the headers it reads (nil in the
// parent, or when parse translates in process).
var progress io.Writer

// childMain is the child: it sets its limits, translates the requested
// targets concurrently (as the parent did in process) and writes the
// units.
func childMain(in io.Reader, out, errw io.Writer) int {
	cpu, err1 := frontEndLimit("VERBSEXP_FRONT_END_CPU", defaultFrontEndCPU)
	mem, err2 := frontEndLimit("VERBSEXP_FRONT_END_MEMORY", defaultFrontEndMemory)
	if err := errors.Join(err1, err2); err != nil {
		fmt.Fprintln(errw, err)
		return 2
	}
	// The soft limit sends SIGXCPU, which the Go runtime ignores; the hard
	// one, a second later, kills.
	syscall.Setrlimit(syscall.RLIMIT_CPU, &syscall.Rlimit{Cur: uint64(cpu), Max: uint64(cpu) + 1})
	// The address space only as a backstop: the Go runtime reserves
	// far more than it uses (a 1 GiB RLIMIT_AS fails at start).
	as := uint64(mem+addressSlack) << 20
	syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: as, Max: as})
	go watchMemory(mem<<20, errw)
	debug.SetMaxStack(frontEndStack)
	gctune.Start() // as the parent's main does: the child is where the allocation is
	progress = errw

	var req childRequest
	if err := gob.NewDecoder(in).Decode(&req); err != nil {
		fmt.Fprintln(errw, "reading the request:", err)
		return 2
	}
	if refused := scanInChild(&req, errw); refused != "" {
		resp := childResponse{Units: make([]*Unit, len(req.Targets)), Sums: make([]string, len(req.Targets)), Errs: make([]string, len(req.Targets))}
		for i := range req.Targets {
			resp.Units[i], resp.Errs[i] = &Unit{}, refused
		}
		resp.CompilerCPU = compilerCPU.Load()
		if err := gob.NewEncoder(out).Encode(&resp); err != nil {
			fmt.Fprintln(errw, "writing the refusal:", err)
			return 2
		}
		return 0
	}
	var c *cache.Cache
	if req.Cache {
		c = cache.Open()
	}
	n := len(req.Targets)
	resp := childResponse{Units: make([]*Unit, n), Sums: make([]string, n), Errs: make([]string, n)}
	var src cc.SourceCache
	var wg sync.WaitGroup
	for i, t := range req.Targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comp, err := t.compiler()
			if err == nil {
				resp.Units[i], resp.Sums[i], err = TranslateUnit(comp, req.Opts, &src, c)
			}
			if err != nil {
				resp.Errs[i] = err.Error()
			}
		}()
	}
	wg.Wait()
	for i, u := range resp.Units {
		if u == nil {
			resp.Units[i] = &Unit{} // gob has no nil elements; Errs[i] says why
		}
	}
	resp.CompilerCPU = compilerCPU.Load()
	if err := gob.NewEncoder(out).Encode(&resp); err != nil {
		fmt.Fprintln(errw, "writing the units:", err)
		return 2
	}
	return 0
}

// addressSlack is what RLIMIT_AS allows beyond the memory limit, in MiB.
const addressSlack = 4 << 10

// outOfMemory is what the child writes before it exits for want of
// memory; childError recognises it.
const outOfMemory = "verbsexp front end: out of memory"

// watchMemory ends the child when the memory the Go runtime holds (all
// it mapped, less what it gave back to the system) passes limit bytes:
// checked every 10 ms, so an expansion running away at gigabytes a
// second overshoots by some tens of megabytes. SetMemoryLimit makes the
// collector work to stay below it first.
func watchMemory(limit int64, errw io.Writer) {
	debug.SetMemoryLimit(limit)
	samples := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}, {Name: "/memory/classes/heap/stacks:bytes"}}
	for range time.Tick(10 * time.Millisecond) {
		metrics.Read(samples)
		if held := int64(samples[0].Value.Uint64() - samples[1].Value.Uint64()); held > limit {
			fmt.Fprintf(errw, "%s: %d MiB held, %d MiB of it stacks\n", outOfMemory, held>>20, samples[2].Value.Uint64()>>20)
			os.Exit(3)
		}
	}
}

func (t childTarget) compiler() (*Compiler, error) {
	tg, ok := target.Lookup(t.GoArch)
	if !ok {
		return nil, fmt.Errorf("unknown target %s", t.GoArch)
	}
	cfg, err := t.Facts.config(t.GoArch, t.Path)
	if err != nil {
		return nil, err
	}
	return &Compiler{Target: tg, Path: t.Path, Name: t.Name, Config: cfg, ID: t.ID, facts: t.Facts}, nil
}

// TranslateUnits is TranslateUnit for the compilers comps[i] with need[i],
// all in one child process (so their translations share what they read,
// as in process). opts.Checked must be set: the parent has run the
// target compiler's check. The results are in comps' order (nil where
// not needed); a child that dies fails every target it had.
func TranslateUnits(comps []*Compiler, need []bool, opts Options, c *cache.Cache) ([]*Unit, []string, []error) {
	units, sums, errs, _ := translateUnits(comps, need, opts, c)
	return units, sums, errs
}

// translateUnits is TranslateUnits, with what the child used (nil when
// none ran).
func translateUnits(comps []*Compiler, need []bool, opts Options, c *cache.Cache) ([]*Unit, []string, []error, *syscall.Rusage) {
	n := len(comps)
	units, sums, errs := make([]*Unit, n), make([]string, n), make([]error, n)
	req := childRequest{Opts: opts, Cache: c != nil}
	var idx []int
	var arches []string
	for i, comp := range comps {
		if !need[i] {
			continue
		}
		idx = append(idx, i)
		arches = append(arches, comp.Target.GoArch)
		req.Targets = append(req.Targets, childTarget{comp.Target.GoArch, comp.Path, comp.Name, comp.ID, comp.facts})
	}
	if len(idx) == 0 {
		return units, sums, errs, nil
	}
	resp, usage, err := runChild(&req, "linux/"+strings.Join(arches, ","))
	for k, i := range idx {
		switch {
		case err != nil:
			errs[i] = err
		case resp.Errs[k] != "":
			errs[i] = errors.New(resp.Errs[k])
		default:
			units[i], sums[i] = resp.Units[k], resp.Sums[k]
		}
	}
	return units, sums, errs, usage
}

// runChild starts the child, sends it req and reads its response, with
// the child's resource usage; where names the targets for messages.
func runChild(req *childRequest, where string) (*childResponse, *syscall.Rusage, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: cannot start the C front end: %v", where, err)
	}
	cpu, err1 := frontEndLimit("VERBSEXP_FRONT_END_CPU", defaultFrontEndCPU)
	mem, err2 := frontEndLimit("VERBSEXP_FRONT_END_MEMORY", defaultFrontEndMemory)
	if err := errors.Join(err1, err2); err != nil {
		return nil, nil, err
	}
	var in bytes.Buffer
	if err := gob.NewEncoder(&in).Encode(req); err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), frontEndWall)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), frontEndEnv+"=child")
	cmd.Stdin = &in
	var out bytes.Buffer
	stderr := &boundedBuffer{max: compilerOutputLimit}
	cmd.Stdout, cmd.Stderr = &out, stderr
	killGroup(cmd)
	dieWithParent(cmd)
	cmd.WaitDelay = 5 * time.Second
	runErr := cmd.Run()
	var usage *syscall.Rusage
	if cmd.ProcessState != nil {
		usage, _ = cmd.ProcessState.SysUsage().(*syscall.Rusage)
	}
	if runErr == nil {
		var resp childResponse
		if err := gob.NewDecoder(&out).Decode(&resp); err == nil && len(resp.Errs) == len(req.Targets) {
			compilerCPU.Add(resp.CompilerCPU)
			return &resp, usage, nil
		} else if err != nil {
			runErr = fmt.Errorf("its answer does not read: %v", err)
		} else {
			runErr = fmt.Errorf("it answered for %d targets, not %d", len(resp.Errs), len(req.Targets))
		}
	}
	return nil, usage, childError(where, runErr, ctx.Err() != nil, string(stderr.Bytes()), cpu, mem)
}

// childFailureKind is the limit the child reached.
type childFailureKind int

const (
	failedOther childFailureKind = iota
	failedStack
	failedMemory
	failedCPU
	failedTime
)

// childFailure is the child's death, said: where (the targets), the
// macro the expansion scan suspects of it (file:line and why; "" for
// none), then msg.
type childFailure struct {
	where   string
	kind    childFailureKind
	suspect string
	msg     string
}

func (e *childFailure) Error() string {
	if e.suspect != "" {
		return e.where + ": " + e.suspect + ": " + e.msg
	}
	return e.where + ": " + e.msg
}

// childError says why the child failed, and what it was reading.
func childError(where string, err error, timedOut bool, stderr string, cpu, mem int64) error {
	if hint, ok := inputfile.OutOfDescriptors(err); ok {
		return fmt.Errorf("%s: cannot start the C front end: %v: %s", where, err, hint)
	}
	last := "none yet"
	var other []string
	suspects := map[childFailureKind]string{}
	for _, l := range strings.Split(stderr, "\n") {
		if p, ok := strings.CutPrefix(l, progressPrefix); ok {
			last = p
		} else if p, ok := strings.CutPrefix(l, suspectPrefix); ok {
			var kind childFailureKind
			if n, _ := fmt.Sscanf(p, "%d ", &kind); n == 1 {
				_, suspects[kind], _ = strings.Cut(p, " ")
			}
		} else if strings.TrimSpace(l) != "" && len(other) < 3 && !strings.HasPrefix(l, "goroutine ") && !strings.HasPrefix(l, "\t") {
			other = append(other, strings.TrimSpace(l))
		}
	}
	reading := "the last header it read: " + last
	var ee *exec.ExitError
	sig := syscall.Signal(-1)
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			sig = ws.Signal()
		}
	}
	var held, stacks int64
	if i := strings.Index(stderr, outOfMemory+": "); i >= 0 {
		fmt.Sscanf(stderr[i+len(outOfMemory)+2:], "%d MiB held, %d MiB of it stacks", &held, &stacks)
	}
	failed := func(kind childFailureKind, format string, args ...any) error {
		return &childFailure{where: where, kind: kind, suspect: suspects[kind], msg: fmt.Sprintf(format, args...)}
	}
	switch {
	case stacks*2 > held && held > 0:
		return failed(failedStack, "the C front end the generator reads the headers with (modernc.org/cc/v4) ran out of its %d MiB of memory, %d MiB of it stack (%s): it recurses once per level of nesting, and the headers nest deeper than it can follow (in an expression, a declarator or a macro): nest them less", mem, stacks, reading)
	case strings.Contains(stderr, "stack overflow") || strings.Contains(stderr, "stack exceeds"):
		return failed(failedStack, "the C front end the generator reads the headers with (modernc.org/cc/v4) overflowed its %d MiB stack (%s): it recurses once per level of nesting, and the headers nest deeper than it can follow (in an expression, a declarator or a macro): nest them less", frontEndStack>>20, reading)
	case strings.Contains(stderr, outOfMemory) || strings.Contains(stderr, "out of memory") || strings.Contains(stderr, "cannot allocate memory"):
		return failed(failedMemory, "the C front end the generator reads the headers with (modernc.org/cc/v4) ran out of its %d MiB of memory (%s): a macro may expand without bound; VERBSEXP_FRONT_END_MEMORY=MiB raises the limit", mem, reading)
	case sig == syscall.SIGXCPU || sig == syscall.SIGKILL && !timedOut:
		return failed(failedCPU, "the C front end the generator reads the headers with (modernc.org/cc/v4) used up its %d s of CPU time (%s; the real headers take under a second): a macro may expand without bound, and it does not return from some constructs gcc accepts (an object-like macro ending inside a cast such as #define X (void *); VERBSEXP_FRONT_END_CPU=seconds raises the limit", cpu, reading)
	case timedOut:
		return failed(failedTime, "the C front end the generator reads the headers with (modernc.org/cc/v4) did not finish within %v and was stopped (%s)", frontEndWall, reading)
	}
	msg := strings.Join(other, "\n")
	if msg == "" {
		msg = err.Error()
	}
	return failed(failedOther, "the C front end the generator reads the headers with (modernc.org/cc/v4) failed (%v; %s):\n%s\nPlease report this with the headers you used", err, reading, msg)
}
