package parse

import (
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/verbsexp/verbsexp/internal/abicheck"
	"github.com/verbsexp/verbsexp/internal/inputfile"
)

// A probe is how a target that is not translated gets its declarations:
// those of the translated target's Unit (the first), laid out as the
// target's own compiler lays them out. One C file per target includes the
// entry header and asks the compiler, compiled to an object file (cc -c
// -g; never run), for
//
//   - every record, function and tagged enum of the first Unit, through
//     a pointer variable: the object's DWARF gives their sizes, member
//     offsets, bit positions, array lengths and the signedness of every
//     integer (cgo -godefs reads the same);
//   - the alignment and size of every type the Unit spells (Type.Spell),
//     the value and signedness of every constant, in data arrays;
//   - which conditional groups of the -I headers its preprocessor took
//     (cond.go), and whether cgo's wrapper names are macros.
//
// The declarations are the first Unit's only where the target's
// preprocessor took the same groups of the same -I headers, every record
// and function has the same members and parameters of the same kinds,
// and every constant has the same value. Anything else is a difference:
// the target is then translated on its own (with a note saying where),
// never merged into the first's model. A probe that does not compile is
// one too (the note names the record it asked about and the compiler's
// first error): the translation reports what is wrong, as it always has.

// probeVar names the probe's variables and arrays.
const probeVar = "verbsexp_probe_"

// A difference says why a target's declarations are not the first
// Unit's, where it was found.
type difference struct {
	Pos Pos
	Msg string
}

// probePlan is the C a probe compiles and what each part asks.
type probePlan struct {
	src    string
	owners []string // line (from 1) → what it asks about, for messages

	spells  []string // types by spelling: sizeof and _Alignof
	spellAt map[string]int
	values  []string // macros, then enumerators
	macros  int      // how many of values are macros
	markers []string // the -I headers' conditional markers
	cgo     []string // names cgo's wrappers declare
}

// Spellings every probe asks about first: the pointers, whose alignment
// no Spell gives.
const (
	dataPointer = "void *"
	funcPointer = "void (*)(void)"
)

func newProbePlan(u *Unit, entry, arch string, markers []string) *probePlan {
	p := &probePlan{spellAt: map[string]int{}, markers: markers}
	var b strings.Builder
	line := func(owner, format string, args ...any) {
		fmt.Fprintf(&b, format, args...)
		b.WriteByte('\n')
		p.owners = append(p.owners, owner)
	}
	line("", "/* The probe of linux/%s: its compiler's layout of the declarations translated for linux/%s (verbsexp/gen). */", arch, u.GoArch)
	line("the headers", "#include <%s>", entry)
	for _, s := range []string{dataPointer, funcPointer} {
		p.spell(s)
	}
	for k, r := range u.Records {
		line(r.CName(), "%s *%sr%d;", r.CName(), probeVar, k)
		p.spell(r.CName())
		p.spellsOf(r)
	}
	for k, f := range u.Funcs {
		line("function "+f.Name, "__typeof__(%s) *%sf%d;", f.Name, probeVar, k)
		p.sigSpells(f.Sig)
	}
	for k, e := range u.Enums {
		if e.Tag != "" {
			line("enum "+e.Tag, "enum %s *%se%d;", e.Tag, probeVar, k)
		}
	}
	array := func(name, typ string, n int, item func(i int) (owner, c string)) {
		line("", "const %s %s%s[] = {", typ, probeVar, name)
		for i := 0; i < n; i++ {
			owner, c := item(i)
			line(owner, "%s,", c)
		}
		line("", "0 };") // never empty
	}
	array("size", "unsigned long long", len(p.spells), func(i int) (string, string) {
		return "type " + p.spells[i], "sizeof(" + p.spells[i] + ")"
	})
	array("align", "unsigned long long", len(p.spells), func(i int) (string, string) {
		return "type " + p.spells[i], "_Alignof(" + p.spells[i] + ")"
	})
	for _, m := range u.Macros {
		p.values = append(p.values, m.Name)
	}
	p.macros = len(p.values)
	for _, e := range u.Enums {
		for _, en := range e.Enumerators {
			p.values = append(p.values, en.Name)
		}
	}
	array("value", "unsigned long long", len(p.values), func(i int) (string, string) {
		what := "constant "
		if i >= p.macros {
			what = "enumerator "
		}
		return what + p.values[i], "(unsigned long long)(" + p.values[i] + ")"
	})
	array("signed", "unsigned char", p.macros, func(i int) (string, string) {
		v := p.values[i]
		return "constant " + v, fmt.Sprintf("((__typeof__(%s))-1 < (__typeof__(%s))0)", v, v)
	})
	defined := func(name string, names []string) {
		line("", "const unsigned char %s%s[] = {", probeVar, name)
		for _, n := range names {
			line("", "#ifdef %s", n)
			line("", "1,")
			line("", "#else")
			line("", "0,")
			line("", "#endif")
		}
		line("", "0 };")
	}
	defined("cond", p.markers)
	p.cgo = cgoCandidates(u)
	defined("cgo", p.cgo)
	p.src = b.String()
	return p
}

