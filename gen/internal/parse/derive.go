package parse

import (
	"debug/dwarf"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// A probed target's declarations are a copy of the first Unit's, every
// number of which is replaced by what the target's compiler said
// (probe.go): DWARF for sizes, offsets, bit positions, lengths and
// signedness, the probe's data for alignments. Walking the two together
// also compares them: another member, another kind of type, another
// constant value is a difference.

// deriveUnit is first with goarch's layout from what its probe says, or
// the first difference found.
func deriveUnit(first *Unit, goarch string, plan *probePlan, res *probeResult, headersRead []string, markerPos map[string]Pos) (*Unit, *difference) {
	// The same -I headers, the same groups of them.
	if d := sameHeaders(first.Headers, headersRead); d != nil {
		return nil, d
	}
	taken := map[string]bool{}
	for i, m := range plan.markers {
		if res.conds[i] {
			taken[m] = true
		}
	}
	for _, c := range first.Conds {
		if strings.HasPrefix(c, untracedPrefix) {
			return nil, &difference{Msg: fmt.Sprintf("%s has #line directives, so the groups its preprocessor takes cannot be compared", strings.TrimPrefix(c, untracedPrefix))}
		}
		if !taken[c] {
			return nil, &difference{Pos: markerPos[c], Msg: fmt.Sprintf("this conditional group is taken on linux/%s, not on linux/%s", first.GoArch, goarch)}
		}
		delete(taken, c)
	}
	for _, m := range plan.markers {
		if taken[m] {
			return nil, &difference{Pos: markerPos[m], Msg: fmt.Sprintf("this conditional group is taken on linux/%s, not on linux/%s", goarch, first.GoArch)}
		}
	}
	u := copyUnit(first)
	u.GoArch = goarch
	v := &layoutReader{res: res, plan: plan}
	for k, r := range u.Records {
		v.topRecord(r, res.types[fmt.Sprintf("%sr%d", probeVar, k)])
	}
	for k, f := range u.Funcs {
		if ft, ok := res.types[fmt.Sprintf("%sf%d", probeVar, k)].(*dwarf.FuncType); ok {
			v.sig(f.Sig, ft, f.Pos, "function "+f.Name)
		} else {
			v.differ(f.Pos, "function %s is not a function here", f.Name)
		}
	}
	values := res.values
	for i, m := range u.Macros {
		// The same bits are the same constant; its signedness shows only
		// in a value with the top bit set (the front end's typing of
		// enumerators is not C's, so it is compared only there).
		if values[i] != m.Value.Bits || values[i]>>63 != 0 && res.signed[i] != m.Value.Signed {
			v.differ(m.Pos, "constant %s is %s here", m.Name, valueString(values[i], res.signed[i]))
		}
	}
	values = values[len(u.Macros):]
	for k, e := range u.Enums {
		if e.Tag != "" {
			et, ok := res.types[fmt.Sprintf("%se%d", probeVar, k)].(*dwarf.EnumType)
			if !ok || et.ByteSize != e.Size {
				v.differ(e.Pos, "enum %s is not %d bytes here", e.Tag, e.Size)
			}
		}
		for _, en := range e.Enumerators {
			if values[0] != en.Value.Bits {
				v.differ(en.Pos, "enumerator %s is %d here", en.Name, int64(values[0]))
			}
			values = values[1:]
		}
	}
	var cgo []string
	for i, n := range plan.cgo {
		if res.cgo[i] {
			cgo = append(cgo, n)
		}
	}
	sort.Strings(cgo)
	if strings.Join(cgo, " ") != strings.Join(first.CgoMacros, " ") {
		v.differ(Pos{}, "the macros named as cgo's wrapper variables are %v, not %v", cgo, first.CgoMacros)
	}
	if v.diff != nil {
		return nil, v.diff
	}
	return u, nil
}

func valueString(bits uint64, signed bool) string {
	if signed {
		return strconv.FormatInt(int64(bits), 10)
	}
	return strconv.FormatUint(bits, 10)
}

// sameHeaders compares the -I headers two translations read.
func sameHeaders(first, read []string) *difference {
	a, b := map[string]bool{}, map[string]bool{}
	for _, p := range first {
		a[p] = true
	}
	for _, p := range read {
		b[p] = true
	}
	for _, p := range read {
		if !a[p] {
			return &difference{Msg: fmt.Sprintf("it reads %s, which the translated target does not", p)}
		}
	}
	for _, p := range first {
		if !b[p] {
			return &difference{Msg: fmt.Sprintf("it does not read %s, which the translated target does", p)}
		}
	}
	return nil
}

// copyUnit copies u deeply: the probed target's numbers go into the copy.
func copyUnit(u *Unit) *Unit {
	c := *u
	c.Inputs = slices.Clone(u.Inputs)
	c.Records = copyRecords(u.Records)
	c.Opaque = copyRecords(u.Opaque)
	c.Enums = copyEach(u.Enums, func(e *Enum) *Enum {
		ce := *e
		ce.Enumerators = copyEach(e.Enumerators, func(en *Enumerator) *Enumerator { c := *en; return &c })
		return &ce
	})
	c.Macros = copyEach(u.Macros, func(m *Macro) *Macro { c := *m; return &c })
	c.Funcs = copyEach(u.Funcs, func(f *Func) *Func {
		cf := *f
		cf.Sig = copySig(f.Sig)
		return &cf
	})
	c.Notes = slices.Clone(u.Notes)
	c.Read, c.CgoMacros = slices.Clone(u.Read), slices.Clone(u.CgoMacros)
	c.Headers, c.Conds = slices.Clone(u.Headers), slices.Clone(u.Conds)
	c.probeDeps = nil
	return &c
}

// copyEach copies s with f (nil stays nil, as the cache's decoding has it).
func copyEach[T any](s []T, f func(T) T) []T {
	if s == nil {
		return nil
	}
	c := make([]T, len(s))
	for i, x := range s {
		c[i] = f(x)
	}
	return c
}

func copyRecords(rs []*Record) []*Record { return copyEach(rs, copyRecord) }

func copyRecord(r *Record) *Record {
	if r == nil {
		return nil
	}
	c := *r
	c.Members = copyEach(r.Members, func(m *Member) *Member {
		cm := *m
		cm.Type = copyType(m.Type)
		return &cm
	})
	return &c
}

func copyType(t *Type) *Type {
	if t == nil {
		return nil
	}
	c := *t
	c.Elem = copyType(t.Elem)
	c.Record = copyRecord(t.Record)
	c.Sig = copySig(t.Sig)
	return &c
}

func copySig(s *Signature) *Signature {
	if s == nil {
		return nil
	}
	c := *s
	c.Result = copyType(s.Result)
	c.Params = copyEach(s.Params, func(p Param) Param { return Param{Name: p.Name, Type: copyType(p.Type)} })
	return &c
}

// layoutReader fills a copy of the first Unit's declarations with the
// target's numbers, and records the first difference.
type layoutReader struct {
	res  *probeResult
	plan *probePlan
	diff *difference
}

func (v *layoutReader) differ(pos Pos, format string, args ...any) {
	if v.diff == nil {
		v.diff = &difference{Pos: pos, Msg: fmt.Sprintf(format, args...)}
	}
}

// spelled returns the size and alignment of spelling s on the target.
func (v *layoutReader) spelled(s string) (size, align int64, ok bool) {
	i, ok := v.plan.spellAt[s]
	if !ok {
		return 0, 0, false
	}
	return v.res.size[i], v.res.align[i], true
}

func (v *layoutReader) topRecord(r *Record, t dwarf.Type) {
	st, ok := t.(*dwarf.StructType)
	if !ok || st.Kind != string(r.Kind) || st.StructName != r.Tag || st.Incomplete {
		v.differ(r.Pos, "%s is not defined here", r.CName())
		return
	}
	size, align, ok := v.spelled(r.CName())
	if !ok || size != st.ByteSize {
		v.differ(r.Pos, "%s: sizeof says %d bytes, its debugging information %d", r.CName(), size, st.ByteSize)
		return
	}
	v.members(r, st)
	r.Size, r.Align = st.ByteSize, int(align)
}

// nested fills an unnamed record. C cannot name it, so its alignment is
// its members' rule's, which the declarations fix: the first Unit's,
// unless a member's alignment changed.
func (v *layoutReader) nested(r *Record, st *dwarf.StructType) {
	if st.Kind != string(r.Kind) || st.StructName != "" || st.Incomplete {
		v.differ(r.Pos, "an unnamed %s is not one here", r.Kind)
		return
	}
	old := make([]int, len(r.Members))
	for i, m := range r.Members {
		old[i] = m.Type.Align
	}
	v.members(r, st)
	for i, m := range r.Members {
		if m.Type.Align != old[i] {
			v.differ(m.Pos, "member %s of an unnamed %s is aligned to %d here, not %d: the record's alignment cannot be asked", m.Name, r.Kind, m.Type.Align, old[i])
		}
	}
	r.Size = st.ByteSize
}

func (v *layoutReader) members(r *Record, st *dwarf.StructType) {
	var fields []*dwarf.StructField
	for _, f := range st.Field {
		if f.Name == "" && f.BitSize > 0 {
			continue // unnamed bit-fields only pad (parse skips them too)
		}
		fields = append(fields, f)
	}
	if len(fields) != len(r.Members) {
		v.differ(r.Pos, "%s has %d members here, not %d", recordName(r), len(fields), len(r.Members))
		return
	}
	for i, m := range r.Members {
		f := fields[i]
		if f.Name != m.Name || (f.BitSize > 0) != m.BitField {
			v.differ(m.Pos, "%s: member %d is %q here, not %q", recordName(r), i, f.Name, m.Name)
			return
		}
		if m.BitField {
			bit := f.DataBitOffset
			if f.ByteSize > 0 { // DWARF 2–4: from the storage unit's most significant bit
				bit = f.ByteOffset*8 + f.ByteSize*8 - f.BitOffset - f.BitSize
			}
			if int(f.BitSize) != m.BitSize {
				v.differ(m.Pos, "bit-field %s is %d bits here, not %d", m.Name, f.BitSize, m.BitSize)
			}
			m.BitOffset, m.Offset = bit, bit/8
		} else {
			m.Offset = f.ByteOffset
		}
		v.typ(m.Type, f.Type, m.Pos, recordName(r)+"."+m.Name)
	}
}

func recordName(r *Record) string {
	if r.Tag == "" {
		return "an unnamed " + string(r.Kind)
	}
	return r.CName()
}

// strip removes qualifiers and typedefs.
func strip(t dwarf.Type) dwarf.Type {
	for {
		switch q := t.(type) {
		case *dwarf.QualType:
			t = q.Type
		case *dwarf.TypedefType:
			t = q.Type
		default:
			return t
		}
	}
}

// typ fills t, the first Unit's type of what is at pos (named what),
// from dt, the target's.
func (v *layoutReader) typ(t *Type, dt dwarf.Type, pos Pos, what string) {
	if v.diff != nil {
		return
	}
	oldSize, oldAlign := t.Size, t.Align
	elemAlign := 0
	if t.Elem != nil {
		elemAlign = t.Elem.Align
	}
	u := strip(dt)
	bad := func() { v.differ(pos, "%s: its type is %s here", what, typeString(dt)) }
	switch t.Kind {
	case Void:
		if _, ok := u.(*dwarf.VoidType); !ok && u != nil {
			bad()
		}
		return
	case Int:
		switch u := u.(type) {
		case *dwarf.IntType, *dwarf.CharType:
			t.Signed = true
		case *dwarf.UintType, *dwarf.UcharType:
			t.Signed = false
		case *dwarf.EnumType:
			// The underlying type follows the values, which the
			// declarations fix: the first Unit's, unless the size moved.
			if u.ByteSize != t.Size {
				bad()
			}
		default:
			bad()
			return
		}
		t.Size = u.Size()
	case Bool:
		if _, ok := u.(*dwarf.BoolType); !ok {
			bad()
			return
		}
		t.Size = u.Size()
	case Float:
		if _, ok := u.(*dwarf.FloatType); !ok {
			bad()
			return
		}
		t.Size = u.Size()
	case Pointer:
		p, ok := u.(*dwarf.PtrType)
		if !ok {
			bad()
			return
		}
		t.Size = p.ByteSize
		v.typ(t.Elem, p.Type, pos, what+" (its target)")
	case Array:
		a, ok := u.(*dwarf.ArrayType)
		if !ok {
			bad()
			return
		}
		v.typ(t.Elem, a.Type, pos, what+" (its element)")
		if a.Count <= 0 {
			if t.Len != 0 {
				bad()
			}
			break // flexible or empty: the first's size (no element's)
		}
		t.Len = a.Count
		t.Size = t.Len * t.Elem.Size
	case RecordRef:
		st, ok := u.(*dwarf.StructType)
		if !ok || st.Kind != string(t.RecordKind) || st.StructName != t.Tag {
			bad()
			return
		}
		if t.Size <= 0 {
			// Incomplete where it is named (a pointer to the record
			// being defined): the front end says so on every target.
			return
		}
		if st.Incomplete {
			bad()
			return
		}
		t.Size = st.ByteSize
	case Nested:
		st, ok := u.(*dwarf.StructType)
		if !ok {
			bad()
			return
		}
		v.nested(t.Record, st)
		t.Size, t.Align = t.Record.Size, t.Record.Align
		return
	case EnumRef:
		et, ok := u.(*dwarf.EnumType)
		if !ok || et.EnumName != t.Tag {
			bad()
			return
		}
		t.Size = et.ByteSize
	case Function:
		ft, ok := u.(*dwarf.FuncType)
		if !ok {
			bad()
			return
		}
		v.sig(t.Sig, ft, pos, what)
		return
	case Opaque:
		if dt == nil || dt.Size() <= 0 && t.Size > 0 {
			bad()
			return
		}
		if dt.Size() > 0 {
			t.Size = dt.Size()
		}
	}
	// The alignment: asked by spelling; a pointer's is void *'s (or a
	// function pointer's); an array's is its element's, as C has it.
	switch {
	case t.Spell != "" && t.Size > 0:
		size, align, ok := v.spelled(t.Spell)
		if !ok || size != t.Size {
			v.differ(pos, "%s: sizeof(%s) says %d bytes, its debugging information %d", what, t.Spell, size, t.Size)
			return
		}
		t.Align = int(align)
	case t.Kind == Pointer:
		s := dataPointer
		if t.Elem != nil && t.Elem.Kind == Function {
			s = funcPointer
		}
		_, align, _ := v.spelled(s)
		t.Align = int(align)
	case t.Kind == Array && t.Elem != nil:
		if oldAlign != elemAlign {
			v.differ(pos, "%s: an array aligned unlike its element cannot be asked", what)
			return
		}
		t.Align = t.Elem.Align
	case t.Size != oldSize:
		v.differ(pos, "%s: its type is %d bytes here, not %d, and C cannot name it to ask its alignment", what, t.Size, oldSize)
	}
}

// sig fills a signature from a function type.
func (v *layoutReader) sig(s *Signature, ft *dwarf.FuncType, pos Pos, what string) {
	params := ft.ParamType
	variadic := false
	if n := len(params); n > 0 {
		if _, ok := params[n-1].(*dwarf.DotDotDotType); ok {
			params, variadic = params[:n-1], true
		}
	}
	if variadic != s.Variadic || len(params) != len(s.Params) {
		v.differ(pos, "%s has %d parameters here (variadic: %v), not %d (%v)", what, len(params), variadic, len(s.Params), s.Variadic)
		return
	}
	v.typ(s.Result, ft.ReturnType, pos, what+" (its result)")
	for i := range s.Params {
		v.typ(s.Params[i].Type, params[i], pos, fmt.Sprintf("%s (parameter %d)", what, i+1))
	}
}

func typeString(t dwarf.Type) string {
	if t == nil {
		return "void"
	}
	return t.String()
}
