// Package rendezvous is an all-gather of byte strings over TCP, for
// ranks started by a launcher that has no PMIx server (Kubernetes,
// torchrun-style launchers, a shell loop): its Exchange method is a
// coll.Exchange. Rank 0 is the root: it listens at the job's address
// (MASTER_ADDR:MASTER_PORT), every other rank connects to it, retrying
// until the deadline if it starts before the root, and in each round the
// root collects every rank's bytes and sends all of them to all.
//
// The port is open on the cluster's network, so every message is
// authenticated with a token the launcher gives every rank
// (HMAC-SHA256 over the whole message and the connection's nonces; see
// wire.go), bounded in size and versioned. Join refuses to start without
// a token unless the address is loopback. A connection that does not
// authenticate (a stray client, a port scanner, garbage, a rank with
// another token) is dropped without harming the job; an authenticated
// rank that contradicts the job (a rank claimed twice, another size, a
// rank out of range) fails the round on every rank, naming the ranks.
//
// Connections that say nothing cannot keep the job's ranks out: a
// connection has 3 s from its accept to say who it is, and of those
// saying so at once (at most 64, 32 from one address) the oldest silent
// one is closed for each new one; a rank is welcomed once admitted, and
// one whose handshake was closed connects again.
//
// # Without a token
//
// A job without a token (on loopback) admits only its own user's
// processes, and root's: the kernel says which user made each end of a
// connection (sock_diag, as ss(8) reads it), so rank 0 refuses a
// process of another user before any handshake, telling it why, and a
// rank refuses a rank 0 of another user (one that listens at the job's
// address first), failing with its uid named. Any process of the job's
// user can join it, as it can read its memory. The job's identity (see
// below) keeps no one out: rank 0 sends it to whoever connects. To run
// a job's ranks as several users, or off loopback, give it a token.
// A round that is not complete by the deadline fails on every rank,
// naming the ranks that never joined or never sent; a rank whose
// connection ends mid-round (its process died) fails the round at once,
// naming it. Close releases every connection.
//
// # Two jobs at one address
//
// Two jobs on one host given the same MASTER_ADDR:MASTER_PORT (a port
// reused by a script, two copies of one command line) must not mix their
// ranks: one job's rank 0 listens, the other's cannot, and both jobs'
// other ranks connect to the one that listens. So each job has an
// identity (Options.Job; coll.FromEnv takes it from the launcher:
// VERBSEXP_JOB_ID, torchrun's TORCHELASTIC_RUN_ID, PMIX_NAMESPACE, Open
// MPI's job id, Slurm's job and step ids), else one derived from the
// token, and it is in the handshake both ways: rank 0's challenge says
// its job, every rank's hello says its own. A rank of another job is
// refused by rank 0 (its job goes on, unharmed) and fails at once
// itself, both naming the two jobs; the rank 0 that could not listen
// fails naming the job that listens there (it asks what answers). With
// an identity, ranks of two jobs never meet in a round. Rank 0 listens
// until Close, so that a rank that comes late, of another job or a
// second claimant of a rank of this one, is told why it is refused
// instead of finding nobody (a connection that does not authenticate
// costs the job nothing).
//
// Without one (no token, no launcher id: a shell loop on loopback) no
// rank can tell its job's rank 0 from another job's, nor rank 0 tell two
// jobs' rank 1s apart: they say the same. (A nonce made by rank 0 would
// not help: both jobs' ranks would get it from whichever rank 0
// listens.) What is detected then, and fails the job on every rank that
// joined, naming the processes (address, pid and parent pid: a
// launcher's children share a parent): two processes claiming one rank;
// a rank 0 that could not listen, which tells the one that does (two
// jobs at its address: it fails its job rather than risk running it with
// the other's ranks); a rank claiming another size. Ranks of two such
// jobs can still meet in the rounds that complete before the other
// job's processes arrive: mixing is detected, not prevented. Give every
// job an identity (the launchers above do; scripts/rendezvous-job sets
// VERBSEXP_JOB_ID).
package rendezvous

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/verbsexp/verbsexp/runtime/coll/internal/ranklist"
)

// Options tune a rendezvous. The zero value suits a loopback address.
type Options struct {
	// Token is the job's shared secret (at least MinToken bytes), the
	// same on every rank; required unless the address is loopback,
	// where a job without one admits only this user's processes (see
	// "Without a token").
	Token []byte
	// Timeout bounds each round, counted on each rank from the moment
	// it starts the round; a client tries to connect until Join's time
	// plus Timeout or the first round's deadline, whichever is later.
	// Default DefaultTimeout. A client gives up on a root that says
	// nothing for twice as long (the root reports first).
	Timeout time.Duration
	// MaxBytes bounds one rank's contribution to a round (default
	// DefaultMaxBytes); every rank must use the same.
	MaxBytes int
	// Job is the job's identity, at most MaxJob bytes: the same on every
	// rank of the job, different for any two jobs that may meet at one
	// address (see "Two jobs at one address"). Default: one derived from
	// Token (a digest, not the token), or none without a token.
	Job string
}

