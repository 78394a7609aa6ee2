package emit

import (
	"fmt"
	"strings"

	"github.com/dave/jennifer/jen"

	"github.com/verbsexp/verbsexp/gen/internal/layout"
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
// abi.json with _Static_assert for the target being built, and defines one
// C trampoline per function.
func (in Input) shims() *jen.File {
	f := in.newFile("linux && cgo")
	f.CgoPreamble(in.preamble())
	f.Var().Id("libibverbs").Op("=").Qual(DynlibPath, "New").CallFunc(func(g *jen.Group) {
		for _, n := range libibverbs {
			g.Lit(n)
		}
	})
	f.Line()
	f.Comment("errnoOf extracts the errno of a two-result cgo call.")
	f.Func().Id("errnoOf").Params(jen.Id("err").Error()).Qual("syscall", "Errno").Block(
		jen.List(jen.Id("e"), jen.Id("_")).Op(":=").Id("err").Assert(jen.Qual("syscall", "Errno")),
		jen.Return(jen.Id("e")),
	)
	for _, w := range in.Shims.Wrappers {
		f.Line()
		in.wrapper(f, w)
	}
	return f
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
	b.WriteString("// The layouts this package was generated with: a different header set fails here.\n")
	// The advice names the recorded command but says to point its -I at
	// the headers being built with: rerunning it as recorded would undo
	// a user's move to other headers.
	fmt.Fprintf(&b, "#define VERBSEXP_REGENERATE %q\n", "; these headers differ from the ones this package was generated from ("+in.GoGenerate+"): regenerate it with -I naming the headers you build with")
	m := in.abi
	for i, arch := range in.Pkg.Arches {
		t, _ := target.Lookup(arch)
		kw := "#elif"
		if i == 0 {
			kw = "#if"
		}
		fmt.Fprintf(&b, "%s %s\n", kw, t.CMacro)
		for _, a := range abicheck.Assertions(m.Arches[arch], arch, "") {
			fmt.Fprintf(&b, "_Static_assert(%s, %q VERBSEXP_REGENERATE);\n", a.Cond, a.Msg)
		}
	}
	b.WriteString("#else\n#error \"verbsexp: no layouts were generated for this architecture\"\n#endif\n\n")
	for _, w := range in.Shims.Wrappers {
		b.WriteString(trampoline(w))
	}
	return b.String()
}

// trampoline is the C function a wrapper calls: the inline verb itself, or
// the exported one through the address resolved at run time.
func trampoline(w *shim.Wrapper) string {
	var params, args []string
	if !w.Func.Inline {
		params = append(params, "void *fn")
	}
	for i, p := range w.Params {
		params = append(params, fmt.Sprintf("%s p%d", p.CType, i))
		args = append(args, fmt.Sprintf("p%d", i))
	}
	if len(params) == 0 {
		params = []string{"void"}
	}
	callee := w.Func.C
	if !w.Func.Inline {
		callee = fmt.Sprintf("((__typeof__(&%s))fn)", w.Func.C)
	}
	call := fmt.Sprintf("%s(%s)", callee, strings.Join(args, ", "))
	res := w.CResult
	body := "return " + call + ";"
	if res == "void *" {
		body = "return (void *)" + call + ";" // drops const of const char * results
	}
	if res == "" {
		res = "void"
		body = call + ";"
	}
	return fmt.Sprintf("static %s %s(%s) { %s }\n", res, w.Trampoline, strings.Join(params, ", "), body)
}

func (in Input) wrapper(f *jen.File, w *shim.Wrapper) {
	fn := w.Func
	kind := "an exported libibverbs function, resolved at first call"
	if fn.Inline {
		kind = "an inline function of the headers, compiled into this package"
	}
	sym := "sym" + fn.GoName
	if !fn.Inline {
		f.Var().Id(sym).Op("=").Qual(DynlibPath, "Sym").Values(jen.Dict{jen.Id("Name"): jen.Lit(fn.C)})
		f.Line()
	}
	f.Commentf("%s calls %s (%s), %s.", fn.GoName, fn.C, fn.Pos, kind)
	f.Comment(conventionDoc(w))

	var params []jen.Code
	for _, p := range w.Params {
		params = append(params, jen.Id(p.Go).Add(typeExpr(p.Type)))
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

	var body []jen.Code
	for _, p := range w.Params {
		if p.Required {
			body = append(body, jen.If(jen.Id(p.Go).Op("==").Nil()).Block(
				fail(jen.Qual(AbiutilPath, "NilArg").Call(jen.Lit(fn.C), jen.Lit(p.C)))))
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
		args = append(args, cArg(p))
	}
	call := jen.Qual("C", w.Trampoline).Call(args...)
	name := jen.Lit(fn.C)
	switch w.Conv {
	case shim.Void:
		body = append(body, call, jen.Return(jen.Nil()))
	case shim.Status:
		body = append(body,
			jen.List(jen.Id("r"), jen.Id("errno")).Op(":=").Add(call),
			jen.Return(jen.Qual(AbiutilPath, "Status").Call(name, jen.Int64().Call(jen.Id("r")), jen.Id("errnoOf").Call(jen.Id("errno")))))
	case shim.Count:
		body = append(body,
			jen.List(jen.Id("r"), jen.Id("errno")).Op(":=").Add(call),
			jen.If(jen.Id("r").Op("<").Lit(0)).Block(
				jen.Return(jen.Lit(0), jen.Qual(AbiutilPath, "Status").Call(name, jen.Int64().Call(jen.Id("r")), jen.Id("errnoOf").Call(jen.Id("errno"))))),
			jen.Return(goResult(w.Result, jen.Id("r")), jen.Nil()))
	case shim.Pointer:
		body = append(body,
			jen.List(jen.Id("r"), jen.Id("errno")).Op(":=").Add(call),
			jen.If(jen.Id("r").Op("==").Nil()).Block(
				jen.Return(jen.Nil(), jen.Qual(AbiutilPath, "Errno").Call(name, jen.Id("errnoOf").Call(jen.Id("errno"))))),
			jen.Return(goResult(w.Result, jen.Id("r")), jen.Nil()))
	case shim.Value:
		body = append(body, jen.Return(goResult(w.Result, call), jen.Nil()))
	}
	f.Func().Id(fn.GoName).Params(params...).Parens(jen.List(results...)).Block(body...)
}

func conventionDoc(w *shim.Wrapper) string {
	switch w.Conv {
	case shim.Status:
		return "It returns nil on success, else a *abiutil.CallError wrapping the errno."
	case shim.Count:
		return "It returns the count C returns, or a *abiutil.CallError wrapping the errno when C fails."
	case shim.Pointer:
		return "A NULL result becomes a *abiutil.CallError wrapping errno."
	case shim.Value:
		return "Its result does not signal failure; the error reports only arguments and symbol resolution."
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

// goResult converts a trampoline result to the wrapper's Go type.
func goResult(t *layout.GoType, v jen.Code) jen.Code {
	switch t.Kind {
	case layout.UnsafePointer:
		return v
	case layout.Ptr:
		return jen.Parens(typeExpr(t)).Call(v)
	}
	return typeExpr(t).Call(v)
}

func zero(t *layout.GoType) jen.Code {
	switch t.Kind {
	case layout.Ptr, layout.UnsafePointer:
		return jen.Nil()
	}
	if t.Name == "bool" {
		return jen.False()
	}
	return jen.Lit(0)
}

// stubs renders stubs_linux.c: weak definitions of the exported verbs, so
// that the headers' inline functions that call them (ibv_exp_create_qp
// falls back to ibv_create_qp, say) link without libibverbs. Each resolves
// the real function from the library at its first call and fails with
// ENOSYS when it cannot. It is a separate translation unit because its
// definitions spell the parameters the trampolines' way (void *, stdint),
// which the headers' prototypes would contradict; on the supported ABIs
// both spellings pass arguments identically.
func (in Input) stubs() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "//go:build linux && cgo\n\n// %s\n// Code generated by %s; DO NOT EDIT.\n\n", in.Command, Generator)
	b.WriteString("#include <dlfcn.h>\n#include <errno.h>\n#include <stddef.h>\n#include <stdint.h>\n\n")
	b.WriteString("static void *verbsexp_resolve(const char *name) {\n")
	b.WriteString("\tstatic void *lib;\n\tvoid *h = __atomic_load_n(&lib, __ATOMIC_ACQUIRE);\n\tif (h == NULL) {\n")
	for i, n := range libibverbs {
		if i == 0 {
			fmt.Fprintf(&b, "\t\th = dlopen(%q, RTLD_NOW | RTLD_GLOBAL);\n", n)
		} else {
			fmt.Fprintf(&b, "\t\tif (h == NULL)\n\t\t\th = dlopen(%q, RTLD_NOW | RTLD_GLOBAL);\n", n)
		}
	}
	b.WriteString("\t\tif (h == NULL)\n\t\t\treturn NULL;\n\t\t__atomic_store_n(&lib, h, __ATOMIC_RELEASE);\n\t}\n\treturn dlsym(h, name);\n}\n")
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
