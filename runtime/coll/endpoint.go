package coll

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"syscall"
)

// Endpoint is what one rank tells the others to connect to it: where
// its port is and, for each neighbor, the number and first PSN of the
// RC queue pairs it created for that neighbor (the one collectives run
// on, the one that watches the neighbor is alive, and the one that says
// a run's receives are posted). It travels as the
// bytes MarshalBinary gives, through the caller's Exchange.
type Endpoint struct {
	Rank, Size int
	NodeGUID   uint64 // the device's (ibv_query_device)
	Port       uint8
	LinkLayer  uint8 // IBV_LINK_LAYER_*
	LID        uint16
	GID        [16]byte // GID index 0; zero when the port has no GID table
	MTU        uint8    // the port's active MTU (enum ibv_mtu)
	// Progressed says the rank's device is run by Options.Progress (a
	// software device in one process, whose loopback never answers a
	// send with an RNR NAK): two such ranks on one device skip the ready
	// messages (comm.go's usesReady).
	Progressed bool
	Manager    QPAddr   // the management QP (connected to itself)
	Peers      []QPAddr // one per neighbor, ascending by rank
	Watch      []QPAddr // the watch QP for each neighbor, in the order of Peers
	Ready      []QPAddr // the ready QP for each neighbor, in the order of Peers
}

// QPAddr is one queue pair of an Endpoint.
type QPAddr struct {
	Rank  int // the rank it connects to
	QPNum uint32
	PSN   uint32
}

const (
	endpointMagic   = "vxep"
	endpointVersion = 3
	endpointFixed   = 4 + 1 + 4 + 4 + 8 + 1 + 1 + 2 + 16 + 1 + 1 + 12 + 2 // through the peer count
	qpAddrSize      = 12
)

// MarshalBinary encodes e in a fixed big-endian layout with a version.
func (e *Endpoint) MarshalBinary() ([]byte, error) {
	if len(e.Peers) > 0xffff {
		return nil, fmt.Errorf("coll: endpoint of rank %d: %s do not fit the encoding", e.Rank, nOf(len(e.Peers), "peer"))
	}
	if len(e.Watch) != len(e.Peers) || len(e.Ready) != len(e.Peers) {
		return nil, fmt.Errorf("coll: endpoint of rank %d: %d watch and %d ready QPs for %d peers", e.Rank, len(e.Watch), len(e.Ready), len(e.Peers))
	}
	b := make([]byte, 0, endpointFixed+3*qpAddrSize*len(e.Peers))
	b = append(b, endpointMagic...)
	b = append(b, endpointVersion)
	b = binary.BigEndian.AppendUint32(b, uint32(e.Rank))
	b = binary.BigEndian.AppendUint32(b, uint32(e.Size))
	b = binary.BigEndian.AppendUint64(b, e.NodeGUID)
	b = append(b, e.Port, e.LinkLayer)
	b = binary.BigEndian.AppendUint16(b, e.LID)
	b = append(b, e.GID[:]...)
	b = append(b, e.MTU, boolByte(e.Progressed))
	b = e.Manager.append(b)
	b = binary.BigEndian.AppendUint16(b, uint16(len(e.Peers)))
	for _, q := range e.Peers {
		b = q.append(b)
	}
	for _, q := range e.Watch {
		b = q.append(b)
	}
	for _, q := range e.Ready {
		b = q.append(b)
	}
	return b, nil
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

func (q QPAddr) append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(q.Rank))
	b = binary.BigEndian.AppendUint32(b, q.QPNum)
	return binary.BigEndian.AppendUint32(b, q.PSN)
}

// ErrBadEndpoint is wrapped by UnmarshalBinary's errors.
var ErrBadEndpoint = errors.New("coll: not an endpoint of this version")

