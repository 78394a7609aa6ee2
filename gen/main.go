// Command gen generates the Go binding of Mellanox's experimental verbs
// (infiniband/verbs_exp.h, MLNX_OFED 3.x–4.x) for linux/amd64, arm64 and
// ppc64le: struct layouts per target, typed constants and the abi.json
// manifest.
//
// Usage:
//
//	go run github.com/verbsexp/verbsexp/gen -I DIR [-I DIR…] -o OUTDIR [-arch LIST] [-pkg NAME]
//
// Each target is read with its own C compiler (cc on the host,
// aarch64-linux-gnu-gcc and powerpc64le-linux-gnu-gcc for the others), so
// that its libc headers decide the layout. OUTDIR is replaced atomically.
//
// A package directive to copy:
//
//	//go:generate go run github.com/verbsexp/verbsexp/gen -I /usr/include -o .
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/verbsexp/verbsexp/gen/internal/generate"
	"github.com/verbsexp/verbsexp/gen/internal/model"
	"github.com/verbsexp/verbsexp/gen/internal/parse"
	"github.com/verbsexp/verbsexp/internal/target"
)

func main() {
	// A short-lived process that allocates a lot while parsing: trade
	// memory for fewer collections, up to a soft limit past which the
	// garbage of large inputs is collected instead (make bench-scale:
	// 16× headers/ peaked at 0.9–1.1 GiB without it, 800 MiB with it,
	// in the same time).
	debug.SetGCPercent(400)
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(768 << 20)
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type dirList []string

func (d *dirList) String() string     { return strings.Join(*d, ",") }
func (d *dirList) Set(s string) error { *d = append(*d, s); return nil }

// run is main without the exit, so tests can drive it.
func run(args []string, stdout, stderr io.Writer) (code int) {
	if len(args) > 0 && args[0] == "diff" {
		return runDiff(args[1:], stdout, stderr)
	}
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "gen: internal error: %v\nPlease report this with the headers you used.\n", r)
			code = 2
		}
	}()
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var includes dirList
	fs.Var(&includes, "I", "include `DIR` holding infiniband/verbs_exp.h (repeatable; searched in order before the target's system headers)")
	out := fs.String("o", "", "output package `DIR`; replaced atomically (must be absent, empty or generated)")
	arches := fs.String("arch", target.Names(), "comma-separated `LIST` of target GOARCHes")
	pkg := fs.String("pkg", "", "package `NAME` (default: base name of -o, or verbs)")
	entry := fs.String("entry", parse.DefaultEntry, "`HEADER` to include, relative to an -I directory")
	scope := fs.String("scope", parse.DefaultScope, "`SUBDIR` of the include directories whose declarations are emitted (\"\" = all)")
	quiet := fs.Bool("q", false, "print only errors")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: gen -I DIR [-I DIR…] -o OUTDIR [-arch LIST] [-pkg NAME]\n\n")
		fmt.Fprintf(stderr, "Generates Go types, constants and abi.json for the experimental verbs headers.\n")
		fmt.Fprintf(stderr, "Targets need their C compilers: %s.\n\n", compilersHelp())
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if len(includes) == 0 || *out == "" || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	targets, err := target.Parse(*arches)
	if err != nil {
		fmt.Fprintln(stderr, "gen:", err)
		return 2
	}
	name := *pkg
	if name == "" {
		name = packageName(*out)
	}
	// The same command line, as run from the output package: that is what
	// go generate runs, and recording it (not the caller's cwd-relative
	// one) makes make generate and go generate write identical bytes.
	invocation := packageRelative(args, *out)
	opts := generate.Options{
		Parse:      parse.Options{IncludeDirs: includes, Entry: *entry, ScopeDir: *scope},
		Targets:    targets,
		Package:    name,
		Command:    invocation,
		GoGenerate: invocation,
		CFlags:     cgoIncludes(includes, *out),
	}
	res, err := generate.Run(opts)
	if err != nil {
		fmt.Fprintln(stderr, "gen:", err)
		return 1
	}
	if err := generate.Write(*out, res.Files); err != nil {
		fmt.Fprintln(stderr, "gen:", err)
		return 1
	}
	if !*quiet {
		for _, n := range res.Notes {
			fmt.Fprintln(stderr, "gen: note:", n)
		}
		p := res.Pkg
		var names []string
		for _, f := range res.Files {
			names = append(names, f.Name)
		}
		nested := 0
		for _, r := range p.Records {
			if r.Nested {
				nested++
			}
		}
		fmt.Fprintf(stdout, "gen: package %s in %s for linux/{%s}: %d records (+%d nested types, %d opaque), %d enums, %d constants, %d functions from %d headers\n",
			p.Name, *out, strings.Join(p.Arches, ","), len(p.Records)-nested, nested, len(p.Opaque), len(p.Enums), countConsts(p), len(p.Funcs), len(p.Inputs))
		fmt.Fprintf(stdout, "gen: %d call wrappers (%d skipped, see notes)\n", len(res.Shims.Wrappers), len(res.Shims.Skipped))
		fmt.Fprintf(stdout, "gen: wrote %s\n", strings.Join(names, " "))
	}
	return 0
}

