package parse

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"modernc.org/cc/v4"

	"github.com/verbsexp/verbsexp/gen/internal/cache"
	"github.com/verbsexp/verbsexp/internal/inputfile"
	"github.com/verbsexp/verbsexp/internal/target"
)

// Compiler is a target's C compiler, proven to compile for that target,
// and the configuration cc/v4 reads the headers with: the compiler's
// predefined macros and include paths.
type Compiler struct {
	Target target.Target
	Path   string     // absolute path of the compiler
	Name   string     // as the user knows it: $VERBSEXP_CC_<ARCH> or the name found on PATH
	Config *cc.Config // shared: copy it before changing it
	// ID identifies the compiler binary and everything it said; every
	// cache entry that depends on the compiler is keyed by it.
	ID string

	facts compilerFacts // what Config is built from, for the front end's child (contain.go)
}

// compilerFacts is what the compiler says about itself: its predefined
// macros and include search lists (as cc.NewConfig would read them), and
// the directories it looked for and skipped as nonexistent. It is kept in
// the cache keyed by the compiler binary; on a hit, the directories are
// checked again, so that installing the target's libc headers after a
// first run (which adds a directory the compiler skipped) is noticed.
type compilerFacts struct {
	Predefined      string
	IncludePaths    []string // #include "..." search list, after the -I ones
	SysIncludePaths []string // #include <...> search list
	Missing         []string // "ignoring nonexistent directory" lines
}

// libcProbe is a header every C library provides and a compiler's own
// include directory does not: a system search list without it means the
// target's libc headers are not installed.
const libcProbe = "stdio.h"

// FindCompiler finds t's compiler, proves it is t's (it runs, exits 0,
// and its predefined macros say t's architecture, pointer size and byte
// order) and that it finds its libc headers, and returns its
// configuration, from c when c holds a valid entry for this compiler
// binary (c may be nil).
func FindCompiler(t target.Target, c *cache.Cache) (*Compiler, error) {
	path, err := t.Compiler()
	if err != nil {
		return nil, err
	}
	comp := &Compiler{Target: t, Path: path, Name: filepath.Base(path)}
	source := ""
	if v := os.Getenv(t.EnvVar()); v != "" {
		comp.Name, source = v, fmt.Sprintf(" (%s=%s)", t.EnvVar(), v)
		if v != path {
			source = fmt.Sprintf(" (%s=%s is %s)", t.EnvVar(), v, path)
		}
	}
	if os.Getenv("VERBSEXP_NO_CONFIG_CACHE") != "" {
		c = nil
	}
	binary, err := binaryIdentity(path)
	if err != nil {
		return nil, fmt.Errorf("linux/%s: cannot read the C compiler %s: %v; %s", t.GoArch, comp.Name, err, t.Remedy())
	}
	key := factsKey(c, t, path, binary)
	facts, ok := cachedFacts(c, key, comp.Name, t)
	if !ok {
		if facts, err = askCompiler(comp, source); err != nil {
			return nil, err
		}
		if err := t.Check(comp.Name, facts.Predefined); err != nil {
			return nil, fmt.Errorf("%v%s", err, source)
		}
		if b, err := json.Marshal(facts); err == nil {
			c.Put("cc", key, b)
		}
	}
	if err := facts.checkLibc(comp, source); err != nil {
		return nil, err
	}
	if comp.Config, err = facts.config(t.GoArch, path); err != nil {
		return nil, err
	}
	comp.facts = *facts
	b, _ := json.Marshal(facts)
	sum := sha256.Sum256([]byte(path + "\x00" + binary + "\x00" + string(b)))
	comp.ID = hex.EncodeToString(sum[:])
	return comp, nil
}

// factsKey is the cache key of a compiler's facts.
func factsKey(c *cache.Cache, t target.Target, path, binary string) cache.Key {
	return c.NewKey("cc").Add(t.GoArch, path, binary).Sum()
}

// binaryIdentity names the compiler binary's version on disk: its real
// path, size, modification time and inode. A reinstalled or upgraded
// compiler changes it.
func binaryIdentity(path string) (string, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", err
	}
	ino := uint64(0)
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ino = uint64(st.Ino)
	}
	return fmt.Sprintf("%s %d %d %d", real, fi.Size(), fi.ModTime().UnixNano(), ino), nil
}

