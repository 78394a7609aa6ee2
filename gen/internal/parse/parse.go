package parse

import (
	"fmt"
	"github.com/verbsexp/verbsexp/internal/abicheck"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"

	"modernc.org/cc/v4"

	"github.com/verbsexp/verbsexp/internal/cint"
	"github.com/verbsexp/verbsexp/internal/inputfile"
	"github.com/verbsexp/verbsexp/internal/manifest"
)

// Options says what to read.
type Options struct {
	IncludeDirs []string // searched first, in order
	Entry       string   // the header to include, e.g. infiniband/verbs_exp.h
	// ScopeDir selects the headers whose declarations are in scope: those
	// under ScopeDir inside an include directory ("" means everything under
	// the include directories). System headers are never in scope.
	ScopeDir string
	// Checked says the compiler already accepted these headers
	// (CheckInputs, for the translated target), so Translate need not
	// run it again.
	Checked bool

	record *depRecorder // set by TranslateUnit (cache.go): what the front end reads
}

// DefaultEntry and DefaultScope describe MLNX_OFED's layout.
const (
	DefaultEntry = "infiniband/verbs_exp.h"
	DefaultScope = "infiniband"
)

// CheckEntry verifies that the entry header is a file in one of the
// include directories, so a wrong -I is reported plainly instead of as a
// preprocessor error. Upstream rdma-core headers (verbs.h, no
// verbs_exp.h) are recognised and the -entry values for them named.
func CheckEntry(opts Options) error {
	if !manifest.HeaderPath(opts.Entry) {
		return fmt.Errorf("entry header %q: want a header path relative to an include directory, of letters, digits and _ - . + / only (it is spelled in #include <…> and in Go comments)", opts.Entry)
	}
	for _, d := range opts.IncludeDirs {
		p := filepath.Join(d, opts.Entry)
		fi, err := os.Stat(p)
		switch {
		case err != nil:
			continue
		case fi.Mode().IsRegular():
			return nil
		case fi.IsDir():
			return fmt.Errorf("%s is a directory, not a header file; pass -I DIR where DIR/%s is the header (e.g. -I headers, or -I /usr/include for an installed MLNX_OFED)", p, opts.Entry)
		default:
			return fmt.Errorf("%s is %s, not a header file: the generator reads only regular files", p, inputfile.Describe(fi.Mode()))
		}
	}
	missing := fmt.Sprintf("%s not found in the include directories %q", opts.Entry, opts.IncludeDirs)
	if opts.Entry == DefaultEntry {
		for _, d := range opts.IncludeDirs {
			if _, err := os.Stat(filepath.Join(d, "infiniband", "verbs.h")); err == nil {
				return fmt.Errorf("%s, but %s is there: these look like upstream rdma-core headers (MLNX_OFED 5.1 and later, Debian's libibverbs-dev), which have no experimental verbs; generate from them with -entry infiniband/verbs.h (the verbs) or -entry infiniband/mlx5dv.h (mlx5 direct verbs), or pass -I DIR of an MLNX_OFED 3.x–4.x",
					missing, filepath.Join(d, "infiniband", "verbs.h"))
			}
		}
	}
	// Say what is wrong with the directories given: one that does not
	// exist, or one level off (-I …/include/infiniband, -I …/4.9).
	var why []string
	for _, d := range opts.IncludeDirs {
		if _, err := os.Stat(d); err != nil {
			why = append(why, fmt.Sprintf("-I %s: no such directory", d))
			continue
		}
		for _, near := range []string{filepath.Dir(filepath.Clean(d)), filepath.Join(d, "include")} {
			if fi, err := os.Stat(filepath.Join(near, opts.Entry)); err == nil && fi.Mode().IsRegular() {
				why = append(why, fmt.Sprintf("-I %s: %s is there: pass -I %s", d, filepath.Join(near, opts.Entry), near))
				break
			}
		}
	}
	if len(why) > 0 {
		return fmt.Errorf("%s (%s)", missing, strings.Join(why, "; "))
	}
	hint := ""
	const system = "/usr/include"
	if _, err := os.Stat(filepath.Join(system, opts.Entry)); err == nil && !slices.Contains(opts.IncludeDirs, system) {
		hint = " (" + system + " has it: -I " + system + ")"
	}
	return fmt.Errorf("%s; pass -I DIR where DIR/%s exists%s, or name another header with -entry", missing, opts.Entry, hint)
}

