// Package target lists the architectures the generator lays records out for
// and finds the C compiler whose headers and predefined macros decide each
// layout. Layout depends on a target's libc headers (pthread_mutex_t is 40
// bytes on amd64 and 48 on arm64), so every target is read with its own
// compiler rather than the host compiler with a foreign ABI.
package target

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
)

// Target is one Linux architecture the generated package supports.
type Target struct {
	GoArch     string // GOARCH value and build constraint
	GNUTriplet string // prefix of the cross toolchain, e.g. aarch64-linux-gnu
	DebianPkg  string // Debian package that provides <GNUTriplet>-gcc
	LibcPkg    string // Debian package with the libc headers <GNUTriplet>-gcc reads
	CMacro     string // C preprocessor condition true only on this target

	// What the target's compiler must predefine before its answers are
	// used (see Check): every macro of ArchMacros, __SIZEOF_POINTER__ and
	// __BYTE_ORDER__ with these values, and __linux__.
	ArchMacros  []string
	PointerSize int
	ByteOrder   string
}

// All is the table of supported targets, in output order.
var All = []Target{
	{GoArch: "amd64", GNUTriplet: "x86_64-linux-gnu", DebianPkg: "gcc-x86-64-linux-gnu", LibcPkg: "libc6-dev-amd64-cross",
		CMacro:     "defined(__x86_64__)",
		ArchMacros: []string{"__x86_64__"}, PointerSize: 8, ByteOrder: littleEndian},
	{GoArch: "arm64", GNUTriplet: "aarch64-linux-gnu", DebianPkg: "gcc-aarch64-linux-gnu", LibcPkg: "libc6-dev-arm64-cross",
		CMacro:     "defined(__aarch64__)",
		ArchMacros: []string{"__aarch64__"}, PointerSize: 8, ByteOrder: littleEndian},
	{GoArch: "ppc64le", GNUTriplet: "powerpc64le-linux-gnu", DebianPkg: "gcc-powerpc64le-linux-gnu", LibcPkg: "libc6-dev-ppc64el-cross",
		CMacro:     "defined(__powerpc64__) && defined(__LITTLE_ENDIAN__)",
		ArchMacros: []string{"__powerpc64__", "__LITTLE_ENDIAN__"}, PointerSize: 8, ByteOrder: littleEndian},
}

// Names returns the GOARCH names of All, comma separated.
func Names() string {
	var s []string
	for _, t := range All {
		s = append(s, t.GoArch)
	}
	return strings.Join(s, ",")
}

// Parse turns a comma-separated list of GOARCH names into targets, in the
// order of All, without duplicates.
func Parse(list string) ([]Target, error) {
	want := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if _, ok := lookup(name); !ok {
			return nil, fmt.Errorf("unknown architecture %q; supported: %s", name, Names())
		}
		want[name] = true
	}
	if len(want) == 0 {
		return nil, fmt.Errorf("no architecture given; supported: %s", Names())
	}
	var r []Target
	for _, t := range All {
		if want[t.GoArch] {
			r = append(r, t)
		}
	}
	return r, nil
}

// Lookup finds a target by GOARCH.
func Lookup(goarch string) (Target, bool) { return lookup(goarch) }

func lookup(goarch string) (Target, bool) {
	for _, t := range All {
		if t.GoArch == goarch {
			return t, true
		}
	}
	return Target{}, false
}

// candidates are the compilers Compiler tries, in order, without
// $VERBSEXP_CC_<ARCH>: the host's cc (then gcc) for the host's
// architecture, and <triplet>-gcc.
func (t Target) candidates() []string {
	c := []string{t.GNUTriplet + "-gcc"}
	if t.GoArch == runtime.GOARCH {
		c = append([]string{"cc", "gcc"}, c...)
	}
	return c
}

// CompilerHelp says which compiler Compiler uses for t, for usage texts:
// the same order it tries them in.
func (t Target) CompilerHelp() string {
	c := t.candidates()
	s := c[0]
	if len(c) > 1 {
		s += " (else " + strings.Join(c[1:], ", then ") + ")"
	}
	return fmt.Sprintf("%s, or $%s", s, t.EnvVar())
}

// EnvVar names the environment variable that overrides the compiler for t,
// e.g. VERBSEXP_CC_ARM64.
func (t Target) EnvVar() string { return "VERBSEXP_CC_" + strings.ToUpper(t.GoArch) }

// Compiler returns the path of the C compiler for t: $VERBSEXP_CC_<ARCH> if
// set, else the host's cc when t is the host architecture, else
// <triplet>-gcc. A missing compiler is an error that says what to install.
func (t Target) Compiler() (string, error) {
	if cc := os.Getenv(t.EnvVar()); cc != "" {
		p, err := exec.LookPath(cc)
		if err != nil && strings.ContainsAny(strings.TrimSpace(cc), " \t") {
			return "", fmt.Errorf("%s=%q: the variable takes the compiler's path or name alone, not a command line (the generator passes its own flags): set it to %s, or unset it to use %s",
				t.EnvVar(), cc, strings.Fields(cc)[0], strings.Join(t.candidates(), ", "))
		}
		if err != nil {
			return "", fmt.Errorf("%s=%s: compiler not found: %v; point it at an installed compiler, or unset it to use %s-gcc (apt-get install -y %s)",
				t.EnvVar(), cc, err, t.GNUTriplet, t.DebianPkg)
		}
		return p, nil
	}
	for _, c := range t.candidates() {
		if p, err := exec.LookPath(c); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no C compiler for linux/%s: %s-gcc is not on PATH; install it with `apt-get install -y %s` (or set %s, or drop %s from -arch)",
		t.GoArch, t.GNUTriplet, t.DebianPkg, t.EnvVar(), t.GoArch)
}
