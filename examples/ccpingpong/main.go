//go:build linux && cgo

// Command ccpingpong is a ping-pong between two processes over RC queue
// pairs, a port of the semantics of the vendor's cc_pingpong (libibverbs
// 1.2.1mlnx1): a server and a client trade their QPs' endpoints over TCP,
// connect them with real attributes (runtime/device: device.Connect)
// and bounce -n messages. With -c each
// message is a SEND WITH_CALC: the device reduces the sender's operands
// (the result it last received, then the rest of its -o list) and delivers
// only the result, which lands on the receiver's first operand for its
// next SEND. Every result is checked against Go's own computation of it,
// and a wrong one, or a failed completion, ends the program with an error.
// With -w each round also goes through the manager QP: a CQE_WAIT on the
// ping-pong's CQ, whose completion on the manager's CQ says a completion
// is there to poll.
//
// By default it runs on a software device of its own (-d softdev,
// runtime/softdev), one per process, at the address -addr or
// $VERBSEXP_SOFTDEV_ADDR gives (by default a loopback address of its
// own). The server listens for the handshake at its device's address:
//
//	go run ./examples/ccpingpong -addr 127.0.0.2 -c ADD -t INT64 -o 1,2 &
//	go run ./examples/ccpingpong -addr 127.0.0.3 -c ADD -t INT64 -o 1,2 127.0.0.2
//
// On two hosts, give each its own address (VERBSEXP_SOFTDEV_ADDR=10.0.0.1
// on the server's, 10.0.0.2 on the client's) and the client the server's.
// With -d NAME it opens a device libibverbs lists instead (an HCA, or
// softdev0 under softdev exec: runtime/softdev/launch), listening on every
// address, as the vendor's program does.
//
// It talks to the vendor's ibv_cc_pingpong in both directions, with the
// same options: wherever the vendor's handshake serves (an InfiniBand
// port, as under softdev exec, or -G), this program speaks it (LID:QPN:PSN
// only, each side assuming the other's options are its own), and a
// server answers in the form its client spoke (runtime/softdev/launch's
// TestCCPingpongInterop runs XOR and MAX over UINT64 and ADD over INT64,
// polling and with -e, either side the vendor's). FLOAT64 does not
// interoperate: the vendor's program stores a FLOAT64 result as an
// integer before it sends it on (pp_update_last_result), so its chain of
// results is not the one this program computes, and this program says
// which result differs.
//
// Where the vendor's program and this one differ otherwise: on a RoCE
// port without -G (LID 0, which the vendor's refuses) the handshake is
// this program's own, carrying the GID and each side's settings and
// operands, so a peer with another -n, -m, -c or -t is refused at once
// and results are checked exactly even when the two -o lists differ;
// -V is always on; MAX and MIN (and MAXLOC,
// MINLOC, which the vendor's refuses, with the side as the location: 0
// the server, 1 the client) run as the device's UINT MAXLOC on
// coll.OrderKey's keys; INT8, INT16, UINT8 and UINT16 work too; without
// -c the messages are plain SENDs of -s bytes, checked byte for byte (the
// vendor's has that path but makes -c mandatory). The closing lines count
// the bytes that travelled: -s per plain message, 8 per calc result (16
// for the four MAXLOC-based operations: value and id), where the vendor's
// counts -s for both. Between two empty polls the program gives the CPU
// away (sched_yield), so that two processes and their devices' threads
// share a small host.
//
// The other flags: -l sets the service level in the address vector, which
// the software device does not use; -e sleeps on the ping-pong CQ's
// completion channel (device.Device.WaitCQ: the CQ armed, polled once
// more, the goroutine parked in Go's poller until the event), where the
// vendor's program blocks a thread in ibv_get_cq_event; -i and -g go to ibv_query_port and
// ibv_query_gid, so only port 1 and GID index 0 pass; -G replaces the GID
// the handshake gave (one nobody has ends in IBV_WC_RETRY_EXC_ERR);
// -addr sets the device's address. The exit code is 0 when every result
// was right, 1 when the exchange failed, 2 for a bad command line.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/cmem"
	"github.com/verbsexp/verbsexp/runtime/device"
	"github.com/verbsexp/verbsexp/runtime/softdev"
)

func main() { os.Exit(ccpingpong(os.Args[1:], os.Stdout, os.Stderr)) }

