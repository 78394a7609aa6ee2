package rendezvous

import (
	"bytes"
	"errors"
	"testing"
)

// pair is the two ends of one connection's sessions, with fixed nonces.
func pair() (rootEnd, clientEnd *session) {
	key := []byte("0123456789abcdef")
	rootEnd, clientEnd = &session{key: key, isRoot: true}, &session{key: key}
	for i := range nonceLen {
		rootEnd.root[i], rootEnd.client[i] = byte(i), byte(100+i)
	}
	clientEnd.root, clientEnd.client = rootEnd.root, rootEnd.client
	return rootEnd, clientEnd
}

// FuzzFrame feeds the root's and a client's decoders arbitrary bytes, as
// anyone who can reach the port may: each must return an error or a
// frame that authenticates and re-encodes to the same bytes, and never
// panic or read past a length it has not checked.
func FuzzFrame(f *testing.F) {
	_, c := pair()
	f.Add(c.encode(kindHello, hello{rank: 3, size: 8}.body()))
	f.Add(c.encode(kindHello, hello{rank: 1, size: 2, pid: 4242, ppid: 1, job: "SLURM_JOB_ID=7 SLURM_STEP_ID=0"}.body()))
	f.Add(c.encode(kindContrib, roundBody(1, []byte("endpoint"))))
	r, _ := pair()
	f.Add(r.encode(kindResult, resultBody(2, [][]byte{[]byte("a"), nil, []byte("ccc")})))
	f.Add(r.encode(kindFail, failBody("rank 3 never joined")))
	f.Add(r.encode(kindWelcome, nil))
	f.Add(r.encode(kindChallenge, challenge{pid: 99}.body()))
	f.Add(r.encode(kindChallenge, challenge{pid: 99, job: "VERBSEXP_JOB_ID=a"}.body()))
	f.Add([]byte("vxrv\x03\x03\xff\xff\xff\xff"))
	f.Add([]byte("GET / HTTP/1.1\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, end := range []struct {
			isRoot bool
			want   []byte
		}{{true, []byte{kindHello, kindContrib}}, {false, []byte{kindChallenge, kindResult, kindFail, kindWelcome}}} {
			rx, tx := pair()
			if !end.isRoot {
				rx, tx = tx, rx
			}
			const maxBytes = 64
			fr, err := readFrame(bytes.NewReader(b), resultMax(3, maxBytes), end.want...)
			if err != nil {
				continue
			}
			if len(fr) > len(b) {
				t.Fatalf("a frame of %d bytes from %d", len(fr), len(b))
			}
			kind, body, err := rx.open(fr)
			if err != nil {
				if !errors.Is(err, errAuth) {
					t.Fatalf("open: %v does not wrap errAuth", err)
				}
				continue
			}
			if again := tx.encode(kind, body); !bytes.Equal(again, fr) {
				t.Fatalf("a %s re-encodes to %x, not %x", kindName(kind), again, fr)
			}
			switch kind {
			case kindHello:
				if h, err := parseHello(body); err == nil && !bytes.Equal(h.body(), body) {
					t.Fatalf("hello %+v re-encodes differently", h)
				}
			case kindChallenge:
				if ch, err := parseChallenge(body); err == nil && !bytes.Equal(ch.body(), body) {
					t.Fatalf("challenge %+v re-encodes differently", ch)
				}
			case kindResult:
				if round, all, err := parseResult(body, 3, maxBytes); err == nil && !bytes.Equal(resultBody(round, all), body) {
					t.Fatalf("result %d %q re-encodes differently", round, all)
				}
			case kindContrib:
				if round, data, err := parseRound(body); err == nil && !bytes.Equal(roundBody(round, data), body) {
					t.Fatalf("contribution re-encodes differently")
				}
			}
		}
	})
}

// TestFrameGarbage: a wrong magic, version, kind or length, a frame cut
// short, a flipped bit anywhere, a frame of another connection (other
// nonces), of another direction or replayed (another sequence number)
// are all refused.
func TestFrameGarbage(t *testing.T) {
	r, c := pair()
	good := c.encode(kindContrib, roundBody(1, []byte("endpoint")))
	read := func(b []byte) error {
		rx, _ := pair()
		fr, err := readFrame(bytes.NewReader(b), 100, kindContrib)
		if err == nil {
			_, _, err = rx.open(fr)
		}
		return err
	}
	if err := read(good); err != nil {
		t.Fatalf("the good frame: %v", err)
	}
	for i := range len(good) * 8 {
		b := bytes.Clone(good)
		b[i/8] ^= 1 << (i % 8)
		if read(b) == nil {
			t.Errorf("bit %d flipped: accepted", i)
		}
	}
	for n := range len(good) {
		if read(good[:n]) == nil {
			t.Errorf("cut to %d bytes: accepted", n)
		}
	}
	other, _ := pair()
	other.client[0]++
	if _, _, err := other.open(good); !errors.Is(err, errAuth) {
		t.Errorf("another connection's nonce: %v", err)
	}
	if _, _, err := c.open(good); !errors.Is(err, errAuth) {
		t.Errorf("a client's own frame reflected back to it: %v", err)
	}
	if _, _, err := c.open(r.encode(kindResult, resultBody(1, nil))); err != nil {
		t.Errorf("the root's frame at the client: %v", err)
	}
	rx, _ := pair()
	if _, _, err := rx.open(good); err != nil {
		t.Fatal(err)
	}
	if _, _, err := rx.open(good); !errors.Is(err, errAuth) {
		t.Errorf("the same frame again: %v", err)
	}
	if _, err := readFrame(bytes.NewReader(good), 5, kindContrib); err == nil {
		t.Errorf("a body over the limit: accepted")
	}
	if _, err := readFrame(bytes.NewReader(good), 100, kindResult); err == nil {
		t.Errorf("a contribution where a result was due: accepted")
	}
	for _, tc := range []struct {
		what string
		body []byte
	}{
		{"short", []byte{0, 0, 0}},
		{"wrong count", resultBody(1, [][]byte{nil, nil})},
		{"an entry too long", resultBody(1, [][]byte{nil, nil, make([]byte, 65)})},
		{"trailing bytes", append(resultBody(1, [][]byte{nil, nil, nil}), 0)},
		{"cut short", resultBody(1, [][]byte{nil, nil, []byte("abc")})[:19]},
	} {
		if _, _, err := parseResult(tc.body, 3, 64); !errors.Is(err, errFrame) {
			t.Errorf("result %s: %v", tc.what, err)
		}
	}
}
