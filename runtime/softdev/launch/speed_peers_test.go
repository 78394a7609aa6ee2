package launch_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/internal/sidebyside"
	"github.com/verbsexp/verbsexp/runtime/cmem"
	"github.com/verbsexp/verbsexp/runtime/device"
	"github.com/verbsexp/verbsexp/runtime/softdev"
)

// The peers of the speed benchmarks (speed_test.go): this test binary
// run again as a TCP end, or as the post+poll process under softdev exec.

// speedPeerEnv makes this test binary one of the benchmark's peers (a TCP
// end, or the post+poll process under softdev exec), configured by the
// JSON peerConfig it holds. init runs the peer and exits, before TestMain
// builds anything.
const speedPeerEnv = "VERBSEXP_SPEED_PEER"

func init() {
	if cfg := os.Getenv(speedPeerEnv); cfg != "" {
		os.Exit(speedPeer(cfg))
	}
}

// peerConfig is what a peer is told.
type peerConfig struct {
	Role   string // "tcp-server", "tcp-client", "postpoll"
	Addr   string // TCP: the address this end binds
	Server string // tcp-client: the server's address and port
	Stream bool   // TCP: a stream (bandwidth) rather than a ping-pong (latency)
	Poll   bool   // TCP ping-pong: each end polls its socket without blocking (as perftest polls its CQ)
	Size   int    // TCP: bytes per message
	Iters  int    // TCP: round trips, or messages of the stream
	Rounds int    // postpoll: interleaved rounds
	N      int    // postpoll: post+poll rounds per way per round
}

// tcpResult is what the TCP client reports: the median round trip / 2
// of a ping-pong, or the stream's bandwidth.
type tcpResult struct {
	HalfRTTMicros float64
	MBps          float64 // 2^20 bytes per second, as perftest's MB/sec
}

func speedPeer(cfg string) int {
	var c peerConfig
	if err := json.Unmarshal([]byte(cfg), &c); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", speedPeerEnv, err)
		return 2
	}
	var err error
	switch c.Role {
	case "tcp-server":
		err = tcpServer(c)
	case "tcp-client":
		err = tcpClient(c)
	case "postpoll":
		err = postPollPeer(c)
	default:
		err = fmt.Errorf("unknown role %q", c.Role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s peer: %v\n", c.Role, err)
		return 1
	}
	return 0
}

// ------------------------------------------------------------------
// TCP: blocking sockets with TCP_NODELAY, read and written with plain
// system calls, as a C program would (no Go netpoller between); with
// Poll, a ping-pong's reads spin on non-blocking recv(2) instead.
// ------------------------------------------------------------------

func sockaddr(ip string, port int) (*syscall.SockaddrInet4, error) {
	a, err := netip.ParseAddr(ip)
	if err != nil || !a.Is4() {
		return nil, fmt.Errorf("%q is not an IPv4 address", ip)
	}
	return &syscall.SockaddrInet4{Port: port, Addr: a.As4()}, nil
}

// tcpSocket is a TCP socket bound to ip (port 0: any).
func tcpSocket(ip string) (int, error) {
	sa, err := sockaddr(ip, 0)
	if err != nil {
		return -1, err
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := syscall.Bind(fd, sa); err != nil {
		syscall.Close(fd)
		return -1, fmt.Errorf("bind %s: %w", ip, err)
	}
	return fd, nil
}

func noDelay(fd int) error {
	return syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
}

func readFull(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := syscall.Read(fd, b)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return errors.New("the peer closed the connection")
		}
		b = b[n:]
	}
	return nil
}

// pollFull is readFull by polling: recv(2) with MSG_DONTWAIT until b is
// full, never sleeping in the kernel (a raw system call: the thread is
// locked and never blocks, so the Go scheduler need not hear of it).
func pollFull(fd int, b []byte) error {
	for len(b) > 0 {
		n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)),
			syscall.MSG_DONTWAIT, 0, 0)
		switch {
		case e == syscall.EAGAIN || e == syscall.EINTR:
			continue
		case e != 0:
			return e
		case n == 0:
			return errors.New("the peer closed the connection")
		}
		b = b[n:]
	}
	return nil
}

