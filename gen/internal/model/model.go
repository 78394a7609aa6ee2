// Package model merges the per-target declarations from parse into one
// package description and decides every Go name: records, nested record
// types, members, enums, constants and functions. Emitters never compute a
// name; they read it here.
package model

import (
	"fmt"
	"slices"
	"sort"

	"github.com/verbsexp/verbsexp/gen/internal/parse"
	"github.com/verbsexp/verbsexp/internal/cint"
)

// Package is everything the generator emits, in declaration order.
type Package struct {
	Name    string
	Arches  []string // GOARCH values, in target order
	Inputs  []parse.Input
	Records []*Record // named records, each followed by its nested types
	Opaque  []*Record // declared, never defined: usable only by pointer
	Enums   []*Enum   // named enums (typed constants)
	Consts  []*Const  // anonymous-enum constants and integer macros
	Funcs   []*Func
	Notes   []parse.Diag // skipped constructs and name collisions
	// CgoMacros are the headers' object-like macros named as variables of
	// cgo's C wrappers, on any target (parse.Unit.CgoMacros).
	CgoMacros []string

	byC map[string]*Record // "struct tag" or nested path → record
	enu map[string]*Enum   // enum tag → enum
	ns  *namespace         // the package-level names (Claim)
}

// Record is a Go struct type standing for a C struct or union: a named
// record, or the unnamed type of a named member (Nested).
type Record struct {
	C      string // "struct ibv_exp_task", or "struct ibv_exp_task.item"
	GoName string
	Kind   parse.RecordKind
	Pos    parse.Pos
	Nested bool
	// ByArch is the record's definition on each target, in Package.Arches
	// order; nil where a target does not declare it.
	ByArch []*parse.Record
	// Members maps every member reachable on the Go type (members of
	// anonymous struct/union members included) to its Go name.
	Members map[string]string
}

// Enum is a named C enum: a Go type with typed constants.
type Enum struct {
	C      string // "enum ibv_exp_task_type"
	GoName string
	Pos    parse.Pos
	Size   int64
	Signed bool
	Values []*Const
}

// Const is an enumerator or an integer macro.
type Const struct {
	C      string
	GoName string
	Pos    parse.Pos
	Macro  bool
	// Value per arch, in Package.Arches order (nil-free: a constant missing
	// on one arch is noted and skipped there).
	Values []cint.Value
	Enum   *Enum // nil for anonymous-enum constants and macros
	// Bound says whether it delimits its family (Bounds) rather than
	// naming a value the API passes.
	Bound Bound
}

// SameOnAllArches reports whether the constant has one value everywhere.
func (c *Const) SameOnAllArches() bool {
	for _, v := range c.Values[1:] {
		if !v.Equal(c.Values[0]) {
			return false
		}
	}
	return true
}

// Func is a function declared in scope.
type Func struct {
	C      string
	GoName string
	Pos    parse.Pos
	Inline bool
	Sig    *parse.Signature
}

// Generated helper names the emitter declares; records cannot take them.
const (
	FuncPtrName = "FuncPtr"
)

