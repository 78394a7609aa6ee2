package tests

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"

	"github.com/verbsexp/verbsexp/internal/manifest"
	"github.com/verbsexp/verbsexp/internal/target"
)

// layoutPackages are the generated packages whose Go layout is checked
// against their manifest: the committed package, and the golden packages
// of the generator tests, which carry the bit-fields, packed members and
// flexible arrays that headers/ does not have.
var layoutPackages = []string{
	"generated/verbs",
	"gen/testdata/golden/anon",
	"gen/testdata/golden/bitfields",
	"gen/testdata/golden/enums",
	"gen/testdata/golden/flexible",
	"gen/testdata/golden/packed",
}

// goField is Go's view of one manifest member: where the generated code
// puts it and how it is reached.
type goField struct {
	off, size        int64
	bitOff, bitSize  int64 // bit-fields only (bitSize > 0)
	kind             accessKind
	expr             string // Go expression reaching it from v, without the last step
	last             string // the last step: field or method name
	elem             string // element type of a flexible array (for the probe)
	missing, problem string
}

type accessKind int

const (
	plainField accessKind = iota // v.X.Y: a Go struct field
	addrMethod                   // v.X() *T: a member at a fixed offset
	scalarGet                    // v.X() T with v.SetX(T): a value at a fixed offset or in bits
	flexMethod                   // v.X(n int) []T: a flexible array
)

// loadArch type-checks the packages for linux/arch without cgo, as the
// Go compiler would build them there.
func loadArch(t *testing.T, arch string) map[string]*packages.Package {
	t.Helper()
	cfg := &packages.Config{
		Mode: packages.NeedName | packages.NeedTypes | packages.NeedSyntax | packages.NeedTypesInfo | packages.NeedTypesSizes,
		Dir:  repoRoot(t),
		Env:  append(os.Environ(), "GOOS=linux", "GOARCH="+arch, "CGO_ENABLED=0"),
	}
	var patterns []string
	for _, p := range layoutPackages {
		patterns = append(patterns, "./"+p)
	}
	pkgs, err := packages.Load(cfg, patterns...)
	if err != nil {
		t.Fatalf("linux/%s: loading the generated packages: %v", arch, err)
	}
	byDir := map[string]*packages.Package{}
	for _, p := range pkgs {
		for _, e := range p.Errors {
			t.Errorf("linux/%s: %s: %v", arch, p.PkgPath, e)
		}
		byDir[strings.TrimPrefix(p.PkgPath, "github.com/verbsexp/verbsexp/")] = p
	}
	return byDir
}

// goLayout walks a manifest member's Go path (Item.SendWR(),
// WR.RDMA().RemoteAddr) through the generated types with the gc sizes of
// arch. Plain fields are laid out by go/types; accessor methods are read
// from their bodies: the constant offset of unsafe.Add, or the bit
// position given to abiutil's bit-field helpers.
func goLayout(pkg *packages.Package, sizes types.Sizes, rec types.Type, path string) goField {
	var g goField
	cur := rec
	steps := strings.Split(path, ".")
	g.expr = "v"
	for i, step := range steps {
		if i > 0 {
			g.expr += "." + steps[i-1]
		}
		g.last = step
		name, isMethod := strings.CutSuffix(step, "()")
		if !isMethod {
			st, ok := cur.Underlying().(*types.Struct)
			if !ok {
				g.problem = fmt.Sprintf("%s: %s is not a struct", step, cur)
				return g
			}
			var fields []*types.Var
			idx := -1
			for j := 0; j < st.NumFields(); j++ {
				fields = append(fields, st.Field(j))
				if st.Field(j).Name() == name {
					idx = j
				}
			}
			if idx < 0 {
				g.missing = fmt.Sprintf("%s has no field %s", cur, name)
				return g
			}
			g.off += sizes.Offsetsof(fields)[idx]
			cur = fields[idx].Type()
			g.kind, g.size = plainField, sizes.Sizeof(cur)
			continue
		}
		fn, decl := method(pkg, cur, name)
		if fn == nil {
			g.missing = fmt.Sprintf("%s has no method %s", cur, name)
			return g
		}
		sig := fn.Type().(*types.Signature)
		if sig.Results().Len() != 1 {
			g.problem = fmt.Sprintf("%s.%s returns %d values", cur, name, sig.Results().Len())
			return g
		}
		res := sig.Results().At(0).Type()
		off, bitOff, bitSize := accessorOffset(pkg.TypesInfo, decl)
		setter, _ := method(pkg, cur, "Set"+name)
		switch {
		case sig.Params().Len() == 1:
			sl, ok := res.(*types.Slice)
			if !ok {
				g.problem = fmt.Sprintf("%s.%s(n) does not return a slice", cur, name)
				return g
			}
			g.kind, g.off, g.size, cur = flexMethod, g.off+off, 0, sl.Elem()
			g.elem = types.TypeString(sl.Elem(), types.RelativeTo(pkg.Types))
		case setter != nil && bitSize > 0:
			g.kind, g.bitOff, g.bitSize = scalarGet, g.off*8+bitOff, bitSize
			g.off, g.size = g.bitOff/8, 0
		case setter != nil:
			g.kind, g.off, g.size, cur = scalarGet, g.off+off, sizes.Sizeof(res), res
		default:
			p, ok := res.(*types.Pointer)
			if !ok {
				g.problem = fmt.Sprintf("%s.%s has no setter and does not return a pointer", cur, name)
				return g
			}
			g.kind, g.off, cur = addrMethod, g.off+off, p.Elem()
			g.size = sizes.Sizeof(cur)
		}
	}
	return g
}

