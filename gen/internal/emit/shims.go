package emit

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/dave/jennifer/jen"

	"github.com/verbsexp/verbsexp/gen/internal/layout"
	"github.com/verbsexp/verbsexp/gen/internal/model"
	"github.com/verbsexp/verbsexp/gen/internal/shim"
	"github.com/verbsexp/verbsexp/internal/abicheck"
	"github.com/verbsexp/verbsexp/internal/target"
)

// DynlibPath is the import path of the lazy symbol resolver.
const DynlibPath = AbiutilPath + "/dynlib"

// Library names tried, in order, for the exported verbs.
var libibverbs = []string{"libibverbs.so.1", "libibverbs.so"}

// shims renders shims.go: the cgo call wrappers. The preamble includes the
// headers the package was generated from, checks the ABI recorded in
// abi.json with _Static_assert for the target being built (layouts and
// values exactly, bounds by the relation that keeps old code valid), and
// defines one C trampoline per function.
//
// preamble is the preamble's text: shimsFile passes a placeholder and
// puts the preamble in after formatting.
func (in Input) shims(preamble string) *jen.File {
	f := in.newFile("linux && cgo")
	f.CgoPreamble(preamble)
	lib := jen.Qual(DynlibPath, "New").CallFunc(func(g *jen.Group) {
		for _, n := range libibverbs {
			g.Lit(n)
		}
	})
	if g := in.Shims.Guard; g != nil {
		lib = lib.Dot("Require").Call(jen.Qual(DynlibPath, "Guard").Values(jen.Dict{
			jen.Id("Symbol"): jen.Lit(g.Symbol), jen.Id("ABI"): jen.Lit(g.ABI), jen.Id("Fix"): jen.Lit(g.Fix),
			jen.Id("OtherSymbol"): jen.Lit(g.OtherSymbol), jen.Id("Other"): jen.Lit(g.Other),
		}))
	}
	f.Var().Id("libibverbs").Op("=").Add(lib)
	in.restatedInit(f) // headers.go
	f.Line()
	f.Comment("unpack splits a packed trampoline result: the C int in the low 32 bits, errno in the high 32.")
	f.Func().Id("unpack").Params(jen.Id("v").Qual("C", "int64_t")).Parens(jen.List(jen.Int64(), jen.Qual("syscall", "Errno"))).Block(
		jen.Return(jen.Int64().Call(jen.Int32().Call(jen.Id("v"))), jen.Qual("syscall", "Errno").Call(jen.Uint32().Call(jen.Id("v").Op(">>").Lit(32)))),
	)
	in.listTypes(f)
	for _, w := range in.Shims.Wrappers {
		f.Line()
		in.wrapper(f, w, false)
		if w.CMem != "" {
			f.Line()
			in.wrapper(f, w, true)
		}
		if w.Slice != nil {
			f.Line()
			in.sliceForm(f, w)
		}
	}
	return f
}

// preamblePlaceholder stands for the preamble while shims.go is
// formatted: the preamble is a C comment of a megabyte (its asserts)
// that go/format would only copy, at half the cost of rendering the
// package.
const preamblePlaceholder = "verbsexp/gen: the cgo preamble\n"

// shimsFile renders shims.go: formatted with the placeholder, which is
// then replaced by the preamble as jennifer writes a comment (between /*
// and */ on lines of their own). gofmt leaves the text of this comment
// as it is (it starts at column 0): TestFilesFormatted checks that gofmt
// leaves the whole file as it is.
func (in Input) shimsFile() ([]byte, error) {
	pre := in.preamble()
	b, err := in.render(in.shims(preamblePlaceholder))
	if err != nil {
		return nil, err
	}
	comment := "/*\n" + pre
	if !strings.HasSuffix(pre, "\n") {
		comment += "\n"
	}
	comment += "*/"
	placeholder := "/*\n" + preamblePlaceholder + "*/"
	if !strings.Contains(pre, "\n") || strings.Contains(pre, "*/") || bytes.Count(b, []byte(placeholder)) != 1 {
		var buf bytes.Buffer
		err := in.shims(pre).Render(&buf)
		return buf.Bytes(), err
	}
	return bytes.Replace(b, []byte(placeholder), []byte(comment), 1), nil
}

