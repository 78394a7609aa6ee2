//go:build linux && cgo

package softdev

/*
#cgo CFLAGS: -I${SRCDIR}/../../headers
// A function called without its layer's header in scope is an error, not
// an implicit declaration: the includes are the layering (TestLayers).
#cgo CFLAGS: -Werror=implicit-function-declaration
#include <stdlib.h>
#include "engine.h"
*/
import "C"

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"os"
	"runtime/cgo"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/device"
)

// Device is one open software device: a verbs context whose dispatch
// tables point at this package's provider. It is a device of the
// runtime's resource layer (the embedded *device.Device: AllocPD,
// CreateCQ, CreateQP, RegMR, Endpoint, WaitCQ, … go through the verbs,
// as on an HCA), with what only a software device has besides:
// Progress, the counters, the wire, the SRQ verbs. Its methods are safe
// for concurrent use; so are the verbs the context dispatches to. A copy
// of a Device is the same device (its state sits behind pointers): a
// second Close, through either, is ErrClosed.
type Device struct {
	*device.Device // the layer's device; nil for the zero Device
	*engine        // nil for the zero Device, which is refused as a nil one
}

// engine is the software device's own state.
type engine struct {
	mu      sync.RWMutex // methods hold it shared, close exclusively
	closed  bool
	closing atomic.Bool // set by close before it waits: blocked event readers give up
	ctx     *C.struct_ibv_context
	handle  cgo.Handle // the *Device, for the exported verbs (libverbs.go)
}

func init() {
	// device.Open(device.SoftdevName), and $VERBSEXP_DEVICE=softdev,
	// open a device of this package, running by itself as an HCA does.
	device.Register(device.SoftdevName, func() (*device.Device, error) {
		d, err := Open(Autonomous())
		if err != nil {
			return nil, err
		}
		return d.Device, nil
	})
}

// ErrClosed is returned by the methods of a closed Device (it is
// device.ErrClosed).
var ErrClosed = device.ErrClosed

// ErrNilDevice is returned by the methods of a nil *Device (what Open
// returns with its error): an error, never a nil dereference (it is
// device.ErrNilDevice).
var ErrNilDevice = device.ErrNilDevice

// Open creates a device at its address (see Address) and starts its
// transport. Close it when done. Without options it has the limits
// DefaultLimits gives and runs its send queues in polls.
func Open(opts ...DeviceOption) (*Device, error) {
	cfg := deviceConfig{limits: DefaultLimits, timeScale: 1}
	for _, o := range opts {
		if o != nil { // a nil option is no option
			o(&cfg)
		}
	}
	l := cfg.limits
	if l.MaxQPWR <= 0 || l.MaxQPWR > int(C.SD_LIMIT_QP_WR) || l.MaxCQE <= 0 || l.MaxCQE > int(C.SD_LIMIT_CQE) {
		return nil, fmt.Errorf("softdev: open: limits %+v: each must be in 1..%d: %w", l, int(C.SD_LIMIT_QP_WR), syscall.EINVAL)
	}
	if !(cfg.timeScale > 0) || math.IsInf(cfg.timeScale, 0) {
		return nil, fmt.Errorf("softdev: open: TimerScale %v: need a finite factor > 0: %w", cfg.timeScale, syscall.EINVAL)
	}
	addr, where := cfg.addr, "Address option"
	if !cfg.addrSet {
		addr, where = os.Getenv(AddrEnv), "$"+AddrEnv
	}
	c := C.struct_sd_config{max_qp_wr: C.uint32_t(l.MaxQPWR), max_cqe: C.uint32_t(l.MaxCQE), timescale: C.double(cfg.timeScale),
		listen_fd: -1, autonomous: map[runMode]C.int{runAuto: C.SD_RUN_AUTO, runThread: C.SD_RUN_THREAD, runPolls: C.SD_RUN_POLLS}[cfg.run]}
	if cfg.ib {
		c.port_ib = 1
	}
	if err := cfg.comp.apply(&c); err != nil {
		return nil, err
	}
	if addr == "" {
		c.auto_loopback = 1
	} else {
		ip, err := netip.ParseAddr(addr)
		if err != nil || ip.Zone() != "" || ip.IsUnspecified() || ip.IsMulticast() {
			return nil, fmt.Errorf("softdev: open: %s %q is not a unicast IP address of this host: %w", where, addr, syscall.EINVAL)
		}
		g := ip.As16()
		for i := range g {
			c.addr[i] = C.uint8_t(g[i])
		}
	}
	var e C.int
	ctx := C.sd_open(&c, &e)
	if ctx == nil {
		return nil, openErr(addr, where, int(e))
	}
	d := &Device{engine: &engine{ctx: ctx}}
	if err := d.attach(); err != nil {
		C.sd_discard(ctx)
		return nil, err
	}
	d.Device, _ = device.New(device.SoftdevName, d.context(), d.close) // a context and a close function: no error
	return d, nil
}

