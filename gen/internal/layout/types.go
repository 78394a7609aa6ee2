package layout

import (
	"fmt"

	"github.com/verbsexp/verbsexp/gen/internal/model"
	"github.com/verbsexp/verbsexp/gen/internal/parse"
)

// storageType is [size/k]uintK (or [size]byte): blank storage with
// alignment k.
func storageType(size, k int64) *GoType {
	elem := map[int64]string{1: "byte", 2: "uint16", 4: "uint32", 8: "uint64"}[k]
	return &GoType{Kind: Arr, Len: size / k, Elem: &GoType{Kind: Basic, Name: elem, Size: k, Align: k}, Size: size, Align: k, Composite: true}
}

func basic(name string, size int64) *GoType {
	return &GoType{Kind: Basic, Name: name, Size: size, Align: size}
}

// IntName is the Go integer type of a C integer of the given size.
func IntName(size int64, signed bool) string {
	n := map[int64]string{1: "int8", 2: "int16", 4: "int32", 8: "int64"}[size]
	if n == "" {
		return ""
	}
	if !signed {
		n = "u" + n
	}
	return n
}

// goType maps member m's C type to Go.
func (b *planBuilder) goType(m *parse.Member) (*GoType, error) { return b.goTypeOf(m.Type, m) }

func (b *planBuilder) goTypeOf(t *parse.Type, m *parse.Member) (*GoType, error) {
	if s, ok := b.pl.scalar(t); ok {
		return s, nil
	}
	switch t.Kind {
	case parse.Pointer:
		return b.pl.pointerTo(t.Elem, t.Size), nil
	case parse.Array:
		elem, err := b.goTypeOf(t.Elem, m)
		if err != nil {
			return nil, err
		}
		return &GoType{Kind: Arr, Len: t.Len, Elem: elem, Size: elem.Size * t.Len, Align: elem.Align}, nil
	case parse.RecordRef:
		rec := b.pl.pkg.RecordByC(string(t.RecordKind) + " " + t.Tag)
		if rec != nil && rec.ByArch != nil {
			p, err := b.pl.Plan(rec)
			if err != nil {
				return nil, err
			}
			if p != nil {
				return &GoType{Kind: Named, Name: rec.GoName, Size: p.Size, Align: p.GoAlign, Composite: true, SizeSteps: p.SizeSteps, AlignSteps: p.AlignSteps}, nil
			}
		}
	case parse.Nested:
		rec := b.pl.pkg.RecordByC(b.rec.C + "." + m.Name)
		if rec == nil {
			return nil, fmt.Errorf("%s: %s.%s: nested record has no model entry (internal error)", m.Pos, b.rec.C, m.Name)
		}
		p, err := b.pl.Plan(rec)
		if err != nil {
			return nil, err
		}
		return &GoType{Kind: Named, Name: rec.GoName, Size: p.Size, Align: p.GoAlign, Composite: true, SizeSteps: p.SizeSteps, AlignSteps: p.AlignSteps}, nil
	}
	if t.Size < 0 || (t.Kind == parse.RecordRef && t.Size <= 0) {
		return nil, fmt.Errorf("%s: %s: member %s has incomplete type %s (declared, never defined); define it in the headers or include the header that does", m.Pos, b.rec.C, m.Name, describe(t))
	}
	if t.Size > 0 {
		// System records (pthread_mutex_t), long double, …: sized storage.
		k := min(int64(t.Align), GoAlignLimit)
		for k > 1 && t.Size%k != 0 {
			k /= 2
		}
		return storageType(t.Size, max(k, 1)), nil
	}
	return nil, fmt.Errorf("%s: %s: member %s has a type the generator cannot represent (%s); please report it", m.Pos, b.rec.C, m.Name, describe(t))
}

// pointerTo maps a pointer (of size bytes) by its target: generated types
// stay typed, the rest becomes unsafe.Pointer, function pointers the one
// opaque FuncPtr.
func (pl *Planner) pointerTo(t *parse.Type, size int64) *GoType {
	ptr := func(elem *GoType) *GoType { return &GoType{Kind: Ptr, Elem: elem, Size: size, Align: size} }
	if s, ok := pl.scalar(t); ok {
		return ptr(s)
	}
	switch t.Kind {
	case parse.Function:
		return &GoType{Kind: Named, Name: model.FuncPtrName, Size: size, Align: size}
	case parse.RecordRef:
		if rec := pl.pkg.RecordByC(string(t.RecordKind) + " " + t.Tag); rec != nil {
			return ptr(&GoType{Kind: Named, Name: rec.GoName})
		}
	case parse.Pointer:
		return ptr(pl.pointerTo(t.Elem, size))
	}
	return &GoType{Kind: UnsafePointer, Size: size, Align: size}
}