const (
	DefaultTimeout  = time.Minute
	DefaultMaxBytes = 64 << 10
	// MaxRanks bounds a job's size (the root holds a connection per rank).
	MaxRanks = 1 << 16
	// MinToken is the shortest token accepted.
	MinToken = 16
	// MaxJob bounds a job identity's length.
	MaxJob = 200
	// helloTimeout bounds how long a connection may take, from its
	// accept, to say who it is (a rank answers the challenge at once);
	// maxPending how many may be doing so at once, maxPerSource how many
	// of them from one address. A connection beyond either limit closes
	// the oldest pending one (of its address, or of all), never itself,
	// so that silent connections cannot keep a job's ranks out: a rank
	// whose handshake was given up connects again (it is welcomed
	// only once admitted).
	helloTimeout = 3 * time.Second
	maxPending   = 64
	maxPerSource = 32
	// handshakeTimeout bounds a rank's wait for the root's challenge and
	// welcome, and the root's writes of a failure.
	handshakeTimeout = 10 * time.Second
)

// ErrClosed is returned by a closed rendezvous.
var ErrClosed = errors.New("rendezvous: closed")

// Rendezvous is one rank's side of a job's rendezvous.
type Rendezvous struct {
	addr       string
	rank, size int
	opts       Options       // Job is the job's identity, derived if need be
	done       chan struct{} // closed by Close
	closeOnce  sync.Once

	mu    sync.Mutex // one round at a time
	round uint32     // rounds started
	err   error      // a failed round ends the rendezvous

	root *root // rank 0

	// A client connects in the background from Join on, until dialBy
	// (which each round pushes to its own deadline); ready is closed
	// once it has connected (conn, sess) or given up (dialErr).
	joined  time.Time
	dialBy  atomic.Int64 // UnixNano
	ready   chan struct{}
	dialErr error
	cmu     sync.Mutex // conn, closed by Close
	conn    net.Conn
	sess    *session
}

// Join joins the job's rendezvous at addr (host:port) as rank of size.
// Rank 0 listens there at once (port 0 picks one: see Addr); the others
// start connecting at once, in the background, retrying until the
// first round's deadline, so the root notices a rank whose process ends
// even before that round.
func Join(addr string, rank, size int, opts Options) (*Rendezvous, error) {
	switch {
	case size < 1 || size > MaxRanks:
		return nil, fmt.Errorf("rendezvous: a job of %d ranks: need 1 to %d", size, MaxRanks)
	case rank < 0 || rank >= size:
		return nil, fmt.Errorf("rendezvous: rank %d of %d: need 0 ≤ rank < size", rank, size)
	case opts.Timeout < 0 || opts.MaxBytes < 0:
		return nil, fmt.Errorf("rendezvous: Timeout %v, MaxBytes %d: need 0 (default) or more", opts.Timeout, opts.MaxBytes)
	case len(opts.Token) > 0 && len(opts.Token) < MinToken:
		return nil, fmt.Errorf("rendezvous: a token of %d bytes is too short to keep the port closed: use at least %d (e.g. openssl rand -hex 32)", len(opts.Token), MinToken)
	case len(opts.Job) > MaxJob:
		return nil, fmt.Errorf("rendezvous: a job identity of %d bytes: at most %d", len(opts.Job), MaxJob)
	}
	if opts.Job == "" && len(opts.Token) > 0 {
		opts.Job = tokenJob(opts.Token)
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.MaxBytes == 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("rendezvous: address %q: %w", addr, err)
	}
	r := &Rendezvous{addr: addr, rank: rank, size: size, opts: opts, done: make(chan struct{})}
	if size == 1 {
		return r, nil
	}
	if rank != 0 {
		if len(opts.Token) == 0 && !loopback(host) {
			return nil, noToken(addr)
		}
		// Connect now, not at the first round: a rank that dies before
		// it (in New's setup, say) then ends the job at once, its
		// connection closing, instead of at the deadline.
		r.joined, r.ready = time.Now(), make(chan struct{})
		r.dialBy.Store(r.joined.Add(opts.Timeout).UnixNano())
		go r.dial()
		return r, nil
	}
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		if other, stranger := r.whoListens(); stranger {
			return nil, fmt.Errorf("rendezvous: rank 0 of %s cannot listen at %s: %s: give the job another port: %w", jobName(opts.Job), addr, other, err)
		} else if other != "" {
			return nil, fmt.Errorf("rendezvous: rank 0 of %s cannot listen at %s: %s: two jobs were given one address (MASTER_ADDR:MASTER_PORT): give each its own port: %w",
				jobName(opts.Job), addr, other, err)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("rendezvous: rank 0 listens at %s: %w (the root must run on the host that address names, and nothing else may listen there)", addr, err)
	}
	if ip := ln.Addr().(*net.TCPAddr).IP; len(opts.Token) == 0 && !ip.IsLoopback() {
		ln.Close()
		return nil, noToken(addr)
	}
	r.root = newRoot(ln, size, opts, r.done)
	return r, nil
}

