//go:build linux && cgo

package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/verbsexp/verbsexp/runtime/coll"
)

// TestCollectives runs the example for rank counts that are powers of
// two and others, with the broadcast's root at either end and in the
// middle; every run of every collective is checked (run fails
// otherwise), and the table it prints names the four with a time each.
func TestCollectives(t *testing.T) {
	row := regexp.MustCompile(`^  (.+?) +([0-9]+\.[0-9]{2}) µs per collective \(median\)$`)
	for _, c := range []config{
		{ranks: 1, root: 0, count: 1, bytes: 1, block: 1},
		{ranks: 2, root: 1, count: 2, bytes: 8, block: 3},
		{ranks: 3, root: 1, count: 3, bytes: 100, block: 16},
		{ranks: 5, root: 4, count: 1, bytes: 4096, block: 7},
		{ranks: 6, root: 2, count: 4, bytes: 64, block: 8},
		{ranks: 7, root: 0, count: 2, bytes: 33, block: 5},
		{ranks: 8, root: 5, count: 8, bytes: 256, block: 32},
		{ranks: 12, root: 11, count: 3, bytes: 17, block: 2},
	} {
		c.iters = 4
		t.Run(fmt.Sprint(c.ranks), func(t *testing.T) {
			var out strings.Builder
			if err := run(c, &out); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
			head := fmt.Sprintf("%d ranks on softdev, 4 runs of each collective, every result checked on every rank:", c.ranks)
			names := []string{"barrier", fmt.Sprintf("allreduce (sum of %d uint64)", c.count),
				fmt.Sprintf("broadcast (%d bytes from rank %d)", c.bytes, c.root), fmt.Sprintf("allgather (%d bytes per rank)", c.block)}
			if len(lines) != 1+len(names) || lines[0] != head {
				t.Fatalf("output:\n%s", out.String())
			}
			for i, name := range names {
				m := row.FindStringSubmatch(lines[1+i])
				if m == nil || m[1] != name {
					t.Errorf("line %d is %q, want %s and its time", 2+i, lines[1+i], name)
				}
			}
		})
	}
}

// TestFlags: values the collectives cannot take are refused with what
// to pass.
func TestFlags(t *testing.T) {
	ok := config{ranks: 4, iters: 1, root: 0, count: 1, bytes: 1, block: 1}
	for _, c := range []struct {
		edit func(*config)
		want string
	}{
		{func(c *config) { c.ranks = 0 }, "-ranks ≥ 1"},
		{func(c *config) { c.iters = 0 }, "-iters ≥ 1"},
		{func(c *config) { c.root = 4 }, "-root 4 is not a rank of 4"},
		{func(c *config) { c.count = coll.DefaultDepth + 1 }, "-count ≤"},
		{func(c *config) { c.block = 0 }, "-block ≥ 1"},
	} {
		cfg := ok
		c.edit(&cfg)
		err := run(cfg, &strings.Builder{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error saying %q", cfg, err, c.want)
		}
	}
}

// TestChecksCatch: each collective's check fails when a rank's result
// is wrong in one byte, or when a byte past the collective's part of a
// buffer was written; the barrier's fails when a rank completes before
// the late one posted.
func TestChecksCatch(t *testing.T) {
	cfg := config{ranks: 5, iters: 1, root: 2, count: 2, bytes: 40, block: 6}
	for _, build := range []func(*world, config) (*collective, error){allreduce, broadcast, allgather} {
		for _, flip := range []string{"result", "guard"} {
			w, err := inProcess(cfg.ranks)
			if err != nil {
				t.Fatal(err)
			}
			c, err := build(w, cfg)
			if err != nil {
				t.Fatal(err)
			}
			w.all = append(w.all, c)
			c.prepare(0)
			if err := c.post(); err != nil {
				t.Fatal(err)
			}
			for _, s := range c.ss {
				if err := s.Wait(); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.check(0); err != nil {
				t.Fatalf("%s: the right result: %v", c.name, err)
			}
			last := w.mems[len(w.mems)-1].Bytes() // the last rank's result
			if flip == "result" {
				last[0] ^= 1
			} else {
				last[len(last)-1] ^= 1
			}
			if err := c.check(0); err == nil {
				t.Errorf("%s: a flipped %s byte passed the check", c.name, flip)
			} else {
				t.Logf("%s, %s: %v", c.name, flip, err)
			}
			if err := w.close(); err != nil {
				t.Fatal(err)
			}
		}
	}

	w, err := inProcess(3)
	if err != nil {
		t.Fatal(err)
	}
	c, err := barrier(w, config{ranks: 3})
	if err != nil {
		t.Fatal(err)
	}
	w.all = append(w.all, c)
	if err := postAll(c.ss); err != nil { // rank 0 too, not late
		t.Fatal(err)
	}
	err = earlyBarrier(c.ss, 0)
	if err == nil || !strings.Contains(err.Error(), "completed before rank 0 had posted") {
		t.Errorf("every rank posted, yet the early check says %v", err)
	}
	for _, s := range c.ss {
		s.Wait() // those still in flight; the one Test completed is not
	}
	if err := w.close(); err != nil {
		t.Fatal(err)
	}
}
