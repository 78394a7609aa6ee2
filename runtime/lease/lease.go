//go:build linux && cgo

// Package lease keeps the data buffers named by posted work requests alive
// and in place until the hardware is done with them, which is when their
// completion is polled, not when the post returns.
//
// A Table maps wr_id to the buffer of an outstanding work request. Go
// memory is pinned with runtime.Pinner for the lease (so its address may
// sit in an SGE in C memory); C memory (Buffer, page-aligned, suitable for
// registration) is marked busy and cannot be freed while leased. Release
// (or Poll, which releases what it polls) ends a lease; Close reports the
// leases never released.
//
// Misuse is an error, never a crash: leasing a wr_id twice, leasing
// memory that is already leased, a range outside its buffer or longer
// than an SGE holds (checked without overflow: a NIC would DMA wherever
// an SGE points), freeing a leased or freed Buffer, releasing an unknown
// wr_id, using a closed Table, a nil Table or Buffer, a Buffer Alloc did
// not make. A freed Buffer's accessors give nil and 0, not the freed
// memory. The memory held is kept ordered by address,
// so a Lease and its Release cost O(log n) in the leases outstanding.
package lease

/*
#include <stdlib.h>
#include <string.h>

static void *lease_alloc(size_t align, size_t n) {
	void *p = NULL;
	if (posix_memalign(&p, align, n) != 0)
		return NULL;
	memset(p, 0, n);
	return p;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
)

// Errors of misuse; each wraps syscall.EINVAL or EBUSY.
var (
	ErrClosed     = fmt.Errorf("lease table is closed: %w", syscall.EINVAL)
	ErrDoubleFree = fmt.Errorf("buffer freed twice: %w", syscall.EINVAL)
	ErrBusy       = fmt.Errorf("buffer is leased to an outstanding work request: %w", syscall.EBUSY)
	ErrLeased     = fmt.Errorf("wr_id already has a lease: %w", syscall.EBUSY)
	ErrUnknown    = fmt.Errorf("no lease for this wr_id: %w", syscall.EINVAL)
	ErrNil        = fmt.Errorf("nil *lease.Table or *lease.Buffer: %w", syscall.EINVAL)
	ErrForeign    = fmt.Errorf("buffer was not allocated by lease.Alloc: %w", syscall.EINVAL)
)

// PageSize is the alignment of Buffers.
var PageSize = syscall.Getpagesize()

// Buffer is C memory, page aligned, for data that work requests name.
// Its accessors on a nil or freed Buffer return nil, 0 or 0 bytes, never
// the memory that was freed. A copy of a Buffer is the same buffer (its
// state sits behind one pointer): freed through either, it is freed for
// both, and a second Free is ErrDoubleFree.
type Buffer struct {
	b *buffer // nil for a Buffer Alloc did not make
}

type buffer struct {
	p      unsafe.Pointer
	n      int
	leases int // outstanding leases (guarded by mu)
	mu     sync.Mutex
	freed  atomic.Bool // written under mu
}

// live counts Buffers allocated and not yet freed.
var live atomic.Int64

// LiveBuffers returns the number of Buffers not yet freed: tests and
// long-running programs check it for leaked C memory.
func LiveBuffers() int64 { return live.Load() }

// Alloc returns n zeroed bytes of page-aligned C memory.
func Alloc(n int) (*Buffer, error) {
	if n <= 0 {
		return nil, fmt.Errorf("lease.Alloc(%d): %w", n, syscall.EINVAL)
	}
	p := C.lease_alloc(C.size_t(PageSize), C.size_t(n))
	if p == nil {
		return nil, fmt.Errorf("lease.Alloc(%d): %w", n, syscall.ENOMEM)
	}
	live.Add(1)
	return &Buffer{&buffer{p: p, n: n}}, nil
}

// state is b's state: nil for a nil Buffer or one Alloc did not make.
func (b *Buffer) state() *buffer {
	if b == nil {
		return nil
	}
	return b.b
}

// usable says whether b's memory may be handed out: b is a Buffer of
// Alloc's, not freed.
func (b *buffer) usable() bool { return b != nil && !b.freed.Load() }

// Bytes is the buffer as a slice (C memory: valid until Free); nil once
// freed.
func (b *Buffer) Bytes() []byte {
	s := b.state()
	if !s.usable() {
		return nil
	}
	return unsafe.Slice((*byte)(s.p), s.n)
}

// Addr is the buffer's address, as an SGE or remote address holds it; 0
// once freed.
func (b *Buffer) Addr() uint64 {
	s := b.state()
	if !s.usable() {
		return 0
	}
	return uint64(uintptr(s.p))
}

// Pointer is the buffer's address for registration; nil once freed.
func (b *Buffer) Pointer() unsafe.Pointer {
	s := b.state()
	if !s.usable() {
		return nil
	}
	return s.p
}

// Len is the buffer's size; 0 once freed.
func (b *Buffer) Len() int {
	s := b.state()
	if !s.usable() {
		return 0
	}
	return s.n
}

// Free returns the memory. Freeing a leased or already freed buffer, a
// nil one or one Alloc did not make is an error and frees nothing.
func (b *Buffer) Free() error {
	if b == nil {
		return fmt.Errorf("Free: %w", ErrNil)
	}
	s := b.b
	if s == nil {
		return fmt.Errorf("Free: %w", ErrForeign)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.freed.Load():
		return ErrDoubleFree
	case s.leases > 0:
		return fmt.Errorf("Free: %w (%d leases)", ErrBusy, s.leases)
	}
	C.free(s.p)
	live.Add(-1)
	s.freed.Store(true)
	return nil
}

// lease is one outstanding work request's hold on its memory.
type lease struct {
	pinner runtime.Pinner // Go memory
	goMem  bool
	buf    *buffer   // C memory
	held   rangeNode // [start, end) in the Table's ranges
}

// Table tracks leases by wr_id, and the memory they hold by address.
// Lease, Pin and Release are O(log n) in the leases outstanding. Safe for
// concurrent use. The zero Table is empty and ready to use.
//
// A copy of a Table that has been used is the same table (its state,
// lock included, sits behind one pointer): closed through either, it is
// closed for both. A copy of an unused zero Table is another empty one.
//
// Close a Table when done. One that becomes unreachable with leases
// outstanding (never closed) keeps them for good, as no completion can
// release them any more: its pinned Go memory stays pinned and its C
// Buffers stay busy (a device may still be using them), instead of the
// process crashing on a runtime.Pinner collected with pins.
type Table struct {
	// The *tableHandle, nil until first used. Read and set with the
	// atomic functions (an atomic.Pointer would make vet call copying a
	// Table a mistake, which it no longer is).
	h unsafe.Pointer
}

// tableHandle is what every copy of a used Table points at; its cleanup
// runs once none is reachable.
type tableHandle struct{ s *tableState }

// tableState is what a Table holds, apart from the handle, so that a
// cleanup can keep it once the Table is unreachable.
type tableState struct {
	mu     sync.Mutex // everything below
	leases map[uint64]*lease
	held   ranges
	closed bool
}

// abandoned keeps the leases of Tables collected unclosed: they stay
// pinned and busy for the life of the process.
var abandoned struct {
	sync.Mutex
	states []*tableState
}

// abandon is the cleanup of a Table collected with leases outstanding.
func abandon(s *tableState) {
	s.mu.Lock()
	n := len(s.leases)
	s.mu.Unlock()
	if n == 0 {
		return
	}
	abandoned.Lock()
	abandoned.states = append(abandoned.states, s)
	abandoned.Unlock()
}

// NewTable returns an empty Table.
func NewTable() *Table { return &Table{} }

// state returns t's state, creating it on first use.
func (t *Table) state() *tableState {
	if h := (*tableHandle)(atomic.LoadPointer(&t.h)); h != nil {
		return h.s
	}
	h := &tableHandle{&tableState{leases: map[uint64]*lease{}}}
	if !atomic.CompareAndSwapPointer(&t.h, nil, unsafe.Pointer(h)) {
		return (*tableHandle)(atomic.LoadPointer(&t.h)).s // another goroutine's first use won
	}
	runtime.AddCleanup(h, abandon, h.s)
	return h.s
}

// add records a lease; s.mu held.
func (s *tableState) add(wrID uint64, l *lease) error {
	if s.closed {
		return ErrClosed
	}
	if _, ok := s.leases[wrID]; ok {
		return fmt.Errorf("wr_id %d: %w", wrID, ErrLeased)
	}
	if id, ok := s.held.overlap(l.held.start, l.held.end); ok {
		return fmt.Errorf("wr_id %d: memory overlaps the lease of wr_id %d: %w", wrID, id, ErrBusy)
	}
	s.leases[wrID] = l
	l.held.wrID = wrID
	s.held.add(&l.held)
	return nil
}

// Pin leases Go memory to wrID: buf is pinned (it neither moves nor is
// freed) until the lease is released. It returns the SGE for buf. For a
// C Buffer use Lease: Pin does not keep a Buffer's memory from Free.
func (t *Table) Pin(wrID uint64, buf []byte, lkey uint32) (verbs.SGE, error) {
	if t == nil {
		return verbs.SGE{}, fmt.Errorf("lease.Pin: %w", ErrNil)
	}
	if len(buf) == 0 {
		return verbs.SGE{}, fmt.Errorf("lease.Pin: empty buffer: %w", syscall.EINVAL)
	}
	if len(buf) > MaxLength {
		return verbs.SGE{}, fmt.Errorf("lease.Pin: %d bytes is more than an SGE holds (%d): %w", len(buf), MaxLength, syscall.EINVAL)
	}
	s := t.state()
	s.mu.Lock()
	defer s.mu.Unlock()
	start := uintptr(unsafe.Pointer(&buf[0]))
	l := &lease{goMem: true, held: rangeNode{start: start, end: start + uintptr(len(buf))}}
	if err := s.add(wrID, l); err != nil {
		return verbs.SGE{}, err
	}
	l.pinner.Pin(&buf[0])
	return verbs.SGE{Addr: uint64(start), Length: uint32(len(buf)), Lkey: lkey}, nil
}

// MaxLength is the most bytes one lease covers: what an SGE's 32-bit
// length holds.
const MaxLength = math.MaxUint32

// Lease leases [off, off+n) of a C Buffer to wrID and returns its SGE.
// The range must be non-empty, inside the buffer and at most MaxLength
// bytes; it is checked without overflow.
func (t *Table) Lease(wrID uint64, buf *Buffer, off, n int, lkey uint32) (verbs.SGE, error) {
	switch {
	case t == nil:
		return verbs.SGE{}, fmt.Errorf("lease.Lease: %w", ErrNil)
	case buf == nil:
		return verbs.SGE{}, fmt.Errorf("lease.Lease: nil buffer: %w", syscall.EINVAL)
	case buf.b == nil:
		return verbs.SGE{}, fmt.Errorf("lease.Lease: %w", ErrForeign)
	}
	b := buf.b
	if off < 0 || n <= 0 || n > MaxLength || off > b.n-n { // b.n-n cannot overflow: both are positive
		return verbs.SGE{}, fmt.Errorf("lease.Lease: %d bytes at offset %d are not a range of the %d-byte buffer (at most %d): %w", n, off, b.n, MaxLength, syscall.EINVAL)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.freed.Load() {
		return verbs.SGE{}, fmt.Errorf("lease.Lease: buffer was freed: %w", syscall.EINVAL)
	}
	s := t.state()
	s.mu.Lock()
	defer s.mu.Unlock()
	start := uintptr(b.p) + uintptr(off)
	if err := s.add(wrID, &lease{buf: b, held: rangeNode{start: start, end: start + uintptr(n)}}); err != nil {
		return verbs.SGE{}, err
	}
	b.leases++
	return verbs.SGE{Addr: uint64(start), Length: uint32(n), Lkey: lkey}, nil
}

// Release ends the lease of wrID. On a closed Table it is ErrClosed.
func (t *Table) Release(wrID uint64) error {
	if t == nil {
		return fmt.Errorf("lease.Release: %w", ErrNil)
	}
	s := t.state()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	l, ok := s.take(wrID)
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("wr_id %d: %w", wrID, ErrUnknown)
	}
	l.end()
	return nil
}

// take removes the lease of wrID from s; s.mu held.
func (s *tableState) take(wrID uint64) (*lease, bool) {
	l, ok := s.leases[wrID]
	if ok {
		delete(s.leases, wrID)
		s.held.remove(l.held.start)
	}
	return l, ok
}

// end lets go of the memory of a lease taken out of its Table.
func (l *lease) end() {
	if l.goMem {
		l.pinner.Unpin()
		return
	}
	l.buf.mu.Lock()
	l.buf.leases--
	l.buf.mu.Unlock()
}

// Outstanding returns the number of leases not yet released.
func (t *Table) Outstanding() int {
	if t == nil {
		return 0
	}
	s := t.state()
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.leases)
}

// Poll polls up to len(wc) completions from cq with ibv_exp_poll_cq and
// releases the lease of each one's wr_id (a completion without a lease is
// not an error: not every work request carries data).
//
// On a nil or closed Table it polls nothing and returns the error (the
// completions stay queued for a poll that can release their leases).
func (t *Table) Poll(cq *verbs.CQ, wc []verbs.ExpWC) (int, error) {
	if t == nil {
		return 0, fmt.Errorf("lease.Poll: %w", ErrNil)
	}
	s := t.state()
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return 0, ErrClosed
	}
	if len(wc) == 0 {
		return 0, nil
	}
	// ibv_exp_poll_cq takes an int count: poll at most that many.
	n, err := verbs.ExpPollCQ(cq, wc[:min(len(wc), math.MaxInt32)])
	if err != nil {
		return 0, err
	}
	for i := 0; i < n; i++ {
		if err := t.Release(wc[i].WRID); err != nil && !errors.Is(err, ErrUnknown) {
			return n, err
		}
	}
	return n, nil
}

// LeakError lists leases never released when their Table was closed.
type LeakError struct{ WRIDs []uint64 }

func (e *LeakError) Error() string {
	var s []string
	for _, id := range e.WRIDs {
		s = append(s, fmt.Sprint(id))
	}
	return fmt.Sprintf("%d leases never released (wr_id %s): their completions were not polled", len(e.WRIDs), strings.Join(s, ", "))
}

// Close ends the Table. Leases still outstanding are released (their
// memory unpinned) and reported as a *LeakError.
func (t *Table) Close() error {
	if t == nil {
		return fmt.Errorf("lease.Close: %w", ErrNil)
	}
	s := t.state()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.closed = true
	ids := make([]uint64, 0, len(s.leases))
	for id := range s.leases {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	var ls []*lease
	for _, id := range ids {
		l, _ := s.take(id)
		ls = append(ls, l)
	}
	s.mu.Unlock()
	for _, l := range ls {
		l.end() // unpins and un-busies
	}
	if len(ids) > 0 {
		return &LeakError{WRIDs: ids}
	}
	return nil
}
