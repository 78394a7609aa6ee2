//go:build linux && cgo

package device

import (
	"fmt"
	"math"
	"syscall"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/cmem"
)

// The resources go through the generated package's verbs: on an HCA and
// under `softdev exec` to libibverbs and its provider, on the in-process
// software device to the verbs it provides (dynlib.Provide). The Device
// keeps the objects it created, so that one it did not create (another
// device's, one destroyed already) is refused with EINVAL before any
// verb reads it, and Close can say what was left. The calls that create
// and destroy hold the object lock over the verb, so that an object is
// not destroyed while another call creates something on it (a PD under
// a registration): each sees the other done or not started.

// errNotMine says an object is not a live one of this device.
func (d *Device) errNotMine(fn, what string, obj any) error {
	return fmt.Errorf("device: %s: %s %p is not a live %s of device %s (destroyed already, another device's, or not made through this Device): %w",
		fn, what, obj, what, d.name, syscall.EINVAL)
}

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (d *Device) AllocPD() (*verbs.PD, error) {
	var pd *verbs.PD
	err := d.useObjs(func() error {
		p, err := verbs.AllocPD(d.ctx)
		if err != nil {
			return fmt.Errorf("device: %w", err)
		}
		d.pds[p] = struct{}{}
		pd = p
		return nil
	})
	return pd, err
}

// DeallocPD frees a protection domain (ibv_dealloc_pd); EBUSY while MRs
// or QPs use it.
func (d *Device) DeallocPD(pd *verbs.PD) error {
	return d.useObjs(func() error {
		if !claim(d.pds, pd) {
			return d.errNotMine("DeallocPD", "PD", pd)
		}
		if err := verbs.DeallocPD(pd); err != nil {
			d.pds[pd] = struct{}{}
			return fmt.Errorf("device: %w", err)
		}
		return nil
	})
}

// useObjs is use with the object lock held throughout f.
func (d *Device) useObjs(f func() error) error {
	return d.use(func() error {
		d.objMu.Lock()
		defer d.objMu.Unlock()
		return f()
	})
}

// claim takes obj out of the device's set m, so that one call, not two
// racing, destroys it; false if it was not there.
func claim[K comparable, V any](m map[K]V, obj K) bool {
	if _, ok := m[obj]; !ok {
		return false
	}
	delete(m, obj)
	return true
}

// has says whether obj is in the device's set m.
func has[K comparable, V any](m map[K]V, obj K) bool {
	_, ok := m[obj]
	return ok
}

// RegMR registers mem in pd with the given access (ibv_reg_mr;
// verbs.AccessLocalWrite, AccessRemoteWrite, AccessRemoteRead, …: remote
// write needs local write). The device reads and writes mem while it
// executes work requests, long after this call, so mem must stay valid
// and in place until DeregMR: C memory (a lease.Buffer's Bytes, which
// leases keep from being freed while a work request names them, or
// cmem.Slice), or Go memory pinned with a runtime.Pinner for that long.
// An empty mem is EINVAL.
func (d *Device) RegMR(pd *verbs.PD, mem []byte, access verbs.AccessFlags) (*verbs.MR, error) {
	if len(mem) == 0 {
		return nil, fmt.Errorf("device: RegMR: no memory (an empty slice): %w", syscall.EINVAL)
	}
	var mr *verbs.MR
	err := d.useObjs(func() error {
		if !has(d.pds, pd) {
			return d.errNotMine("RegMR", "PD", pd)
		}
		m, err := verbs.RegMR(pd, unsafe.Pointer(unsafe.SliceData(mem)), uint64(len(mem)), int32(access))
		if err != nil {
			return fmt.Errorf("device: %w", err)
		}
		d.mrs[m] = struct{}{}
		mr = m
		return nil
	})
	return mr, err
}

// DeregMR deregisters an MR (ibv_dereg_mr).
func (d *Device) DeregMR(mr *verbs.MR) error {
	return d.useObjs(func() error {
		if !claim(d.mrs, mr) {
			return d.errNotMine("DeregMR", "MR", mr)
		}
		if err := verbs.DeregMR(mr); err != nil {
			d.mrs[mr] = struct{}{}
			return fmt.Errorf("device: %w", err)
		}
		return nil
	})
}

