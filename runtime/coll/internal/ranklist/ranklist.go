// Package ranklist names sets of ranks in error messages, the same way
// in coll, its rendezvous and its PMIx exchange.
package ranklist

import (
	"strconv"
	"strings"
)

// Format is "rank 3" or "ranks 0, 2, 5".
func Format(ranks []int) string {
	s := make([]string, len(ranks))
	for i, r := range ranks {
		s[i] = strconv.Itoa(r)
	}
	if len(s) == 1 {
		return "rank " + s[0]
	}
	return "ranks " + strings.Join(s, ", ")
}
