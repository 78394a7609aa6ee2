package shim

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/verbsexp/verbsexp/gen/internal/layout"
	"github.com/verbsexp/verbsexp/gen/internal/model"
	"github.com/verbsexp/verbsexp/gen/internal/parse"
)

// Slice forms. A C function that takes an array as a pointer and a count
// (and, for the experimental verbs, the element's size) gets a second Go
// wrapper that takes a slice instead: the slice form, under the
// function's natural Go name (PollCQ(cq, wc []WC)); the pointer form
// stays, named with the suffix Raw (PollCQRaw). A function that returns
// an array of pointers and its count in an out-parameter
// (ibv_get_device_list) returns a List, which its matching free
// (ibv_free_device_list, whose slice form takes the List) releases.
//
// What is an array is found by a rule over parameter kinds and names,
// and by the tables below for what the rule cannot see; every slice form
// made and every candidate refused is noted with the reason.

// SliceKind is what a slice form does with its slice.
type SliceKind string

const (
	// Array: a pointer to the first element, a count and maybe a stride
	// become one slice parameter.
	Array SliceKind = "array"
	// List: a returned array of pointers, counted in an out-parameter,
	// becomes a List (abiutil.List) returned with the error.
	List SliceKind = "list"
	// Free: the function that frees a List takes the List.
	Free SliceKind = "free"
)

// Pair names, by their C names, the parameters that a table entry makes
// one slice: the pointer to the first element, the count and (optional)
// the stride, whose meaning is the element's size.
type Pair struct {
	Ptr, Count, Stride string
}

// Slices lists the arrays the rule cannot see.
var Slices = map[string]Pair{
	// An array of integers: the rule takes pointers to records only (a
	// pointer to one integer is as common: ibv_query_pkey's pkey).
	"ibv_read_counters": {Ptr: "counters_value", Count: "ncounters"},
	// flags sits between the count and the stride.
	"_ibv_query_gid_table": {Ptr: "entries", Count: "max_entries", Stride: "entry_size"},
	// match_value, one record, borders num_actions too.
	"mlx5dv_create_flow": {Ptr: "actions_attr", Count: "num_actions"},
	// value, one record, borders num_actions too.
	"mlx5dv_dr_rule_create": {Ptr: "actions", Count: "num_actions"},
}

// NotSlices lists functions whose count and record pointer the rule
// would pair but which are not an array and its length, with why.
var NotSlices = map[string]string{
	"mlx5dv_wr_mkey_configure": "num_setters counts the setter calls that follow, not elements of attr",
}

// ListFree names the function that frees a returned list, where the rule
// (the function of the same name with get replaced by free) finds none.
var ListFree = map[string]string{
	"ibv_exp_get_device_list": "ibv_free_device_list", // MLNX_OFED: "free it with ibv_free_device_list"
}

// Slice is a wrapper's slice form: the same C call, with a slice (or a
// List) in place of the parameters it stands for.
type Slice struct {
	Kind SliceKind
	// GoName is the form's name: the function's natural Go name (the
	// pointer form's, Func.GoName, ends in Raw).
	GoName string
	// Ptr, Count and Stride index Wrapper.Params: the array's pointer,
	// its count (for a List, the count's out-parameter) and its stride
	// (-1: none; a List and a Free have no Ptr either).
	Ptr, Count, Stride int
	// Elem is the element type: of the slice (Array), or T of a List's
	// *T elements (List, Free).
	Elem *layout.GoType
	// Limit names the math constant that bounds the count (MaxInt32), ""
	// when every slice length fits its type.
	Limit string
	// ListType is the Go name of the List type (List, Free).
	ListType string
	// Free is the wrapper whose slice form frees the List (List).
	Free *Wrapper
	// CountC is the C type of the count a List's trampoline passes the
	// address of (List).
	CountC string
	// Why says how it was found, for the note.
	Why string
}

// Trampoline is the C function a List form calls: the function itself,
// with the count in a C local, so that no Go variable crosses into C
// (whose address would have to live on the heap).
func (s *Slice) Trampoline() string { return "verbsexp_" + s.GoName }

// ListType is a generated List type: abiutil.List of Elem, freed by Free.
type ListType struct {
	GoName string
	Elem   *layout.GoType
	Free   *Wrapper // its free's wrapper (the slice form takes the List)
	Pos    parse.Pos
}

// candidate is a slice the rule or the tables found in a function.
type candidate struct {
	slice Slice
	by    string // table or rule
}

// countWord matches the C names of parameters that count elements:
// num_entries, max_entries, num_sge, nevents, ncounters, count, n.
var countName = regexp.MustCompile(`^((num|max)_[a-z0-9_]+|n[a-z]+s|n|count|[a-z0-9_]+_(count|cnt))$`)

