// Command gen generates the Go binding of Mellanox's experimental verbs
// (infiniband/verbs_exp.h, MLNX_OFED 3.x–4.x) for linux/amd64, arm64 and
// ppc64le: struct layouts per target, typed constants, call wrappers and
// the abi.json manifest. It also reads upstream rdma-core headers
// (-entry infiniband/verbs.h or infiniband/mlx5dv.h).
//
// Usage:
//
//	gen -I DIR [-I DIR…] -o OUTDIR [-arch LIST] [-pkg NAME] [-entry HEADER]
//	gen check [-I DIR…] [-baseline FILE [-ack FILE]] PKGDIR
//	gen diff [-ack FILE] OLD.json NEW.json
//	gen module -I DIR -o OUTDIR
//	gen -version
//
// Each target has its own C compiler (cc on the host,
// aarch64-linux-gnu-gcc and powerpc64le-linux-gnu-gcc for the others), so
// that its libc headers decide the layout: the headers are translated
// once, with the first target's, and every other target's compiler lays
// the same declarations out, in a probe it compiles (a target whose
// headers declare otherwise is translated on its own, with a note).
// OUTDIR is replaced atomically.
// gen check is the check for CI: the package is current, its abi.json
// holds for every target's C compiler, and nothing breaks against a
// baseline. gen diff classifies the changes between two manifests. gen
// module writes a copy of this module generated from your headers, for a
// replace directive, when the runtime must serve a release whose ABI
// differs from the committed package's.
//
// From another module, add the tool once (go get -tool
// github.com/verbsexp/verbsexp/gen), then run go tool gen; a package
// directive to copy:
//
//	//go:generate go run github.com/verbsexp/verbsexp/gen -I /usr/include -o .
package main

import (
	"errors"
	"flag"
	"fmt"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"unicode/utf8"

	"github.com/verbsexp/verbsexp/gen/internal/gctune"
	"github.com/verbsexp/verbsexp/gen/internal/generate"
	"github.com/verbsexp/verbsexp/gen/internal/model"
	"github.com/verbsexp/verbsexp/gen/internal/parse"
	"github.com/verbsexp/verbsexp/internal/gencmd"
	"github.com/verbsexp/verbsexp/internal/manifest"
	"github.com/verbsexp/verbsexp/internal/target"
)

