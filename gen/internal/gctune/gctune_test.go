package gctune

import "testing"

func TestPercent(t *testing.T) {
	const MiB = 1 << 20
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, 400}, {30 * MiB, 400}, {64 * MiB, 400}, {128 * MiB, 200}, {256 * MiB, 100}, {512 * MiB, 50}, {2048 * MiB, 50},
	} {
		if got := Percent(c.live); got != c.want {
			t.Errorf("Percent(%d MiB) = %d, want %d", c.live/MiB, got, c.want)
		}
	}
}
