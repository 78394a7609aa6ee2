package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/verbsexp/verbsexp/gen/internal/diff"
	"github.com/verbsexp/verbsexp/gen/internal/emit"
	"github.com/verbsexp/verbsexp/gen/internal/generate"
	"github.com/verbsexp/verbsexp/internal/abicheck"
	"github.com/verbsexp/verbsexp/internal/gencmd"
	"github.com/verbsexp/verbsexp/internal/inputfile"
	"github.com/verbsexp/verbsexp/internal/manifest"
	"github.com/verbsexp/verbsexp/internal/target"
)

const checkUsage = `usage: gen check [-I DIR…] [-entry HEADER] [-arch LIST] [-baseline FILE [-ack FILE]] PKGDIR

Checks a committed generated package, for CI:

  1. current:  PKGDIR is byte for byte what this generator makes of the
               headers (regenerated in memory; differing files are listed,
               with the ABI diff when abi.json differs);
  2. C layout: every record size and alignment, member offset and size,
               bit-field position and constant of PKGDIR/abi.json is what
               each target's C compiler says on the headers
               (_Static_asserts, and bit-fields read from an object file;
               one compiler per arch);
  3. baseline: with -baseline, no breaking change from that manifest to
               PKGDIR/abi.json that the -ack file does not list (an -ack
               file that does not exist yet acknowledges nothing).

Without -I the check reads the headers and flags PKGDIR/doc.go records;
with -I they must be the ones the package was generated from. Exit
status: 0 all hold, 1 a check failed (the output says which and what to
do), 2 unusable input or command line.

Flags:
`

// maxListed bounds the differences and failed assertions printed per
// step without -v.
const maxListed = 20

