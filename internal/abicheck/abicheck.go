// Package abicheck turns an abi.json manifest into C that the target's
// compiler accepts only if every recorded size, alignment, offset and
// constant is what the C headers really say. It is the C compiler's side
// of the ABI pin; compile the result with Compile.
package abicheck

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/verbsexp/verbsexp/internal/manifest"
	"github.com/verbsexp/verbsexp/internal/target"
)

// Assertion is one compile-time check: a C constant expression and the
// message the compiler prints when it is false.
type Assertion struct {
	Cond, Msg string
}

// Assertions lists the checks for one arch of a manifest: every record's
// size and alignment, every member's offset and size, every constant's
// value. Bit-fields cannot be named by offsetof and are left to run-time
// checks. hint is appended to every message (what to do when it fails).
func Assertions(a *manifest.Arch, arch, hint string) []Assertion {
	var r []Assertion
	add := func(cond, msg string) { r = append(r, Assertion{cond, msg + hint}) }
	for _, rec := range a.Records {
		add(fmt.Sprintf("sizeof(%s) == %d", rec.C, rec.Size), fmt.Sprintf("%s: size is not %d on %s", rec.C, rec.Size, arch))
		add(fmt.Sprintf("_Alignof(%s) == %d", rec.C, rec.Align), fmt.Sprintf("%s: alignment is not %d on %s", rec.C, rec.Align, arch))
		for _, f := range rec.Fields {
			if f.BitOffset != nil {
				continue
			}
			add(fmt.Sprintf("offsetof(%s, %s) == %d", rec.C, f.C, f.Offset), fmt.Sprintf("%s.%s: offset is not %d on %s", rec.C, f.C, f.Offset, arch))
			if f.Size > 0 { // a flexible array has no size to take
				add(fmt.Sprintf("sizeof(((%s *)0)->%s) == %d", rec.C, f.C, f.Size), fmt.Sprintf("%s.%s: size is not %d on %s", rec.C, f.C, f.Size, arch))
			}
		}
	}
	for _, c := range a.Constants {
		lit := c.Value.String() + "ULL"
		if c.Value.Negative() {
			lit = "(" + c.Value.String() + "LL)"
		}
		add(fmt.Sprintf("(%s) == %s", c.C, lit), fmt.Sprintf("%s is not %s on %s", c.C, c.Value, arch))
	}
	return r
}

// Source returns a C translation unit of _Static_asserts for one arch of
// m, including entry first, and the number of assertions.
func Source(m *manifest.Manifest, arch, entry string) (string, int, error) {
	a := m.Arches[arch]
	if a == nil {
		return "", 0, fmt.Errorf("manifest has no arch %s", arch)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "/* ABI assertions for linux/%s, generated from abi.json. */\n", arch)
	fmt.Fprintf(&b, "#include <stddef.h>\n#include <%s>\n\n", entry)
	as := Assertions(a, arch, "")
	for _, x := range as {
		fmt.Fprintf(&b, "_Static_assert(%s, %q);\n", x.Cond, x.Msg)
	}
	return b.String(), len(as), nil
}

// Compile checks the assertions for t with t's C compiler, with includes
// searched first. It returns the compiler's complaints, if any.
func Compile(src string, t target.Target, includes []string) error {
	cc, err := t.Compiler()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "abicheck-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "abi_"+t.GoArch+".c")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		return err
	}
	args := []string{"-fsyntax-only", "-std=gnu11", "-fmax-errors=50"}
	for _, d := range includes {
		args = append(args, "-I", d)
	}
	args = append(args, file)
	cmd := exec.Command(cc, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("linux/%s: %s rejects the manifest:\n%s", t.GoArch, filepath.Base(cc), out.String())
	}
	return nil
}
