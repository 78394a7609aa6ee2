package layout

import (
	"fmt"
	"math"

	"github.com/verbsexp/verbsexp/gen/internal/model"
	"github.com/verbsexp/verbsexp/gen/internal/parse"
)

// planBuilder fills one Plan.
type planBuilder struct {
	pl  *Planner
	p   *Plan
	rec *model.Record
	cur int64 // first byte not yet covered by a slot
}

// MaxGoTypeSize is the gc compiler's limit on the size of a type on the
// 64-bit targets: a larger one fails to compile ("type … larger than
// address space"), so the generator refuses it up front.
const MaxGoTypeSize = 1 << 50

func (b *planBuilder) build() error {
	def := b.p.Def
	if err := b.checkArithmetic(def); err != nil {
		return err
	}
	if def.Size >= MaxGoTypeSize {
		return fmt.Errorf("%s: %s is %d bytes on linux/%s: Go cannot declare a type of 2^50 bytes or more (the gc compiler rejects it as larger than the address space); shrink it or move it out of the -scope headers",
			def.Pos, b.rec.C, def.Size, b.pl.pkg.Arches[b.pl.arch])
	}
	b.p.GoAlign = min(int64(def.Align), GoAlignLimit)
	if b.p.GoAlign < 1 {
		b.p.GoAlign = 1
	}
	b.p.Selectors = map[string]string{}
	b.p.Types = map[string]*GoType{}
	var err error
	if def.Kind == parse.Union {
		if err = b.unionStorage(def, 0, def.Pos); err == nil {
			err = b.accessorsOf(def, 0)
		}
	} else {
		err = b.structMembers(def, 0)
	}
	if err != nil {
		return err
	}
	if err := b.pad(def.Size, def.Pos); err != nil {
		return err
	}
	b.alignSlot()
	fields := make([]*GoType, len(b.p.Slots))
	for i, s := range b.p.Slots {
		fields[i] = s.Type
	}
	b.p.SizeSteps, b.p.AlignSteps = structSteps(fields)
	if b.rec.Nested {
		// The manifest lists the members of nested types under their
		// named record (facts of the top-level plan): listing them again
		// per nested type would cost depth³.
		return nil
	}
	return b.facts(def, b.rec, b.p, 0, "", "")
}

// alignSlot puts a zero-size array first when no field gives the Go struct
// the C record's alignment. (A zero-size field last would grow the struct.)
func (b *planBuilder) alignSlot() {
	var max int64 = 1
	for _, s := range b.p.Slots {
		max = maxi(max, s.Type.Align)
	}
	if max >= b.p.GoAlign {
		return
	}
	t := storageType(0, b.p.GoAlign)
	b.p.Slots = append([]Slot{{Name: "_", Offset: 0, Type: t}}, b.p.Slots...)
}

func (b *planBuilder) structMembers(rec *parse.Record, base int64) error {
	ms := rec.Members
	for i := 0; i < len(ms); i++ {
		m := ms[i]
		off := base + m.Offset
		switch {
		case m.BitField:
			j := i
			for j < len(ms) && ms[j].BitField {
				j++
			}
			if err := b.bitRun(ms[i:j], base); err != nil {
				return err
			}
			i = j - 1
		case m.Flexible:
			if err := b.accessor(m, base); err != nil {
				return err
			}
		case m.Name == "" && m.Type.Kind == parse.Nested && m.Type.Record.Kind == parse.Struct:
			if err := b.structMembers(m.Type.Record, off); err != nil {
				return err
			}
		case m.Name == "" && m.Type.Kind == parse.Nested:
			if err := b.unionStorage(m.Type.Record, off, m.Pos); err != nil {
				return err
			}
			if err := b.accessorsOf(m.Type.Record, off); err != nil {
				return err
			}
		case m.Name == "":
			continue
		default:
			t, err := b.goType(m)
			if err != nil {
				return err
			}
			if off%t.Align != 0 || t.Align > b.p.GoAlign {
				// Packed or misaligned: Go would move it. Keep the bytes,
				// reach them through an accessor.
				if err := b.storage(off, m.Type.Size, 1, m.Pos); err != nil {
					return err
				}
				if err := b.accessor(m, base); err != nil {
					return err
				}
				continue
			}
			if tooCostly(t) {
				// Deeply nested: as a field it would cost Go's type
				// checker exponential time (maxFieldSteps).
				if err := b.storage(off, m.Type.Size, t.Align, m.Pos); err != nil {
					return err
				}
				if err := b.accessor(m, base); err != nil {
					return err
				}
				continue
			}
			if err := b.pad(off, m.Pos); err != nil {
				return err
			}
			name := b.rec.Members[m.Name]
			b.p.Slots = append(b.p.Slots, Slot{Name: name, Offset: off, Type: t, CPath: m.Name})
			b.p.Selectors[m.Name] = name
			b.p.Types[m.Name] = t
			b.cur = off + t.Size
		}
	}
	return nil
}

