//go:build linux && cgo

package main

import (
	"fmt"
	"io"
	"testing"
)

// TestAllreduce runs the schedule for 2, 4, 8 and 16 ranks with sums,
// maxima (MAXLOC) and the bitwise operations over every data type the
// device reduces, and checks every rank's result against Go.
func TestAllreduce(t *testing.T) {
	for _, n := range []int{2, 4, 8, 16} {
		for _, opName := range []string{"sum", "max", "and", "or", "xor"} {
			for _, typName := range []string{"int", "uint", "float"} {
				op, typ := ops[opName], types[typName]
				if (opName == "and" || opName == "or" || opName == "xor") && typName == "float" {
					continue // bitwise operations over float bits: same as uint
				}
				t.Run(fmt.Sprintf("%d/%s/%s", n, opName, typName), func(t *testing.T) {
					if err := run(n, op, typ, io.Discard); err != nil {
						t.Fatal(err)
					}
				})
			}
		}
	}
}
