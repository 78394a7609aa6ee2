//go:build linux && cgo

package softdev

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/generated/verbs"
)

// Another local user against two devices on loopback, where anyone may
// bind any source address: a stranger process, running as nobody where
// the tests run as root (else as this user, and then the key file is not
// out of its reach), that speaks the wire as far as it can without the
// key. It must not be able to read the key, to place a frame as a
// device's peer, nor to take the frames a device sends its peer.

// strangerEnv starts the test binary as the stranger (strangerArgs, in
// JSON); it prints its findings as JSON on its last line.
const strangerEnv = "VERBSEXP_SOFTDEV_TEST_STRANGER"

type strangerArgs struct {
	Role     string // "inject", "hijack" or "flood"
	From, To string // the address it poses as, the device it talks to
	KeyPath  string // the key file it tries to read ("" none)
	DstQPN   uint32 // inject: the frame's QPs and PSN
	SrcQPN   uint32
	PSN      uint32
	Payload  []byte
	Conns    int // flood: connections, each from an address of its own
}

type strangerFound struct {
	KeyReadErr string // what reading the key file said ("" it was read!)
	Closed     []bool // inject: per attempt, whether the device closed the connection
	Frames     int    // hijack: frames the device sent it
	Payload    bool   // ... of which one carried the payload
	Opened     int    // flood: connections made
}

func init() {
	if v := os.Getenv(strangerEnv); v != "" {
		var a strangerArgs
		if err := json.Unmarshal([]byte(v), &a); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		found, err := a.run()
		if err != nil {
			fmt.Fprintln(os.Stderr, "stranger:", err)
			os.Exit(1)
		}
		b, _ := json.Marshal(found)
		fmt.Printf("%s\n", b)
		os.Exit(0)
	}
}

// dialFrom connects from address from (any port) to the wire port at to.
func dialFrom(from, to string) (*net.TCPConn, error) {
	const ipBindAddressNoPort = 24
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, ipBindAddressNoPort, 1) })
	}}
	c, err := d.Dial("tcp", net.JoinHostPort(to, strconv.Itoa(WirePort)))
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// v1Hello is the hello of softdev before the wire authenticated: the
// GID claimed, checked only against the source address.
func v1Hello(gid [16]byte, flags byte) []byte {
	b := make([]byte, 44)
	binary.LittleEndian.PutUint32(b, 40)
	copy(b[4:], "VXSDWIRE")
	b[12], b[14] = 1, flags
	copy(b[16:], gid[:])
	return b
}

func gid16(addr string) [16]byte { return netip.MustParseAddr(addr).As16() }

// attempts are the stranger's ways in: the old hello, and the new one
// answered with a made-up proof.
func (a strangerArgs) attempts(flags byte) ([]*net.TCPConn, error) {
	var cs []*net.TCPConn
	for i := 0; i < 2; i++ {
		c, err := dialFrom(a.From, a.To)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			c.Write(v1Hello(gid16(a.From), flags))
		} else {
			c.Write(authMsg(auHello, flags, gid16(a.From), gid16(a.To)))
			readAuth(c) // the reply: a nonce and a MAC it cannot use
			proof := authMsg(auProof, 0, gid16(a.From), gid16(a.To))
			copy(proof[4+68:], bytes.Repeat([]byte{0x42}, 32))
			c.Write(proof)
		}
		cs = append(cs, c)
	}
	return cs, nil
}

