package abiutil

import (
	"errors"
	"strconv"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// The slice forms of generated wrappers (verbs.PollCQ(cq, wc []WC)) pass
// a slice as a C (pointer, count[, stride]) and take a C library's
// returned arrays as Lists; these are their helpers.

// LenError is a slice longer than the C count parameter can say: the
// wrapper refuses it rather than pass a truncated count.
type LenError struct {
	Func, Param string
	Len         int
	Max         uint64
}

func (e *LenError) Error() string {
	return e.Func + ": " + strconv.Itoa(e.Len) + " elements are more than " + e.Param + " can count (at most " +
		strconv.FormatUint(e.Max, 10) + "; " + syscall.EINVAL.Error() + "): pass a shorter slice"
}

// Unwrap makes errors.Is(err, syscall.EINVAL) true.
func (e *LenError) Unwrap() error { return syscall.EINVAL }

// TooLong reports a slice of n elements that the count parameter param of
// fn, at most max, cannot carry.
func TooLong(fn, param string, n int, max uint64) error {
	return &LenError{Func: fn, Param: param, Len: n, Max: max}
}

// ErrListFreed is wrapped by the error a free returns for a List that was
// already freed, through this copy or another.
var ErrListFreed = errors.New("list already freed")

// ErrListZero is wrapped by the error a free returns for the zero List,
// which no C call returned.
var ErrListZero = errors.New("list is the zero value: no call returned it")

// ErrTooManyLists is wrapped by the error of a call returning a List when
// MaxLists lists are alive: a program that loses its lists (never frees
// them) is told so then.
var ErrTooManyLists = errors.New("too many lists alive at once: free the lists no longer used")

// ListError is a List that cannot be freed, or registered.
type ListError struct {
	Func string
	Err  error // ErrListFreed, ErrListZero, ErrTooManyLists
}

func (e *ListError) Error() string { return e.Func + ": " + e.Err.Error() }

// Unwrap makes errors.Is(err, syscall.EINVAL) true (ENOMEM for
// ErrTooManyLists), and errors.Is(err, ErrListFreed) and the like.
func (e *ListError) Unwrap() []error {
	if e.Err == ErrTooManyLists {
		return []error{syscall.ENOMEM, e.Err}
	}
	return []error{syscall.EINVAL, e.Err}
}

// MaxLists is how many Lists may be alive (returned and not yet freed)
// at once, in the whole program.
const MaxLists = 1024

// lists registers the live Lists: slot i's word counts its lists, odd
// while one is alive. A List remembers its slot and the word it made
// odd; freeing it moves the word on, so every copy, and any later List
// of the same slot, tells the freed one apart. No allocation: a slot is
// taken and given back with one compare-and-swap each.
var lists [MaxLists]atomic.Uint64

// List is an array of pointers that a C library allocated and only its
// matching free may release (ibv_get_device_list's, which
// ibv_free_device_list frees): a generated wrapper returns one and its
// matching free takes it back. All is the C array itself, not a copy.
//
// Copies of a List share one registration: the first free ends every
// copy (All is then nil), and a second free, of any copy, is an error
// (ErrListFreed) rather than a double free in C.
type List[T any] struct {
	elems []*T
	slot  uint32 // 1 + its slot in lists; 0 for the zero List
	word  uint64 // the slot's word while it is alive (odd)
}

// NewList registers the n pointers at first, an array the C library of
// fn allocated, as a List. It fails with ErrTooManyLists when MaxLists
// are alive (the caller then frees the array itself).
func NewList[T any](fn string, first **T, n int) (List[T], error) {
	if n < 0 || first == nil {
		return List[T]{}, &ListError{Func: fn, Err: errors.New("the C call returned no array, or a count of " + strconv.Itoa(n))}
	}
	for i := range lists {
		w := lists[i].Load()
		if w&1 == 0 && lists[i].CompareAndSwap(w, w+1) {
			return List[T]{elems: unsafe.Slice(first, n), slot: uint32(i + 1), word: w + 1}, nil
		}
	}
	return List[T]{}, &ListError{Func: fn, Err: ErrTooManyLists}
}

// alive reports whether l was returned and not freed yet.
func (l List[T]) alive() bool { return l.slot != 0 && lists[l.slot-1].Load() == l.word }

// All returns the list's elements, the C array itself (writing to it
// writes to C memory); nil once the list is freed, through any copy.
func (l List[T]) All() []*T {
	if !l.alive() {
		return nil
	}
	return l.elems
}

// Len is len(l.All()).
func (l List[T]) Len() int { return len(l.All()) }

// ReleaseList ends l's registration, for every copy, and returns the C
// array that fn (the generated free) then frees; it fails for a List
// that was freed already or for the zero List. Use the generated free
// (verbs.FreeDeviceList), which calls it.
func ReleaseList[T any](fn string, l List[T]) (**T, error) {
	if l.slot == 0 {
		return nil, &ListError{Func: fn, Err: ErrListZero}
	}
	if !lists[l.slot-1].CompareAndSwap(l.word, l.word+1) {
		return nil, &ListError{Func: fn, Err: ErrListFreed}
	}
	return unsafe.SliceData(l.elems), nil
}

// LiveLists counts the Lists returned and not freed yet: a test that
// frees what it takes can check it is back where it started.
func LiveLists() int {
	n := 0
	for i := range lists {
		if lists[i].Load()&1 == 1 {
			n++
		}
	}
	return n
}
