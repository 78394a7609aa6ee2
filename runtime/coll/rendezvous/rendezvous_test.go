package rendezvous_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/runtime/coll/rendezvous"
)

var token = []byte("0123456789abcdef0123456789abcdef")

// contribution is rank's bytes for round: lengths vary with both, from
// 0 to max bytes, and every byte says whose and which.
func contribution(rank, round, max int) []byte {
	n := (rank*37 + round*11) % (max + 1)
	if rank == 1 && round == 2 {
		n = max
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rank*7 + round*13 + i)
	}
	return b
}

// job joins size ranks on loopback, the root first: by rank. Each of
// first runs with the root's address before the other ranks join (they
// connect at once; the root listens until Close).
func job(t testing.TB, size int, opts rendezvous.Options, first ...func(addr string)) []*rendezvous.Rendezvous {
	t.Helper()
	root, err := rendezvous.Join("127.0.0.1:0", 0, size, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range first {
		f(root.Addr())
	}
	rs := []*rendezvous.Rendezvous{root}
	for r := 1; r < size; r++ {
		c, err := rendezvous.Join(root.Addr(), r, size, opts)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, c)
	}
	return rs
}

// each runs f for every rank concurrently and returns the errors by rank.
func each(n int, f func(rank int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = f(r) }()
	}
	wg.Wait()
	return errs
}

// rounds runs n rounds of contribution on every rank, checking every byte.
func rounds(rs []*rendezvous.Rendezvous, n, max int) []error {
	return each(len(rs), func(rank int) error {
		for round := 1; round <= n; round++ {
			all, err := rs[rank].Exchange(contribution(rank, round, max))
			if err != nil {
				return err
			}
			if len(all) != len(rs) {
				return fmt.Errorf("round %d: %d entries for %d ranks", round, len(all), len(rs))
			}
			for r, b := range all {
				if want := contribution(r, round, max); !bytes.Equal(b, want) {
					return fmt.Errorf("round %d: rank %d's %d bytes are not the %d it sent", round, r, len(b), len(want))
				}
			}
		}
		return nil
	})
}

func closeAll(t *testing.T, rs []*rendezvous.Rendezvous) {
	t.Helper()
	for r, x := range rs {
		if x == nil {
			continue
		}
		if err := x.Close(); err != nil {
			t.Errorf("rank %d: Close: %v", r, err)
		}
		if err := x.Close(); !errors.Is(err, rendezvous.ErrClosed) {
			t.Errorf("rank %d: second Close: %v, want ErrClosed", r, err)
		}
	}
}

