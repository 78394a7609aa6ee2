package abiutil

import (
	"errors"
	"sync"
	"syscall"
	"testing"
)

type elem struct{ v int }

// cArray stands for a C library's array: n pointers and a NULL.
func cArray(n int) **elem {
	a := make([]*elem, n+1)
	for i := range n {
		a[i] = &elem{i}
	}
	return &a[0]
}

func TestListCopiesShareOneFree(t *testing.T) {
	base := LiveLists()
	first := cArray(3)
	l, err := NewList("get", first, 3)
	if err != nil {
		t.Fatal(err)
	}
	if got := l.All(); len(got) != 3 || &got[0] != first || got[2].v != 2 {
		t.Fatalf("All() = %v, want the 3 elements of the array itself", got)
	}
	if LiveLists() != base+1 {
		t.Errorf("LiveLists() = %d, want %d", LiveLists(), base+1)
	}
	cp := l
	p, err := ReleaseList("free", cp)
	if err != nil || p != first {
		t.Fatalf("ReleaseList(copy) = %p, %v; want %p, nil", p, err, first)
	}
	if l.All() != nil || l.Len() != 0 {
		t.Errorf("the original still lists %d elements after its copy was freed", l.Len())
	}
	_, err = ReleaseList("free", l)
	if !errors.Is(err, ErrListFreed) || !errors.Is(err, syscall.EINVAL) {
		t.Errorf("second free: %v, want ErrListFreed and EINVAL", err)
	}
	if LiveLists() != base {
		t.Errorf("LiveLists() = %d after the free, want %d", LiveLists(), base)
	}
}

// TestListStaleCopyOfAReusedSlot: a list freed, then a new list in the
// same slot: the old list's copies cannot free (or see) the new one.
func TestListStaleCopyOfAReusedSlot(t *testing.T) {
	old, err := NewList("get", cArray(1), 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ReleaseList("free", old); err != nil {
		t.Fatal(err)
	}
	fresh, err := NewList("get", cArray(2), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer ReleaseList("free", fresh)
	if fresh.slot != old.slot {
		t.Fatalf("the new list took slot %d, not the freed %d: the test needs the same slot", fresh.slot, old.slot)
	}
	if _, err := ReleaseList("free", old); !errors.Is(err, ErrListFreed) {
		t.Errorf("stale copy freed the new list: %v", err)
	}
	if old.All() != nil || fresh.Len() != 2 {
		t.Errorf("stale copy lists %d, new list %d; want 0 and 2", old.Len(), fresh.Len())
	}
}

func TestListZeroAndEmpty(t *testing.T) {
	var zero List[elem]
	if _, err := ReleaseList("free", zero); !errors.Is(err, ErrListZero) || !errors.Is(err, syscall.EINVAL) {
		t.Errorf("free of the zero List: %v, want ErrListZero and EINVAL", err)
	}
	if zero.All() != nil {
		t.Error("the zero List has elements")
	}
	// No devices: a live list of none, whose array is still freed.
	first := cArray(0)
	empty, err := NewList("get", first, 0)
	if err != nil {
		t.Fatal(err)
	}
	if empty.All() == nil || empty.Len() != 0 {
		t.Errorf("an empty live list: All() = %v, want empty and non-nil", empty.All())
	}
	if p, err := ReleaseList("free", empty); err != nil || p != first {
		t.Errorf("ReleaseList(empty) = %p, %v; want the array %p", p, err, first)
	}
	if _, err := NewList[elem]("get", cArray(0), -1); err == nil {
		t.Error("a negative count was accepted")
	}
}

// TestListsLostAreNoticed: MaxLists lists alive, the next is refused
// (ENOMEM) instead of growing without bound.
func TestListsLostAreNoticed(t *testing.T) {
	var held []List[elem]
	defer func() {
		for _, l := range held {
			ReleaseList("free", l)
		}
	}()
	first := cArray(1)
	for LiveLists() < MaxLists {
		l, err := NewList("get", first, 1)
		if err != nil {
			t.Fatalf("after %d lists: %v", LiveLists(), err)
		}
		held = append(held, l)
	}
	_, err := NewList("get", first, 1)
	if !errors.Is(err, ErrTooManyLists) || !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("list %d: %v, want ErrTooManyLists", MaxLists+1, err)
	}
}

func TestListNoAllocations(t *testing.T) {
	first := cArray(4)
	n := testing.AllocsPerRun(1000, func() {
		l, err := NewList("get", first, 4)
		if err != nil {
			panic(err)
		}
		if _, err := ReleaseList("free", l); err != nil {
			panic(err)
		}
	})
	if n != 0 {
		t.Errorf("NewList + ReleaseList: %v allocations, want 0", n)
	}
}

// TestListConcurrentFrees: copies freed from several goroutines at once,
// exactly one free succeeds per list (go test -race).
func TestListConcurrentFrees(t *testing.T) {
	first := cArray(1)
	for range 200 {
		l, err := NewList("get", first, 1)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		ok := 0
		for range 4 {
			wg.Go(func() {
				if _, err := ReleaseList("free", l); err == nil {
					mu.Lock()
					ok++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if ok != 1 {
			t.Fatalf("%d of 4 concurrent frees of one list succeeded, want 1", ok)
		}
	}
}

func TestTooLong(t *testing.T) {
	err := TooLong("ibv_poll_cq", "num_entries", 1<<31, 1<<31-1)
	if !errors.Is(err, syscall.EINVAL) {
		t.Errorf("%v does not wrap EINVAL", err)
	}
	want := "ibv_poll_cq: 2147483648 elements are more than num_entries can count (at most 2147483647; invalid argument): pass a shorter slice"
	if err.Error() != want {
		t.Errorf("got %q\nwant %q", err, want)
	}
}