// Translate preprocesses, parses and type-checks the entry header with cfg
// (a Compiler's, from FindCompiler) and extracts the declarations in scope. cache may be nil.
func Translate(goarch string, cfg0 *cc.Config, opts Options, cache *cc.SourceCache) (u *Unit, err error) {
	defer func() {
		// cc/v4 is a large front end fed with arbitrary headers; a panic
		// inside it must come out as an error, not a stack trace.
		if r := recover(); r != nil {
			u, err = nil, fmt.Errorf("linux/%s: the C front end failed on this input (%v); please report it with the headers used", goarch, r)
		}
	}()
	cfg := *cfg0
	cfg.ABILayout = true
	cfg.EvalAllMacros = true
	cfg.UnsignedEnums = true
	cfg.Header = true
	// No expansion limit: reached in EvalAllMacros it would leave
	// constants out silently. The child's memory and CPU time bound the
	// work instead (contain.go).
	cfg.ExpansionLimit = 0
	cfg.SourceCache = cache
	dirs, err := absDirs(opts.IncludeDirs)
	if err != nil {
		return nil, err
	}
	sfs := newSourceFS(dirs)
	cfg.FS = opts.record.wrap(sfs) // record: see cache.go
	cfg.PragmaHandler = sfs.pragma
	cfg.FSOnly = true
	cfg.IncludePaths = append(append([]string{""}, dirs...), cfg0.IncludePaths...)
	cfg.SysIncludePaths = append(append([]string(nil), dirs...), cfg0.SysIncludePaths...)
	src := []cc.Source{
		{Name: "<predefined>", Value: cfg.Predefined},
		{Name: "<builtin>", Value: cc.Builtin},
		{Name: "<verbsexp>", Value: fmt.Sprintf("#define %s 1\n#include <%s>\n", abicheck.RestatementOnly, opts.Entry)},
	}
	// The target's compiler checks the headers first, and cc only sees
	// what it accepts: cc/v4 (v4.34.0) loops forever, allocating, on some
	// invalid input (a header ending inside a declarator, `int *`: found
	// by FuzzGenerate), and the compiler's diagnostics are the ones users
	// know. It costs one `cc -fsyntax-only` (~30 ms on the real headers).
	if !opts.Checked {
		if err := checkHeaders(goarch, cfg0, dirs, opts.Entry); err != nil {
			return nil, err
		}
	}
	ast, err := cc.Translate(&cfg, src)
	if refused := sfs.refusal(); refused != nil {
		return nil, inputError(goarch, refused)
	}
	if err != nil {
		return nil, ccError(goarch, cfg0.CC != "", err)
	}
	x := &extractor{
		unit:     &Unit{GoArch: goarch},
		dirs:     dirs,
		scope:    opts.ScopeDir,
		inScope:  map[string]*Input{},
		outside:  map[string]bool{},
		records:  map[string]*Record{},
		opaque:   map[string]*Record{},
		funcs:    map[string]bool{},
		enumTags: map[string]bool{},
		ignored:  map[*cc.Declarator]string{},

		ignoredUnnamed: map[cc.Type]unnamedAttr{},
	}
	x.markTypedefs(ast.TranslationUnit)
	x.unit.stats = sfs.st.stats
	x.unit.Read = sfs.readPaths()
	var untraced []string
	x.unit.Headers, untraced = sfs.headerPaths()
	names := make([]string, 0, len(ast.Macros))
	for name := range ast.Macros {
		names = append(names, name)
	}
	x.unit.Conds = condsTaken(names, untraced)
	x.walk(reflect.ValueOf(ast.TranslationUnit))
	x.macros(ast)
	if names := x.redefined(ast); len(names) > 0 {
		if err := x.finalValues(goarch, &cfg, src, dirs, opts, ast, names); err != nil {
			return nil, err
		}
	}
	x.finish()
	if err := x.generatedNames(ast); err != nil {
		return nil, inputError(goarch, err)
	}
	if r := x.tooDeep; r != nil {
		return nil, fmt.Errorf("%s: %s nests unnamed records more than %d deep: every nested record's Go name and manifest path spells the path to it, so the package would grow with the square of the depth (30 MB at %d; the real headers nest 4 deep): nest them less, or name the inner records", r.Pos, r.CName(), maxRecordNesting, maxRecordNesting)
	}
	for name, m := range ast.Macros {
		if !m.IsFnLike && cgoWrapperName(name) {
			x.unit.CgoMacros = append(x.unit.CgoMacros, name)
		}
	}
	sort.Strings(x.unit.CgoMacros)
	return x.unit, nil
}

