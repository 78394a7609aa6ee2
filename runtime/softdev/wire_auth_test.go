//go:build linux && cgo

package softdev

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/generated/verbs"
)

// The wire's handshake from the other end, written from the layout
// transport_wire.c documents (its AU_ offsets), not from its C:
// a raw peer proves the key as a device does, and the tests below show
// what a peer that cannot is refused.

const (
	authLen   = 100 // a handshake message, after its 4-byte length
	authSign  = 68  // the bytes of hello and reply the MACs cover
	auHello   = 1
	auReply   = 2
	auProof   = 3
	auVersion = 2
)

// testKey is the wire key this process's devices use.
var testKey = sync.OnceValues(wireKey)

func mustKey(t testing.TB) []byte {
	t.Helper()
	k, err := testKey()
	if err != nil {
		t.Fatalf("the wire key: %v", err)
	}
	return k
}

// authMsg is a handshake message with its length: typ from GID from to
// GID to, with flags, a fresh nonce (none in a proof) and no MAC.
func authMsg(typ, flags byte, from, to [16]byte) []byte {
	m := make([]byte, 4+authLen)
	binary.LittleEndian.PutUint32(m, authLen)
	b := m[4:]
	copy(b, "VXSDWIRE")
	b[8], b[9], b[10] = auVersion, typ, flags
	copy(b[12:], from[:])
	copy(b[28:], to[:])
	binary.LittleEndian.PutUint64(b[44:], 0x5eed)
	if typ != auProof {
		rand.Read(b[52:68])
	}
	return m
}

// authMAC is a handshake's MAC: of label, then the signed bytes of the
// hello and of the reply (message bodies, after their lengths).
func authMAC(key []byte, label string, hello, reply []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(label))
	m.Write(hello[:authSign])
	m.Write(reply[:authSign])
	return m.Sum(nil)
}

// helloTo is an opener's first message: from GID from to the device at to.
func helloTo(from, to [16]byte) []byte { return authMsg(auHello, 0, from, to) }

// readAuth reads one handshake message's body from c.
func readAuth(c net.Conn) ([]byte, error) {
	m := make([]byte, 4+authLen)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	if _, err := io.ReadFull(c, m); err != nil {
		return nil, err
	}
	if n := binary.LittleEndian.Uint32(m); n != authLen {
		return nil, fmt.Errorf("a handshake message of %d bytes, want %d", n, authLen)
	}
	return m[4:], nil
}

// handshake runs the opener's side on c, from GID from to the device at
// to, with key: hello, the reply (its MAC checked), the proof. It returns
// the hello and proof it sent (for replays).
func handshake(c net.Conn, key []byte, flags byte, from, to [16]byte) (h, proof []byte, err error) {
	h = authMsg(auHello, flags, from, to)
	if _, err := c.Write(h); err != nil {
		return nil, nil, err
	}
	r, err := readAuth(c)
	if err != nil {
		return nil, nil, fmt.Errorf("the reply: %w", err)
	}
	if r[9] != auReply || !bytes.Equal(r[12:28], to[:]) || !bytes.Equal(r[28:44], from[:]) {
		return nil, nil, fmt.Errorf("the reply: type %d from %x to %x", r[9], r[12:28], r[28:44])
	}
	if !hmac.Equal(r[68:100], authMAC(key, "softdev wire acceptor", h[4:], r)) {
		return nil, nil, errors.New("the reply's MAC does not prove the key")
	}
	proof = authMsg(auProof, 0, from, to)
	copy(proof[4+68:], authMAC(key, "softdev wire opener", h[4:], r))
	_, err = c.Write(proof)
	return h, proof, err
}