// method finds the method name of *T and its declaration.
func method(pkg *packages.Package, t types.Type, name string) (*types.Func, *ast.FuncDecl) {
	sel := types.NewMethodSet(types.NewPointer(t)).Lookup(pkg.Types, name)
	if sel == nil {
		return nil, nil
	}
	fn := sel.Obj().(*types.Func)
	for _, f := range pkg.Syntax {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && pkg.TypesInfo.Defs[fd.Name] == fn {
				return fn, fd
			}
		}
	}
	return fn, nil
}

// accessorOffset reads an accessor body: the constant of
// unsafe.Add(unsafe.Pointer(r), N) (0 when the member is at the record's
// start) or the bit position and width of abiutil.Bits/SignedBits.
func accessorOffset(info *types.Info, fd *ast.FuncDecl) (off, bitOff, bitSize int64) {
	if fd == nil || fd.Body == nil {
		return 0, 0, 0
	}
	val := func(e ast.Expr) int64 {
		tv, ok := info.Types[e]
		if !ok || tv.Value == nil {
			return -1
		}
		v, _ := constant.Int64Val(constant.ToInt(tv.Value))
		return v
	}
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			if ix, ok := call.Fun.(*ast.IndexExpr); ok { // abiutil.Load[T](p)
				sel, _ = ix.X.(*ast.SelectorExpr)
			}
			if sel == nil {
				return true
			}
		}
		switch sel.Sel.Name {
		case "Add":
			if len(call.Args) == 2 {
				off = val(call.Args[1])
			}
		case "Bits", "SignedBits":
			if len(call.Args) == 3 {
				bitOff, bitSize = val(call.Args[1]), val(call.Args[2])
			}
		}
		return true
	})
	return off, bitOff, bitSize
}

type layoutCase struct {
	dir      string
	manifest *manifest.Manifest
}

func layoutCases(t *testing.T) []layoutCase {
	var cs []layoutCase
	for _, dir := range layoutPackages {
		m, err := manifest.Read(filepath.Join(repoRoot(t), dir, "abi.json"))
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, layoutCase{dir, m})
	}
	return cs
}

// hostView finds how each manifest member is reached in Go (field,
// pointer accessor, value accessor, flexible array) for the probe; a
// member it cannot reach is left out here and reported by
// TestGoLayoutMatchesManifest.
func hostView(t *testing.T, arch string, cases []layoutCase) map[string]map[string]map[string]goField {
	pkgs := loadArch(t, arch)
	sizes := types.SizesFor("gc", arch)
	view := map[string]map[string]map[string]goField{}
	for _, c := range cases {
		pkg := pkgs[c.dir]
		if pkg == nil {
			t.Fatalf("%s: not loaded", c.dir)
		}
		view[c.dir] = map[string]map[string]goField{}
		for _, r := range c.manifest.Arches[arch].Records {
			obj, ok := pkg.Types.Scope().Lookup(r.Go).(*types.TypeName)
			if !ok {
				continue
			}
			view[c.dir][r.Go] = map[string]goField{}
			for _, f := range r.Fields {
				view[c.dir][r.Go][f.C] = goLayout(pkg, sizes, obj.Type(), f.Go)
			}
		}
	}
	return view
}

