//go:build linux && cgo

package coll_test

import (
	"math"
	"testing"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/coll"
)

// TestOrderKey: the keys keep the order of INT and FLOAT values (and
// their complements reverse it), UINT values are their own keys, and
// every key decodes back.
func TestOrderKey(t *testing.T) {
	f := math.Float64bits
	for _, c := range []struct {
		typ  verbs.ExpCalcDataType
		vals []uint64 // ascending
	}{
		{verbs.ExpCalcDataTypeInt, []uint64{1 << 63, uint64(1<<64 - 11), 1<<64 - 1, 0, 5, 1<<63 - 1}},
		{verbs.ExpCalcDataTypeFloat, []uint64{f(math.Inf(-1)), f(-math.MaxFloat64), f(-10), f(-math.SmallestNonzeroFloat64),
			f(math.Copysign(0, -1)), 0, f(math.SmallestNonzeroFloat64), f(1), f(math.Inf(1))}},
		{verbs.ExpCalcDataTypeUint, []uint64{0, 1, 1 << 63, 1<<64 - 1}},
	} {
		for i, v := range c.vals {
			k := coll.OrderKey(v, c.typ)
			if back := coll.FromOrderKey(k, c.typ); back != v {
				t.Errorf("%v %#x decodes to %#x", c.typ, v, back)
			}
			if c.typ == verbs.ExpCalcDataTypeUint && k != v {
				t.Errorf("UINT %#x has key %#x", v, k)
			}
			if i > 0 {
				prev := coll.OrderKey(c.vals[i-1], c.typ)
				if prev >= k || ^prev <= ^k {
					t.Errorf("%v: key of %#x not below key of %#x (or its complement not above)", c.typ, c.vals[i-1], v)
				}
			}
		}
	}
}