// baseSpelling spells the C types a probe asks about by name.
var baseSpelling = map[cc.Kind]string{
	cc.Bool: "_Bool", cc.Char: "char", cc.SChar: "signed char", cc.UChar: "unsigned char",
	cc.Short: "short", cc.UShort: "unsigned short", cc.Int: "int", cc.UInt: "unsigned",
	cc.Long: "long", cc.ULong: "unsigned long", cc.LongLong: "long long", cc.ULongLong: "unsigned long long",
	cc.Int128: "__int128", cc.UInt128: "unsigned __int128",
	cc.Float: "float", cc.Double: "double", cc.LongDouble: "long double", cc.Void: "void",
}

// spelling names a type without a typedef name at file scope: a base
// type, or a tagged record or enum; "" for the rest (Type.Spell).
func spelling(t cc.Type) string {
	switch t := t.(type) {
	case *cc.StructType:
		if tag := t.Tag(); tag.SrcStr() != "" {
			return "struct " + tag.SrcStr()
		}
	case *cc.UnionType:
		if tag := t.Tag(); tag.SrcStr() != "" {
			return "union " + tag.SrcStr()
		}
	case *cc.EnumType:
		if tag := t.Tag(); tag.SrcStr() != "" {
			return "enum " + tag.SrcStr()
		}
	case *cc.PointerType, *cc.ArrayType, *cc.FunctionType:
	default:
		return baseSpelling[t.Kind()]
	}
	return ""
}

// cgoWrapperName reports the names cgo's C wrappers (cgo-gcc-prolog)
// declare unprefixed: the argument block's p0, p1, … and r, and the
// parameter v.
func cgoWrapperName(name string) bool {
	if name == "r" || name == "v" {
		return true
	}
	n, ok := strings.CutPrefix(name, "p")
	return ok && n != "" && strings.Trim(n, "0123456789") == ""
}

// maxRecordNesting bounds unnamed records nested one in the other: every
// nested Go type's name and every manifest path spells the path to it,
// so the package grows with the square of the depth (1000 deep: 30 MB,
// 3 s; the real headers nest 4 deep).
const maxRecordNesting = 1000

// GeneratedCName reports whether name is in the namespace of the C the
// generator writes after the headers (shims.go's cgo preamble): its
// trampolines, verbsexp_<Go name> (a capital letter after the prefix),
// and verbsexp_fn, verbsexp_r, verbsexp_e, verbsexp_packed,
// verbsexp_ret_…, verbsexp_p<N>, verbsexp_slot<N> and
// VERBSEXP_REGENERATE. The project's headers name their own helpers
// verbsexp_<lower case>, outside it.
func GeneratedCName(name string) bool {
	if name == "VERBSEXP_REGENERATE" {
		return true
	}
	rest, ok := strings.CutPrefix(name, "verbsexp_")
	if !ok || rest == "" {
		return false
	}
	if rest[0] >= 'A' && rest[0] <= 'Z' || strings.HasPrefix(rest, "ret_") {
		return true
	}
	switch rest {
	case "fn", "r", "e", "packed":
		return true
	}
	for _, p := range []string{"p", "slot"} {
		if n, ok := strings.CutPrefix(rest, p); ok && n != "" && strings.Trim(n, "0123456789") == "" {
			return true
		}
	}
	return false
}

// generatedNames refuses headers that define a macro (anywhere) or
// declare a function or tag (in scope) of GeneratedCName's namespace:
// the generated C would not mean what it says.
func (x *extractor) generatedNames(ast *cc.AST) error {
	type clash struct {
		what string
		pos  Pos
	}
	var found []clash
	for name, m := range ast.Macros {
		if GeneratedCName(name) {
			p := m.Position()
			pos := Pos{File: p.Filename, Line: p.Line, Col: p.Column}
			if rel, ok := x.rel(p.Filename); ok {
				pos.File = rel
			}
			found = append(found, clash{"macro " + name, pos})
		}
	}
	for _, f := range x.unit.Funcs {
		if GeneratedCName(f.Name) {
			found = append(found, clash{"function " + f.Name, f.Pos})
		}
	}
	for _, r := range append(append([]*Record(nil), x.unit.Records...), x.unit.Opaque...) {
		if GeneratedCName(r.Tag) {
			found = append(found, clash{r.CName(), r.Pos})
		}
	}
	for _, e := range x.unit.Enums {
		if GeneratedCName(e.Tag) {
			found = append(found, clash{"enum " + e.Tag, e.Pos})
		}
	}
	if len(found) == 0 {
		return nil
	}
	sort.Slice(found, func(i, j int) bool { return found[i].pos.String()+found[i].what < found[j].pos.String()+found[j].what })
	c := found[0]
	return fmt.Errorf("%s: %s: the C the generator writes after the headers declares names of this form (verbsexp_ and a capital letter, verbsexp_fn, verbsexp_r, verbsexp_e, verbsexp_packed, verbsexp_ret_…, verbsexp_p<N>, verbsexp_slot<N>, VERBSEXP_REGENERATE); rename it", c.pos, c.what)
}

