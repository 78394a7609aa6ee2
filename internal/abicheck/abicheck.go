// Package abicheck turns an abi.json manifest into C that the target's
// compiler accepts only if every recorded size, alignment, offset and
// constant is what the C headers really say. It is the C compiler's side
// of the ABI pin: Check runs it and names each assertion that fails (gen
// check, the repository's tests); Source and Compile are the raw parts.
package abicheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/verbsexp/verbsexp/internal/inputfile"
	"github.com/verbsexp/verbsexp/internal/manifest"
	"github.com/verbsexp/verbsexp/internal/target"
)

// RestatementOnly is the macro the generator and its checks define for
// every compile of the headers: the project's restatement (headers/)
// otherwise defers to MLNX_OFED's own headers where the compiler finds
// them installed, and what the generator reads must not depend on what
// the machine has installed.
const RestatementOnly = "VERBSEXP_RESTATEMENT_ONLY"

// Assertion is one compile-time check: a C constant expression and the
// message the compiler prints when it is false.
type Assertion struct {
	Cond, Msg string
}

// Relation is what an assertion holds a constant to.
type Relation uint8

const (
	// Equal: the headers' value is the recorded one.
	Equal Relation = iota
	// AtLeast: a reserved bound (one past the last flag), which releases
	// move up as they add flags; the headers' may be larger.
	AtLeast
	// HasBits: a flag mask, which releases widen; the headers' has at
	// least the recorded bits.
	HasBits
)

// Assertions lists the checks for one arch of a manifest: every record's
// size and alignment, every member's offset and size, every constant's
// value. Bit-fields cannot be named by offsetof: Check reads their
// positions from an object file instead (bits.go). hint is appended to
// every message (what to do when it fails). rel says what each constant
// is held to (nil: Equal for all): gen check pins every value of the
// headers a package was generated from, the build guard in a package's
// cgo preamble lets bounds grow.
func Assertions(a *manifest.Arch, arch, hint string, rel func(c string) Relation) []Assertion {
	n := len(a.Constants)
	for _, rec := range a.Records {
		n += 2 + 2*len(rec.Fields)
	}
	r := make([]Assertion, 0, n)
	add := func(cond, msg string) { r = append(r, Assertion{cond, msg + hint}) }
	// Concatenated, not formatted: a package's cgo preamble holds these
	// for every target (thousands), and fmt was a fifth of its rendering.
	on := " on " + arch
	for _, rec := range a.Records {
		size, align := strconv.FormatInt(rec.Size, 10), strconv.FormatInt(rec.Align, 10)
		add("sizeof("+rec.C+") == "+size, rec.C+": size is not "+size+on)
		add("_Alignof("+rec.C+") == "+align, rec.C+": alignment is not "+align+on)
		for _, f := range rec.Fields {
			if f.BitOffset != nil {
				continue
			}
			off := strconv.FormatInt(f.Offset, 10)
			add("offsetof("+rec.C+", "+f.C+") == "+off, rec.C+"."+f.C+": offset is not "+off+on)
			if f.Size > 0 { // a flexible array has no size to take
				size := strconv.FormatInt(f.Size, 10)
				add("sizeof((("+rec.C+" *)0)->"+f.C+") == "+size, rec.C+"."+f.C+": size is not "+size+on)
			}
		}
	}
	for _, c := range a.Constants {
		lit := c.Value.String() + "ULL"
		if c.Value.Negative() {
			lit = "(" + c.Value.String() + "LL)"
		}
		how := Equal
		if rel != nil && !c.Value.Negative() {
			how = rel(c.C)
		}
		switch how {
		case AtLeast:
			add(fmt.Sprintf("(unsigned long long)(%s) >= %s", c.C, lit), fmt.Sprintf("%s is below %s on %s (a bound: these headers know fewer flags than the package)", c.C, c.Value, arch))
		case HasBits:
			add(fmt.Sprintf("((unsigned long long)(%s) & %s) == %s", c.C, lit, lit), fmt.Sprintf("%s lacks bits of %s on %s (a flag mask: these headers accept fewer flags than the package)", c.C, c.Value, arch))
		default:
			add(fmt.Sprintf("(%s) == %s", c.C, lit), fmt.Sprintf("%s is not %s on %s", c.C, c.Value, arch))
		}
	}
	return r
}

// Source returns a C translation unit of _Static_asserts for one arch of
// m, including entry first, and the number of assertions.
func Source(m *manifest.Manifest, arch, entry string) (string, int, error) {
	if err := checkEntry(entry); err != nil {
		return "", 0, err
	}
	a := m.Arches[arch]
	if a == nil {
		return "", 0, fmt.Errorf("manifest has no arch %s", arch)
	}
	as := Assertions(a, arch, "", nil)
	return source(arch, entry, as), len(as), nil
}

