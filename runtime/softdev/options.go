//go:build linux && cgo

package softdev

// Limits are the device limits Open may change: the largest send or
// receive queue (max_qp_wr) and the largest CQ that may be asked for
// (max_cqe), as ibv_exp_query_device reports them.
type Limits struct {
	MaxQPWR int
	MaxCQE  int
}

// DefaultLimits are the limits of a device opened without options.
var DefaultLimits = Limits{MaxQPWR: 1 << 15, MaxCQE: 1 << 20}

// AddrEnv names the environment variable Open reads for the device's
// address when no Address option is given: a program written for an HCA
// gets an address per process, or per host, without a change.
const AddrEnv = "VERBSEXP_SOFTDEV_ADDR"

// WirePort is the TCP port every device listens on, at its own address
// (RoCE v2's UDP port number): a GID names a device.
const WirePort = 4791

type deviceConfig struct {
	limits    Limits
	addr      string // "": $VERBSEXP_SOFTDEV_ADDR, or a loopback address of its own
	addrSet   bool
	run       runMode
	timeScale float64
	ib        bool             // an InfiniBand port
	comp      completionConfig // completions.go
}

// runMode is who runs a device's send queues besides its polls.
type runMode int

const (
	runAuto   runMode = iota // the transport thread, once a QP connects over the wire
	runThread                // the transport thread, from the start
	runPolls                 // nobody
)

// DeviceOption configures Open.
type DeviceOption func(*deviceConfig)

// MaxQPWR sets the device's max_qp_wr: CreateQP refuses deeper queues
// with EINVAL, as an HCA does. At most 1<<24.
func MaxQPWR(n int) DeviceOption { return func(c *deviceConfig) { c.limits.MaxQPWR = n } }

// MaxCQE sets the device's max_cqe: CreateCQ refuses larger CQs with
// EINVAL. At most 1<<24.
func MaxCQE(n int) DeviceOption { return func(c *deviceConfig) { c.limits.MaxCQE = n } }

// Address sets the IP address the device is at: its listener (TCP, port
// WirePort) and its GID. It must be an address of this host that no
// other device uses (one device per address, as one RoCE port has one).
// Without it, Open uses $VERBSEXP_SOFTDEV_ADDR, and if that is unset a
// loopback address of the device's own (127.0.0.2, then .3, ..., the
// first where nothing listens at WirePort): then only devices on this
// host can reach it.
func Address(ip string) DeviceOption {
	return func(c *deviceConfig) { c.addr, c.addrSet = ip, true }
}

// Autonomous makes the device run like an HCA from the start: its
// transport thread runs the send queues as soon as work is posted, so a
// schedule advances while the host computes and nobody polls.
//
// Without an option, a device runs its send queues in Progress and in
// polls only (so schedules on one device are deterministic: the same
// calls give the same completions) until one of its QPs connects to
// another device; from then on the thread runs them too. The transport
// (packets in, acknowledgements, retransmissions) runs in the thread
// either way.
func Autonomous() DeviceOption { return func(c *deviceConfig) { c.run = runThread } }

// PollDriven keeps the send queues to Progress and polls even when QPs
// connect over the wire: what a test of the poll path wants. A peer then
// waits for this process to poll (an HCA would not make it wait).
func PollDriven() DeviceOption { return func(c *deviceConfig) { c.run = runPolls } }

// TimerScale multiplies the transport's timers (the local ACK timeout,
// 4.096 µs << timeout, and the RNR NAK timer) by f > 0: below 1 a test
// of retries runs faster than on an HCA. The default is 1.
func TimerScale(f float64) DeviceOption { return func(c *deviceConfig) { c.timeScale = f } }

// InfiniBandPort gives the device an InfiniBand port instead of an
// Ethernet (RoCE) one, as the libibverbs provider does by default: the
// port has a LID, the low 16 bits of the device's address, and an address
// vector (a QP's path, an address handle) may name a peer by its dlid
// alone, which resolves within the device's /16 (/112 for IPv6); a GRH
// is then optional. Datagrams sent without one arrive without one
// (IBV_WC_GRH clear), and receive completions carry the sender's LID.
func InfiniBandPort() DeviceOption { return func(c *deviceConfig) { c.ib = true } }
