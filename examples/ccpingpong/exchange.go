//go:build linux && cgo

package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"time"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/runtime/coll"
)

// exchange is the ping-pong loop and what it checks on every receive.
type exchange struct {
	cfg  *config
	s    *side
	peer []operand // the peer's operands, from the handshake

	// With -c: what the start of the buffer must hold (the operands, the
	// first replaced by each result received), and what this side's last
	// SEND delivered (nil before the first), which the peer's next SEND
	// reduces.
	image []byte
	sent  *operand
	last  operand

	// Without -c: each side's message, stamped with its number at both
	// ends.
	msg [2][]byte
}

func newExchange(cfg *config, s *side) *exchange {
	x := &exchange{cfg: cfg, s: s}
	b := s.buf.Bytes()
	if cfg.calc != nil {
		putOperands(b, cfg.ops)
		x.image = bytes.Clone(b[:coll.ElementSize*len(cfg.ops)])
		return x
	}
	for side := range x.msg {
		m := make([]byte, cfg.size)
		for i := range m {
			m[i] = byte(i*131 + side*29 + i>>9)
		}
		x.msg[side] = m
	}
	return x
}

// msgLen is what one message carries.
func (x *exchange) msgLen() int {
	if x.cfg.calc != nil {
		return x.cfg.calc.resultLen()
	}
	return x.cfg.size
}

// send posts this side's message number k.
func (x *exchange) send(k int) error {
	x.prepare(k)
	if err := x.s.postSend(); err != nil {
		return fmt.Errorf("SEND %d: ibv_exp_post_send: %w", k+1, err)
	}
	return nil
}

// prepare readies message k: with -c, what the device will deliver (its
// operands are in place); else the message itself.
func (x *exchange) prepare(k int) {
	if c := x.cfg.calc; c != nil {
		acc, id := coll.Element(x.image, 0)
		r := c.reduce(append([]operand{{acc, id}}, x.cfg.ops[1:]...))
		x.sent = &r
	} else {
		b := x.s.buf.Bytes()
		copy(b, x.msg[x.cfg.side()])
		stamp(b, k)
	}
}

func stamp(b []byte, k int) {
	binary.LittleEndian.PutUint64(b, uint64(k))
	binary.LittleEndian.PutUint64(b[len(b)-8:], uint64(k))
}

// received checks receive number k: its length, and its bytes against
// what Go computes the peer sent.
func (x *exchange) received(wc verbs.WC, k int) error {
	if int(wc.ByteLen) != x.msgLen() {
		return fmt.Errorf("receive %d: %d bytes, want %d", k+1, wc.ByteLen, x.msgLen())
	}
	b := x.s.buf.Bytes()
	c := x.cfg.calc
	if c == nil {
		want := x.msg[1-x.cfg.side()]
		if got := binary.LittleEndian.Uint64(b); got != uint64(k) || binary.LittleEndian.Uint64(b[len(b)-8:]) != uint64(k) {
			return fmt.Errorf("receive %d: the message is stamped %d and %d, want %d at both ends", k+1, got, binary.LittleEndian.Uint64(b[len(b)-8:]), k)
		}
		if i := mismatch(b[8:len(b)-8], want[8:len(want)-8]); i >= 0 {
			return fmt.Errorf("receive %d: byte %d is %#02x, want %#02x", k+1, 8+i, b[8+i], want[8+i])
		}
		return nil
	}
	// The peer's SEND reduced what this side sent last (its first operand
	// before that) and the rest of its operands.
	acc := x.peer[0]
	if x.sent != nil {
		acc = *x.sent
	}
	want := c.reduce(append([]operand{acc}, x.peer[1:]...))
	oldID := binary.BigEndian.Uint64(x.image[8:])
	if c.resultLen() == 8 {
		want.id = oldID // only the value is written
	}
	coll.PutElement(x.image, 0, want.value, want.id)
	if got, gotID := coll.Element(b, 0); got != want.value || gotID != want.id {
		return fmt.Errorf("result %d is %s, want %s (bits %#016x id %d, want %#016x id %d)",
			k+1, c.show(operand{got, gotID}), c.show(want), got, gotID, want.value, want.id)
	}
	if i := mismatch(b[:len(x.image)], x.image); i >= 0 {
		return fmt.Errorf("receive %d wrote byte %d, beyond its %d-byte result (operand %d)", k+1, i, c.resultLen(), i/coll.ElementSize+1)
	}
	x.last = want
	return nil
}

func mismatch(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// run is the ping-pong: the client sends first; a side sends its next
// message once its last SEND and the peer's answer have both completed.
// routs is how many receives are posted.
func (x *exchange) run(out io.Writer, routs int) error {
	cfg, s := x.cfg, x.s
	pending := uint64(recvWRID)
	if cfg.server != "" {
		if err := x.send(0); err != nil {
			return err
		}
		pending |= sendWRID
	}
	start := time.Now()
	scnt, rcnt := 0, 0
	for rcnt < cfg.iters || scnt < cfg.iters {
		if cfg.mqePoll {
			if err := s.postWait(); err != nil {
				return fmt.Errorf("CQE_WAIT on the manager QP: ibv_exp_post_send: %w", err)
			}
			if err := s.pollMCQ(); err != nil {
				return err
			}
		}
		wcs, err := s.pollCQ()
		if err != nil {
			return err
		}
		for _, wc := range wcs {
			if wc.Status != verbs.WCSuccess {
				return fmt.Errorf("%s completed with status %v (%d), vendor error %#x, after %d SENDs and %d receives",
					wrName(wc.WRID), wc.Status, int(wc.Status), wc.VendorErr, scnt, rcnt)
			}
			switch wc.WRID {
			case sendWRID:
				scnt++
			case recvWRID:
				if err := x.received(wc, rcnt); err != nil {
					return err
				}
				if cfg.verbose {
					fmt.Fprintf(out, "incoming data is %s\n", x.describe(rcnt))
				}
				if routs--; routs <= 1 {
					n, err := s.postRecvs(cfg.rxDepth - routs)
					if routs += n; err != nil {
						return fmt.Errorf("reposting receives (%d posted): %w", routs, err)
					}
				}
				rcnt++
			default:
				return fmt.Errorf("a completion of unknown wr_id %d", wc.WRID)
			}
			pending &^= wc.WRID
			if scnt < cfg.iters && pending == 0 {
				if err := x.send(scnt); err != nil {
					return err
				}
				pending = recvWRID | sendWRID
			}
		}
	}
	closing(out, x.msgLen(), cfg.iters, time.Since(start))
	if c := cfg.calc; c != nil {
		fmt.Fprintf(out, "%d results of %s over %s checked against Go; the last: %s\n", rcnt, c.op.name, c.typ.name, c.show(x.last))
	} else {
		fmt.Fprintf(out, "%d messages of %d bytes received and checked byte for byte\n", rcnt, cfg.size)
	}
	return nil
}

// describe is what -v prints for receive k.
func (x *exchange) describe(k int) string {
	if c := x.cfg.calc; c != nil {
		return c.show(x.last)
	}
	return fmt.Sprintf("message %d, %d bytes", k+1, x.cfg.size)
}