// runCheck is gen check: it exits 0 when PKGDIR is current, its manifest
// holds for every target's compiler and nothing breaks against the
// baseline, 1 when any of that fails, 2 on unusable input.
func runCheck(args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "gen check: internal error: %v\nPlease report this with the headers you used.\n", r)
			code = 2
		}
	}()
	fs := flag.NewFlagSet("gen check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var g genFlags
	g.register(fs)
	baseline := fs.String("baseline", "", "abi.json `FILE` your users built against: breaking changes from it to PKGDIR/abi.json fail the check")
	ackFile := fs.String("ack", "", "`FILE` of reviewed breaking changes against -baseline, one \"KIND SUBJECT\" per line as gen diff prints them")
	verbose := fs.Bool("v", false, fmt.Sprintf("list every difference and failed assertion (default: the first %d of each)", maxListed))
	fs.Usage = func() {
		fmt.Fprint(stderr, checkUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "gen check: want one argument, PKGDIR: the directory of the generated package (gen check -h)")
		return 2
	}
	if *ackFile != "" && *baseline == "" {
		fmt.Fprintln(stderr, "gen check: -ack lists accepted changes against a baseline: give -baseline FILE too")
		return 2
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	c := &checker{out: stdout, verbose: *verbose, pkgDir: fs.Arg(0)}
	if err := c.setup(g, given); err != nil {
		var m *mismatch
		if errors.As(err, &m) {
			fmt.Fprintln(stdout, "gen check: FAIL:", m.msg)
			return 1
		}
		fmt.Fprintln(stderr, "gen check:", err)
		return 2
	}
	fmt.Fprintf(stdout, "gen check: %s against %s (linux/%s)\n", c.label, c.headers, strings.Join(c.archNames(), ","))
	ok := true
	for _, step := range []func() (bool, error){c.current, c.cLayout, func() (bool, error) { return c.baseline(*baseline, *ackFile) }} {
		passed, err := step()
		if err != nil {
			fmt.Fprintln(stderr, "gen check:", err)
			return 2
		}
		ok = ok && passed
	}
	if !ok {
		fmt.Fprintf(stdout, "gen check: FAIL: %s (above)\n", c.label)
		return 1
	}
	fmt.Fprintf(stdout, "gen check: ok: %s\n", c.label)
	return 0
}

// checker holds one gen check run.
type checker struct {
	out     io.Writer
	verbose bool
	pkgDir  string
	label   string // PKGDIR as the user wrote it, with a trailing slash
	headers string // the include directories, for messages
	opts    generate.Options
	abi     *manifest.Manifest // PKGDIR/abi.json
	step    int
}

// mismatch is a check that fails before it starts: the package was
// generated from other headers or flags than the check was given.
type mismatch struct{ msg string }

func (m *mismatch) Error() string { return m.msg }

// setup reads the package, decides the generator run that must reproduce
// it and compares it with what the package records.
func (c *checker) setup(g genFlags, given map[string]bool) error {
	c.label = strings.TrimSuffix(filepath.ToSlash(c.pkgDir), "/") + "/"
	if given["pkg"] {
		if err := checkPackageName(g.pkg); err != nil {
			return err
		}
	}
	st, err := os.Stat(c.pkgDir)
	if err != nil {
		return fmt.Errorf("PKGDIR %v", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("PKGDIR %s is not a directory: pass the directory of the generated package", c.pkgDir)
	}
	manifestFile := filepath.Join(c.pkgDir, "abi.json")
	if c.abi, err = manifest.Read(manifestFile); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s: no abi.json: is %s a package written by gen?", c.pkgDir, c.label)
		}
		return err
	}
	// What the package says it was generated with (relative paths are
	// relative to the package).
	recordedArgs, recErr := gencmd.Read(c.pkgDir)
	var rec genFlags
	if recErr == nil {
		rfs := flag.NewFlagSet("recorded", flag.ContinueOnError)
		rfs.SetOutput(io.Discard)
		rec.register(rfs)
		rfs.String("o", "", "")
		if err := rfs.Parse(recordedArgs); err != nil {
			recErr = fmt.Errorf("%s:1: the recorded command does not parse: %v", filepath.Join(c.pkgDir, gencmd.DocFile), err)
		}
		for i, d := range rec.includes {
			if !filepath.IsAbs(d) {
				rec.includes[i] = relativeToCwd(filepath.Join(realDir(c.pkgDir), d))
			}
		}
	}
	if recErr != nil && !given["I"] {
		return fmt.Errorf("no -I given, and %s records no generator command to take it from (%v): pass the -I flags the package was generated with", c.label, recErr)
	}
	if recErr == nil {
		// The flags given override the recorded ones, and must agree.
		eff := rec
		eff.includes = slices.Clone(rec.includes)
		if given["I"] {
			eff.includes = g.includes
		}
		if given["arch"] {
			eff.arches = g.arches
		}
		if given["pkg"] {
			eff.pkg = g.pkg
		}
		if given["entry"] {
			eff.entry = g.entry
		}
		if given["scope"] {
			eff.scope = g.scope
		}
		if err := c.sameRun(eff, rec, given); err != nil {
			return err
		}
		// The same directories, spelled as recorded: relative ones stay
		// relative in the regenerated #cgo CFLAGS.
		eff.includes = rec.includes
		g = eff
	}
	var shown []string
	for _, d := range g.includes {
		if strings.HasPrefix(d, "..") {
			if a, err := filepath.Abs(d); err == nil {
				d = a
			}
		}
		shown = append(shown, d)
	}
	c.headers = strings.Join(shown, " ")
	if g.pkg == "" && rec.pkg == "" {
		g.pkg = c.abi.Package // the name it was generated with
	}
	if c.opts, err = g.options(realDir(c.pkgDir)); err != nil {
		return err
	}
	if recErr == nil {
		c.opts.Command = gencmd.Join(recordedArgs)
	} else {
		// No readable record: the command gen would record now, which the
		// comparison then reports as the difference.
		words := []string{}
		for _, d := range g.includes {
			words = append(words, "-I", d)
		}
		words = append(words, "-o", c.pkgDir)
		rel, err := packageRelative(words, c.pkgDir)
		if err != nil {
			return err
		}
		c.opts.Command = gencmd.Join(rel)
	}
	c.opts.GoGenerate = c.opts.Command
	return nil
}