// accept runs the acceptor's side on c, whose hello h came, as the peer
// at GID me with key: the reply, the proof (its MAC checked).
func accept(c net.Conn, key []byte, me [16]byte, h []byte) error {
	if len(h) != authLen || !bytes.HasPrefix(h, []byte("VXSDWIRE")) || h[8] != auVersion || h[9] != auHello ||
		!bytes.Equal(h[28:44], me[:]) {
		return fmt.Errorf("not a hello to %x: % x", me, h)
	}
	var from [16]byte
	copy(from[:], h[12:28])
	r := authMsg(auReply, 0, me, from)
	copy(r[4+68:], authMAC(key, "softdev wire acceptor", h, r[4:]))
	if _, err := c.Write(r); err != nil {
		return err
	}
	p, err := readAuth(c)
	if err != nil {
		return fmt.Errorf("the proof: %w", err)
	}
	if p[9] != auProof || !hmac.Equal(p[68:100], authMAC(key, "softdev wire opener", h, r[4:])) {
		return errors.New("the proof does not prove the key")
	}
	return nil
}

// open dials d from the raw peer and runs the handshake with the
// process's key: what follows is frames.
func (p *rawPeer) open(d *Device, flags byte) *net.TCPConn {
	p.t.Helper()
	return p.openT(p.t, d, flags)
}

// openT is open failing t (a fuzz target's, not the peer's F).
func (p *rawPeer) openT(t testing.TB, d *Device, flags byte) *net.TCPConn {
	t.Helper()
	c := p.dial(d)
	if _, _, err := handshake(c, p.keyOr(), flags, p.gid(), d.GID()); err != nil {
		t.Fatalf("handshake with %v: %v", d.Addr(), err)
	}
	return c
}

// keyOr is the key the raw peer proves: its own if set, else the
// process's (none if there is none: its handshakes fail).
func (p *rawPeer) keyOr() []byte {
	if k := p.key.Load(); k != nil {
		return *k
	}
	k, _ := testKey()
	return k
}

