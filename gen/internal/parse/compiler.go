package parse

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/verbsexp/verbsexp/internal/abicheck"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"modernc.org/cc/v4"

	"github.com/verbsexp/verbsexp/internal/inputfile"
)

// Bounds of the target compiler's check of the headers, which takes ~30 ms
// on the real ones.
var compilerTimeout = 60 * time.Second // a variable for the test of the timeout

const (
	compilerOutputLimit = 1 << 20 // bytes of its output kept
	compilerMemoryKiB   = 1 << 20 // its address space (ulimit -v): 1 GiB (cc1 takes ~100 MiB on the real headers)
)

// checkHeaders checks the headers before cc/v4 reads them: the #include
// graph (checkIncludes: regular files within the size bounds only), then
// the target compiler of cfg with -fsyntax-only, whose diagnostics are
// the ones users know. cc/v4 (v4.34.0) loops forever, allocating, on some
// invalid input (a header ending inside a declarator, `int *`: found by
// FuzzGenerate), so it only sees what the compiler accepts.
func checkHeaders(goarch string, cfg *cc.Config, dirs []string, entry string) error {
	if cfg.CC == "" {
		return nil
	}
	path, err := checkEntryIncludes(goarch, cfg, dirs, entry)
	if path == "" || err != nil {
		return err
	}
	return compilerAccepts(goarch, cfg, dirs, path)
}

// compilerAccepts runs the compiler of cfg over the entry header at path
// (-fsyntax-only) and reports its first errors.
func compilerAccepts(goarch string, cfg *cc.Config, dirs []string, path string) error {
	args := []string{"-fsyntax-only", "-D" + abicheck.RestatementOnly, "-x", "c", path}
	for _, d := range dirs {
		args = append(args, "-I", d)
	}
	out, err := runBounded(cfg.CC, args)
	var timeout *timeoutError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &timeout):
		return fmt.Errorf("linux/%s: %s did not finish checking the headers within %v and was stopped; a header may expand macros without bound, or #include through a macro a FIFO or a device (the generator reads only regular files): fix the headers", goarch, cfg.CC, compilerTimeout)
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		if hint, ok := inputfile.OutOfDescriptors(err); ok {
			return fmt.Errorf("linux/%s: cannot run %s: %v: %s", goarch, cfg.CC, err, hint)
		}
		return fmt.Errorf("linux/%s: running %s: %v", goarch, cfg.CC, err)
	}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "error:") {
			lines = append(lines, strings.TrimSpace(l))
		}
		if len(lines) == 10 {
			break
		}
	}
	if len(lines) == 0 {
		// Failed without an error line: out of memory (the ulimit), a
		// crash. Show what it said.
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if len(lines) == 5 {
				break
			}
			lines = append(lines, strings.TrimSpace(l))
		}
		return fmt.Errorf("linux/%s: %s failed on the headers (%v) without an error line:\n%s\n(it runs with %d GiB of address space and %v; a header may expand macros without bound: fix the headers)", goarch, cfg.CC, exit, strings.Join(lines, "\n"), compilerMemoryKiB>>20, compilerTimeout)
	}
	return frontEndError(goarch, strings.Join(lines, "\n"))
}

// checkEntryIncludes walks the #include graph from the entry header
// (checkIncludes) and returns the entry's path: the header itself, not
// an #include of it, so that an error at its end is reported in it. The
// path is "" when no -I directory holds the entry as a regular file.
func checkEntryIncludes(goarch string, cfg *cc.Config, dirs []string, entry string) (string, error) {
	for _, d := range dirs {
		path := filepath.Join(d, entry)
		if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() {
			sys := append(append([]string(nil), cfg.IncludePaths...), cfg.SysIncludePaths...)
			if err := checkIncludes(path, dirs, sys); err != nil {
				return "", inputError(goarch, err)
			}
			return path, nil
		}
	}
	return "", nil
}

type timeoutError struct{}

func (*timeoutError) Error() string { return "timed out" }

// runBounded runs compiler args as runTool does, and within
// compilerMemoryKiB too (through /bin/sh's ulimit, set before the
// compiler starts, so it covers the compiler proper, cc1, too), with
// stdout and stderr in one buffer.
func runBounded(compiler string, args []string) ([]byte, error) {
	name := compiler
	if _, err := os.Stat("/bin/sh"); err == nil {
		name, args = "/bin/sh", append([]string{"-c", fmt.Sprintf(`ulimit -v %d 2>/dev/null; exec "$0" "$@"`, compilerMemoryKiB), compiler}, args...)
	}
	out := &boundedBuffer{max: compilerOutputLimit}
	err := run(name, args, out, out)
	return out.Bytes(), err
}

// runTool runs name with args and keeps stdout and stderr apart (at most
// compilerOutputLimit bytes of each): the compiler probe reads the
// predefined macros from one and the search lists from the other.
func runTool(name string, args ...string) (stdout, stderr []byte, err error) {
	out, errOut := &boundedBuffer{max: compilerOutputLimit}, &boundedBuffer{max: compilerOutputLimit}
	err = run(name, args, out, errOut)
	var timeout *timeoutError
	if errors.As(err, &timeout) {
		err = fmt.Errorf("did not finish within %v and was killed", compilerTimeout)
	}
	return out.Bytes(), errOut.Bytes(), err
}

// compilerCPU is the CPU time (nanoseconds) of every compiler run of
// this process and, once its answer is read, of the front end's child:
// make bench-gen shows which part of each stage the compilers are.
var compilerCPU atomic.Int64

// CompilerCPU returns the CPU time the C compilers took so far (user and
// system; the front end child's once it has answered).
func CompilerCPU() time.Duration { return time.Duration(compilerCPU.Load()) }

func addCompilerCPU(ps *os.ProcessState) {
	if ps != nil {
		compilerCPU.Add(int64(ps.UserTime() + ps.SystemTime()))
	}
}

// run is the one way the generator runs the target compiler: with
// LC_ALL=C (plain ASCII quotes in messages), empty stdin, and within
// compilerTimeout, after which its whole process group is killed and the
// error is a *timeoutError.
func run(name string, args []string, stdout, stderr *boundedBuffer) error {
	ctx, cancel := context.WithTimeout(context.Background(), compilerTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.Stdout, cmd.Stderr = stdout, stderr
	killGroup(cmd)
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	addCompilerCPU(cmd.ProcessState)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &timeoutError{}
	}
	return err
}

// boundedBuffer keeps the first max bytes written to it. (Not an
// embedded bytes.Buffer: io.Copy would use its ReadFrom, unbounded.)
type boundedBuffer struct {
	buf bytes.Buffer
	max int
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *boundedBuffer) Bytes() []byte { return b.buf.Bytes() }