func (a strangerArgs) run() (strangerFound, error) {
	var found strangerFound
	if a.KeyPath != "" {
		if _, err := os.ReadFile(a.KeyPath); err != nil {
			found.KeyReadErr = err.Error()
		}
	}
	switch a.Role {
	case "inject":
		cs, err := a.attempts(0)
		if err != nil {
			return found, err
		}
		f := frame{op: pktSendOnly, dst: a.DstQPN, src: a.SrcQPN, psn: a.PSN, payload: a.Payload}.bytes()
		for _, c := range cs {
			c.Write(f)
		}
		for _, c := range cs {
			found.Closed = append(found.Closed, closedSoon(c, 3*time.Second))
		}
	case "hijack":
		cs, err := a.attempts(helloBoth)
		if err != nil {
			return found, err
		}
		fmt.Println("ready")
		done := make(chan struct{})
		go func() { io.Copy(io.Discard, os.Stdin); close(done) }()
		type got struct {
			frames  int
			payload bool
		}
		res := make(chan got, len(cs))
		for _, c := range cs {
			go func() {
				var g got
				defer func() { res <- g }()
				var n [4]byte
				for {
					if _, err := io.ReadFull(c, n[:]); err != nil {
						return
					}
					b := make([]byte, binary.LittleEndian.Uint32(n[:])&0xfffff)
					if _, err := io.ReadFull(c, b); err != nil {
						return
					}
					if len(b) == 100 {
						continue // the reply to its hello
					}
					g.frames++
					g.payload = g.payload || bytes.Contains(b, a.Payload)
				}
			}()
		}
		select {
		case <-done:
		case <-time.After(60 * time.Second):
		}
		for _, c := range cs {
			c.Close()
		}
		for range cs {
			g := <-res
			found.Frames += g.frames
			found.Payload = found.Payload || g.payload
		}
	case "flood":
		// Each hello is followed by most of a frame, which a device
		// reads into its buffers and keeps waiting for the rest.
		part := frame{op: pktSendOnly, payload: make([]byte, 4096)}.bytes()[:4000]
		var cs []*net.TCPConn
		for i := 0; i < a.Conns; i++ {
			from := fmt.Sprintf("127.1.%d.%d", i/250, i%250+2)
			c, err := dialFrom(from, a.To)
			if err != nil {
				continue
			}
			if i%12 != 11 {
				c.Write(v1Hello(gid16(from), helloBoth))
			} else {
				c.Write(authMsg(auHello, helloBoth, gid16(from), gid16(a.To)))
			}
			c.Write(part)
			cs = append(cs, c)
		}
		found.Opened = len(cs)
		fmt.Println("ready")
		io.Copy(io.Discard, os.Stdin)
		for _, c := range cs {
			c.Close()
		}
	default:
		return found, fmt.Errorf("no role %q", a.Role)
	}
	return found, nil
}

// stranger is a started stranger process.
type stranger struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Reader
	other bool // it runs as another user (nobody)
}

// startStranger starts the test binary as the stranger: as nobody if
// this process may (a copy of the binary it can run, in a directory of
// its own), else as this user.
func startStranger(t *testing.T, a strangerArgs) *stranger {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s := &stranger{other: os.Geteuid() == 0}
	if s.other {
		dir, err := os.MkdirTemp("", "softdev-stranger-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		os.Chmod(dir, 0o755)
		b, err := os.ReadFile(exe)
		if err != nil {
			t.Fatal(err)
		}
		exe = filepath.Join(dir, "stranger.test")
		if err := os.WriteFile(exe, b, 0o755); err != nil {
			t.Fatal(err)
		}
	} else {
		t.Log("not root: the stranger runs as this user (the key file is within its reach, which the test then does not check)")
	}
	arg, _ := json.Marshal(a)
	s.cmd = exec.Command(exe, "-test.run=^$")
	s.cmd.Env = append(os.Environ(), strangerEnv+"="+string(arg))
	s.cmd.Stderr = os.Stderr
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if s.other {
		s.cmd.SysProcAttr.Credential = &syscall.Credential{Uid: 65534, Gid: 65534}
	}
	if s.in, err = s.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s.out = bufio.NewReader(out)
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.cmd.Process.Kill(); s.cmd.Wait() })
	return s
}

// line reads the stranger's next line of output.
func (s *stranger) line(t *testing.T) string {
	t.Helper()
	l, err := s.out.ReadString('\n')
	if err != nil {
		t.Fatalf("the stranger said nothing more: %v", err)
	}
	return strings.TrimSpace(l)
}

// finish tells the stranger to stop and returns what it found.
func (s *stranger) finish(t *testing.T) strangerFound {
	t.Helper()
	s.in.Close()
	var f strangerFound
	if err := json.Unmarshal([]byte(s.line(t)), &f); err != nil {
		t.Fatalf("the stranger's findings: %v", err)
	}
	if err := s.cmd.Wait(); err != nil {
		t.Fatalf("the stranger: %v", err)
	}
	return f
}

// userHome is the home directory of this process's user, where the key
// file is unless the environment names another.
func userHome() (string, error) {
	u, err := user.LookupId(strconv.Itoa(os.Geteuid()))
	if err != nil {
		return "", err
	}
	return u.HomeDir, nil
}

// keyPath is the key file the devices of this process use, or "".
func keyPath(t *testing.T) string {
	if os.Getenv("VERBSEXP_SOFTDEV_KEY") != "" {
		return ""
	}
	if p := os.Getenv("VERBSEXP_SOFTDEV_KEY_FILE"); p != "" {
		return p
	}
	home, err := userHome()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(home, ".cache/verbsexp/softdev-wire.key")
}

