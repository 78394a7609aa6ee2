//go:build linux && cgo

package coll

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/coll/internal/ranklist"
	"github.com/verbsexp/verbsexp/runtime/device"
	"github.com/verbsexp/verbsexp/runtime/lease"
)

// Options tune a communicator. The zero value is usable.
type Options struct {
	// Port is the HCA port the queue pairs use (default 1).
	Port uint8
	// Depth bounds what one run of a schedule may put on one queue: the
	// send and receive work requests per peer queue pair (and so the
	// elements of an allreduce). Default 64. The manager's send queue
	// gets 4×Depth, every CQ Depth or more; an allreduce of c elements
	// also puts c + 2·log2(N) + 4 or so work requests on the manager,
	// which is what limits it below Depth 8. Schedules that do not fit
	// are refused with EINVAL naming Options.Depth.
	Depth int
	// Progress, if set, is called by Schedule.Wait when a run is not yet
	// complete; an error it returns ends the Wait. With a software
	// device it runs the device and reports a deadlock (collsoft sets
	// it); with an HCA leave it nil: Wait then polls until the run is
	// complete.
	Progress func() error
}

// DefaultDepth is Options.Depth's default.
const DefaultDepth = 64

// MaxRanks is the most ranks a communicator has: every rank keeps
// something of every other (its endpoint, its QP numbers), and New,
// NewLocal and NewInProcess refuse more before allocating for them.
const MaxRanks = 1 << 24

// Comm is one rank's communicator: its queue pairs connected to its
// neighbors' and the schedules built on them. Its methods may be called
// from several goroutines; one schedule runs at a time (a collective
// must be complete on this rank before the next is posted, as with MPI's
// blocking collectives). A copy of a Comm is the same communicator: what
// changes after New sits behind one pointer that copies share, so a
// second Close, through either, is ErrClosed.
type Comm struct {
	ctx         *verbs.Context
	rank, size  int
	opts        Options
	pd          *verbs.PD
	mgr         *verbs.QP
	doneCQ      *verbs.CQ // the manager's send CQ: the one completion of a run
	selfCQ      *verbs.CQ // the manager's receive CQ (its loopback)
	sendCQ      *verbs.CQ // every peer QP's send CQ
	watchCQ     *verbs.CQ // the watch QPs' (their probes)
	readySendCQ *verbs.CQ // the ready QPs' sends (ready.go)
	peers       []*peer   // by rank; nil for ranks that are not neighbors
	caps        caps
	eps         []Endpoint         // every rank's, from the exchange
	qpOwner     map[uint32]qpOwner // every rank's QPs, for error reports

	*commState
}

// commState is what changes once New has returned.
type commState struct {
	mu        sync.Mutex
	closed    bool
	broken    error // a run failed: the queues are in an unknown state
	inflight  *schedule
	schedules map[*schedule]struct{}
	memories  map[*memory]struct{}
	// One lease per Memory, so its Buffer cannot be freed under the MR.
	registered *lease.Table
	nextMemory uint64
	watcher    watcher // probes of the neighbors while a run takes long
}

type peer struct {
	rank     int
	qp       *verbs.QP
	recvCQ   *verbs.CQ
	psn      uint32
	watch    *verbs.QP // a plain RC QP to the neighbor's, for probes (watch.go)
	watchPSN uint32
	ready    *verbs.QP // a plain RC QP to the neighbor's, for ready messages (ready.go)
	readyCQ  *verbs.CQ // its receives: the neighbor's ready messages
	readyPSN uint32
	useReady bool // this rank and the neighbor trade ready messages
}

// caps are what a communicator's queues hold.
type caps struct {
	depth, mgrDepth int
	sendSGE         int
	calc            verbs.ExpDeviceCalcCap
	calcReported    bool
}

// Errors of misuse; each wraps syscall.EINVAL or EBUSY.
var (
	ErrClosed   = fmt.Errorf("coll: communicator is closed: %w", syscall.EINVAL)
	ErrInFlight = fmt.Errorf("coll: a run is in flight on this rank: wait for it first: %w", syscall.EBUSY)
)

