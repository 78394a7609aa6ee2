package model

import "testing"

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