func (in Input) preamble() string {
	var b strings.Builder
	for _, flag := range in.CFlags {
		fmt.Fprintf(&b, "#cgo CFLAGS: %s\n", flag)
	}
	// Wrapping a verb the headers mark deprecated is not a use of it.
	b.WriteString("#cgo CFLAGS: -Wno-deprecated-declarations\n#cgo LDFLAGS: -ldl\n")
	b.WriteString("#include <errno.h>\n#include <stddef.h>\n#include <stdint.h>\n")
	fmt.Fprintf(&b, "#include <%s>\n\n", in.Entry)
	b.WriteString(in.restatedPreamble()) // headers.go
	// Headers that refuse themselves (the project's restatement, facing
	// rdma-core's verbs.h) have said why, once: nothing more is checked.
	b.WriteString("#ifndef VERBSEXP_HEADERS_REFUSED\n")
	b.WriteString("// The layouts this package was generated with: a different header set fails here,\n")
	b.WriteString("// what to do first and once, then each record, member and constant that differs.\n")
	// The advice names the recorded command but says to point its -I at
	// the headers being built with: rerunning it as recorded would undo
	// a user's move to other headers.
	hint := "these headers differ from the ones this package was generated from (" + in.GoGenerate + "): regenerate it with -I naming the headers you build with; for the verbsexp runtime on them, go tool gen module -I DIR -o DIR (see its -h)"
	// Layouts and the values the API passes are pinned; a bound (one past
	// the last flag, a mask of all flags) may grow, as releases move them
	// when they add flags.
	bound := map[string]abicheck.Relation{}
	for _, c := range in.Pkg.AllConsts() {
		switch c.Bound {
		case model.Reserved:
			bound[c.C] = abicheck.AtLeast
		case model.Mask:
			bound[c.C] = abicheck.HasBits
		}
	}
	rel := func(c string) abicheck.Relation { return bound[c] }
	m := in.abi
	for i, arch := range in.Pkg.Arches {
		t, _ := target.Lookup(arch)
		kw := "#elif"
		if i == 0 {
			kw = "#if"
		}
		fmt.Fprintf(&b, "%s %s\n", kw, t.CMacro)
		as := abicheck.Assertions(m.Arches[arch], arch, "", rel)
		if i == 0 {
			b.Grow(len(in.Pkg.Arches) * len(as) * 200) // the asserts are most of it
		}
		// Another release lacks macros this one defines (3.1 … 4.3 lack
		// IBV_EXP_DEVICE_ATTR_RESERVED): said by the preprocessor, once,
		// before any assertion can fail on a record those headers lack.
		missing := false
		for _, c := range in.macrosOn(arch) {
			kw := "#elif"
			if !missing {
				kw, missing = "#if", true
			}
			fmt.Fprintf(&b, "%s !defined(%s)\n#define VERBSEXP_ABI_DIFFERS 1\n#error %s\n", kw, c,
				strconv.Quote("verbsexp: these headers do not define "+c+", which the headers of this package define on "+arch+": "+hint))
		}
		if missing {
			b.WriteString("#endif\n")
		}
		b.WriteString("#ifndef VERBSEXP_ABI_DIFFERS\n")
		// All of them at once, with what to do; then each on its own.
		b.WriteString("_Static_assert(1")
		for _, a := range as {
			b.WriteString("\n\t&& ")
			b.WriteString(a.Cond)
		}
		fmt.Fprintf(&b, ", %q);\n", "verbsexp: "+hint+"; what differs on "+arch+":")
		for _, a := range as {
			b.WriteString("_Static_assert(")
			b.WriteString(a.Cond)
			b.WriteString(", ")
			b.WriteString(strconv.Quote(a.Msg)) // as %q
			b.WriteString(");\n")
		}
		b.WriteString("#endif\n")
	}
	b.WriteString("#else\n#error \"verbsexp: no layouts were generated for this architecture\"\n#endif\n\n")
	b.WriteString("#ifndef VERBSEXP_ABI_DIFFERS\n")
	if len(in.Pkg.CgoMacros) > 0 {
		b.WriteString("// Macros of the headers named as variables of the C wrappers cgo writes after\n// this preamble: undefined here, after the headers and the asserts, or cgo's C would not compile.\n")
		for _, m := range in.Pkg.CgoMacros {
			fmt.Fprintf(&b, "#undef %s\n", m)
		}
		b.WriteString("\n")
	}
	b.WriteString("// Trampolines return errno with the result in one value, read once by Go:\n")
	b.WriteString("// verbsexp_packed puts an int result in the low 32 bits and, when it is -1,\n")
	b.WriteString("// errno in the high 32; a verbsexp_ret_* struct pairs a wider result with it.\n")
	fmt.Fprintf(&b, "static inline int64_t verbsexp_packed(int32_t %[1]s) { return (int64_t)(uint32_t)%[1]s | (%[1]s == -1 ? (int64_t)errno << 32 : 0); }\n", cRes)
	seen := map[string]bool{}
	for _, w := range in.Shims.Wrappers {
		if w.Crossing == shim.WithErrno && !seen[w.CResult] {
			seen[w.CResult] = true
			fmt.Fprintf(&b, "struct %s { %s %s; int32_t %s; };\n", retStruct(w.CResult), w.CResult, cRes, cErr)
		}
	}
	b.WriteString("\n")
	for _, w := range in.Shims.Wrappers {
		b.WriteString(trampoline(w))
		if w.CMem != "" {
			b.WriteString(cmemTrampoline(w))
		}
	}
	b.WriteString(listTrampolines(in.Shims))
	b.WriteString("#endif // VERBSEXP_ABI_DIFFERS\n#endif // VERBSEXP_HEADERS_REFUSED\n")
	return b.String()
}