// cgoCandidates are the names Unit.CgoMacros may hold that a probe looks
// up: the first's, r and v, and p0 … pN for N past every function's
// parameters (the only ones cgo's wrappers declare).
func cgoCandidates(u *Unit) []string {
	n := 16
	for _, f := range u.Funcs {
		n = max(n, len(f.Sig.Params)+1)
	}
	seen := map[string]bool{"r": true, "v": true}
	names := []string{"r", "v"}
	for i := 0; i < n; i++ {
		seen["p"+strconv.Itoa(i)] = true
		names = append(names, "p"+strconv.Itoa(i))
	}
	for _, m := range u.CgoMacros {
		if !seen[m] {
			names = append(names, m)
		}
	}
	return names
}

func (p *probePlan) spell(s string) {
	if _, ok := p.spellAt[s]; !ok {
		p.spellAt[s] = len(p.spells)
		p.spells = append(p.spells, s)
	}
}

func (p *probePlan) spellsOf(r *Record) {
	for _, m := range r.Members {
		p.typeSpells(m.Type)
	}
}

func (p *probePlan) sigSpells(s *Signature) {
	if s == nil {
		return
	}
	p.typeSpells(s.Result)
	for _, q := range s.Params {
		p.typeSpells(q.Type)
	}
}

func (p *probePlan) typeSpells(t *Type) {
	for ; t != nil; t = t.Elem {
		if t.Spell != "" && t.Size > 0 {
			p.spell(t.Spell)
		}
		if t.Record != nil {
			p.spellsOf(t.Record)
		}
		p.sigSpells(t.Sig)
	}
}

// probeResult is what a compiled probe says.
type probeResult struct {
	types         map[string]dwarf.Type // probe variable → the type it points to
	size, align   []int64               // by spelling
	values        []uint64
	signed, conds []bool
	cgo           []bool
	read          []string // the files the compiler read (its -MD list)
}

// compileProbe compiles plan with comp, the -I directories includes first,
// in dir; a probe that does not compile is a difference (what its first
// error says, and about what).
func compileProbe(comp *Compiler, plan *probePlan, dir string, includes []string, unmap func(string) string) (*probeResult, *difference, error) {
	obj, deps := filepath.Join(dir, comp.Target.GoArch+".o"), filepath.Join(dir, comp.Target.GoArch+".d")
	c, err := abicheck.CompileObject(comp.Path, comp.Target, plan.src, obj, includes,
		"-g", "-w", "-MD", "-MF", deps, "-fno-diagnostics-show-caret", "-fmax-errors=10")
	if err != nil {
		return nil, nil, err
	}
	if c.Err != nil {
		return nil, probeFailure(comp, plan, c, unmap), nil
	}
	r := &probeResult{types: map[string]dwarf.Type{}}
	if r.read, err = readDepFile(deps); err != nil {
		return nil, nil, fmt.Errorf("linux/%s: reading the probe's dependencies: %v", comp.Target.GoArch, err)
	}
	if err := r.readObject(obj, plan); err != nil {
		return nil, nil, fmt.Errorf("linux/%s: reading the probe %s compiled: %v", comp.Target.GoArch, comp.Name, err)
	}
	return r, nil, nil
}

