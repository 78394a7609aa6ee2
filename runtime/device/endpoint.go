//go:build linux && cgo

package device

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"syscall"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/cmem"
)

// Endpoint is what a peer needs to connect a queue pair to this one: the
// port's address on the fabric (its LID on InfiniBand, its GID on
// Ethernet/RoCE), the QP's number and the PSN its sends start at, and the
// port's active MTU. Two processes trade them (MarshalBinary) by any
// means (a TCP connection, a job launcher's exchange) and each calls
// Connect with its own and the other's.
type Endpoint struct {
	Port      uint8     // the local port (from 1)
	LinkLayer uint8     // verbs.LinkLayerInfiniband or verbs.LinkLayerEthernet (0, unspecified, is InfiniBand)
	LID       uint16    // the port's LID (InfiniBand)
	GID       [16]byte  // GID GIDIndex of the port (zero where the port has no GID table)
	GIDIndex  uint8     // which GID of the port the QP sends from (the GRH's sgid_index)
	QPNum     uint32    // 24 bits
	PSN       uint32    // the first packet sequence number of the QP's sends: 24 bits, random
	MTU       verbs.MTU // the port's active MTU; a connection takes the smaller of the two
}

// Ethernet says whether the endpoint's port is Ethernet (RoCE), where
// peers are addressed by GID in a GRH, not by LID.
func (e Endpoint) Ethernet() bool { return e.LinkLayer == verbs.LinkLayerEthernet }

func (e Endpoint) String() string {
	return fmt.Sprintf("port %d LID %#04x GID %s QPN %#06x PSN %#06x MTU %d", e.Port, e.LID, netip.AddrFrom16(e.GID).Unmap(), e.QPNum, e.PSN, 128<<e.MTU)
}

const (
	endpointMagic   = "vxde"
	endpointVersion = 1
	// EndpointSize is the length of an Endpoint's encoding.
	EndpointSize = 4 + 1 + 1 + 1 + 2 + 16 + 1 + 4 + 4 + 1
)

// ErrBadEndpoint is wrapped by UnmarshalBinary's errors.
var ErrBadEndpoint = errors.New("device: not an endpoint of this version")

// MarshalBinary encodes e in EndpointSize bytes: a magic, a version and
// the fields, big-endian.
func (e Endpoint) MarshalBinary() ([]byte, error) {
	if err := e.check(); err != nil {
		return nil, err
	}
	b := make([]byte, 0, EndpointSize)
	b = append(b, endpointMagic...)
	b = append(b, endpointVersion, e.Port, e.LinkLayer)
	b = binary.BigEndian.AppendUint16(b, e.LID)
	b = append(b, e.GID[:]...)
	b = append(b, e.GIDIndex)
	b = binary.BigEndian.AppendUint32(b, e.QPNum)
	b = binary.BigEndian.AppendUint32(b, e.PSN)
	return append(b, byte(e.MTU)), nil
}

// UnmarshalBinary decodes what MarshalBinary encoded, checking every
// field (these bytes come from a peer): exactly EndpointSize bytes of
// this version, a port from 1, a known link layer, 24-bit QP number and
// PSN, an MTU of 256 to 4096.
func (e *Endpoint) UnmarshalBinary(b []byte) error {
	if len(b) != EndpointSize || string(b[:4]) != endpointMagic || b[4] != endpointVersion {
		return fmt.Errorf("%w (%d bytes, want %d starting %q version %d)", ErrBadEndpoint, len(b), EndpointSize, endpointMagic, endpointVersion)
	}
	be := binary.BigEndian
	x := Endpoint{Port: b[5], LinkLayer: b[6], LID: be.Uint16(b[7:])}
	copy(x.GID[:], b[9:25])
	x.GIDIndex = b[25]
	x.QPNum, x.PSN = be.Uint32(b[26:]), be.Uint32(b[30:])
	x.MTU = verbs.MTU(b[34])
	if err := x.check(); err != nil {
		return fmt.Errorf("%w: %w", ErrBadEndpoint, err)
	}
	*e = x
	return nil
}

// check says what of e is out of range.
func (e Endpoint) check() error {
	switch {
	case e.Port == 0:
		return fmt.Errorf("device: endpoint: port 0 (ports are numbered from 1): %w", syscall.EINVAL)
	case e.LinkLayer > verbs.LinkLayerEthernet:
		return fmt.Errorf("device: endpoint: link layer %d: %w", e.LinkLayer, syscall.EINVAL)
	case e.QPNum > 0xffffff || e.PSN > 0xffffff:
		return fmt.Errorf("device: endpoint: QP number %#x or PSN %#x is not a 24-bit number: %w", e.QPNum, e.PSN, syscall.EINVAL)
	case e.MTU < verbs.MTU256 || e.MTU > verbs.MTU4096:
		return fmt.Errorf("device: endpoint: MTU enum %d: want 1 (256) to 5 (4096): %w", e.MTU, syscall.EINVAL)
	}
	return nil
}