// bitRun stores a run of adjacent bit-fields in the bytes their bits occupy
// (never bytes of neighbouring members) and gives each an accessor.
func (b *planBuilder) bitRun(run []*parse.Member, base int64) error {
	lo, hi := int64(-1), int64(0)
	for _, m := range run {
		first := base*8 + m.BitOffset
		last := first + int64(m.BitSize)
		if lo < 0 || first/8 < lo {
			lo = first / 8
		}
		hi = maxi(hi, (last+7)/8)
	}
	if lo < b.cur {
		lo = b.cur // the first byte is shared with the previous run
	}
	if hi > lo {
		if err := b.storage(lo, hi-lo, 1, run[0].Pos); err != nil {
			return err
		}
	}
	for _, m := range run {
		if err := b.accessor(m, base); err != nil {
			return err
		}
	}
	return nil
}

// accessorsOf adds accessors for every member reachable in rec, whose
// bytes are already covered by storage.
func (b *planBuilder) accessorsOf(rec *parse.Record, base int64) error {
	for _, m := range rec.Members {
		if m.Name == "" {
			if m.Type.Kind == parse.Nested {
				if err := b.accessorsOf(m.Type.Record, base+m.Offset); err != nil {
					return err
				}
			}
			continue
		}
		if err := b.accessor(m, base); err != nil {
			return err
		}
	}
	return nil
}

// accessor adds the method for member m of a record placed at base.
func (b *planBuilder) accessor(m *parse.Member, base int64) error {
	name := b.rec.Members[m.Name]
	off := base + m.Offset
	var t *GoType
	var err error
	if m.Flexible {
		t, err = b.goTypeOf(m.Type.Elem, m)
	} else {
		t, err = b.goType(m)
	}
	if err != nil {
		return err
	}
	a := Accessor{Name: name, CPath: m.Name, Offset: off, Type: t}
	a.Aligned = off%t.Align == 0 && t.Align <= b.p.GoAlign
	switch {
	case m.BitField:
		a.Kind = Bits
		a.BitOffset = base*8 + m.BitOffset
		a.BitSize = m.BitSize
		a.Signed = m.Type.Signed
		a.Aligned = false
	case m.Flexible:
		a.Kind = Slice
	case t.Scalar():
		a.Kind = Value
	default:
		a.Kind = Pointer
	}
	b.p.Accessors = append(b.p.Accessors, a)
	b.p.Selectors[m.Name] = name + "()"
	b.p.Types[m.Name] = t
	return nil
}

// unionStorage covers a union placed at off. A union whose members are
// all pointers filling it gets an unsafe.Pointer slot, so that the
// garbage collector sees the pointer when the record is in Go memory;
// any other union gets integer storage.
func (b *planBuilder) unionStorage(u *parse.Record, off int64, pos parse.Pos) error {
	if ptrSize, ok := pointerOnly(u); ok && off%ptrSize == 0 && ptrSize <= b.p.GoAlign {
		if err := b.pad(off, pos); err != nil {
			return err
		}
		b.p.Slots = append(b.p.Slots, Slot{Name: "_", Offset: off, Type: &GoType{Kind: UnsafePointer, Size: ptrSize, Align: ptrSize}})
		b.cur = off + ptrSize
		return nil
	}
	return b.storage(off, u.Size, int64(u.Align), pos)
}