// macrosOn lists the integer macros of the headers that have a value on
// arch, in declaration order: the preamble first checks that the headers
// being built with define each (a preprocessor check, so a release that
// lacks one is named before any assertion fails on a record it lacks).
func (in Input) macrosOn(arch string) []string {
	i := slices.Index(in.Pkg.Arches, arch)
	var r []string
	for _, c := range in.Pkg.AllConsts() {
		if c.Macro && i >= 0 && i < len(c.Values) {
			r = append(r, c.C)
		}
	}
	return r
}

// The C names the preamble declares besides the trampolines and
// verbsexp_ret_* are in the generator's verbsexp_ namespace too, locals
// and parameters included: a header may #define fn, r or p0 (gcc accepts
// it), and parse refuses a header that defines or declares a name of
// this namespace (parse.GeneratedCName).
const (
	cFn  = "verbsexp_fn" // a trampoline's function pointer
	cRes = "verbsexp_r"  // a result: local, and field of verbsexp_ret_*
	cErr = "verbsexp_e"  // errno's field of verbsexp_ret_*
)

// cParam and cSlot name a trampoline's parameter i and its failure slot.
func cParam(i int) string { return fmt.Sprintf("verbsexp_p%d", i) }
func cSlot(i int) string  { return fmt.Sprintf("verbsexp_slot%d", i) }

// retStruct names the struct that carries a result of C type res with
// errno: verbsexp_ret_ptr, verbsexp_ret_int64_t.
func retStruct(res string) string {
	if res == "void *" {
		return "verbsexp_ret_ptr"
	}
	return "verbsexp_ret_" + res
}

// trampolineResult is the C type a trampoline returns.
func trampolineResult(w *shim.Wrapper) string {
	switch {
	case w.CResult == "":
		return "void"
	case w.Crossing == shim.Packed:
		return "int64_t"
	case w.Crossing == shim.WithErrno:
		return "struct " + retStruct(w.CResult)
	}
	return w.CResult
}

// trampoline is the C function a wrapper calls: the inline verb itself, or
// the exported one through the address resolved at run time. errno is
// cleared before the call where the convention reads it (as cgo's
// two-result form did), and a nil failure out-parameter is pointed at a
// local slot.
func trampoline(w *shim.Wrapper) string {
	var params, args, pre []string
	if !w.Func.Inline {
		params = append(params, "void *"+cFn)
	}
	for i, p := range w.Params {
		params = append(params, fmt.Sprintf("%s %s", p.CType, cParam(i)))
		args = append(args, cParam(i))
		if p.Slot {
			pre = append(pre, fmt.Sprintf("void *%s; // %s: where a nil from Go points", cSlot(i), p.C),
				fmt.Sprintf("if (%s == NULL)\n\t\t%[1]s = &%s;", cParam(i), cSlot(i)))
		}
	}
	if len(params) == 0 {
		params = []string{"void"}
	}
	callee := w.Func.C
	if !w.Func.Inline {
		callee = fmt.Sprintf("((__typeof__(&%s))%s)", w.Func.C, cFn)
	}
	call := fmt.Sprintf("%s(%s)", callee, strings.Join(args, ", "))
	if w.CResult == "void *" {
		call = "(void *)" + call // drops const of const char * results
	}
	var body []string
	switch w.Crossing {
	case shim.Packed:
		body = []string{"errno = 0;", "return verbsexp_packed(" + call + ");"}
	case shim.WithErrno:
		fail := cRes + " == -1"
		if w.Conv == shim.Pointer {
			fail = cRes + " == NULL"
		}
		body = []string{"errno = 0;", fmt.Sprintf("%s %s = %s;", w.CResult, cRes, call),
			fmt.Sprintf("return (struct %s){%s, %s ? errno : 0};", retStruct(w.CResult), cRes, fail)}
	default:
		if w.CResult == "" {
			body = []string{call + ";"}
		} else {
			body = []string{"return " + call + ";"}
		}
	}
	head := fmt.Sprintf("static inline %s %s(%s)", trampolineResult(w), w.Trampoline, strings.Join(params, ", "))
	if len(pre) == 0 && len(body) == 1 {
		return fmt.Sprintf("%s { %s }\n", head, body[0])
	}
	return fmt.Sprintf("%s {\n\t%s\n}\n", head, strings.Join(append(pre, body...), "\n\t"))
}