// tokenJob is the identity of a job known only by its token: a digest
// that does not give the token away.
func tokenJob(token []byte) string {
	sum := sha256.Sum256(append([]byte("verbsexp rendezvous job identity\x00"), token...))
	return "token " + hex.EncodeToString(sum[:8])
}

// jobName is how messages name a job of identity job.
func jobName(job string) string {
	if job == "" {
		return "a job without an identity"
	}
	return fmt.Sprintf("job %q", job)
}

// whoListens says what listens at the address this rank 0 could not
// listen at, when it is another rendezvous: its job and rank 0, or "";
// stranger: a process of another user listens there (a job without a
// token tells it nothing).
// It tells that rendezvous it is a rank 0 too (a hello as rank 0): a
// root of the same job, or of one without an identity like this, then
// fails its job, which may otherwise go on with this job's ranks.
func (r *Rendezvous) whoListens() (other string, stranger bool) {
	c, err := net.DialTimeout("tcp", r.addr, time.Second)
	if err != nil {
		return "", false
	}
	defer c.Close()
	if len(r.opts.Token) == 0 {
		uid, err := peerUID(c)
		switch {
		case err != nil:
			return "", false
		case !trustedUID(uid):
			return fmt.Sprintf("a process of another user (uid %d) listens there", uid), true
		}
	}
	c.SetDeadline(time.Now().Add(time.Second)) // a root answers at once
	s := &session{key: r.opts.Token}
	ch, err := readChallenge(c, s)
	var refused *refusedError
	switch {
	case errors.As(err, &refused):
		return fmt.Sprintf("a rendezvous listens there and refused this process: %v", err), false
	case ch == nil:
		return "", false // not a rendezvous, or one of another version
	case err != nil:
		return fmt.Sprintf("the rendezvous of %s (rank 0 is pid %d) listens there, and its messages do not authenticate with this job's token", jobName(ch.job), ch.pid), false
	case ch.job != r.opts.Job:
		other = fmt.Sprintf("the rendezvous of %s (rank 0 is pid %d) listens there", jobName(ch.job), ch.pid)
	case ch.job == "":
		other = fmt.Sprintf("the rendezvous of another job without an identity (rank 0 is pid %d) listens there, and now fails its job", ch.pid)
	default:
		other = fmt.Sprintf("the rendezvous of another rank 0 of %s (pid %d) listens there, and now fails its job (two jobs with one identity?)", jobName(ch.job), ch.pid)
	}
	rand.Read(s.client[:])
	s.write(c, kindHello, r.hello(s.client).body())
	if tc, ok := c.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	io.Copy(io.Discard, io.LimitReader(c, maxMessage+headerLen+macLen)) // its answer, until it closes
	return other, false
}

// hello is this rank's hello on a connection whose nonce is nonce.
func (r *Rendezvous) hello(nonce [nonceLen]byte) hello {
	return hello{rank: r.rank, size: r.size, nonce: nonce, pid: os.Getpid(), ppid: os.Getppid(), job: r.opts.Job}
}

// readChallenge reads the root's challenge into s and authenticates it.
// ch is nil when what came is no challenge of this version; err is then
// errFrame's, a *refusedError (the root refused this connection before
// any handshake), or errAuth's with ch set.
func readChallenge(c net.Conn, s *session) (ch *challenge, err error) {
	f, err := readFrame(c, max(challengeMax, maxMessage), kindChallenge, kindFail)
	if err != nil {
		return nil, err
	}
	if f[5] == kindFail {
		return nil, &refusedError{fmt.Sprintf("the root (rank 0) at %s refused this connection: %s", c.RemoteAddr(), bytes.ToValidUTF8(frameBody(f), []byte("?")))}
	}
	got, err := parseChallenge(frameBody(f))
	if err != nil {
		return nil, err
	}
	s.root = got.nonce
	if _, _, err := s.open(f); err != nil {
		return &got, err
	}
	return &got, nil
}

func noToken(addr string) error {
	return fmt.Errorf("rendezvous: %s is not a loopback address: every rank needs the job's token to keep strangers out "+
		"(Options.Token, or coll.FromEnv's VERBSEXP_JOB_TOKEN: the same secret of at least %d bytes on every rank, e.g. openssl rand -hex 32)", addr, MinToken)
}

// loopback says whether every address host names is a loopback one.
func loopback(host string) bool {
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil || len(ips) == 0 {
		return false
	}
	for _, ip := range ips {
		if !ip.IP.IsLoopback() {
			return false
		}
	}
	return true
}

// Addr is where the root listens (rank 0; the port is the chosen one
// when Join was given port 0), or the address the others connect to.
func (r *Rendezvous) Addr() string {
	if r.root != nil {
		return r.root.ln.Addr().String()
	}
	return r.addr
}