func absDirs(ds []string) ([]string, error) {
	var r []string
	for _, d := range ds {
		a, err := filepath.Abs(d)
		if err != nil {
			return nil, err
		}
		r = append(r, a)
	}
	return r, nil
}

// inputError reports a header the generator refuses to read.
func inputError(goarch string, err error) error {
	return fmt.Errorf("linux/%s: %v", goarch, err)
}

// ccInternal matches cc/v4's references to its own source in messages:
// "value out of range: 70 (check.go:3955:check:)".
var ccInternal = regexp.MustCompile(` \([a-z0-9_]+\.go:[0-9]+:[^)]*\)`)

// ccError reports what cc/v4 refuses. After the compiler accepted the
// headers (checked), that is a construct the front end cannot read, not
// a header to fix.
func ccError(goarch string, checked bool, err error) error {
	msg := strings.TrimSpace(ccInternal.ReplaceAllString(err.Error(), ""))
	if !checked {
		return frontEndError(goarch, msg)
	}
	return fmt.Errorf("linux/%s: the C compiler accepts the headers, but the C front end the generator reads them with (modernc.org/cc/v4) does not:\n%s\n(a construct it cannot read stands there: write it another way, or keep it out of the -scope headers)", goarch, msg)
}

// frontEndError reports headers that do not compile, with
// file:line:col lines (the target compiler's, or cc's when only cc
// rejects them) and what to do.
func frontEndError(goarch, msg string) error {
	hint := "fix the header or pass the right -I directories"
	if strings.Contains(msg, "include file not found") || strings.Contains(msg, "No such file") {
		hint = "a header it includes is missing: add its directory with -I, or install the target's libc headers"
	}
	return fmt.Errorf("linux/%s: the headers do not compile:\n%s\n(%s)", goarch, msg, hint)
}

type extractor struct {
	unit     *Unit
	dirs     []string
	scope    string
	inScope  map[string]*Input // absolute file name → input
	outside  map[string]bool   // files known to be out of scope
	files    []string          // in scope, first seen first
	records  map[string]*Record
	opaque   map[string]*Record
	funcs    map[string]bool
	enumTags map[string]bool
	ignored  map[*cc.Declarator]string // typedefs and members with an attribute cc/v4 ignores (attrs.go)

	ignoredUnnamed map[cc.Type]unnamedAttr // records with an unnamed bit-field of such an attribute

	depth   int     // unnamed records being filled, one in the other
	named   *Record // the named record being filled
	tooDeep *Record // the named record in which they went deeper than maxRecordNesting
}

// rel returns the path of an in-scope file relative to its include
// directory, and whether the file is in scope.
func (x *extractor) rel(file string) (string, bool) {
	if in, ok := x.inScope[file]; ok {
		return in.Path, true
	}
	if x.outside[file] {
		return "", false
	}
	defer func() {
		if _, ok := x.inScope[file]; !ok {
			x.outside[file] = true
		}
	}()
	if !filepath.IsAbs(file) {
		return "", false
	}
	for _, d := range x.dirs {
		r, err := filepath.Rel(d, file)
		if err != nil || r == ".." || strings.HasPrefix(r, "../") {
			continue
		}
		r = filepath.ToSlash(r)
		if x.scope != "" && !strings.HasPrefix(r, x.scope+"/") {
			continue
		}
		x.inScope[file] = &Input{Path: r, Abs: file}
		x.files = append(x.files, file)
		return r, true
	}
	return "", false
}

// position converts a cc position; ok is false outside the scope.
func (x *extractor) position(filename string, line, col int) (Pos, bool) {
	r, ok := x.rel(filename)
	return Pos{File: r, Line: line, Col: col}, ok
}

var (
	nodeType     = reflect.TypeOf((*cc.Node)(nil)).Elem()
	compoundType = reflect.TypeOf((*cc.CompoundStatement)(nil))
)

