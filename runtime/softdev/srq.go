//go:build linux && cgo

package softdev

/*
#include "engine.h"
*/
import "C"

import (
	"fmt"
	"syscall"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/cmem"
)

// The shared receive queue verbs. libibverbs exports ibv_create_srq,
// ibv_modify_srq, ibv_query_srq and ibv_destroy_srq (this device supplies
// them with dynlib.Provide, as the other exported verbs), but the
// generated package has no wrappers for them: these methods run the same
// code. ibv_post_srq_recv is the header's inline verb (ops.post_srq_recv).

// CreateSRQ creates a shared receive queue in pd holding up to maxWR
// receive WQEs of up to maxSGE entries each, as ibv_create_srq (maxWR
// 1..MaxQPWR, maxSGE up to 64, else EINVAL). QPs created with the SRQ
// option take their receives from it.
func (d *Device) CreateSRQ(pd *verbs.PD, maxWR, maxSGE int) (*verbs.SRQ, error) {
	if maxWR <= 0 || maxWR > 1<<31-1 || maxSGE < 0 || maxSGE > 1<<31-1 {
		return nil, fmt.Errorf("softdev: create_srq: %d WRs of %d SGEs: each must be a positive uint32: %w", maxWR, maxSGE, syscall.EINVAL)
	}
	var srq *verbs.SRQ
	err := d.use(func() error {
		attr, err := cmem.New[verbs.SRQInitAttr]()
		if err != nil {
			return err
		}
		defer cmem.Free(attr)
		attr.Attr = verbs.SRQAttr{MaxWR: uint32(maxWR), MaxSGE: uint32(maxSGE)}
		var e C.int
		s := C.sd_create_srq(d.ctx, (*C.struct_ibv_pd)(unsafe.Pointer(pd)), (*C.struct_ibv_srq_init_attr)(unsafe.Pointer(attr)), &e)
		if s == nil {
			return callErr("create_srq", e)
		}
		srq = (*verbs.SRQ)(unsafe.Pointer(s))
		return nil
	})
	return srq, err
}

// ModifySRQ is ibv_modify_srq: verbs.SRQLimit in mask arms the limit
// (attr.SRQLimit, below the SRQ's max_wr): once fewer receive WQEs than
// that are left, the device raises verbs.EventSRQLimitReached and disarms
// it. verbs.SRQMaxWR is EINVAL: SRQs do not resize.
func (d *Device) ModifySRQ(srq *verbs.SRQ, attr verbs.SRQAttr, mask verbs.SRQAttrMask) error {
	return d.use(func() error {
		a, err := cmem.New[verbs.SRQAttr]()
		if err != nil {
			return err
		}
		defer cmem.Free(a)
		*a = attr
		return callErr("modify_srq", C.sd_modify_srq(d.ctx, (*C.struct_ibv_srq)(unsafe.Pointer(srq)), (*C.struct_ibv_srq_attr)(unsafe.Pointer(a)), C.int(mask)))
	})
}

// QuerySRQ is ibv_query_srq: max_wr, max_sge and the armed limit (0 when
// none is, or once it fired).
func (d *Device) QuerySRQ(srq *verbs.SRQ) (verbs.SRQAttr, error) {
	var out verbs.SRQAttr
	err := d.use(func() error {
		a, err := cmem.New[verbs.SRQAttr]()
		if err != nil {
			return err
		}
		defer cmem.Free(a)
		if e := C.sd_query_srq(d.ctx, (*C.struct_ibv_srq)(unsafe.Pointer(srq)), (*C.struct_ibv_srq_attr)(unsafe.Pointer(a))); e != 0 {
			return callErr("query_srq", e)
		}
		out = *a
		return nil
	})
	return out, err
}

// DestroySRQ is ibv_destroy_srq; EBUSY while QPs use the SRQ.
func (d *Device) DestroySRQ(srq *verbs.SRQ) error {
	return d.use(func() error {
		return callErr("destroy_srq", C.sd_destroy_srq(d.ctx, (*C.struct_ibv_srq)(unsafe.Pointer(srq))))
	})
}

// PostSRQRecv is ibv_post_srq_recv: posts the list of receive WRs from
// wr (in C memory) to the SRQ; on failure *bad (if bad is not nil) names
// the first WR not posted. ENOMEM when the SRQ is full.
func (d *Device) PostSRQRecv(srq *verbs.SRQ, wr *verbs.RecvWR, bad **verbs.RecvWR) error {
	return d.use(func() error {
		return callErr("post_srq_recv", C.sd_post_srq_recv(d.ctx, (*C.struct_ibv_srq)(unsafe.Pointer(srq)),
			(*C.struct_ibv_recv_wr)(unsafe.Pointer(wr)), (**C.struct_ibv_recv_wr)(unsafe.Pointer(bad))))
	})
}
