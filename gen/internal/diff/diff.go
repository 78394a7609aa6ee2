// Package diff compares two abi.json manifests and classifies every
// difference as compatible or breaking for Go code compiled against the
// old package: a Go program built with the old bindings and run against
// the library of the new release, or recompiled against the new bindings.
//
// Rules, per arch:
//
//   - records, fields, constants, functions and arches that appear are
//     compatible; ones that disappear, or whose Go name changes, break.
//   - a record that grows is compatible (MLNX_OFED extends records at the
//     end behind comp_mask bits); one that shrinks, or whose alignment
//     grows, breaks.
//   - a member that moves, shrinks or changes its bits breaks; a member
//     whose Go access changes form (field ↔ accessor) is retyped and
//     breaks. A member with members of its own (a nested struct or union)
//     may grow: its own members are compared one by one.
//   - a constant whose value changes breaks, except a bound (model.Bounds
//     decides which, on both manifests): a reserved bound that grows (the
//     comp_mask sentinel: every mask valid before stays valid) and a flag
//     mask that gains bits (every flag accepted before still is).
//
// End-anchored records ("grows up" in the headers: verbs_context and
// verbs_context_exp) are found by subtracting from a pointer to their
// last member, so their members are compared by distance from the end
// and growth at the front is compatible.
package diff

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/verbsexp/verbsexp/gen/internal/model"
	"github.com/verbsexp/verbsexp/internal/cint"
	"github.com/verbsexp/verbsexp/internal/manifest"
)

// Kind names one class of change.
type Kind string

// The kinds of change, as they appear in -json output.
const (
	PackageRenamed  Kind = "package-renamed"
	ArchAdded       Kind = "arch-added"
	ArchRemoved     Kind = "arch-removed"
	RecordAdded     Kind = "record-added"
	RecordRemoved   Kind = "record-removed"
	RecordRenamed   Kind = "record-renamed"
	RecordSize      Kind = "record-size"
	RecordAlign     Kind = "record-align"
	FieldAdded      Kind = "field-added"
	FieldRemoved    Kind = "field-removed"
	FieldMoved      Kind = "field-moved"
	FieldResized    Kind = "field-resized"
	FieldRetyped    Kind = "field-retyped"
	FieldRenamed    Kind = "field-renamed"
	FieldBits       Kind = "field-bits"
	ConstantAdded   Kind = "constant-added"
	ConstantRemoved Kind = "constant-removed"
	ConstantChanged Kind = "constant-changed"
	ConstantRenamed Kind = "constant-renamed"
	FunctionAdded   Kind = "function-added"
	FunctionRemoved Kind = "function-removed"
	FunctionRenamed Kind = "function-renamed"
	FunctionChanged Kind = "function-changed"
)

// Change is one difference on one arch ("" for arch-independent ones:
// package, functions).
type Change struct {
	Arch         string `json:"arch,omitempty"`
	Kind         Kind   `json:"kind"`
	Subject      string `json:"subject"`
	Record       string `json:"record,omitempty"`
	Field        string `json:"field,omitempty"`
	Old          string `json:"old,omitempty"`
	New          string `json:"new,omitempty"`
	Breaking     bool   `json:"breaking"`
	Acknowledged bool   `json:"acknowledged,omitempty"`
	Why          string `json:"why"`
}

// ID identifies a change independently of the arch, as an ack file
// spells it: "KIND SUBJECT".
func (c Change) ID() string { return string(c.Kind) + " " + c.Subject }

// Options tunes the comparison.
type Options struct {
	// EndAnchored lists C record names ("struct verbs_context_exp") whose
	// members are addressed from the end of the record.
	EndAnchored []string
}

// DefaultEndAnchored are the records the verbs headers mark "grows up".
var DefaultEndAnchored = []string{"struct verbs_context", "struct verbs_context_exp"}

