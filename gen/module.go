package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/verbsexp/verbsexp/gen/internal/generate"
	"github.com/verbsexp/verbsexp/gen/internal/parse"
	"github.com/verbsexp/verbsexp/internal/gencmd"
)

// ModulePath is the module gen module copies: this one.
const ModulePath = "github.com/verbsexp/verbsexp"

// moduleMarker is the file gen module writes into its copy: it names the
// command, and a later run replaces only a directory that has it.
const moduleMarker = ".verbsexp-module"

// moduleWrittenBy starts the marker's line with the command.
const moduleWrittenBy = "Written by: "

const moduleUsage = `usage: gen module -I DIR -o OUTDIR

Gives the verbsexp runtime (runtime/task, lease, softdev, coll, device)
a package laid out as your headers say: writes into OUTDIR a copy of the
module ` + ModulePath + ` (the version your module requires:
go list -m) with only what builds its packages (no tests, no test data,
no docs), whose generated/verbs is generated from DIR and whose headers/
links to DIR (relative when DIR is), so that the package, the runtime's C
(softdev's provider, the inline ibv_exp_post_task) and your program all
read one ABI. Then one replace directive puts it in place of the module:

  go tool gen module -I /usr/include -o third_party/verbsexp
  go mod edit -replace ` + ModulePath + `=./third_party/verbsexp

Your program keeps its imports (` + ModulePath + `/generated/verbs,
/runtime/...). Every package of the copy must build where it is written
(cgo, with the copy's own headers only); otherwise the previous OUTDIR is
put back (or none is left) and the compiler's first errors are shown.
OUTDIR must be absent, empty, or written by gen module; it is replaced as
a whole, so DIR may not lie inside it (DIR may be OUTDIR/headers, the
link to the headers: the copy links to where it points). Run the same
command again after the headers change or after you update the module's
requirement; go tool gen check OUTDIR/generated/verbs tells when that is
due.

Flags:
`

// runModule is gen module.
func runModule(args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "gen module: internal error: %v\nPlease report this with the headers you used.\n", r)
			code = 2
		}
	}()
	fs := flag.NewFlagSet("gen module", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var includes dirList
	fs.Var(&includes, "I", "include `DIR` holding infiniband/verbs_exp.h (one; the copy's headers/ links to it)")
	out := fs.String("o", "", "`OUTDIR` of the copy (absent, empty or written by gen module)")
	quiet := fs.Bool("q", false, "print only errors")
	fs.Usage = func() {
		fmt.Fprint(stderr, moduleUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "gen module: unexpected argument %q (gen module -h)\n", fs.Arg(0))
		return 2
	case len(includes) != 1:
		fmt.Fprintln(stderr, "gen module: want one -I DIR, the directory holding infiniband/verbs_exp.h (the runtime's C includes the same headers through the copy's headers/)")
		return 2
	case *out == "":
		fmt.Fprintln(stderr, "gen module: missing -o OUTDIR (where the copy of the module goes)")
		return 2
	}
	m := &moduler{include: includes[0], out: *out, stdout: stdout, quiet: *quiet}
	if err := m.run(); err != nil {
		fmt.Fprintln(stderr, "gen module:", err)
		return 1
	}
	return 0
}

type moduler struct {
	include, out string
	stdout       io.Writer
	quiet        bool
}