// errorLine is a compiler diagnostic: file:line:col: error: message.
var errorLine = regexp.MustCompile(`^(.*?):(\d+):(?:\d+:)? (?:fatal )?error: (.*)$`)

// probeFailure says what the probe asked about on the line of the
// compiler's first error, and the error (in the -I headers' own names).
func probeFailure(comp *Compiler, plan *probePlan, c *abicheck.Compiled, unmap func(string) string) *difference {
	for _, l := range strings.Split(c.Out, "\n") {
		m := errorLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[2])
		if m[1] == c.File && n >= 1 && n <= len(plan.owners) && plan.owners[n-1] != "" && plan.owners[n-1] != "the headers" {
			return &difference{Msg: fmt.Sprintf("the probe of %s does not compile with %s: %s", plan.owners[n-1], comp.Name, m[3])}
		}
		return &difference{Msg: fmt.Sprintf("the headers do not compile with %s: %s: %s", comp.Name, unmap(m[1])+":"+m[2], m[3])}
	}
	out := strings.TrimSpace(c.Out)
	if i := strings.IndexByte(out, '\n'); i >= 0 {
		out = out[:i]
	}
	if out == "" {
		out = c.Err.Error()
	}
	return &difference{Msg: fmt.Sprintf("the probe does not compile with %s (is its assembler, binutils-%s, installed?): %s", comp.Name, comp.Target.GNUTriplet, out)}
}

// readDepFile reads the files of a make rule written by -MD (the target
// and its colon dropped, escaped spaces kept).
func readDepFile(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s := strings.ReplaceAll(string(b), "\\\n", " ")
	if i := strings.Index(s, ": "); i >= 0 {
		s = s[i+2:]
	}
	var files []string
	var cur strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && i+1 < len(s) && (s[i+1] == ' ' || s[i+1] == '#'):
			cur.WriteByte(s[i+1])
			i++
		case c == '$' && i+1 < len(s) && s[i+1] == '$':
			cur.WriteByte('$')
			i++
		case c == ' ' || c == '\n' || c == '\t' || c == '\r':
			if cur.Len() > 0 {
				files = append(files, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteByte(c)
		}
	}
	if cur.Len() > 0 {
		files = append(files, cur.String())
	}
	return files, nil
}