// New creates rank's communicator among size ranks on ctx: it creates a
// PD, a management QP (cross-channel, connected to itself) and one RC
// QP per neighbor (cross-channel, managed send), describes them in an
// Endpoint, trades endpoints through exchange and connects every QP to
// its peer with ibv_exp_modify_qp (INIT, RTR with the peer's LID or GID,
// QP number and PSN and the smaller active MTU, RTS). Every rank must
// call New with the same size and options; exchange must deliver every
// rank's endpoint to every rank. New checks what the peers claim (no
// queue pair claimed twice, every neighbor names a QP back to this rank,
// ranks and size agree) and calls exchange a second time once its QPs
// are connected, as a barrier that also compares every rank's view of
// the first round, so that when New returns on any rank every rank's QPs
// are ready, connected to the QPs their peers meant, and a Post may
// follow at once.
func New(ctx *verbs.Context, rank, size int, exchange Exchange, opts Options) (c *Comm, err error) {
	switch {
	case ctx == nil:
		return nil, fmt.Errorf("coll: New: nil context: %w", syscall.EINVAL)
	case size < 1 || size > MaxRanks || rank < 0 || rank >= size:
		return nil, fmt.Errorf("coll: New: rank %d of %d: need 0 ≤ rank < size ≤ %d: %w", rank, size, MaxRanks, syscall.EINVAL)
	case exchange == nil:
		return nil, fmt.Errorf("coll: New: nil exchange: %w", syscall.EINVAL)
	case opts.Depth < 0 || opts.Depth > 1<<20:
		return nil, fmt.Errorf("coll: New: Depth %d: need 0 (default) to %d: %w", opts.Depth, 1<<20, syscall.EINVAL)
	}
	if opts.Port == 0 {
		opts.Port = 1
	}
	if opts.Depth == 0 {
		opts.Depth = DefaultDepth
	}
	c = &Comm{ctx: ctx, rank: rank, size: size, opts: opts,
		peers: make([]*peer, size), commState: &commState{schedules: map[*schedule]struct{}{}, memories: map[*memory]struct{}{},
			registered: lease.NewTable()}}
	// Every error return below sets c to nil before this runs: release
	// what was created through its own copy.
	created := c
	defer func() {
		if err != nil {
			created.release()
		}
	}()
	local, err := c.setUp()
	if err != nil {
		return nil, rankError(rank, "", err)
	}
	b, err := local.MarshalBinary()
	if err != nil {
		return nil, err
	}
	all, err := exchange(b)
	if err != nil {
		return nil, rankError(rank, "exchange: ", err)
	}
	if err := c.accept(local, b, all); err != nil {
		return nil, rankError(rank, "", err)
	}
	if err := c.connectAll(local); err != nil {
		return nil, rankError(rank, "", err)
	}
	if err := connected(rank, size, exchange, digest(all)); err != nil {
		return nil, rankError(rank, "", err)
	}
	return c, nil
}

// connectedMark starts what every rank contributes to the exchange's
// second round; the digest of the first round follows it.
const connectedMark = "vxep connected"

// digest is the SHA-256 of a round's endpoints, every one length-prefixed.
func digest(all [][]byte) [sha256.Size]byte {
	h := sha256.New()
	for _, b := range all {
		h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(b))))
		h.Write(b)
	}
	return [sha256.Size]byte(h.Sum(nil))
}