func (m *moduler) run() error {
	if err := parse.CheckEntry(parse.Options{IncludeDirs: []string{m.include}, Entry: parse.DefaultEntry}); err != nil {
		if _, lerr := resolveInclude(m.include, ""); errors.Is(lerr, syscall.ELOOP) {
			return lerr // not "not found": say why
		}
		return fmt.Errorf("%v\n(the runtime needs the experimental verbs of infiniband/verbs_exp.h, MLNX_OFED 3.1 … 4.9; for other headers generate a package of your own: gen -I DIR -entry … -o DIR)", err)
	}
	dst, err := filepath.Abs(m.out)
	if err != nil {
		return err
	}
	// The headers as they are, not as a path that may lead through -o
	// (-I OUTDIR/headers, the previous copy's link): the new copy links
	// to the directory itself, and nothing it needs is inside what it
	// replaces.
	inc, err := resolveInclude(m.include, dst)
	if err != nil {
		return err
	}
	if !cgoSafe(dst) || strings.ContainsRune(dst, '$') {
		return fmt.Errorf("-o %s: cgo cannot name this directory in #cgo CFLAGS (the copy's packages include ${SRCDIR}/../headers): choose a path of letters, digits and +-.,/=_:@%%!~^", m.out)
	}
	src, version, err := moduleSource()
	if err != nil {
		return err
	}
	if err := checkModuleDir(dst); err != nil {
		return err
	}
	parent := filepath.Dir(dst)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("cannot create %s: %v; choose a writable -o", parent, err)
	}
	scratch, err := os.MkdirTemp(parent, "."+filepath.Base(dst)+".verbsexp-module-")
	if err != nil {
		return fmt.Errorf("cannot write next to %s: %v; choose a writable -o", dst, err)
	}
	defer os.RemoveAll(scratch)
	if err := os.Chmod(scratch, 0o755); err != nil {
		return err
	}
	if err := copyModule(src, scratch, dst); err != nil {
		return fmt.Errorf("copying %s from %s: %v (nothing was written to %s)", ModulePath, src, err, dst)
	}
	if err := os.Symlink(headersLink(m.include, inc, dst), filepath.Join(scratch, "headers")); err != nil {
		return err
	}
	// generated/verbs as make generate writes it: -I ../../headers, recorded as
	// run from the package, so go generate and gen check work in the copy.
	recorded := []string{"-I", "../../headers", "-o", "."}
	var g genFlags
	g.register(flag.NewFlagSet("", flag.ContinueOnError)) // the defaults
	g.includes = dirList{filepath.Join(scratch, "headers")}
	pkgDir := filepath.Join(scratch, "generated", "verbs")
	opts, err := g.options(pkgDir)
	if err != nil {
		return err
	}
	opts.CFlags = []string{"-I${SRCDIR}/../../headers"}
	opts.Command = gencmd.Join(recorded)
	opts.GoGenerate = opts.Command
	res, err := generate.Run(opts)
	if err != nil {
		return fmt.Errorf("generating from %s: %v", m.include, err)
	}
	if err := generate.Write(pkgDir, res.Files); err != nil {
		return err
	}
	if !m.quiet {
		fmt.Fprintf(m.stdout, "gen module: generated/verbs from %s: %d records, %d constants, %d functions; building every package of the copy against it …\n",
			m.include, len(res.Pkg.Records), countConsts(res.Pkg), len(res.Pkg.Funcs))
	}
	cmd := fmt.Sprintf("go tool gen module -I %s -o %s", gencmd.Quote(m.include), gencmd.Quote(m.out))
	note := fmt.Sprintf("This directory is %s %s, only what builds its packages, with generated/verbs generated from %s, and headers/ a link to it.\n"+moduleWrittenBy+"%s\nRun it again after the headers change (go tool gen check %s/generated/verbs says when).\nUse it with: go mod edit -replace %s=%s\n",
		ModulePath, version, inc, cmd, m.out, ModulePath, replacePath(m.out))
	if err := os.WriteFile(filepath.Join(scratch, moduleMarker), []byte(note), 0o644); err != nil {
		return err
	}
	// Built where it is written, so that what is said to build is what
	// the user gets (and a re-run finds its build cached); the previous
	// copy is kept aside until then, and put back if it does not build.
	old, err := swapIn(scratch, dst)
	if err != nil {
		return err
	}
	if err := buildModule(dst); err != nil {
		kept := "was left as it was"
		if rerr := swapBack(dst, scratch, old); rerr != nil {
			kept = "was written but does not build (" + rerr.Error() + ")"
		}
		return fmt.Errorf("%s %s: the copy of %s does not build against a package generated from %s:\n%s\nThe runtime uses Go names and layouts these headers lack; it serves MLNX_OFED 3.1 … 4.9 (infiniband/verbs_exp.h). For other headers generate a package of your own (gen -I DIR -o DIR) and use it without the runtime",
			m.out, kept, ModulePath, m.include, err)
	}
	if old != "" {
		os.RemoveAll(old)
	}
	if !m.quiet {
		fmt.Fprintf(m.stdout, "gen module: wrote %s: %s %s, generated/verbs from %s; every package builds against it\n", m.out, ModulePath, version, m.include)
		fmt.Fprintf(m.stdout, "gen module: use it:      go mod edit -replace %s=%s && go mod tidy\n", ModulePath, replacePath(m.out))
		fmt.Fprintf(m.stdout, "gen module: check it:    go tool gen check %s/generated/verbs\n", strings.TrimSuffix(m.out, "/"))
	}
	return nil
}