// RFC 4231's test vectors for HMAC-SHA256, through the C code the wire
// uses, and random keys and messages against crypto/hmac.
func TestHMACSHA256(t *testing.T) {
	rep := func(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }
	unhex := func(s string) []byte {
		b, err := hex.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for i, c := range []struct {
		key, data []byte
		mac       string
	}{
		{rep(0x0b, 20), []byte("Hi There"), "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
		{[]byte("Jefe"), []byte("what do ya want for nothing?"), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
		{rep(0xaa, 20), rep(0xdd, 50), "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
		{unhex("0102030405060708090a0b0c0d0e0f10111213141516171819"), rep(0xcd, 50), "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
		{rep(0x0c, 20), []byte("Test With Truncation"), "a3b6167473100ee06e0c796c2955552b"}, // truncated to 128 bits
		{rep(0xaa, 131), []byte("Test Using Larger Than Block-Size Key - Hash Key First"), "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
		{rep(0xaa, 131), []byte("This is a test using a larger than block-size key and a larger than block-size data. The key needs to be hashed before being used by the HMAC algorithm."),
			"9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
	} {
		got := hmacSHA256(c.key, c.data)
		if want := unhex(c.mac); !bytes.Equal(got[:len(want)], want) {
			t.Errorf("RFC 4231 test case %d: %x, want %s", i+1, got[:len(want)], c.mac)
		}
	}
	for n := 0; n < 300; n++ {
		key, msg := make([]byte, n%150), make([]byte, n*7%1000)
		rand.Read(key)
		rand.Read(msg)
		m := hmac.New(sha256.New, key)
		m.Write(msg)
		if got := hmacSHA256(key, msg); !bytes.Equal(got[:], m.Sum(nil)) {
			t.Fatalf("key of %d bytes, message of %d: %x, crypto/hmac says %x", len(key), len(msg), got, m.Sum(nil))
		}
	}
}

// The key: from $VERBSEXP_SOFTDEV_KEY, from a key file made at first use,
// and refused from a file or a directory someone else could have put
// there or could read, with a message that says which and why.
func TestWireKey(t *testing.T) {
	t.Setenv(KeyEnv, "")
	t.Run("from the environment", func(t *testing.T) {
		t.Setenv(KeyEnv, strings.Repeat("a5", 16))
		if k, err := wireKey(); err != nil || !bytes.Equal(k, bytes.Repeat([]byte{0xa5}, 16)) {
			t.Errorf("wireKey() = %x, %v; want 16 bytes of a5", k, err)
		}
		for _, bad := range []string{"a5a5", strings.Repeat("zz", 16), strings.Repeat("a", 33), strings.Repeat("ab", 65)} {
			t.Setenv(KeyEnv, bad)
			if k, err := wireKey(); err == nil || !strings.Contains(err.Error(), KeyEnv) {
				t.Errorf("%s=%q: %x, %v; want an error naming it", KeyEnv, bad, k, err)
			}
		}
	})
	dir := t.TempDir()
	file := filepath.Join(dir, "key")
	t.Setenv(KeyFileEnv, file)
	t.Run("a new file", func(t *testing.T) {
		k1, err := wireKey()
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(file)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 || len(k1) != 32 {
			t.Errorf("made %v with a key of %d bytes, want mode 0600 and 32 bytes", fi.Mode(), len(k1))
		}
		k2, err := wireKey()
		if err != nil || !bytes.Equal(k1, k2) {
			t.Errorf("the second read gave %x, %v; want the key made first, %x", k2, err, k1)
		}
		if left, _ := filepath.Glob(filepath.Join(dir, ".key.*")); len(left) != 0 {
			t.Errorf("the file's making left %v", left)
		}
	})
	t.Run("made by many at once", func(t *testing.T) {
		os.Remove(file)
		keys := make([][]byte, 8)
		var wg sync.WaitGroup
		for i := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				keys[i], _ = wireKey()
			}()
		}
		wg.Wait()
		for i, k := range keys {
			if len(k) != 32 || !bytes.Equal(k, keys[0]) {
				t.Errorf("reader %d got %x, reader 0 %x: one key for all", i, k, keys[0])
			}
		}
	})
	refused := func(t *testing.T, why string) {
		t.Helper()
		k, err := wireKey()
		if err == nil || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), KeyEnv) {
			t.Errorf("wireKey() = %x, %v; want it refused: %q, and what to do", k, err, why)
		}
	}
	t.Run("readable by others", func(t *testing.T) {
		os.Chmod(file, 0o644)
		defer os.Chmod(file, 0o600)
		refused(t, "may be read or written by other users")
	})
	t.Run("a symbolic link", func(t *testing.T) {
		link := filepath.Join(dir, "link")
		os.Symlink(file, link)
		t.Setenv(KeyFileEnv, link)
		refused(t, "is a symbolic link")
	})
	t.Run("not hex", func(t *testing.T) {
		bad := filepath.Join(dir, "bad")
		os.WriteFile(bad, []byte("not a key at all, not at all, not at all\n"), 0o600)
		t.Setenv(KeyFileEnv, bad)
		refused(t, "does not hold 32 to 128 hex digits")
	})
	t.Run("in a directory anyone may write", func(t *testing.T) {
		open := filepath.Join(dir, "open")
		os.Mkdir(open, 0o777)
		os.Chmod(open, 0o777)
		t.Setenv(KeyFileEnv, filepath.Join(open, "key"))
		refused(t, "is writable by other users")
	})
	t.Run("planted by another user", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("SKIPPED: needs root to give a file to another user")
		}
		shared := filepath.Join(dir, "shared")
		os.Mkdir(shared, 0o755)
		os.Chmod(shared, 0o777|os.ModeSticky) // sticky, as /tmp: others may add files, not replace ours
		planted := filepath.Join(shared, "key")
		os.WriteFile(planted, []byte(strings.Repeat("ab", 32)+"\n"), 0o600)
		os.Chown(planted, 65534, 65534)
		t.Setenv(KeyFileEnv, planted)
		refused(t, "belongs to another user")
		os.Chown(shared, 65534, 65534)
		t.Setenv(KeyFileEnv, filepath.Join(shared, "mine"))
		refused(t, "belongs to another user")
	})
	t.Run("Open says it", func(t *testing.T) {
		t.Setenv(KeyFileEnv, filepath.Join(dir, "bad"))
		d, err := Open()
		if err == nil {
			d.Close()
			t.Fatal("a device opened without a usable key")
		}
		if !errors.Is(err, syscall.EACCES) || !strings.Contains(err.Error(), filepath.Join(dir, "bad")) {
			t.Errorf("Open: %v; want EACCES naming the key file", err)
		}
	})
	t.Run("the user's own", func(t *testing.T) {
		t.Setenv(KeyFileEnv, "")
		if _, err := wireKey(); err != nil {
			t.Fatalf("the user's key file: %v", err)
		}
		home, err := userHome()
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(filepath.Join(home, ".cache/verbsexp/softdev-wire.key"))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("the user's key file: %v, %v; want it there, mode 0600", fi, err)
		}
	})
}

