package emit

import (
	"math/bits"
	"strconv"

	"github.com/dave/jennifer/jen"

	"github.com/verbsexp/verbsexp/gen/internal/layout"
	"github.com/verbsexp/verbsexp/gen/internal/model"
	"github.com/verbsexp/verbsexp/internal/cint"
)

// consts renders enum types with their constants and String methods, and
// the untyped constants, for every value that is the same on all targets.
func (in Input) consts() *jen.File {
	f := in.newFile("")
	for _, e := range in.Pkg.Enums {
		if !enumSameOnAllArches(e) {
			continue
		}
		f.Line()
		in.enum(f, e, 0)
	}
	var defs []jen.Code
	for _, c := range in.Pkg.Consts {
		if c.SameOnAllArches() {
			defs = append(defs, constDef(c, 0))
		}
	}
	if len(defs) > 0 {
		f.Line()
		f.Comment("Constants of anonymous enums and integer macros.")
		f.Const().Defs(defs...)
	}
	return f
}

// archConsts renders, into a per-arch file, the enums and constants whose
// value differs between targets (sizeof in a macro, say).
func (in Input) archConsts(f *jen.File, i int) {
	for _, e := range in.Pkg.Enums {
		if !enumSameOnAllArches(e) {
			f.Line()
			in.enum(f, e, i)
		}
	}
	var defs []jen.Code
	for _, c := range in.Pkg.Consts {
		if !c.SameOnAllArches() {
			defs = append(defs, constDef(c, i))
		}
	}
	if len(defs) > 0 {
		f.Line()
		f.Comment("Constants whose value depends on the target.")
		f.Const().Defs(defs...)
	}
}

func enumSameOnAllArches(e *model.Enum) bool {
	for _, c := range e.Values {
		if !c.SameOnAllArches() {
			return false
		}
	}
	return true
}

func constDef(c *model.Const, arch int) jen.Code {
	return jen.Id(c.GoName).Op("=").Add(valueLit(c.Values[arch])).Comment(c.C + " (" + c.Pos.String() + ")")
}

// valueLit spells a constant: single bits from 16 up in hex, the rest in
// decimal.
func valueLit(v cint.Value) jen.Code {
	if !v.Negative() && v.Bits >= 16 && bits.OnesCount64(v.Bits) == 1 {
		return jen.Id("0x" + strconv.FormatUint(v.Bits, 16))
	}
	return jen.Id(v.String())
}

func (in Input) enum(f *jen.File, e *model.Enum, arch int) {
	under := layout.IntName(e.Size, e.Signed)
	f.Commentf("%s is %s (%s).", e.GoName, e.C, e.Pos)
	f.Type().Id(e.GoName).Id(under)
	if len(e.Values) == 0 {
		return
	}
	var defs []jen.Code
	for _, c := range e.Values {
		defs = append(defs, jen.Id(c.GoName).Id(e.GoName).Op("=").Add(valueLit(c.Values[arch])).Comment(c.C))
	}
	f.Const().Defs(defs...)

	// String: the first name of each value, as stringer does; flag enums
	// spell other values as their bits.
	seen := map[uint64]bool{}
	var cases []jen.Code
	isFlags := len(e.Values) > 1
	var flags []jen.Code
	for _, c := range e.Values {
		v := c.Values[arch]
		if v.Negative() || bits.OnesCount64(v.Bits) > 1 {
			isFlags = false
		}
		if seen[v.Bits] {
			continue
		}
		seen[v.Bits] = true
		cases = append(cases, jen.Case(jen.Id(c.GoName)).Block(jen.Return(jen.Lit(c.GoName))))
		if v.Bits != 0 {
			flags = append(flags, jen.Values(jen.Dict{jen.Id("Value"): valueLit(v), jen.Id("Name"): jen.Lit(c.GoName)}))
		}
	}
	var fallback jen.Code
	if isFlags {
		table := "flags" + e.GoName
		f.Var().Id(table).Op("=").Index().Qual(AbiutilPath, "Flag").Custom(jen.Options{Open: "{", Close: "}", Separator: ",", Multi: true}, flags...)
		fallback = jen.Return(jen.Qual(AbiutilPath, "FlagString").Call(jen.Uint64().Call(jen.Id("v")), jen.Id(table), jen.Lit(e.GoName)))
	} else if e.Signed {
		fallback = jen.Return(jen.Lit(e.GoName+"(").Op("+").Qual("strconv", "FormatInt").Call(jen.Int64().Call(jen.Id("v")), jen.Lit(10)).Op("+").Lit(")"))
	} else {
		fallback = jen.Return(jen.Lit(e.GoName+"(").Op("+").Qual("strconv", "FormatUint").Call(jen.Uint64().Call(jen.Id("v")), jen.Lit(10)).Op("+").Lit(")"))
	}
	f.Commentf("String returns the Go name of v; values without a name are spelled %s.", map[bool]string{true: "as their named bits", false: "as numbers"}[isFlags])
	f.Func().Params(jen.Id("v").Id(e.GoName)).Id("String").Params().String().Block(
		jen.Switch(jen.Id("v")).Block(cases...),
		fallback,
	)
}