// Compare returns the changes from old to new, arch by arch in target
// order, each arch's records and constants in manifest order.
func Compare(old, new *manifest.Manifest, opt Options) []Change {
	anchored := map[string]bool{}
	for _, r := range opt.EndAnchored {
		anchored[r] = true
	}
	var cs []Change
	if old.Package != new.Package {
		cs = append(cs, Change{Kind: PackageRenamed, Subject: "package", Old: old.Package, New: new.Package, Breaking: true,
			Why: "imports of the old package name no longer resolve"})
	}
	for _, arch := range archOrder(old, new) {
		oa, na := old.Arches[arch], new.Arches[arch]
		switch {
		case na == nil:
			cs = append(cs, Change{Arch: arch, Kind: ArchRemoved, Subject: "linux/" + arch, Breaking: true,
				Why: "the package no longer builds for this arch"})
		case oa == nil:
			cs = append(cs, Change{Arch: arch, Kind: ArchAdded, Subject: "linux/" + arch,
				Why: "a new target; nothing built before depends on it"})
		default:
			cs = append(cs, compareArch(arch, oa, na, anchored)...)
		}
	}
	cs = append(cs, compareFunctions(old.Functions, new.Functions)...)
	return cs
}

// archOrder is the union of both manifests' arches: the usual targets
// first, then any other in name order.
func archOrder(old, new *manifest.Manifest) []string {
	seen := map[string]bool{}
	for a := range old.Arches {
		seen[a] = true
	}
	for a := range new.Arches {
		seen[a] = true
	}
	var order []string
	for _, a := range []string{"amd64", "arm64", "ppc64le"} {
		if seen[a] {
			order = append(order, a)
			delete(seen, a)
		}
	}
	var rest []string
	for a := range seen {
		rest = append(rest, a)
	}
	sort.Strings(rest)
	return append(order, rest...)
}

// byC indexes manifest entries by their C name.
func byC[T any](xs []T, name func(*T) string) map[string]*T {
	m := make(map[string]*T, len(xs))
	for i := range xs {
		m[name(&xs[i])] = &xs[i]
	}
	return m
}

func compareArch(arch string, oa, na *manifest.Arch, anchored map[string]bool) []Change {
	var cs []Change
	newRecs := byC(na.Records, func(r *manifest.Record) string { return r.C })
	oldRecs := map[string]bool{}
	for i := range oa.Records {
		o := &oa.Records[i]
		oldRecs[o.C] = true
		n := newRecs[o.C]
		if n == nil {
			cs = append(cs, Change{Arch: arch, Kind: RecordRemoved, Subject: o.C, Record: o.C, Old: o.Go, Breaking: true,
				Why: "Go code naming " + o.Go + " no longer compiles"})
			continue
		}
		cs = append(cs, compareRecord(arch, o, n, anchored[o.C])...)
	}
	for _, n := range na.Records {
		if !oldRecs[n.C] {
			cs = append(cs, Change{Arch: arch, Kind: RecordAdded, Subject: n.C, Record: n.C, New: n.Go,
				Why: "a new type; nothing built before depends on it"})
		}
	}
	cs = append(cs, compareConstants(arch, oa.Constants, na.Constants)...)
	return cs
}

