package target

import (
	"fmt"
	"runtime"
	"strings"
)

// Byte orders as gcc spells __BYTE_ORDER__.
const (
	littleEndian = "__ORDER_LITTLE_ENDIAN__"
	bigEndian    = "__ORDER_BIG_ENDIAN__"
)

// Identity is what a C compiler's predefined macros say it compiles for.
// A compiler is asked for its layouts only after its Identity passes
// Target.Check: a host gcc standing in for a cross compiler would give
// amd64's layouts under another name.
type Identity struct {
	Arch        string // e.g. x86_64, aarch64, powerpc64le; "unknown" when no known macro is defined
	PointerSize string // __SIZEOF_POINTER__, "" when undefined
	ByteOrder   string // __BYTE_ORDER__, "" when undefined
	Linux       bool   // __linux__ is defined
}

// archMacros names architectures by the macro that gives them away, most
// specific first.
var archMacros = []struct{ macro, name string }{
	{"__x86_64__", "x86_64"},
	{"__i386__", "i386"},
	{"__aarch64__", "aarch64"},
	{"__arm__", "arm"},
	{"__powerpc64__", "powerpc64"},
	{"__powerpc__", "powerpc"},
	{"__riscv", "riscv"},
	{"__s390x__", "s390x"},
	{"__s390__", "s390"},
	{"__mips__", "mips"},
	{"__loongarch__", "loongarch"},
	{"__sparc__", "sparc"},
}

// Macros parses the output of `cc -dM -E` into a map from macro name to
// replacement text (function-like macros keep their parameter list in the
// name).
func Macros(predefined string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(predefined, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "#define ")
		if !ok {
			continue
		}
		name, value, _ := strings.Cut(rest, " ")
		m[name] = strings.TrimSpace(value)
	}
	return m
}

// Identify reads an Identity from a compiler's predefined macros.
func Identify(predefined string) Identity {
	m := Macros(predefined)
	id := Identity{Arch: "unknown", PointerSize: m["__SIZEOF_POINTER__"], ByteOrder: m["__BYTE_ORDER__"]}
	_, id.Linux = m["__linux__"]
	for _, a := range archMacros {
		if _, ok := m[a.macro]; ok {
			id.Arch = a.name
			break
		}
	}
	if id.ByteOrder == littleEndian && (id.Arch == "powerpc64" || id.Arch == "powerpc") {
		id.Arch += "le"
	}
	if id.ByteOrder == bigEndian && id.Arch == "aarch64" {
		id.Arch = "aarch64_be"
	}
	return id
}

// String describes the identity with the macros it comes from, e.g.
// "x86_64 (__SIZEOF_POINTER__ 8, __BYTE_ORDER__ __ORDER_LITTLE_ENDIAN__, __linux__)".
func (id Identity) String() string {
	var ev []string
	ev = append(ev, "__SIZEOF_POINTER__ "+orUndefined(id.PointerSize), "__BYTE_ORDER__ "+orUndefined(id.ByteOrder))
	if id.Linux {
		ev = append(ev, "__linux__")
	} else {
		ev = append(ev, "no __linux__")
	}
	return id.Arch + " (" + strings.Join(ev, ", ") + ")"
}

func orUndefined(s string) string {
	if s == "" {
		return "undefined"
	}
	return s
}

// ArchName is the architecture's name as Identify spells it (the first
// part of the GNU triplet).
func (t Target) ArchName() string { name, _, _ := strings.Cut(t.GNUTriplet, "-"); return name }

// Check reports whether predefined, the macros of the compiler named
// compiler, are those of a Linux compiler for t: every macro of
// t.ArchMacros defined, the pointer size and byte order of t. The error
// names the compiler, what it is and what to install.
func (t Target) Check(compiler, predefined string) error {
	m := Macros(predefined)
	ok := m["__SIZEOF_POINTER__"] == fmt.Sprint(t.PointerSize) && m["__BYTE_ORDER__"] == t.ByteOrder
	for _, a := range t.ArchMacros {
		if _, def := m[a]; !def {
			ok = false
		}
	}
	if _, linux := m["__linux__"]; !linux {
		ok = false
	}
	if ok {
		return nil
	}
	return fmt.Errorf("linux/%s: %s is %s, not %s: %s", t.GoArch, compiler, Identify(predefined), t.GoArch, t.Remedy())
}

// Remedy says how to get a working compiler for t.
func (t Target) Remedy() string {
	article := "a"
	if strings.ContainsAny(t.ArchName()[:1], "aeiox") {
		article = "an"
	}
	return fmt.Sprintf("install %s or set %s to %s %s compiler", t.DebianPkg, t.EnvVar(), article, t.ArchName())
}

// LibcRemedy names the package with the libc headers that compiler, t's
// compiler, reads: the host's libc6-dev for a native compiler, else the
// cross package of the table.
func (t Target) LibcRemedy() string {
	if t.GoArch == runtime.GOARCH {
		return "libc6-dev"
	}
	return t.LibcPkg
}
