package target

import (
	"os/exec"
	"strings"
	"testing"
)

// macros spells a predefined-macro dump.
func macros(defs ...string) string {
	var b strings.Builder
	for _, d := range defs {
		b.WriteString("#define " + d + "\n")
	}
	return b.String()
}

var (
	amd64Macros   = macros("__x86_64__ 1", "__SIZEOF_POINTER__ 8", "__BYTE_ORDER__ __ORDER_LITTLE_ENDIAN__", "__linux__ 1")
	arm64Macros   = macros("__aarch64__ 1", "__SIZEOF_POINTER__ 8", "__BYTE_ORDER__ __ORDER_LITTLE_ENDIAN__", "__linux__ 1")
	ppc64leMacros = macros("__powerpc64__ 1", "__powerpc__ 1", "__LITTLE_ENDIAN__ 1", "__SIZEOF_POINTER__ 8", "__BYTE_ORDER__ __ORDER_LITTLE_ENDIAN__", "__linux__ 1")
)

// TestCheck: each target accepts its own compiler's macros and nothing
// else: another architecture, another pointer size (x32, -m32), another
// byte order (ppc64 big-endian), or no Linux (a bare-metal toolchain).
func TestCheck(t *testing.T) {
	own := map[string]string{"amd64": amd64Macros, "arm64": arm64Macros, "ppc64le": ppc64leMacros}
	others := map[string]string{
		"x32":        macros("__x86_64__ 1", "__SIZEOF_POINTER__ 4", "__BYTE_ORDER__ __ORDER_LITTLE_ENDIAN__", "__linux__ 1"),
		"i386":       macros("__i386__ 1", "__SIZEOF_POINTER__ 4", "__BYTE_ORDER__ __ORDER_LITTLE_ENDIAN__", "__linux__ 1"),
		"ppc64":      macros("__powerpc64__ 1", "__BIG_ENDIAN__ 1", "__SIZEOF_POINTER__ 8", "__BYTE_ORDER__ __ORDER_BIG_ENDIAN__", "__linux__ 1"),
		"bare-metal": macros("__aarch64__ 1", "__SIZEOF_POINTER__ 8", "__BYTE_ORDER__ __ORDER_LITTLE_ENDIAN__"),
		"empty":      "",
	}
	for _, tg := range All {
		if err := tg.Check("cc", own[tg.GoArch]); err != nil {
			t.Errorf("%s refuses its own macros: %v", tg.GoArch, err)
		}
		for name, m := range own {
			if name == tg.GoArch {
				continue
			}
			if tg.Check("cc", m) == nil {
				t.Errorf("%s accepts %s's macros", tg.GoArch, name)
			}
		}
		for name, m := range others {
			if tg.Check("cc", m) == nil {
				t.Errorf("%s accepts a %s compiler", tg.GoArch, name)
			}
		}
	}
}

func TestIdentify(t *testing.T) {
	for m, want := range map[string]string{
		amd64Macros:   "x86_64 (__SIZEOF_POINTER__ 8, __BYTE_ORDER__ __ORDER_LITTLE_ENDIAN__, __linux__)",
		arm64Macros:   "aarch64 (__SIZEOF_POINTER__ 8, __BYTE_ORDER__ __ORDER_LITTLE_ENDIAN__, __linux__)",
		ppc64leMacros: "powerpc64le (__SIZEOF_POINTER__ 8, __BYTE_ORDER__ __ORDER_LITTLE_ENDIAN__, __linux__)",
		"":            "unknown (__SIZEOF_POINTER__ undefined, __BYTE_ORDER__ undefined, no __linux__)",
	} {
		if got := Identify(m).String(); got != want {
			t.Errorf("Identify = %q, want %q", got, want)
		}
	}
}

// TestCheckMessage: the refusal names the compiler, what it is and what
// to install.
func TestCheckMessage(t *testing.T) {
	arm, _ := Lookup("arm64")
	err := arm.Check("gcc", amd64Macros)
	want := "linux/arm64: gcc is x86_64 (__SIZEOF_POINTER__ 8, __BYTE_ORDER__ __ORDER_LITTLE_ENDIAN__, __linux__), not arm64: install gcc-aarch64-linux-gnu or set VERBSEXP_CC_ARM64 to an aarch64 compiler"
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
	ppc, _ := Lookup("ppc64le")
	if err := ppc.Check("gcc", amd64Macros); err == nil || !strings.Contains(err.Error(), "to a powerpc64le compiler") {
		t.Errorf("got %v", err)
	}
}

// TestInstalledCompilers: the compilers the table names, where installed,
// pass their own target's check (the table's macros are what they say).
func TestInstalledCompilers(t *testing.T) {
	for _, tg := range All {
		cc, err := tg.Compiler()
		if err != nil {
			t.Logf("SKIP %s: %v", tg.GoArch, err)
			continue
		}
		out, err := exec.Command(cc, "-dM", "-E", "-x", "c", "/dev/null").Output()
		if err != nil {
			t.Fatalf("%s: %v", cc, err)
		}
		if err := tg.Check(cc, string(out)); err != nil {
			t.Error(err)
		}
	}
}
