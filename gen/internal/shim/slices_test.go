package shim

import (
	"fmt"
	"strings"
	"testing"

	"github.com/verbsexp/verbsexp/gen/internal/layout"
	"github.com/verbsexp/verbsexp/gen/internal/model"
	"github.com/verbsexp/verbsexp/gen/internal/parse"
)

// cType parses the few C types the cases spell: "int", "uint16_t",
// "uint32_t", "size_t", "uint64_t *", "int *", "void *", "struct x *",
// "struct x **", "void".
func cTypeOf(t *testing.T, s string) *parse.Type {
	s = strings.TrimSpace(s)
	if rest, ok := strings.CutSuffix(s, "*"); ok {
		return &parse.Type{Kind: parse.Pointer, Size: 8, Align: 8, Elem: cTypeOf(t, rest)}
	}
	ints := map[string]parse.Type{
		"int": {Size: 4, Signed: true}, "uint16_t": {Size: 2}, "uint32_t": {Size: 4},
		"size_t": {Size: 8}, "uint64_t": {Size: 8},
	}
	if it, ok := ints[s]; ok {
		it.Kind, it.Align = parse.Int, int(it.Size)
		return &it
	}
	if s == "void" {
		return &parse.Type{Kind: parse.Void}
	}
	if tag, ok := strings.CutPrefix(s, "struct "); ok {
		return &parse.Type{Kind: parse.RecordRef, RecordKind: parse.Struct, Tag: tag, InScope: true}
	}
	t.Fatalf("test type %q", s)
	return nil
}

// unit declares records cq, wc, sge, dev (defined), thing (opaque) and
// the functions, each "RESULT NAME(TYPE NAME, …)".
func unit(t *testing.T, funcs ...string) *parse.Unit {
	u := &parse.Unit{GoArch: "amd64"}
	for _, tag := range []string{"cq", "wc", "sge", "dev"} {
		u.Records = append(u.Records, &parse.Record{Kind: parse.Struct, Tag: tag, Size: 8, Align: 8,
			Members: []*parse.Member{{Name: "x", Type: &parse.Type{Kind: parse.Int, Size: 8, Align: 8}}}})
	}
	u.Opaque = []*parse.Record{{Kind: parse.Struct, Tag: "thing"}}
	for i, decl := range funcs {
		head, params, _ := strings.Cut(strings.TrimSuffix(decl, ")"), "(")
		sp := strings.LastIndexAny(head, " *")
		f := &parse.Func{Name: head[sp+1:], Pos: parse.Pos{File: "t.h", Line: i + 1, Col: 1}, Inline: true,
			Sig: &parse.Signature{Result: cTypeOf(t, head[:sp+1])}}
		for _, p := range strings.Split(params, ",") {
			p = strings.TrimSpace(p)
			sp := strings.LastIndexAny(p, " *")
			f.Sig.Params = append(f.Sig.Params, parse.Param{Name: p[sp+1:], Type: cTypeOf(t, p[:sp+1])})
		}
		u.Funcs = append(u.Funcs, f)
	}
	return u
}

func planOf(t *testing.T, funcs ...string) (*Plan, *model.Package) {
	pkg, err := model.Build("t", []*parse.Unit{unit(t, funcs...)})
	if err != nil {
		t.Fatal(err)
	}
	return Build(pkg, layout.NewPlanner(pkg, 0)), pkg
}

// form spells a wrapper's slice form: "List GetDeviceList() DevList",
// "Array PollCQ(cq *CQ, wc []WC) count=num_entries stride=wc_size max=MaxInt32".
func form(w *Wrapper) string {
	s := w.Slice
	if s == nil {
		return ""
	}
	r := fmt.Sprintf("%s %s(%s)", s.Kind, s.GoName, strings.Join(SliceParams(w), ", "))
	if s.Count >= 0 {
		r += " count=" + w.Params[s.Count].C
	}
	if s.Stride >= 0 {
		r += " stride=" + w.Params[s.Stride].C
	}
	if s.Limit != "" {
		r += " max=" + s.Limit
	}
	if s.ListType != "" {
		r += " " + s.ListType
	}
	return r
}