// Build merges the units (one per target, same headers) into a Package.
func Build(name string, units []*parse.Unit) (*Package, error) {
	if len(units) == 0 {
		return nil, fmt.Errorf("no target translated")
	}
	p := &Package{Name: name, byC: map[string]*Record{}, enu: map[string]*Enum{}}
	for _, u := range units {
		p.Arches = append(p.Arches, u.GoArch)
	}
	p.Inputs = units[0].Inputs
	for _, u := range units {
		p.CgoMacros = append(p.CgoMacros, u.CgoMacros...)
	}
	sort.Strings(p.CgoMacros)
	p.CgoMacros = slices.Compact(p.CgoMacros)
	ns := newNamespace()
	ns.reserve(FuncPtrName)
	// shims.go imports cgo's "C", and no package-level name may be a
	// file's import name too.
	ns.taken["C"] = `cgo's import "C" of shims.go`
	p.ns = ns
	b := &builder{p: p, ns: ns, n: len(units), natural: naturalNames(units)}

	// Named records first: they own the plain names.
	byName := make([]map[string]*parse.Record, len(units)) // per unit, C name → record
	for i, u := range units {
		byName[i] = make(map[string]*parse.Record, len(u.Records))
		for _, r := range u.Records {
			byName[i][r.CName()] = r
		}
	}
	for _, key := range mergeOrder(units, func(u *parse.Unit) []keyed {
		var r []keyed
		for _, rec := range u.Records {
			r = append(r, keyed{rec.CName(), rec.Pos})
		}
		return r
	}) {
		rec := &Record{C: key.key, Kind: parse.RecordKind(kindOf(key.key)), Pos: key.pos, ByArch: make([]*parse.Record, len(units))}
		for i := range units {
			rec.ByArch[i] = byName[i][key.key]
		}
		rec.GoName = b.claim(rec.C, b.want(rec.C, tagOf(key.key), rec.Pos), kindSuffix(rec.Kind), rec.Pos)
		p.Records = append(p.Records, rec)
		p.byC[rec.C] = rec
	}
	for _, u := range units[:1] {
		for _, r := range u.Opaque {
			rec := &Record{C: r.CName(), Kind: r.Kind, Pos: r.Pos}
			rec.GoName = b.claim(rec.C, b.want(rec.C, r.Tag, r.Pos), kindSuffix(r.Kind), r.Pos)
			p.Opaque = append(p.Opaque, rec)
			p.byC[rec.C] = rec
		}
	}
	b.enums(units)
	// Nested record types and member names, after every top-level name.
	var all []*Record
	for _, rec := range p.Records {
		all = append(all, rec)
		all = append(all, b.nested(rec)...)
	}
	p.Records = all
	b.consts(units)
	p.decideBounds()
	b.funcs(units)
	if b.unstuttered > 0 {
		p.Notes = append(p.Notes, parse.Diag{Msg: fmt.Sprintf("%d Go names drop the package's name %s, which the package already says (%s is %s.%s)",
			b.unstuttered, p.Name, b.example[0], p.Name, b.example[1])})
	}
	p.Notes = append(p.Notes, b.notes...)
	for _, u := range units {
		p.Notes = append(p.Notes, u.Notes...)
	}
	p.Notes = dedupNotes(p.Notes)
	return p, nil
}

// Claim hands out a package-level Go name for what an emitter adds to the
// package (owner says what, for a note): want if no record, enum,
// constant or function has it, else want+suffix…, with a note at pos.
func (p *Package) Claim(owner, want, suffix string, pos parse.Pos) string {
	name, holder := p.ns.claim(owner, want, suffix)
	if holder != "" {
		p.Notes = append(p.Notes, parse.Diag{Pos: pos, Msg: fmt.Sprintf("Go name %s of %s is taken by %s; using %s", want, owner, holder, name)})
	}
	return name
}

// RenameRaw names the pointer form of a function that gets a slice form:
// f.GoName becomes its natural name with the suffix Raw (claimed as
// Claim claims), and the natural name, which f keeps holding, is
// returned for the slice form.
func (p *Package) RenameRaw(f *Func) string {
	natural := f.GoName
	f.GoName = p.Claim("the pointer form of "+f.C, natural+"Raw", "_", f.Pos)
	return natural
}

// RecordByC finds a record by its C name or nested path.
func (p *Package) RecordByC(c string) *Record { return p.byC[c] }

// EnumByTag finds a named enum.
func (p *Package) EnumByTag(tag string) *Enum { return p.enu[tag] }

type builder struct {
	p     *Package
	ns    *namespace
	n     int
	notes []parse.Diag
	// natural maps the GoName of every package-level C identifier to
	// the first declaration that has it; unstuttered counts the names
	// want shortened (example: the first, C and Go).
	natural     map[string]string
	unstuttered int
	example     [2]string
}

// want is the Go name a package-level declaration (what, "struct
// mlx5dv_qp"; its identifier c, "mlx5dv_qp") asks for: without the
// package's name in front (InPackage), unless the shorter name is
// another declaration's own, or the package's import "C"; then, and
// when the shorter name is no identifier, it keeps the longer one, with
// a note.
func (b *builder) want(what, c string, pos parse.Pos) string {
	name, kept := InPackage(b.p.Name, c)
	full := GoName(c)
	if kept == "" && name != full {
		if other, ok := b.natural[name]; ok {
			kept = name + " is " + other + "'s"
		} else if name == FuncPtrName || name == "C" {
			kept = name + " is a name the generator declares"
		}
	}
	if kept != "" {
		b.notes = append(b.notes, parse.Diag{Pos: pos, Msg: fmt.Sprintf("Go name %s of %s keeps the package's name: %s", full, what, kept)})
		return full
	}
	if name != full {
		if b.unstuttered == 0 {
			b.example = [2]string{full, name}
		}
		b.unstuttered++
	}
	return name
}