// walk visits the file-scope declarations in source order. Function bodies
// are skipped: what they declare is not part of the ABI.
func (x *extractor) walk(v reflect.Value) {
	if !v.IsValid() {
		return
	}
	switch v.Kind() {
	case reflect.Interface:
		if !v.IsNil() {
			x.walk(v.Elem())
		}
		return
	case reflect.Ptr:
		if v.IsNil() || v.Type() == compoundType {
			return
		}
	default:
		return
	}
	switch n := v.Interface().(type) {
	case *cc.TranslationUnit:
		// Iterate: the list is left-recursive and long.
		// Skip declarations outside the scope (system headers: most of
		// the unit) without descending into them.
		for ; n != nil; n = n.TranslationUnit {
			ed := n.ExternalDeclaration
			if ed == nil {
				continue
			}
			if _, ok := x.rel(ed.Position().Filename); !ok {
				continue
			}
			x.walk(reflect.ValueOf(ed))
		}
		return
	case *cc.StructOrUnionSpecifier:
		if n.Case == cc.StructOrUnionSpecifierDef {
			x.markMembers(n)
			x.recordDef(n)
		}
	case *cc.EnumSpecifier:
		if n.Case == cc.EnumSpecifierDef {
			x.enumDef(n)
		}
	case *cc.FunctionDefinition:
		x.funcDecl(n.Declarator, true)
	case *cc.InitDeclarator:
		if n.Declarator != nil {
			if _, ok := n.Declarator.Type().(*cc.FunctionType); ok {
				x.funcDecl(n.Declarator, false)
			}
		}
	}
	e := v.Elem()
	if e.Kind() != reflect.Struct {
		return
	}
	for _, i := range nodeFields(e.Type()) {
		x.walk(e.Field(i))
	}
}

func (x *extractor) recordDef(n *cc.StructOrUnionSpecifier) {
	tag := n.Token.SrcStr()
	if tag == "" {
		return // unnamed: reached through the member that uses it
	}
	p := n.Position()
	pos, ok := x.position(p.Filename, p.Line, p.Column)
	if !ok {
		return
	}
	kind := Struct
	if n.StructOrUnion != nil && n.StructOrUnion.Case == cc.StructOrUnionUnion {
		kind = Union
	}
	key := string(kind) + " " + tag
	if _, dup := x.records[key]; dup {
		return
	}
	r := &Record{Kind: kind, Tag: tag, Pos: pos}
	x.records[key] = r
	x.unit.Records = append(x.unit.Records, r)
	x.named = r
	x.fillRecord(r, n.Type())
}

// fillRecord copies layout and members from a cc struct or union type.
func (x *extractor) fillRecord(r *Record, t cc.Type) {
	r.Size, r.Align = t.Size(), t.Align()
	r.Unsupported, r.UnsupportedPos = recordUnsupported(t), r.Pos
	if u, ok := x.ignoredUnnamed[t]; ok && r.Unsupported == "" {
		r.Unsupported, r.UnsupportedPos, r.UnsupportedBitField = u.why, Pos{File: r.Pos.File, Line: u.line, Col: u.col}, true
	}
	type fielder interface {
		NumFields() int
		FieldByIndex(int) *cc.Field
	}
	ft, ok := t.(fielder)
	if !ok {
		return
	}
	for i := 0; i < ft.NumFields(); i++ {
		f := ft.FieldByIndex(i)
		if f == nil {
			continue
		}
		m := &Member{Name: f.Name(), Offset: f.Offset(), Type: x.typ(f.Type(), r)}
		if a := x.ignored[f.Declarator()]; a != "" && f.Declarator() != nil {
			t := *m.Type
			t.Unsupported = a
			m.Type = &t
		}
		if d := f.Declarator(); d != nil {
			p := d.Position()
			m.Pos, _ = x.position(p.Filename, p.Line, p.Column)
		} else {
			m.Pos = r.Pos
		}
		if f.IsBitfield() {
			if f.Name() == "" {
				continue // unnamed bit-fields only pad; the offsets show it
			}
			m.BitField = true
			m.BitSize = int(f.ValueBits())
			m.BitOffset = f.Offset()*8 + int64(f.OffsetBits())
			m.Offset = m.BitOffset / 8
		}
		if f.IsFlexibleArrayMember() || (m.Type.Kind == Array && m.Type.Len == 0) {
			m.Flexible = true
		}
		r.Members = append(r.Members, m)
	}
}