// CreateCQ creates a completion queue with room for at least cqe
// completions, through ibv_exp_create_cq (and ibv_exp_modify_cq for
// IgnoreOverrun); Waitable gives it a completion channel for WaitCQ. A
// cqe that does not fit the C int is refused with EINVAL; the device
// refuses more than its max_cqe.
func (d *Device) CreateCQ(cqe int, opts ...CQOption) (*verbs.CQ, error) {
	var cfg cqConfig
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cqe <= 0 || cqe > math.MaxInt32 {
		return nil, fmt.Errorf("device: CreateCQ: %d entries: the count must be in 1..%d (a C int): %w", cqe, math.MaxInt32, syscall.EINVAL)
	}
	var cq *verbs.CQ
	err := d.useObjs(func() (err error) {
		var w *waiter
		if cfg.waitable {
			if w, err = newWaiter(d.ctx); err != nil {
				return err
			}
			defer func() {
				if err != nil {
					w.destroyChannel()
				}
			}()
		}
		attr, err := cmem.New[verbs.ExpCQInitAttr]()
		if err != nil {
			return err
		}
		defer cmem.Free(attr)
		if cfg.crossChannel {
			attr.CompMask = uint32(verbs.ExpCQInitAttrFlags)
			attr.Flags = uint32(verbs.ExpCQCreateCrossChannel)
		}
		c, err := verbs.ExpCreateCQ(d.ctx, int32(cqe), nil, w.compChannel(), 0, attr)
		if err != nil {
			return fmt.Errorf("device: %w", err)
		}
		defer func() {
			if err != nil {
				verbs.DestroyCQ(c)
			}
		}()
		if cfg.ignoreOverrun {
			m, err := cmem.New[verbs.ExpCQAttr]()
			if err != nil {
				return err
			}
			defer cmem.Free(m)
			m.CompMask = uint32(verbs.ExpCQAttrCQCapFlags)
			m.CQCapFlags = uint32(verbs.ExpCQIgnoreOverrun)
			if err := verbs.ExpModifyCQ(c, m, int32(verbs.ExpCQCapFlagsConst)); err != nil {
				return fmt.Errorf("device: IgnoreOverrun: %w", err)
			}
		}
		if w != nil {
			if err := w.start(c); err != nil {
				return err
			}
		}
		d.cqs[c] = w
		cq = c
		return nil
	})
	return cq, err
}

// DestroyCQ destroys a CQ (ibv_destroy_cq) and its completion channel;
// EBUSY while a QP uses it. A WaitCQ on it returns ErrClosed.
func (d *Device) DestroyCQ(cq *verbs.CQ) error {
	return d.useObjs(func() error {
		w, ok := d.cqs[cq]
		delete(d.cqs, cq)
		if !ok {
			return d.errNotMine("DestroyCQ", "CQ", cq)
		}
		if w != nil {
			w.stop() // no read of its channel from here on
		}
		if err := verbs.DestroyCQ(cq); err != nil {
			if w != nil {
				if rerr := w.start(cq); rerr != nil {
					err = fmt.Errorf("%w; and the CQ can no longer be waited on: %v", err, rerr)
				}
			}
			d.cqs[cq] = w
			return fmt.Errorf("device: %w", err)
		}
		if w != nil {
			return w.destroyChannel()
		}
		return nil
	})
}