// naturalNames maps the GoName of each package-level declaration of the
// units (records, enums, constants, functions) to its C name, the first
// declaration's where several share it.
func naturalNames(units []*parse.Unit) map[string]string {
	m := map[string]string{}
	add := func(c, ident string) {
		if n := GoName(ident); m[n] == "" {
			m[n] = c
		}
	}
	for _, u := range units {
		for _, r := range u.Records {
			add(r.CName(), r.Tag)
		}
		for _, r := range u.Opaque {
			add(r.CName(), r.Tag)
		}
		for _, e := range u.Enums {
			if e.Tag != "" {
				add("enum "+e.Tag, e.Tag)
			}
			for _, en := range e.Enumerators {
				add(en.Name, en.Name)
			}
		}
		for _, mc := range u.Macros {
			add(mc.Name, mc.Name)
		}
		for _, f := range u.Funcs {
			add(f.Name, f.Name)
		}
	}
	return m
}

func (b *builder) claim(c, want, suffix string, pos parse.Pos) string {
	name, holder := b.ns.claim(c, want, suffix)
	if holder != "" {
		b.notes = append(b.notes, parse.Diag{Pos: pos, Msg: fmt.Sprintf("Go name %s of %s is taken by %s; using %s", want, c, holder, name)})
	}
	return name
}

type keyed struct {
	key string
	pos parse.Pos
}

// mergeOrder lists keys from all units: the first unit's order, then keys
// only later units have, in their order.
func mergeOrder(units []*parse.Unit, list func(*parse.Unit) []keyed) []keyed {
	seen := map[string]bool{}
	var r []keyed
	for _, u := range units {
		for _, k := range list(u) {
			if !seen[k.key] {
				seen[k.key] = true
				r = append(r, k)
			}
		}
	}
	return r
}

func kindOf(cname string) string {
	for i := 0; i < len(cname); i++ {
		if cname[i] == ' ' {
			return cname[:i]
		}
	}
	return cname
}

func tagOf(cname string) string { return cname[len(kindOf(cname))+1:] }

func kindSuffix(k parse.RecordKind) string {
	if k == parse.Union {
		return "Union"
	}
	return "Struct"
}

// nested names the unnamed types of named members of rec (recursively) and
// every member reachable on each Go type.
func (b *builder) nested(rec *Record) []*Record {
	rec.Members = b.memberNames(rec)
	var out []*Record
	var visit func(owner *Record, defs []*parse.Record, prefix string)
	visit = func(owner *Record, defs []*parse.Record, prefix string) {
		index := make([]map[string]*parse.Member, len(defs)) // per arch: reachable member by name
		for i, d := range defs {
			if d != nil {
				index[i] = reachableIndex(d)
			}
		}
		for _, m := range reachable(defs) {
			sub := make([]*parse.Record, len(defs))
			any := false
			for i := range defs {
				if mm := index[i][m.Name]; mm != nil && mm.Type.Kind == parse.Nested {
					sub[i] = mm.Type.Record
					any = true
				}
			}
			if !any {
				continue
			}
			var first *parse.Record
			for _, s := range sub {
				if s != nil {
					first = s
					break
				}
			}
			n := &Record{
				C:      prefix + "." + m.Name,
				Kind:   first.Kind,
				Pos:    m.Pos,
				Nested: true,
				ByArch: sub,
			}
			n.GoName = b.claim(n.C, owner.GoName+owner.Members[m.Name], kindSuffix(n.Kind), n.Pos)
			n.Members = b.memberNames(n)
			b.p.byC[n.C] = n
			out = append(out, n)
			visit(n, sub, n.C)
		}
	}
	visit(rec, rec.ByArch, rec.C)
	return out
}

// reachable lists the named members reachable on a record's Go type, over
// all arches, first arch first.
func reachable(defs []*parse.Record) []*parse.Member {
	seen := map[string]bool{}
	var r []*parse.Member
	for _, d := range defs {
		walkReachable(d, func(m *parse.Member) {
			if !seen[m.Name] {
				seen[m.Name] = true
				r = append(r, m)
			}
		})
	}
	return r
}

// reachableIndex maps the name of each member reachable on rec (through
// anonymous members) to the member; the first one wins, as C's lookup.
func reachableIndex(rec *parse.Record) map[string]*parse.Member {
	idx := map[string]*parse.Member{}
	walkReachable(rec, func(m *parse.Member) {
		if _, ok := idx[m.Name]; !ok {
			idx[m.Name] = m
		}
	})
	return idx
}

// walkReachable calls f for each named member of rec, in order, and of
// the records of its anonymous members, where they stand (rec may be nil).
func walkReachable(rec *parse.Record, f func(*parse.Member)) {
	if rec == nil {
		return
	}
	for _, m := range rec.Members {
		switch {
		case m.Name != "":
			f(m)
		case m.Type.Kind == parse.Nested:
			walkReachable(m.Type.Record, f)
		}
	}
}

