//go:build linux && cgo

package main

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/device"
)

// The handshake trades what an RC connection needs over a TCP connection
// before any verbs traffic. Two forms:
//
// The vendor's, so that this program and ibv_cc_pingpong talk to each
// other: the client sends "%04x:%06x:%06x" (LID:QPN:PSN) and its NUL, 19
// bytes; the server connects its QP, answers the same way, and the
// client ends with "done" and its NUL. It carries no GID, so it serves
// an InfiniBand port, or a RoCE one given the peer's GID with -G (as the
// vendor's program needs it there too), and nothing about the exchange:
// each side assumes the other runs the same options (-n, -m, -c, -t,
// -o), as the vendor's program does, and checks results against its own
// operands. A client speaks it whenever it can (vendorHandshake); a
// server answers in the form the client spoke.
//
// This program's own, for a RoCE port without -G: each side sends one
// line:
//
//	ccpingpong/1 lid=0x0000 qpn=0x000101 psn=0x5c1e07 gid=00000000000000000000ffff7f000002 mtu=1024 size=4096 iters=1000 calc=ADD type=INT64 operands=<32 hex digits>,...
//
// The GID is needed because the port is RoCE (LID 0). The rest lets each
// side refuse a peer that runs another exchange (a different -n, -m, -c
// or -t would hang or fail later) and check every result it receives
// exactly: the peer's operands are those the peer's SENDs reduce. The
// client speaks first; the server checks, connects its QP and answers
// with its own line, or with "error <why>"; the client answers "done"
// (or "error <why>") and connects. No line is longer than maxLine.
const (
	handshakeMagic = "ccpingpong/1"
	maxLine        = 4096
	handshakeTime  = 30 * time.Second // for the whole exchange, once connected
)

// endpoint is what one side tells the other: its QP's device.Endpoint
// (LID, GID, QP number, PSN; the MTU is the path MTU, -m) and what the
// exchange runs.
type endpoint struct {
	device.Endpoint
	size     int // -s
	iters    int // -n
	calc     string
	typ      string    // "none" for both without -c
	operands []operand // none without -c
}

// mtu is the path MTU in bytes.
func (e endpoint) mtu() int { return 128 << e.MTU }

func (e endpoint) String() string {
	ops := make([]string, len(e.operands))
	for i, o := range e.operands {
		ops[i] = fmt.Sprintf("%016x%016x", o.value, o.id)
	}
	return fmt.Sprintf("%s lid=%#04x qpn=%#06x psn=%#06x gid=%s mtu=%d size=%d iters=%d calc=%s type=%s operands=%s",
		handshakeMagic, e.LID, e.QPNum, e.PSN, hex.EncodeToString(e.GID[:]), e.mtu(), e.size, e.iters, e.calc, e.typ, strings.Join(ops, ","))
}

// parseEndpoint reads a peer's line: every field once, nothing else.
func parseEndpoint(line string) (endpoint, error) {
	var e endpoint
	f := strings.Fields(line)
	if len(f) == 0 || f[0] != handshakeMagic {
		return e, fmt.Errorf("the peer does not speak this program's handshake (it sent %q; want a line starting %q)", clip(line), handshakeMagic)
	}
	seen := map[string]bool{}
	for _, kv := range f[1:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || seen[k] {
			return e, fmt.Errorf("handshake: field %q: want key=value, each key once", clip(kv))
		}
		seen[k] = true
		var err error
		switch k {
		case "lid":
			e.LID, err = parseUint[uint16](v, 16)
		case "qpn":
			e.QPNum, err = parseUint[uint32](v, 24)
		case "psn":
			e.PSN, err = parseUint[uint32](v, 24)
		case "gid":
			var b []byte
			if b, err = hex.DecodeString(v); err == nil && len(b) != 16 {
				err = errors.New("want 32 hex digits")
			}
			copy(e.GID[:], b)
		case "mtu":
			var m int
			if m, err = parseInt(v); err == nil && mtuEnum(m) < 0 {
				err = errors.New("not 256, 512, 1024, 2048 or 4096")
			}
			e.MTU = verbs.MTU(mtuEnum(m))
		case "size":
			e.size, err = parseInt(v)
		case "iters":
			e.iters, err = parseInt(v)
		case "calc":
			e.calc = v
		case "type":
			e.typ = v
		case "operands":
			e.operands, err = parseWireOperands(v)
		default:
			err = errors.New("unknown key")
		}
		if err != nil {
			return e, fmt.Errorf("handshake: field %q: %v", clip(kv), err)
		}
	}
	for _, k := range []string{"lid", "qpn", "psn", "gid", "mtu", "size", "iters", "calc", "type", "operands"} {
		if !seen[k] {
			return e, fmt.Errorf("handshake: the peer's line lacks %s= (%q)", k, clip(line))
		}
	}
	return e, nil
}

