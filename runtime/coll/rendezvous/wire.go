package rendezvous

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The wire, version 3. Every message is one frame:
//
//	"vxrv" | version (1 byte) | kind (1) | body length (4, big-endian) | body | HMAC-SHA256 (32)
//
// The MAC is keyed by the job token and covers the header and body
// preceded by what both ends know without sending it: the direction,
// the frame's sequence number on its connection and both ends' nonces.
// So a frame from another connection, another job or an earlier point
// of this connection does not authenticate: replaying a rank's hello
// cannot claim its rank, and nothing is accepted from a sender without
// the token. The root speaks first (a challenge with its nonce, its
// process id and the job's identity; or, to a connection it refuses
// before any handshake, a failure saying why); the client answers with a
// hello naming its rank, the job's size, its nonce, its process and
// parent process ids and the job's identity as it knows it; the root
// admits it (a welcome) or refuses it (a failure); then each round is
// one contribution from each client and one result (or a failure naming
// what went wrong) from the root. Version 2 added the identities and
// process ids (version 1 ranks could not tell two jobs apart); version 3
// the welcome (a rank whose handshake the root gave up, busy with
// strangers, connects again instead of taking itself for joined) and the
// refusal before the challenge.
const (
	magic      = "vxrv"
	version    = 3
	headerLen  = 4 + 1 + 1 + 4
	macLen     = sha256.Size
	nonceLen   = 16
	maxMessage = 4 << 10 // a failure's text
)

// Frame kinds.
const (
	kindChallenge byte = 1 + iota // root → client: nonce
	kindHello                     // client → root: rank, size, nonce
	kindContrib                   // client → root: round, bytes
	kindResult                    // root → client: round, every rank's bytes
	kindFail                      // root → client: what failed
	kindWelcome                   // root → client: the hello is admitted
)

var kindNames = [...]string{kindChallenge: "challenge", kindHello: "hello", kindContrib: "contribution", kindResult: "result", kindFail: "failure", kindWelcome: "welcome"}

func kindName(k byte) string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("kind %d", k)
}

// errAuth is wrapped by a frame whose MAC does not verify.
var errAuth = errors.New("the message does not authenticate (another job token, or not this job's rendezvous)")

// errFrame is wrapped by a frame that is not one of this version.
var errFrame = fmt.Errorf("not a rendezvous message of version %d", version)

// session is one connection's authentication state: the key, both
// nonces and each direction's next sequence number.
type session struct {
	key          []byte
	root, client [nonceLen]byte
	sent, recvd  uint64
	isRoot       bool // this end is the root
}

// mac is the frame's MAC for direction toRoot and sequence number seq.
func (s *session) mac(toRoot bool, seq uint64, frame []byte) []byte {
	h := hmac.New(sha256.New, s.key)
	dir := byte('r') // root → client
	if toRoot {
		dir = 'c'
	}
	h.Write([]byte{version, dir})
	h.Write(binary.BigEndian.AppendUint64(nil, seq))
	h.Write(s.root[:])
	h.Write(s.client[:])
	h.Write(frame)
	return h.Sum(nil)
}

// encode is the frame of kind with body, authenticated as the next
// frame this end sends.
func (s *session) encode(kind byte, body []byte) []byte {
	f := make([]byte, 0, headerLen+len(body)+macLen)
	f = append(f, magic...)
	f = append(f, version, kind)
	f = binary.BigEndian.AppendUint32(f, uint32(len(body)))
	f = append(f, body...)
	f = append(f, s.mac(!s.isRoot, s.sent, f)...)
	s.sent++
	return f
}

// write sends one frame.
func (s *session) write(w io.Writer, kind byte, body []byte) error {
	_, err := w.Write(s.encode(kind, body))
	return err
}