// readObject reads the probe's variables' types from the object's DWARF
// and its arrays from its data.
func (r *probeResult) readObject(obj string, plan *probePlan) error {
	f, err := elf.Open(obj)
	if err != nil {
		return err
	}
	defer f.Close()
	d, err := f.DWARF()
	if err != nil {
		return err
	}
	rd := d.Reader()
	for {
		e, err := rd.Next()
		if err != nil {
			return err
		}
		if e == nil {
			break
		}
		switch e.Tag {
		case dwarf.TagCompileUnit:
			continue
		case dwarf.TagVariable:
			name, _ := e.Val(dwarf.AttrName).(string)
			off, ok := e.Val(dwarf.AttrType).(dwarf.Offset)
			if strings.HasPrefix(name, probeVar) && ok {
				t, err := d.Type(off)
				if err != nil {
					return err
				}
				if p, ok := t.(*dwarf.PtrType); ok {
					r.types[name] = p.Type
				}
			}
		}
		if e.Children {
			rd.SkipChildren()
		}
	}
	data, err := abicheck.SymbolData(obj)
	if err != nil {
		return err
	}
	words := func(name string, n int) ([]uint64, error) {
		b := data[probeVar+name]
		if len(b) != 8*(n+1) {
			return nil, fmt.Errorf("%s%s holds %d bytes, not %d", probeVar, name, len(b), 8*(n+1))
		}
		w := make([]uint64, n)
		for i := range w {
			w[i] = binary.LittleEndian.Uint64(b[8*i:])
		}
		return w, nil
	}
	flags := func(name string, n int) ([]bool, error) {
		b := data[probeVar+name]
		if len(b) != n+1 {
			return nil, fmt.Errorf("%s%s holds %d bytes, not %d", probeVar, name, len(b), n+1)
		}
		f := make([]bool, n)
		for i := range f {
			f[i] = b[i] != 0
		}
		return f, nil
	}
	size, err := words("size", len(plan.spells))
	if err != nil {
		return err
	}
	align, err := words("align", len(plan.spells))
	if err != nil {
		return err
	}
	for i := range size {
		r.size = append(r.size, int64(size[i]))
		r.align = append(r.align, int64(align[i]))
	}
	if r.values, err = words("value", len(plan.values)); err != nil {
		return err
	}
	if r.signed, err = flags("signed", plan.macros); err != nil {
		return err
	}
	if r.conds, err = flags("cond", len(plan.markers)); err != nil {
		return err
	}
	r.cgo, err = flags("cgo", len(plan.cgo))
	return err
}

// deriveUnit is first with goarch's layout from what its probe says, or
// the first difference found.
func deriveUnit(first *Unit, goarch string, plan *probePlan, res *probeResult, headersRead []string, markerPos map[string]Pos) (*Unit, *difference) {
	u := copyUnit(first)
	u.GoArch = goarch
	// The same -I headers, the same groups of them.
	if d := sameHeaders(first.Headers, headersRead); d != nil {
		return nil, d
	}
	taken := map[string]bool{}
	for i, m := range plan.markers {
		if res.conds[i] {
			taken[m] = true
		}
	}
	for _, c := range first.Conds {
		if strings.HasPrefix(c, untracedPrefix) {
			return nil, &difference{Msg: fmt.Sprintf("%s has #line directives, so the groups its preprocessor takes cannot be compared", strings.TrimPrefix(c, untracedPrefix))}
		}
		if !taken[c] {
			return nil, &difference{Pos: markerPos[c], Msg: fmt.Sprintf("this conditional group is taken on linux/%s, not on linux/%s", first.GoArch, goarch)}
		}
		delete(taken, c)
	}
	for _, m := range plan.markers {
		if taken[m] {
			return nil, &difference{Pos: markerPos[m], Msg: fmt.Sprintf("this conditional group is taken on linux/%s, not on linux/%s", goarch, first.GoArch)}
		}
	}
	v := &layoutReader{res: res, plan: plan, goarch: goarch}
	for k, r := range u.Records {
		v.topRecord(r, res.types[fmt.Sprintf("%sr%d", probeVar, k)])
	}
	for k, f := range u.Funcs {
		if ft, ok := res.types[fmt.Sprintf("%sf%d", probeVar, k)].(*dwarf.FuncType); ok {
			v.sig(f.Sig, ft, f.Pos, "function "+f.Name)
		} else {
			v.differ(f.Pos, "function %s is not a function here", f.Name)
		}
	}
	values := res.values
	for i, m := range u.Macros {
		// The same bits are the same constant; its signedness shows only
		// in a value with the top bit set (the front end's typing of
		// enumerators is not C's, so it is compared only there).
		if values[i] != m.Value.Bits || values[i]>>63 != 0 && res.signed[i] != m.Value.Signed {
			v.differ(m.Pos, "constant %s is %s here", m.Name, valueString(values[i], res.signed[i]))
		}
	}
	values = values[len(u.Macros):]
	for k, e := range u.Enums {
		if e.Tag != "" {
			et, ok := res.types[fmt.Sprintf("%se%d", probeVar, k)].(*dwarf.EnumType)
			if !ok || et.ByteSize != e.Size {
				v.differ(e.Pos, "enum %s is not %d bytes here", e.Tag, e.Size)
			}
		}
		for _, en := range e.Enumerators {
			if values[0] != en.Value.Bits {
				v.differ(en.Pos, "enumerator %s is %d here", en.Name, int64(values[0]))
			}
			values = values[1:]
		}
	}
	var cgo []string
	for i, n := range plan.cgo {
		if res.cgo[i] {
			cgo = append(cgo, n)
		}
	}
	sort.Strings(cgo)
	if strings.Join(cgo, " ") != strings.Join(first.CgoMacros, " ") {
		v.differ(Pos{}, "the macros named as cgo's wrapper variables are %v, not %v", cgo, first.CgoMacros)
	}
	if v.diff != nil {
		return nil, v.diff
	}
	return u, nil
}

