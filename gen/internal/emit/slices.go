package emit

import (
	"fmt"
	"strings"

	"github.com/dave/jennifer/jen"

	"github.com/verbsexp/verbsexp/gen/internal/layout"
	"github.com/verbsexp/verbsexp/gen/internal/shim"
)

// sliceWord says what a slice form takes or returns, for the pointer
// form's doc comment.
var sliceWord = map[shim.SliceKind]string{
	shim.Array: "slice",
	shim.List:  "list (no count to pass or keep)",
	shim.Free:  "list (a second free is an error)",
}

// listStruct is the C struct a List form's trampoline returns: the
// array, its count and errno.
const listStruct = "verbsexp_ret_list"

// listTypes declares the List types: abiutil.List of the element.
func (in Input) listTypes(f *jen.File) {
	for _, lt := range in.Shims.Lists {
		f.Line()
		f.Commentf("%s is the list %s returns: All is the array of *%s as C", lt.GoName, returners(in.Shims, lt), lt.Elem.Name)
		f.Commentf("allocated it (not a copy); %s frees it, once for every copy of the", lt.Free.Slice.GoName)
		f.Comment("list: a second free is an error, not a double free (abiutil.List).")
		f.Type().Id(lt.GoName).Op("=").Qual(AbiutilPath, "List").Index(typeExpr(lt.Elem))
	}
}

// returners names the C functions whose slice forms return lt.
func returners(p *shim.Plan, lt *shim.ListType) string {
	var r []string
	for _, w := range p.Wrappers {
		if s := w.Slice; s != nil && s.Kind == shim.List && s.ListType == lt.GoName {
			r = append(r, w.Func.C)
		}
	}
	return strings.Join(r, " and ")
}

// listTrampolines are the C functions of the List forms: the function
// called with the address of a C local for the count, returned with the
// array and errno.
func listTrampolines(p *shim.Plan) string {
	var b strings.Builder
	for _, w := range p.Wrappers {
		s := w.Slice
		if s == nil || s.Kind != shim.List {
			continue
		}
		if b.Len() == 0 {
			fmt.Fprintf(&b, "struct %s { void *%s; int64_t %s; int32_t %s; };\n", listStruct, cRes, cN, cErr)
		}
		var params, args []string
		if !w.Func.Inline {
			params = append(params, "void *"+cFn)
		}
		for i, p := range w.Params {
			if i == s.Count {
				args = append(args, "&"+cN)
				continue
			}
			params = append(params, fmt.Sprintf("%s %s", p.CType, cParam(i)))
			args = append(args, cParam(i))
		}
		if len(params) == 0 {
			params = []string{"void"}
		}
		callee := w.Func.C
		if !w.Func.Inline {
			callee = fmt.Sprintf("((__typeof__(&%s))%s)", w.Func.C, cFn)
		}
		fmt.Fprintf(&b, "static inline struct %s %s(%s) {\n", listStruct, s.Trampoline(), strings.Join(params, ", "))
		fmt.Fprintf(&b, "\t%s %s = 0;\n\terrno = 0;\n", s.CountC, cN)
		fmt.Fprintf(&b, "\tvoid *%s = (void *)%s(%s);\n", cRes, callee, strings.Join(args, ", "))
		fmt.Fprintf(&b, "\treturn (struct %s){%s, %s, %[2]s == NULL ? errno : 0};\n}\n", listStruct, cRes, cN)
	}
	return b.String()
}

// cN is the count's C local in a List form's trampoline.
const cN = "verbsexp_n"