// sameRun compares the check's flags with the recorded ones: a package
// generated from other headers cannot be current with these, and saying
// so in one line beats hundreds of failed assertions.
func (c *checker) sameRun(g, rec genFlags, given map[string]bool) error {
	if !slices.Equal(gencmd.Canonical(rec.includes), gencmd.Canonical(g.includes)) {
		return &mismatch{fmt.Sprintf("%s was generated from %s (%s records it), this check reads %s: check it with -I %s, or regenerate it from %s",
			c.label, strings.Join(rec.includes, " "), c.label+gencmd.DocFile, strings.Join(g.includes, " "), strings.Join(rec.includes, " -I "), strings.Join(g.includes, " "))}
	}
	arches := func(s string) string {
		ts, err := target.Parse(s)
		if err != nil {
			return s
		}
		var n []string
		for _, t := range ts {
			n = append(n, t.GoArch)
		}
		return strings.Join(n, ",")
	}
	differs := func(flagName, was, now string) error {
		return &mismatch{fmt.Sprintf("%s was generated with -%s %q (%s records it), this check has -%s %q: give the same flags the package was generated with",
			c.label, flagName, was, c.label+gencmd.DocFile, flagName, now)}
	}
	switch {
	case g.entry != rec.entry:
		return differs("entry", rec.entry, g.entry)
	case g.scope != rec.scope:
		return differs("scope", rec.scope, g.scope)
	case arches(g.arches) != arches(rec.arches):
		return differs("arch", rec.arches, g.arches)
	case given["pkg"] && g.pkg != rec.pkg && !(rec.pkg == "" && g.pkg == c.abi.Package):
		return differs("pkg", rec.pkg, g.pkg)
	}
	return nil
}

func (c *checker) archNames() []string {
	var n []string
	for _, t := range c.opts.Targets {
		n = append(n, t.GoArch)
	}
	return n
}

func (c *checker) begin(title string) {
	c.step++
	fmt.Fprintf(c.out, "  %d/3 %-9s ", c.step, title+":")
}

// list prints lines indented, at most maxListed unless verbose.
func (c *checker) list(lines []string) {
	shown := lines
	if !c.verbose && len(shown) > maxListed {
		shown = shown[:maxListed]
	}
	for _, l := range shown {
		fmt.Fprintf(c.out, "        %s\n", l)
	}
	if len(shown) < len(lines) {
		fmt.Fprintf(c.out, "        … and %d more (-v lists all)\n", len(lines)-len(shown))
	}
}

// current regenerates the package in memory and compares it with PKGDIR
// byte for byte.
func (c *checker) current() (bool, error) {
	c.begin("current")
	res, err := generate.Run(c.opts)
	if err != nil {
		fmt.Fprintln(c.out, "cannot regenerate")
		return false, fmt.Errorf("regenerating %s from %s: %v", c.label, c.headers, err)
	}
	var differ, lines []string
	var fresh *manifest.Manifest
	names := map[string]bool{}
	for _, f := range res.Files {
		names[f.Name] = true
		if f.Link != "" {
			// A header link: compared by its target.
			if !generate.SameFile(filepath.Join(c.pkgDir, f.Name), f) {
				differ = append(differ, f.Name)
				have, err := os.Readlink(filepath.Join(c.pkgDir, f.Name))
				switch {
				case errors.Is(err, os.ErrNotExist):
					lines = append(lines, f.Name+": missing from "+c.label)
				case err != nil:
					lines = append(lines, f.Name+": not a symbolic link (want one to "+f.Link+")")
				default:
					lines = append(lines, f.Name+": a link to "+have+", want "+f.Link)
				}
			}
			continue
		}
		have, err := readUpTo(filepath.Join(c.pkgDir, f.Name), int64(len(f.Data))+1)
		switch {
		case errors.Is(err, os.ErrNotExist):
			differ = append(differ, f.Name)
			lines = append(lines, f.Name+": missing from "+c.label)
		case err != nil:
			fmt.Fprintln(c.out, "cannot read "+f.Name)
			return false, err
		case !bytes.Equal(have, f.Data):
			differ = append(differ, f.Name)
			lines = append(lines, f.Name+": "+firstDifference(have, f.Data))
			if f.Name == "abi.json" {
				if fresh, err = manifest.Unmarshal(f.Data); err != nil {
					return false, fmt.Errorf("the regenerated abi.json does not read back: %v", err)
				}
			}
		}
	}
	entries, err := os.ReadDir(c.pkgDir)
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		if names[e.Name()] || e.IsDir() {
			continue
		}
		if e.Type()&fs.ModeSymlink != 0 && emit.LinkName(e.Name()) {
			differ = append(differ, e.Name())
			lines = append(lines, e.Name()+": written by gen, but gen no longer writes it")
			continue
		}
		// The marker is on the second line: the start of the file is
		// enough, and a FIFO or a device is not the generator's.
		if b, err := readUpTo(filepath.Join(c.pkgDir, e.Name()), markerWindow); err == nil && bytes.Contains(b, []byte(emit.Marker)) {
			differ = append(differ, e.Name())
			lines = append(lines, e.Name()+": written by gen, but gen no longer writes it")
		}
	}
	if len(differ) == 0 {
		fmt.Fprintf(c.out, "ok: %s is what gen makes of %s (%d files)\n", c.label, c.headers, len(res.Files))
		return true, nil
	}
	fmt.Fprintf(c.out, "FAIL: %s (committed) is not what gen makes of %s now (regenerated): %d of %d files differ\n", c.label, c.headers, len(differ), len(res.Files))
	c.list(lines)
	if fresh != nil {
		rep := diff.NewReport(c.label+"abi.json (committed)", "regenerated from "+c.headers, diff.Compare(c.abi, fresh, diff.Options{EndAnchored: diff.DefaultEndAnchored}), nil)
		var b strings.Builder
		rep.WriteText(&b, false)
		c.list(strings.Split(strings.TrimRight(b.String(), "\n"), "\n"))
	}
	if cmd := moduleCommand(c.pkgDir); cmd != "" {
		fmt.Fprintf(c.out, "        regenerate it: %s (the copy of the module it is part of), review the diff and commit it\n", cmd)
		return false, nil
	}
	fmt.Fprintf(c.out, "        regenerate it: go generate %s (runs %s), review the diff and commit it\n", goPattern(c.pkgDir), c.opts.Command)
	return false, nil
}