// cachedFacts returns the cached facts of a compiler if they are whole,
// still describe the file system (every listed directory exists, every
// skipped one still does not) and pass the target check. A damaged
// entry, or one claiming another target, is removed: the compiler is
// asked again and the entry rewritten.
func cachedFacts(c *cache.Cache, key cache.Key, name string, t target.Target) (*compilerFacts, bool) {
	b, ok := c.Get("cc", key)
	if !ok {
		return nil, false
	}
	var f compilerFacts
	if json.Unmarshal(b, &f) != nil || f.Predefined == "" || len(f.SysIncludePaths) == 0 || t.Check(name, f.Predefined) != nil {
		c.Discard("cc", key)
		return nil, false
	}
	for _, d := range append(append([]string(nil), f.IncludePaths...), f.SysIncludePaths...) {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			return nil, false
		}
	}
	for _, d := range f.Missing {
		if _, err := os.Stat(d); err == nil {
			return nil, false
		}
	}
	return &f, true
}

// askCompiler runs the compiler once, as cc.NewConfig would twice (its
// -dM and -v runs), with a timeout: the predefined macros come on stdout,
// the search lists on stderr.
func askCompiler(comp *Compiler, source string) (*compilerFacts, error) {
	t := comp.Target
	args := []string{"-dM", "-E", "-v", "-"}
	stdout, stderr, err := runTool(comp.Path, args...)
	if hint, ok := inputfile.OutOfDescriptors(err); ok {
		return nil, fmt.Errorf("linux/%s: cannot run the C compiler %s: %v: %s", t.GoArch, comp.Name, err, hint)
	}
	if err != nil {
		msg := strings.TrimSpace(string(stderr))
		if lines := strings.Split(msg, "\n"); len(lines) > 5 {
			msg = strings.Join(lines[:5], "\n") + "\n…"
		}
		if msg != "" {
			msg = "; it said:\n" + msg + "\n"
		} else {
			msg = " (no output); "
		}
		return nil, fmt.Errorf("linux/%s: the C compiler %s does not work: `%s %s` failed: %v%s%s%s",
			t.GoArch, comp.Name, comp.Name, strings.Join(args, " "), err, msg, t.Remedy(), source)
	}
	f := &compilerFacts{}
	var lines []string
	for _, l := range strings.Split(string(stdout), "\n") {
		if strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	f.Predefined = strings.Join(lines, "\n")
	sawSys := false
	list := (*[]string)(nil)
	for _, l := range strings.Split(string(stderr), "\n") {
		switch {
		case l == `#include "..." search starts here:`:
			list = &f.IncludePaths
		case l == "#include <...> search starts here:":
			list, sawSys = &f.SysIncludePaths, true
		case strings.HasPrefix(l, "#") || l == "End of search list.":
			list = nil
		case strings.HasPrefix(l, `ignoring nonexistent directory "`):
			d := strings.TrimSuffix(strings.TrimPrefix(l, `ignoring nonexistent directory "`), `"`)
			f.Missing = append(f.Missing, filepath.Clean(d))
		case list != nil:
			*list = append(*list, filepath.Clean(strings.TrimSpace(l)))
		}
	}
	if f.Predefined == "" || !sawSys {
		return nil, fmt.Errorf("linux/%s: the C compiler %s printed no predefined macros or include search list for `%s %s`; %s%s",
			t.GoArch, comp.Name, comp.Name, strings.Join(args, " "), t.Remedy(), source)
	}
	return f, nil
}

// checkLibc makes sure the compiler finds its C library headers: a cross
// gcc installed without libc6-dev-<arch>-cross searches only its own
// include directory, and the headers fail later on <bits/types.h>.
func (f *compilerFacts) checkLibc(comp *Compiler, source string) error {
	for _, d := range f.SysIncludePaths {
		if _, err := os.Stat(filepath.Join(d, libcProbe)); err == nil {
			return nil
		}
	}
	skipped := ""
	if len(f.Missing) > 0 {
		skipped = fmt.Sprintf("; it skipped %s, which do not exist", strings.Join(f.Missing, ", "))
	}
	t := comp.Target
	return fmt.Errorf("linux/%s: the C compiler %s finds no C library headers (no %s in %s%s): install %s%s",
		t.GoArch, comp.Name, libcProbe, strings.Join(f.SysIncludePaths, ", "), skipped, t.LibcRemedy(), source)
}

// config builds the cc/v4 configuration exactly as cc.NewConfig would
// from the same answers.
func (f *compilerFacts) config(goarch, compiler string) (*cc.Config, error) {
	abi, err := cc.NewABI("linux", goarch)
	if err != nil {
		return nil, err
	}
	inc := append([]string(nil), f.IncludePaths...)
	sys := append([]string(nil), f.SysIncludePaths...)
	cfg := &cc.Config{
		ABI:                 abi,
		CC:                  compiler,
		HostIncludePaths:    inc,
		HostSysIncludePaths: sys,
		IncludePaths:        append(append([]string{""}, inc...), sys...),
		Predefined:          f.Predefined,
		SysIncludePaths:     sys,
	}
	if err := cfg.ApplyOptions(); err != nil {
		return nil, err
	}
	return cfg, nil
}