// memberNames gives each reachable member a Go name unique on its type:
// a field or accessor X, and its setter SetX (unions, bit-fields and
// packed members get one, on some target), which no other member's name
// may be, whichever comes first.
func (b *builder) memberNames(rec *Record) map[string]string {
	ns := newNamespace()
	names := map[string]string{}
	for _, m := range reachable(rec.ByArch) {
		name, holder := ns.claimWith(m.Name, GoName(m.Name), "_", "Set", "the setter of "+m.Name)
		if holder != "" {
			b.notes = append(b.notes, parse.Diag{Pos: m.Pos, Msg: fmt.Sprintf("member %s of %s: Go name %s is taken by %s; using %s", m.Name, rec.C, GoName(m.Name), holder, name)})
		}
		names[m.Name] = name
	}
	return names
}

func (b *builder) enums(units []*parse.Unit) {
	order := mergeOrder(units, func(u *parse.Unit) []keyed {
		var r []keyed
		for _, e := range u.Enums {
			if e.Tag != "" {
				r = append(r, keyed{"enum " + e.Tag, e.Pos})
			}
		}
		return r
	})
	firstByTag := map[string]*parse.Enum{} // the first unit's definition of each tag
	for _, u := range units {
		for _, e := range u.Enums {
			if _, ok := firstByTag[e.Tag]; !ok && e.Tag != "" {
				firstByTag[e.Tag] = e
			}
		}
	}
	for _, k := range order {
		first := firstByTag[tagOf(k.key)]
		e := &Enum{C: k.key, Pos: k.pos, Size: first.Size, Signed: first.Signed}
		e.GoName = b.claim(e.C, b.want(e.C, first.Tag, e.Pos), "Enum", e.Pos)
		b.p.Enums = append(b.p.Enums, e)
		b.p.enu[first.Tag] = e
	}
}

// consts names enumerators (typed when their enum is named) and macros.
func (b *builder) consts(units []*parse.Unit) {
	type src struct {
		pos   parse.Pos
		macro bool
		enum  string // tag of the enum, "" for anonymous enums
	}
	order := mergeOrder(units, func(u *parse.Unit) []keyed {
		var r []keyed
		for _, e := range u.Enums {
			for _, en := range e.Enumerators {
				r = append(r, keyed{en.Name, en.Pos})
			}
		}
		for _, m := range u.Macros {
			r = append(r, keyed{m.Name, m.Pos})
		}
		return r
	})
	values := make([]map[string]cint.Value, len(units))
	info := map[string]src{}
	for i, u := range units {
		values[i] = map[string]cint.Value{}
		for _, e := range u.Enums {
			for _, en := range e.Enumerators {
				values[i][en.Name] = en.Value
				info[en.Name] = src{pos: en.Pos, enum: e.Tag}
			}
		}
		for _, m := range u.Macros {
			values[i][m.Name] = m.Value
			info[m.Name] = src{pos: m.Pos, macro: true}
		}
	}
	for _, k := range order {
		c := &Const{C: k.key, Pos: k.pos, Macro: info[k.key].macro}
		complete := true
		for i := range units {
			v, ok := values[i][k.key]
			if !ok {
				complete = false
				break
			}
			c.Values = append(c.Values, v)
		}
		if !complete {
			b.notes = append(b.notes, parse.Diag{Pos: k.pos, Msg: fmt.Sprintf("constant %s is not declared on every target; skipped", k.key)})
			continue
		}
		c.GoName = b.claim(c.C, b.want(c.C, c.C, c.Pos), "Const", c.Pos)
		if tag := info[k.key].enum; tag != "" {
			c.Enum = b.p.enu[tag]
			c.Enum.Values = append(c.Enum.Values, c)
			continue
		}
		b.p.Consts = append(b.p.Consts, c)
	}
}

func (b *builder) funcs(units []*parse.Unit) {
	for _, f := range units[0].Funcs {
		fn := &Func{C: f.Name, Pos: f.Pos, Inline: f.Inline, Sig: f.Sig}
		fn.GoName = b.claim(fn.C, b.want(fn.C, f.Name, f.Pos), "Func", f.Pos)
		b.p.Funcs = append(b.p.Funcs, fn)
	}
}

func dedupNotes(ds []parse.Diag) []parse.Diag {
	seen := map[string]bool{}
	var r []parse.Diag
	for _, d := range ds {
		if s := d.String(); !seen[s] {
			seen[s] = true
			r = append(r, d)
		}
	}
	sort.SliceStable(r, func(i, j int) bool { return r[i].String() < r[j].String() })
	return r
}