func main() {
	// GC percent 400 for small heaps, down to 50 for large ones: fewer
	// collections on the real headers, RSS near what large inputs need
	// (it replaces a fixed soft limit, see the package); none before the
	// heap reaches 256 MiB.
	gctune.StartQuiet()
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type dirList []string

func (d *dirList) String() string     { return strings.Join(*d, ",") }
func (d *dirList) Set(s string) error { *d = append(*d, s); return nil }

// genFlags say what to generate; gen and gen check take the same ones.
type genFlags struct {
	includes                  dirList
	arches, pkg, entry, scope string
}

func (g *genFlags) register(fs *flag.FlagSet) {
	fs.Var(&g.includes, "I", "include `DIR` holding the entry header (repeatable; searched in order before the target's system headers)")
	fs.StringVar(&g.arches, "arch", target.Names(), "comma-separated `LIST` of target GOARCHes")
	fs.StringVar(&g.pkg, "pkg", "", "package `NAME` (default: base name of the output directory, or verbs)")
	fs.StringVar(&g.entry, "entry", parse.DefaultEntry, "`HEADER` to include, relative to an -I directory (infiniband/verbs.h or infiniband/mlx5dv.h for rdma-core)")
	fs.StringVar(&g.scope, "scope", parse.DefaultScope, "`SUBDIR` of the include directories whose declarations are emitted (\"\" = all)")
}

// options turns the flags into a generator run writing into out (the
// recorded command and go:generate directive are the caller's). Every
// error is a usage error, found before any work is done.
func (g *genFlags) options(out string) (generate.Options, error) {
	targets, err := target.Parse(g.arches)
	if err != nil {
		return generate.Options{}, err
	}
	// Both reach generated C and Go (an #include, comments, the recorded
	// command in shims.go's cgo preamble).
	if !manifest.HeaderPath(g.entry) {
		return generate.Options{}, fmt.Errorf("-entry %q: want a header path relative to an -I directory, of letters, digits and _ - . + / only (the generator spells it in #include <…> and in Go comments), e.g. -entry infiniband/verbs_exp.h", g.entry)
	}
	if g.scope != "" && !manifest.HeaderPath(g.scope) {
		return generate.Options{}, fmt.Errorf("-scope %q: want a directory relative to the -I directories, of letters, digits and _ - . + / only (the generator records it in Go comments), e.g. -scope infiniband, or -scope \"\" for all", g.scope)
	}
	name := g.pkg
	if name == "" {
		name = packageName(out)
	} else if err := checkPackageName(name); err != nil {
		return generate.Options{}, err
	}
	cflags, err := cgoIncludes(g.includes, out)
	if err != nil {
		return generate.Options{}, err
	}
	return generate.Options{
		Parse:   parse.Options{IncludeDirs: g.includes, Entry: g.entry, ScopeDir: g.scope},
		Targets: targets,
		Package: name,
		CFlags:  cflags,
	}, nil
}

const usageText = `usage: gen -I DIR [-I DIR…] -o OUTDIR [-arch LIST] [-pkg NAME] [-entry HEADER]
       gen check [-I DIR…] [-baseline FILE [-ack FILE]] PKGDIR
       gen diff [-ack FILE] [-json] OLD.json NEW.json
       gen module -I DIR -o OUTDIR
       gen -version

Generates Go types, constants, call wrappers and abi.json for the
experimental verbs headers (MLNX_OFED 3.x–4.x: infiniband/verbs_exp.h) or,
with -entry, for upstream rdma-core headers.

  gen check   is PKGDIR current, does its abi.json hold for each target's C
              compiler, and does it break nothing against a baseline?
              (for CI; gen check -h)
  gen diff    classify what changed between two abi.json manifests
              (gen diff -h)
  gen module  a copy of this module whose generated/ and runtime build on
              your headers, for a replace directive (gen module -h)

Targets need their C compilers (each is checked to be its target's):
%s.

Flags:
`

// run is main without the exit, so tests can drive it.
func run(args []string, stdout, stderr io.Writer) (code int) {
	if len(args) > 0 {
		switch args[0] {
		case "diff":
			return runDiff(args[1:], stdout, stderr)
		case "check":
			return runCheck(args[1:], stdout, stderr)
		case "module":
			return runModule(args[1:], stdout, stderr)
		}
	}
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "gen: internal error: %v\nPlease report this with the headers you used.\n", r)
			code = 2
		}
	}()
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var g genFlags
	g.register(fs)
	out := fs.String("o", "", "output package `DIR`; replaced atomically (must be absent, empty or generated)")
	quiet := fs.Bool("q", false, "print only errors")
	version := fs.Bool("version", false, "print the generator's module and version, and exit")
	fs.Usage = func() {
		fmt.Fprintf(stderr, usageText, compilersHelp())
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *version {
		fmt.Fprintln(stdout, versionLine())
		return 0
	}
	if len(args) == 0 {
		fs.Usage()
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gen: unexpected argument %q: flags come before it, and the subcommands are gen check and gen diff (gen -h)\n", fs.Arg(0))
		return 2
	}
	var missing []string
	if len(g.includes) == 0 {
		missing = append(missing, "-I DIR (the include directory holding "+g.entry+")")
	}
	if *out == "" {
		missing = append(missing, "-o DIR (the output package directory)")
	}
	if len(missing) > 0 {
		fmt.Fprintf(stderr, "gen: missing %s; gen -h lists every flag\n", strings.Join(missing, " and "))
		return 2
	}
	// Paths are recorded as seen from the package directory itself, where
	// go generate runs: through a symbolic link -o, its target.
	pkgDir := realDir(*out)
	opts, err := g.options(pkgDir)
	if err != nil {
		fmt.Fprintln(stderr, "gen:", err)
		return 2
	}
	// The same command line, as run from the output package: that is what
	// go generate runs, and recording it (not the caller's cwd-relative
	// one) makes make generate and go generate write identical bytes.
	recorded, err := packageRelative(args, pkgDir)
	if err != nil {
		fmt.Fprintln(stderr, "gen:", err)
		return 2
	}
	opts.Command = gencmd.Join(recorded)
	opts.GoGenerate = opts.Command
	res, err := generate.Run(opts)
	if err != nil {
		fmt.Fprintln(stderr, "gen:", err)
		return 1
	}
	writeStages(res.Stages)
	changed := !generate.Current(*out, res.Files)
	if err := generate.Write(*out, res.Files); err != nil {
		fmt.Fprintln(stderr, "gen:", err)
		return 1
	}
	// go generate runs the recorded directive: quiet on success, as go
	// tools are (it sets GOFILE and GOPACKAGE for the directive's run).
	if os.Getenv("GOFILE") != "" && os.Getenv("GOPACKAGE") != "" {
		*quiet = true
	}
	if !*quiet {
		// The notes (renamed Go names, skipped functions) matter when the
		// package changes; a run that rewrites the same bytes does not
		// repeat them.
		if changed {
			for _, n := range res.Notes {
				fmt.Fprintln(stderr, "gen: note:", n)
			}
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
		if n := len(res.Shims.Skipped); n > 0 {
			fmt.Fprintf(stdout, "gen: %d call wrappers (%d functions skipped: the notes name each and why)\n", len(res.Shims.Wrappers), n)
		} else {
			fmt.Fprintf(stdout, "gen: %d call wrappers\n", len(res.Shims.Wrappers))
		}
		if !changed {
			fmt.Fprintf(stdout, "gen: %s was current: the same %d files (%d notes, printed when it changed)\n", *out, len(names), len(res.Notes))
		} else {
			fmt.Fprintf(stdout, "gen: wrote %s\n", strings.Join(names, " "))
		}
	}
	return 0
}

// stagesEnv names a file to which a run writes the CPU time of each of
// its stages (generate.Result.Stages), one
// "name<TAB>nanoseconds<TAB>the C compilers' nanoseconds" line each: make
// bench-gen prints them.
const stagesEnv = "VERBSEXP_STAGE_CPU"

func writeStages(stages []generate.Stage) {
	path := os.Getenv(stagesEnv)
	if path == "" {
		return
	}
	var b strings.Builder
	for _, s := range stages {
		fmt.Fprintf(&b, "%s\t%d\t%d\n", s.Name, s.CPU.Nanoseconds(), s.Compilers.Nanoseconds())
	}
	os.WriteFile(path, []byte(b.String()), 0o644)
}

// versionLine names the generator's module and version: the module
// version when built from a module (go run …@v1.2.3, go tool gen),
// "(devel)" and the VCS revision when built in a checkout.
func versionLine() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "gen: no build information in this binary"
	}
	s := "gen " + info.Main.Path + " " + info.Main.Version
	if info.Main.Replace != nil {
		s += " (replaced by " + info.Main.Replace.Path
		if info.Main.Replace.Version != "" {
			s += " " + info.Main.Replace.Version
		}
		s += ")"
	}
	var rev, modified string
	for _, kv := range info.Settings {
		switch kv.Key {
		case "vcs.revision":
			rev = kv.Value
		case "vcs.modified":
			if kv.Value == "true" {
				modified = ", modified"
			}
		}
	}
	if rev != "" {
		s += " (revision " + rev + modified + ")"
	}
	return s + ", " + info.GoVersion
}