func valueString(bits uint64, signed bool) string {
	if signed {
		return strconv.FormatInt(int64(bits), 10)
	}
	return strconv.FormatUint(bits, 10)
}

// sameHeaders compares the -I headers two translations read.
func sameHeaders(first, read []string) *difference {
	a, b := map[string]bool{}, map[string]bool{}
	for _, p := range first {
		a[p] = true
	}
	for _, p := range read {
		b[p] = true
	}
	for _, p := range read {
		if !a[p] {
			return &difference{Msg: fmt.Sprintf("it reads %s, which the translated target does not", p)}
		}
	}
	for _, p := range first {
		if !b[p] {
			return &difference{Msg: fmt.Sprintf("it does not read %s, which the translated target does", p)}
		}
	}
	return nil
}

// copyUnit copies u deeply: the probed target's numbers go into the copy.
func copyUnit(u *Unit) *Unit {
	c := *u
	c.Inputs = slices.Clone(u.Inputs)
	c.Records = copyRecords(u.Records)
	c.Opaque = copyRecords(u.Opaque)
	c.Enums = copyEach(u.Enums, func(e *Enum) *Enum {
		ce := *e
		ce.Enumerators = copyEach(e.Enumerators, func(en *Enumerator) *Enumerator { c := *en; return &c })
		return &ce
	})
	c.Macros = copyEach(u.Macros, func(m *Macro) *Macro { c := *m; return &c })
	c.Funcs = copyEach(u.Funcs, func(f *Func) *Func {
		cf := *f
		cf.Sig = copySig(f.Sig)
		return &cf
	})
	c.Notes = slices.Clone(u.Notes)
	c.Read, c.CgoMacros = slices.Clone(u.Read), slices.Clone(u.CgoMacros)
	c.Headers, c.Conds = slices.Clone(u.Headers), slices.Clone(u.Conds)
	c.probeDeps = nil
	return &c
}

// copyEach copies s with f (nil stays nil, as the cache's decoding has it).
func copyEach[T any](s []T, f func(T) T) []T {
	if s == nil {
		return nil
	}
	c := make([]T, len(s))
	for i, x := range s {
		c[i] = f(x)
	}
	return c
}

func copyRecords(rs []*Record) []*Record { return copyEach(rs, copyRecord) }

func copyRecord(r *Record) *Record {
	if r == nil {
		return nil
	}
	c := *r
	c.Members = copyEach(r.Members, func(m *Member) *Member {
		cm := *m
		cm.Type = copyType(m.Type)
		return &cm
	})
	return &c
}

func copyType(t *Type) *Type {
	if t == nil {
		return nil
	}
	c := *t
	c.Elem = copyType(t.Elem)
	c.Record = copyRecord(t.Record)
	c.Sig = copySig(t.Sig)
	return &c
}

func copySig(s *Signature) *Signature {
	if s == nil {
		return nil
	}
	c := *s
	c.Result = copyType(s.Result)
	c.Params = copyEach(s.Params, func(p Param) Param { return Param{Name: p.Name, Type: copyType(p.Type)} })
	return &c
}