// RandomPSN is a first packet sequence number: 24 random bits, as the
// vendor's programs pick them, so that packets of an earlier connection
// between the same QP numbers are not taken for this one's.
func RandomPSN() uint32 { return rand.Uint32() & 0xffffff }

// Endpoint describes qp, one of this device's, for a peer: the device's
// port (Port, 1 by default), its LID, its GID 0 and active MTU, the QP's
// number and a random PSN (RandomPSN).
func (d *Device) Endpoint(qp *verbs.QP) (Endpoint, error) {
	var e Endpoint
	err := d.use(func() error {
		d.objMu.Lock()
		mine := has(d.qps, qp)
		d.objMu.Unlock()
		if !mine {
			return d.errNotMine("Endpoint", "QP", qp)
		}
		var err error
		e, err = endpointOf(d.ctx, d.port, qp)
		return err
	})
	return e, err
}

// endpointOf queries port and its GID 0 on ctx.
func endpointOf(ctx *verbs.Context, port uint8, qp *verbs.QP) (Endpoint, error) {
	pa, err := queryPort(ctx, port)
	if err != nil {
		return Endpoint{}, err
	}
	e := Endpoint{Port: port, LinkLayer: pa.LinkLayer, LID: pa.LID, QPNum: qp.QPNum, PSN: RandomPSN(), MTU: pa.ActiveMTU}
	gid, err := cmem.New[verbs.GID]()
	if err != nil {
		return e, err
	}
	defer cmem.Free(gid)
	if err := verbs.QueryGID(ctx, port, 0, gid); err == nil {
		e.GID = *gid.Raw()
	} else if e.Ethernet() {
		return e, fmt.Errorf("device: port %d is Ethernet (RoCE), addressed by its GID, and ibv_query_gid fails: %w", port, err)
	}
	if e.Ethernet() && e.GID == ([16]byte{}) {
		return e, fmt.Errorf("device: port %d is Ethernet (RoCE), addressed by its GID, and has none: %w", port, syscall.ENETDOWN)
	}
	if !e.Ethernet() && e.LID == 0 {
		return e, fmt.Errorf("device: InfiniBand port %d has no LID (is a subnet manager running?): %w", port, syscall.ENETDOWN)
	}
	return e, nil
}

type connectConfig struct {
	sl  uint8
	grh bool
}

// ConnectOption configures Connect.
type ConnectOption func(*connectConfig)

// ServiceLevel sets the path's service level (0 to 15; default 0).
func ServiceLevel(sl uint8) ConnectOption { return func(c *connectConfig) { c.sl = sl } }

// GRH addresses the peer with a global route header (its GID) on
// InfiniBand too, where a LID would do within a subnet; on Ethernet a
// GRH is always there.
func GRH() ConnectOption { return func(c *connectConfig) { c.grh = true } }