// errPortEverywhere is sd_open's error for a port taken at every
// loopback address (not an errno).
const errPortEverywhere = int(C.SD_ERR_PORT_EVERYWHERE)

// openErr says why a device could not be opened at addr ("": a loopback
// address of its own), from sd_open's error e, and what to do.
func openErr(addr, where string, e int) error {
	if e == errWireKey {
		return wireKeyErr()
	}
	errno := syscall.Errno(e)
	if e == errPortEverywhere {
		errno = syscall.EADDRINUSE
	}
	holders := func(ip netip.Addr) string {
		if ls := listenersAt(ip, WirePort); len(ls) > 0 {
			return ": " + describeListeners(ls) + " listens there"
		}
		return " (another device, or another program, listens there)"
	}
	first := netip.MustParseAddr("127.0.0.2")
	switch {
	case e == errPortEverywhere:
		return fmt.Errorf("softdev: open: port %d is taken at every loopback address at once, as a program listening on it at a wildcard address does%s; "+
			"no device can listen at a loopback address until it stops (or give the device an address where the port is free: Address, $%s): %w",
			WirePort, holders(first), AddrEnv, errno)
	case addr == "" && errno == syscall.EADDRINUSE:
		return fmt.Errorf("softdev: open: every loopback address 127.0.0.2 ... 127.255.255.254 has a listener at port %d: %w", WirePort, errno)
	case addr == "" && errno == syscall.EADDRNOTAVAIL:
		return fmt.Errorf("softdev: open: this host does not let a program listen at loopback address 127.0.0.2 (only 127.0.0.1 is there?): "+
			"give the device an address of this host (Address, $%s): %w", AddrEnv, errno)
	case errno == syscall.EADDRINUSE:
		ip, _ := netip.ParseAddr(addr)
		return fmt.Errorf("softdev: open: %s %s: port %d there is taken%s; one device per address: %w", where, addr, WirePort, holders(ip), errno)
	case errno == syscall.EADDRNOTAVAIL:
		return fmt.Errorf("softdev: open: %s %s is not an address of this host (ip addr shows them): %w", where, addr, errno)
	case errno == syscall.EMFILE || errno == syscall.ENFILE:
		return fmt.Errorf("softdev: open: out of file descriptors (a device needs 6; ulimit -n): %w", errno)
	case errno == syscall.EAGAIN:
		return fmt.Errorf("softdev: open: cannot start the device's transport thread (the limit on threads: ulimit -u, or the cgroup's pids.max): %w", errno)
	}
	return fmt.Errorf("softdev: open: %w", errno)
}

// GID returns the device's GID (its port's GID table entry 0): its IP
// address, IPv4-mapped as RoCE v2 forms it, or IPv6. Peers connect to it
// with a GRH whose dgid is this.
func (d *Device) GID() [16]byte {
	g, _ := d.wire()
	return g
}