// pointerOnly reports whether every member of union u (through anonymous
// members) is a data or function pointer at offset 0 as large as u.
func pointerOnly(u *parse.Record) (int64, bool) {
	if u.Kind != parse.Union || len(u.Members) == 0 {
		return 0, false
	}
	for _, m := range u.Members {
		t := m.Type
		if m.Name == "" && t.Kind == parse.Nested {
			if n, ok := pointerOnly(t.Record); !ok || n != u.Size {
				return 0, false
			}
			continue
		}
		if t.Kind != parse.Pointer || m.Offset != 0 || m.BitField || t.Size != u.Size {
			return 0, false
		}
	}
	return u.Size, true
}

// storage covers [off, off+size) with a blank field of the widest unsigned
// integer elements that the offset, size and alignment allow.
func (b *planBuilder) storage(off, size, align int64, pos parse.Pos) error {
	if err := b.pad(off, pos); err != nil {
		return err
	}
	if size == 0 {
		return nil
	}
	k := int64(GoAlignLimit)
	for k > 1 && (k > align || k > b.p.GoAlign || off%k != 0 || size%k != 0) {
		k /= 2
	}
	b.p.Slots = append(b.p.Slots, Slot{Name: "_", Offset: off, Type: storageType(size, k)})
	b.cur = off + size
	return nil
}

// pad fills the bytes between the last slot and off.
func (b *planBuilder) pad(off int64, pos parse.Pos) error {
	switch {
	case off < b.cur:
		return fmt.Errorf("%s: %s: member at offset %d overlaps the previous one (ends at %d); the layout from the C front end is inconsistent", pos, b.rec.C, off, b.cur)
	case off > b.cur:
		b.p.Slots = append(b.p.Slots, Slot{Name: "_", Offset: b.cur, Type: storageType(off-b.cur, 1)})
		b.cur = off
	}
	return nil
}

// facts lists the manifest entries of def placed at base inside the
// top-level record; owner/plan give the Go selectors for def's members.
func (b *planBuilder) facts(def *parse.Record, owner *model.Record, plan *Plan, base int64, cprefix, goprefix string) error {
	for _, m := range def.Members {
		if m.Name == "" {
			if m.Type.Kind == parse.Nested {
				if err := b.facts(m.Type.Record, owner, plan, base+m.Offset, cprefix, goprefix); err != nil {
					return err
				}
			}
			continue
		}
		sel, ok := plan.Selectors[m.Name]
		if !ok {
			return fmt.Errorf("%s: %s: member %s has no Go selector (internal error)", m.Pos, owner.C, m.Name)
		}
		f := Field{C: cprefix + m.Name, Go: goprefix + sel, Offset: base + m.Offset, Size: m.Type.Size, Type: plan.Types[m.Name].String()}
		if m.BitField {
			f.BitOffset = base*8 + m.BitOffset
			f.BitSize = m.BitSize
		}
		if m.Flexible {
			f.Size = 0
		}
		b.p.Fields = append(b.p.Fields, f)
		if m.Type.Kind != parse.Nested {
			continue
		}
		sub := b.pl.pkg.RecordByC(owner.C + "." + m.Name)
		if sub == nil {
			return fmt.Errorf("%s: %s.%s: nested record has no model entry (internal error)", m.Pos, owner.C, m.Name)
		}
		sp, err := b.pl.Plan(sub)
		if err != nil {
			return err
		}
		if err := b.facts(m.Type.Record, sub, sp, base+m.Offset, f.C+".", f.Go+"."); err != nil {
			return err
		}
	}
	return nil
}