// Rank and Size are this rank's and the job's.
func (r *Rendezvous) Rank() int { return r.rank }
func (r *Rendezvous) Size() int { return r.size }

// Job is the job's identity: Options.Job, or the one derived from the
// token, or "" (none).
func (r *Rendezvous) Job() string { return r.opts.Job }

// Exchange contributes local to the next round and returns every rank's
// contribution, indexed by rank. Every rank calls it the same number of
// times; after a failed round every call fails.
func (r *Rendezvous) Exchange(local []byte) ([][]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.done:
		return nil, ErrClosed
	default:
	}
	if r.err != nil {
		return nil, r.err
	}
	if len(local) > r.opts.MaxBytes {
		return nil, fmt.Errorf("rendezvous: rank %d: %d bytes for one round, more than MaxBytes %d", r.rank, len(local), r.opts.MaxBytes)
	}
	r.round++
	start := time.Now()
	var all [][]byte
	var err error
	switch {
	case r.size == 1:
		all = [][]byte{append([]byte{}, local...)}
	case r.root != nil:
		all, err = r.root.exchange(r.round, local, start.Add(r.opts.Timeout))
	default:
		all, err = r.exchangeClient(local, start)
	}
	if err != nil {
		select {
		case <-r.done:
			err = ErrClosed
		default:
			err = fmt.Errorf("rendezvous at %s: rank %d: round %d: %w", r.Addr(), r.rank, r.round, err)
		}
		r.err = err
		return nil, err
	}
	return all, nil
}

// Close ends this rank's part: the root stops listening and closes every
// connection (ranks still in a round then fail), a client closes its
// connection. A second Close returns ErrClosed.
func (r *Rendezvous) Close() error {
	err := ErrClosed
	r.closeOnce.Do(func() {
		err = nil
		close(r.done)
		if r.root != nil {
			r.root.close()
		}
		r.cmu.Lock()
		if r.conn != nil {
			r.conn.Close()
		}
		r.cmu.Unlock()
		if r.ready != nil {
			<-r.ready // the dialer has seen done
		}
	})
	return err
}

// exchangeClient runs one round from a client: wait for the
// connection (the first time), send, and wait for the root's result.
func (r *Rendezvous) exchangeClient(local []byte, start time.Time) ([][]byte, error) {
	if by := start.Add(r.opts.Timeout).UnixNano(); by > r.dialBy.Load() {
		r.dialBy.Store(by)
	}
	select {
	case <-r.ready:
	case <-r.done:
		return nil, ErrClosed
	}
	if r.dialErr != nil {
		return nil, r.dialErr
	}
	c := r.conn
	c.SetWriteDeadline(start.Add(r.opts.Timeout))
	if err := r.sess.write(c, kindContrib, roundBody(r.round, local)); err != nil {
		return nil, fmt.Errorf("sending to the root (rank 0): %w", err)
	}
	c.SetReadDeadline(start.Add(2 * r.opts.Timeout))
	kind, body, err := r.sess.read(c, max(resultMax(r.size, r.opts.MaxBytes), maxMessage), kindResult, kindFail)
	switch {
	case errors.Is(err, errAuth) || errors.Is(err, errFrame):
		return nil, fmt.Errorf("the root (rank 0) sent %w", err)
	case isTimeout(err):
		return nil, fmt.Errorf("the root (rank 0) said nothing for %v (it fails a round it cannot complete within %v, so it is stuck or unreachable)", 2*r.opts.Timeout, r.opts.Timeout)
	case err != nil:
		return nil, fmt.Errorf("the root (rank 0) closed the connection (did its process exit?): %w", err)
	case kind == kindFail:
		return nil, fmt.Errorf("the root (rank 0) failed the round: %s", bytes.ToValidUTF8(body, []byte("?")))
	}
	round, all, err := parseResult(body, r.size, r.opts.MaxBytes)
	switch {
	case err != nil:
		return nil, fmt.Errorf("the root's (rank 0's) result: %w", err)
	case round != r.round:
		return nil, fmt.Errorf("the root (rank 0) sent the result of round %d: the ranks are not running the same rounds", round)
	case !bytes.Equal(all[r.rank], local):
		return nil, fmt.Errorf("the root (rank 0) returned %d bytes for this rank that are not the %d it sent", len(all[r.rank]), len(local))
	}
	return all, nil
}