func compareRecord(arch string, o, n *manifest.Record, endAnchored bool) []Change {
	var cs []Change
	add := func(c Change) {
		c.Arch, c.Record = arch, o.C
		if c.Subject == "" {
			c.Subject = o.C
		}
		cs = append(cs, c)
	}
	if o.Go != n.Go {
		add(Change{Kind: RecordRenamed, Old: o.Go, New: n.Go, Breaking: true,
			Why: "Go code naming " + o.Go + " no longer compiles"})
	}
	if o.Size != n.Size {
		c := Change{Kind: RecordSize, Old: itoa(o.Size), New: itoa(n.Size)}
		switch {
		case n.Size < o.Size:
			c.Breaking, c.Why = true, "shrunk: memory the old code fills or reads is no longer part of the record"
		case endAnchored:
			c.Why = "grown at the front of an end-anchored record: members keep their distance from the end"
		default:
			c.Why = "grown: old members are compared one by one; new ones stay zero unless their comp_mask bit is set"
		}
		add(c)
	}
	if o.Align != n.Align {
		c := Change{Kind: RecordAlign, Old: itoa(o.Align), New: itoa(n.Align)}
		if n.Align > o.Align {
			c.Breaking, c.Why = true, "stricter alignment: records placed by the old layout may be misaligned"
		} else {
			c.Why = "looser alignment: every old placement is still aligned"
		}
		add(c)
	}
	containers := func(fs []manifest.Field) map[string]bool {
		m := map[string]bool{}
		for _, f := range fs {
			if i := strings.LastIndexByte(f.C, '.'); i >= 0 {
				for p := f.C[:i]; ; {
					m[p] = true
					j := strings.LastIndexByte(p, '.')
					if j < 0 {
						break
					}
					p = p[:j]
				}
			}
		}
		return m
	}
	oldCont, newCont := containers(o.Fields), containers(n.Fields)
	pos := func(r *manifest.Record, f manifest.Field) (int64, string) {
		if endAnchored {
			return r.Size - f.Offset, "%d from the end"
		}
		return f.Offset, "offset %d"
	}
	newFields := byC(n.Fields, func(f *manifest.Field) string { return f.C })
	oldFields := map[string]bool{}
	for _, of := range o.Fields {
		oldFields[of.C] = true
		subject := o.C + "." + of.C
		nf := newFields[of.C]
		if nf == nil {
			add(Change{Subject: subject, Field: of.C, Kind: FieldRemoved, Old: of.Go, Breaking: true,
				Why: "Go code using " + of.Go + " no longer compiles"})
			continue
		}
		if of.Go != nf.Go {
			// The same names with different parentheses: a plain field
			// became an accessor (or the reverse) on the way to it.
			k, why := FieldRenamed, "Go code using "+of.Go+" no longer compiles"
			if strings.ReplaceAll(of.Go, "()", "") == strings.ReplaceAll(nf.Go, "()", "") {
				k, why = FieldRetyped, "the member changed between field and accessor: Go code using "+of.Go+" no longer compiles"
			}
			add(Change{Subject: subject, Field: of.C, Kind: k, Old: of.Go, New: nf.Go, Breaking: true, Why: why})
		}
		if of.Type != "" && nf.Type != "" && of.Type != nf.Type && of.Go == nf.Go {
			add(Change{Subject: subject, Field: of.C, Kind: FieldRetyped, Old: of.Type, New: nf.Type, Breaking: true,
				Why: "its Go type changed: Go code using " + of.Go + " as " + of.Type + " no longer compiles"})
		}
		if (of.BitOffset == nil) != (nf.BitOffset == nil) {
			add(Change{Subject: subject, Field: of.C, Kind: FieldRetyped, Old: bitsDesc(of), New: bitsDesc(*nf), Breaking: true,
				Why: "the member changed between bit-field and plain member"})
			continue
		}
		if of.BitOffset != nil {
			ob, nb := *of.BitOffset, *nf.BitOffset
			if endAnchored {
				ob, nb = o.Size*8-ob, n.Size*8-nb
			}
			if ob != nb || of.BitSize != nf.BitSize {
				add(Change{Subject: subject, Field: of.C, Kind: FieldBits, Old: bitsDesc(of), New: bitsDesc(*nf), Breaking: true,
					Why: "old code reads and writes other bits"})
			}
			continue
		}
		op, format := pos(o, of)
		np, _ := pos(n, *nf)
		if op != np {
			add(Change{Subject: subject, Field: of.C, Kind: FieldMoved, Old: fmt.Sprintf(format, op), New: fmt.Sprintf(format, np), Breaking: true,
				Why: "old code reads and writes the old position"})
		}
		if of.Size != nf.Size {
			c := Change{Subject: subject, Field: of.C, Kind: FieldResized, Old: itoa(of.Size), New: itoa(nf.Size)}
			switch {
			case nf.Size > of.Size && oldCont[of.C] && newCont[of.C]:
				c.Why = "a nested struct or union grew; its members are compared one by one"
			case nf.Size > of.Size:
				c.Breaking, c.Why = true, "wider: old code writes only part of it"
			default:
				c.Breaking, c.Why = true, "narrower: old code writes past it"
			}
			add(c)
		}
	}
	for _, nf := range n.Fields {
		if !oldFields[nf.C] {
			add(Change{Subject: o.C + "." + nf.C, Field: nf.C, Kind: FieldAdded, New: nf.Go,
				Why: "a new member; old code leaves it zero"})
		}
	}
	return cs
}