// typ reduces a cc type. parent gives nested records a position.
func (x *extractor) typ(t cc.Type, parent *Record) *Type {
	r := &Type{Size: t.Size(), Align: t.Align(), Const: t.Attributes().IsConst()}
	if a := x.ignoredIn(t); a != "" || t.VectorSize() > 0 {
		// cc/v4 (v4.34.0) lays out a vector as its element (gcc aligns it
		// to its size) and ignores mode: marked for layout to refuse.
		if a == "" {
			a = unsupported([]attribute{{name: "vector_size", raw: "vector_size"}}, false)
		}
		r.Kind = Opaque
		r.Unsupported = a
		r.Name = t.String()
		return r
	}
	if td := t.Typedef(); td != nil {
		r.Name = td.Name()
		r.Spell = td.Name()
	} else {
		r.Spell = spelling(t)
	}
	switch t.Kind() {
	case cc.Void:
		r.Kind = Void
	case cc.Bool:
		r.Kind = Bool
	case cc.Char, cc.SChar, cc.UChar, cc.Short, cc.UShort, cc.Int, cc.UInt,
		cc.Long, cc.ULong, cc.LongLong, cc.ULongLong:
		r.Kind = Int
		r.Signed = cc.IsSignedInteger(t)
		if t.Kind() == cc.Char {
			r.Name = "char"
		}
	case cc.Float, cc.Double:
		r.Kind = Float
	case cc.Ptr:
		r.Kind = Pointer
		r.Elem = x.typ(t.(*cc.PointerType).Elem(), parent)
	case cc.Array:
		at := t.(*cc.ArrayType)
		r.Kind = Array
		r.Elem = x.typ(at.Elem(), parent)
		r.Len = at.Len()
		if r.Len < 0 || at.IsIncomplete() {
			r.Len = 0
		}
	case cc.Struct, cc.Union:
		x.recordType(r, t, parent)
	case cc.Enum:
		et := t.(*cc.EnumType)
		tag := et.Tag()
		r.Kind = EnumRef
		r.Tag = tag.SrcStr()
		r.Signed = cc.IsSignedInteger(et.UnderlyingType())
		r.InScope = r.Tag != "" && x.enumTags[r.Tag]
		if !r.InScope {
			r.Kind = Int
		}
	case cc.Function:
		ft := t.(*cc.FunctionType)
		r.Kind = Function
		r.Sig = x.signature(ft, parent)
	default:
		r.Kind = Opaque
		if r.Name == "" {
			r.Name = t.String()
		}
	}
	return r
}

func (x *extractor) recordType(r *Type, t cc.Type, parent *Record) {
	kind := Struct
	var tag cc.Token
	switch st := t.(type) {
	case *cc.StructType:
		tag = st.Tag()
	case *cc.UnionType:
		kind = Union
		tag = st.Tag()
	}
	r.RecordKind = kind
	r.Tag = tag.SrcStr()
	if r.Tag == "" {
		if r.Name != "" && parent == nil {
			// A system typedef of an unnamed record (pthread_mutex_t):
			// out of scope, kept as sized storage.
			r.Kind = Opaque
			return
		}
		if parent == nil {
			r.Kind = Opaque
			r.Name = t.String()
			return
		}
		if r.Name != "" && !x.typedefInScope(t) {
			r.Kind = Opaque
			return
		}
		r.Kind = Nested
		r.Record = &Record{Kind: kind, Pos: parent.Pos}
		if x.depth++; x.depth > maxRecordNesting {
			// Refused once, at the outermost record (layout reports it).
			if x.tooDeep == nil {
				x.tooDeep = x.named
			}
			x.depth--
			r.Kind, r.Record = Opaque, nil
			return
		}
		x.fillRecord(r.Record, t)
		x.depth--
		return
	}
	r.Kind = RecordRef
	key := string(kind) + " " + r.Tag
	if _, ok := x.records[key]; ok {
		r.InScope = true
		return
	}
	// Defined later, or only declared, or a system record.
	r.InScope = x.declaredInScope(tag, key)
	if !r.InScope && !t.IsIncomplete() {
		r.Kind = Opaque
		r.Name = key
	}
}

// typedefInScope reports whether the typedef naming an unnamed record was
// declared in scope; a system one (pthread_mutex_t) stays opaque.
func (x *extractor) typedefInScope(t cc.Type) bool {
	td := t.Typedef()
	if td == nil {
		return true
	}
	p := td.Position()
	_, ok := x.rel(p.Filename)
	return ok
}

// declaredInScope decides whether a record tag that has no definition (yet)
// belongs to the headers in scope: by where its tag token appears.
func (x *extractor) declaredInScope(tag cc.Token, key string) bool {
	p := tag.Position()
	if _, ok := x.rel(p.Filename); !ok {
		return false
	}
	if _, ok := x.opaque[key]; !ok {
		pos, _ := x.position(p.Filename, p.Line, p.Column)
		kind := RecordKind(strings.Fields(key)[0])
		x.opaque[key] = &Record{Kind: kind, Tag: tag.SrcStr(), Pos: pos}
	}
	return true
}