// strangerPair is two devices, a below b (by GID), with an RC QP each
// connected to the other's, PSNs 0 at both ends (what Connect used to
// set, and what an attacker would guess).
type strangerPair struct {
	a, b     *fixture
	cqA, cqB *verbs.CQ
	qpA, qpB *verbs.QP
}

func newStrangerPair(t *testing.T, connect bool) *strangerPair {
	a, b := newFixture(t), newFixture(t)
	if ga, gb := a.d.GID(), b.d.GID(); bytes.Compare(ga[:], gb[:]) > 0 {
		a, b = b, a
	}
	p := &strangerPair{a: a, b: b, cqA: a.cq(8), cqB: b.cq(8)}
	p.qpA, p.qpB = a.qp(p.cqA, p.cqA), b.qp(p.cqB, p.cqB)
	if connect {
		p.connect(t)
	}
	return p
}

// connect connects the QPs, B's first: B then finds no connection from
// A when its path resolves, and looks for one to send on among those
// offered to it (the higher GID sends back on the lower's).
func (p *strangerPair) connect(t *testing.T) {
	l := defaultLink()
	l.timeout, l.retry = 12, 3 // 16 ms, 3 times: a lost SEND fails within a second
	connectOne(t, p.qpB, p.qpA.QPNum, p.a.d.GID(), l)
	connectOne(t, p.qpA, p.qpB.QPNum, p.b.d.GID(), l)
}

// completion waits for one completion on cq of f.
func completion(t *testing.T, f *fixture, cq *verbs.CQ, what string) verbs.ExpWC {
	t.Helper()
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if wc := f.poll(cq); len(wc) == 1 {
			return wc[0]
		} else if len(wc) > 1 {
			t.Fatalf("%s: %d completions: %+v", what, len(wc), sum(wc))
		}
	}
	t.Fatalf("%s: no completion in 15 s", what)
	return verbs.ExpWC{}
}

// A stranger, as nobody, poses as device A to device B: the old hello
// and the new one with a made-up proof, each followed by a SEND that
// names B's QP, A's QP and the PSN B expects. B takes neither: both
// connections are closed, and A's genuine SEND that follows is the one B
// receives. Before the wire authenticated, B placed the forged SEND and
// then acknowledged A's as a duplicate and dropped it: both sides
// reported success and A's data was lost.
func TestWireStrangerCannotInject(t *testing.T) {
	p := newStrangerPair(t, true)
	p.b.postRecv(p.qpB, p.b.recv(1, p.b.sges(p.b.mr.Lkey, [2]int{0, 64}), 1))
	s := startStranger(t, strangerArgs{Role: "inject", From: p.a.d.Addr().String(), To: p.b.d.Addr().String(),
		KeyPath: keyPath(t), DstQPN: p.qpB.QPNum, SrcQPN: p.qpA.QPNum, PSN: 0, Payload: []byte("forged by a stranger")})
	found := s.finish(t)
	if s.other && keyPath(t) != "" && !strings.Contains(found.KeyReadErr, "permission denied") {
		t.Errorf("the stranger reading the key file %s: %q, want permission denied", keyPath(t), found.KeyReadErr)
	}
	for i, closed := range found.Closed {
		if !closed {
			t.Errorf("attempt %d (%s): B kept the stranger's connection", i, []string{"old hello", "made-up proof"}[i])
		}
	}
	copy(p.a.buf, "genuine, from A")
	p.a.postSend(p.qpA, p.a.send(2, verbs.ExpWRSend, verbs.ExpSendSignaled, p.a.sges(p.a.mr.Lkey, [2]int{0, 15}), 1))
	if wc := completion(t, p.a, p.cqA, "A's SEND"); wc.Status != verbs.WCSuccess {
		t.Errorf("A's SEND: %v", wc.Status)
	}
	wc := completion(t, p.b, p.cqB, "B's receive")
	if got := string(p.b.buf[:byteLen(&wc)]); wc.Status != verbs.WCSuccess || got != "genuine, from A" {
		t.Fatalf("B received %q (%v), want A's %q: the stranger's SEND was taken as A's and A's was lost", got, wc.Status, "genuine, from A")
	}
}