// config is the command line.
type config struct {
	server   string // the server's host; "" for the server itself
	port     int
	ibDev    string
	ibPort   int
	size     int
	mtu      int
	rxDepth  int
	iters    int
	sl       int
	events   bool
	calcName string
	typeName string
	operands string
	mqePoll  bool
	verbose  bool
	verify   bool
	gidIndex int
	dgid     string
	addr     string

	calc    *calc     // nil without -c
	ops     []operand // this side's operands
	peerGID *[16]byte // -G
}

// option is one line of the usage text: the flag's short and long names.
type option struct{ short, long, arg, help string }

// flags registers each option under both names, as the vendor's getopt
// table does (Go's flag package takes -x, --x, -x=v and --x=v).
type flags struct {
	fs   *flag.FlagSet
	opts []option
}

func (f *flags) add(o option, reg func(name string)) {
	for _, n := range []string{o.short, o.long} {
		if n != "" {
			reg(n)
		}
	}
	f.opts = append(f.opts, o)
}

func (f *flags) intVar(p *int, short, long, arg string, def int, help string) {
	f.add(option{short, long, arg, fmt.Sprintf("%s (default %d)", help, def)}, func(n string) { f.fs.IntVar(p, n, def, "") })
}

func (f *flags) strVar(p *string, short, long, arg, help string) {
	f.add(option{short, long, arg, help}, func(n string) { f.fs.StringVar(p, n, "", "") })
}

func (f *flags) boolVar(p *bool, short, long, help string) {
	f.add(option{short, long, "", help}, func(n string) { f.fs.BoolVar(p, n, false, "") })
}

func (f *flags) usage(w io.Writer) {
	fmt.Fprintf(w, `ccpingpong: a ping-pong of SEND WITH_CALC messages between two processes over RC queue pairs of the
software device, with a cross-channel manager QP (its CQE_WAIT with -w); every result is checked against Go.

Usage:
  ccpingpong [options]         start a server and wait for a client
  ccpingpong [options] HOST    connect to the server at HOST

Options:
`)
	for _, o := range f.opts {
		n := "-" + o.short + ", --" + o.long
		if o.short == "" {
			n = "    --" + o.long
		}
		if o.arg != "" {
			n += "=" + o.arg
		}
		fmt.Fprintf(w, "  %-28s %s\n", n, o.help)
	}
}

// parseArgs reads the command line into a config; the error names the
// flag and says what to do.
func parseArgs(args []string, stderr io.Writer) (*config, *flags, error) {
	c := &config{}
	f := &flags{fs: flag.NewFlagSet("ccpingpong", flag.ContinueOnError)}
	f.fs.SetOutput(io.Discard)
	f.intVar(&c.port, "p", "port", "PORT", 18515, "TCP port of the handshake: the server listens on it at its device's address")
	f.strVar(&c.ibDev, "d", "ib-dev", "DEV", "verbs device: softdev (the default), a software device this program opens; any other name is a device libibverbs lists (an HCA, or softdev0 under softdev exec), opened through it")
	f.intVar(&c.ibPort, "i", "ib-port", "PORT", 1, "port of the device (the software device has port 1)")
	f.intVar(&c.size, "s", "size", "SIZE", 4096, "bytes of the buffer every receive takes and of a plain message; at least 16 and 16 per operand")
	f.intVar(&c.mtu, "m", "mtu", "MTU", 1024, "path MTU: 256, 512, 1024, 2048 or 4096, at most the port's active MTU")
	f.intVar(&c.rxDepth, "r", "rx-depth", "DEPTH", 500, "receives posted at a time (reposted when one is left)")
	f.intVar(&c.iters, "n", "iters", "ITERS", 1000, "message exchanges")
	f.intVar(&c.sl, "l", "sl", "SL", 0, "service level of the path, 0 to 15 (set, and unused by the software device)")
	f.boolVar(&c.events, "e", "events", "sleep on CQ events (a completion channel) instead of polling")
	f.strVar(&c.calcName, "c", "calc", "OP", "calc operation: "+names(calcOps, func(o calcOp) string { return o.name })+"; without it, plain SENDs")
	f.strVar(&c.typeName, "t", "op_type", "TYPE", "calc operand type: "+names(dataTypes, func(t dataType) string { return t.name }))
	f.strVar(&c.operands, "o", "operands", "O1,O2,...", "calc operands, comma separated, at most 16: each SEND reduces the last result and O2,...")
	f.boolVar(&c.mqePoll, "w", "poll_mqe", "wait for each completion with a CQE_WAIT on the manager QP, polling the manager's CQ")
	f.boolVar(&c.verbose, "v", "verbose", "print every result received")
	f.boolVar(&c.verify, "V", "verify", "verify the calc results (always done)")
	f.intVar(&c.gidIndex, "g", "gid-index", "INDEX", 0, "GID index of the port to send from")
	f.strVar(&c.dgid, "G", "dgid", "GID", "the peer's GID (IPv6 or IPv4 notation) instead of the one the handshake gives")
	f.add(option{"", "addr", "IP", "the software device's address, with -d softdev (default $" + softdev.AddrEnv + ", else a loopback address of its own)"},
		func(n string) { f.fs.StringVar(&c.addr, n, "", "") })
	if err := f.fs.Parse(args); err != nil {
		return nil, f, err
	}
	switch f.fs.NArg() {
	case 0:
	case 1:
		c.server = f.fs.Arg(0)
	default:
		return nil, f, fmt.Errorf("one server address at most, not %q", strings.Join(f.fs.Args(), " "))
	}
	return c, f, c.check()
}