// dial connects to the root, retrying until dialBy, and introduces this
// rank.
func (r *Rendezvous) dial() {
	defer close(r.ready)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-r.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	var d net.Dialer
	wait := 10 * time.Millisecond
	for {
		attempt, stop := context.WithTimeout(ctx, 2*time.Second)
		c, err := d.DialContext(attempt, "tcp", r.addr)
		stop()
		if err == nil {
			r.cmu.Lock()
			select {
			case <-r.done:
				r.cmu.Unlock()
				c.Close()
				r.dialErr = ErrClosed
				return
			default:
			}
			r.conn = c
			r.cmu.Unlock()
			if err = r.handshake(c); err == nil {
				return
			}
			r.cmu.Lock()
			c.Close()
			r.conn = nil
			r.cmu.Unlock()
			var other *otherJobError
			var refused *refusedError
			if errors.As(err, &other) || errors.As(err, &refused) {
				r.dialErr = err
				return
			}
			if errors.Is(err, errAuth) || errors.Is(err, errFrame) {
				r.dialErr = fmt.Errorf("what answers at %s is not this job's rendezvous: %w", r.addr, err)
				return
			}
			// Dropped before the welcome (the root gave the handshake up,
			// busy with other connections, or is going away): try again,
			// soon (it is there).
			wait = 5 * time.Millisecond
		}
		if ctx.Err() != nil {
			r.dialErr = ErrClosed
			return
		}
		if time.Now().UnixNano() > r.dialBy.Load() {
			r.dialErr = fmt.Errorf("no root (rank 0) answered at %s within %v: %w (is rank 0 running, and does the address name its host?)",
				r.addr, time.Since(r.joined).Round(time.Millisecond), err)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// otherJobError is a client's failure to join a rendezvous that is
// another job's.
type otherJobError struct {
	addr      string
	rank      int
	job, root string // this rank's job, the root's
	rootPid   int
	auth      bool // the root's messages authenticate with this rank's token
}

func (e *otherJobError) Error() string {
	at := fmt.Sprintf("the rendezvous at %s is %s's (its rank 0 is pid %d)", e.addr, jobName(e.root), e.rootPid)
	if !e.auth {
		return fmt.Sprintf("%s and its messages do not authenticate with the token of rank %d of %s: "+
			"another job's rendezvous (two jobs given one address, MASTER_ADDR:MASTER_PORT), or this job's with a token this rank does not have", at, e.rank, jobName(e.job))
	}
	return fmt.Sprintf("%s, and this is rank %d of %s: two jobs were given one address (MASTER_ADDR:MASTER_PORT): give each its own port", at, e.rank, jobName(e.job))
}

// refusedError is the root's refusal of this rank or connection: the
// rank does not try again.
type refusedError struct{ msg string }

func (e *refusedError) Error() string { return e.msg }

// handshake reads the root's challenge, answers with this rank's hello
// and waits for the root's welcome. A root of another job is told who
// this rank is (it refuses it, and says so), and the rank fails with an
// *otherJobError; a root that refuses this rank (it contradicts the job,
// or is of another user) with a *refusedError. Without a token, what
// listens must be of this user (or root).
func (r *Rendezvous) handshake(c net.Conn) error {
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	if len(r.opts.Token) == 0 {
		uid, err := peerUID(c)
		if err != nil {
			return err
		}
		if !trustedUID(uid) {
			return &refusedError{strangerError(uid, r.addr, true).Error()}
		}
	}
	s := &session{key: r.opts.Token}
	ch, err := readChallenge(c, s)
	other := ch != nil && (ch.job != r.opts.Job || err != nil)
	if err != nil && !other {
		return err
	}
	if _, err := rand.Read(s.client[:]); err != nil {
		return err
	}
	if err := s.write(c, kindHello, r.hello(s.client).body()); err != nil && !other {
		return fmt.Errorf("introducing this rank to the root: %w", err)
	}
	if other {
		return &otherJobError{addr: r.addr, rank: r.rank, job: r.opts.Job, root: ch.job, rootPid: ch.pid, auth: err == nil}
	}
	kind, body, err := s.read(c, maxMessage, kindWelcome, kindFail)
	switch {
	case errors.Is(err, errAuth) || errors.Is(err, errFrame):
		return fmt.Errorf("the root's answer to this rank's hello: %w", err)
	case err != nil:
		return err
	case kind == kindFail:
		return &refusedError{fmt.Sprintf("the root (rank 0) refused this rank: %s", bytes.ToValidUTF8(body, []byte("?")))}
	}
	c.SetDeadline(time.Time{})
	r.sess = s
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// root is rank 0's side: the listener, a connection per rank that has
// joined, and what each has sent for the round in progress.
type root struct {
	ln        net.Listener
	size      int
	opts      Options
	done      <-chan struct{}
	wake      chan struct{} // something changed under mu
	wg        sync.WaitGroup
	closeLn   sync.Once
	mu        sync.Mutex
	pending   []*pending     // handshakes in progress, oldest first
	perSource map[string]int // pending, by the address they come from
	peers     []*peer        // by rank; nil until it joins (and for rank 0)
	joined    int
	conns     map[net.Conn]struct{} // every open connection, for close
	closing   bool                  // close swept conns: accept closes what it takes from now on
	dropped   int                   // connections dropped before joining
	lastDrop  string
	fatal     error // the job failed: it contradicted itself, or a round failed
	told      bool  // every rank that joined was told
}

// pending is a connection whose handshake is in progress.
type pending struct {
	c       net.Conn
	source  string      // its remote IP
	evicted bool        // closed to make room for a newer one
	spoke   atomic.Bool // the root has read some of its hello
}

// Read reads c's hello, noting that it spoke.
func (pc *pending) Read(b []byte) (int, error) {
	n, err := pc.c.Read(b)
	if n > 0 {
		pc.spoke.Store(true)
	}
	return n, err
}

// silent says whether pc has sent nothing so far: nothing read, nothing
// waiting to be (a rank's hello in flight is not silent).
func (pc *pending) silent() bool {
	if pc.spoke.Load() {
		return false
	}
	sc, ok := pc.c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	queued := 0
	rc.Control(func(fd uintptr) {
		var n int32
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&n))); e == 0 {
			queued = int(n)
		}
	})
	return queued == 0
}

// peer is a rank that has joined.
type peer struct {
	rank  int
	from  string // its address
	who   string // its address and process
	conn  net.Conn
	sess  *session
	wmu   sync.Mutex // writes
	has   bool       // sent a contribution not yet used
	round uint32
	data  []byte
	gone  error // its connection ended or broke the protocol
}

func newRoot(ln net.Listener, size int, opts Options, done <-chan struct{}) *root {
	rt := &root{ln: ln, size: size, opts: opts, done: done, wake: make(chan struct{}, 1),
		perSource: map[string]int{}, peers: make([]*peer, size), conns: map[net.Conn]struct{}{}}
	rt.wg.Add(1)
	go rt.accept()
	return rt
}

func (rt *root) notify() {
	select {
	case rt.wake <- struct{}{}:
	default:
	}
}

func (rt *root) stopListening() { rt.closeLn.Do(func() { rt.ln.Close() }) }

func (rt *root) accept() {
	defer rt.wg.Done()
	for {
		c, err := rt.ln.Accept()
		if err != nil {
			return // closed: everyone joined, the round failed, or Close
		}
		source := c.RemoteAddr().String()
		if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
			source = a.IP.String()
		}
		rt.mu.Lock()
		if rt.closing { // accepted as close swept the connections
			rt.mu.Unlock()
			c.Close()
			continue
		}
		switch {
		case rt.perSource[source] >= maxPerSource:
			rt.evict(source, fmt.Sprintf("%d connections from %s were introducing themselves at once", maxPerSource, source))
		case len(rt.pending) >= maxPending:
			rt.evict("", fmt.Sprintf("%d connections were introducing themselves at once", maxPending))
		}
		pc := &pending{c: c, source: source}
		rt.pending = append(rt.pending, pc)
		rt.perSource[source]++
		rt.conns[c] = struct{}{}
		rt.wg.Add(1)
		rt.mu.Unlock()
		go rt.serve(c, pc)
	}
}

