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
				return &GoType{Kind: Named, Name: rec.GoName, Size: p.Size, Align: p.GoAlign, Composite: true}, nil
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
		return &GoType{Kind: Named, Name: rec.GoName, Size: p.Size, Align: p.GoAlign, Composite: true}, nil
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