// reporter is what the comparisons need of a testing.T, so that the drift
// test can collect their complaints.
type reporter interface {
	Errorf(format string, args ...any)
	Logf(format string, args ...any)
}

// TestGoLayoutMatchesManifest: for every package, arch, record and member
// of the manifests, the Go compiler's layout of the generated types
// (go/types with the gc sizes of that arch) equals the manifest, and so
// does every constant's value. The cases come from the manifests, so they
// follow every regeneration.
func TestGoLayoutMatchesManifest(t *testing.T) {
	cases := layoutCases(t)
	for _, tg := range target.All {
		arch := tg.GoArch
		t.Run(arch, func(t *testing.T) {
			checked := compareGoLayout(t, arch, loadArch(t, arch), cases)
			if checked < 500 {
				t.Errorf("linux/%s: only %d members and constants checked; the manifests look empty", arch, checked)
			}
			t.Logf("linux/%s: %d members and constants agree with the manifests", arch, checked)
		})
	}
}

// compareGoLayout reports every difference between the manifests and Go's
// layout of the packages on arch, and returns how many members and
// constants it compared.
func compareGoLayout(t reporter, arch string, pkgs map[string]*packages.Package, cases []layoutCase) int {
	sizes := types.SizesFor("gc", arch)
	checked := 0
	for _, c := range cases {
		a := c.manifest.Arches[arch]
		pkg := pkgs[c.dir]
		if a == nil || pkg == nil {
			t.Errorf("%s: no %s in the manifest or no package loaded", c.dir, arch)
			continue
		}
		scope := pkg.Types.Scope()
		for _, r := range a.Records {
			obj, ok := scope.Lookup(r.Go).(*types.TypeName)
			if !ok {
				t.Errorf("linux/%s %s: %s: Go type %s is not declared", arch, c.dir, r.C, r.Go)
				continue
			}
			typ := obj.Type()
			if got := sizes.Sizeof(typ); got != r.Size {
				t.Errorf("linux/%s %s: %s (%s): Go size %d, manifest %d", arch, c.dir, r.C, r.Go, got, r.Size)
			}
			if got, want := sizes.Alignof(typ), goAlign(sizes, r.Align); got != want {
				t.Errorf("linux/%s %s: %s (%s): Go alignment %d, manifest %d", arch, c.dir, r.C, r.Go, got, r.Align)
			} else if want != r.Align {
				t.Logf("NOTE linux/%s %s: %s (%s) is aligned to %d in C, Go aligns no type beyond %d (the type's doc comment says to allocate it in C memory)", arch, c.dir, r.C, r.Go, r.Align, want)
			}
			for _, f := range r.Fields {
				g := goLayout(pkg, sizes, typ, f.Go)
				where := fmt.Sprintf("linux/%s %s: %s.%s (%s.%s)", arch, c.dir, r.C, f.C, r.Go, f.Go)
				switch {
				case g.missing != "" || g.problem != "":
					t.Errorf("%s: %s%s", where, g.missing, g.problem)
				case f.BitOffset != nil:
					if g.bitSize == 0 || g.bitOff != *f.BitOffset || g.bitSize != int64(f.BitSize) {
						t.Errorf("%s: Go bits %d+%d, manifest bits %d+%d", where, g.bitOff, g.bitSize, *f.BitOffset, f.BitSize)
					}
				default:
					if g.off != f.Offset {
						t.Errorf("%s: Go offset %d, manifest %d", where, g.off, f.Offset)
					}
					if g.size != f.Size {
						t.Errorf("%s: Go size %d, manifest %d", where, g.size, f.Size)
					}
				}
				checked++
			}
		}
		checked += checkConstants(t, arch, c.dir, scope, a.Constants)
	}
	return checked
}

// goAlign is the alignment Go can give a record C aligns to align: Go
// aligns no type beyond its widest basic type (8 on the 64-bit targets).
func goAlign(sizes types.Sizes, align int64) int64 {
	return min(align, sizes.Alignof(types.Typ[types.Complex128]))
}