// check validates the flags before anything is opened.
func (c *config) check() error {
	switch {
	case c.port < 1 || c.port > 65535:
		return fmt.Errorf("-p %d: want a TCP port, 1 to 65535", c.port)
	case c.size < 16 || c.size > 1<<30:
		return fmt.Errorf("-s %d: want 16 to %d bytes", c.size, 1<<30)
	case mtuEnum(c.mtu) < 0:
		return fmt.Errorf("-m %d: want 256, 512, 1024, 2048 or 4096", c.mtu)
	case c.rxDepth < 1:
		return fmt.Errorf("-r %d: want at least 1 receive", c.rxDepth)
	case c.iters < 1:
		return fmt.Errorf("-n %d: want at least 1 exchange", c.iters)
	case c.addr != "" && c.ibDev != "" && c.ibDev != "softdev":
		return fmt.Errorf("-addr is the software device's (-d softdev); -d %s is a device libibverbs lists, at its own address", c.ibDev)
	case c.sl < 0 || c.sl > 15:
		return fmt.Errorf("-l %d: a service level is 0 to 15", c.sl)
	case c.gidIndex < 0 || c.gidIndex > 255:
		return fmt.Errorf("-g %d: want a GID index, 0 to 255", c.gidIndex)
	}
	if c.dgid != "" {
		ip, err := netip.ParseAddr(c.dgid)
		if err != nil || ip.Zone() != "" {
			return fmt.Errorf("-G %q: want a GID in IPv6 notation (or an IPv4 address)", c.dgid)
		}
		g := ip.As16()
		c.peerGID = &g
	}
	if c.calcName == "" {
		if c.typeName != "" || c.operands != "" {
			return errors.New("-t and -o go with -c: name the operation (-c ADD, ...), or leave all three out for plain messages")
		}
		return nil
	}
	op, err := lookupOp(c.calcName)
	if err != nil {
		return err
	}
	if c.typeName == "" {
		return fmt.Errorf("-t: -c %s needs an operand type: -t %s", c.calcName, names(dataTypes, func(t dataType) string { return t.name }))
	}
	typ, err := lookupType(c.typeName)
	if err != nil {
		return err
	}
	c.calc = &calc{op: op, typ: typ}
	if c.ops, err = c.calc.parseOperands(c.operands, c.side()); err != nil {
		return err
	}
	if len(c.ops) > maxOperands {
		return fmt.Errorf("-o: %d operands, more than the %d SGEs a SEND gathers", len(c.ops), maxOperands)
	}
	if 16*len(c.ops) > c.size {
		return fmt.Errorf("-s %d: %d operands take %d bytes of the buffer; give -s %d or more", c.size, len(c.ops), 16*len(c.ops), 16*len(c.ops))
	}
	return nil
}

// side is this process's id: the location MAXLOC and MINLOC report.
func (c *config) side() uint64 {
	if c.server == "" {
		return 0
	}
	return 1
}

func mtuEnum(bytes int) int {
	for m := int(verbs.MTU256); m <= int(verbs.MTU4096); m++ {
		if 128<<m == bytes {
			return m
		}
	}
	return -1
}