// Devices with different keys do not talk: the opener finds the reply
// does not prove its key (EACCES), sends nothing, and the SEND fails as
// one to a dead peer does.
func TestWireOtherKeyRefused(t *testing.T) {
	t.Setenv(KeyEnv, strings.Repeat("11", 32))
	a := newFixture(t)
	t.Setenv(KeyEnv, strings.Repeat("22", 32))
	b := newFixture(t)
	cqA, cqB := a.cq(8), b.cq(8)
	qpA, qpB := a.qp(cqA, cqA), b.qp(cqB, cqB)
	l := defaultLink()
	l.timeout, l.retry = 10, 1 // 4 ms, once: the failure comes soon
	connectOne(t, qpA, qpB.QPNum, b.d.GID(), l)
	connectOne(t, qpB, qpA.QPNum, a.d.GID(), l)
	b.postRecv(qpB, b.recv(1, b.sges(b.mr.Lkey, [2]int{0, 64}), 1))
	copy(a.buf, "for b's eyes")
	a.postSend(qpA, a.send(2, verbs.ExpWRSend, verbs.ExpSendSignaled, a.sges(a.mr.Lkey, [2]int{0, 12}), 1))
	var wc []verbs.ExpWC
	for end := time.Now().Add(10 * time.Second); len(wc) == 0 && time.Now().Before(end); time.Sleep(time.Millisecond) {
		wc = a.poll(cqA)
	}
	if len(wc) != 1 || wc[0].Status != verbs.WCRetryExcErr {
		t.Fatalf("the SEND between devices with different keys: %+v, want one RETRY_EXC", sum(wc))
	}
	if got := b.poll(cqB); len(got) != 0 {
		t.Errorf("the receiver completed %+v", sum(got))
	}
	wa, wb := a.d.Wire(), b.d.Wire()
	refused := wa.Guard.AuthRefused + wb.Guard.AuthRefused
	if refused == 0 || (wa.LastError != syscall.EACCES && wb.LastError != syscall.EACCES) {
		t.Errorf("refusals %d, last errors %v and %v: want the key's refusal counted and EACCES", refused, wa.LastError, wb.LastError)
	}
	if wa.Guard.In+wb.Guard.In != 0 {
		t.Errorf("authenticated connections: %d and %d, want none", wa.Guard.In, wb.Guard.In)
	}
}