// Addr returns the IP address the device listens on (the GID as an IP).
func (d *Device) Addr() netip.Addr {
	return netip.AddrFrom16(d.GID()).Unmap()
}

// Limits returns the device's max_qp_wr and max_cqe.
func (d *Device) Limits() Limits {
	var l Limits
	_ = d.use(func() error {
		var wr, cqe C.uint32_t
		C.sd_limits(d.ctx, &wr, &cqe)
		l = Limits{MaxQPWR: int(wr), MaxCQE: int(cqe)}
		return nil
	})
	return l
}

// Context returns the device's struct ibv_context, the argument of the
// generated wrappers that take a context (verbs.ExpPostTask,
// verbs.ExpQueryDevice, …). It stays valid until Close; from then on (and
// for a nil Device) it is nil, which every wrapper refuses with EINVAL.
func (d *Device) Context() *verbs.Context {
	if d.isNil() {
		return nil
	}
	return d.Device.Context()
}

// context is the context for the methods, which hold d.mu (Context is
// nil as soon as Close starts waiting for them).
func (d *Device) context() *verbs.Context { return (*verbs.Context)(unsafe.Pointer(d.ctx)) }

// isNil says whether d is nil or the zero Device.
func (d *Device) isNil() bool { return d == nil || d.engine == nil || d.Device == nil }

// use runs f unless the device is closed (or nil).
func (d *Device) use(f func() error) error {
	if d.isNil() {
		return ErrNilDevice
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return ErrClosed
	}
	return f()
}

// Close destroys the device and every object still open in it. It
// returns a *LeakError counting the PDs, MRs, CQs and QPs that had not
// been destroyed (their queues and rings are freed all the same), or nil.
//
// Calls in flight, on any goroutine and by any path (these methods, the
// exported verbs, the headers' inline verbs such as verbs.PostSend and
// verbs.PollCQ that reach the device without this Device), finish
// before Close frees anything. A call that starts after Close is an
// error: ErrClosed from these methods, ENODEV from the verbs (EINVAL
// from those given Context(), which is nil by then). For that, the
// device's record and its objects' records outlive Close for the life
// of the process (on amd64 1.5 KB per device, 1.3 KB per QP and 224
// bytes per CQ it ever had, 88 per MR and 48 per PD open at Close; see
// sd_close in engine_objects.c); everything else (rings, tables, the network,
// file descriptors) goes.
func (d *Device) Close() error {
	if d.isNil() {
		return ErrNilDevice
	}
	return d.Device.Close() // which calls close, once
}

// close is the layer's close function: the device's own Close.
func (d *Device) close() error {
	// Wake a GetAsyncEvent blocked on the fd (it holds d.mu shared, so
	// Close could not take it exclusively otherwise). The wake runs with
	// d.mu shared too: a concurrent Close cannot free the context under it.
	d.mu.RLock()
	if !d.closed && !d.closing.Swap(true) {
		C.sd_wake(d.ctx)
	}
	d.mu.RUnlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	d.closed = true
	d.detach()
	var l C.struct_sd_leaks
	C.sd_close(d.ctx, &l)
	if l.pds+l.mrs+l.cqs+l.qps+l.ahs+l.srqs == 0 {
		return nil
	}
	return &LeakError{PDs: int(l.pds), MRs: int(l.mrs), CQs: int(l.cqs), QPs: int(l.qps), AHs: int(l.ahs), SRQs: int(l.srqs)}
}

// The layer's methods, through a nil *Device too (a nil Device's are
// ErrNilDevice, as the layer's own nil Device's are), where the promoted
// methods would dereference it. See device.Device for each.

func (d *Device) layer() *device.Device {
	if d.isNil() {
		return nil
	}
	return d.Device
}

// AllocPD is device.Device.AllocPD.
func (d *Device) AllocPD() (*verbs.PD, error) { return d.layer().AllocPD() }