// noGoroutinesLeft fails unless the goroutine count returns to base.
func noGoroutinesLeft(t *testing.T, base int) {
	t.Helper()
	for range 200 {
		if runtime.NumGoroutine() <= base {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	buf := make([]byte, 1<<16)
	t.Errorf("%d goroutines left, %d before:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
}

// listening says whether something accepts connections at addr.
func listening(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		c.Close()
	}
	return err == nil
}

// TestRounds: every rank gets every rank's bytes, byte for byte, in
// every round (empty and MaxBytes-long contributions included), at 1, 2,
// 3, 8 and 33 ranks; the root listens until Close (so that a rank that
// comes late is told why it is refused), not after; Close leaves no
// goroutine behind and a second Close is ErrClosed.
func TestRounds(t *testing.T) {
	base := runtime.NumGoroutine()
	for _, size := range []int{1, 2, 3, 8, 33} {
		opts := rendezvous.Options{Token: token, MaxBytes: 300, Timeout: 20 * time.Second}
		rs := job(t, size, opts)
		addr := rs[0].Addr()
		for r, err := range rounds(rs, 5, opts.MaxBytes) {
			if err != nil {
				t.Errorf("%d ranks: rank %d: %v", size, r, err)
			}
		}
		if size > 1 && !listening(addr) {
			t.Errorf("%d ranks: the root stopped listening at %s before Close", size, addr)
		}
		closeAll(t, rs)
		if size > 1 && listening(addr) {
			t.Errorf("%d ranks: the root still listens at %s after Close", size, addr)
		}
	}
	noGoroutinesLeft(t, base)
}

// TestClientsBeforeRoot: ranks that start before the root retry until
// it listens.
func TestClientsBeforeRoot(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // a free port, nobody listening yet
	const size = 4
	opts := rendezvous.Options{Timeout: 10 * time.Second}
	rs := make([]*rendezvous.Rendezvous, size)
	for r := 1; r < size; r++ {
		if rs[r], err = rendezvous.Join(addr, r, size, opts); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		var err error
		rs[0], err = rendezvous.Join(addr, 0, size, opts)
		errs <- err
	}()
	got := each(size, func(rank int) error {
		if rank == 0 {
			if err := <-errs; err != nil {
				return err
			}
		}
		_, err := rs[rank].Exchange([]byte{byte(rank)})
		return err
	})
	for r, err := range got {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	closeAll(t, rs)
}

// TestMissingRank: a rank that never joins fails the round on every
// rank at the root's deadline, naming it.
func TestMissingRank(t *testing.T) {
	base := runtime.NumGoroutine()
	const size = 4
	timeout := 400 * time.Millisecond
	opts := rendezvous.Options{Timeout: timeout}
	root, err := rendezvous.Join("127.0.0.1:0", 0, size, opts)
	if err != nil {
		t.Fatal(err)
	}
	rs := []*rendezvous.Rendezvous{root}
	for r := 1; r < size-1; r++ { // rank 3 never joins
		c, err := rendezvous.Join(root.Addr(), r, size, opts)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, c)
	}
	start := time.Now()
	errs := each(size-1, func(rank int) error {
		_, err := rs[rank].Exchange([]byte("x"))
		return err
	})
	took := time.Since(start)
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "rank 3 never joined within 400ms") {
			t.Errorf("rank %d: %v, want it to say rank 3 never joined", r, err)
		}
	}
	if took > timeout+2*time.Second {
		t.Errorf("the ranks took %v to fail, the timeout is %v", took, timeout)
	}
	if _, err := rs[0].Exchange([]byte("x")); err == nil || !strings.Contains(err.Error(), "rank 3 never joined") {
		t.Errorf("a round after a failed one: %v, want the failure again", err)
	}
	closeAll(t, rs)
	noGoroutinesLeft(t, base)
}

// TestSilentRank: a rank that joined but does not take part in a round
// is named as such.
func TestSilentRank(t *testing.T) {
	const size = 3
	rs := job(t, size, rendezvous.Options{Timeout: 400 * time.Millisecond})
	for r, err := range rounds(rs, 1, 10) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	errs := each(2, func(rank int) error { _, err := rs[rank].Exchange(nil); return err })
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "rank 2 joined but sent nothing for this round within 400ms") {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	closeAll(t, rs)
}

// TestRankLeaves: a rank whose connection ends (its process exited)
// fails the round on every other rank at once, naming it; the root
// leaving fails the others too.
func TestRankLeaves(t *testing.T) {
	const size = 4
	rs := job(t, size, rendezvous.Options{Timeout: 20 * time.Second})
	for r, err := range rounds(rs, 1, 10) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	rs[2].Close()
	start := time.Now()
	errs := each(size, func(rank int) error {
		if rank == 2 {
			return nil
		}
		_, err := rs[rank].Exchange(nil)
		return err
	})
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %v to notice", took)
	}
	for r, err := range errs {
		if r != 2 && (err == nil || !strings.Contains(err.Error(), "rank 2 (at 127.0.0.1:") || !strings.Contains(err.Error(), "closed its connection")) {
			t.Errorf("rank %d: %v, want it to name rank 2", r, err)
		}
	}
	t.Log(errs[1])
	rs[2] = nil
	closeAll(t, rs)

	rs = job(t, size, rendezvous.Options{Timeout: 20 * time.Second})
	rounds(rs, 1, 10)
	rs[0].Close()
	errs = each(size-1, func(rank int) error { _, err := rs[rank+1].Exchange(nil); return err })
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "the root (rank 0) closed the connection") {
			t.Errorf("rank %d after the root left: %v", r+1, err)
		}
	}
	rs[0] = nil
	closeAll(t, rs)
}