func parseUint[T uint16 | uint32](s string, bits int) (T, error) {
	v, err := strconv.ParseUint(s, 0, bits)
	if err != nil {
		return 0, fmt.Errorf("not a %d-bit number", bits)
	}
	return T(v), nil
}

func parseInt(s string) (int, error) {
	v, err := strconv.ParseInt(s, 10, 32)
	if err != nil || v < 0 {
		return 0, errors.New("not a count")
	}
	return int(v), nil
}

func parseWireOperands(s string) ([]operand, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	if len(parts) > maxOperands {
		return nil, fmt.Errorf("%d operands, more than %d", len(parts), maxOperands)
	}
	out := make([]operand, len(parts))
	for i, p := range parts {
		b, err := hex.DecodeString(p)
		if err != nil || len(b) != 16 {
			return nil, fmt.Errorf("operand %d: want 32 hex digits", i+1)
		}
		out[i] = operand{value: binary.BigEndian.Uint64(b), id: binary.BigEndian.Uint64(b[8:])}
	}
	return out, nil
}

// clip keeps a peer's text short in messages.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// agree says why a server and a client cannot run one exchange.
func agree(srv, cli endpoint) error {
	var s, c []string
	differ := func(a, b string) {
		if a != b {
			s, c = append(s, a), append(c, b)
		}
	}
	differ(fmt.Sprintf("-n %d", srv.iters), fmt.Sprintf("-n %d", cli.iters))
	differ(fmt.Sprintf("-m %d", srv.mtu()), fmt.Sprintf("-m %d", cli.mtu()))
	differ("-c "+srv.calc+" -t "+srv.typ, "-c "+cli.calc+" -t "+cli.typ)
	if srv.calc == "none" && cli.calc == "none" { // plain messages fill the receiver's buffer
		differ(fmt.Sprintf("-s %d", srv.size), fmt.Sprintf("-s %d", cli.size))
	}
	if len(s) > 0 {
		return fmt.Errorf("the server runs %s, the client %s: give both the same", strings.Join(s, ", "), strings.Join(c, ", "))
	}
	return nil
}

// readLine reads one line of at most maxLine bytes.
func readLine(r *bufio.Reader) (string, error) {
	b, err := r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return "", fmt.Errorf("handshake: the peer sent a line longer than %d bytes", maxLine)
	}
	if err != nil {
		if errors.Is(err, io.EOF) {
			return "", errors.New("handshake: the peer closed the connection")
		}
		return "", fmt.Errorf("handshake: %w", err)
	}
	return strings.TrimSuffix(string(b), "\n"), nil
}

// peerError turns an "error <why>" line into an error.
func peerError(line, who string) error {
	if why, ok := strings.CutPrefix(line, "error "); ok {
		return fmt.Errorf("the %s refused: %s", who, why)
	}
	return nil
}