// sliceForm renders the slice form of w: the same C call as w's
// wrapper, with a slice (Array), a List returned (List) or taken (Free)
// in place of the parameters they stand for.
func (in Input) sliceForm(f *jen.File, w *shim.Wrapper) {
	s, fn := w.Slice, w.Func
	kind := "an exported libibverbs function, resolved at first call"
	if fn.Inline {
		kind = "an inline function of the headers, compiled into this package"
	}
	f.Commentf("%s calls %s (%s), %s,", s.GoName, fn.C, fn.Pos, kind)
	cname := jen.Lit(fn.C)
	var (
		params, args, body []jen.Code
		results            []jen.Code
		res                = w.Result
	)
	switch s.Kind {
	case shim.Array:
		ptr, count := w.Params[s.Ptr], w.Params[s.Count]
		if s.Stride >= 0 {
			f.Commentf("on the elements of %s: %s is len(%[1]s), and %s the size of one.", ptr.Go, count.C, w.Params[s.Stride].C)
		} else {
			f.Commentf("on the elements of %s: %s is len(%[1]s).", ptr.Go, count.C)
		}
		f.Commentf("An empty %s is passed as it is (count 0; NULL when nil), and C answers as for no elements;", ptr.Go)
		f.Commentf("a %s longer than %s can count is refused (EINVAL). %s takes the pointer and count.", ptr.Go, count.C, fn.GoName)
		if w.Conv == shim.Count {
			res = &layout.GoType{Kind: layout.Basic, Name: "int"}
		}
	case shim.List:
		f.Commentf("and returns its array as a %s (its length is %s), which %s frees.", s.ListType, w.Params[s.Count].C, s.Free.Slice.GoName)
		res = &layout.GoType{Kind: layout.Named, Name: s.ListType, Composite: true}
	case shim.Free:
		f.Commentf("on the array of a %s, which goes back to C once, whichever copy of the list", s.ListType)
		f.Commentf("is freed: a second free, or the zero %s, is an error (EINVAL).", s.ListType)
	}
	f.Comment(conventionDoc(w))
	if res != nil {
		results = append(results, typeExpr(res))
	}
	results = append(results, jen.Error())
	fail := func(err jen.Code) jen.Code {
		if res != nil {
			return jen.Return(zeroOf(res), err)
		}
		return jen.Return(err)
	}
	body = append(body, in.checkHeadersFirst(fail)) // headers.go: nothing is called on changed headers

	for i, p := range w.Params {
		switch {
		case s.Kind == shim.Array && i == s.Ptr:
			params = append(params, jen.Id(p.Go).Index().Add(typeExpr(s.Elem)))
		case s.Kind == shim.Free && i == 0:
			params = append(params, jen.Id(p.Go).Id(s.ListType))
		case i == s.Count || i == s.Stride:
		default:
			params = append(params, jen.Id(p.Go).Add(typeExpr(p.Type)))
			if p.Required {
				body = append(body, jen.If(jen.Id(p.Go).Op("==").Nil()).Block(
					fail(jen.Qual(AbiutilPath, "NilArg").Call(cname, jen.Lit(p.C)))))
			}
			if p.Context != "" {
				body = append(body, jen.If(jen.Id(p.Go).Dot(p.Context).Op("==").Nil()).Block(
					fail(jen.Qual(AbiutilPath, "NilArg").Call(cname, jen.Lit(p.C+"->context")))))
			}
		}
	}
	if s.Kind == shim.Array && s.Limit != "" {
		ptr, count := w.Params[s.Ptr], w.Params[s.Count]
		n := jen.Len(jen.Id(ptr.Go))
		body = append(body, jen.If(jen.Uint64().Call(n).Op(">").Qual("math", s.Limit)).Block(
			fail(jen.Qual(AbiutilPath, "TooLong").Call(cname, jen.Lit(count.C), jen.Len(jen.Id(ptr.Go)), jen.Qual("math", s.Limit)))))
	}
	sym := "sym" + fn.GoName
	if !fn.Inline {
		body = append(body,
			jen.List(jen.Id("fn"), jen.Err()).Op(":=").Id("libibverbs").Dot("Lookup").Call(jen.Op("&").Id(sym)),
			jen.If(jen.Err().Op("!=").Nil()).Block(fail(jen.Err())),
		)
		args = append(args, jen.Id("fn"))
	}
	switch s.Kind {
	case shim.Free:
		release := jen.Qual(AbiutilPath, "ReleaseList").Call(cname, jen.Id(w.Params[0].Go))
		body = append(body, jen.List(jen.Id("arr"), jen.Err()).Op(":=").Add(release))
		body = append(body, jen.If(jen.Err().Op("!=").Nil()).Block(fail(jen.Err())))
		args = append(args, jen.Qual("unsafe", "Pointer").Call(jen.Id("arr")))
		body = append(body, callAndReturn(w, jen.Qual("C", w.Trampoline).Call(args...), res)...)
	case shim.List:
		for i, p := range w.Params {
			if i != s.Count {
				args = append(args, cArg(p))
			}
		}
		v := jen.Id("ret")
		arr := jen.Parens(typeExpr(w.Result)).Call(v.Clone().Dot(cRes))
		body = append(body,
			v.Clone().Op(":=").Qual("C", s.Trampoline()).Call(args...),
			jen.If(v.Clone().Dot(cRes).Op("==").Nil()).Block(
				fail(jen.Qual(AbiutilPath, "Errno").Call(cname, jen.Qual("syscall", "Errno").Call(v.Clone().Dot(cErr))))),
			jen.List(jen.Id("arr"), jen.Err()).Op(":=").Qual(AbiutilPath, "NewList").Call(cname, arr, jen.Int().Call(v.Clone().Dot(cN))),
			jen.If(jen.Err().Op("!=").Nil()).Block(
				jen.Comment("Not registered, so not returned: back to C."),
				jen.Id(s.Free.Func.GoName).Call(arr.Clone()),
				fail(jen.Err())),
			jen.Return(jen.Id("arr"), jen.Nil()),
		)
	case shim.Array:
		ptr := w.Params[s.Ptr]
		for i, p := range w.Params {
			switch i {
			case s.Ptr:
				args = append(args, jen.Qual("unsafe", "Pointer").Call(jen.Qual("unsafe", "SliceData").Call(jen.Id(ptr.Go))))
			case s.Count:
				args = append(args, jen.Qual("C", p.CType).Call(jen.Len(jen.Id(ptr.Go))))
			case s.Stride:
				args = append(args, jen.Qual("C", p.CType).Call(jen.Qual("unsafe", "Sizeof").Call(jen.Id(ptr.Go).Index(jen.Lit(0)))))
			default:
				args = append(args, cArg(p))
			}
		}
		body = append(body, callAndReturn(w, jen.Qual("C", w.Trampoline).Call(args...), res)...)
	}
	f.Func().Id(s.GoName).Params(params...).Parens(jen.List(results...)).Block(body...)
}

// zeroOf is zero for the result types of slice forms too: a List.
func zeroOf(t *layout.GoType) jen.Code {
	if t.Kind == layout.Named && t.Composite {
		return jen.Id(t.Name).Values()
	}
	return zero(t)
}