// connected is a second round of the exchange, used as a barrier: once
// it returns, every rank has moved its QPs to RTS, so this rank's first
// send cannot reach a peer QP that is not yet ready to receive (softdev
// fails such a send at once with IBV_WC_RETRY_EXC_ERR, an HCA once its
// transport retries run out). Without it, a rank that posts as soon as
// its own New returns races its peers' connection.
//
// Each rank also contributes the digest of the endpoints it received, so
// every rank learns whether all of them connected from the same view: a
// peer that told ranks different things, or an exchange that mixed up
// its deliveries, fails New on every rank, naming the ranks whose view
// differs. A rank cannot see that from its own view (on a fabric, QP
// numbers repeat from host to host, so a wrong one looks like any other).
func connected(rank, size int, exchange Exchange, mine [sha256.Size]byte) error {
	all, err := exchange(append([]byte(connectedMark), mine[:]...))
	if err != nil {
		return &textError{"exchange: " + strings.TrimPrefix(err.Error(), "coll: "), err}
	}
	if len(all) != size {
		return fmt.Errorf("exchange: the second round returned %s for %s", nOf(len(all), "entry"), nOf(size, "rank"))
	}
	views := map[[sha256.Size]byte][]int{}
	var order [][sha256.Size]byte // first-seen order, for a deterministic message
	for r, b := range all {
		if len(b) != len(connectedMark)+sha256.Size || string(b[:len(connectedMark)]) != connectedMark {
			return fmt.Errorf("exchange: the second round (every rank connected) got %d bytes from rank %d that are not its mark: the exchange mixed rounds", len(b), r)
		}
		d := [sha256.Size]byte(b[len(connectedMark):])
		if views[d] == nil {
			order = append(order, d)
		}
		views[d] = append(views[d], r)
	}
	if got := [sha256.Size]byte(all[rank][len(connectedMark):]); got != mine {
		return fmt.Errorf("%w: the exchange's second round returned a digest for this rank that is not the one it sent", ErrConflict)
	}
	if len(views) == 1 {
		return nil
	}
	var groups []string
	for i, d := range order {
		groups = append(groups, ranklist.Format(views[d])+" received "+[]string{"one set", "another"}[min(i, 1)])
	}
	return fmt.Errorf("%w: the exchange gave ranks different endpoints: %s; a peer told ranks different things or the exchange mixed up its deliveries",
		ErrConflict, strings.Join(groups, ", "))
}

// Rank and Size are this communicator's rank and the number of ranks.
func (c *Comm) Rank() int { return c.rank }
func (c *Comm) Size() int { return c.size }

// Endpoints returns every rank's endpoint as the exchange delivered it.
func (c *Comm) Endpoints() []Endpoint { return append([]Endpoint(nil), c.eps...) }

