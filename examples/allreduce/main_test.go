//go:build linux && cgo

package main

import (
	"fmt"
	"strings"
	"testing"
)

// TestAllreduce runs the schedule for every rank count from 2 to 16
// (powers of two and the others, with their extra ranks) with sums,
// maxima (MAXLOC) and the bitwise operations over every data type, twice
// each (the schedule posted again), and checks every rank's result
// against Go.
func TestAllreduce(t *testing.T) {
	for n := 2; n <= 16; n++ {
		for _, opName := range []string{"sum", "max", "and", "or", "xor"} {
			for _, typName := range []string{"int", "uint", "float"} {
				op, typ := ops[opName], types[typName]
				t.Run(fmt.Sprintf("%d/%s/%s", n, opName, typName), func(t *testing.T) {
					var out strings.Builder
					if err := run(n, op, typ, 2, &out); err != nil {
						t.Fatal(err)
					}
					if !strings.Contains(out.String(), "µs per allreduce") {
						t.Fatalf("output %q", out.String())
					}
				})
			}
		}
	}
}

// TestOrderKey: the encoding MAXLOC runs on keeps the order of int and
// float values, and decodes back.
func TestOrderKey(t *testing.T) {
	for _, c := range []struct {
		typ  string
		vals []uint64
	}{
		{"int", []uint64{1 << 63, uint64(1<<64 - 11), 0, 5, 1<<63 - 1}},
		{"float", []uint64{0xfff0000000000000, 0xc024000000000000, 0x8000000000000000, 0, 0x3ff0000000000000, 0x7ff0000000000000}},
	} {
		typ := types[c.typ]
		for i, v := range c.vals {
			if back := fromKey(orderKey(v, typ), typ); back != v {
				t.Errorf("%s %#x decodes to %#x", c.typ, v, back)
			}
			if i > 0 && orderKey(c.vals[i-1], typ) >= orderKey(v, typ) {
				t.Errorf("%s: key of %#x not below key of %#x", c.typ, c.vals[i-1], v)
			}
		}
	}
}