// checkConstants compares every manifest constant with the value of the
// Go constant of the same package as go/types evaluates it.
func checkConstants(t reporter, arch, dir string, scope *types.Scope, cs []manifest.Constant) int {
	for _, c := range cs {
		obj, ok := scope.Lookup(c.Go).(*types.Const)
		if !ok {
			t.Errorf("linux/%s %s: %s: Go constant %s is not declared", arch, dir, c.C, c.Go)
			continue
		}
		want := constant.MakeUint64(c.Value.Bits)
		if c.Value.Negative() {
			want = constant.MakeInt64(int64(c.Value.Bits))
		}
		if !constant.Compare(obj.Val(), token.EQL, want) {
			t.Errorf("linux/%s %s: %s (%s): Go value %s, manifest %s", arch, dir, c.C, c.Go, obj.Val().ExactString(), c.Value)
		}
	}
	return len(cs)
}

// TestHostLayoutMatchesManifest is the third view on the host: a program
// written from the manifests and compiled by the Go toolchain measures
// every record with unsafe.Sizeof/Alignof, every field and pointer
// accessor by address, and every value accessor (unions, packed members,
// bit-fields) by which bits its setter changes in a zeroed record.
func TestHostLayoutMatchesManifest(t *testing.T) {
	arch := runtime.GOARCH
	cases := layoutCases(t)
	out := runProbe(t, arch, cases)
	seen := compareProbe(t, arch, cases, out)
	if seen < 500 {
		t.Errorf("the probe measured only %d records and members", seen)
	}
	t.Logf("linux/%s: %d records and members measured by the compiled probe agree with the manifests", arch, seen)
}

// runProbe writes the probe for the host into a scratch directory of the
// module (so it can import the packages), runs it and returns its output.
func runProbe(t *testing.T, arch string, cases []layoutCase) string {
	t.Helper()
	src := probeSource(cases, arch, hostView(t, arch, cases))
	dir, err := os.MkdirTemp(repoRoot(t), ".layoutprobe-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return runIn(t, dir, []string{"CGO_ENABLED=0"}, "go", "run", ".")
}

// compareProbe checks each line of the probe's output against the
// manifests and returns the number of lines.
func compareProbe(t reporter, arch string, cases []layoutCase, out string) int {
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		// dir record field off size bitoff bitsize  |  dir record "" 0 size align 0
		f := strings.Split(line, "\t")
		if len(f) != 7 {
			t.Errorf("probe output: %q", line)
			return seen
		}
		n := make([]int64, 4)
		for i := range n {
			n[i], _ = strconv.ParseInt(f[3+i], 10, 64)
		}
		checkProbe(t, arch, cases, f[0], f[1], f[2], n)
		seen++
	}
	return seen
}

func checkProbe(t reporter, arch string, cases []layoutCase, dir, rec, field string, n []int64) {
	for _, c := range cases {
		if c.dir != dir {
			continue
		}
		for _, r := range c.manifest.Arches[arch].Records {
			if r.C != rec {
				continue
			}
			if field == "" {
				if n[1] != r.Size || n[2] != goAlign(types.SizesFor("gc", arch), r.Align) {
					t.Errorf("linux/%s %s: %s (%s): unsafe.Sizeof/Alignof %d/%d, manifest %d/%d", arch, dir, rec, r.Go, n[1], n[2], r.Size, r.Align)
				}
				return
			}
			for _, f := range r.Fields {
				if f.C != field {
					continue
				}
				where := fmt.Sprintf("linux/%s %s: %s.%s (%s.%s), compiled", arch, dir, rec, field, r.Go, f.Go)
				switch {
				case f.BitOffset != nil:
					if n[2] != *f.BitOffset || n[3] != int64(f.BitSize) {
						t.Errorf("%s: setter changes bits %d+%d, manifest bits %d+%d", where, n[2], n[3], *f.BitOffset, f.BitSize)
					}
				case n[0] != f.Offset || n[1] != f.Size:
					t.Errorf("%s: offset %d size %d, manifest offset %d size %d", where, n[0], n[1], f.Offset, f.Size)
				}
				return
			}
		}
	}
	t.Errorf("probe reports %s %s.%s, which no manifest has", dir, rec, field)
}