// setUp queries the device and port and creates every queue; it returns
// this rank's endpoint.
func (c *Comm) setUp() (Endpoint, error) {
	ep := Endpoint{Rank: c.rank, Size: c.size, Port: c.opts.Port, Progressed: c.opts.Progress != nil}
	dev, err := cmem[verbs.ExpDeviceAttr]()
	if err != nil {
		return ep, err
	}
	defer free(unsafe.Pointer(dev))
	dev.CompMask = uint32(verbs.ExpDeviceAttrCalcCap | verbs.ExpDeviceAttrExpCapFlags)
	if err := verbs.ExpQueryDevice(c.ctx, dev); err != nil {
		return ep, fmt.Errorf("ibv_exp_query_device: %w", err)
	}
	if dev.CompMask&uint32(verbs.ExpDeviceAttrExpCapFlags) == 0 || dev.ExpDeviceCapFlags&uint64(verbs.ExpDeviceCrossChannel) == 0 {
		return ep, fmt.Errorf("the device does not report cross-channel (IBV_EXP_DEVICE_CROSS_CHANNEL in ibv_exp_query_device): %w", syscall.EOPNOTSUPP)
	}
	ep.NodeGUID = dev.NodeGUID
	c.caps.calcReported = dev.CompMask&uint32(verbs.ExpDeviceAttrCalcCap) != 0
	c.caps.calc = dev.CalcCap
	port, err := cmem[verbs.PortAttr]()
	if err != nil {
		return ep, err
	}
	defer free(unsafe.Pointer(port))
	if err := verbs.QueryPort(c.ctx, c.opts.Port, port); err != nil {
		return ep, fmt.Errorf("ibv_query_port %d: %w", c.opts.Port, err)
	}
	if port.State != verbs.PortActive {
		return ep, fmt.Errorf("port %d is %v, not active: %w", c.opts.Port, port.State, syscall.ENETDOWN)
	}
	ep.LinkLayer, ep.LID, ep.MTU = port.LinkLayer, port.LID, uint8(port.ActiveMTU)
	gid, err := cmem[verbs.GID]()
	if err != nil {
		return ep, err
	}
	defer free(unsafe.Pointer(gid))
	if err := verbs.QueryGID(c.ctx, c.opts.Port, 0, gid); err == nil {
		ep.GID = *gid.Raw()
	} else if ep.LinkLayer == verbs.LinkLayerEthernet {
		return ep, fmt.Errorf("ibv_query_gid: an Ethernet (RoCE) port is addressed by its GID: %w", err)
	}

	depth := c.opts.Depth
	k := bits.Len(uint(c.size)) // steps of recursive doubling, rounded up
	c.caps.depth, c.caps.mgrDepth = depth, 4*depth
	c.caps.sendSGE = min(max(k+2, 2), int(dev.MaxSGE))
	if int(dev.MaxQPWR) > 0 && c.caps.mgrDepth > int(dev.MaxQPWR) {
		return ep, fmt.Errorf("Options.Depth %d needs %d work requests on the management queue, the device's max_qp_wr is %d: %w",
			depth, c.caps.mgrDepth, dev.MaxQPWR, syscall.EINVAL)
	}
	pd, err := verbs.AllocPD(c.ctx)
	if err != nil {
		return ep, fmt.Errorf("ibv_alloc_pd: %w", err)
	}
	c.pd = pd
	if c.doneCQ, err = c.createCQ(c.caps.mgrDepth, false); err != nil {
		return ep, err
	}
	if c.selfCQ, err = c.createCQ(depth, true); err != nil {
		return ep, err
	}
	// One completion per peer QP a run sends on.
	if c.sendCQ, err = c.createCQ(max(depth, 2*bits.Len(uint(c.size))), true); err != nil {
		return ep, err
	}
	if c.mgr, err = c.createQP(c.doneCQ, c.selfCQ, c.caps.mgrDepth, verbs.ExpQPCreateCrossChannel); err != nil {
		return ep, err
	}
	ep.Manager = QPAddr{Rank: c.rank, QPNum: c.mgr.QPNum, PSN: rand.Uint32() & 0xffffff}
	for _, r := range neighbors(c.rank, c.size) {
		p := &peer{rank: r, psn: rand.Uint32() & 0xffffff}
		c.peers[r] = p
		if p.recvCQ, err = c.createCQ(depth, true); err != nil {
			return ep, err
		}
		if p.qp, err = c.createQP(c.sendCQ, p.recvCQ, depth, verbs.ExpQPCreateCrossChannel|verbs.ExpQPCreateManagedSend); err != nil {
			return ep, err
		}
		ep.Peers = append(ep.Peers, QPAddr{Rank: r, QPNum: p.qp.QPNum, PSN: p.psn})
	}
	if err := c.setUpWatch(&ep); err != nil {
		return ep, err
	}
	if err := c.setUpReady(&ep); err != nil {
		return ep, err
	}
	return ep, nil
}

// createCQ creates a CQ of at least n entries; crossChannel ones are
// those only waits look at before the drain.
func (c *Comm) createCQ(n int, crossChannel bool) (*verbs.CQ, error) {
	attr, err := cmem[verbs.ExpCQInitAttr]()
	if err != nil {
		return nil, err
	}
	defer free(unsafe.Pointer(attr))
	if crossChannel {
		attr.CompMask = uint32(verbs.ExpCQInitAttrFlags)
		attr.Flags = uint32(verbs.ExpCQCreateCrossChannel)
	}
	cq, err := verbs.ExpCreateCQ(c.ctx, int32(n), nil, nil, 0, attr)
	if err != nil {
		return nil, fmt.Errorf("ibv_exp_create_cq(%d): %w", n, err)
	}
	return cq, nil
}

func (c *Comm) createQP(send, recv *verbs.CQ, depth int, flags verbs.ExpQPCreateFlags) (*verbs.QP, error) {
	attr, err := cmem[verbs.ExpQPInitAttr]()
	if err != nil {
		return nil, err
	}
	defer free(unsafe.Pointer(attr))
	attr.SendCQ, attr.RecvCQ = send, recv
	attr.Cap = verbs.QPCap{MaxSendWR: uint32(depth), MaxRecvWR: uint32(c.caps.depth),
		MaxSendSGE: uint32(c.caps.sendSGE), MaxRecvSGE: 2}
	attr.QPType = verbs.QptRC
	attr.CompMask = uint32(verbs.ExpQPInitAttrPD | verbs.ExpQPInitAttrCreateFlags)
	attr.PD = c.pd
	attr.ExpCreateFlags = uint32(flags)
	qp, err := verbs.ExpCreateQP(c.ctx, attr)
	if err != nil {
		return nil, fmt.Errorf("ibv_exp_create_qp: %w", err)
	}
	return qp, nil
}