// strideName matches the C names of parameters that give an element's
// size: wc_size, entry_size, stride.
var strideName = regexp.MustCompile(`^([a-z0-9_]+_)?(size|sz|stride)$`)

// isCount reports a parameter that may count an array: an integer (not a
// char or a bool) with a counting name.
func isCount(p parse.Param) bool {
	t := p.Type
	return t.Kind == parse.Int && t.Name != "char" && countName.MatchString(strings.ToLower(p.Name))
}

func isInt(t *parse.Type) bool { return t.Kind == parse.Int && t.Name != "char" }

// recordElem returns the record a parameter points to, or why it does not
// point to one that can be a slice's element ("" and nil for a pointer
// to something else). A pointer to pointers to records is an array of
// pointers, whose elements have a size whatever the record's.
func recordElem(pkg *model.Package, t *parse.Type) (*model.Record, string) {
	if t.Kind == parse.Pointer && t.Elem.Kind == parse.Pointer && t.Elem.Elem.Kind == parse.RecordRef {
		if r := pkg.RecordByC(string(t.Elem.Elem.RecordKind) + " " + t.Elem.Elem.Tag); r != nil {
			return r, ""
		}
		return nil, ""
	}
	if t.Kind != parse.Pointer || t.Elem.Kind != parse.RecordRef {
		return nil, ""
	}
	r := pkg.RecordByC(string(t.Elem.RecordKind) + " " + t.Elem.Tag)
	if r == nil {
		return nil, ""
	}
	for _, def := range r.ByArch {
		if def == nil {
			return nil, r.C + " is declared but never defined: its elements have no size"
		}
	}
	if len(r.ByArch) == 0 {
		return nil, r.C + " is declared but never defined: its elements have no size"
	}
	return r, ""
}

// recognize finds the slice form of f (the wrapper w), by the table or
// the rule; a non-empty refusal says why a candidate the rule saw is not
// taken.
func recognize(pkg *model.Package, w *Wrapper) (*candidate, string) {
	f := w.Func
	params := f.Sig.Params
	index := func(name string) int {
		for i, p := range params {
			if p.Name == name && name != "" {
				return i
			}
		}
		return -1
	}
	if why, ok := NotSlices[f.C]; ok {
		return nil, why + " (shim.NotSlices)"
	}
	if pr, ok := Slices[f.C]; ok {
		by := fmt.Sprintf("shim.Slices: %s counts %s", pr.Count, pr.Ptr)
		if pr.Stride != "" {
			by += ", and " + pr.Stride + " is the size of one"
		}
		c := &candidate{by: by, slice: Slice{Kind: Array, Ptr: index(pr.Ptr), Count: index(pr.Count), Stride: -1}}
		if pr.Stride != "" {
			c.slice.Stride = index(pr.Stride)
		}
		s := &c.slice
		switch {
		case s.Ptr < 0 || params[s.Ptr].Type.Kind != parse.Pointer:
			return nil, fmt.Sprintf("its shim.Slices entry names %q as the array, which is no pointer parameter", pr.Ptr)
		case s.Count < 0 || !isInt(params[s.Count].Type):
			return nil, fmt.Sprintf("its shim.Slices entry names %q as the count, which is no integer parameter", pr.Count)
		case pr.Stride != "" && (s.Stride < 0 || !isInt(params[s.Stride].Type)):
			return nil, fmt.Sprintf("its shim.Slices entry names %q as the stride, which is no integer parameter", pr.Stride)
		}
		if r, why := recordElem(pkg, params[s.Ptr].Type); why != "" || (r == nil && !isInt(params[s.Ptr].Type.Elem)) {
			if why == "" {
				why = pr.Ptr + " points to neither records, pointers to records nor integers"
			}
			return nil, "its shim.Slices entry: " + why
		}
		return c, ""
	}
	if c, why := recognizeList(pkg, f); c != nil || why != "" {
		return c, why
	}
	// The rule: a count between or beside pointers to records; the one
	// record pointer beside it (the first parameter, the object the call
	// is about, never) is the array.
	var found []*candidate
	var refused []string
	for ci, cp := range params {
		if !isCount(cp) {
			continue
		}
		var ptrs, others []int // pointers to records (or to pointers to them) beside it; other pointers
		var why []string
		for _, pi := range []int{ci - 1, ci + 1} {
			if pi <= 0 || pi >= len(params) {
				continue
			}
			pt := params[pi].Type
			if pt.Kind != parse.Pointer {
				continue
			}
			r, no := recordElem(pkg, pt)
			switch {
			case no != "":
				others = append(others, pi)
				why = append(why, fmt.Sprintf("%s beside %s: %s", params[pi].Name, cp.Name, no))
			case r == nil:
				others = append(others, pi)
				why = append(why, fmt.Sprintf("%s beside %s points to no record (an array of %s? list it in shim.Slices)", params[pi].Name, cp.Name, elemWord(pt.Elem)))
			default:
				ptrs = append(ptrs, pi)
			}
		}
		switch {
		case len(ptrs) == 0:
			refused = append(refused, why...)
			continue
		case len(ptrs)+len(others) == 2:
			a, b := params[ci-1].Name, params[ci+1].Name
			refused = append(refused, fmt.Sprintf("%s sits between two pointers, %s and %s: which is the array? (shim.Slices)", cp.Name, a, b))
			continue
		}
		s := Slice{Kind: Array, Ptr: ptrs[0], Count: ci, Stride: -1}
		what := "records"
		if params[ptrs[0]].Type.Elem.Kind == parse.Pointer {
			what = "pointers to records"
		}
		by := fmt.Sprintf("the rule: %s counts the %s at %s", cp.Name, what, params[ptrs[0]].Name)
		// The stride, if any, follows the pair.
		if next := max(ci, ptrs[0]) + 1; next < len(params) && isInt(params[next].Type) && strideName.MatchString(strings.ToLower(params[next].Name)) {
			s.Stride = next
			by += ", and " + params[next].Name + " is the size of one"
		}
		found = append(found, &candidate{slice: s, by: by})
	}
	switch {
	case len(found) > 1:
		return nil, fmt.Sprintf("%d arrays (%s, %s…): a slice form takes one (shim.Slices)", len(found), params[found[0].slice.Ptr].Name, params[found[1].slice.Ptr].Name)
	case len(found) == 1:
		return found[0], ""
	case len(refused) > 0:
		return nil, strings.Join(refused, "; ")
	}
	return nil, ""
}

