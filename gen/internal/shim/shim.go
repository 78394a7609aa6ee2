// Package shim plans the Go call wrapper of every function in scope: how
// its result becomes a Go error (the convention), which pointer arguments
// are required, how each parameter crosses into C, and which functions
// cannot be wrapped (and why). Static inline functions are called through
// a C wrapper compiled against the headers; exported ones through a
// function pointer resolved from libibverbs at first use.
package shim

import (
	"fmt"
	"go/token"
	"go/types"
	"strings"
	"unicode"

	"github.com/verbsexp/verbsexp/gen/internal/layout"
	"github.com/verbsexp/verbsexp/gen/internal/model"
	"github.com/verbsexp/verbsexp/gen/internal/parse"
	"github.com/verbsexp/verbsexp/internal/verbsabi"
)

// Convention is how a C function reports failure.
type Convention string

const (
	// Status: an int; 0 is success, a positive value is an errno (the
	// verbs' usual "return the errno"), -1 means "see errno", other
	// negative values are -errno.
	Status Convention = "status"
	// Count: an int count on success (poll_cq), negative as for Status.
	Count Convention = "count"
	// Pointer: a pointer on success, NULL with errno set on failure.
	Pointer Convention = "pointer"
	// Value: a result that does not signal failure (name lookups, *_str).
	Value Convention = "value"
	// Void: no result.
	Void Convention = "void"
	// Skip: not wrapped.
	Skip Convention = "skip"
)

// Overrides fixes the convention of functions that inference gets wrong.
// Inference: void → Void; pointer → Pointer; integer → Status; other
// scalars → Value.
var Overrides = map[string]Convention{
	"ibv_poll_cq":           Count,
	"ibv_exp_poll_cq":       Count,
	"ibv_query_gid_table":   Count, // rdma-core: the number of entries read
	"_ibv_query_gid_table":  Count,
	"ibv_get_device_guid":   Value,
	"ibv_get_device_name":   Value,
	"ibv_wc_status_str":     Value,
	"ibv_node_type_str":     Value,
	"ibv_port_state_str":    Value,
	"ibv_event_type_str":    Value,
	"ibv_exp_wc_status_str": Value,
	"ibv_rate_to_mult":      Value,
	"mult_to_ibv_rate":      Value,
	"ibv_rate_to_mbps":      Value,
	"mbps_to_ibv_rate":      Value,
	"verbs_get_ctx":         Value,
	"verbs_get_exp_ctx":     Value,
}

// skipPrefixes are helpers of a header set's own, not part of the verbs
// API (the project's restated headers name theirs verbsexp_…).
var skipPrefixes = []string{"verbsexp_"}

// Nullable lists pointer parameters that C accepts as NULL. Every other
// pointer to a record is required: the wrapper returns EINVAL for nil
// instead of letting C dereference it. Other pointers (void *, char *,
// pointers to pointers or integers) pass through as given.
var Nullable = map[string][]string{
	"ibv_create_cq":     {"channel"},
	"ibv_exp_create_cq": {"channel"},
}

// FailureOut lists the out-parameters a provider writes only when the call
// fails: the failing request of a post. C allows NULL there when the post
// succeeds, but a failure would write through it; so a nil from Go gets a
// slot of the trampoline's own (a C local, no allocation), and a caller who
// does not need to know which request failed passes nil.
var FailureOut = map[string][]string{
	"ibv_post_send":     {"bad_wr"},
	"ibv_post_recv":     {"bad_wr"},
	"ibv_post_srq_recv": {"bad_recv_wr"},
	"ibv_exp_post_send": {"bad_wr"},
	"ibv_exp_post_task": {"bad_task"},
}

// CMemory lists the functions that also get an address form, GoName+"CMem":
// every pointer parameter is a uintptr that must hold the address of C
// memory, which cgo then does not check. It is for runtimes that keep
// their requests in C arenas and post them on a hot path (runtime/task);
// the checks it skips confirm only what the arena guarantees by
// construction. Go pointers a user passes go through the ordinary form.
var CMemory = map[string]bool{
	"ibv_exp_post_task": true,
}

// Crossing is how a trampoline's result comes back to Go: cgo's two-result
// form (r, err := C.f()) is never used, so errno crosses with the result
// in the one value the trampoline returns.
type Crossing string