// ccpingpong runs the command and returns its exit code: 0, 1 when the
// exchange failed, 2 for a bad command line.
func ccpingpong(args []string, stdout, stderr io.Writer) int {
	cfg, f, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		f.usage(stdout)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "ccpingpong: %v (-h lists the options)\n", err)
		return 2
	}
	if err := run(cfg, stdout); err != nil {
		fmt.Fprintln(stderr, "ccpingpong:", err)
		return 1
	}
	return 0
}

func run(cfg *config, out io.Writer) (err error) {
	s := &side{}
	var soft *softdev.Device
	if cfg.ibDev == "" || cfg.ibDev == "softdev" {
		var opts []softdev.DeviceOption
		if cfg.addr != "" {
			opts = append(opts, softdev.Address(cfg.addr))
		}
		// Like an HCA, the device runs its queues on its own.
		if soft, err = softdev.Open(append(opts, softdev.Autonomous())...); err != nil {
			return err
		}
		s.dev = soft.Device
	} else if s.dev, err = device.Open(cfg.ibDev, device.Port(uint8(max(cfg.ibPort, 1)))); err != nil {
		return fmt.Errorf("-d %s: %w", cfg.ibDev, err)
	}
	defer func() { err = errors.Join(err, s.close()) }()
	if err := checkPort(s.dev, cfg); err != nil {
		return err
	}
	if err := checkDevice(s.dev.Context(), cfg); err != nil {
		return err
	}
	if err := s.open(cfg); err != nil {
		return fmt.Errorf("setting up the QPs (-r %d, -s %d): %w", cfg.rxDepth, cfg.size, err)
	}
	ex := newExchange(cfg, s)
	local := endpoint{size: cfg.size, iters: cfg.iters, calc: "none", typ: "none", operands: cfg.ops}
	if local.Endpoint, err = s.dev.Endpoint(s.qp); err != nil {
		return err
	}
	local.MTU = verbs.MTU(mtuEnum(cfg.mtu)) // -m: the path MTU both sides ask for
	local.GIDIndex = uint8(cfg.gidIndex)
	if local.GID, err = s.dev.QueryGID(uint8(cfg.ibPort), cfg.gidIndex); err != nil && local.Ethernet() {
		return fmt.Errorf("-g %d: %w", cfg.gidIndex, err)
	}
	if cfg.calc != nil {
		local.calc, local.typ = cfg.calc.op.name, cfg.calc.typ.name
	}
	fmt.Fprintf(out, "  local address:  LID %#04x, QPN %#06x, PSN %#06x, GID %s : MQPN %#06x\n",
		local.LID, local.QPNum, local.PSN, netip.AddrFrom16(local.GID), s.mqp.QPNum)

	// The receives go in as soon as the QP is connected, before the
	// server answers the handshake, before the client sends.
	var routs int
	opts := []device.ConnectOption{device.ServiceLevel(uint8(cfg.sl))}
	if cfg.peerGID != nil {
		opts = append(opts, device.GRH()) // on InfiniBand too, as the vendor's -G does
	}
	connect := func(r endpoint) error {
		remote := r.Endpoint
		remote.Port, remote.LinkLayer = local.Port, local.LinkLayer // one fabric
		if cfg.peerGID != nil {
			remote.GID = *cfg.peerGID
		}
		if !local.Ethernet() && cfg.peerGID == nil && remote.LID == 0 {
			return errors.New("the peer's LID is 0 on an InfiniBand port")
		}
		if err := device.Connect(s.qp, local.Endpoint, remote, opts...); err != nil {
			return err
		}
		var err error
		if routs, err = s.postRecvs(cfg.rxDepth); err != nil {
			return fmt.Errorf("posted %d of -r %d receives: %w", routs, cfg.rxDepth, err)
		}
		return nil
	}
	var remote endpoint
	if cfg.server == "" {
		at := netip.IPv4Unspecified() // through libibverbs: every address, as the vendor's program
		if soft != nil {
			at = soft.Addr()
		}
		ln, err := listen(at, cfg.port)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "  waiting for a client at %s\n", ln.Addr())
		if remote, err = serve(ln, local, connect); err != nil {
			return err
		}
	} else {
		// The vendor's handshake wherever it serves (see handshake.go).
		vendor := !local.Ethernet() || cfg.peerGID != nil
		if remote, err = dial(cfg.server, cfg.port, local, vendor); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "  remote address: LID %#04x, QPN %#06x, PSN %#06x, GID %s\n",
		remote.LID, remote.QPNum, remote.PSN, netip.AddrFrom16(remote.GID))
	if cfg.server != "" {
		if err := connect(remote); err != nil {
			return err
		}
	}
	if cfg.mqePoll {
		// The manager talks to itself: its own address and QP.
		self := local.Endpoint
		self.QPNum = s.mqp.QPNum
		if err := device.Connect(s.mqp, self, self, opts...); err != nil {
			return fmt.Errorf("the manager QP to RTS: %w", err)
		}
	}
	ex.peer = remote.operands
	return ex.run(out, routs)
}