// DeallocPD is device.Device.DeallocPD: EBUSY while MRs or QPs use pd.
func (d *Device) DeallocPD(pd *verbs.PD) error { return d.layer().DeallocPD(pd) }

// RegMR is device.Device.RegMR. As an HCA's registration pins the pages,
// this device checks that the whole range is mapped memory it may read
// (and write, with any write access): otherwise EFAULT, naming the first
// byte that is not.
func (d *Device) RegMR(pd *verbs.PD, mem []byte, access verbs.AccessFlags) (*verbs.MR, error) {
	if !d.isNil() && len(mem) > 0 {
		// The verb checks it too; this says where and why.
		write := access&(verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0
		if err := checkMapped(uintptr(unsafe.Pointer(unsafe.SliceData(mem))), uintptr(len(mem)), write); err != nil {
			return nil, fmt.Errorf("softdev: reg_mr: %w", err)
		}
	}
	return d.layer().RegMR(pd, mem, access)
}

// DeregMR is device.Device.DeregMR. WQEs still naming the MR's keys fail
// when they execute (IBV_WC_LOC_PROT_ERR or IBV_WC_REM_ACCESS_ERR).
func (d *Device) DeregMR(mr *verbs.MR) error { return d.layer().DeregMR(mr) }

// CreateCQ is device.Device.CreateCQ. As on mlx4 and mlx5 the ring gets
// the smallest power of two of entries above cqe, and the CQ's CQE field
// says that size minus one; more than the device's max_cqe is EINVAL.
func (d *Device) CreateCQ(cqe int, opts ...device.CQOption) (*verbs.CQ, error) {
	return d.layer().CreateCQ(cqe, opts...)
}

// DestroyCQ is device.Device.DestroyCQ: EBUSY while a QP uses the CQ or
// a pending CQE_WAIT names it.
func (d *Device) DestroyCQ(cq *verbs.CQ) error { return d.layer().DestroyCQ(cq) }

// CreateQP is device.Device.CreateQP.
func (d *Device) CreateQP(pd *verbs.PD, sendCQ, recvCQ *verbs.CQ, opts ...device.QPOption) (*verbs.QP, error) {
	return d.layer().CreateQP(pd, sendCQ, recvCQ, opts...)
}

// DestroyQP is device.Device.DestroyQP: EBUSY while a pending SEND_ENABLE
// or RECV_ENABLE on another QP names the QP. A destroyed QP's handle
// stays harmless (every verb on it fails with EINVAL, ENODEV once the
// device is closed).
func (d *Device) DestroyQP(qp *verbs.QP) error { return d.layer().DestroyQP(qp) }

// QueryPort is device.Device.QueryPort. The device has one port, 1
// (Ethernet, or InfiniBand with a LID under the InfiniBandPort option);
// any other is EINVAL.
func (d *Device) QueryPort(port uint8) (verbs.PortAttr, error) { return d.layer().QueryPort(port) }

// QueryGID is device.Device.QueryGID: GID 0 of port 1 is the device's
// address (GID).
func (d *Device) QueryGID(port uint8, index int) ([16]byte, error) {
	return d.layer().QueryGID(port, index)
}

// Endpoint is device.Device.Endpoint.
func (d *Device) Endpoint(qp *verbs.QP) (device.Endpoint, error) { return d.layer().Endpoint(qp) }

// WaitCQ is device.Device.WaitCQ. Nothing completes while the program
// sleeps unless the device runs by itself: open it Autonomous, or connect
// one of its QPs to another device.
func (d *Device) WaitCQ(ctx context.Context, cq *verbs.CQ, poll func() (int, error)) (int, error) {
	return d.layer().WaitCQ(ctx, cq, poll)
}

// PollCQ is device.Device.PollCQ (see WaitCQ).
func (d *Device) PollCQ(ctx context.Context, cq *verbs.CQ, wc []verbs.ExpWC) (int, error) {
	return d.layer().PollCQ(ctx, cq, wc)
}

// Name is device.SoftdevName.
func (d *Device) Name() string { return d.layer().Name() }

func callErr(fn string, errno C.int) error {
	if errno == 0 {
		return nil
	}
	return fmt.Errorf("softdev: %s: %w", fn, syscall.Errno(errno))
}

// Progress runs the device until nothing more can run and returns the
// number of WQEs it retired (executed or flushed). If work remains that
// cannot run with what has been posted so far, the error is a
// *DeadlockError naming each blocked queue; posting more work (a
// receive, a send whose completion a wait needs) may unblock it, so the
// error describes the moment, it is not a sticky state. Polling runs the
// device the same way, so Progress is needed only to drive schedules
// whose completions nobody polls, or to detect a stall.
func (d *Device) Progress() (executed int, err error) {
	if d.isNil() {
		return 0, ErrNilDevice
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return 0, ErrClosed
	}
	r := C.sd_progress(d.ctx)
	if r.stalled == 0 {
		return int(r.executed), nil
	}
	return int(r.executed), d.deadlock(int(r.stalled))
}

// deadlock collects the blocked queues; nil if they all moved on since.
func (d *Device) deadlock(max int) error {
	buf := make([]C.struct_sd_blocked, max)
	n := int(C.sd_blocked(d.ctx, &buf[0], C.int(len(buf))))
	de := &DeadlockError{}
	for _, b := range buf[:n] {
		switch b.kind {
		case C.SD_BLOCK_WAIT:
			de.Waits = append(de.Waits, BlockedWait{
				QPNum: uint32(b.qp_num), WRID: uint64(b.wr_id),
				CQ: (*verbs.CQ)(b.cq), CQHandle: uint32(b.cq_handle),
				Needed: uint64(b.needed), Produced: uint64(b.produced),
				Base: uint64(b.base), Count: int32(b.count),
			})
		case C.SD_BLOCK_GATED:
			g := BlockedGated{
				QPNum: uint32(b.qp_num), WRID: uint64(b.wr_id), Opcode: opName(b.op),
				Position: uint64(b.position), Released: uint64(b.released), QueueBase: uint64(b.qbase),
			}
			switch b.op {
			case C.SD_OP_WAIT:
				g.CQHandle, g.Base, g.Count, g.Upto = uint32(b.cq_handle), uint64(b.base), int32(b.count), uint64(b.needed)
			case C.SD_OP_SEND_EN, C.SD_OP_RECV_EN:
				g.Target, g.Base, g.Count, g.Upto = uint32(b.target), uint64(b.base), int32(b.count), uint64(b.needed)
			}
			de.Gated = append(de.Gated, g)
		default:
			de.Sends = append(de.Sends, BlockedSend{
				QPNum: uint32(b.qp_num), WRID: uint64(b.wr_id), DestQPNum: uint32(b.dest_qpn),
				PeerManaged: b.managed != 0, PeerPosted: uint64(b.posted),
				PeerReleased: uint64(b.released), PeerBase: uint64(b.qbase),
			})
		}
	}
	if len(de.Waits)+len(de.Sends)+len(de.Gated) == 0 {
		return nil
	}
	return de
}

// opName names an internal opcode as the verbs opcode it came from.
func opName(op C.uint32_t) string {
	switch op {
	case C.SD_OP_SEND:
		return "SEND"
	case C.SD_OP_SEND_IMM:
		return "SEND_WITH_IMM"
	case C.SD_OP_WRITE:
		return "RDMA_WRITE"
	case C.SD_OP_WRITE_IMM:
		return "RDMA_WRITE_WITH_IMM"
	case C.SD_OP_READ:
		return "RDMA_READ"
	case C.SD_OP_NOP:
		return "NOP"
	case C.SD_OP_WAIT:
		return "CQE_WAIT"
	case C.SD_OP_SEND_EN:
		return "SEND_ENABLE"
	case C.SD_OP_RECV_EN:
		return "RECV_ENABLE"
	}
	return fmt.Sprintf("opcode %d", op)
}

// CQStats describes a CQ's counters.
type CQStats struct {
	Produced uint64 // CQEs written since creation, polled or not (what CQE_WAIT counts)
	Queued   uint64 // CQEs a poll would return now
	Dropped  uint64 // CQEs lost: overwritten before they were polled, or refused after an overrun
	Overrun  bool   // the CQ overran without ignoring overruns, and is in error
}

// CQStats returns the counters of one of the device's CQs.
func (d *Device) CQStats(cq *verbs.CQ) (CQStats, error) {
	var s CQStats
	err := d.use(func() error {
		var p, q, dr C.uint64_t
		var o C.int
		if e := C.sd_cq_state(d.ctx, (*C.struct_ibv_cq)(unsafe.Pointer(cq)), &p, &q, &dr, &o); e != 0 {
			return callErr("cq_stats", e)
		}
		s = CQStats{Produced: uint64(p), Queued: uint64(q), Dropped: uint64(dr), Overrun: o != 0}
		return nil
	})
	return s, err
}

// QueueStats describes one queue of a QP, in WQEs since creation (or
// since the last move to RESET).
type QueueStats struct {
	Posted  uint64 // producer index
	Done    uint64 // consumer index: WQEs retired
	Enabled uint64 // WQEs below this position may run: released by enables (Posted if not managed)
	Freed   uint64 // slots below this position may take new WRs: up to the WQEs whose CQEs were polled
}

// QPStats returns the state and the queue counters of one of the
// device's QPs.
func (d *Device) QPStats(qp *verbs.QP) (state verbs.QPState, send, recv QueueStats, err error) {
	err = d.use(func() error {
		var sp, sd, se, sf, rp, rd, re, rf C.uint64_t
		var st C.int
		if e := C.sd_qp_state(d.ctx, (*C.struct_ibv_qp)(unsafe.Pointer(qp)), &st, &sp, &sd, &se, &sf, &rp, &rd, &re, &rf); e != 0 {
			return callErr("qp_stats", e)
		}
		state = verbs.QPState(st)
		send = QueueStats{Posted: uint64(sp), Done: uint64(sd), Enabled: uint64(se), Freed: uint64(sf)}
		recv = QueueStats{Posted: uint64(rp), Done: uint64(rd), Enabled: uint64(re), Freed: uint64(rf)}
		return nil
	})
	return
}

// TaskFailure reports the most recent failed ibv_exp_post_task on this
// device: the task *bad_task named, the work request of that task that
// failed (a *verbs.ExpSendWR or *verbs.RecvWR, nil if the task itself was
// invalid) and the errno. The verbs API has no way to return the WR;
// this is the device's own record of it.
func (d *Device) TaskFailure() (task *verbs.ExpTask, wr unsafe.Pointer, errno syscall.Errno) {
	_ = d.use(func() error {
		var t, w unsafe.Pointer
		var e C.int
		C.sd_task_failure(d.ctx, &t, &w, &e)
		task, wr, errno = (*verbs.ExpTask)(t), w, syscall.Errno(e)
		return nil
	})
	return
}

// WireStats counts what a QP's RC transport did, as an HCA's port and
// QP counters would.
type WireStats struct {
	TxPackets, RxPackets uint64 // packets sent and taken (requests and answers)
	Retransmitted        uint64 // packets sent again: after a timeout, a sequence NAK or an RNR NAK
	Timeouts             uint64 // local ACK timer expiries
	RNRNaksReceived      uint64 // as requester: the responder had no receive WQE
	RNRNaksSent          uint64 // as responder
	SeqNaksReceived      uint64 // as requester: a PSN the responder did not expect
	SeqNaksSent          uint64
	Duplicates           uint64 // requests taken again and answered again, not executed again
	Dropped              uint64 // packets for this QP not taken (its state, out of sequence, ghosts)
}

// QPWire returns the transport counters of one of the device's QPs.
func (d *Device) QPWire(qp *verbs.QP) (WireStats, error) {
	var w WireStats
	err := d.use(func() error {
		var s C.struct_sd_wire_stats
		if e := C.sd_qp_wire(d.ctx, (*C.struct_ibv_qp)(unsafe.Pointer(qp)), &s); e != 0 {
			return callErr("qp_wire", e)
		}
		w = wireStats(&s)
		return nil
	})
	return w, err
}

// DeviceWire counts what a device's wire did.
type DeviceWire struct {
	Dropped      uint64        // packets taken from a link and dropped: no QP of this device, not from its peer, or frames that did not parse
	ConnectFails uint64        // connections to peer devices that could not be made, or broke
	LastError    syscall.Errno // why the last of them failed (ECONNREFUSED: nobody listens there)
	LeftToPoller uint64        // times the transport thread, woken for frames, left them to an application polling the wire
	Unwatched    uint64        // times the application's polls took the connections from the transport thread: they read the frames many times in a row, and frames woke the thread only to find them taken, until the polls stop
	ThreadHolds  uint64        // times the transport thread held a connection's ACKs for the application's next request to that peer to carry, which it does while that application answers within 20 µs
	Gathered     uint64        // payloads of 1 KiB or more left in their MRs when queued, for the flush to send from there (sendmsg) instead of copying them into the send buffer
	GatherCopies uint64        // of those, payloads copied after all: the socket was full, or the connection not yet open
	QPs          WireStats     // the sum of QPWire over the device's QPs that exist now
	Guard        WireGuard     // what the wire refused or shed to stay reachable (wire_auth.go)
}

// wireStats converts the C counters.
func wireStats(s *C.struct_sd_wire_stats) WireStats {
	return WireStats{TxPackets: uint64(s.tx_pkts), RxPackets: uint64(s.rx_pkts), Retransmitted: uint64(s.retrans),
		Timeouts: uint64(s.timeouts), RNRNaksReceived: uint64(s.rnr_naks_rx), RNRNaksSent: uint64(s.rnr_naks_tx),
		SeqNaksReceived: uint64(s.seq_naks_rx), SeqNaksSent: uint64(s.seq_naks_tx), Duplicates: uint64(s.dups),
		Dropped: uint64(s.dropped)}
}

// Wire returns the device's wire counters.
func (d *Device) Wire() DeviceWire {
	_, w := d.wire()
	return w
}

// markPolling has the device's wire see an application's poll in
// progress (on) or none, as PollCQ marks its read of the wire, without
// reading it (tests: the transport thread must take the frames anyway).
func (d *Device) markPolling(on bool) {
	mark := C.int(0)
	if on {
		mark = 1
	}
	_ = d.use(func() error {
		C.sd_dev_poll_mark(d.ctx, mark)
		return nil
	})
}

// wire reads the device's GID and wire counters (zero once it is closed).
func (d *Device) wire() (gid [16]byte, w DeviceWire) {
	_ = d.use(func() error {
		var s C.struct_sd_dev_wire_stats
		C.sd_dev_wire(d.ctx, &s)
		for i := range gid {
			gid[i] = byte(s.gid[i])
		}
		w = DeviceWire{Dropped: uint64(s.dropped), ConnectFails: uint64(s.connect_fails), LastError: syscall.Errno(s.last_errno),
			LeftToPoller: uint64(s.left_to_poller), Unwatched: uint64(s.unwatched), ThreadHolds: uint64(s.thread_holds), Gathered: uint64(s.gathered),
			GatherCopies: uint64(s.gather_copies), QPs: wireStats(&s.qps), Guard: wireGuard(&s.guard)}
		return nil
	})
	return gid, w
}