// reader is the ping-pong's read: blocking, or polling (c.Poll).
func (c peerConfig) reader() func(int, []byte) error {
	if c.Poll {
		return pollFull
	}
	return readFull
}

func writeFull(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := syscall.Write(fd, b)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// tcpServer listens on its address, prints "listening PORT", takes one
// connection and answers it: every message echoed (ping-pong), or the
// whole stream read and one byte sent back.
func tcpServer(c peerConfig) error {
	l, err := tcpSocket(c.Addr)
	if err != nil {
		return err
	}
	defer syscall.Close(l)
	if err := syscall.Listen(l, 1); err != nil {
		return err
	}
	sa, err := syscall.Getsockname(l)
	if err != nil {
		return err
	}
	fmt.Printf("listening %d\n", sa.(*syscall.SockaddrInet4).Port)
	fd, _, err := syscall.Accept4(l, syscall.SOCK_CLOEXEC)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	if err := noDelay(fd); err != nil {
		return err
	}
	runtime.LockOSThread()
	if c.Stream {
		buf := make([]byte, max(c.Size, 1<<16))
		for left := c.Size * c.Iters; left > 0; {
			n, err := syscall.Read(fd, buf[:min(len(buf), left)])
			if err == syscall.EINTR {
				continue
			}
			if err != nil || n == 0 {
				return fmt.Errorf("the stream ended with %d bytes to come: %v", left, err)
			}
			left -= n
		}
		return writeFull(fd, []byte{1})
	}
	buf := make([]byte, c.Size)
	read := c.reader()
	for range c.Iters {
		if err := read(fd, buf); err != nil {
			return err
		}
		if err := writeFull(fd, buf); err != nil {
			return err
		}
	}
	return nil
}

// tcpClient connects from its address to the server and measures: the
// time of each round trip (a message there and back), or of the whole
// stream until the server's byte comes back. It prints "tcp: JSON".
func tcpClient(c peerConfig) error {
	host, port, err := net.SplitHostPort(c.Server)
	if err != nil {
		return err
	}
	p, _ := strconv.Atoi(port)
	to, err := sockaddr(host, p)
	if err != nil {
		return err
	}
	fd, err := tcpSocket(c.Addr)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	if err := noDelay(fd); err != nil {
		return err
	}
	if err := syscall.Connect(fd, to); err != nil {
		return fmt.Errorf("connect %s: %w", c.Server, err)
	}
	runtime.LockOSThread()
	var r tcpResult
	if c.Stream {
		buf := make([]byte, c.Size)
		start := time.Now()
		for range c.Iters {
			if err := writeFull(fd, buf); err != nil {
				return err
			}
		}
		if err := readFull(fd, buf[:1]); err != nil {
			return err
		}
		r.MBps = float64(c.Size) * float64(c.Iters) / (1 << 20) / time.Since(start).Seconds()
	} else {
		buf := make([]byte, c.Size)
		rtt := make([]time.Duration, c.Iters)
		read := c.reader()
		for i := range rtt {
			start := time.Now()
			if err := writeFull(fd, buf); err != nil {
				return err
			}
			if err := read(fd, buf); err != nil {
				return err
			}
			rtt[i] = time.Since(start)
		}
		slices.Sort(rtt)
		r.HalfRTTMicros = float64(rtt[len(rtt)/2].Nanoseconds()) / 2 / 1e3
	}
	b, _ := json.Marshal(r)
	fmt.Printf("tcp: %s\n", b)
	return nil
}

// ------------------------------------------------------------------
// The post+poll round, on an in-process device and on the driver's.
// ------------------------------------------------------------------

// postPoll is two RC QPs of one device connected to each other, each
// with its own CQ: one round posts a receive on b and a signaled 8-byte
// SEND on a, and polls a's CQ for the send's completion and b's for the
// receive's (the engine runs in the post, as an autonomous device's
// doorbell runs it; the polls find the CQEs). Everything the verbs read
// is in C memory.
type postPoll struct {
	ctx     *verbs.Context
	pd      *verbs.PD
	buf     []byte
	mr      *verbs.MR
	cq      [2]*verbs.CQ
	qp      [2]*verbs.QP
	sge     []verbs.SGE
	send    *verbs.SendWR
	recv    *verbs.RecvWR
	badSend **verbs.SendWR
	badRecv **verbs.RecvWR
	wc      *verbs.WC
}

func newPostPoll(ctx *verbs.Context) (p *postPoll, err error) {
	p = &postPoll{ctx: ctx}
	defer func() {
		if err != nil {
			err = errors.Join(err, p.close())
		}
	}()
	if p.pd, err = verbs.AllocPD(ctx); err != nil {
		return p, err
	}
	if p.buf, err = cmem.Slice[byte](4096); err != nil {
		return p, err
	}
	if p.mr, err = verbs.RegMR(p.pd, unsafe.Pointer(&p.buf[0]), uint64(len(p.buf)), int32(verbs.AccessLocalWrite)); err != nil {
		return p, err
	}
	cqAttr, err := cmem.New[verbs.ExpCQInitAttr]()
	if err != nil {
		return p, err
	}
	defer cmem.Free(cqAttr)
	qpAttr, err := cmem.New[verbs.ExpQPInitAttr]()
	if err != nil {
		return p, err
	}
	defer cmem.Free(qpAttr)
	for i := range p.cq {
		if p.cq[i], err = verbs.ExpCreateCQ(ctx, 64, nil, nil, 0, cqAttr); err != nil {
			return p, err
		}
		*qpAttr = verbs.ExpQPInitAttr{SendCQ: p.cq[i], RecvCQ: p.cq[i], QPType: verbs.QptRC,
			Cap:      verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1},
			CompMask: uint32(verbs.ExpQPInitAttrPD), PD: p.pd}
		if p.qp[i], err = verbs.ExpCreateQP(ctx, qpAttr); err != nil {
			return p, err
		}
	}
	if err = device.ConnectPair(p.qp[0], p.qp[1]); err != nil {
		return p, err
	}
	if p.sge, err = cmem.Slice[verbs.SGE](2); err != nil {
		return p, err
	}
	base := uint64(uintptr(unsafe.Pointer(&p.buf[0])))
	p.sge[0] = verbs.SGE{Addr: base, Length: 8, Lkey: p.mr.Lkey}
	p.sge[1] = verbs.SGE{Addr: base + 64, Length: 8, Lkey: p.mr.Lkey}
	if p.send, err = cmem.New[verbs.SendWR](); err != nil {
		return p, err
	}
	*p.send = verbs.SendWR{WRID: 1, SGList: &p.sge[0], NumSGE: 1, Opcode: verbs.WRSend, SendFlags: int32(verbs.SendSignaled)}
	if p.recv, err = cmem.New[verbs.RecvWR](); err != nil {
		return p, err
	}
	*p.recv = verbs.RecvWR{WRID: 2, SGList: &p.sge[1], NumSGE: 1}
	if p.badSend, err = cmem.New[*verbs.SendWR](); err != nil {
		return p, err
	}
	if p.badRecv, err = cmem.New[*verbs.RecvWR](); err != nil {
		return p, err
	}
	if p.wc, err = cmem.New[verbs.WC](); err != nil {
		return p, err
	}
	return p, nil
}