// UnmarshalBinary decodes what MarshalBinary encoded.
func (e *Endpoint) UnmarshalBinary(b []byte) error {
	if len(b) < endpointFixed || string(b[:4]) != endpointMagic || b[4] != endpointVersion {
		return fmt.Errorf("%w (%d bytes)", ErrBadEndpoint, len(b))
	}
	be := binary.BigEndian
	r := b[5:]
	e.Rank, e.Size = int(be.Uint32(r)), int(be.Uint32(r[4:]))
	e.NodeGUID = be.Uint64(r[8:])
	e.Port, e.LinkLayer = r[16], r[17]
	e.LID = be.Uint16(r[18:])
	copy(e.GID[:], r[20:36])
	e.MTU = r[36]
	if r[37] > 1 {
		return fmt.Errorf("%w: flag byte %d", ErrBadEndpoint, r[37])
	}
	e.Progressed = r[37] == 1
	e.Manager = readQPAddr(r[38:])
	n := int(be.Uint16(r[50:]))
	r = r[52:]
	if len(r) != 3*n*qpAddrSize {
		return fmt.Errorf("%w: %d peers need %d bytes after the header, have %d", ErrBadEndpoint, n, 3*n*qpAddrSize, len(r))
	}
	e.Peers, e.Watch, e.Ready = make([]QPAddr, n), make([]QPAddr, n), make([]QPAddr, n)
	for i := range e.Peers {
		e.Peers[i] = readQPAddr(r[i*qpAddrSize:])
		e.Watch[i] = readQPAddr(r[(n+i)*qpAddrSize:])
		e.Ready[i] = readQPAddr(r[(2*n+i)*qpAddrSize:])
	}
	return nil
}

func readQPAddr(b []byte) QPAddr {
	be := binary.BigEndian
	return QPAddr{Rank: int(be.Uint32(b)), QPNum: be.Uint32(b[4:]), PSN: be.Uint32(b[8:])}
}

// Exchange is the caller's all-gather of endpoints: given this rank's
// encoded endpoint, it returns every rank's, indexed by rank (this one's
// included). MPI_Allgather, PMIx or a key-value store can each provide
// it; InProcess provides it for ranks in one process. New calls it in
// two rounds (the endpoints, then a barrier once connected), so it must
// keep rounds apart, as MPI_Allgather does (a key-value store keys by
// round).
type Exchange func(local []byte) (all [][]byte, err error)

// InProcess is an Exchange for ranks that are goroutines of one
// process (with softdev, every rank): each call blocks until all size
// ranks have called, then all get every rank's bytes. It can be used for
// any number of rounds, one after the other.
type InProcess struct {
	size int
	mu   sync.Mutex
	cond *sync.Cond
	gen  int      // rounds completed
	cur  [][]byte // this round's contributions
	n    int      // how many so far
	last [][]byte // the previous round's result
	err  error    // set by Fail
	bad  error    // size out of range: every call fails with it
}

// NewInProcess returns an exchange among size ranks (1 to MaxRanks:
// otherwise every call of its Exchanges fails, saying so).
func NewInProcess(size int) *InProcess {
	x := &InProcess{size: size}
	x.cond = sync.NewCond(&x.mu)
	if size < 1 || size > MaxRanks {
		x.bad = fmt.Errorf("coll: in-process exchange of %d ranks: need 1 to %d: %w", size, MaxRanks, syscall.EINVAL)
		return x
	}
	x.cur = make([][]byte, size)
	return x
}

// For returns rank's Exchange.
func (x *InProcess) For(rank int) Exchange {
	return func(local []byte) ([][]byte, error) {
		if x.bad != nil {
			return nil, x.bad
		}
		if rank < 0 || rank >= x.size {
			return nil, fmt.Errorf("coll: in-process exchange of %s has no rank %d", nOf(x.size, "rank"), rank)
		}
		x.mu.Lock()
		defer x.mu.Unlock()
		if x.err != nil {
			return nil, x.err
		}
		if x.cur[rank] != nil {
			return nil, fmt.Errorf("coll: in-process exchange: rank %d contributed twice to one round", rank)
		}
		x.cur[rank] = append([]byte{}, local...)
		x.n++
		gen := x.gen
		if x.n == x.size {
			x.last, x.cur, x.n = x.cur, make([][]byte, x.size), 0
			x.gen++
			x.cond.Broadcast()
		}
		for x.gen == gen && x.err == nil {
			x.cond.Wait()
		}
		if x.gen == gen {
			return nil, x.err
		}
		return append([][]byte(nil), x.last...), nil
	}
}

// Fail ends the exchange for every rank: a rank that cannot take part
// (its New failed before it reached the exchange) calls it, so that the
// others get err instead of waiting for it forever, as a job launcher
// would abort the other processes.
func (x *InProcess) Fail(rank int, err error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.err == nil {
		x.err = fmt.Errorf("coll: in-process exchange: rank %d failed: %w", rank, err)
		x.cond.Broadcast()
	}
}
