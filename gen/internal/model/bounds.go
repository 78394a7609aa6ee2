package model

import (
	"strings"

	"github.com/verbsexp/verbsexp/internal/cint"
)

// Bound says whether a constant delimits a family of other constants
// instead of naming a value the API passes. Releases move bounds whenever
// they add a flag (4.9 added IBV_EXP_ACCESS_RELAXED_ORDERING at the bit of
// 4.6's IBV_EXP_ACCESS_RESERVED, which moved one bit up), so the build
// guards and the differ hold a bound to the relation that keeps old code
// valid instead of to its value.
type Bound uint8

const (
	NotBound Bound = iota
	// Reserved is one past the last member of its family (the
	// comp_mask sentinel: X_RESERVED - 1 is every valid bit). It may grow.
	Reserved
	// Mask is the union of its family's flags (the accepted flags). It
	// may gain bits.
	Mask
)

func (b Bound) String() string {
	switch b {
	case Reserved:
		return "reserved bound"
	case Mask:
		return "flag mask"
	}
	return "value"
}

// Bounds decides which of a target's constants are bounds, by one rule
// on their names and values (the constants of a package or of a
// manifest's arch, in any order). A constant's family is every other
// constant whose name begins with the same prefix: the name up to the
// RESERVED or MASK that ends it.
//
//   - P_RESERVED, P_RESERVED<N> or P_RESERVED_<N> is a Reserved bound when
//     its value is not negative and greater than every member of its
//     family: one past the last. (IBV_EXP_CQ_INIT_ATTR_RESERVED, a kept
//     value below IBV_EXP_CQ_INIT_ATTR_RESERVED1, is not one.)
//   - P_MASK or P_MASKS is a Mask bound when its value is not negative
//     and is either every bit from bit 0 up (2^k - 1: 0, 1, 3, 7, …) or
//     exactly the union of two or more members of its family. A single
//     higher bit named _MASK is a flag, as
//     IBV_EXP_DEVICE_ATTR_WITH_TIMESTAMP_MASK (bit 1) is.
//
// Anything else is a value and is pinned exactly. When a family mixes two
// sets (IBV_EXP_DEVICE_ATTR_ holds the bits of comp_mask and of
// comp_mask_2), the smaller set's bound fails the rule and stays pinned:
// the rule errs towards a build that fails, never one that misbehaves.
func Bounds(names []string, values []cint.Value) []Bound {
	r := make([]Bound, len(names))
	for i, name := range names {
		v := values[i]
		if v.Negative() {
			continue
		}
		if prefix, ok := reservedPrefix(name); ok {
			r[i] = Reserved
			for j, other := range names {
				if j != i && strings.HasPrefix(other, prefix) && !values[j].Less(v) {
					r[i] = NotBound
					break
				}
			}
			continue
		}
		prefix, ok := maskPrefix(name)
		if !ok {
			continue
		}
		if v.Bits&(v.Bits+1) == 0 {
			r[i] = Mask
			continue
		}
		var union uint64
		members := 0
		for j, other := range names {
			w := values[j]
			if j == i || !strings.HasPrefix(other, prefix) || w.Negative() || w.Bits == 0 || w.Bits&^v.Bits != 0 {
				continue
			}
			union |= w.Bits
			members++
		}
		if members >= 2 && union == v.Bits {
			r[i] = Mask
		}
	}
	return r
}

// reservedPrefix is P of P_RESERVED, P_RESERVED<N> or P_RESERVED_<N>
// (with its final underscore).
func reservedPrefix(name string) (string, bool) {
	i := strings.LastIndex(name, "_RESERVED")
	if i <= 0 {
		return "", false
	}
	rest := strings.TrimPrefix(name[i+len("_RESERVED"):], "_")
	if rest != "" && strings.Trim(rest, "0123456789") != "" || strings.HasSuffix(name, "_RESERVED_") {
		return "", false
	}
	return name[:i+1], true
}

// maskPrefix is P of P_MASK or P_MASKS.
func maskPrefix(name string) (string, bool) {
	for _, suffix := range []string{"_MASK", "_MASKS"} {
		if p, ok := strings.CutSuffix(name, suffix); ok && p != "" {
			return p + "_", true
		}
	}
	return "", false
}

// AllConsts lists every constant: the enums' values, then the others.
func (p *Package) AllConsts() []*Const {
	var all []*Const
	for _, e := range p.Enums {
		all = append(all, e.Values...)
	}
	return append(all, p.Consts...)
}

// decideBounds sets Const.Bound: a constant is a bound only if it is the
// same kind of bound on every target.
func (p *Package) decideBounds() {
	all := p.AllConsts()
	names := make([]string, len(all))
	for i, c := range all {
		names[i] = c.C
	}
	var verdict []Bound
	values := make([]cint.Value, len(all))
	for a := range p.Arches {
		for i, c := range all {
			values[i] = c.Values[a]
		}
		bs := Bounds(names, values)
		if verdict == nil {
			verdict = bs
			continue
		}
		for i := range verdict {
			if verdict[i] != bs[i] {
				verdict[i] = NotBound
			}
		}
	}
	for i, c := range all {
		c.Bound = verdict[i]
	}
}