// cmemTrampoline is the address form's C function: pointers arrive as
// uintptr_t (C memory, so cgo has nothing to check) and go to the
// ordinary trampoline, which runs the same code.
func cmemTrampoline(w *shim.Wrapper) string {
	var params, args []string
	if !w.Func.Inline {
		params, args = append(params, "void *"+cFn), append(args, cFn)
	}
	for i, p := range w.Params {
		if isPointer(p) {
			params = append(params, "uintptr_t "+cParam(i))
			args = append(args, "(void *)"+cParam(i))
		} else {
			params = append(params, fmt.Sprintf("%s %s", p.CType, cParam(i)))
			args = append(args, cParam(i))
		}
	}
	if len(params) == 0 {
		params = []string{"void"}
	}
	ret := "return "
	if w.CResult == "" {
		ret = ""
	}
	return fmt.Sprintf("static %s %s(%s) { %s%s(%s); }\n", trampolineResult(w), w.CMemTrampoline(), strings.Join(params, ", "), ret, w.Trampoline, strings.Join(args, ", "))
}

// wrapper renders the Go function of w, or with cmem its address form.
func (in Input) wrapper(f *jen.File, w *shim.Wrapper, cmem bool) {
	fn := w.Func
	kind := "an exported libibverbs function, resolved at first call"
	if fn.Inline {
		kind = "an inline function of the headers, compiled into this package"
	}
	sym := "sym" + fn.GoName
	name, tramp := fn.GoName, w.Trampoline
	if cmem {
		name, tramp = w.CMem, w.CMemTrampoline()
		f.Commentf("%s is %s for arguments in C memory: each pointer is passed as the", name, fn.GoName)
		f.Comment("address of C memory (an arena a runtime allocated with malloc, say), which")
		f.Comment("cgo does not check; the address of Go memory breaks cgo's pointer rules here.")
		f.Comment("It runs the same trampoline, so the same code, as " + fn.GoName + ".")
	} else {
		if !fn.Inline {
			f.Var().Id(sym).Op("=").Qual(DynlibPath, "Sym").Values(jen.Dict{jen.Id("Name"): jen.Lit(fn.C)})
			f.Line()
		}
		f.Commentf("%s calls %s (%s), %s.", fn.GoName, fn.C, fn.Pos, kind)
		f.Comment(conventionDoc(w))
		for _, p := range w.Params {
			if p.Slot {
				f.Commentf("%s may be nil: the failing request is then not reported.", p.Go)
			}
		}
		if w.Slice != nil {
			f.Commentf("%s is its form with a %s.", w.Slice.GoName, sliceWord[w.Slice.Kind])
		}
	}

	var params []jen.Code
	for _, p := range w.Params {
		t := typeExpr(p.Type)
		if cmem && isPointer(p) {
			t = jen.Uintptr()
		}
		params = append(params, jen.Id(p.Go).Add(t))
	}
	var results []jen.Code
	if w.Result != nil {
		results = append(results, typeExpr(w.Result))
	}
	results = append(results, jen.Error())
	fail := func(err jen.Code) jen.Code {
		if w.Result != nil {
			return jen.Return(zero(w.Result), err)
		}
		return jen.Return(err)
	}

	body := []jen.Code{in.checkHeadersFirst(fail)} // headers.go
	for _, p := range w.Params {
		if p.Required {
			none := jen.Nil()
			if cmem {
				none = jen.Lit(0)
			}
			body = append(body, jen.If(jen.Id(p.Go).Op("==").Add(none)).Block(
				fail(jen.Qual(AbiutilPath, "NilArg").Call(jen.Lit(fn.C), jen.Lit(p.C)))))
		}
		if p.Context != "" && !cmem {
			body = append(body, jen.If(jen.Id(p.Go).Dot(p.Context).Op("==").Nil()).Block(
				fail(jen.Qual(AbiutilPath, "NilArg").Call(jen.Lit(fn.C), jen.Lit(p.C+"->context")))))
		}
	}
	var args []jen.Code
	if !fn.Inline {
		body = append(body,
			jen.List(jen.Id("fn"), jen.Err()).Op(":=").Id("libibverbs").Dot("Lookup").Call(jen.Op("&").Id(sym)),
			jen.If(jen.Err().Op("!=").Nil()).Block(fail(jen.Err())),
		)
		args = append(args, jen.Id("fn"))
	}
	for _, p := range w.Params {
		if cmem && isPointer(p) {
			args = append(args, jen.Qual("C", "uintptr_t").Call(jen.Id(p.Go)))
		} else {
			args = append(args, cArg(p))
		}
	}
	call := jen.Qual("C", tramp).Call(args...)
	body = append(body, callAndReturn(w, call, w.Result)...)
	f.Func().Id(name).Params(params...).Parens(jen.List(results...)).Block(body...)
}