// TestSliceRecognition: what the rule and the tables make of each
// signature: the slice form (and the pointer form's name), or the note
// that refuses it, or nothing at all.
func TestSliceRecognition(t *testing.T) {
	for _, c := range []struct {
		name  string
		decls []string
		forms map[string]string // C name → form; others have none
		raw   map[string]string // C name → the pointer form's Go name
		notes []string          // each a note's substring, in order
	}{
		{name: "count then array",
			decls: []string{"int ibv_poll_cq(struct cq *cq, int num_entries, struct wc *wc)"},
			forms: map[string]string{"ibv_poll_cq": "array PollCQ(cq *CQ, wc []WC) count=num_entries max=MaxInt32"},
			raw:   map[string]string{"ibv_poll_cq": "PollCQRaw"},
			notes: []string{"t.h:1:1: function ibv_poll_cq: slice form PollCQ(cq *CQ, wc []WC) (the rule: num_entries counts the records at wc); the pointer form is PollCQRaw"}},
		{name: "stride after the pair",
			decls: []string{"int ibv_exp_poll_cq(struct cq *ibcq, int num_entries, struct wc *wc, uint32_t wc_size)"},
			forms: map[string]string{"ibv_exp_poll_cq": "array ExpPollCQ(ibcq *CQ, wc []WC) count=num_entries stride=wc_size max=MaxInt32"},
			notes: []string{"wc_size is the size of one"}},
		{name: "array then a 16-bit count",
			decls: []string{"int post(struct cq *qp, struct sge *sg_list, uint16_t num_sge)"},
			forms: map[string]string{"post": "array Post(qp *CQ, sgList []SGE) count=num_sge max=MaxUint16"}},
		{name: "a size_t count needs no bound; a stride must be named so",
			decls: []string{"int put(struct cq *qp, size_t count, struct sge *sge, uint32_t flags)"},
			forms: map[string]string{"put": "array Put(qp *CQ, sge []SGE, flags uint32) count=count"}},
		{name: "array of pointers to records, opaque ones too",
			decls: []string{"int named(struct cq *cq, size_t num_devs, struct thing **devs)"},
			forms: map[string]string{"named": "array Named(cq *CQ, devs []*Thing) count=num_devs"}},
		{name: "no candidates: the call's object, an index, a length",
			decls: []string{"int ack(struct cq *cq, uint32_t nevents)", "int at(struct cq *cq, int index, struct wc *wc)",
				"int put_bytes(struct cq *cq, void *addr, size_t len)"}},
		{name: "a count between two pointers",
			decls: []string{"int between(struct cq *cq, struct sge *a, int num_sge, struct wc *b)",
				"int beside(struct cq *cq, struct sge *value, int num_actions, struct dev **actions)"},
			notes: []string{"function between has no slice form: num_sge sits between two pointers, a and b: which is the array? (shim.Slices)",
				"function beside has no slice form: num_actions sits between two pointers, value and actions"}},
		{name: "an opaque record, integers",
			decls: []string{"int things(struct cq *cq, struct thing *things, int num_things)", "int values(struct cq *cq, uint64_t *values, uint32_t nvalues)"},
			notes: []string{"function things has no slice form: things beside num_things: struct thing is declared but never defined: its elements have no size",
				"function values has no slice form: values beside nvalues points to no record (an array of integers? list it in shim.Slices)"}},
		{name: "two arrays",
			decls: []string{"int two(struct cq *cq, struct sge *a, int num_a, uint32_t flags, struct wc *b, int num_b)"},
			notes: []string{"function two has no slice form: 2 arrays (a, b…): a slice form takes one (shim.Slices)"}},
		{name: "the table: integers, and a pair the rule would find ambiguous",
			decls: []string{"int ibv_read_counters(struct cq *counters, uint64_t *counters_value, uint32_t ncounters, uint32_t flags)",
				"int mlx5dv_dr_rule_create(struct cq *matcher, struct sge *value, size_t num_actions, struct dev **actions)"},
			forms: map[string]string{"ibv_read_counters": "array ReadCounters(counters *CQ, countersValue []uint64, flags uint32) count=ncounters max=MaxUint32",
				"mlx5dv_dr_rule_create": "array Mlx5dvDrRuleCreate(matcher *CQ, value *SGE, actions []*Dev) count=num_actions"},
			notes: []string{"(shim.Slices: ncounters counts counters_value)", "(shim.Slices: num_actions counts actions)"}},
		{name: "the table's refusal",
			decls: []string{"int mlx5dv_wr_mkey_configure(struct cq *mqp, struct dev *mkey, int num_setters, struct sge *attr)"},
			notes: []string{"function mlx5dv_wr_mkey_configure has no slice form: num_setters counts the setter calls that follow, not elements of attr (shim.NotSlices)"}},
		{name: "a returned list and its free",
			decls: []string{"struct dev **ibv_get_device_list(int *num_devices)", "void ibv_free_device_list(struct dev **list)",
				"struct dev **ibv_exp_get_device_list(int *num_devices)"},
			forms: map[string]string{"ibv_get_device_list": "list GetDeviceList() count=num_devices DevList",
				"ibv_exp_get_device_list": "list ExpGetDeviceList() count=num_devices DevList",
				"ibv_free_device_list":    "free FreeDeviceList(list DevList) DevList"},
			raw: map[string]string{"ibv_get_device_list": "GetDeviceListRaw", "ibv_free_device_list": "FreeDeviceListRaw"},
			notes: []string{"(the rule: it returns an array of pointers and num_devices counts it; ibv_free_device_list frees it)",
				"(it frees the list ibv_get_device_list returns)",
				"ibv_free_device_list frees it (shim.ListFree))"}},
		{name: "a returned list nobody frees",
			decls: []string{"struct dev **dev_list(int *num_devs)", "struct dev **get_devs(int *num_devs)"},
			notes: []string{"function dev_list has no slice form: no function frees the list it returns (shim.ListFree)",
				"function get_devs has no slice form: the list it returns has no free: free_devs is not wrapped or not declared (shim.ListFree)"}},
		{name: "the pointer form's name taken",
			decls: []string{"int poll_raw(int x)", "int poll(struct cq *cq, int num_entries, struct wc *wc)"},
			forms: map[string]string{"poll": "array Poll(cq *CQ, wc []WC) count=num_entries max=MaxInt32"},
			raw:   map[string]string{"poll": "PollRaw_", "poll_raw": "PollRaw"},
			notes: []string{"function poll: slice form Poll(cq *CQ, wc []WC) (the rule: num_entries counts the records at wc); the pointer form is PollRaw_"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, pkg := planOf(t, c.decls...)
			for _, w := range p.Wrappers {
				if got, want := form(w), c.forms[w.Func.C]; got != want {
					t.Errorf("%s: slice form %q, want %q", w.Func.C, got, want)
				}
				if want := c.raw[w.Func.C]; want != "" && w.Func.GoName != want {
					t.Errorf("%s: pointer form %s, want %s", w.Func.C, w.Func.GoName, want)
				}
				if w.Slice != nil && w.Trampoline != "verbsexp_"+w.Func.GoName {
					t.Errorf("%s: trampoline %s is not named after the pointer form %s", w.Func.C, w.Trampoline, w.Func.GoName)
				}
			}
			var all []string
			for _, n := range append(p.SliceNotes, pkg.Notes...) {
				all = append(all, n.String())
			}
			text := strings.Join(all, "\n")
			for _, want := range c.notes {
				if !strings.Contains(text, want) {
					t.Errorf("notes lack %q:\n%s", want, text)
				}
			}
			if len(c.forms) == 0 && len(c.notes) == 0 && len(p.SliceNotes) > 0 {
				t.Errorf("notes for no candidate:\n%s", text)
			}
			// Every slice form made is noted once.
			made := 0
			for _, w := range p.Wrappers {
				if w.Slice != nil {
					made++
				}
			}
			if n := strings.Count(text, ": slice form "); n != made {
				t.Errorf("%d slice forms noted, %d made", n, made)
			}
		})
	}
}