// TestJobContradictions: an authenticated rank that contradicts the job
// fails it on every rank, naming the ranks: a rank claimed twice,
// another size.
func TestJobContradictions(t *testing.T) {
	for _, tc := range []struct {
		what       string
		rank, size int
		says       string
	}{
		{"rank claimed twice", 2, 4, "two processes say they are rank 2: at 127.0.0.1:"},
		{"another size", 2, 5, "rank 2, at 127.0.0.1:"},
		{"out of range", 6, 8, "rank 6, at 127.0.0.1:"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			const size = 4
			var odd *rendezvous.Rendezvous
			start := time.Now()
			opts := rendezvous.Options{Token: token, Timeout: 5 * time.Second}
			root, err := rendezvous.Join("127.0.0.1:0", 0, size, opts)
			if err != nil {
				t.Fatal(err)
			}
			rs := []*rendezvous.Rendezvous{root}
			join := func(rank, size int) *rendezvous.Rendezvous {
				r, err := rendezvous.Join(root.Addr(), rank, size, opts)
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			// The odd one and ranks 1 to 2 join; the last rank only once
			// the root has taken their hellos (Join dials in the
			// background): a claim the root took after the round had
			// completed would fail the job only at the next round.
			odd = join(tc.rank, tc.size)
			for r := 1; r < size-1; r++ {
				rs = append(rs, join(r, size))
			}
			time.Sleep(200 * time.Millisecond)
			rs = append(rs, join(size-1, size))
			errs := each(size+1, func(rank int) error {
				x := odd
				if rank < size {
					x = rs[rank]
				}
				_, err := x.Exchange(nil)
				return err
			})
			for r, err := range errs {
				if err == nil || !strings.Contains(err.Error(), tc.says) {
					t.Errorf("rank %d (%d: the odd one): %v, want %q", r, size, err, tc.says)
				}
			}
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("took %v, before the 5 s deadline it should not wait for", took)
			}
			t.Log(errs[0])
			closeAll(t, append(rs, odd))
		})
	}
}