const (
	// Plain: the C result as it is, or nothing (Value, Void).
	Plain Crossing = "plain"
	// Packed: an int of at most 32 bits in the low half of an int64 and,
	// when it is -1, errno in the high half (Status, Count).
	Packed Crossing = "packed"
	// WithErrno: a struct of the result (a pointer, or a 64-bit int) and
	// errno (Pointer; Status and Count of 64-bit results).
	WithErrno Crossing = "with-errno"
)

// Wrapper is one planned Go function.
type Wrapper struct {
	Func   *model.Func
	Conv   Convention
	Params []Param
	Result *layout.GoType // nil for Status and Void
	// String: the C result is a const char *, returned as a Go string (a
	// copy; NULL is ""). Result is then the Go type string.
	String bool
	// CResult is the C type of the C function's result ("" for void);
	// Crossing how the trampoline returns it.
	CResult  string
	Crossing Crossing
	// Trampoline is the C function the Go wrapper calls.
	Trampoline string
	// CMem is the Go name of the address form ("" for none; see CMemory).
	CMem string
	// Slice is the slice form (nil for none; see slices.go).
	Slice *Slice
}

// CMemTrampoline is the C function the address form calls: named after
// its Go name, as Trampoline after the wrapper's (Go names are unique, so
// these are).
func (w *Wrapper) CMemTrampoline() string { return "verbsexp_" + w.CMem }

// Param is one wrapper parameter.
type Param struct {
	C        string // C name, or argN
	Go       string // Go name
	Type     *layout.GoType
	CType    string // trampoline parameter type
	Required bool   // nil is refused with EINVAL
	Slot     bool   // nil gets a slot of the trampoline's own (FailureOut)
	// Context is the Go name of the record's context member (a struct
	// ibv_context *) when the function is inline: the header's code
	// dispatches through it (cq->context->ops…) before any provider can
	// check anything, so a NULL there is refused with EINVAL instead of
	// crashing. "" for none.
	Context string
}

// Plan is the wrappers of a package and what was skipped.
type Plan struct {
	Wrappers []*Wrapper
	Skipped  []parse.Diag
	// Renamed notes the parameters whose Go name is not their C name's
	// (a keyword, a predeclared identifier, a name the wrapper uses).
	Renamed []parse.Diag
	// Guard is what the library found at run time must prove before the
	// package calls into it (dynlib.Guard); nil when any will do.
	Guard *Guard
	// SliceNotes name each slice form made and each candidate refused
	// (with why); Lists are the List types the slice forms return.
	SliceNotes []parse.Diag
	Lists      []*ListType
}

// Guard identifies the library ABI a package's structs follow: a symbol
// every library of that ABI exports, and the words of the error when a
// library of the same name and another ABI is found instead.
type Guard struct {
	Symbol, ABI, Fix   string
	OtherSymbol, Other string // the library usually found instead
}

// LegacyGuard protects packages of MLNX_OFED's legacy verbs ABI (their
// headers define struct verbs_context_exp) from upstream rdma-core's
// libibverbs.so.1, whose structs differ under the same soname (the
// symbols that tell them apart: internal/verbsabi).
var LegacyGuard = Guard{
	Symbol:      verbsabi.LegacySymbol,
	ABI:         verbsabi.LegacyABI,
	Fix:         verbsabi.LegacyFix,
	OtherSymbol: verbsabi.RDMACoreSymbol,
	Other:       verbsabi.RDMACore,
}

// legacyRecord is defined by the legacy verbs headers only.
const legacyRecord = "struct verbs_context_exp"

// Build plans every function of pkg; pl maps types (any target will do:
// wrapper signatures use pointers and fixed-size integers only).
func Build(pkg *model.Package, pl *layout.Planner) *Plan {
	p := &Plan{}
	if pkg.RecordByC(legacyRecord) != nil {
		p.Guard = &LegacyGuard
	}
	for _, f := range pkg.Funcs {
		w, why := plan(pkg, f, pl)
		if why != "" {
			p.Skipped = append(p.Skipped, parse.Diag{Pos: f.Pos, Msg: fmt.Sprintf("function %s is not wrapped: %s", f.C, why)})
			continue
		}
		if w == nil {
			continue
		}
		p.Wrappers = append(p.Wrappers, w)
	}
	// The slice forms rename the pointer forms they stand beside (…Raw),
	// before anything else is named after a wrapper.
	p.slices(pkg, pl)
	for _, w := range p.Wrappers {
		f := w.Func
		for _, prm := range w.Params {
			if why := renamed(prm, f.GoName); why != "" {
				p.Renamed = append(p.Renamed, parse.Diag{Pos: f.Pos, Msg: fmt.Sprintf("function %s: parameter %s is %s in Go (%s)", f.C, prm.C, prm.Go, why)})
			}
		}
		if CMemory[f.C] {
			// A package-level name like any other: the model hands it out.
			w.CMem = pkg.Claim("the address form of "+f.C, f.GoName+"CMem", "_", f.Pos)
		}
	}
	return p
}