// A raw peer that does not prove the key gets nothing: a hello of the
// old format, a proof with a wrong MAC, a recorded proof replayed on a
// new connection are all closed and counted, and a frame after them is
// never taken. The same peer with the key is served.
func TestWireForgedHandshakes(t *testing.T) {
	f := newFixture(t)
	p := newRawPeer(t, 0)
	qp := safetyQP(t, f, p)
	f.postRecv(qp, f.recv(7, f.sges(f.mr.Lkey, [2]int{0, 64}), 1))
	forged := frame{op: pktSendOnly, dst: qp.QPNum, src: 0x4242, psn: 1000, payload: []byte("forged")}.bytes()
	refused := func() uint64 { return f.d.Wire().Guard.AuthRefused }
	gone := func(t *testing.T, c net.Conn, what string, before uint64) {
		t.Helper()
		if !closedSoon(c.(*net.TCPConn), 3*time.Second) {
			t.Errorf("%s: the connection stayed open", what)
		}
		waitFor(t, func() bool { return refused() > before }, "%s to be counted", what)
	}
	t.Run("version 1 hello", func(t *testing.T) {
		before := refused()
		c := p.dial(f.d)
		v1 := make([]byte, 44)
		binary.LittleEndian.PutUint32(v1, 40)
		copy(v1[4:], "VXSDWIRE")
		v1[12] = 1
		g := p.gid()
		copy(v1[16:], g[:])
		c.Write(append(v1, forged...))
		gone(t, c, "a version 1 hello", before)
	})
	t.Run("wrong proof", func(t *testing.T) {
		before := refused()
		c := p.dial(f.d)
		wrong := make([]byte, 32)
		rand.Read(wrong)
		if _, _, err := handshake(c, wrong, 0, p.gid(), f.d.GID()); err == nil {
			t.Fatal("a reply proved a key the device does not have")
		}
		// handshake stopped at the reply; answer it with a made-up proof
		proof := authMsg(auProof, 0, p.gid(), f.d.GID())
		rand.Read(proof[4+68:])
		c.Write(append(proof, forged...))
		gone(t, c, "a proof with a made-up MAC", before)
	})
	t.Run("replayed proof", func(t *testing.T) {
		c := p.dial(f.d)
		h, proof, err := handshake(c, mustKey(t), 0, p.gid(), f.d.GID())
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		before := refused()
		c = p.dial(f.d)
		c.Write(h)
		if _, err := readAuth(c); err != nil {
			t.Fatalf("the reply to a replayed hello: %v", err)
		}
		c.Write(append(proof, forged...))
		gone(t, c, "a proof recorded from another connection", before)
	})
	if wc := f.poll(f.cq(1)); len(wc) != 0 {
		t.Fatal("unexpected completions")
	}
	if string(f.buf[:6]) == "forged" {
		t.Fatal("a forged SEND was placed")
	}
	c := p.open(f.d, 0)
	c.Write(frame{op: pktSendOnly, dst: qp.QPNum, src: 0x4242, psn: 1000, payload: []byte("proven")}.bytes())
	waitFor(t, func() bool { return string(f.buf[:6]) == "proven" }, "the SEND of a peer with the key to be placed")
}

// A device that connects to an address where a stranger listens (a
// device that went, its address taken) sends it nothing: the reply does
// not prove the key, the connection fails with EACCES, and the payload
// never leaves.
func TestWireSquatterGetsNothing(t *testing.T) {
	f := newFixture(t)
	p := newRawPeer(t, 0)
	other := make([]byte, 32)
	rand.Read(other)
	p.key.Store(&other)
	cq := f.cq(8)
	qp := f.qp(cq, cq)
	l := defaultLink()
	l.timeout, l.retry = 10, 1
	connectOne(t, qp, 0x4242, p.gid(), l)
	copy(f.buf, "not for strangers")
	f.postSend(qp, f.send(1, verbs.ExpWRSend, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{0, 17}), 1))
	var wc []verbs.ExpWC
	for end := time.Now().Add(10 * time.Second); len(wc) == 0 && time.Now().Before(end); time.Sleep(time.Millisecond) {
		wc = f.poll(cq)
	}
	if len(wc) != 1 || wc[0].Status != verbs.WCRetryExcErr {
		t.Fatalf("a SEND to a squatter: %+v, want RETRY_EXC", sum(wc))
	}
	select {
	case b := <-p.in:
		t.Fatalf("the squatter got a frame: % x", b)
	default:
	}
	if w := f.d.Wire(); w.LastError != syscall.EACCES || w.Guard.AuthRefused == 0 {
		t.Errorf("last error %v, refusals %d: want EACCES, counted", w.LastError, w.Guard.AuthRefused)
	}
}