// checkPort queries the port (-i) and its GID (-g) as the vendor's
// program does.
func checkPort(dev *device.Device, cfg *config) error {
	pa, err := dev.QueryPort(uint8(cfg.ibPort))
	if err != nil {
		return fmt.Errorf("-i %d: %w (the software device has port 1)", cfg.ibPort, err)
	}
	if active := 128 << pa.ActiveMTU; cfg.mtu > active {
		return fmt.Errorf("-m %d: port %d's active MTU is %d (its interface's MTU less the RoCE headers); give -m %d or less", cfg.mtu, cfg.ibPort, active, active)
	}
	if _, err := dev.QueryGID(uint8(cfg.ibPort), cfg.gidIndex); err != nil {
		return fmt.Errorf("-g %d: %w (port %d has %d GIDs)", cfg.gidIndex, err, cfg.ibPort, pa.GIDTblLen)
	}
	if pa.LinkLayer != verbs.LinkLayerEthernet && cfg.peerGID == nil && pa.LID == 0 {
		return fmt.Errorf("port %d has no LID", cfg.ibPort)
	}
	return nil
}

// checkDevice asks the device (ibv_exp_query_device) whether the queues
// -r asks for fit, and whether it computes -c over -t's wire type
// (calc_cap). MAXLOC is not reported there (the providers do not), so
// the keyed operations are left to the post.
func checkDevice(ctx *verbs.Context, cfg *config) error {
	a, err := cmem.New[verbs.ExpDeviceAttr]()
	if err != nil {
		return err
	}
	defer cmem.Free(a)
	a.CompMask = uint32(verbs.ExpDeviceAttrCalcCap)
	if err := verbs.ExpQueryDevice(ctx, a); err != nil {
		return err
	}
	if cfg.rxDepth > int(a.MaxQPWR) {
		return fmt.Errorf("-r %d: more receives than a queue of the device holds (max_qp_wr %d)", cfg.rxDepth, a.MaxQPWR)
	}
	if cfg.rxDepth+1 > int(a.MaxCQE) {
		return fmt.Errorf("-r %d: its CQs need %d entries, more than the device's max_cqe of %d", cfg.rxDepth, cfg.rxDepth+1, a.MaxCQE)
	}
	if cfg.calc == nil || cfg.calc.op.keyed {
		return nil
	}
	ops := map[verbs.ExpCalcDataType]uint64{verbs.ExpCalcDataTypeInt: a.CalcCap.IntOps,
		verbs.ExpCalcDataTypeUint: a.CalcCap.UintOps, verbs.ExpCalcDataTypeFloat: a.CalcCap.FpOps}[cfg.calc.wireType()]
	if a.CompMask&uint32(verbs.ExpDeviceAttrCalcCap) == 0 || ops&(1<<cfg.calc.op.dev) == 0 {
		return fmt.Errorf("-c %s -t %s: the device does not compute it (calc_cap %+v)", cfg.calc.op.name, cfg.calc.typ.name, a.CalcCap)
	}
	return nil
}

// closing prints the closing lines as the vendor's program does.
func closing(out io.Writer, msgBytes, iters int, d time.Duration) {
	usec := float64(d.Nanoseconds()) / 1e3
	bytes := int64(msgBytes) * int64(iters) * 2
	fmt.Fprintf(out, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec/1e6, float64(bytes)*8/usec)
	fmt.Fprintf(out, "%d iters in %.2f seconds = %.2f usec/iter\n", iters, usec/1e6, usec/float64(iters))
}