func (x *extractor) enumDef(n *cc.EnumSpecifier) {
	p := n.Position()
	pos, ok := x.position(p.Filename, p.Line, p.Column)
	if !ok {
		return
	}
	t, _ := n.Type().(*cc.EnumType)
	if t == nil {
		return
	}
	// GCC gives an enum without negative values an unsigned type.
	e := &Enum{Tag: n.Token2.SrcStr(), Pos: pos, Size: t.Size()}
	for _, en := range t.Enumerators() {
		v, ok := intValue(en.Value())
		ep := en.Position()
		epos, _ := x.position(ep.Filename, ep.Line, ep.Column)
		if !ok {
			x.note(epos, fmt.Sprintf("enumerator %s has no integer value; skipped", en.Token.SrcStr()))
			continue
		}
		e.Enumerators = append(e.Enumerators, &Enumerator{Name: en.Token.SrcStr(), Pos: epos, Value: v})
		if v.Negative() {
			e.Signed = true
		}
	}
	// Each enumerator has its value in the enum's type, as gcc gives it:
	// in a signed enum, 0x8000000000000000ULL (beyond every signed type,
	// which gcc warns about and accepts) is -2^63, as cc/v4 does not say.
	for _, en := range e.Enumerators {
		en.Value = inEnumType(en.Value, e.Size, e.Signed)
	}
	x.unit.Enums = append(x.unit.Enums, e)
	if e.Tag != "" {
		x.enumTags[e.Tag] = true
	}
}

func (x *extractor) funcDecl(d *cc.Declarator, defined bool) {
	if d == nil {
		return
	}
	ft, ok := d.Type().(*cc.FunctionType)
	if !ok {
		return
	}
	p := d.Position()
	pos, ok := x.position(p.Filename, p.Line, p.Column)
	if !ok {
		return
	}
	name := d.Name()
	if x.funcs[name] {
		return
	}
	x.funcs[name] = true
	x.unit.Funcs = append(x.unit.Funcs, &Func{
		Name:   name,
		Pos:    pos,
		Inline: defined && (d.IsInline() || d.IsStatic()),
		Sig:    x.signature(ft, &Record{Pos: pos}),
	})
}

func (x *extractor) signature(ft *cc.FunctionType, parent *Record) *Signature {
	s := &Signature{Result: x.typ(ft.Result(), parent), Variadic: ft.IsVariadic()}
	for _, p := range ft.Parameters() {
		t := p.Type()
		if t.Kind() == cc.Void {
			continue
		}
		s.Params = append(s.Params, Param{Name: p.Name(), Type: x.typ(t, parent)})
	}
	return s
}

// macros collects object-like macros in scope that evaluate to integers.
func (x *extractor) macros(ast *cc.AST) {
	// In name order: a header seen first through a macro joins the
	// inputs here, and map order would make the output vary run to run
	// (seen on rdma-core's mlx5dv.h, whose verbs_api.h holds only macros).
	names := make([]string, 0, len(ast.Macros))
	for name := range ast.Macros {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		m := ast.Macros[name]
		if m.IsFnLike {
			continue
		}
		p := m.Position()
		pos, ok := x.position(p.Filename, p.Line, p.Column)
		if !ok {
			continue
		}
		if t := m.Type(); t == nil || !cc.IsIntegerType(t) {
			continue // empty, string, float, pointer or alias: not an integer constant
		}
		v, ok := intValue(m.Value())
		if !ok {
			continue
		}
		x.unit.Macros = append(x.unit.Macros, &Macro{Name: name, Pos: pos, Value: v})
	}
}

