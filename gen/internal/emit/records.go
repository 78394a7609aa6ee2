package emit

import (
	"fmt"
	"strings"

	"github.com/dave/jennifer/jen"

	"github.com/verbsexp/verbsexp/gen/internal/layout"
)

// sameEverywhere reports whether record k has the same Go declaration on every
// target, so that it is written once (as x/sys/unix merges identical
// declarations) instead of once per target.
func (in Input) sameEverywhere(k int) bool {
	if len(in.Plans) < 2 {
		return false
	}
	for _, plans := range in.Plans {
		if plans[k] == nil || !plans[k].SameGo(in.Plans[0][k]) {
			return false
		}
	}
	return true
}

// sharedConstraint selects every generated target.
func (in Input) sharedConstraint() string {
	return "linux && (" + strings.Join(in.Pkg.Arches, " || ") + ")"
}

// common renders the records whose layout is the same on every target.
func (in Input) common() *jen.File {
	f := in.newFile(in.sharedConstraint())
	var plans []*layout.Plan
	for k, p := range in.Plans[0] {
		if in.sameEverywhere(k) {
			plans = append(plans, p)
		}
	}
	in.records(f, plans, "every target ("+strings.Join(in.Pkg.Arches, ", ")+")")
	return f
}

// arch renders the records of one target whose layout differs between
// targets, their accessors, the constants whose value depends on the
// target, and their compile-time layout guards.
func (in Input) arch(i int) *jen.File {
	goarch := in.Pkg.Arches[i]
	f := in.newFile("linux && " + goarch)
	var plans []*layout.Plan
	for k, p := range in.Plans[i] {
		if p != nil && !in.sameEverywhere(k) {
			plans = append(plans, p)
		}
	}
	in.records(f, plans, "linux/"+goarch)
	in.archConsts(f, i)
	return f
}

// records renders plans and one function of layout guards for them.
func (in Input) records(f *jen.File, plans []*layout.Plan, where string) {
	if len(plans) == 0 {
		return
	}
	guards := []jen.Code{jen.Var().Id("x").Index(jen.Lit(1)).Struct()}
	for _, p := range plans {
		f.Line()
		in.record(f, p, where)
		guards = append(guards, recordGuards(p)...)
	}
	f.Line()
	f.Comment("Layout guards: each index is zero only while the Go layout equals the C")
	f.Comment("layout recorded at generation time; any drift is a compile error.")
	f.Func().Id("_").Params().Block(guards...)
}

func (in Input) record(f *jen.File, p *layout.Plan, where string) {
	r := p.Record
	if r.Nested {
		f.Commentf("%s is the unnamed %s type of %s (%s): %d bytes, aligned to %d on %s.",
			r.GoName, r.Kind, r.C, r.Pos, p.Size, p.Align, where)
	} else {
		f.Commentf("%s is %s (%s): %d bytes, aligned to %d on %s.",
			r.GoName, r.C, r.Pos, p.Size, p.Align, where)
	}
	if p.Align > p.GoAlign {
		f.Commentf("Go aligns it to %d only: allocate it in C memory when the alignment matters.", p.GoAlign)
	}
	var fields []jen.Code
	for _, s := range p.Slots {
		fields = append(fields, jen.Id(s.Name).Add(typeExpr(s.Type)))
	}
	f.Type().Id(r.GoName).Struct(fields...)
	for _, a := range p.Accessors {
		accessor(f, r.GoName, a)
	}
}

// typeExpr renders a Go type expression.
func typeExpr(t *layout.GoType) *jen.Statement {
	switch t.Kind {
	case layout.Basic:
		return jen.Id(t.Name)
	case layout.Named:
		return jen.Id(t.Name)
	case layout.UnsafePointer:
		return jen.Qual("unsafe", "Pointer")
	case layout.Ptr:
		return jen.Op("*").Add(typeExpr(t.Elem))
	case layout.Arr:
		return jen.Index(jen.Lit(int(t.Len))).Add(typeExpr(t.Elem))
	}
	panic(fmt.Sprintf("emit: unknown type kind %d", t.Kind))
}

// at is unsafe.Add(unsafe.Pointer(r), off): the address of a member.
func at(off int64) *jen.Statement {
	return jen.Qual("unsafe", "Add").Call(jen.Qual("unsafe", "Pointer").Call(jen.Id("r")), jen.Lit(int(off)))
}