func compilersHelp() string {
	var s []string
	for _, t := range target.All {
		s = append(s, fmt.Sprintf("%s: %s-gcc (apt-get install %s)", t.GoArch, t.GNUTriplet, t.DebianPkg))
	}
	return strings.Join(s, "; ")
}

func packageName(out string) string {
	base := filepath.Base(filepath.Clean(out))
	if base == "." || base == "/" || base == "generated" || !isIdent(base) {
		return "verbs"
	}
	return base
}

func isIdent(s string) bool {
	for i, r := range s {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return s != ""
}

// fromPackage spells path p as seen from the output package directory out:
// absolute paths stay as given, relative ones become relative to out.
// relative is false when p stays absolute.
func fromPackage(p, out string) (spelled string, relative bool) {
	if filepath.IsAbs(p) {
		return p, false
	}
	a, err1 := filepath.Abs(p)
	absOut, err2 := filepath.Abs(out)
	if err1 != nil || err2 != nil {
		return p, false
	}
	r, err := filepath.Rel(absOut, a)
	if err != nil {
		return a, false
	}
	return filepath.ToSlash(r), true
}

// cgoIncludes are the -I flags of shims.go: relative directories as seen
// from the package (${SRCDIR}/…), absolute ones as given.
func cgoIncludes(includes []string, out string) []string {
	var r []string
	for _, inc := range includes {
		p, rel := fromPackage(inc, out)
		if rel {
			p = "${SRCDIR}/" + p
		}
		r = append(r, "-I"+p)
	}
	return r
}

// packageRelative is the command line as run from the output package
// (where go generate runs): -I and -o paths rebased with fromPackage, and
// output-only flags left out, so the recorded command does not depend on
// the caller's directory or verbosity.
func packageRelative(args []string, out string) string {
	rel := func(p string) string { r, _ := fromPackage(p, out); return r }
	var b []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case (a == "-I" || a == "-o") && i+1 < len(args):
			b = append(b, a, rel(args[i+1]))
			i++
		case strings.HasPrefix(a, "-I="):
			b = append(b, "-I", rel(a[3:]))
		case strings.HasPrefix(a, "-o="):
			b = append(b, "-o", rel(a[3:]))
		case a == "-q" || a == "-q=true" || a == "-q=false":
		default:
			b = append(b, a)
		}
	}
	return "go run github.com/verbsexp/verbsexp/gen " + strings.Join(b, " ")
}

func countConsts(p *model.Package) int {
	n := len(p.Consts)
	for _, e := range p.Enums {
		n += len(e.Values)
	}
	return n
}