// recognizeList finds a returned array of pointers to records whose count
// comes back in an out-parameter: T **f(…, int *num_t, …).
func recognizeList(pkg *model.Package, f *model.Func) (*candidate, string) {
	res := f.Sig.Result
	if res.Kind != parse.Pointer || res.Elem.Kind != parse.Pointer || res.Elem.Elem.Kind != parse.RecordRef {
		return nil, ""
	}
	count := -1
	for i, p := range f.Sig.Params {
		if p.Type.Kind == parse.Pointer && isInt(p.Type.Elem) && countName.MatchString(strings.ToLower(p.Name)) {
			if count >= 0 {
				return nil, fmt.Sprintf("it returns an array and has two counts, %s and %s", f.Sig.Params[count].Name, p.Name)
			}
			count = i
		}
	}
	if count < 0 {
		return nil, ""
	}
	return &candidate{slice: Slice{Kind: List, Ptr: -1, Count: count, Stride: -1},
		by: fmt.Sprintf("the rule: it returns an array of pointers and %s counts it", f.Sig.Params[count].Name)}, ""
}

// findFree finds the wrapper that frees the list f returns: the table's,
// or the function named with free in place of get, taking the list alone.
func findFree(f *model.Func, byC map[string]*Wrapper) (*Wrapper, string) {
	name, byTable := ListFree[f.C]
	if !byTable {
		if !strings.Contains(f.C, "get") {
			return nil, "no function frees the list it returns (shim.ListFree)"
		}
		name = strings.Replace(f.C, "get", "free", 1)
	}
	w := byC[name]
	if w == nil {
		return nil, fmt.Sprintf("the list it returns has no free: %s is not wrapped or not declared (shim.ListFree)", name)
	}
	ps := w.Func.Sig.Params
	if len(ps) != 1 || !sameType(ps[0].Type, f.Sig.Result) {
		return nil, fmt.Sprintf("%s, which should free the list it returns, does not take that list alone", name)
	}
	return w, ""
}

func sameType(a, b *parse.Type) bool {
	for a.Kind == parse.Pointer && b.Kind == parse.Pointer {
		a, b = a.Elem, b.Elem
	}
	return a.Kind == b.Kind && a.Kind == parse.RecordRef && a.Tag == b.Tag && a.RecordKind == b.RecordKind
}

func elemWord(t *parse.Type) string {
	switch t.Kind {
	case parse.Int:
		if t.Name == "char" {
			return "chars"
		}
		return "integers"
	case parse.Void:
		return "bytes"
	case parse.Pointer:
		return "pointers"
	}
	return "values"
}

