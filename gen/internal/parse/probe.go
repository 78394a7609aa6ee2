package parse

import (
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/verbsexp/verbsexp/internal/abicheck"
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
	compilerCPU.Add(int64(c.CPU))
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
		if m[1] == c.File {
			what := "its declarations"
			if n >= 1 && n <= len(plan.owners) && plan.owners[n-1] != "" {
				what = plan.owners[n-1]
			}
			return &difference{Msg: fmt.Sprintf("the probe of %s does not compile with %s: %s", what, comp.Name, m[3])}
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