// checkEntry refuses an entry header that cannot stand in #include <…>
// as it is (the manifest's names are checked when it is read).
func checkEntry(entry string) error {
	if !manifest.HeaderPath(entry) {
		return fmt.Errorf("entry header %q: want a relative header path of letters, digits and _ - . + / only", entry)
	}
	return nil
}

// headerLines is how many lines of source come before the first
// assertion.
const headerLines = 3

// source spells the assertions as C, assertion i (from 0) on line
// headerLines+1+i.
func source(arch, entry string, as []Assertion) string {
	var b strings.Builder
	fmt.Fprintf(&b, "/* ABI assertions for linux/%s, generated from abi.json: line %d + i is assertion i. */\n", arch, headerLines)
	fmt.Fprintf(&b, "#include <stddef.h>\n#include <%s>\n", entry)
	for _, x := range as {
		fmt.Fprintf(&b, "_Static_assert(%s, %q);\n", x.Cond, x.Msg)
	}
	return b.String()
}

// Compile checks the assertions for t with t's C compiler, with includes
// searched first. It returns the compiler's complaints, if any.
func Compile(src string, t target.Target, includes []string) error {
	cc, err := compiler(t)
	if err != nil {
		return err
	}
	c, err := compile(cc, t, src, includes, "-fsyntax-only", "-fmax-errors=50")
	if err != nil {
		return err
	}
	if c.err != nil {
		return fmt.Errorf("linux/%s: %s rejects the manifest:\n%s", t.GoArch, filepath.Base(cc), c.out)
	}
	return nil
}

// checkTimeout bounds one compiler run; the real headers take well under
// a second per target.
const checkTimeout = 2 * time.Minute

// compilation is one run of the compiler on a scratch file.
type compilation struct {
	out  string        // what it printed
	file string        // the scratch file, as out names it
	err  error         // its exit: nil when it accepted the file
	cpu  time.Duration // its CPU time (user and system, its own children's included)
}

// compile writes src to a scratch file and runs cc -std=gnu11 on it,
// with flags (-fsyntax-only, or -c -o FILE) and includes searched first.
// The error is for a run that could not happen or did not finish within
// checkTimeout.
func compile(cc string, t target.Target, src string, includes []string, flags ...string) (*compilation, error) {
	return compileWith(cc, t, src, includes, append([]string{"-std=gnu11"}, flags...))
}

// Compiled is one run of a compiler on a scratch source file.
type Compiled struct {
	Out  string        // what it printed (stdout and stderr)
	File string        // the scratch source file, as Out names it (removed)
	Err  error         // its exit: nil when it accepted the source
	CPU  time.Duration // the compiler's CPU time (user and system, cc1's and as's included)
}

// CompileObject compiles src with the compiler at path cc, which the
// caller has proven to be t's, into the object file obj: cc -c in the
// compiler's own default dialect (the one its predefined macros
// describe), with includes searched first and flags added. The error is
// for a run that could not happen or did not finish; a compiler that
// refused src is a Compiled whose Err is set. SymbolData reads obj.
func CompileObject(cc string, t target.Target, src, obj string, includes []string, flags ...string) (*Compiled, error) {
	c, err := compileWith(cc, t, src, includes, append([]string{"-c", "-o", obj}, flags...))
	if err != nil {
		return nil, err
	}
	return &Compiled{Out: c.out, File: c.file, Err: c.err, CPU: c.cpu}, nil
}

// compileWith is compile with every flag the caller's.
func compileWith(cc string, t target.Target, src string, includes []string, flags []string) (*compilation, error) {
	dir, err := os.MkdirTemp("", "abicheck-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "abi_"+t.GoArch+".c")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		return nil, err
	}
	args := append(append([]string(nil), flags...), "-D"+RestatementOnly)
	for _, d := range includes {
		args = append(args, "-I", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, cc, append(args, file)...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("linux/%s: %s did not finish the check in %v", t.GoArch, filepath.Base(cc), checkTimeout)
	}
	var exit *exec.ExitError
	if runErr != nil && !errors.As(runErr, &exit) {
		// It did not run: not a verdict on the manifest or the headers.
		if hint, ok := inputfile.OutOfDescriptors(runErr); ok {
			return nil, fmt.Errorf("linux/%s: cannot run %s: %v: %s", t.GoArch, filepath.Base(cc), runErr, hint)
		}
		return nil, fmt.Errorf("linux/%s: cannot run %s: %v", t.GoArch, filepath.Base(cc), runErr)
	}
	cpu := time.Duration(0)
	if ps := cmd.ProcessState; ps != nil {
		cpu = ps.UserTime() + ps.SystemTime()
	}
	return &compilation{out.String(), file, runErr, cpu}, nil
}

// compiler finds t's C compiler and proves it is that target (its
// predefined macros name t's architecture, pointer size and byte order),
// as the generator does before it trusts a layout: a check run with
// another target's compiler would blame the manifest for the compiler.
func compiler(t target.Target) (string, error) {
	cc, err := t.Compiler()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, cc, "-dM", "-E", "-x", "c", os.DevNull)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.Output()
	if hint, ok := inputfile.OutOfDescriptors(err); ok {
		return "", fmt.Errorf("linux/%s: cannot run %s: %v: %s", t.GoArch, cc, err, hint)
	}
	if err != nil {
		return "", fmt.Errorf("linux/%s: %s cannot tell its predefined macros (%v): %s", t.GoArch, cc, err, t.Remedy())
	}
	if err := t.Check(cc, string(out)); err != nil {
		return "", err
	}
	return cc, nil
}