// layoutReader fills a copy of the first Unit's declarations with the
// target's numbers, and records the first difference.
type layoutReader struct {
	res    *probeResult
	plan   *probePlan
	goarch string
	diff   *difference
}

func (v *layoutReader) differ(pos Pos, format string, args ...any) {
	if v.diff == nil {
		v.diff = &difference{Pos: pos, Msg: fmt.Sprintf(format, args...)}
	}
}

// spelled returns the size and alignment of spelling s on the target.
func (v *layoutReader) spelled(s string) (size, align int64, ok bool) {
	i, ok := v.plan.spellAt[s]
	if !ok {
		return 0, 0, false
	}
	return v.res.size[i], v.res.align[i], true
}

func (v *layoutReader) topRecord(r *Record, t dwarf.Type) {
	st, ok := t.(*dwarf.StructType)
	if !ok || st.Kind != string(r.Kind) || st.StructName != r.Tag || st.Incomplete {
		v.differ(r.Pos, "%s is not defined here", r.CName())
		return
	}
	size, align, ok := v.spelled(r.CName())
	if !ok || size != st.ByteSize {
		v.differ(r.Pos, "%s: sizeof says %d bytes, its debugging information %d", r.CName(), size, st.ByteSize)
		return
	}
	v.members(r, st)
	r.Size, r.Align = st.ByteSize, int(align)
}

// nested fills an unnamed record. C cannot name it, so its alignment is
// its members' rule's, which the declarations fix: the first Unit's,
// unless a member's alignment changed.
func (v *layoutReader) nested(r *Record, st *dwarf.StructType) {
	if st.Kind != string(r.Kind) || st.StructName != "" || st.Incomplete {
		v.differ(r.Pos, "an unnamed %s is not one here", r.Kind)
		return
	}
	old := make([]int, len(r.Members))
	for i, m := range r.Members {
		old[i] = m.Type.Align
	}
	v.members(r, st)
	for i, m := range r.Members {
		if m.Type.Align != old[i] {
			v.differ(m.Pos, "member %s of an unnamed %s is aligned to %d here, not %d: the record's alignment cannot be asked", m.Name, r.Kind, m.Type.Align, old[i])
		}
	}
	r.Size = st.ByteSize
}

func (v *layoutReader) members(r *Record, st *dwarf.StructType) {
	var fields []*dwarf.StructField
	for _, f := range st.Field {
		if f.Name == "" && f.BitSize > 0 {
			continue // unnamed bit-fields only pad (parse skips them too)
		}
		fields = append(fields, f)
	}
	if len(fields) != len(r.Members) {
		v.differ(r.Pos, "%s has %d members here, not %d", recordName(r), len(fields), len(r.Members))
		return
	}
	for i, m := range r.Members {
		f := fields[i]
		if f.Name != m.Name || (f.BitSize > 0) != m.BitField {
			v.differ(m.Pos, "%s: member %d is %q here, not %q", recordName(r), i, f.Name, m.Name)
			return
		}
		if m.BitField {
			bit := f.DataBitOffset
			if f.ByteSize > 0 { // DWARF 2–4: from the storage unit's most significant bit
				bit = f.ByteOffset*8 + f.ByteSize*8 - f.BitOffset - f.BitSize
			}
			if int(f.BitSize) != m.BitSize {
				v.differ(m.Pos, "bit-field %s is %d bits here, not %d", m.Name, f.BitSize, m.BitSize)
			}
			m.BitOffset, m.Offset = bit, bit/8
		} else {
			m.Offset = f.ByteOffset
		}
		v.typ(m.Type, f.Type, m.Pos, recordName(r)+"."+m.Name)
	}
}

func recordName(r *Record) string {
	if r.Tag == "" {
		return "an unnamed " + string(r.Kind)
	}
	return r.CName()
}

// strip removes qualifiers and typedefs.
func strip(t dwarf.Type) dwarf.Type {
	for {
		switch q := t.(type) {
		case *dwarf.QualType:
			t = q.Type
		case *dwarf.TypedefType:
			t = q.Type
		default:
			return t
		}
	}
}

