package ranklist

import "testing"

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		ranks []int
		want  string
	}{{[]int{3}, "rank 3"}, {[]int{0, 2, 5}, "ranks 0, 2, 5"}, {[]int{1, 2}, "ranks 1, 2"}} {
		if got := Format(tc.ranks); got != tc.want {
			t.Errorf("Format(%v) = %q, want %q", tc.ranks, got, tc.want)
		}
	}
}
