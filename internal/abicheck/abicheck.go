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

// Source returns a C translation unit of _Static_asserts for one arch of
// m. Bit-fields cannot be named by offsetof; their byte offsets are
// checked at run time by the host tests instead. entry is the header to
// include.
func Source(m *manifest.Manifest, arch, entry string) (string, int, error) {
	a := m.Arches[arch]
	if a == nil {
		return "", 0, fmt.Errorf("manifest has no arch %s", arch)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "/* ABI assertions for linux/%s, generated from abi.json. */\n", arch)
	fmt.Fprintf(&b, "#include <stddef.h>\n#include <%s>\n\n", entry)
	n := 0
	assert := func(cond, msg string) {
		fmt.Fprintf(&b, "_Static_assert(%s, %q);\n", cond, msg)
		n++
	}
	for _, r := range a.Records {
		assert(fmt.Sprintf("sizeof(%s) == %d", r.C, r.Size), fmt.Sprintf("%s: size is not %d on %s", r.C, r.Size, arch))
		assert(fmt.Sprintf("_Alignof(%s) == %d", r.C, r.Align), fmt.Sprintf("%s: alignment is not %d on %s", r.C, r.Align, arch))
		for _, f := range r.Fields {
			if f.BitOffset != nil {
				continue
			}
			assert(fmt.Sprintf("offsetof(%s, %s) == %d", r.C, f.C, f.Offset), fmt.Sprintf("%s.%s: offset is not %d on %s", r.C, f.C, f.Offset, arch))
			if f.Size > 0 { // a flexible array has no size to take
				assert(fmt.Sprintf("sizeof(((%s *)0)->%s) == %d", r.C, f.C, f.Size), fmt.Sprintf("%s.%s: size is not %d on %s", r.C, f.C, f.Size, arch))
			}
		}
	}
	for _, c := range a.Constants {
		lit := c.Value.String() + "ULL"
		if c.Value.Negative() {
			lit = "(" + c.Value.String() + "LL)"
		}
		assert(fmt.Sprintf("(%s) == %s", c.C, lit), fmt.Sprintf("%s is not %s on %s", c.C, c.Value, arch))
	}
	return b.String(), n, nil
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