// run does n rounds, checking every completion.
func (p *postPoll) run(n int) error {
	for range n {
		if err := verbs.PostRecv(p.qp[1], p.recv, p.badRecv); err != nil {
			return err
		}
		if err := verbs.PostSend(p.qp[0], p.send, p.badSend); err != nil {
			return err
		}
		if err := p.pollOne(p.cq[0], 1, verbs.WCSend); err != nil {
			return err
		}
		if err := p.pollOne(p.cq[1], 2, verbs.WCRecv); err != nil {
			return err
		}
	}
	return nil
}

// pollOne polls cq until it gives one completion, which must be the
// successful one of wrID.
func (p *postPoll) pollOne(cq *verbs.CQ, wrID uint64, op verbs.WCOpcode) error {
	for spins := 0; ; spins++ {
		n, err := verbs.PollCQRaw(cq, 1, p.wc)
		if err != nil {
			return err
		}
		if n == 1 {
			break
		}
		if spins > 1e7 {
			return fmt.Errorf("no completion of WR %d after %d polls", wrID, spins)
		}
	}
	if w := p.wc; w.Status != verbs.WCSuccess || w.WRID != wrID || w.Opcode != op {
		return fmt.Errorf("completion of WR %d, %v, status %v; want WR %d, %v, success", w.WRID, w.Opcode, w.Status, wrID, op)
	}
	return nil
}

