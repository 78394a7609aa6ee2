// Package parse reads C headers with modernc.org/cc/v4 for one target and
// returns the declarations in scope as plain data: records with the
// target's layout, enums, integer macros and functions; every other
// target gets the same declarations laid out by its own compiler
// (probe.go). It checks the inputs first, once (CheckInputs). It knows
// nothing of Go; naming and representation are decided later (model,
// layout).
package parse

import (
	"fmt"

	"github.com/verbsexp/verbsexp/internal/cint"
)

// Pos is a source position. File is relative to the include directory it
// was found in (e.g. infiniband/verbs_exp.h), so positions do not depend on
// where the headers are installed.
type Pos struct {
	File      string
	Line, Col int
}

func (p Pos) String() string { return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col) }

// Unit is what one target's translation of the headers declares in scope.
type Unit struct {
	GoArch  string
	Inputs  []Input   // headers in scope, in the order first read
	Records []*Record // named records with a definition, in declaration order
	Opaque  []*Record // named records declared but never defined (pointers only)
	Enums   []*Enum   // in declaration order, anonymous ones included
	Macros  []*Macro  // object-like macros with an integer value, by position
	Funcs   []*Func   // in declaration order
	Notes   []Diag    // what was skipped and why
	// Read lists every header read in the -I directories (in scope or
	// not), relative to its directory, sorted: what -scope can select.
	Read []string
	// CgoMacros are the object-like macros, anywhere in the headers, named
	// as a variable of the C wrappers cgo writes after the preamble (r, v,
	// p0, p1, …), sorted: the preamble #undefs them, or cgo's C would not
	// compile.
	CgoMacros []string
	// Headers are the headers read in the -I directories (absolute, as
	// opened, sorted), and Conds the conditional groups of theirs that
	// the preprocessor took (cond.go, sorted): a target whose compiler
	// takes the same groups of the same headers declares the same, and
	// only its layout is asked of it (probe.go).
	Headers []string
	Conds   []string

	stats     inputStats   // what reading the headers took (source.go)
	probeDeps []dependency // a probed unit's files beyond the -I headers, until stored (units.go)
}

// Input is a header in scope.
type Input struct {
	Path string // relative to its include directory
	Abs  string
}

// Diag is a positioned message about something not fully supported.
type Diag struct {
	Pos Pos
	Msg string
}

func (d Diag) String() string {
	if d.Pos.File == "" {
		return d.Msg // about no one place
	}
	return d.Pos.String() + ": " + d.Msg
}

// RecordKind tells structs from unions.
type RecordKind string

const (
	Struct RecordKind = "struct"
	Union  RecordKind = "union"
)

// Record is a struct or union definition with the target's layout.
type Record struct {
	Kind    RecordKind
	Tag     string // empty for an unnamed record
	Pos     Pos
	Size    int64
	Align   int
	Members []*Member
	// Unsupported says which GCC attribute of the record's own (or of an
	// unnamed bit-field's) the C front end does not apply as gcc does, at
	// UnsupportedPos; layout refuses the record (attrs.go).
	Unsupported         string
	UnsupportedPos      Pos
	UnsupportedBitField bool // an unnamed bit-field's, not the record's own
}

// CName is the C spelling, e.g. "struct ibv_exp_task".
func (r *Record) CName() string { return string(r.Kind) + " " + r.Tag }

// Member is one member of a record. Offsets are relative to the record
// that directly contains the member.
type Member struct {
	Name      string // empty for an anonymous struct or union member
	Pos       Pos
	Offset    int64 // bytes; for a bit-field, the first byte holding its bits
	Type      *Type
	BitField  bool
	BitOffset int64 // bit-fields: bits from the start of the containing record
	BitSize   int
	Flexible  bool // flexible or zero-length trailing array
}

// TypeKind classifies C types the way the Go side needs them.
type TypeKind int

const (
	Void TypeKind = iota
	Int
	Float
	Bool
	Pointer
	Array
	RecordRef // a named record, in scope or not
	Nested    // an unnamed record defined in place
	EnumRef
	Function // a function (only behind a pointer)
	Opaque   // anything else: sized storage (system types, long double, …)
)

// Type is a C type reduced to what layout and naming need.
type Type struct {
	Kind   TypeKind
	Size   int64
	Align  int
	Signed bool    // Int
	Const  bool    // qualified const (a wrapper reads const char * results as strings)
	Elem   *Type   // Pointer, Array
	Len    int64   // Array
	Record *Record // Nested: its definition
	// RecordRef and EnumRef: the tag and kind; InScope when declared in the
	// headers in scope.
	RecordKind RecordKind
	Tag        string
	InScope    bool
	// Name is the C spelling for Opaque and the typedef name for others
	// where the header used one (informative only).
	Name string
	// Spell is how C names the type at file scope after the headers
	// (a typedef name, "struct tag", "unsigned long"), "" where it
	// cannot (unnamed records, pointers, arrays, functions): what a
	// target's probe asks its compiler the alignment of (probe.go).
	Spell string
	Sig   *Signature // Function
	// Unsupported says which GCC attribute of the member's or its type's
	// (vector_size, mode, …) the C front end does not apply as gcc does,
	// and what gcc does: the layout cannot be trusted, and the generator
	// refuses the member (attrs.go).
	Unsupported string
}

// Signature is a function's C signature.
type Signature struct {
	Result   *Type
	Params   []Param
	Variadic bool
}

// Param is one parameter; Name may be empty.
type Param struct {
	Name string
	Type *Type
}

// Enum is an enum definition; Tag is empty for an anonymous enum.
type Enum struct {
	Tag         string
	Pos         Pos
	Size        int64
	Signed      bool
	Enumerators []*Enumerator
}

// Enumerator is one enumeration constant.
type Enumerator struct {
	Name  string
	Pos   Pos
	Value cint.Value
}

// Macro is an object-like #define whose replacement evaluates to an integer.
type Macro struct {
	Name  string
	Pos   Pos
	Value cint.Value
}

// Func is a function declared in scope.
type Func struct {
	Name   string
	Pos    Pos
	Inline bool // static inline, defined in the header
	Sig    *Signature
}