// Connect moves qp, in RESET, through INIT, RTR and RTS to the QP remote
// describes, with the attributes of an RC connection between two hosts'
// HCAs: local write, remote write, read and atomics allowed; the path to
// remote's LID on InfiniBand, or a GRH with its GID (sgid_index
// local.GIDIndex, hop limit 64) on Ethernet; remote's QP number; the
// path MTU the smaller of the two MTUs; sends from local.PSN and receives
// from remote.PSN; the local ACK timeout 14 (67 ms), 7 retries, 7 RNR
// retries (for ever: a peer that has not posted its receive yet is late,
// not gone), min_rnr_timer 12 (0.64 ms), one READ or atomic outstanding
// each way. A UC QP connects the same way without what UC does not take
// (READs, atomics, the timers and retries); UD QPs are not connected
// (EINVAL). local is qp's own endpoint (Device.Endpoint); the peer must
// connect its QP with the two the other way round.
func Connect(qp *verbs.QP, local, remote Endpoint, opts ...ConnectOption) error {
	var cfg connectConfig
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	switch {
	case qp == nil:
		return fmt.Errorf("device: Connect: nil QP: %w", syscall.EINVAL)
	case qp.QPType != verbs.QptRC && qp.QPType != verbs.QptUC:
		return fmt.Errorf("device: Connect: QP %#x is %v: only RC and UC QPs connect: %w", qp.QPNum, qp.QPType, syscall.EINVAL)
	case local.QPNum != qp.QPNum:
		return fmt.Errorf("device: Connect: the local endpoint is QP %#x's, not QP %#x's: %w", local.QPNum, qp.QPNum, syscall.EINVAL)
	case cfg.sl > 15:
		return fmt.Errorf("device: Connect: service level %d: want 0 to 15: %w", cfg.sl, syscall.EINVAL)
	}
	if err := local.check(); err != nil {
		return fmt.Errorf("%w (the local endpoint)", err)
	}
	remote.Port = 1 // the peer's port is the peer's business
	if err := remote.check(); err != nil {
		return fmt.Errorf("%w (the remote endpoint)", err)
	}
	rc := qp.QPType == verbs.QptRC
	attr, err := cmem.New[verbs.ExpQPAttr]()
	if err != nil {
		return err
	}
	defer cmem.Free(attr)
	step := func(to string, mask verbs.ExpQPAttrMask) error {
		if err := verbs.ExpModifyQP(qp, attr, uint64(mask)); err != nil {
			return fmt.Errorf("device: Connect: QP %#x to %s: %w", qp.QPNum, to, err)
		}
		return nil
	}
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite
	if rc {
		access |= verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	}
	*attr = verbs.ExpQPAttr{QPState: verbs.QpsInit, PortNum: local.Port, QPAccessFlags: int32(access)}
	if err := step("INIT", verbs.ExpQPState|verbs.ExpQPPkeyIndex|verbs.ExpQPPort|verbs.ExpQPAccessFlags); err != nil {
		return err
	}
	*attr = verbs.ExpQPAttr{QPState: verbs.QpsRtr, PathMTU: min(local.MTU, remote.MTU), DestQPNum: remote.QPNum, RQPSN: remote.PSN}
	attr.AHAttr.Dlid, attr.AHAttr.SL, attr.AHAttr.PortNum = remote.LID, cfg.sl, local.Port
	if remote.Ethernet() || cfg.grh {
		attr.AHAttr.IsGlobal = 1
		*attr.AHAttr.GRH.Dgid.Raw() = remote.GID
		attr.AHAttr.GRH.SgidIndex = local.GIDIndex
		attr.AHAttr.GRH.HopLimit = 64
	}
	mask := verbs.ExpQPState | verbs.ExpQPAv | verbs.ExpQPPathMTU | verbs.ExpQPDestQPN | verbs.ExpQPRQPSN
	if rc {
		attr.MaxDestRdAtomic, attr.MinRnrTimer = 1, 12
		mask |= verbs.ExpQPMaxDestRdAtomic | verbs.ExpQPMinRnrTimer
	}
	if err := step("RTR", mask); err != nil {
		return err
	}
	*attr = verbs.ExpQPAttr{QPState: verbs.QpsRts, SQPSN: local.PSN}
	mask = verbs.ExpQPState | verbs.ExpQPSQPSN
	if rc {
		attr.Timeout, attr.RetryCnt, attr.RnrRetry, attr.MaxRdAtomic = 14, 7, 7, 1
		mask |= verbs.ExpQPTimeout | verbs.ExpQPRetryCnt | verbs.ExpQPRnrRetry | verbs.ExpQPMaxQPRdAtomic
	}
	return step("RTS", mask)
}

// ConnectPair connects two QPs of this process to each other, each
// through port 1 of its device (a may be b: a QP connected to itself,
// as a manager QP that posts waits and enables is). It is Connect both
// ways with each QP's endpoint and random PSNs. The QPs may be of one
// device or of two (two devices of the in-process software device talk
// over its wire, as two hosts would). Both must be RC or both UC; a nil
// QP is refused with EINVAL before either changes state.
func ConnectPair(a, b *verbs.QP) error {
	switch {
	case a == nil || b == nil:
		return fmt.Errorf("device: ConnectPair: nil QP (a %p, b %p): %w", a, b, syscall.EINVAL)
	case a.QPType != b.QPType || (a.QPType != verbs.QptRC && a.QPType != verbs.QptUC):
		return fmt.Errorf("device: ConnectPair: QPs of types %v and %v: both must be RC or both UC: %w", a.QPType, b.QPType, syscall.EINVAL)
	}
	ea, err := endpointOf(a.Context, 1, a)
	if err != nil {
		return err
	}
	if a == b {
		return Connect(a, ea, ea)
	}
	eb, err := endpointOf(b.Context, 1, b)
	if err != nil {
		return err
	}
	if err := Connect(a, ea, eb); err != nil {
		return err
	}
	return Connect(b, eb, ea)
}