func plan(pkg *model.Package, f *model.Func, pl *layout.Planner) (*Wrapper, string) {
	for _, pre := range skipPrefixes {
		if strings.HasPrefix(f.C, pre) {
			return nil, "" // the header set's private helper: silently not API
		}
	}
	if Overrides[f.C] == Skip {
		return nil, "listed as skipped in the convention table"
	}
	if f.Sig.Variadic {
		return nil, "variadic"
	}
	w := &Wrapper{Func: f, Trampoline: "verbsexp_" + f.GoName} // Go names are unique
	nullable := set(Nullable[f.C])
	failureOut := set(FailureOut[f.C])
	used := map[string]bool{}
	for i, prm := range f.Sig.Params {
		if prm.Type.Kind == parse.Pointer && prm.Type.Elem.Kind == parse.Function {
			return nil, fmt.Sprintf("parameter %d is a function pointer", i+1)
		}
		g, ok := pl.ParamType(prm.Type)
		if !ok {
			return nil, fmt.Sprintf("parameter %d (%s) is passed by value as a %s", i+1, paramName(prm, i), kindWord(prm.Type))
		}
		cname := prm.Name
		if cname == "" {
			cname = fmt.Sprintf("arg%d", i)
		}
		p := Param{C: cname, Go: goParam(cname, f.GoName, used), Type: g, CType: cType(prm.Type)}
		if prm.Type.Kind == parse.Pointer {
			isRecord := g.Kind == layout.Ptr && g.Elem.Kind == layout.Named
			p.Required = isRecord && !nullable[cname]
			p.Slot = failureOut[cname]
			if p.Required && f.Inline {
				p.Context = contextMember(pkg, prm.Type.Elem)
			}
		}
		w.Params = append(w.Params, p)
	}
	res := f.Sig.Result
	conv := Overrides[f.C]
	switch {
	case res.Kind == parse.Void:
		if conv == "" {
			conv = Void
		}
	default:
		g, ok := pl.ParamType(res)
		if !ok {
			return nil, "its result is a " + kindWord(res)
		}
		w.CResult = cType(res)
		if conv == "" {
			switch {
			case res.Kind == parse.Pointer:
				conv = Pointer
			case res.Kind == parse.Int && res.Signed:
				conv = Status
			default:
				conv = Value
			}
		}
		if conv != Status {
			w.Result = g
		}
		if isConstChars(res) && (conv == Pointer || conv == Value) {
			w.String, w.Result = true, &layout.GoType{Kind: layout.Basic, Name: "string"}
		}
	}
	w.Conv = conv
	w.Crossing = crossing(conv, res)
	return w, ""
}

// contextMember is the Go name of rec's direct member context, a pointer
// to struct ibv_context, or "" when rec (a pointed-to record) has none.
func contextMember(pkg *model.Package, rec *parse.Type) string {
	if rec.Kind != parse.RecordRef {
		return ""
	}
	r := pkg.RecordByC(string(rec.RecordKind) + " " + rec.Tag)
	if r == nil || len(r.ByArch) == 0 {
		return ""
	}
	for _, def := range r.ByArch {
		if def == nil {
			continue
		}
		for _, m := range def.Members {
			t := m.Type
			if m.Name == "context" && t.Kind == parse.Pointer && t.Elem.Kind == parse.RecordRef && t.Elem.Tag == "ibv_context" {
				return r.Members["context"]
			}
		}
		break
	}
	return ""
}

