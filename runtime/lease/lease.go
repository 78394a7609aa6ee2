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
// wr_id, using a closed Table. The memory held is kept ordered by address,
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

	verbs "github.com/verbsexp/verbsexp/generated"
)

// Errors of misuse; each wraps syscall.EINVAL or EBUSY.
var (
	ErrClosed     = fmt.Errorf("lease table is closed: %w", syscall.EINVAL)
	ErrDoubleFree = fmt.Errorf("buffer freed twice: %w", syscall.EINVAL)
	ErrBusy       = fmt.Errorf("buffer is leased to an outstanding work request: %w", syscall.EBUSY)
	ErrLeased     = fmt.Errorf("wr_id already has a lease: %w", syscall.EBUSY)
	ErrUnknown    = fmt.Errorf("no lease for this wr_id: %w", syscall.EINVAL)
)

// PageSize is the alignment of Buffers.
var PageSize = syscall.Getpagesize()

// Buffer is C memory, page aligned, for data that work requests name.
type Buffer struct {
	p      unsafe.Pointer
	n      int
	leases int // outstanding leases (guarded by the owning Table's lock)
	mu     sync.Mutex
	freed  bool
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
	return &Buffer{p: p, n: n}, nil
}

// Bytes is the buffer as a slice (C memory: valid until Free).
func (b *Buffer) Bytes() []byte { return unsafe.Slice((*byte)(b.p), b.n) }

// Addr is the buffer's address, as an SGE or remote address holds it.
func (b *Buffer) Addr() uint64 { return uint64(uintptr(b.p)) }

// Pointer is the buffer's address for registration.
func (b *Buffer) Pointer() unsafe.Pointer { return b.p }

// Len is the buffer's size.
func (b *Buffer) Len() int { return b.n }

// Free returns the memory. Freeing a leased or already freed buffer is an
// error and frees nothing.
func (b *Buffer) Free() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.freed:
		return ErrDoubleFree
	case b.leases > 0:
		return fmt.Errorf("Free: %w (%d leases)", ErrBusy, b.leases)
	}
	C.free(b.p)
	live.Add(-1)
	b.freed = true
	return nil
}

// lease is one outstanding work request's hold on its memory.
type lease struct {
	pinner runtime.Pinner // Go memory
	goMem  bool
	buf    *Buffer   // C memory
	held   rangeNode // [start, end) in the Table's ranges
}

// Table tracks leases by wr_id, and the memory they hold by address.
// Lease, Pin and Release are O(log n) in the leases outstanding. Safe for
// concurrent use.
type Table struct {
	mu     sync.Mutex
	leases map[uint64]*lease
	held   ranges
	closed bool
}

// NewTable returns an empty Table.
func NewTable() *Table { return &Table{leases: map[uint64]*lease{}} }

func (t *Table) add(wrID uint64, l *lease) error {
	if t.closed {
		return ErrClosed
	}
	if _, ok := t.leases[wrID]; ok {
		return fmt.Errorf("wr_id %d: %w", wrID, ErrLeased)
	}
	if id, ok := t.held.overlap(l.held.start, l.held.end); ok {
		return fmt.Errorf("wr_id %d: memory overlaps the lease of wr_id %d: %w", wrID, id, ErrBusy)
	}
	t.leases[wrID] = l
	l.held.wrID = wrID
	t.held.add(&l.held)
	return nil
}

// Pin leases Go memory to wrID: buf is pinned (it neither moves nor is
// freed) until the lease is released. It returns the SGE for buf.
func (t *Table) Pin(wrID uint64, buf []byte, lkey uint32) (verbs.SGE, error) {
	if len(buf) == 0 {
		return verbs.SGE{}, fmt.Errorf("lease.Pin: empty buffer: %w", syscall.EINVAL)
	}
	if len(buf) > MaxLength {
		return verbs.SGE{}, fmt.Errorf("lease.Pin: %d bytes is more than an SGE holds (%d): %w", len(buf), MaxLength, syscall.EINVAL)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	start := uintptr(unsafe.Pointer(&buf[0]))
	l := &lease{goMem: true, held: rangeNode{start: start, end: start + uintptr(len(buf))}}
	if err := t.add(wrID, l); err != nil {
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
func (t *Table) Lease(wrID uint64, b *Buffer, off, n int, lkey uint32) (verbs.SGE, error) {
	if b == nil {
		return verbs.SGE{}, fmt.Errorf("lease.Lease: nil buffer: %w", syscall.EINVAL)
	}
	if off < 0 || n <= 0 || n > MaxLength || off > b.n-n { // b.n-n cannot overflow: both are positive
		return verbs.SGE{}, fmt.Errorf("lease.Lease: %d bytes at offset %d are not a range of the %d-byte buffer (at most %d): %w", n, off, b.n, MaxLength, syscall.EINVAL)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.freed {
		return verbs.SGE{}, fmt.Errorf("lease.Lease: buffer was freed: %w", syscall.EINVAL)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	start := uintptr(b.p) + uintptr(off)
	if err := t.add(wrID, &lease{buf: b, held: rangeNode{start: start, end: start + uintptr(n)}}); err != nil {
		return verbs.SGE{}, err
	}
	b.leases++
	return verbs.SGE{Addr: uint64(start), Length: uint32(n), Lkey: lkey}, nil
}

// Release ends the lease of wrID.
func (t *Table) Release(wrID uint64) error {
	t.mu.Lock()
	l, ok := t.leases[wrID]
	if ok {
		delete(t.leases, wrID)
		t.held.remove(l.held.start)
	}
	t.mu.Unlock()
	if !ok {
		return fmt.Errorf("wr_id %d: %w", wrID, ErrUnknown)
	}
	if l.goMem {
		l.pinner.Unpin()
		return nil
	}
	l.buf.mu.Lock()
	l.buf.leases--
	l.buf.mu.Unlock()
	return nil
}

// Outstanding returns the number of leases not yet released.
func (t *Table) Outstanding() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.leases)
}

// Poll polls up to len(wc) completions from cq with ibv_exp_poll_cq and
// releases the lease of each one's wr_id (a completion without a lease is
// not an error: not every work request carries data).
func (t *Table) Poll(cq *verbs.CQ, wc []verbs.ExpWC) (int, error) {
	if len(wc) == 0 {
		return 0, nil
	}
	// ibv_exp_poll_cq takes an int count: poll at most that many.
	n, err := verbs.ExpPollCQ(cq, int32(min(len(wc), math.MaxInt32)), &wc[0], uint32(unsafe.Sizeof(wc[0])))
	if err != nil {
		return 0, err
	}
	for i := 0; i < int(n); i++ {
		if err := t.Release(wc[i].WRID); err != nil && !errors.Is(err, ErrUnknown) {
			return int(n), err
		}
	}
	return int(n), nil
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
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return ErrClosed
	}
	t.closed = true
	var ids []uint64
	for id := range t.leases {
		ids = append(ids, id)
	}
	t.mu.Unlock()
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		t.Release(id) // unpins and un-busies; cannot fail for a listed id
	}
	if len(ids) > 0 {
		return &LeakError{WRIDs: ids}
	}
	return nil
}