// callAndReturn makes the trampoline call and returns as w's convention
// says, the result as res (the wrapper's result type: a count is an int
// in a slice form).
func callAndReturn(w *shim.Wrapper, call *jen.Statement, res *layout.GoType) []jen.Code {
	var body []jen.Code
	cname := jen.Lit(w.Func.C)
	r, errno, v := jen.Id("r"), jen.Id("errno"), jen.Id("ret")
	switch w.Crossing {
	case shim.Packed:
		body = append(body, jen.List(r, errno).Op(":=").Id("unpack").Call(call))
	case shim.WithErrno:
		body = append(body, v.Clone().Op(":=").Add(call))
		r, errno = v.Clone().Dot(cRes), jen.Qual("syscall", "Errno").Call(v.Clone().Dot(cErr))
		if w.Conv != shim.Pointer {
			r = jen.Int64().Call(r)
		}
	}
	switch w.Conv {
	case shim.Void:
		body = append(body, call, jen.Return(jen.Nil()))
	case shim.Status:
		body = append(body, jen.Return(jen.Qual(AbiutilPath, "Status").Call(cname, r, errno)))
	case shim.Count:
		body = append(body,
			jen.If(r.Clone().Op("<").Lit(0)).Block(
				jen.Return(jen.Lit(0), jen.Qual(AbiutilPath, "Status").Call(cname, r, errno))),
			jen.Return(goResult(w, res, r), jen.Nil()))
	case shim.Pointer:
		body = append(body,
			jen.If(r.Clone().Op("==").Nil()).Block(
				jen.Return(zero(res), jen.Qual(AbiutilPath, "Errno").Call(cname, errno))),
			jen.Return(goResult(w, res, r), jen.Nil()))
	case shim.Value:
		body = append(body, jen.Return(goResult(w, res, call), jen.Nil()))
	}
	return body
}

func isPointer(p shim.Param) bool { return p.CType == "void *" }

func conventionDoc(w *shim.Wrapper) string {
	var s string
	switch w.Conv {
	case shim.Status:
		return "It returns nil on success, else a *abiutil.CallError wrapping the errno."
	case shim.Count:
		return "It returns the count C returns, or a *abiutil.CallError wrapping the errno when C fails."
	case shim.Pointer:
		s = "A NULL result becomes a *abiutil.CallError wrapping errno."
		if w.String {
			s = "The C string comes back as a Go copy; a NULL result is \"\" with a *abiutil.CallError wrapping errno."
		}
		return s
	case shim.Value:
		s = "Its result does not signal failure; the error reports only arguments and symbol resolution."
		if w.String {
			s = "The C string comes back as a Go copy (NULL as \"\"); the error reports only arguments and symbol resolution."
		}
		return s
	}
	return "The error reports only arguments and symbol resolution."
}

// cArg converts a Go argument to the trampoline's C parameter.
func cArg(p shim.Param) jen.Code {
	id := jen.Id(p.Go)
	switch p.Type.Kind {
	case layout.UnsafePointer:
		return id
	case layout.Ptr:
		return jen.Qual("unsafe", "Pointer").Call(id)
	}
	return jen.Qual("C", p.CType).Call(id) // a scalar: int32_t, _Bool, double, …
}