// moduleSource finds this module's source as the current module sees it
// (its requirement, or a replace directive): go list -m.
func moduleSource() (dir, version string, err error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}\t{{.Version}}", ModulePath)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", "", fmt.Errorf("cannot find the source of %s (go list -m %s: %v: %s): run gen module in a module that requires it (go get -tool %s/gen)",
			ModulePath, ModulePath, err, strings.TrimSpace(errb.String()), ModulePath)
	}
	dir, version, _ = strings.Cut(strings.TrimSpace(out.String()), "\t")
	if dir == "" {
		return "", "", fmt.Errorf("go list -m %s names no directory: run go mod download %s first", ModulePath, ModulePath)
	}
	if version == "" {
		version = "(" + dir + ")"
	}
	return dir, version, nil
}

// checkModuleDir accepts an -o that is absent, empty, or a copy gen
// module wrote.
func checkModuleDir(dst string) error {
	entries, err := os.ReadDir(dst)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("-o %s: %v", dst, err)
	case len(entries) == 0:
		return nil
	}
	if _, err := os.Stat(filepath.Join(dst, moduleMarker)); err != nil {
		return fmt.Errorf("-o %s holds files gen module did not write (no %s): choose an absent or empty directory", dst, moduleMarker)
	}
	return nil
}

// leftOut are the module's top-level entries a copy does without: what
// it makes anew (generated/, headers/), version control and scratch
// space, and what only develops the module (its tests of the committed
// package, docs, scripts, CI, and internal/tools, a module of its own).
var leftOut = map[string]bool{
	"generated": true, "headers": true, ".git": true, ".tmp": true, moduleMarker: true,
	"tests": true, "docs": true, "scripts": true, ".ci": true, ".gitignore": true, "README.md": true, "Makefile": true,
}

// copyModule copies what builds the module's packages from src to dst:
// every package's sources and the files they embed, without tests and
// test data (testdata/, *_test.go) and without leftOut; skip is the
// copy's destination, which may lie inside src. Files of the module
// cache are read-only; the copy is writable.
func copyModule(src, dst, skip string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		top, _, _ := strings.Cut(filepath.ToSlash(rel), "/")
		switch {
		case p == skip || strings.HasPrefix(p, skip+string(filepath.Separator)):
			return filepath.SkipDir
		case rel == top && leftOut[top], filepath.ToSlash(rel) == "internal/tools",
			d.IsDir() && d.Name() == "testdata", !d.IsDir() && strings.HasSuffix(d.Name(), "_test.go"):
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		case d.IsDir():
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		case !d.Type().IsRegular():
			return nil // links and devices are not module content
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		mode := fs.FileMode(0o644)
		if info.Mode()&0o111 != 0 {
			mode = 0o755
		}
		return os.WriteFile(filepath.Join(dst, rel), b, mode)
	})
}