// limit names the math constant bounding a count of Go type g, or "" when
// every length fits (a 64-bit count).
func limit(g *layout.GoType) string {
	switch g.Name {
	case "int8":
		return "MaxInt8"
	case "int16":
		return "MaxInt16"
	case "int32":
		return "MaxInt32"
	case "uint8", "byte":
		return "MaxUint8"
	case "uint16":
		return "MaxUint16"
	case "uint32":
		return "MaxUint32"
	}
	return ""
}

// slices finds the slice forms of p's wrappers, names them (the pointer
// forms take the suffix Raw: pkg.RenameRaw) and plans them; made and
// refused ones are noted.
func (p *Plan) slices(pkg *model.Package, pl *layout.Planner) {
	byC := map[string]*Wrapper{}
	for _, w := range p.Wrappers {
		byC[w.Func.C] = w
	}
	type found struct {
		w *Wrapper
		c *candidate
	}
	var forms []found
	frees := map[*Wrapper]*Slice{} // free wrapper → its slice form
	for _, w := range p.Wrappers {
		c, why := recognize(pkg, w)
		if why != "" {
			p.SliceNotes = append(p.SliceNotes, parse.Diag{Pos: w.Func.Pos, Msg: fmt.Sprintf("function %s has no slice form: %s", w.Func.C, why)})
			continue
		}
		if c == nil {
			continue
		}
		if c.slice.Kind == List {
			free, why := findFree(w.Func, byC)
			if why != "" {
				p.SliceNotes = append(p.SliceNotes, parse.Diag{Pos: w.Func.Pos, Msg: fmt.Sprintf("function %s has no slice form: %s", w.Func.C, why)})
				continue
			}
			c.by += "; " + free.Func.C + " frees it"
			if _, ok := ListFree[w.Func.C]; ok {
				c.by += " (shim.ListFree)"
			}
			if frees[free] == nil {
				frees[free] = &Slice{Kind: Free, Ptr: -1, Count: -1, Stride: -1, Why: "it frees the list " + w.Func.C + " returns"}
				forms = append(forms, found{free, &candidate{slice: *frees[free]}})
			}
			c.slice.Free = free
		}
		forms = append(forms, found{w, c})
	}
	// Name them all, then plan again: a wrapper's trampoline and
	// parameter names follow its (now Raw) Go name.
	for i := range forms {
		f := forms[i].w.Func
		natural := pkg.RenameRaw(f)
		w, _ := plan(pkg, f, pl)
		*forms[i].w = *w
		s := forms[i].c.slice
		s.GoName = natural
		if s.Why == "" {
			s.Why = forms[i].c.by
		}
		forms[i].w.Slice = &s
	}
	lists := map[*Wrapper]*ListType{} // by free
	for _, fd := range forms {
		w, s := fd.w, fd.w.Slice
		switch s.Kind {
		case Array:
			s.Elem = w.Params[s.Ptr].Type.Elem
			s.Limit = limit(w.Params[s.Count].Type)
		case List:
			free := s.Free
			lt := lists[free]
			elem := w.Result.Elem.Elem // T of T **
			if lt == nil {
				lt = &ListType{Elem: elem, Free: free, Pos: w.Func.Pos}
				lt.GoName = pkg.Claim("the list type "+w.Func.C+" returns", elem.Name+"List", "Type", w.Func.Pos)
				lists[free] = lt
				p.Lists = append(p.Lists, lt)
			}
			s.Elem, s.ListType = elem, lt.GoName
			s.CountC = cType(w.Func.Sig.Params[s.Count].Type.Elem)
		}
	}
	for _, fd := range forms {
		if s := fd.w.Slice; s.Kind == Free {
			lt := lists[fd.w]
			s.Elem, s.ListType = lt.Elem, lt.GoName
		}
	}
	for _, fd := range forms {
		w, s := fd.w, fd.w.Slice
		p.SliceNotes = append(p.SliceNotes, parse.Diag{Pos: w.Func.Pos, Msg: fmt.Sprintf("function %s: slice form %s(%s) (%s); the pointer form is %s",
			w.Func.C, s.GoName, strings.Join(SliceParams(w), ", "), s.Why, w.Func.GoName)})
	}
}

// SliceParams spells the Go parameters of w's slice form: "cq *CQ",
// "wc []WC".
func SliceParams(w *Wrapper) []string {
	s := w.Slice
	var r []string
	for i, p := range w.Params {
		switch {
		case s.Kind == Array && i == s.Ptr:
			r = append(r, p.Go+" []"+s.Elem.String())
		case s.Kind == Free && i == 0:
			r = append(r, p.Go+" "+s.ListType)
		case i == s.Count || i == s.Stride:
		default:
			r = append(r, p.Go+" "+p.Type.String())
		}
	}
	return r
}