// read reads and authenticates the next frame from the other end: its
// kind must be one of want, its body at most max bytes (checked before
// anything past the header is read).
func (s *session) read(r io.Reader, max int, want ...byte) (kind byte, body []byte, err error) {
	f, err := readFrame(r, max, want...)
	if err != nil {
		return 0, nil, err
	}
	return s.open(f)
}

// readFrame reads one whole frame without authenticating it (the first
// frame each way carries a nonce the MAC covers).
func readFrame(r io.Reader, max int, want ...byte) ([]byte, error) {
	var h [headerLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	kind, n, err := parseHeader(h[:], max, want)
	if err != nil {
		return nil, err
	}
	f := make([]byte, headerLen+n+macLen)
	copy(f, h[:])
	if _, err := io.ReadFull(r, f[headerLen:]); err != nil {
		return nil, fmt.Errorf("a %s cut short: %w", kindName(kind), err)
	}
	return f, nil
}

// frameBody is the body of a frame readFrame returned.
func frameBody(f []byte) []byte { return f[headerLen : len(f)-macLen] }

// parseHeader checks a frame header against what may come next.
func parseHeader(h []byte, max int, want []byte) (kind byte, n int, err error) {
	if string(h[:4]) != magic || h[4] != version {
		return 0, 0, fmt.Errorf("%w (it starts %q)", errFrame, h[:5])
	}
	kind, n = h[5], int(binary.BigEndian.Uint32(h[6:]))
	ok := false
	for _, k := range want {
		ok = ok || k == kind
	}
	if !ok {
		return 0, 0, fmt.Errorf("%w: a %s where a %s was due", errFrame, kindName(kind), kindName(want[0]))
	}
	if n > max {
		return 0, 0, fmt.Errorf("%w: a %s of %d bytes, more than the %d allowed", errFrame, kindName(kind), n, max)
	}
	return kind, n, nil
}

// open verifies the MAC of a whole frame f and returns its kind and body.
func (s *session) open(f []byte) (byte, []byte, error) {
	kind, tag := f[5], f[len(f)-macLen:]
	if !hmac.Equal(tag, s.mac(s.isRoot, s.recvd, f[:len(f)-macLen])) {
		return 0, nil, fmt.Errorf("a %s: %w", kindName(kind), errAuth)
	}
	s.recvd++
	return kind, frameBody(f), nil
}

// challenge is the root's first frame: its nonce, its process id and
// the job's identity ("": none).
type challenge struct {
	nonce [nonceLen]byte
	pid   int
	job   string
}

// challengeMax bounds a challenge's body.
const challengeMax = nonceLen + 4 + 1 + MaxJob

func (c challenge) body() []byte {
	b := append(c.nonce[:0:0], c.nonce[:]...)
	b = binary.BigEndian.AppendUint32(b, uint32(c.pid))
	return appendJob(b, c.job)
}

func parseChallenge(b []byte) (challenge, error) {
	var c challenge
	if len(b) < nonceLen+4 {
		return c, fmt.Errorf("%w: a challenge of %d bytes", errFrame, len(b))
	}
	copy(c.nonce[:], b)
	c.pid = int(binary.BigEndian.Uint32(b[nonceLen:]))
	var err error
	c.job, err = parseJob(b[nonceLen+4:], "challenge")
	return c, err
}

// hello is a client's first frame.
type hello struct {
	rank, size int
	nonce      [nonceLen]byte
	pid, ppid  int // for messages: a launcher's children share ppid
	job        string
}

// helloMax bounds a hello's body.
const helloMax = 4 + 4 + nonceLen + 4 + 4 + 1 + MaxJob

func (h hello) body() []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(h.rank))
	b = binary.BigEndian.AppendUint32(b, uint32(h.size))
	b = append(b, h.nonce[:]...)
	b = binary.BigEndian.AppendUint32(b, uint32(h.pid))
	b = binary.BigEndian.AppendUint32(b, uint32(h.ppid))
	return appendJob(b, h.job)
}