// markerWindow is how much of a file gen check reads to find the
// generated-code marker: the recorded command (a line of flags) and the
// marker line.
const markerWindow = 64 << 10

// readUpTo returns at most the first max bytes of the regular file path
// (a FIFO or a device is refused before any read): a committed file
// longer than its regenerated version differs whatever the rest holds.
func readUpTo(path string, max int64) ([]byte, error) {
	f, _, err := inputfile.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, max))
}

// moduleCommand is the gen module command that wrote the module copy
// pkgDir is the generated/verbs of, or "".
func moduleCommand(pkgDir string) string {
	b, err := readUpTo(filepath.Join(pkgDir, "..", "..", moduleMarker), markerWindow)
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if cmd, ok := strings.CutPrefix(l, moduleWrittenBy); ok {
			return cmd
		}
	}
	return ""
}

// firstDifference describes where two versions of a file part, by line.
func firstDifference(committed, fresh []byte) string {
	a, b := strings.Split(string(committed), "\n"), strings.Split(string(fresh), "\n")
	clip := func(s string) string {
		if len(s) > 100 {
			return s[:100] + "…"
		}
		return s
	}
	for i := 0; i < len(a) || i < len(b); i++ {
		var x, y string
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y || i >= len(a) || i >= len(b) {
			return fmt.Sprintf("differs from line %d (committed %q, regenerated %q)", i+1, clip(x), clip(y))
		}
	}
	return "differs"
}

// cLayout compiles the committed manifest's assertions with each target's
// compiler on the headers.
func (c *checker) cLayout() (bool, error) {
	c.begin("C layout")
	results := make([]*abicheck.Result, len(c.opts.Targets))
	errs := make([]error, len(c.opts.Targets))
	var wg sync.WaitGroup
	for i, t := range c.opts.Targets {
		if c.abi.Arches[t.GoArch] == nil {
			errs[i] = fmt.Errorf("%sabi.json has no linux/%s (it has %s): regenerate it with -arch %s", c.label, t.GoArch, strings.Join(manifestArches(c.abi), ","), t.GoArch)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = abicheck.Check(c.abi, t, c.opts.Parse.Entry, c.opts.Parse.IncludeDirs)
		}()
	}
	wg.Wait()
	var lines, held, rejects []string
	total, failed := 0, 0
	// The same failure on several targets is listed once, with them.
	type failure struct{ msg, compiler string }
	var order []failure
	where := map[failure][]string{}
	for i, t := range c.opts.Targets {
		if errs[i] != nil {
			lines = append(lines, fmt.Sprintf("linux/%s: %v", t.GoArch, errs[i]))
			failed++
			continue
		}
		r := results[i]
		total += r.Assertions
		cc := filepath.Base(r.Compiler)
		if r.OK() {
			held = append(held, fmt.Sprintf("%s (%s)", cc, t.GoArch))
			continue
		}
		failed++
		if r.Other != "" {
			lines = append(lines, fmt.Sprintf("linux/%s: %s cannot compile the headers:", t.GoArch, cc))
			for _, l := range strings.Split(r.Other, "\n") {
				lines = append(lines, "  "+l)
			}
		}
		if len(r.Failures) > 0 {
			rejects = append(rejects, fmt.Sprintf("%s (%s) rejects %d of %d", cc, t.GoArch, len(r.Failures), r.Assertions))
		}
		for _, f := range r.Failures {
			k := failure{strings.Replace(f.Msg, " on "+t.GoArch, "", 1), f.Compiler}
			if where[k] == nil {
				order = append(order, k)
			}
			where[k] = append(where[k], t.GoArch)
		}
	}
	if failed == 0 {
		fmt.Fprintf(c.out, "ok: %d assertions of %sabi.json hold for %s on %s\n", total, c.label, strings.Join(held, ", "), c.headers)
		return true, nil
	}
	fmt.Fprintf(c.out, "FAIL: %sabi.json (committed) is not what the C compilers say on %s, on %d of %d targets\n", c.label, c.headers, failed, len(c.opts.Targets))
	for _, l := range lines {
		fmt.Fprintf(c.out, "        %s\n", l)
	}
	if len(rejects) > 0 {
		fmt.Fprintf(c.out, "        %s assertions:\n", strings.Join(rejects, ", "))
		var fl []string
		for _, k := range order {
			fl = append(fl, fmt.Sprintf("  %s [%s] (%s)", k.msg, strings.Join(where[k], " "), k.compiler))
		}
		c.list(fl)
	}
	return false, nil
}

