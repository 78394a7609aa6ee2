//go:build linux && cgo

package collsoft_test

import (
	"testing"

	verbs "github.com/verbsexp/verbsexp/generated"
	"github.com/verbsexp/verbsexp/runtime/coll"
	"github.com/verbsexp/verbsexp/runtime/coll/collsoft"
	"github.com/verbsexp/verbsexp/runtime/lease"
	"github.com/verbsexp/verbsexp/runtime/softdev"
)

func TestSmoke(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 8} {
		dev, err := softdev.Open()
		if err != nil {
			t.Fatal(err)
		}
		w, err := collsoft.New(dev, n, coll.Options{})
		if err != nil {
			t.Fatal(err)
		}
		var bs, ar []*coll.Schedule
		var outs []*coll.Memory
		for r, c := range w.Comms {
			s, err := c.Barrier()
			if err != nil {
				t.Fatal(err)
			}
			bs = append(bs, s)
			buf, _ := lease.Alloc(4096)
			m, err := c.Register(buf)
			if err != nil {
				t.Fatal(err)
			}
			coll.PutElement(m.Bytes(), 0, uint64(r+1), 0)
			a, err := c.Allreduce(m, m, 1, verbs.ExpCalcOpAdd, verbs.ExpCalcDataTypeUint)
			if err != nil {
				t.Fatal(err)
			}
			ar = append(ar, a)
			outs = append(outs, m)
		}
		for it := 0; it < 3; it++ {
			for _, s := range bs {
				if err := s.Post(); err != nil {
					t.Fatal(err)
				}
			}
			for _, s := range bs {
				if err := s.Wait(); err != nil {
					t.Fatal(n, err)
				}
			}
			for r, m := range outs {
				coll.PutElement(m.Bytes(), 0, uint64(r+1+it), 0)
			}
			for _, s := range ar {
				if err := s.Post(); err != nil {
					t.Fatal(err)
				}
			}
			for r, s := range ar {
				if err := s.Wait(); err != nil {
					t.Fatal(n, err)
				}
				v, _ := coll.Element(outs[r].Bytes(), 0)
				if want := uint64(n*(n+1)/2 + n*it); v != want {
					t.Errorf("n %d it %d rank %d: %d want %d", n, it, r, v, want)
				}
			}
		}
		t.Log(w.Close())
		t.Log(dev.Close())
	}
}