func bitsDesc(f manifest.Field) string {
	if f.BitOffset == nil {
		return fmt.Sprintf("offset %d size %d", f.Offset, f.Size)
	}
	return fmt.Sprintf("bits %d+%d", *f.BitOffset, f.BitSize)
}

func compareConstants(arch string, old, new []manifest.Constant) []Change {
	var cs []Change
	byName := byC(new, func(c *manifest.Constant) string { return c.C })
	oldBound, newBound := bounds(old), bounds(new)
	seen := map[string]bool{}
	for _, o := range old {
		seen[o.C] = true
		n := byName[o.C]
		c := Change{Arch: arch, Subject: o.C}
		switch {
		case n == nil:
			c.Kind, c.Old, c.Breaking, c.Why = ConstantRemoved, o.Go, true, "Go code using "+o.Go+" no longer compiles"
			cs = append(cs, c)
			continue
		case o.Go != n.Go:
			c.Kind, c.Old, c.New, c.Breaking, c.Why = ConstantRenamed, o.Go, n.Go, true, "Go code using "+o.Go+" no longer compiles"
			cs = append(cs, c)
		}
		if !o.Value.Equal(n.Value) {
			c := Change{Arch: arch, Subject: o.C, Kind: ConstantChanged, Old: o.Value.String(), New: n.Value.String(), Breaking: true,
				Why: "old code passes the old value, which the new release reads differently"}
			switch b := oldBound[o.C]; {
			case b != newBound[o.C]:
			case b == model.Reserved && o.Value.Less(n.Value):
				c.Breaking, c.Why = false, "comp_mask bound grew: every mask valid before is still below it"
			case b == model.Mask && o.Value.Bits&n.Value.Bits == o.Value.Bits:
				c.Breaking, c.Why = false, "mask of accepted flags widened: every flag accepted before still is"
			}
			cs = append(cs, c)
		}
	}
	for _, n := range new {
		if !seen[n.C] {
			cs = append(cs, Change{Arch: arch, Subject: n.C, Kind: ConstantAdded, New: n.Value.String(),
				Why: "a new constant; nothing built before depends on it"})
		}
	}
	return cs
}

// bounds is model.Bounds of one arch's constants, by C name.
func bounds(cs []manifest.Constant) map[string]model.Bound {
	names := make([]string, len(cs))
	values := make([]cint.Value, len(cs))
	for i, c := range cs {
		names[i], values[i] = c.C, c.Value
	}
	m := map[string]model.Bound{}
	for i, b := range model.Bounds(names, values) {
		if b != model.NotBound {
			m[names[i]] = b
		}
	}
	return m
}

func compareFunctions(old, new []manifest.Function) []Change {
	var cs []Change
	byName := byC(new, func(f *manifest.Function) string { return f.C })
	seen := map[string]bool{}
	for _, o := range old {
		seen[o.C] = true
		n := byName[o.C]
		switch {
		case n == nil:
			cs = append(cs, Change{Kind: FunctionRemoved, Subject: o.C, Old: o.Go, Breaking: true,
				Why: "callers of " + o.C + " no longer link or compile"})
			continue
		case o.Go != n.Go:
			cs = append(cs, Change{Kind: FunctionRenamed, Subject: o.C, Old: o.Go, New: n.Go, Breaking: true,
				Why: "Go code using " + o.Go + " no longer compiles"})
		}
		if o.Inline != n.Inline {
			c := Change{Kind: FunctionChanged, Subject: o.C, Old: inlineDesc(o.Inline), New: inlineDesc(n.Inline)}
			if n.Inline {
				c.Breaking, c.Why = true, "now static inline: the library need not export the symbol old code links against"
			} else {
				c.Why = "now exported: callers of the inline version keep working"
			}
			cs = append(cs, c)
		}
	}
	for _, n := range new {
		if !seen[n.C] {
			cs = append(cs, Change{Kind: FunctionAdded, Subject: n.C, New: n.Go,
				Why: "a new function; nothing built before depends on it"})
		}
	}
	return cs
}

func inlineDesc(inline bool) string {
	if inline {
		return "static inline"
	}
	return "extern"
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