// evict closes the oldest pending handshake from source ("": from
// anywhere) that has said nothing, else the oldest, to make room for a
// new one. Called with mu held.
func (rt *root) evict(source, why string) {
	victim := -1
	for i, pc := range rt.pending {
		if source != "" && pc.source != source {
			continue
		}
		if victim < 0 {
			victim = i
		}
		if pc.silent() {
			victim = i
			break
		}
	}
	if victim >= 0 {
		pc := rt.pending[victim]
		rt.settle(victim)
		pc.evicted = true
		pc.c.Close()
		rt.dropped++
		rt.lastDrop = fmt.Sprintf("%s: closed before it said who it is, as %s (the oldest silent one is closed for each new one)", pc.c.RemoteAddr(), why)
	}
}

// settle takes the i-th pending handshake off the list. Called with mu
// held.
func (rt *root) settle(i int) {
	pc := rt.pending[i]
	rt.pending = append(rt.pending[:i], rt.pending[i+1:]...)
	if rt.perSource[pc.source]--; rt.perSource[pc.source] == 0 {
		delete(rt.perSource, pc.source)
	}
}

// introduced ends pc's handshake: false if it was evicted meanwhile.
func (rt *root) introduced(pc *pending) bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if pc.evicted {
		return false
	}
	for i, q := range rt.pending {
		if q == pc {
			rt.settle(i)
			break
		}
	}
	return true
}

// drop counts a connection closed before it joined.
func (rt *root) drop(why string) {
	rt.mu.Lock()
	rt.dropped++
	rt.lastDrop = why
	rt.mu.Unlock()
}

func (rt *root) forget(c net.Conn) {
	c.Close()
	rt.mu.Lock()
	delete(rt.conns, c)
	rt.mu.Unlock()
}