// probeSource writes the measuring program: one line per record and per
// member, from the manifests and the access paths found by go/types.
func probeSource(cases []layoutCase, arch string, view map[string]map[string]map[string]goField) string {
	var b strings.Builder
	b.WriteString("// Code generated by tests/layout_test.go from the abi.json manifests; DO NOT EDIT.\n\npackage main\n\nimport (\n\t\"fmt\"\n\t\"runtime/debug\"\n\t\"unsafe\"\n")
	for i, c := range cases {
		fmt.Fprintf(&b, "\tp%d %q\n", i, "github.com/verbsexp/verbsexp/"+c.dir)
	}
	b.WriteString(")\n\n" + probeHelpers + "\nfunc main() {\n\tdebug.SetGCPercent(-1) // records hold probe patterns, not pointers\n")
	for i, c := range cases {
		for _, r := range c.manifest.Arches[arch].Records {
			typ := fmt.Sprintf("p%d.%s", i, r.Go)
			fmt.Fprintf(&b, "\t{\n\t\tfmt.Printf(\"%%s\\t%%s\\t\\t0\\t%%d\\t%%d\\t0\\n\", %q, %q, unsafe.Sizeof(%s{}), unsafe.Alignof(%s{}))\n", c.dir, r.C, typ, typ)
			for _, f := range r.Fields {
				g, ok := view[c.dir][r.Go][f.C]
				if !ok || g.missing != "" || g.problem != "" {
					continue // reported by TestGoLayoutMatchesManifest
				}
				fmt.Fprintf(&b, "\t\tv, base := alloc[%s]()\n", typ)
				pre := g.expr
				switch g.kind {
				case plainField:
					fmt.Fprintf(&b, "\t\tat(%q, %q, %q, base, unsafe.Pointer(&%s.%s), unsafe.Sizeof(%s.%s))\n", c.dir, r.C, f.C, pre, g.last, pre, g.last)
				case addrMethod:
					fmt.Fprintf(&b, "\t\tat(%q, %q, %q, base, unsafe.Pointer(%s.%s), unsafe.Sizeof(*%s.%s))\n", c.dir, r.C, f.C, pre, g.last, pre, g.last)
				case flexMethod:
					name := strings.TrimSuffix(g.last, "()")
					fmt.Fprintf(&b, "\t\tat(%q, %q, %q, base, unsafe.Pointer(unsafe.SliceData(%s.%s(1))), 0)\n", c.dir, r.C, f.C, pre, name)
				case scalarGet:
					name := strings.TrimSuffix(g.last, "()")
					fmt.Fprintf(&b, "\t\tsetOnes(%s.Set%s)\n\t\tbits(%q, %q, %q, base, unsafe.Sizeof(*v))\n", pre, name, c.dir, r.C, f.C)
				}
				fmt.Fprintf(&b, "\t\t_ = v\n")
				b.WriteString("\t}\n\t{\n")
			}
			b.WriteString("\t}\n")
		}
	}
	b.WriteString("}\n")
	return strings.ReplaceAll(b.String(), "\t{\n\t}\n", "")
}

const probeHelpers = `// alloc returns a zeroed T in memory the garbage collector does not scan,
// with room after it for a flexible array.
func alloc[T any]() (*T, unsafe.Pointer) {
	var t T
	buf := make([]uint64, unsafe.Sizeof(t)/8+2)
	p := unsafe.Pointer(&buf[0])
	return (*T)(p), p
}

// at prints a member found by address.
func at(dir, rec, field string, base, p unsafe.Pointer, size uintptr) {
	fmt.Printf("%s\t%s\t%s\t%d\t%d\t-1\t0\n", dir, rec, field, uintptr(p)-uintptr(base), size)
}

// setOnes calls a setter with a value whose bytes are all 0xff.
func setOnes[V any](set func(V)) {
	var v V
	b := unsafe.Slice((*byte)(unsafe.Pointer(&v)), unsafe.Sizeof(v))
	for i := range b {
		b[i] = 0xff
	}
	set(v)
}

// bits prints the bytes and bits a setter changed in a zeroed record.
func bits(dir, rec, field string, base unsafe.Pointer, size uintptr) {
	b := unsafe.Slice((*byte)(base), size)
	lo, hi := -1, -1
	for i, x := range b {
		for j := 0; j < 8; j++ {
			if x&(1<<j) != 0 {
				if lo < 0 {
					lo = i*8 + j
				}
				hi = i*8 + j
			}
		}
	}
	if lo < 0 {
		fmt.Printf("%s\t%s\t%s\t-1\t0\t-1\t0\n", dir, rec, field)
		return
	}
	fmt.Printf("%s\t%s\t%s\t%d\t%d\t%d\t%d\n", dir, rec, field, lo/8, hi/8-lo/8+1, lo, hi-lo+1)
}
`