// isConstChars reports a const char * (a name or a message the library
// owns), which the wrapper copies into a Go string.
func isConstChars(t *parse.Type) bool {
	return t.Kind == parse.Pointer && t.Elem.Kind == parse.Int && t.Elem.Name == "char" && t.Elem.Const
}

// crossing is how the result of a function of convention conv and C
// result res crosses back: errno travels with the result whenever the
// convention reads it.
func crossing(conv Convention, res *parse.Type) Crossing {
	switch conv {
	case Status, Count:
		if res.Size <= 4 {
			return Packed
		}
		return WithErrno
	case Pointer:
		return WithErrno
	}
	return Plain
}

func set(xs []string) map[string]bool {
	m := map[string]bool{}
	for _, x := range xs {
		m[x] = true
	}
	return m
}

func paramName(p parse.Param, i int) string {
	if p.Name != "" {
		return p.Name
	}
	return fmt.Sprintf("#%d", i+1)
}

func kindWord(t *parse.Type) string {
	switch t.Kind {
	case parse.RecordRef, parse.Nested:
		return "record"
	case parse.Pointer:
		return "function pointer"
	case parse.Opaque:
		return "type the wrapper cannot pass (" + t.Name + ")"
	}
	return "type the wrapper cannot pass"
}

// cType is the trampoline's spelling of a parameter or result: pointers as
// void * (C converts them implicitly to the real pointer type), integers as
// fixed-size stdint types.
func cType(t *parse.Type) string {
	switch t.Kind {
	case parse.Pointer:
		return "void *"
	case parse.Bool:
		return "_Bool"
	case parse.Float:
		if t.Size == 4 {
			return "float"
		}
		return "double"
	case parse.Int, parse.EnumRef:
		if t.Name == "char" {
			return "char"
		}
		n := layout.IntName(t.Size, t.Signed)
		return n + "_t"
	}
	return "void"
}

// bodyNames are the identifiers a wrapper's body uses besides its
// parameters, with what they are: its locals, the package's imports and
// the package-level names it calls (its own symbol, sym<Name>, is
// checked by goParam). A parameter of one of these names would shadow it.
var bodyNames = map[string]string{
	"r": "a local of the wrapper", "ret": "a local of the wrapper", "errno": "a local of the wrapper",
	"fn": "a local of the wrapper", "err": "a local of the wrapper", "arr": "a local of the wrapper",
	"unsafe": "an import", "abiutil": "an import", "math": "an import", "dynlib": "an import", "syscall": "an import", "C": "cgo's C",
	"unpack": "a function of the package", "libibverbs": "a variable of the package",
}

// shadowed says why n cannot name a parameter of the wrapper of the
// function whose Go name is fn, or "".
func shadowed(n, fn string) string {
	switch {
	case token.IsKeyword(n):
		return "a Go keyword"
	case types.Universe.Lookup(n) != nil:
		return "a predeclared Go identifier"
	case bodyNames[n] != "":
		return bodyNames[n]
	case n == "sym"+fn:
		return "the wrapper's symbol variable"
	}
	return ""
}

// goParam turns a C parameter name into a unique lowerCamel Go name that
// shadows nothing the wrapper uses.
func goParam(c, fn string, used map[string]bool) string {
	n := lowerCamel(model.GoName(c))
	if shadowed(n, fn) != "" || used[n] {
		n += "_"
	}
	for used[n] || shadowed(n, fn) != "" {
		n += "_"
	}
	used[n] = true
	return n
}

// renamed says why a parameter of the wrapper of fn has another Go name
// than the one its C name spells, or "" when it has that one.
func renamed(p Param, fn string) string {
	n := lowerCamel(model.GoName(p.C))
	switch s := shadowed(n, fn); {
	case p.Go == n || p.Go == p.C:
		return ""
	case s != "":
		return n + " is " + s
	}
	return n + " is another parameter's"
}

// lowerCamel lowers the leading capital run: QPNum → qpNum, QP → qp,
// BadTask → badTask.
func lowerCamel(s string) string {
	r := []rune(s)
	i := 0
	for i < len(r) && unicode.IsUpper(r[i]) {
		i++
	}
	switch {
	case i == 0:
		return s
	case i == len(r):
		return strings.ToLower(s)
	case i > 1:
		i-- // keep the capital that starts the next word
	}
	for j := 0; j < i; j++ {
		r[j] = unicode.ToLower(r[j])
	}
	return string(r)
}