// serve introduces a connection, welcomes it, and then reads its
// contributions.
func (rt *root) serve(c net.Conn, pc *pending) {
	defer rt.wg.Done()
	defer rt.forget(c)
	s, h, err := rt.introduce(c, pc)
	if !rt.introduced(pc) {
		return // evicted (counted then)
	}
	if err != nil {
		rt.drop(fmt.Sprintf("%s: %v", c.RemoteAddr(), err))
		return
	}
	p, err := rt.join(h, c, s)
	if err != nil {
		// Tell it why, then read what it sent until it closes (closing
		// with unread data would reset the connection, and the failure
		// could be lost with it).
		c.SetDeadline(time.Now().Add(handshakeTimeout))
		s.write(c, kindFail, failBody(err.Error()))
		if tc, ok := c.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		io.Copy(io.Discard, io.LimitReader(c, int64(4+rt.opts.MaxBytes+headerLen+macLen)))
		return
	}
	// The welcome is the first frame the rank gets (join returned p
	// locked): the rank only takes itself for joined then.
	c.SetWriteDeadline(time.Now().Add(handshakeTimeout))
	s.write(c, kindWelcome, nil) // a connection it cannot be written to fails read too
	c.SetWriteDeadline(time.Time{})
	p.wmu.Unlock()
	rt.read(p)
}

// introduce sends the challenge and checks the hello. Nothing is
// trusted before the hello authenticates; without a token, a process of
// another user is refused before the challenge.
func (rt *root) introduce(c net.Conn, pc *pending) (*session, hello, error) {
	c.SetDeadline(time.Now().Add(helloTimeout))
	defer c.SetDeadline(time.Time{})
	s := &session{key: rt.opts.Token, isRoot: true}
	if len(rt.opts.Token) == 0 {
		uid, err := peerUID(c)
		if err != nil {
			return nil, hello{}, fmt.Errorf("its user is unknown: %w", err)
		}
		if !trustedUID(uid) {
			err := strangerError(uid, c.RemoteAddr().String(), false)
			s.write(c, kindFail, failBody(err.Error()))
			return nil, hello{}, err
		}
	}
	if _, err := rand.Read(s.root[:]); err != nil {
		return nil, hello{}, err
	}
	if err := s.write(c, kindChallenge, challenge{nonce: s.root, pid: os.Getpid(), job: rt.opts.Job}.body()); err != nil {
		return nil, hello{}, err
	}
	f, err := readFrame(pc, helloMax, kindHello)
	if err != nil {
		return nil, hello{}, err
	}
	h, err := parseHello(frameBody(f))
	if err != nil {
		return nil, hello{}, err
	}
	s.client = h.nonce
	if _, _, err := s.open(f); err != nil {
		return nil, hello{}, err
	}
	return s, h, nil
}

// join admits an authenticated rank of this job, refuses one of another
// job (an error, the job going on), or fails the job if the hello
// contradicts it.
func (rt *root) join(h hello, c net.Conn, s *session) (*peer, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	from := c.RemoteAddr().String()
	who := fmt.Sprintf("%s (pid %d, parent %d)", from, h.pid, h.ppid) // a launcher's children share a parent
	if h.job != rt.opts.Job {
		err := fmt.Errorf("rank %d of %s, at %s, was refused by rank 0 of %s (pid %d): two jobs were given one address (MASTER_ADDR:MASTER_PORT): give each its own port",
			h.rank, jobName(h.job), who, jobName(rt.opts.Job), os.Getpid())
		rt.dropped++
		rt.lastDrop = err.Error()
		return nil, err
	}
	var err error
	hint := ""
	if rt.opts.Job == "" {
		hint = " (two jobs at one address? give each its own MASTER_PORT, and each job an identity, VERBSEXP_JOB_ID, so that each refuses the other's ranks)"
	}
	switch {
	case h.size != rt.size:
		err = fmt.Errorf("rank %d, at %s, says the job has %d ranks, rank 0 says %d%s", h.rank, who, h.size, rt.size, hint)
	case h.rank == 0:
		err = fmt.Errorf("a process at %s says it is rank 0, which is the root's (pid %d)%s", who, os.Getpid(), hint)
	case h.rank >= rt.size:
		err = fmt.Errorf("a process at %s says it is rank %d of %d", who, h.rank, rt.size)
	case rt.peers[h.rank] != nil:
		err = fmt.Errorf("two processes say they are rank %d: at %s and at %s%s", h.rank, rt.peers[h.rank].who, who, hint)
	}
	if err == nil {
		err = rt.fatal // the job has failed: a late rank learns why
	}
	if err != nil {
		if rt.fatal == nil {
			rt.fatal = err
			go rt.fail(err)
		}
		return nil, err
	}
	p := &peer{rank: h.rank, from: from, who: who, conn: c, sess: s}
	p.wmu.Lock() // until serve has welcomed it
	rt.peers[h.rank] = p
	rt.joined++
	rt.notify()
	return p, nil
}