// accept decodes and checks every rank's endpoint: what the exchange
// returned for this rank is what it sent (mine), every rank says who it
// is and agrees on the size, lists a QP for exactly its neighbors (so
// each neighbor names a QP back to this rank), shares the fabric, and no
// queue pair is claimed twice (by one rank or two). A peer that named
// another's QP would have this rank's sends land on a third rank,
// whose collectives then complete without a contribution.
func (c *Comm) accept(local Endpoint, mine []byte, all [][]byte) error {
	if len(all) != c.size {
		return fmt.Errorf("exchange returned %s for %s", nOf(len(all), "endpoint"), nOf(c.size, "rank"))
	}
	c.eps = make([]Endpoint, c.size)
	c.qpOwner = map[uint32]qpOwner{}
	claimed := map[qpID]string{}
	claim := func(e *Endpoint, num uint32, name string) error {
		id := e.qpID(num)
		if other, dup := claimed[id]; dup {
			return fmt.Errorf("%w: %s and %s both name QP %#x at %s: one of them names a queue pair that is not its own", ErrConflict, other, name, num, e.portAddr())
		}
		claimed[id] = name
		return nil
	}
	for r, b := range all {
		e := &c.eps[r]
		if err := e.UnmarshalBinary(b); err != nil {
			return fmt.Errorf("endpoint %d: %w", r, err)
		}
		if e.Rank != r || e.Size != c.size {
			return fmt.Errorf("endpoint %d says rank %d of %d (this communicator: %s): the exchange mixed communicators", r, e.Rank, e.Size, nOf(c.size, "rank"))
		}
		if err := sameFabric(local, *e); err != nil {
			return err
		}
		want := neighbors(r, c.size)
		if len(e.Peers) != len(want) {
			return fmt.Errorf("endpoint of rank %d lists %s, want %d", r, nOf(len(e.Peers), "peer"), len(want))
		}
		// QP numbers name QPs of one device: only the ranks on this
		// rank's device can be named by the numbers its CQEs carry.
		sameDevice := e.NodeGUID == local.NodeGUID && e.GID == local.GID
		name := fmt.Sprintf("rank %d's manager", r)
		if err := claim(e, e.Manager.QPNum, name); err != nil {
			return err
		}
		if sameDevice {
			c.qpOwner[e.Manager.QPNum] = qpOwner{r, name}
		}
		for i, q := range e.Peers {
			if q.Rank != want[i] {
				return fmt.Errorf("endpoint of rank %d: peer %d is rank %d, want %d", r, i, q.Rank, want[i])
			}
			w, y := e.Watch[i], e.Ready[i]
			if w.Rank != q.Rank || y.Rank != q.Rank {
				return fmt.Errorf("endpoint of rank %d: watch or ready QP %d is for rank %d or %d, want %d", r, i, w.Rank, y.Rank, q.Rank)
			}
			if q.Rank == c.rank {
				c.peers[r].useReady = usesReady(local, *e)
			}
			for _, x := range []struct {
				num  uint32
				name string
			}{{q.QPNum, fmt.Sprintf("rank %d's QP to rank %d", r, q.Rank)}, {w.QPNum, fmt.Sprintf("rank %d's watch QP to rank %d", r, q.Rank)},
				{y.QPNum, fmt.Sprintf("rank %d's ready QP to rank %d", r, q.Rank)}} {
				if err := claim(e, x.num, x.name); err != nil {
					return err
				}
				if sameDevice {
					c.qpOwner[x.num] = qpOwner{r, x.name}
				}
			}
		}
	}
	if !bytes.Equal(all[c.rank], mine) {
		return fmt.Errorf("%w: the exchange returned an endpoint for this rank that is not the one it sent", ErrConflict)
	}
	return nil
}