func refuse(w io.Writer, err error) error {
	fmt.Fprintf(w, "error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
	return err
}

// listen opens the server's handshake socket at the device's address.
func listen(addr netip.Addr, port int) (net.Listener, error) {
	ln, err := net.Listen("tcp", netip.AddrPortFrom(addr, uint16(port)).String())
	if err != nil {
		return nil, fmt.Errorf("-p %d: cannot listen at the device's address: %w", port, err)
	}
	return ln, nil
}

// serve takes one client on ln and trades endpoints; connect brings the
// server's QP to RTS with the client's before the server answers, so the
// client's first message finds it ready.
func serve(ln net.Listener, local endpoint, connect func(endpoint) error) (endpoint, error) {
	conn, err := ln.Accept()
	ln.Close()
	if err != nil {
		return endpoint{}, fmt.Errorf("accept: %w", err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(handshakeTime))
	r := bufio.NewReaderSize(conn, maxLine)
	if head, err := r.Peek(len(handshakeMagic)); err == nil && string(head) != handshakeMagic {
		return serveVendor(conn, r, local, connect)
	}
	line, err := readLine(r)
	if err != nil {
		return endpoint{}, err
	}
	remote, err := parseEndpoint(line)
	if err != nil {
		return endpoint{}, refuse(conn, err)
	}
	if err := agree(local, remote); err != nil {
		return endpoint{}, refuse(conn, err)
	}
	if err := connect(remote); err != nil {
		return endpoint{}, refuse(conn, fmt.Errorf("the server could not connect its QP: %w", err))
	}
	if _, err := fmt.Fprintf(conn, "%s\n", local); err != nil {
		return endpoint{}, fmt.Errorf("handshake: %w", err)
	}
	if line, err = readLine(r); err != nil {
		return endpoint{}, err
	}
	if err := peerError(line, "client"); err != nil {
		return endpoint{}, err
	}
	if line != "done" {
		return endpoint{}, fmt.Errorf("handshake: the client sent %q, want done", clip(line))
	}
	return remote, nil
}

// dial trades endpoints with the server at host:port, in the vendor's
// form if vendor.
func dial(host string, port int, local endpoint, vendor bool) (endpoint, error) {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return endpoint{}, fmt.Errorf("cannot reach the server at %s (is it running? start it first): %w", addr, err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(handshakeTime))
	if vendor {
		return dialVendor(conn, local)
	}
	if _, err := fmt.Fprintf(conn, "%s\n", local); err != nil {
		return endpoint{}, fmt.Errorf("handshake: %w", err)
	}
	r := bufio.NewReaderSize(conn, maxLine)
	line, err := readLine(r)
	if err != nil {
		return endpoint{}, err
	}
	if err := peerError(line, "server"); err != nil {
		return endpoint{}, err
	}
	remote, err := parseEndpoint(line)
	if err != nil {
		return endpoint{}, refuse(conn, err)
	}
	if err := agree(remote, local); err != nil {
		return endpoint{}, refuse(conn, err)
	}
	if _, err := fmt.Fprintln(conn, "done"); err != nil {
		return endpoint{}, fmt.Errorf("handshake: %w", err)
	}
	return remote, nil
}

// vendorMsg is the vendor's message: LID:QPN:PSN and a NUL.
const vendorMsg = len("0000:000000:000000") + 1

func vendorBytes(e endpoint) []byte {
	return append([]byte(fmt.Sprintf("%04x:%06x:%06x", e.LID, e.QPNum&0xffffff, e.PSN&0xffffff)), 0)
}

// parseVendor reads the vendor's message; the rest of the peer's
// endpoint is local's (the same options, as the vendor's program
// assumes).
func parseVendor(b []byte, local endpoint) (endpoint, error) {
	var lid, qpn, psn uint32
	s := strings.TrimRight(string(b), "\x00")
	if n, err := fmt.Sscanf(s, "%x:%x:%x", &lid, &qpn, &psn); n != 3 || err != nil || lid > 0xffff || len(b) != vendorMsg || b[vendorMsg-1] != 0 {
		return endpoint{}, fmt.Errorf("handshake: the peer sent %q, neither this program's line nor the vendor's LID:QPN:PSN", clip(s))
	}
	e := local
	e.LID, e.QPNum, e.PSN, e.GID = uint16(lid), qpn, psn, [16]byte{}
	return e, nil
}

// serveVendor is serve's side of the vendor's handshake.
func serveVendor(conn net.Conn, r io.Reader, local endpoint, connect func(endpoint) error) (endpoint, error) {
	msg := make([]byte, vendorMsg)
	if _, err := io.ReadFull(r, msg); err != nil {
		return endpoint{}, fmt.Errorf("handshake: reading the client's LID:QPN:PSN: %w", err)
	}
	remote, err := parseVendor(msg, local)
	if err != nil {
		return endpoint{}, err
	}
	if err := connect(remote); err != nil {
		return endpoint{}, fmt.Errorf("the server could not connect its QP: %w", err)
	}
	if _, err := conn.Write(vendorBytes(local)); err != nil {
		return endpoint{}, fmt.Errorf("handshake: %w", err)
	}
	done := make([]byte, len("done")+1)
	if _, err := io.ReadFull(r, done); err != nil || string(done) != "done\x00" {
		return endpoint{}, fmt.Errorf("handshake: the client did not end with done (%q, %v)", done, err)
	}
	return remote, nil
}

// dialVendor is dial's side of the vendor's handshake.
func dialVendor(conn net.Conn, local endpoint) (endpoint, error) {
	if _, err := conn.Write(vendorBytes(local)); err != nil {
		return endpoint{}, fmt.Errorf("handshake: %w", err)
	}
	msg := make([]byte, vendorMsg)
	if _, err := io.ReadFull(conn, msg); err != nil {
		return endpoint{}, fmt.Errorf("handshake: reading the server's LID:QPN:PSN (did it refuse? see its output): %w", err)
	}
	remote, err := parseVendor(msg, local)
	if err != nil {
		return endpoint{}, err
	}
	if _, err := conn.Write([]byte("done\x00")); err != nil {
		return endpoint{}, fmt.Errorf("handshake: %w", err)
	}
	return remote, nil
}