// read takes p's contributions until its connection ends.
func (rt *root) read(p *peer) {
	for {
		_, body, err := p.sess.read(p.conn, 4+rt.opts.MaxBytes, kindContrib)
		var round uint32
		var data []byte
		if err == nil {
			round, data, err = parseRound(body)
		}
		rt.mu.Lock()
		switch {
		case err != nil:
			p.gone = err
		case p.has:
			p.gone = fmt.Errorf("%w: a second contribution (round %d) before round %d was complete", errFrame, round, p.round)
		default:
			p.has, p.round, p.data = true, round, data
		}
		gone := p.gone != nil
		rt.mu.Unlock()
		rt.notify()
		if gone {
			return
		}
	}
}

// exchange runs one round at the root.
func (rt *root) exchange(round uint32, local []byte, deadline time.Time) ([][]byte, error) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		all, err := rt.collect(round, local, false)
		if all != nil || err != nil {
			return all, rt.finish(round, all, err)
		}
		select {
		case <-rt.wake:
		case <-timer.C:
			_, err := rt.collect(round, local, true)
			return nil, rt.finish(round, nil, err)
		case <-rt.done:
			return nil, ErrClosed
		}
	}
}

// collect returns every rank's contribution to round once all are in,
// an error if the round cannot complete, or neither (keep waiting).
// late says the deadline has passed: then it names who is missing.
func (rt *root) collect(round uint32, local []byte, late bool) ([][]byte, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.fatal != nil {
		return nil, rt.fatal
	}
	var absent, silent []int
	for r, p := range rt.peers {
		switch {
		case r == 0:
		case p == nil:
			absent = append(absent, r)
		case p.has && p.round != round:
			return nil, fmt.Errorf("rank %d sent a contribution to round %d: the ranks are not running the same rounds", r, p.round)
		case p.has:
		case errors.Is(p.gone, io.EOF) || errors.Is(p.gone, syscall.ECONNRESET):
			return nil, fmt.Errorf("rank %d (at %s) closed its connection (did its process exit?)", r, p.from)
		case p.gone != nil:
			return nil, fmt.Errorf("rank %d (at %s): %v", r, p.from, p.gone)
		default:
			silent = append(silent, r)
		}
	}
	if len(absent)+len(silent) > 0 {
		if !late {
			return nil, nil
		}
		var parts []string
		if len(absent) > 0 {
			parts = append(parts, fmt.Sprintf("%s never joined", ranklist.Format(absent)))
		}
		if len(silent) > 0 {
			parts = append(parts, fmt.Sprintf("%s joined but sent nothing for this round", ranklist.Format(silent)))
		}
		msg := fmt.Sprintf("%s within %v", strings.Join(parts, ", "), rt.opts.Timeout)
		if rt.dropped > 0 && len(absent) > 0 {
			msg += fmt.Sprintf(" (%d connections were dropped before joining, the last %s: a rank with another token, or of another job, is dropped so)", rt.dropped, rt.lastDrop)
		}
		return nil, errors.New(msg)
	}
	all := make([][]byte, rt.size)
	all[0] = append([]byte{}, local...)
	for r, p := range rt.peers[1:] {
		all[r+1], p.has, p.data = p.data, false, nil
	}
	return all, nil
}

// finish sends the round's result to every rank, or fails the job.
func (rt *root) finish(round uint32, all [][]byte, err error) error {
	if err != nil {
		rt.fail(err)
		return err
	}
	rt.mu.Lock()
	peers := append([]*peer(nil), rt.peers...)
	rt.mu.Unlock()
	body := resultBody(round, all)
	for _, p := range peers {
		if p != nil {
			p.wmu.Lock()
			p.conn.SetWriteDeadline(time.Now().Add(rt.opts.Timeout))
			p.sess.write(p.conn, kindResult, body) // a rank that cannot be written to fails by itself
			p.wmu.Unlock()
		}
	}
	return nil
}

// fail ends the job: every rank that joined is told why, once, and its
// connection half-closed, so that it reads the failure before the end;
// the root goes on answering ranks that join later with the failure,
// until Close.
func (rt *root) fail(err error) {
	rt.mu.Lock()
	if rt.fatal == nil {
		rt.fatal = err
	}
	told := rt.told
	rt.told = true
	msg, peers := rt.fatal.Error(), append([]*peer(nil), rt.peers...)
	rt.mu.Unlock()
	rt.notify()
	if told {
		return
	}
	for _, p := range peers {
		if p != nil {
			p.wmu.Lock()
			p.conn.SetWriteDeadline(time.Now().Add(handshakeTimeout))
			p.sess.write(p.conn, kindFail, failBody(msg))
			if tc, ok := p.conn.(*net.TCPConn); ok {
				tc.CloseWrite()
			}
			p.wmu.Unlock()
		}
	}
}

// close stops listening, closes every connection and waits for the
// goroutines.
func (rt *root) close() {
	rt.stopListening()
	rt.mu.Lock()
	rt.closing = true
	for c := range rt.conns {
		c.Close()
	}
	rt.mu.Unlock()
	rt.wg.Wait()
}