// TestSliceTablesAreSound: each table entry names parameters the rule
// can check, and no function is in two tables.
func TestSliceTablesAreSound(t *testing.T) {
	for fn := range Slices {
		if _, ok := NotSlices[fn]; ok {
			t.Errorf("%s is in Slices and NotSlices", fn)
		}
		if pr := Slices[fn]; pr.Ptr == "" || pr.Count == "" {
			t.Errorf("Slices[%s] = %+v: the pointer and the count are required", fn, pr)
		}
	}
	for fn, why := range NotSlices {
		if why == "" {
			t.Errorf("NotSlices[%s] says no why", fn)
		}
	}
	for get, free := range ListFree {
		if !strings.Contains(free, "free") || get == free {
			t.Errorf("ListFree[%s] = %s does not look like a free", get, free)
		}
	}
}

// TestSliceTableEntryChecked: an entry that names a parameter the
// function lacks is refused, with the entry named, not applied blindly.
func TestSliceTableEntryChecked(t *testing.T) {
	p, _ := planOf(t, "int ibv_read_counters(struct cq *counters, uint64_t *values, uint32_t ncounters, uint32_t flags)")
	if w := p.Wrappers[0]; w.Slice != nil {
		t.Fatalf("slice form %q from a table entry naming no parameter", form(w))
	}
	if len(p.SliceNotes) != 1 || !strings.Contains(p.SliceNotes[0].Msg, `shim.Slices entry names "counters_value" as the array`) {
		t.Errorf("notes %v, want the entry's mistake", p.SliceNotes)
	}
}

func TestCountNames(t *testing.T) {
	for name, want := range map[string]bool{
		"num_entries": true, "max_entries": true, "num_sge": true, "nevents": true, "ncounters": true,
		"count": true, "repeat_count": true, "sge_cnt": true, "n": true,
		"index": false, "len": false, "length": false, "cqe": false, "flags": false, "num": false, "qp_num": false,
		"wc_size": false, "nbytes_x": false,
	} {
		if got := isCount(parse.Param{Name: name, Type: &parse.Type{Kind: parse.Int, Size: 4}}); got != want {
			t.Errorf("isCount(%s) = %v, want %v", name, got, want)
		}
	}
	if isCount(parse.Param{Name: "num_entries", Type: &parse.Type{Kind: parse.Int, Size: 1, Name: "char"}}) {
		t.Error("a char counts")
	}
	for name, want := range map[string]bool{"wc_size": true, "entry_size": true, "stride": true, "size": true, "elem_sz": true, "wc_len": false, "sizes": false} {
		if got := strideName.MatchString(name); got != want {
			t.Errorf("strideName(%s) = %v, want %v", name, got, want)
		}
	}
}
