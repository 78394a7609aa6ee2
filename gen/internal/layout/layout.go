// Package layout plans, for one target, the Go struct that reproduces a C
// record byte for byte: which members become Go fields, where explicit
// padding goes, which members need accessor methods (union members,
// members of anonymous unions, bit-fields, packed or misaligned members,
// flexible arrays), and the C-path → Go-path facts of the ABI manifest.
//
// The rule that keeps Go and C equal: a member becomes a Go field only when
// its offset is a multiple of its Go alignment and that alignment does not
// exceed the record's C alignment; everything else lives in blank storage
// reached through accessors at fixed offsets.
package layout

import (
	"fmt"

	"github.com/verbsexp/verbsexp/gen/internal/model"
	"github.com/verbsexp/verbsexp/gen/internal/parse"
)

// TypeKind classifies Go type expressions.
type TypeKind int

const (
	Basic         TypeKind = iota // Name is a predeclared type: uint32, bool, …
	Named                         // Name is a type of the generated package
	UnsafePointer                 // unsafe.Pointer
	Ptr                           // *Elem
	Arr                           // [Len]Elem
)

// GoType is a Go type expression with its size and alignment on the target.
type GoType struct {
	Kind  TypeKind
	Name  string
	Elem  *GoType
	Len   int64
	Size  int64
	Align int64
	// Composite marks named struct types and sized storage: reached through
	// a pointer, not copied by getters.
	Composite bool
	// SizeSteps and AlignSteps are what Go's type checker does to compute
	// the type's size and alignment (see typeCheckSteps).
	SizeSteps, AlignSteps int64
}

// String spells the type as Go source does: uint32, *ExpSendWR, [4]uint64.
func (t *GoType) String() string {
	switch t.Kind {
	case UnsafePointer:
		return "unsafe.Pointer"
	case Ptr:
		return "*" + t.Elem.String()
	case Arr:
		return fmt.Sprintf("[%d]%s", t.Len, t.Elem.String())
	}
	return t.Name
}

// Scalar reports whether values of the type are read and written whole
// (getter/setter) rather than reached through a pointer.
func (t *GoType) Scalar() bool { return t.Kind != Arr && !t.Composite }

// Slot is one field of the Go struct. Name "_" is padding or storage.
type Slot struct {
	Name   string
	Offset int64
	Type   *GoType
	CPath  string // the member it holds, "" for padding and storage
}

// AccessorKind tells how an accessor reaches its member.
type AccessorKind int

const (
	Value   AccessorKind = iota // getter X() T and setter SetX(T)
	Pointer                     // X() *T
	Bits                        // bit-field getter and setter
	Slice                       // flexible array: X(n int) []T
)

// Accessor is a method on the Go type that reaches a member at a fixed
// offset from the start of the value.
type Accessor struct {
	Name    string // getter; the setter is "Set"+Name
	CPath   string
	Kind    AccessorKind
	Offset  int64
	Type    *GoType
	Aligned bool // Offset is a multiple of Type.Align: a typed pointer is safe
	// Bits only: position from the start of the value, width, signedness.
	BitOffset int64
	BitSize   int
	Signed    bool
}

// Field is one manifest entry: a member reachable with C member syntax.
type Field struct {
	C         string // "item.send_wr"
	Go        string // "Item.SendWR()"
	Offset    int64
	Size      int64
	BitOffset int64 // bit-fields: from the start of the record
	BitSize   int
	Type      string // the Go type of the field or accessor
}

// Plan is the Go representation of one record on one target.
type Plan struct {
	Record    *model.Record
	Def       *parse.Record
	Size      int64
	Align     int64 // C alignment
	GoAlign   int64 // alignment the Go struct gets (≤ 8)
	Slots     []Slot
	Accessors []Accessor
	Fields    []Field // manifest facts, offsets from the start of the record
	// Selectors maps each reachable C member name to its Go selector on
	// this type: "Name" for a field, "Name()" for an accessor; Types to the
	// Go type that selector yields (the element type for a flexible array).
	Selectors map[string]string
	Types     map[string]*GoType
	// SizeSteps and AlignSteps: see GoType; for the Go struct of Slots.
	SizeSteps, AlignSteps int64
}

// Planner plans every record of a package for one target.
type Planner struct {
	pkg   *model.Package
	arch  int // index into pkg.Arches
	plans map[*model.Record]*Plan
	busy  map[*model.Record]bool
}

// NewPlanner returns a planner for pkg.Arches[arch].
func NewPlanner(pkg *model.Package, arch int) *Planner {
	return &Planner{pkg: pkg, arch: arch, plans: map[*model.Record]*Plan{}, busy: map[*model.Record]bool{}}
}

// Plan returns the plan of rec, or nil when rec is not declared on this
// target.
func (pl *Planner) Plan(rec *model.Record) (*Plan, error) {
	if p, ok := pl.plans[rec]; ok {
		return p, nil
	}
	def := rec.ByArch[pl.arch]
	if def == nil {
		return nil, nil
	}
	if pl.busy[rec] {
		return nil, fmt.Errorf("%s: %s contains itself by value", def.Pos, rec.C)
	}
	pl.busy[rec] = true
	defer delete(pl.busy, rec)
	p := &Plan{Record: rec, Def: def, Size: def.Size, Align: int64(def.Align)}
	b := &planBuilder{pl: pl, p: p, rec: rec}
	if err := b.build(); err != nil {
		return nil, err
	}
	pl.plans[rec] = p
	return p, nil
}

// SameGo reports whether two plans (of one record on two targets) give
// the same Go declaration: same size, alignment, fields and accessors.
func (p *Plan) SameGo(q *Plan) bool {
	if p.Size != q.Size || p.Align != q.Align || p.GoAlign != q.GoAlign ||
		len(p.Slots) != len(q.Slots) || len(p.Accessors) != len(q.Accessors) {
		return false
	}
	for i, s := range p.Slots {
		t := q.Slots[i]
		if s.Name != t.Name || s.Offset != t.Offset || s.Type.String() != t.Type.String() {
			return false
		}
	}
	for i, a := range p.Accessors {
		b := q.Accessors[i]
		if a.Name != b.Name || a.Kind != b.Kind || a.Offset != b.Offset || a.Aligned != b.Aligned ||
			a.BitOffset != b.BitOffset || a.BitSize != b.BitSize || a.Signed != b.Signed || a.Type.String() != b.Type.String() {
			return false
		}
	}
	return true
}

// GoAlignLimit is the largest alignment a Go struct can have on the 64-bit
// targets (that of uint64 and pointers).
const GoAlignLimit = 8