func maxi(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// checkArithmetic verifies the layout the C front end computed, without
// overflowing: every member starts within its record and ends by its
// end, every array's size is its length times its element's. cc/v4
// computes in wrapping 64-bit arithmetic, so a record of four
// char[1ULL<<62] arrays came out as 1 byte with negative offsets (exit 0,
// a package that did not compile). A vector type is refused here too.
func (b *planBuilder) checkArithmetic(def *parse.Record) error {
	arch := b.pl.pkg.Arches[b.pl.arch]
	if def.Unsupported != "" {
		what := b.rec.C
		if def != b.p.Def {
			what += ": an unnamed record in it"
		}
		if def.UnsupportedBitField {
			what += ": an unnamed bit-field"
		}
		return fmt.Errorf("%s: %s uses GCC's %s, which the C front end the generator uses does not apply: the generator refuses the record rather than emit a wrong layout; declare it without the attribute (or move the record out of the -scope headers)", def.UnsupportedPos, what, def.Unsupported)
	}
	if def.Size < 0 || def.Align < 1 {
		return fmt.Errorf("%s: %s has size %d and alignment %d on linux/%s: the layout arithmetic overflowed (it would be larger than 2^63 bytes); Go cannot declare a type of 2^50 bytes or more: shrink it", def.Pos, b.rec.C, def.Size, def.Align, arch)
	}
	// Types first: one the front end cannot size (size 0) makes its
	// record's size wrong, and every member's offset look out of range.
	for _, m := range def.Members {
		if err := b.checkType(m, memberName(m), m.Type); err != nil {
			return err
		}
	}
	for _, m := range def.Members {
		name := memberName(m)
		size := m.Type.Size
		switch {
		case m.BitField:
			if m.BitOffset < 0 || m.BitOffset/8 > def.Size || int64(m.BitSize) > 8*def.Size-m.BitOffset {
				return b.overflow(m, name, def, m.BitOffset/8, int64(m.BitSize+7)/8)
			}
			continue
		case m.Flexible:
			size = 0
		}
		if m.Offset < 0 || size < 0 || m.Offset > def.Size-size {
			return b.overflow(m, name, def, m.Offset, size)
		}
		if m.Type.Kind == parse.Nested {
			if err := b.checkArithmetic(m.Type.Record); err != nil {
				return err
			}
		}
	}
	return nil
}

func memberName(m *parse.Member) string {
	if m.Name == "" {
		return "(anonymous)"
	}
	return m.Name
}

func (b *planBuilder) overflow(m *parse.Member, name string, def *parse.Record, off, size int64) error {
	return fmt.Errorf("%s: %s: member %s (offset %d, %d bytes) does not fit in its %d-byte record on linux/%s: the layout arithmetic overflowed (the record would be larger than 2^63 bytes); Go cannot declare a type of 2^50 bytes or more: shrink it",
		m.Pos, b.rec.C, name, off, size, def.Size, b.pl.pkg.Arches[b.pl.arch])
}

// checkType checks the sizes of t (a member's type) and refuses vectors.
func (b *planBuilder) checkType(m *parse.Member, name string, t *parse.Type) error {
	for ; t != nil; t = t.Elem {
		if t.Unsupported != "" {
			typ := ""
			if t.Name != "" {
				typ = " (" + t.Name + ")"
			}
			return fmt.Errorf("%s: %s: member %s%s uses GCC's %s, which the C front end the generator uses does not apply: the generator refuses it rather than emit a wrong layout; declare the member without the attribute (or move the record out of the -scope headers)", m.Pos, b.rec.C, name, typ, t.Unsupported)
		}
		if t.Kind == parse.Opaque && t.Size <= 0 {
			// cc/v4 (v4.34.0) knows _Float16, _Decimal32/64/128 by name
			// only: sizes of 0 and -1, which gcc's are not.
			return fmt.Errorf("%s: %s: member %s has type %s, which the C front end the generator uses cannot lay out (it gives it %d bytes): the generator refuses it rather than emit a wrong layout; declare the member with another type (or move the record out of the -scope headers)", m.Pos, b.rec.C, name, t.Name, t.Size)
		}
		if t.Kind != parse.Array {
			return nil
		}
		if t.Len < 0 || t.Elem.Size < 0 || t.Len > 0 && t.Elem.Size > math.MaxInt64/t.Len || t.Elem.Size*t.Len != t.Size && !m.Flexible {
			return fmt.Errorf("%s: %s: member %s is an array of %d elements of %d bytes, %d bytes in all on linux/%s: the layout arithmetic overflowed (it would be larger than 2^63 bytes); Go cannot declare a type of 2^50 bytes or more: shrink it", m.Pos, b.rec.C, name, t.Len, t.Elem.Size, t.Size, b.pl.pkg.Arches[b.pl.arch])
		}
		if t.Kind == parse.Array && t.Elem.Kind == parse.Pointer {
			return nil
		}
	}
	return nil
}