// qpID is a queue pair's identity on a fabric: the port address a peer
// connects to (the LID on InfiniBand, the GID on Ethernet) and its
// number, which repeats from host to host.
type qpID struct {
	lid uint16
	gid [16]byte
	num uint32
}

func (e *Endpoint) qpID(num uint32) qpID {
	if e.LinkLayer == verbs.LinkLayerEthernet {
		return qpID{gid: e.GID, num: num}
	}
	return qpID{lid: e.LID, num: num}
}

// portAddr names the address connect uses for e's port.
func (e *Endpoint) portAddr() string {
	if e.LinkLayer == verbs.LinkLayerEthernet {
		return "GID " + net.IP(e.GID[:]).String()
	}
	return fmt.Sprintf("LID %d", e.LID)
}

// ErrConflict is wrapped when the endpoints ranks received contradict
// each other: two claim one queue pair, or ranks received different ones.
var ErrConflict = errors.New("coll: the endpoints conflict")

// ErrOtherDevice is wrapped when ranks cannot reach each other.
var ErrOtherDevice = fmt.Errorf("coll: ranks on devices that share no fabric: %w", syscall.EINVAL)

// sameFabric says whether this rank can reach e's port: one link layer,
// and on InfiniBand a LID that is not another device's (a LID names one
// port of a subnet, so two devices with the same LID are on different
// subnets: softdev's devices, which are not linked, all have LID 1).
func sameFabric(local, e Endpoint) error {
	switch {
	case e.LinkLayer != local.LinkLayer:
		return fmt.Errorf("%w: rank %d's port has link layer %d, rank %d's %d", ErrOtherDevice, e.Rank, e.LinkLayer, local.Rank, local.LinkLayer)
	case e.LinkLayer == verbs.LinkLayerEthernet:
		return nil
	case e.LID == 0:
		return fmt.Errorf("%w: rank %d's port has no LID (is a subnet manager running?)", ErrOtherDevice, e.Rank)
	case e.LID == local.LID && e.NodeGUID != local.NodeGUID:
		return fmt.Errorf("%w: ranks %d and %d are on devices %#x and %#x with the same LID %d (with softdev: make every rank's communicator on one Device)",
			ErrOtherDevice, local.Rank, e.Rank, local.NodeGUID, e.NodeGUID, e.LID)
	}
	return nil
}

// connectAll connects the manager to itself and every peer QP to the
// neighbor's QP for this rank.
func (c *Comm) connectAll(local Endpoint) error {
	if err := c.connect(c.mgr, local, local.Manager, local.Manager.PSN); err != nil {
		return fmt.Errorf("connect the manager to itself: %w", err)
	}
	for _, p := range c.peers {
		if p == nil {
			continue
		}
		remote := c.eps[p.rank]
		i := slices.IndexFunc(remote.Peers, func(q QPAddr) bool { return q.Rank == c.rank })
		for _, x := range []struct {
			qp   *verbs.QP
			addr QPAddr
			psn  uint32
			what string
		}{{p.qp, remote.Peers[i], p.psn, "QP"}, {p.watch, remote.Watch[i], p.watchPSN, "watch QP"}, {p.ready, remote.Ready[i], p.readyPSN, "ready QP"}} {
			if err := c.connect(x.qp, remote, x.addr, x.psn); err != nil {
				return fmt.Errorf("connect the %s to rank %d: %w", x.what, p.rank, err)
			}
		}
		if p.useReady {
			if err := c.postReadyRecvs(p); err != nil {
				return err
			}
		}
	}
	return nil
}

// connect moves qp through INIT, RTR and RTS to remote's QP addr, with
// the attributes of an RC connection to another host's HCA.
func (c *Comm) connect(qp *verbs.QP, remote Endpoint, addr QPAddr, psn uint32) error {
	return connectRC(qp, c.opts.Port, c.eps[c.rank], remote, addr, psn)
}

