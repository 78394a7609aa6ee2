package abicheck

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/verbsexp/verbsexp/internal/manifest"
	"github.com/verbsexp/verbsexp/internal/target"
)

// A bit-field's position cannot be asserted at compile time (offsetof
// does not take one, and no constant expression reads an object's
// bytes). So the compiler is asked to lay one out: for each bit-field of
// the manifest, a constant object of its record with only that member
// set to all ones (-1: every bit of a signed or unsigned field, 1 for a
// _Bool), compiled to an object file whose data says which bits the
// compiler set. It needs the target's assembler, which its gcc package
// installs (binutils-<triplet>).

// bitField is one manifest bit-field to check.
type bitField struct {
	rec, path string
	off       int64 // from the start of the record, in bits
	size      int
}

func bitFields(a *manifest.Arch) []bitField {
	var r []bitField
	for _, rec := range a.Records {
		for _, f := range rec.Fields {
			if f.BitOffset != nil {
				r = append(r, bitField{rec.C, f.C, *f.BitOffset, f.BitSize})
			}
		}
	}
	return r
}

// bitSymbol names bit-field i's object.
func bitSymbol(i int) string { return fmt.Sprintf("verbsexp_bits_%d", i) }

// bitSource is the C of the bit-field objects, including entry first.
func bitSource(arch, entry string, bits []bitField) string {
	var b strings.Builder
	fmt.Fprintf(&b, "/* Bit-field positions for linux/%s, generated from abi.json: one object per bit-field, only it set. */\n", arch)
	fmt.Fprintf(&b, "#include <stddef.h>\n#include <%s>\n", entry)
	for i, f := range bits {
		fmt.Fprintf(&b, "const %s %s = { .%s = -1 };\n", f.rec, bitSymbol(i), f.path)
	}
	return b.String()
}

// checkBits compiles the bit-field objects with cc and adds a Failure to
// r for each bit-field whose bits are not the manifest's.
func checkBits(r *Result, cc string, t target.Target, entry string, includes []string, bits []bitField) error {
	if len(bits) == 0 {
		return nil
	}
	if t.ByteOrder != "__ORDER_LITTLE_ENDIAN__" {
		return fmt.Errorf("linux/%s: bit positions are read little-endian; this target is %s", t.GoArch, t.ByteOrder)
	}
	dir, err := os.MkdirTemp("", "abicheck-bits-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	obj := filepath.Join(dir, "bits.o")
	c, err := compile(cc, t, bitSource(t.GoArch, entry, bits), includes, "-c", "-o", obj, "-w", "-fno-diagnostics-show-caret", "-fmax-errors=10")
	if err != nil {
		return err
	}
	if c.err != nil {
		r.Other = fmt.Sprintf("the bit-field objects do not compile (is %s's assembler, binutils-%s, installed?):\n%s", filepath.Base(cc), t.GNUTriplet, strings.TrimSpace(strings.ReplaceAll(c.out, c.file, filepath.Base(c.file))))
		return nil
	}
	data, err := SymbolData(obj)
	if err != nil {
		return fmt.Errorf("linux/%s: reading the bit-field objects %s compiled: %v", t.GoArch, filepath.Base(cc), err)
	}
	for i, f := range bits {
		b, ok := data[bitSymbol(i)]
		if !ok {
			return fmt.Errorf("linux/%s: %s compiled no object %s for %s.%s", t.GoArch, filepath.Base(cc), bitSymbol(i), f.rec, f.path)
		}
		if got := setBits(b); got != (bitRange{f.off, f.size}) {
			msg := fmt.Sprintf("%s.%s: bit-field is not %d bits at bit %d on %s", f.rec, f.path, f.size, f.off, t.GoArch)
			r.Failures = append(r.Failures, Failure{Assertion{Cond: "bits of " + f.rec + "." + f.path, Msg: msg}, "the compiler sets " + got.String()})
		}
	}
	return nil
}

// bitRange is a run of bits, from bit 0 of byte 0 (little-endian); size
// -1 says the set bits are not one run.
type bitRange struct {
	off  int64
	size int
}

func (b bitRange) String() string {
	switch b.size {
	case -1:
		return "bits that are not one run"
	case 0:
		return "no bit"
	}
	return fmt.Sprintf("%d bits at bit %d", b.size, b.off)
}

// setBits finds the run of set bits in b.
func setBits(b []byte) bitRange {
	first, last, n := int64(-1), int64(-1), 0
	for i, x := range b {
		for k := 0; k < 8; k++ {
			if x&(1<<k) != 0 {
				bit := int64(i)*8 + int64(k)
				if first < 0 {
					first = bit
				}
				last = bit
				n++
			}
		}
	}
	switch {
	case n == 0:
		return bitRange{0, 0}
	case int64(n) != last-first+1:
		return bitRange{first, -1}
	}
	return bitRange{first, n}
}

// SymbolData returns the bytes of each data object of an object file.
func SymbolData(obj string) (map[string][]byte, error) {
	f, err := elf.Open(obj)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return nil, err
	}
	r := map[string][]byte{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_OBJECT || int(s.Section) <= 0 || int(s.Section) >= len(f.Sections) {
			continue
		}
		sec := f.Sections[s.Section]
		if sec.Type == elf.SHT_NOBITS {
			r[s.Name] = make([]byte, s.Size)
			continue
		}
		d, err := sec.Data()
		if err != nil {
			return nil, err
		}
		if s.Value+s.Size > uint64(len(d)) {
			return nil, fmt.Errorf("symbol %s lies outside its section", s.Name)
		}
		r[s.Name] = d[s.Value : s.Value+s.Size]
	}
	return r, nil
}