func compilersHelp() string {
	var s []string
	for _, t := range target.All {
		s = append(s, fmt.Sprintf("%s: %s (a path or name; apt-get install %s)", t.GoArch, t.CompilerHelp(), t.DebianPkg))
	}
	return "  " + strings.Join(s, ";\n  ")
}

// packageName is the default package name: the base name of the output
// directory (of its absolute path, so "-o ." in go generate names the
// package as "-o DIR" did), or verbs where that is no usable name.
func packageName(out string) string {
	base := filepath.Base(filepath.Clean(out))
	if abs, err := filepath.Abs(out); err == nil {
		base = filepath.Base(abs)
	}
	if checkPackageName(base) != nil {
		return "verbs"
	}
	return base
}

// checkPackageName accepts only names a package can be imported by:
// identifiers that are not keywords, not the blank identifier, and none
// of the names the toolchain reserves (C for cgo, main for commands,
// init, which an import cannot bind).
func checkPackageName(name string) error {
	switch {
	case !token.IsIdentifier(name):
		return fmt.Errorf("-pkg %q is not a Go package name: use letters, digits and _ (e.g. -pkg verbs)", name)
	case name == "_", name == "C", name == "main", name == "init":
		return fmt.Errorf("-pkg %s: a generated package cannot be named %s (blank, cgo's C, a command's main, or init); choose another name, e.g. -pkg verbs", name, name)
	}
	return nil
}