func (p *postPoll) close() error {
	var errs []error
	for i := range p.qp {
		if p.qp[i] != nil {
			errs = append(errs, verbs.DestroyQP(p.qp[i]))
		}
	}
	for i := range p.cq {
		if p.cq[i] != nil {
			errs = append(errs, verbs.DestroyCQ(p.cq[i]))
		}
	}
	if p.mr != nil {
		errs = append(errs, verbs.DeregMR(p.mr))
	}
	if p.pd != nil {
		errs = append(errs, verbs.DeallocPD(p.pd))
	}
	errs = append(errs, cmem.FreeSlice(p.buf), cmem.FreeSlice(p.sge), cmem.Free(p.send), cmem.Free(p.recv),
		cmem.Free(p.badSend), cmem.Free(p.badRecv), cmem.Free(p.wc))
	return errors.Join(errs...)
}

// postPollResult is what the post+poll peer reports.
type postPollResult struct {
	Names  []string
	NsOp   []float64   // medians
	Rounds [][]float64 // every round's ns/op, sorted
	Files  []string    // where each device's post_send is mapped from
}

// postPollPeer runs under softdev exec: it opens an in-process device
// (autonomous, so its doorbell runs the engine as the driver's does) and
// the driver's device through the vendor's libibverbs, builds the same
// round on each and times them in interleaved rounds
// (internal/sidebyside). It prints "postpoll: JSON".
func postPollPeer(c peerConfig) (err error) {
	in, err := softdev.Open(softdev.Autonomous())
	if err != nil {
		return fmt.Errorf("the in-process device: %w", err)
	}
	defer func() { err = errors.Join(err, in.Close()) }()
	lib, err := device.Open("")
	if err != nil {
		return fmt.Errorf("the driver's device: %w", err)
	}
	defer func() { err = errors.Join(err, lib.Close()) }()
	var res postPollResult
	var ways []sidebyside.Way
	for _, w := range []struct {
		name string
		ctx  *verbs.Context
	}{{"in-process", in.Context()}, {"provider", lib.Context()}} {
		p, err := newPostPoll(w.ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", w.name, err)
		}
		defer func() { err = errors.Join(err, p.close()) }()
		if err := p.run(1000); err != nil { // warm: rings, caches, the transport thread parked
			return fmt.Errorf("%s: %w", w.name, err)
		}
		ways = append(ways, sidebyside.Way{Name: w.name, Run: p.run})
		res.Files = append(res.Files, mappedFrom(uintptr(unsafe.Pointer(w.ctx.Ops.PostSend))))
	}
	m, err := sidebyside.Measure(c.Rounds, c.N, ways...)
	if err != nil {
		return err
	}
	res.Names, res.NsOp, res.Rounds = m.Names, m.NsOp, m.Rounds
	b, _ := json.Marshal(res)
	fmt.Printf("postpoll: %s\n", b)
	return nil
}

// mappedFrom is the file of /proc/self/maps that holds pc ("" if none).
func mappedFrom(pc uintptr) string {
	maps, _ := os.ReadFile("/proc/self/maps")
	for _, l := range strings.Split(string(maps), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 {
			continue
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		a, _ := strconv.ParseUint(lo, 16, 64)
		b, _ := strconv.ParseUint(hi, 16, 64)
		if uint64(pc) >= a && uint64(pc) < b {
			return f[5]
		}
	}
	return ""
}