// typ fills t, the first Unit's type of what is at pos (named what),
// from dt, the target's.
func (v *layoutReader) typ(t *Type, dt dwarf.Type, pos Pos, what string) {
	if v.diff != nil {
		return
	}
	oldSize, oldAlign := t.Size, t.Align
	elemAlign := 0
	if t.Elem != nil {
		elemAlign = t.Elem.Align
	}
	u := strip(dt)
	bad := func() { v.differ(pos, "%s: its type is %s here", what, typeString(dt)) }
	switch t.Kind {
	case Void:
		if _, ok := u.(*dwarf.VoidType); !ok && u != nil {
			bad()
		}
		return
	case Int:
		switch u := u.(type) {
		case *dwarf.IntType, *dwarf.CharType:
			t.Signed = true
		case *dwarf.UintType, *dwarf.UcharType:
			t.Signed = false
		case *dwarf.EnumType:
			// The underlying type follows the values, which the
			// declarations fix: the first Unit's, unless the size moved.
			if u.ByteSize != t.Size {
				bad()
			}
		default:
			bad()
			return
		}
		t.Size = u.Size()
	case Bool:
		if _, ok := u.(*dwarf.BoolType); !ok {
			bad()
			return
		}
		t.Size = u.Size()
	case Float:
		if _, ok := u.(*dwarf.FloatType); !ok {
			bad()
			return
		}
		t.Size = u.Size()
	case Pointer:
		p, ok := u.(*dwarf.PtrType)
		if !ok {
			bad()
			return
		}
		t.Size = p.ByteSize
		v.typ(t.Elem, p.Type, pos, what+" (its target)")
	case Array:
		a, ok := u.(*dwarf.ArrayType)
		if !ok {
			bad()
			return
		}
		v.typ(t.Elem, a.Type, pos, what+" (its element)")
		if a.Count <= 0 {
			if t.Len != 0 {
				bad()
			}
			break // flexible or empty: the first's size (no element's)
		}
		t.Len = a.Count
		t.Size = t.Len * t.Elem.Size
	case RecordRef:
		st, ok := u.(*dwarf.StructType)
		if !ok || st.Kind != string(t.RecordKind) || st.StructName != t.Tag {
			bad()
			return
		}
		if t.Size <= 0 {
			// Incomplete where it is named (a pointer to the record
			// being defined): the front end says so on every target.
			return
		}
		if st.Incomplete {
			bad()
			return
		}
		t.Size = st.ByteSize
	case Nested:
		st, ok := u.(*dwarf.StructType)
		if !ok {
			bad()
			return
		}
		v.nested(t.Record, st)
		t.Size, t.Align = t.Record.Size, t.Record.Align
		return
	case EnumRef:
		et, ok := u.(*dwarf.EnumType)
		if !ok || et.EnumName != t.Tag {
			bad()
			return
		}
		t.Size = et.ByteSize
	case Function:
		ft, ok := u.(*dwarf.FuncType)
		if !ok {
			bad()
			return
		}
		v.sig(t.Sig, ft, pos, what)
		return
	case Opaque:
		if dt == nil || dt.Size() <= 0 && t.Size > 0 {
			bad()
			return
		}
		if dt.Size() > 0 {
			t.Size = dt.Size()
		}
	}
	// The alignment: asked by spelling; a pointer's is void *'s (or a
	// function pointer's); an array's is its element's, as C has it.
	switch {
	case t.Spell != "" && t.Size > 0:
		size, align, ok := v.spelled(t.Spell)
		if !ok || size != t.Size {
			v.differ(pos, "%s: sizeof(%s) says %d bytes, its debugging information %d", what, t.Spell, size, t.Size)
			return
		}
		t.Align = int(align)
	case t.Kind == Pointer:
		s := dataPointer
		if t.Elem != nil && t.Elem.Kind == Function {
			s = funcPointer
		}
		_, align, _ := v.spelled(s)
		t.Align = int(align)
	case t.Kind == Array && t.Elem != nil:
		if oldAlign != elemAlign {
			v.differ(pos, "%s: an array aligned unlike its element cannot be asked", what)
			return
		}
		t.Align = t.Elem.Align
	case t.Size != oldSize:
		v.differ(pos, "%s: its type is %d bytes here, not %d, and C cannot name it to ask its alignment", what, t.Size, oldSize)
	}
}