// connectRC is Comm.connect for qp on port of the device local
// describes: device.Connect with this rank's end and the peer's.
func connectRC(qp *verbs.QP, port uint8, local, remote Endpoint, addr QPAddr, psn uint32) error {
	me := device.Endpoint{Port: port, LinkLayer: local.LinkLayer, LID: local.LID, GID: local.GID,
		QPNum: qp.QPNum, PSN: psn, MTU: verbs.MTU(local.MTU)}
	peer := device.Endpoint{Port: remote.Port, LinkLayer: remote.LinkLayer, LID: remote.LID, GID: remote.GID,
		QPNum: addr.QPNum, PSN: addr.PSN, MTU: verbs.MTU(remote.MTU)}
	return device.Connect(qp, me, peer)
}

type qpOwner struct {
	rank int
	name string
}

// Describe names a QP of this communicator by its number on this rank's
// device (of this rank, or of another rank on the same device), for
// error reports ("rank 3's manager", "rank 3's QP to rank 5"), with the
// rank it belongs to.
func (c *Comm) Describe(qpNum uint32) (name string, rank int, ok bool) {
	o, ok := c.qpOwner[qpNum]
	return o.name, o.rank, ok
}

// DescribeCQ names one of this rank's CQs.
func (c *Comm) DescribeCQ(cq *verbs.CQ) (string, bool) {
	switch cq {
	case nil:
		return "", false
	case c.doneCQ:
		return fmt.Sprintf("rank %d's completion CQ", c.rank), true
	case c.selfCQ:
		return fmt.Sprintf("rank %d's loopback receive CQ", c.rank), true
	case c.sendCQ:
		return fmt.Sprintf("rank %d's send CQ", c.rank), true
	case c.watchCQ:
		return fmt.Sprintf("rank %d's watch CQ", c.rank), true
	case c.readySendCQ:
		return fmt.Sprintf("rank %d's ready send CQ", c.rank), true
	}
	for _, p := range c.peers {
		switch {
		case p == nil:
		case p.recvCQ == cq:
			return fmt.Sprintf("rank %d's receive CQ from rank %d", c.rank, p.rank), true
		case p.readyCQ == cq:
			return fmt.Sprintf("rank %d's ready CQ from rank %d", c.rank, p.rank), true
		}
	}
	return "", false
}

// peerOfQP is the neighbor one of this rank's QPs connects to, or -1.
func (c *Comm) peerOfQP(num uint32) int {
	for _, p := range c.peers {
		if p == nil {
			continue
		}
		for _, qp := range []*verbs.QP{p.qp, p.watch, p.ready} {
			if qp != nil && qp.QPNum == num {
				return p.rank
			}
		}
	}
	return -1
}

// qpFor is the QP this rank uses to reach rank r (the manager for itself).
func (c *Comm) qpFor(r int) *verbs.QP {
	if r == c.rank {
		return c.mgr
	}
	return c.peers[r].qp
}

// recvCQFor is the CQ of the receives from rank r.
func (c *Comm) recvCQFor(r int) *verbs.CQ {
	if r == c.rank {
		return c.selfCQ
	}
	return c.peers[r].recvCQ
}

// Memory is caller memory registered for collectives in a
// communicator's PD. A copy of a Memory is the same memory (its state
// sits behind one pointer): closed through either, it is closed.
type Memory struct {
	*memory // nil for the zero Memory, which is refused as a closed one
}

type memory struct {
	c     *Comm
	buf   *lease.Buffer
	mr    *verbs.MR
	id    uint64 // its lease in c.registered
	users int    // schedules using it (under c.mu)
}