func accessor(f *jen.File, typeName string, a layout.Accessor) {
	recv := jen.Id("r").Op("*").Id(typeName)
	t := typeExpr(a.Type)
	switch a.Kind {
	case layout.Pointer:
		f.Commentf("%s returns a pointer to member %s (offset %d).", a.Name, a.CPath, a.Offset)
		f.Func().Params(recv).Id(a.Name).Params().Op("*").Add(t).Block(
			jen.Return(jen.Parens(jen.Op("*").Add(typeExpr(a.Type))).Call(at(a.Offset))))
	case layout.Slice:
		f.Commentf("%s returns the first n elements of the trailing array %s (offset %d);", a.Name, a.CPath, a.Offset)
		f.Comment("the caller knows how many the memory behind r holds.")
		f.Func().Params(recv).Id(a.Name).Params(jen.Id("n").Int()).Index().Add(t).Block(
			jen.Return(jen.Qual("unsafe", "Slice").Call(jen.Parens(jen.Op("*").Add(typeExpr(a.Type))).Call(at(a.Offset)), jen.Id("n"))))
	case layout.Value:
		ptr := jen.Parens(jen.Op("*").Add(typeExpr(a.Type))).Call(at(a.Offset))
		get := jen.Return(jen.Op("*").Add(ptr))
		set := jen.Op("*").Add(jen.Parens(jen.Op("*").Add(typeExpr(a.Type))).Call(at(a.Offset))).Op("=").Id("v")
		if !a.Aligned {
			get = jen.Return(jen.Qual(AbiutilPath, "Load").Index(typeExpr(a.Type)).Call(at(a.Offset)))
			set = jen.Qual(AbiutilPath, "Store").Call(at(a.Offset), jen.Id("v"))
		}
		f.Commentf("%s returns member %s (offset %d).", a.Name, a.CPath, a.Offset)
		f.Func().Params(recv).Id(a.Name).Params().Add(t).Block(get)
		f.Commentf("Set%s stores member %s (offset %d).", a.Name, a.CPath, a.Offset)
		f.Func().Params(jen.Id("r").Op("*").Id(typeName)).Id("Set" + a.Name).Params(jen.Id("v").Add(typeExpr(a.Type))).Block(set)
	case layout.Bits:
		args := []jen.Code{jen.Qual("unsafe", "Pointer").Call(jen.Id("r")), jen.Lit(int(a.BitOffset)), jen.Lit(a.BitSize)}
		var get, val jen.Code
		switch {
		case a.Type.Name == "bool":
			get = jen.Qual(AbiutilPath, "Bits").Call(args...).Op("!=").Lit(0)
			val = jen.Qual(AbiutilPath, "BoolBits").Call(jen.Id("v"))
		case a.Signed:
			get = typeExpr(a.Type).Call(jen.Qual(AbiutilPath, "SignedBits").Call(args...))
			val = jen.Uint64().Call(jen.Id("v"))
		default:
			get = typeExpr(a.Type).Call(jen.Qual(AbiutilPath, "Bits").Call(args...))
			val = jen.Uint64().Call(jen.Id("v"))
		}
		f.Commentf("%s returns bit-field %s (%d bits at bit %d).", a.Name, a.CPath, a.BitSize, a.BitOffset)
		f.Func().Params(recv).Id(a.Name).Params().Add(t).Block(jen.Return(get))
		f.Commentf("Set%s stores the low %d bits of v in bit-field %s.", a.Name, a.BitSize, a.CPath)
		f.Func().Params(jen.Id("r").Op("*").Id(typeName)).Id("Set" + a.Name).Params(jen.Id("v").Add(typeExpr(a.Type))).Block(
			jen.Qual(AbiutilPath, "SetBits").Call(append(args, val)...))
	}
}

// recordGuards are x[unsafe.Sizeof(T{})-N] style expressions: they compile
// only while the Go layout is the planned one.
func recordGuards(p *layout.Plan) []jen.Code {
	name := p.Record.GoName
	zero := func() *jen.Statement { return jen.Id(name).Values() }
	guard := func(e *jen.Statement, want int64) jen.Code {
		return jen.Id("_").Op("=").Id("x").Index(e.Op("-").Lit(int(want)))
	}
	g := []jen.Code{
		guard(jen.Qual("unsafe", "Sizeof").Call(zero()), p.Size),
		guard(jen.Qual("unsafe", "Alignof").Call(zero()), p.GoAlign),
	}
	for _, s := range p.Slots {
		if s.Name == "_" {
			continue
		}
		g = append(g, guard(jen.Qual("unsafe", "Offsetof").Call(zero().Dot(s.Name)), s.Offset))
	}
	return g
}