// goResult converts a trampoline result to the wrapper's Go type t.
func goResult(w *shim.Wrapper, t *layout.GoType, v jen.Code) jen.Code {
	switch {
	case w.String:
		return jen.Qual("C", "GoString").Call(jen.Parens(jen.Op("*").Qual("C", "char")).Call(v))
	case t.Kind == layout.UnsafePointer:
		return v
	case t.Kind == layout.Ptr:
		return jen.Parens(typeExpr(t)).Call(v)
	}
	return typeExpr(t).Call(v)
}

func zero(t *layout.GoType) jen.Code {
	switch t.Kind {
	case layout.Ptr, layout.UnsafePointer:
		return jen.Nil()
	}
	switch t.Name {
	case "bool":
		return jen.False()
	case "string":
		return jen.Lit("")
	}
	return jen.Lit(0)
}

// stubs renders stubs_linux.c: weak definitions of the exported verbs, so
// that the headers' inline functions that call them (ibv_exp_create_qp
// falls back to ibv_create_qp, say) link without libibverbs. Each resolves
// its function at its first call as the Go wrappers do, through package
// dynlib's C side: a function provided with dynlib.Provide first, else the
// library's own, refused when the library lacks the guard's symbol; and
// it fails with ENOSYS when it cannot. It is a separate translation unit
// because its definitions spell the parameters the trampolines' way
// (void *, stdint), which the headers' prototypes would contradict; on the
// supported ABIs both spellings pass arguments identically.
func (in Input) stubs() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "//go:build linux && cgo\n\n// %s\n// Code generated by %s; DO NOT EDIT.\n\n", in.Command, Generator)
	b.WriteString("#include <errno.h>\n#include <stddef.h>\n#include <stdint.h>\n\n")
	b.WriteString("// Package dynlib's resolver (abiutil/dynlib/dynlib.h), weak because cgo links\n// this package's C alone first; the program, which imports dynlib, defines it.\n")
	b.WriteString("extern void *verbsexp_dynlib_resolve(const char *const *names, const char *marker, const char *name) __attribute__((weak));\n\n")
	b.WriteString("static const char *const verbsexp_libs[] = {")
	for _, n := range libibverbs {
		fmt.Fprintf(&b, "%q, ", n)
	}
	b.WriteString("NULL};\n\n")
	marker := "NULL"
	if g := in.Shims.Guard; g != nil {
		marker = fmt.Sprintf("%q", g.Symbol)
	}
	b.WriteString("static void *verbsexp_resolve(const char *name) {\n")
	b.WriteString("\tif (verbsexp_dynlib_resolve == NULL)\n\t\treturn NULL;\n")
	fmt.Fprintf(&b, "\treturn verbsexp_dynlib_resolve(verbsexp_libs, %s, name);\n}\n", marker)
	for _, w := range in.Shims.Wrappers {
		if w.Func.Inline {
			continue
		}
		var params, args, types []string
		for i, p := range w.Params {
			params = append(params, fmt.Sprintf("%s p%d", p.CType, i))
			args = append(args, fmt.Sprintf("p%d", i))
			types = append(types, p.CType)
		}
		if len(params) == 0 {
			params, types = []string{"void"}, []string{"void"}
		}
		res := w.CResult
		if res == "" {
			res = "void"
		}
		var fail string
		switch {
		case res == "void":
			fail = "errno = ENOSYS; return;"
		case w.Conv == shim.Pointer || res == "void *":
			fail = "errno = ENOSYS; return NULL;"
		case w.Conv == shim.Status:
			fail = "errno = ENOSYS; return ENOSYS;"
		case w.Conv == shim.Count:
			fail = "errno = ENOSYS; return -ENOSYS;"
		default:
			fail = "errno = ENOSYS; return 0;"
		}
		ret := "return "
		if res == "void" {
			ret = ""
		}
		fmt.Fprintf(&b, "\n__attribute__((weak)) %s %s(%s) {\n", res, w.Func.C, strings.Join(params, ", "))
		b.WriteString("\tstatic void *fn;\n\tvoid *f = __atomic_load_n(&fn, __ATOMIC_ACQUIRE);\n")
		fmt.Fprintf(&b, "\tif (f == NULL) {\n\t\tf = verbsexp_resolve(%q);\n\t\tif (f == NULL) {\n\t\t\t%s\n\t\t}\n\t\t__atomic_store_n(&fn, f, __ATOMIC_RELEASE);\n\t}\n", w.Func.C, fail)
		fmt.Fprintf(&b, "\t%s((%s (*)(%s))f)(%s);\n}\n", ret, res, strings.Join(types, ", "), strings.Join(args, ", "))
	}
	return []byte(b.String())
}