// Register registers b for the schedules of c (local write: receives
// land in it). The Memory leases b until it is closed, so b.Free fails
// until then.
func (c *Comm) Register(b *lease.Buffer) (*Memory, error) {
	if b == nil || b.Len() == 0 {
		return nil, fmt.Errorf("coll: Register: nil or freed buffer: %w", syscall.EINVAL)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	mr, err := verbs.RegMR(c.pd, b.Pointer(), uint64(b.Len()), int32(verbs.AccessLocalWrite))
	if err != nil {
		return nil, fmt.Errorf("coll: Register %d bytes: ibv_reg_mr: %w", b.Len(), err)
	}
	c.nextMemory++
	m := &memory{c: c, buf: b, mr: mr, id: c.nextMemory}
	if _, err := c.registered.Lease(m.id, b, 0, min(b.Len(), lease.MaxLength), mr.Lkey); err != nil {
		return nil, errors.Join(fmt.Errorf("coll: Register: %w", err), verbs.DeregMR(mr))
	}
	c.memories[m] = struct{}{}
	return &Memory{m}, nil
}

// state is m's, nil for a nil or zero Memory.
func (m *Memory) state() *memory {
	if m == nil {
		return nil
	}
	return m.memory
}

// Bytes is the registered memory (nil for a nil Memory).
func (m *Memory) Bytes() []byte {
	if m.state() == nil {
		return nil
	}
	return m.buf.Bytes()
}

// Close deregisters the memory: EBUSY while a schedule uses it.
func (m *Memory) Close() error {
	if m.state() == nil {
		return fmt.Errorf("coll: Close of a nil Memory: %w", syscall.EINVAL)
	}
	c := m.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return m.closeLocked()
}

func (m *memory) closeLocked() error {
	c := m.c
	if _, ok := c.memories[m]; !ok {
		return fmt.Errorf("coll: Memory closed twice (or its communicator was): %w", syscall.EINVAL)
	}
	if m.users > 0 {
		return fmt.Errorf("coll: Memory is used by %s: close them first: %w", nOf(m.users, "schedule"), syscall.EBUSY)
	}
	delete(c.memories, m)
	if err := verbs.DeregMR(m.mr); err != nil {
		return fmt.Errorf("coll: ibv_dereg_mr: %w", err)
	}
	return c.registered.Release(m.id) // after the MR: the device no longer reaches b
}

// LeakError counts what the caller had not closed when its
// communicator was closed (Close closed it).
type LeakError struct {
	Rank                int
	Schedules, Memories int
}

func (e *LeakError) Error() string {
	return fmt.Sprintf("coll: rank %d closed with %s and %s still open (closed now)", e.Rank, nOf(e.Schedules, "schedule"), nOf(e.Memories, "memory"))
}

// Close closes the schedules and memories still open, destroys the
// queues and the PD and reports what was left open as a *LeakError. A
// run in flight is abandoned (its queues are destroyed under it).
func (c *Comm) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	c.closed = true
	var errs []error
	leak := &LeakError{Rank: c.rank, Schedules: len(c.schedules), Memories: len(c.memories)}
	for s := range c.schedules {
		errs = append(errs, s.closeLocked())
	}
	for m := range c.memories {
		errs = append(errs, m.closeLocked())
	}
	errs = append(errs, c.release())
	if leak.Schedules+leak.Memories > 0 {
		errs = append(errs, leak)
	}
	return errors.Join(errs...)
}

// release destroys what setUp created (whatever part of it exists).
func (c *Comm) release() error {
	var errs []error
	keep := func(what string, err error) {
		if err != nil {
			errs = append(errs, rankError(c.rank, what+": ", err))
		}
	}
	if c.mgr != nil {
		keep("destroy the manager", verbs.DestroyQP(c.mgr))
	}
	for _, p := range c.peers {
		if p != nil && p.qp != nil {
			keep("destroy a QP", verbs.DestroyQP(p.qp))
		}
		if p != nil && p.watch != nil {
			keep("destroy a watch QP", verbs.DestroyQP(p.watch))
		}
		if p != nil && p.ready != nil {
			keep("destroy a ready QP", verbs.DestroyQP(p.ready))
		}
	}
	for _, p := range c.peers {
		if p != nil && p.recvCQ != nil {
			keep("destroy a CQ", verbs.DestroyCQ(p.recvCQ))
		}
		if p != nil && p.readyCQ != nil {
			keep("destroy a CQ", verbs.DestroyCQ(p.readyCQ))
		}
	}
	c.watcher.free()
	for _, cq := range []*verbs.CQ{c.doneCQ, c.selfCQ, c.sendCQ, c.watchCQ, c.readySendCQ} {
		if cq != nil {
			keep("destroy a CQ", verbs.DestroyCQ(cq))
		}
	}
	if c.pd != nil {
		keep("dealloc the PD", verbs.DeallocPD(c.pd))
	}
	keep("close the registrations' leases", c.registered.Close())
	return errors.Join(errs...)
}