func manifestArches(m *manifest.Manifest) []string {
	var as []string
	for a := range m.Arches {
		as = append(as, a)
	}
	slices.Sort(as)
	return as
}

// baseline diffs the committed manifest against the one users built
// against.
func (c *checker) baseline(file, ackFile string) (bool, error) {
	c.begin("baseline")
	if file == "" {
		fmt.Fprintln(c.out, "skipped: no -baseline FILE given")
		return true, nil
	}
	base, err := manifest.Read(file)
	if err != nil {
		fmt.Fprintln(c.out, "cannot read it")
		return false, fmt.Errorf("baseline: %v", err)
	}
	var acks []string
	noAcks := false // -ack FILE does not exist yet: nothing is acknowledged
	if ackFile != "" {
		if acks, err = diff.ReadAcks(ackFile); errors.Is(err, os.ErrNotExist) {
			acks, noAcks = nil, true
		} else if err != nil {
			fmt.Fprintln(c.out, "cannot read the ack file")
			return false, fmt.Errorf("ack file: %v", err)
		}
	}
	rep := diff.NewReport(file+" (baseline)", c.label+"abi.json (committed)", diff.Compare(base, c.abi, diff.Options{EndAnchored: diff.DefaultEndAnchored}), acks)
	var b strings.Builder
	rep.WriteText(&b, false)
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	nb, na, nc := rep.Distinct()
	if rep.Breaking == 0 {
		fmt.Fprintf(c.out, "ok: nothing breaks from %s (baseline) to %sabi.json (committed): %d acknowledged, %d compatible changes\n", file, c.label, na, nc)
		if noAcks {
			fmt.Fprintf(c.out, "        note: no %s yet: nothing acknowledged (list reviewed breaking changes there when there are some)\n", ackFile)
		}
		for _, a := range rep.UnusedAcks {
			fmt.Fprintf(c.out, "        note: acknowledged %q matches no breaking change; remove it from %s\n", a, ackFile)
		}
		return true, nil
	}
	fmt.Fprintf(c.out, "FAIL: %d breaking change(s) from %s (baseline) to %sabi.json (committed) are not acknowledged\n", nb, file, c.label)
	c.list(lines)
	ack := "an -ack file"
	if ackFile != "" {
		ack = ackFile
	}
	if noAcks {
		ack += " (it does not exist yet: create it)"
	}
	fmt.Fprintf(c.out, "        review them; accept each by adding its \"KIND SUBJECT\" line to %s, or move the baseline when you publish\n", ack)
	return false, nil
}

// goPattern spells a directory as a go command argument (./dir).
func goPattern(dir string) string {
	d := filepath.ToSlash(filepath.Clean(dir))
	if filepath.IsAbs(dir) || d == "." || strings.HasPrefix(d, "../") {
		return d
	}
	return "./" + d
}

// relativeToCwd spells p relative to the working directory, as the -I of
// a generator run there (a relative -I is recorded relative, and kept so
// in the #cgo CFLAGS).
func relativeToCwd(p string) string {
	abs, err1 := filepath.Abs(p)
	wd, err2 := os.Getwd()
	if err1 != nil || err2 != nil {
		return p
	}
	if r, err := filepath.Rel(wd, abs); err == nil {
		return r
	}
	return abs
}
