//go:build linux && cgo

package softdev

// #include "engine.h"
import "C"

import (
	"fmt"
	"syscall"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
)

// ModifyQP changes a QP's attributes as ibv_modify_qp does, through the
// context's modify_qp operation: the standard struct ibv_qp_attr and an
// IBV_QP_* mask (verbs.QPStateConst, verbs.QPDestQPN, …), the form the
// vendor's fixtures use. verbs.ExpModifyQP is the exp form of the same
// transition, and verbs.ModifyQP the exported verb itself; all reach the
// same code. A QP that is not a live one of this device is refused with
// EINVAL; an illegal transition is EINVAL too.
func (d *Device) ModifyQP(qp *verbs.QP, attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	if attr == nil {
		return fmt.Errorf("softdev: modify_qp: nil attr: %w", syscall.EINVAL)
	}
	return d.use(func() error {
		return callErr("modify_qp", C.sd_modify_qp(d.ctx, (*C.struct_ibv_qp)(unsafe.Pointer(qp)),
			(*C.struct_ibv_qp_attr)(unsafe.Pointer(attr)), C.int(mask)))
	})
}