// collector records what a comparison would report.
type collector struct{ errs []string }

func (c *collector) Errorf(format string, args ...any) {
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
}
func (c *collector) Logf(string, ...any) {}

// TestLayoutChecksCatchDrift makes sure the two Go views can fail: with a
// record size, a field offset, an accessor's offset and a constant of the
// manifest altered, each comparison names the record or constant, the
// member, the arch and both values.
func TestLayoutChecksCatchDrift(t *testing.T) {
	arch := runtime.GOARCH
	cases := layoutCases(t)
	m := cases[0].manifest // generated/abi.json, read afresh by layoutCases
	a := m.Arches[arch]
	// Alter the manifest; the Go views still report the real values.
	var size, next, sendWR, recv int64
	for i := range a.Records {
		r := &a.Records[i]
		if r.C != "struct ibv_exp_task" {
			continue
		}
		size, r.Size = r.Size, r.Size+8
		for j := range r.Fields {
			switch f := &r.Fields[j]; f.C {
			case "next":
				next, f.Offset = f.Offset, f.Offset+4
			case "item.send_wr":
				sendWR, f.Offset = f.Offset, f.Offset+4
			}
		}
	}
	for i := range a.Constants {
		if c := &a.Constants[i]; c.C == "IBV_EXP_TASK_RECV" {
			recv = int64(c.Value.Bits)
			c.Value.Bits += 100
		}
	}
	if size == 0 || next == 0 || sendWR == 0 || recv == 0 {
		t.Fatalf("generated/abi.json lacks struct ibv_exp_task.next, .item.send_wr or IBV_EXP_TASK_RECV on %s", arch)
	}
	pre := "linux/" + arch + " generated/verbs: "
	want := []string{
		fmt.Sprintf("%sstruct ibv_exp_task (ExpTask): Go size %d, manifest %d", pre, size, size+8),
		fmt.Sprintf("%sstruct ibv_exp_task.item.send_wr (ExpTask.Item.SendWR()): Go offset %d, manifest %d", pre, sendWR, sendWR+4),
		fmt.Sprintf("%sstruct ibv_exp_task.next (ExpTask.Next): Go offset %d, manifest %d", pre, next, next+4),
		fmt.Sprintf("%sIBV_EXP_TASK_RECV (ExpTaskRecv): Go value %d, manifest %d", pre, recv, recv+100),
	}
	var goView collector
	compareGoLayout(&goView, arch, loadArch(t, arch), cases)
	if strings.Join(goView.errs, "\n") != strings.Join(want, "\n") {
		t.Errorf("go/types view of the altered manifest reports:\n%s\nwant:\n%s", strings.Join(goView.errs, "\n"), strings.Join(want, "\n"))
	}
	var probe collector
	compareProbe(&probe, arch, cases, runProbe(t, arch, cases))
	wantProbe := []string{
		fmt.Sprintf("%sstruct ibv_exp_task (ExpTask): unsafe.Sizeof/Alignof %d/8, manifest %d/8", pre, size, size+8),
		fmt.Sprintf("%sstruct ibv_exp_task.item.send_wr (ExpTask.Item.SendWR()), compiled: offset %d size 8, manifest offset %d size 8", pre, sendWR, sendWR+4),
		fmt.Sprintf("%sstruct ibv_exp_task.next (ExpTask.Next), compiled: offset %d size 8, manifest offset %d size 8", pre, next, next+4),
	}
	if strings.Join(probe.errs, "\n") != strings.Join(wantProbe, "\n") {
		t.Errorf("compiled probe with the altered manifest reports:\n%s\nwant:\n%s", strings.Join(probe.errs, "\n"), strings.Join(wantProbe, "\n"))
	}
}