// probeTimeout bounds the compiler's macro dump (milliseconds normally).
const probeTimeout = 30 * time.Second

// Result is what one target's compiler says of a manifest's assertions.
type Result struct {
	Target     target.Target
	Compiler   string // the compiler that was run
	Assertions int    // how many were checked
	// Failures are the assertions the compiler rejected, in manifest
	// order, each with the compiler's first complaint about its line.
	Failures []Failure
	// Other is compiler output about anything but an assertion (the
	// headers themselves do not compile), its first lines; "" if none.
	Other string
}

// Failure is one rejected assertion.
type Failure struct {
	Assertion
	Compiler string // e.g. "static assertion failed" or "'struct x' has no member named 'y'"
}

// OK says the compiler accepted every assertion.
func (r *Result) OK() bool { return len(r.Failures) == 0 && r.Other == "" }

// errorLine is a compiler diagnostic: file:line:col: error: message.
var errorLine = regexp.MustCompile(`^(.*?):(\d+):(?:\d+:)? (?:fatal )?error: (.*)$`)

// Check compiles the assertions for arch t.GoArch of m with t's compiler,
// including entry with includes searched first. An error means the check
// could not run (no compiler, no such arch); a failing check is a Result
// that is not OK.
func Check(m *manifest.Manifest, t target.Target, entry string, includes []string) (*Result, error) {
	if err := checkEntry(entry); err != nil {
		return nil, err
	}
	a := m.Arches[t.GoArch]
	if a == nil {
		return nil, fmt.Errorf("the manifest has no linux/%s", t.GoArch)
	}
	cc, err := compiler(t)
	if err != nil {
		return nil, err
	}
	as := Assertions(a, t.GoArch, "", nil)
	c, err := compile(cc, t, source(t.GoArch, entry, as), includes, "-fsyntax-only", "-fmax-errors=0", "-fno-diagnostics-show-caret", "-w")
	if err != nil {
		return nil, err
	}
	r := &Result{Target: t, Compiler: cc, Assertions: len(as)}
	bits := bitFields(a)
	r.Assertions += len(bits)
	if c.err == nil {
		// The headers compile: the bit-fields' positions can be read.
		if err := checkBits(r, cc, t, entry, includes, bits); err != nil {
			return nil, err
		}
		return r, nil
	}
	failed := map[int]string{}
	var other []string
	for _, line := range strings.Split(c.out, "\n") {
		mt := errorLine.FindStringSubmatch(line)
		if mt == nil {
			continue
		}
		n, _ := strconv.Atoi(mt[2])
		if i := n - headerLines - 1; mt[1] == c.file && i >= 0 && i < len(as) {
			if _, seen := failed[i]; !seen {
				msg := strings.TrimSpace(mt[3])
				if strings.HasPrefix(msg, "static assertion failed") {
					msg = "static assertion failed" // the rest repeats Msg
				}
				failed[i] = msg
			}
			continue
		}
		other = append(other, strings.ReplaceAll(line, c.file, filepath.Base(c.file)))
	}
	idx := make([]int, 0, len(failed))
	for i := range failed {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		r.Failures = append(r.Failures, Failure{as[i], failed[i]})
	}
	if len(other) > 10 {
		other = append(other[:10], fmt.Sprintf("… and %d more errors", len(other)-10))
	}
	r.Other = strings.Join(other, "\n")
	if r.Other == "" && len(r.Failures) == 0 {
		// Failed without an error line we understand: show what it said.
		r.Other = strings.TrimSpace(c.out)
		if r.Other == "" {
			r.Other = c.err.Error()
		}
	}
	return r, nil
}