// CreateQP creates a queue pair in pd, in the RESET state, through
// ibv_exp_create_qp (with IBV_EXP_QP_INIT_ATTR_CREATE_FLAGS always set,
// so the request reaches the provider's exp path even without flags). It
// is an RC QP unless Transport says otherwise; without QPCaps its queues
// hold DefaultCaps; with SRQ its receives come from a shared receive
// queue. Connect (or ConnectPair) moves it to RTS.
func (d *Device) CreateQP(pd *verbs.PD, sendCQ, recvCQ *verbs.CQ, opts ...QPOption) (*verbs.QP, error) {
	cfg := qpConfig{caps: DefaultCaps, qpType: verbs.QptRC}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	c := cfg.caps
	for _, v := range []struct {
		name string
		n    int
	}{{"SendWR", c.SendWR}, {"RecvWR", c.RecvWR}, {"SendSGE", c.SendSGE}, {"RecvSGE", c.RecvSGE}, {"Inline", c.Inline}} {
		if v.n < 0 || v.n > math.MaxUint32 {
			return nil, fmt.Errorf("device: CreateQP: Caps.%s %d does not fit struct ibv_qp_cap (a uint32): %w", v.name, v.n, syscall.EINVAL)
		}
	}
	var qp *verbs.QP
	err := d.useObjs(func() error {
		if !has(d.pds, pd) {
			return d.errNotMine("CreateQP", "PD", pd)
		}
		for _, cq := range []*verbs.CQ{sendCQ, recvCQ} {
			if !has(d.cqs, cq) {
				return d.errNotMine("CreateQP", "CQ", cq)
			}
		}
		attr, err := cmem.New[verbs.ExpQPInitAttr]()
		if err != nil {
			return err
		}
		defer cmem.Free(attr)
		attr.SendCQ, attr.RecvCQ = sendCQ, recvCQ
		attr.Cap = verbs.QPCap{MaxSendWR: uint32(c.SendWR), MaxRecvWR: uint32(c.RecvWR),
			MaxSendSGE: uint32(c.SendSGE), MaxRecvSGE: uint32(c.RecvSGE), MaxInlineData: uint32(c.Inline)}
		attr.QPType = cfg.qpType
		attr.SRQ = cfg.srq
		if cfg.sigAll {
			attr.SQSigAll = 1
		}
		attr.CompMask = uint32(verbs.ExpQPInitAttrPD | verbs.ExpQPInitAttrCreateFlags)
		attr.PD = pd
		attr.ExpCreateFlags = uint32(cfg.flags)
		q, err := verbs.ExpCreateQP(d.ctx, attr)
		if err != nil {
			return fmt.Errorf("device: %w", err)
		}
		d.qps[q] = struct{}{}
		qp = q
		return nil
	})
	return qp, err
}

// DestroyQP destroys a QP (ibv_destroy_qp), discarding its work requests.
func (d *Device) DestroyQP(qp *verbs.QP) error {
	return d.useObjs(func() error {
		if !claim(d.qps, qp) {
			return d.errNotMine("DestroyQP", "QP", qp)
		}
		if err := verbs.DestroyQP(qp); err != nil {
			d.qps[qp] = struct{}{}
			return fmt.Errorf("device: %w", err)
		}
		return nil
	})
}

// QueryPort returns a port's attributes (ibv_query_port).
func (d *Device) QueryPort(port uint8) (verbs.PortAttr, error) {
	var a verbs.PortAttr
	err := d.use(func() error {
		p, err := queryPort(d.ctx, port)
		a = p
		return err
	})
	return a, err
}

func queryPort(ctx *verbs.Context, port uint8) (verbs.PortAttr, error) {
	pa, err := cmem.New[verbs.PortAttr]()
	if err != nil {
		return verbs.PortAttr{}, err
	}
	defer cmem.Free(pa)
	if err := verbs.QueryPort(ctx, port, pa); err != nil {
		return verbs.PortAttr{}, fmt.Errorf("device: port %d: %w", port, err)
	}
	return *pa, nil
}

// QueryGID returns GID index of a port's GID table (ibv_query_gid): on
// Ethernet (RoCE) the port's addresses, on InfiniBand the subnet prefix
// and port GUID.
func (d *Device) QueryGID(port uint8, index int) ([16]byte, error) {
	var g [16]byte
	if index < 0 || index > math.MaxInt32 {
		return g, fmt.Errorf("device: QueryGID: index %d: want 0 to %d: %w", index, math.MaxInt32, syscall.EINVAL)
	}
	err := d.use(func() error {
		gid, err := cmem.New[verbs.GID]()
		if err != nil {
			return err
		}
		defer cmem.Free(gid)
		if err := verbs.QueryGID(d.ctx, port, int32(index), gid); err != nil {
			return fmt.Errorf("device: port %d GID %d: %w", port, index, err)
		}
		g = *gid.Raw()
		return nil
	})
	return g, err
}
