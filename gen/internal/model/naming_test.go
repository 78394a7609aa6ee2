package model

import (
	"strings"
	"testing"

	"github.com/verbsexp/verbsexp/gen/internal/parse"
)

func TestGoName(t *testing.T) {
	for _, c := range []struct{ c, want string }{
		{"ibv_exp_send_wr", "ExpSendWR"},
		{"ibv_exp_task", "ExpTask"},
		{"ibv_sge", "SGE"},
		{"ibv_qp", "QP"},
		{"verbs_context_exp", "VerbsContextExp"},
		{"IBV_EXP_TASK_SEND", "ExpTaskSend"},
		{"IBV_EXP_CALC_OP_MAXLOC", "ExpCalcOpMaxloc"},
		{"qp_num", "QPNum"},
		{"wr_id", "WRID"},
		{"sg_list", "SGList"},
		{"dct_number", "DCTNumber"},
		{"IBV_RATE_2_5_GBPS", "Rate2_5Gbps"},
		{"IBV_RATE_25_GBPS", "Rate25Gbps"},
		{"IBV_MTU_256", "MTU256"},
		{"__reserved", "Reserved"},
		{"lkey", "Lkey"},
		{"ibv_", "Ibv"},
		{"_", "X"},
		{"3d", "N3d"},
		{"cqeCount", "CqeCount"},
		{"a$b", "AB"},
		{"$", "X"},
		{"été", "Été"},
		{"名前", "X名前"},
	} {
		if got := GoName(c.c); got != c.want {
			t.Errorf("GoName(%q) = %q, want %q", c.c, got, c.want)
		}
	}
}

func TestNamespaceCollisions(t *testing.T) {
	ns := newNamespace()
	ns.reserve("FuncPtr")
	steps := []struct{ c, want, suffix, got, holder string }{
		{"struct ibv_qp_cap", "QPCap", "Struct", "QPCap", ""},
		{"IBV_QP_CAP", "QPCap", "Const", "QPCapConst", "struct ibv_qp_cap"},
		{"IBV_QP_CAP_CONST", "QPCapConst", "Const", "QPCapConstConst", "IBV_QP_CAP"},
		{"X", "QPCap", "Const", "QPCapConst2", "struct ibv_qp_cap"},
		{"struct funcptr", "FuncPtr", "Struct", "FuncPtrStruct", "(generated)"},
	}
	for _, s := range steps {
		got, holder := ns.claim(s.c, s.want, s.suffix)
		if got != s.got || holder != s.holder {
			t.Errorf("claim(%s, %s) = %s (held by %q), want %s (held by %q)", s.c, s.want, got, holder, s.got, s.holder)
		}
	}
}

// TestNamespaceSetters: a member X takes SetX too, for its setter, in
// either order (set_x before x used to leave X's setter SetX colliding
// with the field SetX: "field and method with the same name").
func TestNamespaceSetters(t *testing.T) {
	ns := newNamespace()
	steps := []struct{ c, want, got, holder string }{
		{"set_x", "SetX", "SetX", ""},
		{"x", "X", "X_", "set_x (as SetX, the name X's setter needs)"},
		{"y", "Y", "Y", ""},
		{"set_y", "SetY", "SetY_", "the setter of y"},
		{"X_", "X_", "X__", "x"},
	}
	for _, s := range steps {
		got, holder := ns.claimWith(s.c, s.want, "_", "Set", "the setter of "+s.c)
		if got != s.got || holder != s.holder {
			t.Errorf("claimWith(%s, %s) = %s (held by %q), want %s (held by %q)", s.c, s.want, got, holder, s.got, s.holder)
		}
	}
	if ns.taken["SetX_"] != "the setter of x" {
		t.Errorf("SetX_ is held by %q", ns.taken["SetX_"])
	}
}