// realDir is dir with symbolic links resolved: of dir itself when it
// exists, else of its parent (a package about to be created).
func realDir(dir string) string {
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		return r
	}
	if p, err := filepath.EvalSymlinks(filepath.Dir(filepath.Clean(dir))); err == nil {
		return filepath.Join(p, filepath.Base(filepath.Clean(dir)))
	}
	return dir
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

// cgoSafe says whether s may stand in a #cgo directive: go/build refuses
// any ASCII character outside this set ("malformed #cgo argument").
func cgoSafe(s string) bool {
	const safe = "+-.,/0123456789=ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz:@%! ~^"
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < utf8.RuneSelf && !strings.ContainsRune(safe, rune(c)) {
			return false
		}
	}
	return true
}

// cgoIncludes are the -I flags of shims.go: relative directories as seen
// from the package (${SRCDIR}/…), absolute ones as given; a directory
// with a space is quoted. A directory cgo cannot name (or whose $ go
// generate would expand) is a usage error saying so.
func cgoIncludes(includes []string, out string) ([]string, error) {
	var r []string
	for _, inc := range includes {
		p, rel := fromPackage(inc, out)
		check := p
		if rel {
			if abs, err := filepath.Abs(out); err == nil {
				check = abs + "/" + p // what ${SRCDIR} expands to
			}
		}
		if !cgoSafe(check) || strings.ContainsRune(inc, '$') {
			return nil, fmt.Errorf("-I %q: cgo cannot name this directory in #cgo CFLAGS (it allows letters, digits, space and +-.,/=_:@%%!~^; go generate would also expand a $): use a path without the other characters, e.g. a symbolic link to it", inc)
		}
		flag := "-I" + p
		if rel {
			flag = "-I${SRCDIR}/" + p
		}
		if strings.ContainsRune(flag, ' ') {
			flag = `"` + flag + `"`
		}
		r = append(r, flag)
	}
	return r, nil
}

// packageRelative is the command line as run from the output package
// (where go generate runs): -o is ".", -I paths rebased with fromPackage, and
// output-only flags left out, so the recorded command does not depend on
// the caller's directory or verbosity.
func packageRelative(args []string, out string) ([]string, error) {
	rel := func(p string) string { r, _ := fromPackage(p, out); return r }
	var b []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") {
			b = append(b, a)
			continue
		}
		switch name {
		case "I", "o":
			if !hasValue {
				if i+1 >= len(args) {
					b = append(b, a)
					continue
				}
				value = args[i+1]
				i++
			}
			if name == "o" {
				value = "." // go generate runs in the package
			} else {
				value = rel(value)
			}
			b = append(b, "-"+name, value)
		case "q", "version":
		default:
			b = append(b, a)
		}
	}
	for _, w := range b {
		if strings.ContainsRune(w, '$') {
			return nil, fmt.Errorf("%q contains $, which go generate would expand in the recorded //go:generate line; use a path or value without it", w)
		}
		if strings.ContainsFunc(w, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			return nil, fmt.Errorf("%q contains a control character, which a //go:generate line cannot hold", w)
		}
	}
	return b, nil
}

func countConsts(p *model.Package) int {
	n := len(p.Consts)
	for _, e := range p.Enums {
		n += len(e.Values)
	}
	return n
}