// buildModule builds every package of the copy with cgo against its own
// headers (CGO_CFLAGS without -I, so nothing overrides them).
func buildModule(dir string) error {
	cmd := exec.Command("go", "build", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "CGO_CFLAGS=-O2 -g", "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	if err == nil {
		return nil
	}
	lines := strings.Split(strings.TrimSpace(strings.ReplaceAll(string(out), dir+string(filepath.Separator), "")), "\n")
	if len(lines) > 12 {
		lines = append(lines[:12], fmt.Sprintf("… and %d more lines", len(lines)-12))
	}
	return fmt.Errorf("  go build ./...: %v\n  %s", err, strings.Join(lines, "\n  "))
}

// resolveInclude returns the directory -I include names, every link
// followed, and refuses one inside dst (-o; "" for none), which the copy
// replaces.
func resolveInclude(include, dst string) (string, error) {
	abs, err := filepath.Abs(include)
	if err != nil {
		return "", err
	}
	inc, err := filepath.EvalSymlinks(abs)
	if err != nil {
		if _, serr := os.Stat(abs); errors.Is(serr, syscall.ELOOP) { // EvalSymlinks says only "too many links"
			return "", fmt.Errorf("-I %s: its symbolic links lead in a circle (%w); pass the directory holding infiniband/verbs_exp.h itself (a copy written by an earlier gen module may have headers/ linking to itself: remove that copy and run gen module again with the real headers)", include, serr)
		}
		return "", fmt.Errorf("-I %s: %v", include, err)
	}
	if dst == "" {
		return inc, nil
	}
	out := dst
	if real, err := filepath.EvalSymlinks(dst); err == nil {
		out = real
	} else if parent, err := filepath.EvalSymlinks(filepath.Dir(dst)); err == nil {
		out = filepath.Join(parent, filepath.Base(dst))
	}
	if inc == out || strings.HasPrefix(inc, out+string(filepath.Separator)) {
		return "", fmt.Errorf("-I %s is %s, inside -o %s, which gen module replaces as a whole: pass a directory of headers outside it (the one the copy's headers/ links to, for a copy gen module wrote)", include, inc, dst)
	}
	return inc, nil
}

// headersLink is where the copy's headers/ points: the directory -I
// names, every link followed (inc), as the user gave it: relative to the
// copy (dst) for a relative -I, so that the module still builds when its
// checkout moves; absolute for an absolute one (/usr/include).
func headersLink(include, inc, dst string) string {
	if filepath.IsAbs(include) {
		return inc
	}
	base := dst
	if real, err := filepath.EvalSymlinks(filepath.Dir(dst)); err == nil {
		base = filepath.Join(real, filepath.Base(dst))
	}
	if rel, err := filepath.Rel(base, inc); err == nil {
		return rel
	}
	return inc
}

// swapIn moves the finished copy in scratch to dst, setting the
// previous one aside in old ("" when there was none).
func swapIn(scratch, dst string) (old string, err error) {
	if _, err := os.Lstat(dst); err == nil {
		old = scratch + ".old"
		if err := os.Rename(dst, old); err != nil {
			return "", fmt.Errorf("cannot replace %s: %v (nothing was changed)", dst, err)
		}
	}
	if err := os.Rename(scratch, dst); err != nil {
		if old != "" && os.Rename(old, dst) == nil {
			return "", fmt.Errorf("cannot move the copy into %s: %v (the previous one was kept)", dst, err)
		}
		return "", fmt.Errorf("cannot move the copy into %s: %v", dst, err)
	}
	return old, nil
}

// swapBack undoes swapIn: the copy at dst goes back to scratch (removed
// by the caller) and the previous one, if any, to dst.
func swapBack(dst, scratch, old string) error {
	if err := os.Rename(dst, scratch); err != nil {
		return fmt.Errorf("cannot move it away: %v", err)
	}
	if old != "" {
		if err := os.Rename(old, dst); err != nil {
			return fmt.Errorf("the previous copy is in %s: %v", old, err)
		}
	}
	return nil
}

// replacePath spells out for a replace directive: a relative path must
// start with ./ or ../.
func replacePath(out string) string {
	p := filepath.ToSlash(filepath.Clean(out))
	if filepath.IsAbs(out) || strings.HasPrefix(p, "../") || p == ".." {
		return p
	}
	return "./" + p
}