// TestInPackage: the package's name drops from the front of a Go name
// when the C name's leading words spell it, whatever their case, and only
// at a word boundary; what would not be an exported identifier keeps it.
func TestInPackage(t *testing.T) {
	for _, c := range []struct{ pkg, c, want, kept string }{
		{"mlx5dv", "mlx5dv_dr_matcher_create", "DrMatcherCreate", ""},
		{"mlx5dv", "MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE", "CQInitAttrMaskCompressedCQE", ""},
		{"mlx5dv", "mlx5dv_qp_ex", "QPEx", ""},
		{"verbs", "verbs_get_ctx", "GetCtx", ""},
		{"verbs", "VERBS_CONTEXT_XRCD", "ContextXRCD", ""},
		{"verbs", "ibv_get_device_list", "GetDeviceList", ""}, // ibv_ goes first, then nothing spells verbs
		{"exp", "ibv_exp_poll_cq", "PollCQ", ""},              // …but the package's name after ibv_ goes too
		{"mlx5dv", "mlx5_wqe_ctrl_seg", "Mlx5WQECtrlSeg", ""}, // mlx5 is not mlx5dv
		{"mlx5", "mlx5dv_qp", "Mlx5dvQP", ""},                 // mlx5dv is one word: no boundary after mlx5
		{"verbs", "verbsx_y", "VerbsxY", ""},
		{"foobar", "foo_bar_baz", "Baz", ""}, // several words may spell it
		{"verbs", "verbs", "Verbs", "it is the package's name alone"},
		{"verbs", "verbs_2_5", "Verbs2_5", "without it, 2_5 is no exported Go identifier"},
		{"verbs", "verbs_名前", "Verbs名前", "without it, 名前 is no exported Go identifier"},
		{"", "verbs_get_ctx", "VerbsGetCtx", ""},
	} {
		got, kept := InPackage(c.pkg, c.c)
		if got != c.want || kept != c.kept {
			t.Errorf("InPackage(%q, %q) = %q, %q; want %q, %q", c.pkg, c.c, got, kept, c.want, c.kept)
		}
	}
}

// TestPackageNamesUnstutter: in model.Build, records, enums, constants
// and functions alike drop the package's name; a shorter name that is
// another declaration's own keeps the longer one, whichever comes first,
// and says so; collisions between shortened names are resolved as any
// other, with a note.
func TestPackageNamesUnstutter(t *testing.T) {
	rec := func(tag string) *parse.Record {
		return &parse.Record{Kind: parse.Struct, Tag: tag, Size: 4, Align: 4,
			Members: []*parse.Member{{Name: "x", Type: &parse.Type{Kind: parse.Int, Size: 4, Align: 4}}}}
	}
	pos := parse.Pos{File: "m.h", Line: 1, Col: 1}
	u := &parse.Unit{GoArch: "amd64",
		// mlx5dv_context comes before ibv_context: Context stays ibv_context's.
		Records: []*parse.Record{rec("mlx5dv_context"), rec("ibv_context"), rec("mlx5dv_qp_ex"), rec("mlx5dv_dr_table")},
		Enums: []*parse.Enum{{Tag: "mlx5dv_flags", Size: 4, Enumerators: []*parse.Enumerator{
			{Name: "MLX5DV_FLAGS_A", Pos: pos}, {Name: "MLX5DV_DR_TABLE", Pos: pos}}}},
		Macros: []*parse.Macro{{Name: "MLX5DV_9", Pos: pos}},
		Funcs:  []*parse.Func{{Name: "mlx5dv_dr_table_create", Pos: pos, Sig: &parse.Signature{Result: &parse.Type{Kind: parse.Void}}}},
	}
	p, err := Build("mlx5dv", []*parse.Unit{u})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range p.Records {
		got[r.C] = r.GoName
	}
	got["enum mlx5dv_flags"] = p.Enums[0].GoName
	for _, c := range p.AllConsts() {
		got[c.C] = c.GoName
	}
	got["mlx5dv_dr_table_create"] = p.Funcs[0].GoName
	for c, want := range map[string]string{
		"struct mlx5dv_context": "Mlx5dvContext", "struct ibv_context": "Context", "struct mlx5dv_qp_ex": "QPEx",
		"struct mlx5dv_dr_table": "DrTable", "enum mlx5dv_flags": "Flags", "MLX5DV_FLAGS_A": "FlagsA",
		"MLX5DV_DR_TABLE": "DrTableConst", "MLX5DV_9": "Mlx5dv9", "mlx5dv_dr_table_create": "DrTableCreate",
	} {
		if got[c] != want {
			t.Errorf("%s: Go name %q, want %q", c, got[c], want)
		}
	}
	var notes []string
	for _, n := range p.Notes {
		notes = append(notes, n.String())
	}
	text := strings.Join(notes, "\n")
	for _, want := range []string{
		"Go name Mlx5dvContext of struct mlx5dv_context keeps the package's name: Context is struct ibv_context's",
		"Go name Mlx5dv9 of MLX5DV_9 keeps the package's name: without it, 9 is no exported Go identifier",
		"Go name DrTable of MLX5DV_DR_TABLE is taken by struct mlx5dv_dr_table; using DrTableConst",
		"6 Go names drop the package's name mlx5dv, which the package already says (Mlx5dvQPEx is mlx5dv.QPEx)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("notes lack %q:\n%s", want, text)
		}
	}
}