// TestStrangers: connections that do not authenticate are dropped and
// the job completes: garbage, silence, a client with another token, and
// a rank's hello replayed on another connection.
func TestStrangers(t *testing.T) {
	base := runtime.NumGoroutine()
	const size = 3
	opts := rendezvous.Options{Token: token, Timeout: 10 * time.Second}
	var addr string
	var strangers []net.Conn
	var scanner, huge, replay net.Conn
	var spy *rendezvous.Rendezvous
	rs := job(t, size, opts, func(root string) { // before the ranks join, while the root listens
		addr = root
		dial := func() net.Conn {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			strangers = append(strangers, c)
			return c
		}
		dial() // says nothing
		scanner, huge = dial(), dial()
		scanner.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		huge.Write(bytes.Repeat([]byte("vxrv\x03\x02\xff\xff\xff\xff"), 100)) // a hello of 4 GiB
		// A rank with another token: its own Exchange fails.
		other, err := rendezvous.Join(addr, 1, size, rendezvous.Options{Token: []byte("another token, also long enough"), Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.Exchange([]byte("x")); err == nil || !strings.Contains(err.Error(), "do not authenticate with the token of rank 1") {
			t.Errorf("a rank with another token: %v", err)
		}
		other.Close()
		// Replay: relay a real rank's first bytes to the root twice.
		proxy, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer proxy.Close()
		recorded := make(chan []byte, 1)
		go func() {
			in, err := proxy.Accept()
			if err != nil {
				return
			}
			defer in.Close()
			out, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			defer out.Close()
			go func() { buf := make([]byte, 4096); n, _ := out.Read(buf); in.Write(buf[:n]) }() // the challenge
			buf := make([]byte, 4096)
			in.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, _ := in.Read(buf) // the hello
			recorded <- append([]byte{}, buf[:n]...)
		}()
		spy, err = rendezvous.Join(proxy.Addr().String(), 2, size, rendezvous.Options{Token: token, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		go spy.Exchange([]byte("x"))
		replay = dial()
		replay.Write(<-recorded) // the same hello, under another challenge
	})
	for r, err := range rounds(rs, 3, 50) {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	for what, c := range map[string]net.Conn{"a port scanner": scanner, "a huge hello": huge, "a replayed hello": replay} {
		if !droppedSoon(c) {
			t.Errorf("%s: the root did not close the connection", what)
		}
	}
	spy.Close()
	for _, c := range strangers {
		c.Close()
	}
	closeAll(t, rs)
	noGoroutinesLeft(t, base)
}

// droppedSoon says whether the other end closes c within 2 s (after
// whatever it sent first).
func droppedSoon(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err := io.Copy(io.Discard, c)
	return err == nil || !errors.Is(err, os.ErrDeadlineExceeded)
}

// TestJoinRefuses: Join's arguments, and an address off loopback
// without a token.
func TestJoinRefuses(t *testing.T) {
	for _, tc := range []struct {
		what       string
		addr       string
		rank, size int
		opts       rendezvous.Options
		says       string
	}{
		{"size 0", "127.0.0.1:1", 0, 0, rendezvous.Options{}, "a job of 0 ranks"},
		{"rank out of range", "127.0.0.1:1", 4, 4, rendezvous.Options{}, "rank 4 of 4"},
		{"no port", "127.0.0.1", 1, 2, rendezvous.Options{}, "address \"127.0.0.1\""},
		{"short token", "127.0.0.1:1", 1, 2, rendezvous.Options{Token: []byte("secret")}, "too short"},
		{"client off loopback without a token", "192.0.2.1:29500", 1, 2, rendezvous.Options{}, "not a loopback address"},
		{"root on every interface without a token", ":0", 0, 2, rendezvous.Options{}, "not a loopback address"},
		{"negative timeout", "127.0.0.1:1", 1, 2, rendezvous.Options{Timeout: -1}, "Timeout"},
	} {
		r, err := rendezvous.Join(tc.addr, tc.rank, tc.size, tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want %q", tc.what, err, tc.says)
		}
		if r != nil {
			r.Close()
		}
	}
	rs := job(t, 2, rendezvous.Options{Job: "first"}, func(addr string) {
		if _, err := rendezvous.Join(addr, 0, 2, rendezvous.Options{Job: "second"}); err == nil ||
			!strings.Contains(err.Error(), `rank 0 of job "second" cannot listen at `+addr+`: the rendezvous of job "first" (rank 0 is pid`) {
			t.Errorf("a second root on the same port: %v", err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() { // not a rendezvous: an HTTP server, say
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Write([]byte("HTTP/1.0 400 Bad Request\r\n\r\n"))
				c.Close()
			}
		}()
		if _, err := rendezvous.Join(ln.Addr().String(), 0, 2, rendezvous.Options{}); err == nil || !strings.Contains(err.Error(), "nothing else may listen there") {
			t.Errorf("a root where another program listens: %v", err)
		}
	})
	if _, err := rs[1].Exchange(make([]byte, rendezvous.DefaultMaxBytes+1)); err == nil || !strings.Contains(err.Error(), "more than MaxBytes") {
		t.Errorf("an oversized contribution: %v", err)
	}
	closeAll(t, rs)
}

// TestNoRoot: a client whose root never comes gives up at its deadline,
// saying where it looked.
func TestNoRoot(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c, err := rendezvous.Join(addr, 1, 2, rendezvous.Options{Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = c.Exchange(nil)
	if err == nil || !regexp.MustCompile(`no root \(rank 0\) answered at `+regexp.QuoteMeta(addr)+` within 3\d\dms`).MatchString(err.Error()) {
		t.Errorf("%v", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("took %v", took)
	}
	c.Close()
}

// TestCloseDuringRound: Close ends a round in progress on that rank with
// ErrClosed.
func TestCloseDuringRound(t *testing.T) {
	base := runtime.NumGoroutine()
	rs := job(t, 3, rendezvous.Options{Timeout: 20 * time.Second})
	errs := make(chan error, 2)
	for _, r := range []int{0, 1} { // rank 2 never comes
		go func() { _, err := rs[r].Exchange(nil); errs <- err }()
	}
	time.Sleep(100 * time.Millisecond)
	rs[1].Close()
	rs[0].Close()
	for range 2 {
		if err := <-errs; !errors.Is(err, rendezvous.ErrClosed) {
			t.Errorf("%v, want ErrClosed", err)
		}
	}
	rs[2].Close()
	noGoroutinesLeft(t, base)
}