// ParamType maps the type of a function parameter or result for a call
// wrapper: scalars, enums and pointers only. ok is false for what a
// wrapper cannot pass (records by value, function pointers, void).
func (pl *Planner) ParamType(t *parse.Type) (g *GoType, ok bool) {
	if s, ok := pl.scalar(t); ok {
		return s, true
	}
	if t.Kind == parse.Pointer && t.Elem.Kind != parse.Function {
		return pl.pointerTo(t.Elem, t.Size), true
	}
	return nil, false
}

// scalar maps the C scalars that have a Go type of their own: integers
// (plain char as byte), _Bool, float, double, and enums (named when the
// enum is generated). ok is false for everything else.
func (pl *Planner) scalar(t *parse.Type) (*GoType, bool) {
	switch t.Kind {
	case parse.Int:
		if t.Name == "char" {
			return basic("byte", 1), true
		}
		if n := IntName(t.Size, t.Signed); n != "" {
			return basic(n, t.Size), true
		}
	case parse.Bool:
		return basic("bool", t.Size), true
	case parse.Float:
		switch t.Size {
		case 4:
			return basic("float32", 4), true
		case 8:
			return basic("float64", 8), true
		}
	case parse.EnumRef:
		if e := pl.pkg.EnumByTag(t.Tag); e != nil {
			return &GoType{Kind: Named, Name: e.GoName, Size: t.Size, Align: t.Size}, true
		}
		if n := IntName(t.Size, t.Signed); n != "" {
			return basic(n, t.Size), true
		}
	}
	return nil, false
}

func describe(t *parse.Type) string {
	if t.Name != "" {
		return t.Name
	}
	if t.Tag != "" {
		if t.RecordKind == "" {
			return "enum " + t.Tag // an enum declared, never defined
		}
		return string(t.RecordKind) + " " + t.Tag
	}
	return fmt.Sprintf("kind %d, %d bytes", t.Kind, t.Size)
}

// Go's type checker (go/types and the compiler's types2: StdSizes and
// gcSizes) computes a struct's size without memoizing anything: Sizeof
// calls Offsetsof, which takes the Alignof and Sizeof of every field, and
// then Sizeof of the last field once more. A chain of nested structs
// whose last field is the next one costs 2^depth per unsafe.Sizeof guard
// (24 levels: 42 s to build, vet past 10 minutes), and named records
// holding two of the previous one by value 3^depth. The steps are
// counted here the same way, and a member whose type would cost more than
// maxFieldSteps is stored as bytes and reached through a pointer accessor
// (as a misaligned member is), which cuts the chain: every generated type
// then costs the type checker at most about maxFieldSteps times its
// number of fields. The real headers' costliest field takes 164 steps
// (MLNX_OFED 4.9), their costliest type 553.
const maxFieldSteps = 1 << 12

// typeCheckSteps returns SizeSteps and AlignSteps of t (Named types carry
// their plan's).
func typeCheckSteps(t *GoType) (size, align int64) {
	switch t.Kind {
	case Named:
		if t.Composite {
			return max(t.SizeSteps, 1), max(t.AlignSteps, 1)
		}
	case Arr:
		es, ea := typeCheckSteps(t.Elem)
		if t.Len == 0 {
			return 1, satAdd(1, ea)
		}
		return satAdd(1, satAdd(es, ea)), satAdd(1, ea)
	}
	return 1, 1
}

// structSteps counts the steps for a struct of the given fields.
func structSteps(fields []*GoType) (size, align int64) {
	size, align = 1, 1
	for _, f := range fields {
		s, a := typeCheckSteps(f)
		align = satAdd(align, a)
		size = satAdd(size, satAdd(s, a))
	}
	if n := len(fields); n > 0 {
		s, _ := typeCheckSteps(fields[n-1])
		size = satAdd(size, s)
	}
	return size, align
}

// tooCostly reports whether a field of type t costs the type checker
// more than maxFieldSteps.
func tooCostly(t *GoType) bool {
	s, a := typeCheckSteps(t)
	return satAdd(s, a) > maxFieldSteps
}

// satAdd adds without overflowing (the counts only need to compare).
func satAdd(a, b int64) int64 {
	const limit = 1 << 60
	if a > limit-b {
		return limit
	}
	return a + b
}