// parseHello decodes a hello's body. Its MAC cannot be checked before:
// the client's nonce is in it.
func parseHello(b []byte) (hello, error) {
	const fixed = 4 + 4 + nonceLen + 4 + 4
	if len(b) < fixed {
		return hello{}, fmt.Errorf("%w: a hello of %d bytes, want at least %d", errFrame, len(b), fixed)
	}
	h := hello{rank: int(binary.BigEndian.Uint32(b)), size: int(binary.BigEndian.Uint32(b[4:]))}
	copy(h.nonce[:], b[8:])
	h.pid = int(binary.BigEndian.Uint32(b[8+nonceLen:]))
	h.ppid = int(binary.BigEndian.Uint32(b[12+nonceLen:]))
	var err error
	h.job, err = parseJob(b[fixed:], "hello")
	return h, err
}

// appendJob appends a job identity: its length (1 byte), then it.
func appendJob(b []byte, job string) []byte { return append(append(b, byte(len(job))), job...) }

// parseJob decodes what appendJob wrote, which must end the body.
func parseJob(b []byte, in string) (string, error) {
	if len(b) < 1 || len(b) != 1+int(b[0]) {
		return "", fmt.Errorf("%w: a %s whose job identity does not end it (%d bytes after its fixed fields)", errFrame, in, len(b))
	}
	return string(b[1:]), nil
}

// failBody is a failure's body: what failed, cut to maxMessage bytes.
func failBody(msg string) []byte {
	if len(msg) > maxMessage {
		msg = msg[:maxMessage]
	}
	return []byte(msg)
}

// roundBody is a contribution's body: the round, then the bytes.
func roundBody(round uint32, data []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, round), data...)
}

func parseRound(b []byte) (uint32, []byte, error) {
	if len(b) < 4 {
		return 0, nil, fmt.Errorf("%w: %d bytes where a round number was due", errFrame, len(b))
	}
	return binary.BigEndian.Uint32(b), b[4:], nil
}

// resultBody is the root's result: the round, the number of ranks, then
// each rank's bytes, length-prefixed.
func resultBody(round uint32, all [][]byte) []byte {
	n := 8
	for _, b := range all {
		n += 4 + len(b)
	}
	out := make([]byte, 0, n)
	out = binary.BigEndian.AppendUint32(out, round)
	out = binary.BigEndian.AppendUint32(out, uint32(len(all)))
	for _, b := range all {
		out = binary.BigEndian.AppendUint32(out, uint32(len(b)))
		out = append(out, b...)
	}
	return out
}

// resultMax is the largest result body for size ranks of at most
// maxBytes each.
func resultMax(size, maxBytes int) int { return 8 + size*(4+maxBytes) }

// parseResult decodes a result of exactly size entries of at most
// maxBytes each.
func parseResult(b []byte, size, maxBytes int) (uint32, [][]byte, error) {
	if len(b) < 8 {
		return 0, nil, fmt.Errorf("%w: a result of %d bytes", errFrame, len(b))
	}
	round, n := binary.BigEndian.Uint32(b), int(binary.BigEndian.Uint32(b[4:]))
	if n != size {
		return 0, nil, fmt.Errorf("%w: a result of %d ranks for a job of %d", errFrame, n, size)
	}
	all := make([][]byte, n)
	r := b[8:]
	for i := range all {
		if len(r) < 4 {
			return 0, nil, fmt.Errorf("%w: the result ends before rank %d's entry", errFrame, i)
		}
		l := int(binary.BigEndian.Uint32(r))
		r = r[4:]
		if l > maxBytes || l > len(r) {
			return 0, nil, fmt.Errorf("%w: rank %d's entry of %d bytes (at most %d, %d left)", errFrame, i, l, maxBytes, len(r))
		}
		all[i] = append([]byte{}, r[:l]...)
		r = r[l:]
	}
	if len(r) != 0 {
		return 0, nil, fmt.Errorf("%w: %d bytes after the last entry", errFrame, len(r))
	}
	return round, all, nil
}