// redefined lists, sorted, the object-like macros in scope that cc/v4
// left without a value because they were defined more than once
// differently or #undef'd first: it evaluates only macros whose every
// definition agrees (Macro.IsConst). C code sees the definition in force
// at the end of the headers, and so must the package.
func (x *extractor) redefined(ast *cc.AST) []string {
	var names []string
	for name, m := range ast.Macros {
		if m.IsFnLike || m.IsConst || m.Value() != cc.Unknown || len(m.ReplacementList()) == 0 {
			continue
		}
		if strings.HasPrefix(name, "__") {
			continue // __LINE__, __COUNTER__: not constants
		}
		p := m.Position()
		if _, ok := x.position(p.Filename, p.Line, p.Column); ok {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// finalAlias names the macro finalValues defines for name.
const finalAlias = "__verbsexp_final_"

// finalValues gives the redefined macros their final values: the same
// translation again with one more source after the headers, defining
// for each an alias, once, to its name; cc/v4 evaluates the aliases at
// the end of the translation unit, where the name means its last
// definition. It costs a second translation only for headers that
// redefine a constant (none of the real ones do).
func (x *extractor) finalValues(goarch string, cfg *cc.Config, src []cc.Source, dirs []string, opts Options, first *cc.AST, names []string) error {
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "#define %s%s %s\n", finalAlias, n, n)
	}
	sfs := newSourceFS(dirs)
	c := *cfg
	c.FS = opts.record.wrap(sfs)
	c.PragmaHandler = sfs.pragma
	ast, err := cc.Translate(&c, append(append([]cc.Source(nil), src...), cc.Source{Name: "<verbsexp-final>", Value: b.String()}))
	if refused := sfs.refusal(); refused != nil {
		return inputError(goarch, refused)
	}
	if err != nil {
		return ccError(goarch, cfg.CC != "", err)
	}
	for _, n := range names {
		m := ast.Macros[finalAlias+n]
		if m == nil {
			continue
		}
		if t := m.Type(); t == nil || !cc.IsIntegerType(t) {
			continue
		}
		v, ok := intValue(m.Value())
		if !ok {
			continue
		}
		p := first.Macros[n].Position()
		pos, _ := x.position(p.Filename, p.Line, p.Column)
		x.unit.Macros = append(x.unit.Macros, &Macro{Name: n, Pos: pos, Value: v})
	}
	return nil
}

// inEnumType converts v to the integer type of size bytes and the given
// signedness (two's complement wrap-around, as a C conversion does).
func inEnumType(v cint.Value, size int64, signed bool) cint.Value {
	if size <= 0 || size > 8 {
		return v
	}
	shift := 64 - 8*uint(size)
	if signed {
		return cint.Of(int64(v.Bits<<shift) >> shift)
	}
	return cint.OfUnsigned(v.Bits << shift >> shift)
}

func intValue(v cc.Value) (cint.Value, bool) {
	switch v := v.(type) {
	case cc.Int64Value:
		return cint.Of(int64(v)), true
	case cc.UInt64Value:
		return cint.OfUnsigned(uint64(v)), true
	}
	return cint.Value{}, false
}

func (x *extractor) note(p Pos, msg string) {
	x.unit.Notes = append(x.unit.Notes, Diag{Pos: p, Msg: msg})
}

// finish orders everything by position so the output never depends on map
// iteration, and lists the inputs.
func (x *extractor) finish() {
	u := x.unit
	fileIndex := map[string]int{}
	for i, f := range x.files {
		fileIndex[x.inScope[f].Path] = i
	}
	less := func(a, b Pos) bool {
		if a.File != b.File {
			return fileIndex[a.File] < fileIndex[b.File]
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	}
	sort.SliceStable(u.Macros, func(i, j int) bool {
		if u.Macros[i].Pos == u.Macros[j].Pos {
			return u.Macros[i].Name < u.Macros[j].Name
		}
		return less(u.Macros[i].Pos, u.Macros[j].Pos)
	})
	for key, r := range x.opaque {
		if _, defined := x.records[key]; !defined {
			u.Opaque = append(u.Opaque, r)
		}
	}
	sort.Slice(u.Opaque, func(i, j int) bool { return u.Opaque[i].CName() < u.Opaque[j].CName() })
	// References made before a record's definition was seen.
	for _, r := range u.Records {
		fixRefs(r, x.records)
	}
	for _, f := range u.Funcs {
		fixSig(f.Sig, x.records)
	}
	for _, f := range x.files {
		u.Inputs = append(u.Inputs, *x.inScope[f])
	}
	sort.SliceStable(u.Notes, func(i, j int) bool { return less(u.Notes[i].Pos, u.Notes[j].Pos) })
}

func fixRefs(r *Record, defs map[string]*Record) {
	for _, m := range r.Members {
		fixType(m.Type, defs)
	}
}

func fixSig(s *Signature, defs map[string]*Record) {
	if s == nil {
		return
	}
	fixType(s.Result, defs)
	for _, p := range s.Params {
		fixType(p.Type, defs)
	}
}

func fixType(t *Type, defs map[string]*Record) {
	for ; t != nil; t = t.Elem {
		switch t.Kind {
		case RecordRef:
			if _, ok := defs[string(t.RecordKind)+" "+t.Tag]; ok {
				t.InScope = true
			}
		case Nested:
			fixRefs(t.Record, defs)
		case Function:
			fixSig(t.Sig, defs)
		}
	}
}