// sig fills a signature from a function type.
func (v *layoutReader) sig(s *Signature, ft *dwarf.FuncType, pos Pos, what string) {
	params := ft.ParamType
	variadic := false
	if n := len(params); n > 0 {
		if _, ok := params[n-1].(*dwarf.DotDotDotType); ok {
			params, variadic = params[:n-1], true
		}
	}
	if variadic != s.Variadic || len(params) != len(s.Params) {
		v.differ(pos, "%s has %d parameters here (variadic: %v), not %d (%v)", what, len(params), variadic, len(s.Params), s.Variadic)
		return
	}
	v.typ(s.Result, ft.ReturnType, pos, what+" (its result)")
	for i := range s.Params {
		v.typ(s.Params[i].Type, params[i], pos, fmt.Sprintf("%s (parameter %d)", what, i+1))
	}
}

func typeString(t dwarf.Type) string {
	if t == nil {
		return "void"
	}
	return t.String()
}

// overlay is the marked copies of the first translation's -I headers
// that probes read (their -I directories, in the order of the real ones,
// each before its real one).
type overlay struct {
	dir      string
	includes []string
	markers  []string
	pos      map[string]Pos    // marker → the directive it follows
	orig     map[string]string // copy → real header
}

// writeOverlay copies headers (absolute, in the -I directories dirs),
// served as the C front end read them: marked (cond.go). The caller
// removes o.dir.
func writeOverlay(dirs, headers []string) (o *overlay, err error) {
	o = &overlay{pos: map[string]Pos{}, orig: map[string]string{}}
	if o.dir, err = os.MkdirTemp("", "verbsexp-probe-"); err != nil {
		return nil, err
	}
	fs := sourceFS{dirs: dirs}
	for k, d := range dirs {
		o.includes = append(o.includes, filepath.Join(o.dir, strconv.Itoa(k)), d)
	}
	for _, h := range headers {
		k, rel := -1, ""
		for i, d := range dirs {
			if r, err := filepath.Rel(d, h); err == nil && r != ".." && !strings.HasPrefix(r, "../") {
				k, rel = i, filepath.ToSlash(r)
				break
			}
		}
		if k < 0 || fs.relPath(h) == "" {
			return o, fmt.Errorf("%s is not in the -I directories", h)
		}
		b, err := inputfile.Read(h, maxHeaderBytes, "the generator reads headers of at most that size")
		if err != nil {
			return o, err
		}
		fi, err := os.Stat(h)
		if err != nil {
			return o, err
		}
		_, markers, _ := markConditionals(b, h)
		served, _ := servedBytes(b, fi, h)
		copyPath := filepath.Join(o.dir, strconv.Itoa(k), filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(copyPath), 0o755); err != nil {
			return o, err
		}
		if err := os.WriteFile(copyPath, served, 0o644); err != nil {
			return o, err
		}
		o.orig[copyPath] = h
		for _, m := range markers {
			line, _ := strconv.Atoi(m[strings.LastIndexByte(m, '_')+1:])
			o.pos[m] = Pos{File: rel, Line: line, Col: 1}
			o.markers = append(o.markers, m)
		}
	}
	return o, nil
}

// real maps a path the probe's compiler read back to the header it is a
// copy of (other paths stay).
func (o *overlay) real(p string) string {
	if r, ok := o.orig[filepath.Clean(p)]; ok {
		return r
	}
	return p
}