// A stranger, as nobody, opens connections to B posing as A, saying it
// reads frames on them (the old hello, and the new one with a made-up
// proof), before A and B connect their QPs. B sends A's frames on none
// of them: B's SEND reaches A, and the stranger receives nothing. Before
// the wire authenticated, B's link to A took the stranger's connection:
// the stranger received B's payload, and B's SEND failed with RETRY_EXC.
func TestWireStrangerCannotHijack(t *testing.T) {
	p := newStrangerPair(t, false)
	secret := []byte("B's secret payload")
	s := startStranger(t, strangerArgs{Role: "hijack", From: p.a.d.Addr().String(), To: p.b.d.Addr().String(), Payload: secret})
	if l := s.line(t); l != "ready" {
		t.Fatalf("the stranger: %q", l)
	}
	time.Sleep(300 * time.Millisecond) // B has read the stranger's hellos (the old device took them)
	p.connect(t)
	p.a.postRecv(p.qpA, p.a.recv(1, p.a.sges(p.a.mr.Lkey, [2]int{0, 64}), 1))
	copy(p.b.buf, secret)
	p.b.postSend(p.qpB, p.b.send(2, verbs.ExpWRSend, verbs.ExpSendSignaled, p.b.sges(p.b.mr.Lkey, [2]int{0, len(secret)}), 1))
	wcB := completion(t, p.b, p.cqB, "B's SEND")
	found := s.finish(t)
	if found.Frames != 0 || found.Payload {
		t.Errorf("the stranger received %d frames from B (the payload among them: %v)", found.Frames, found.Payload)
	}
	if wcB.Status != verbs.WCSuccess {
		t.Fatalf("B's SEND: %v, want success", wcB.Status)
	}
	wcA := completion(t, p.a, p.cqA, "A's receive")
	if got := string(p.a.buf[:byteLen(&wcA)]); got != string(secret) {
		t.Errorf("A received %q, want %q", got, secret)
	}
}

// vmRSS is this process's resident memory in bytes.
func vmRSS(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// A stranger, as nobody, opens 4600 connections to B, each from an
// address of its own, most with the old hello and some with the new one
// and no proof, each followed by most of a frame, and holds them. A and
// B, connecting their QPs after that, still talk, and what B holds of
// the C heap does not grow with the stranger's connections. Before the
// wire authenticated and bounded what strangers hold, those connections
// filled B's one table of 4096 for good, A's SEND failed with
// RETRY_EXC, and each held the 260 KiB receive buffer its frame went
// into.
func TestWireStrangerFloodLeavesPeersIn(t *testing.T) {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); lim.Max < 5000 {
		t.Skipf("SKIPPED: the stranger needs 4600 file descriptors, and the hard limit (ulimit -Hn) is %d", lim.Max)
	}
	p := newStrangerPair(t, false)
	rss, heap := vmRSS(t), cHeapInUse()
	s := startStranger(t, strangerArgs{Role: "flood", To: p.b.d.Addr().String(), Conns: 4600})
	if l := s.line(t); l != "ready" {
		t.Fatalf("the stranger: %q", l)
	}
	time.Sleep(300 * time.Millisecond) // B has read the hellos
	grown, held := vmRSS(t)-rss, int64(cHeapInUse()-heap)
	p.connect(t)
	p.b.postRecv(p.qpB, p.b.recv(1, p.b.sges(p.b.mr.Lkey, [2]int{0, 64}), 1))
	copy(p.a.buf, "through the crowd")
	p.a.postSend(p.qpA, p.a.send(2, verbs.ExpWRSend, verbs.ExpSendSignaled, p.a.sges(p.a.mr.Lkey, [2]int{0, 17}), 1))
	wcA := completion(t, p.a, p.cqA, "A's SEND")
	t.Logf("B during the flood: %+v; the C heap held %d KiB more, the process's resident memory grew by %d KiB", p.b.d.Wire(), held>>10, grown>>10)
	found := s.finish(t)
	if found.Opened < 4500 {
		t.Fatalf("the stranger opened only %d connections", found.Opened)
	}
	if wcA.Status != verbs.WCSuccess {
		t.Fatalf("A's SEND to B past the stranger's connections: %v", wcA.Status)
	}
	wcB := completion(t, p.b, p.cqB, "B's receive")
	if got := string(p.b.buf[:byteLen(&wcB)]); got != "through the crowd" {
		t.Errorf("B received %q", got)
	}
	if held > 16<<20 {
		t.Errorf("the stranger's connections hold %d MiB of the C heap", held>>20)
	}
}
