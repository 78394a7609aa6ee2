//go:build linux && cgo

package softdev

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/verbsexp/verbsexp/generated/verbs"
	"github.com/verbsexp/verbsexp/internal/multiproc"
	"github.com/verbsexp/verbsexp/internal/netns"
)

// The RC transport's rules between devices, each a wireRule that fails
// if its rule is broken. TestWireRules runs each between two devices of
// this process; TestWireRulesProcesses between 2 and 3 processes (rank 0
// the requester of each responder).

// ackTimeout is what the local ACK timer waits for timeout t.
func ackTimeout(t uint8) time.Duration { return time.Duration(4096<<t) * time.Nanosecond }

// retryBound is when an unanswered send must have failed: its first
// transmission and retry_cnt more, each waiting out the timer; the upper
// bound has slack for a loaded machine.
func retryBound(timeout, retry uint8) (min, max time.Duration) {
	per := ackTimeout(timeout)
	return time.Duration(retry+1) * per, time.Duration(retry+1)*per*2 + 3*time.Second
}

// requesterAttr gives rank 0 (the requester) attributes of its own.
func requesterAttr(edit func(*linkAttr)) func(self, peer int) linkAttr {
	return func(self, peer int) linkAttr {
		l := defaultLink()
		if self == 0 {
			edit(&l)
		}
		return l
	}
}

func responderAttr(edit func(*linkAttr)) func(self, peer int) linkAttr {
	return func(self, peer int) linkAttr {
		l := defaultLink()
		if self != 0 {
			edit(&l)
		}
		return l
	}
}

func plainAttr(self, peer int) linkAttr { return defaultLink() }

// retryExceeded: rank 0's three sends to each peer never get an answer;
// the first fails with IBV_WC_RETRY_EXC_ERR no sooner than the timers
// allow (and not much later), the others are flushed, the QP is in ERR,
// and nothing reaches the peer.
func retryExceeded(timeout, retry uint8) func(n *meshNode) {
	return func(n *meshNode) {
		f := n.f
		if n.rank != 0 {
			f.postRecv(n.qp[0], f.recv(50, f.sges(f.mr.Lkey, [2]int{0, 64}), 1))
			n.barrier("done")
			if got := f.poll(n.cq[0]); len(got) != 0 {
				n.t.Errorf("rank %d (responder) completed %+v", n.rank, sum(got))
			}
			return
		}
		start := time.Now()
		n.eachPeer(func(p int) {
			f.postSend(n.qp[p], f.send(1, verbs.ExpWRSend, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{0, 8}), 1),
				f.send(2, verbs.ExpWRSend, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{0, 8}), 1),
				f.send(3, verbs.ExpWRSend, 0, f.sges(f.mr.Lkey, [2]int{0, 8}), 1))
		})
		lo, hi := retryBound(timeout, retry)
		n.eachPeer(func(p int) {
			got := n.await(p, 3, hi)
			want := []wcSum{{1, verbs.WCRetryExcErr, verbs.ExpWCSend, 0, n.qp[p].QPNum},
				{2, verbs.WCWRFlushErr, verbs.ExpWCSend, 0, n.qp[p].QPNum}, {3, verbs.WCWRFlushErr, verbs.ExpWCSend, 0, n.qp[p].QPNum}}
			if !equalSums(sum(got), want) {
				n.t.Errorf("to rank %d: %+v, want %+v", p, sum(got), want)
			}
			if took := time.Since(start); took < lo {
				n.t.Errorf("to rank %d: failed after %v, before timeout × (retry_cnt + 1) = %v", p, took, lo)
			}
			if st, _, _, _ := f.d.QPStats(n.qp[p]); st != verbs.QpsErr {
				n.t.Errorf("to rank %d: requester in %v, want ERR", p, st)
			}
			if w, _ := f.d.QPWire(n.qp[p]); w.Timeouts != uint64(retry)+1 {
				n.t.Errorf("to rank %d: %d local ACK timeouts, want retry_cnt + 1 = %d", p, w.Timeouts, retry+1)
			}
		})
		n.barrier("done")
	}
}

var nobodyGID = [16]byte{10: 0xff, 11: 0xff, 12: 127, 13: 254, 14: 254, 15: 253} // 127.254.254.253: no device there

func wireRules() []wireRule {
	return []wireRule{
		{name: "SendRecv", attr: plainAttr, run: func(n *meshNode) {
			f := n.f
			if n.rank != 0 {
				f.postRecv(n.qp[0], f.recv(7, f.sges(f.mr.Lkey, [2]int{100, 64}), 1))
				n.barrier("posted")
				r := n.await(0, 1, 5*time.Second)[0]
				if r.Status != verbs.WCSuccess || r.WRID != 7 || byteLen(&r) != 19 || r.ExpOpcode != verbs.ExpWCRecv ||
					r.SrcQP != n.peers[0].QPN[n.rank] || r.ImmData != uint32(0xab00+n.rank) || r.ExpWCFlags&uint64(verbs.ExpWCWithImm) == 0 {
					n.t.Fatalf("receive %+v imm %#x src %#x flags %#x", sum([]verbs.ExpWC{r}), r.ImmData, r.SrcQP, r.ExpWCFlags)
				}
				if got := string(f.buf[100:119]); got != "hello over the wire" {
					n.t.Fatalf("received %q", got)
				}
				return
			}
			copy(f.buf, "hello over the wire")
			n.barrier("posted")
			n.eachPeer(func(p int) {
				w := f.send(uint64(p), verbs.ExpWRSendWithImm, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{0, 19}), 1)
				w.Ex.SetImmData(uint32(0xab00 + p))
				f.postSend(n.qp[p], w)
			})
			n.eachPeer(func(p int) {
				if s := n.await(p, 1, 5*time.Second)[0]; s.Status != verbs.WCSuccess || s.WRID != uint64(p) || byteLen(&s) != 19 {
					n.t.Errorf("send to %d: %+v", p, sum([]verbs.ExpWC{s}))
				}
			})
		}},

		// A message larger than path_mtu travels as path_mtu packets, in
		// order: 40000 bytes at MTU 1024 are 40 packets. A packet is sent
		// again only after a local ACK timer fired (at load 5 an ACK
		// late past the timer resent 160 packets), never for a NAK; each
		// one sent again reaches the responder as a duplicate.
		{name: "Segments", attr: plainAttr, run: func(n *meshNode) {
			f := n.f
			const size = 40000
			pattern := func(i, who int) byte { return byte(i*7 + i>>8 + who) }
			if n.rank != 0 {
				f.postRecv(n.qp[0], f.recv(1, f.sges(f.mr.Lkey, [2]int{0, size}), 1))
				n.barrier("posted")
				if r := n.await(0, 1, 10*time.Second)[0]; r.Status != verbs.WCSuccess || byteLen(&r) != size {
					n.t.Fatalf("receive %+v", sum([]verbs.ExpWC{r}))
				}
				for i := range size {
					if f.buf[i] != pattern(i, 0) {
						n.t.Fatalf("byte %d is %d, want %d", i, f.buf[i], pattern(i, 0))
					}
				}
				if w, _ := f.d.QPWire(n.qp[0]); w.RxPackets != 40+w.Duplicates {
					n.t.Errorf("rank %d took %d packets, %d of them duplicates, want 40 and the duplicates: %+v, device %+v", n.rank, w.RxPackets, w.Duplicates, w, f.d.Wire())
				}
				return // and closes its device at once: what it answered must still reach rank 0
			}
			for i := range size {
				f.buf[i] = pattern(i, 0)
			}
			n.barrier("posted")
			n.eachPeer(func(p int) {
				f.postSend(n.qp[p], f.send(2, verbs.ExpWRSend, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{0, size}), 1))
			})
			n.eachPeer(func(p int) {
				if c := n.await(p, 1, 10*time.Second)[0]; c.Status != verbs.WCSuccess {
					n.t.Errorf("to rank %d: %+v", p, sum([]verbs.ExpWC{c}))
				}
				if w, _ := f.d.QPWire(n.qp[p]); w.TxPackets != 40+w.Retransmitted || (w.Retransmitted != 0 && w.Timeouts == 0) ||
					w.SeqNaksReceived != 0 || w.RNRNaksReceived != 0 {
					n.t.Errorf("to rank %d: %d packets (%d again, %d timer expiries), want 40 (path_mtu 1024), sent again only after a timer: %+v, device %+v",
						p, w.TxPackets, w.Retransmitted, w.Timeouts, w, f.d.Wire())
				}
			})
		}},

		// RDMA WRITE (and WITH_IMM), READ, CMP_AND_SWP and FETCH_AND_ADD
		// against each responder's memory.
		{name: "RDMAAndAtomics", attr: plainAttr,
			setup: func(n *meshNode) {
				if n.rank != 0 {
					n.extra = []uint32{n.f.reg(n.f.buf, verbs.AccessLocalWrite|verbs.AccessRemoteAtomic).Rkey}
				}
			},
			run: func(n *meshNode) {
				f := n.f
				if n.rank != 0 {
					for i := range 9000 {
						f.buf[20000+i] = byte(255 - i%256 + n.rank)
					}
					binary.LittleEndian.PutUint64(f.buf[60000:], 41)
					f.postRecv(n.qp[0], f.recv(9, nil, 0))
					n.barrier("ready")
					r := n.await(0, 1, 5*time.Second)[0]
					if r.ExpOpcode != verbs.ExpWCRecvRDMAWithImm || r.ImmData != 77 || byteLen(&r) != 10 {
						n.t.Errorf("write-with-imm receive: %+v imm %d", sum([]verbs.ExpWC{r}), r.ImmData)
					}
					n.barrier("done")
					for i := range 9000 {
						if f.buf[30000+i] != byte(i+n.rank) {
							n.t.Fatalf("RDMA WRITE byte %d: %d, want %d", i, f.buf[30000+i], byte(i+n.rank))
						}
					}
					if got := le64(f.buf[60000:]); got != 1005 {
						n.t.Errorf("after the atomics: %d, want 1005", got)
					}
					return
				}
				n.barrier("ready")
				// One peer at a time: the source bytes differ by peer.
				n.eachPeer(func(p int) {
					const src = 0
					for i := range 9000 {
						f.buf[src+i] = byte(i + p)
					}
					pi := n.peers[p]
					wr := f.send(1, verbs.ExpWRRDMAWrite, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{src, 9000}), 1)
					wr.WR.RDMA().RemoteAddr, wr.WR.RDMA().Rkey = pi.Addr+30000, pi.Rkey
					wi := f.send(2, verbs.ExpWRRDMAWriteWithImm, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{src, 10}), 1)
					wi.WR.RDMA().RemoteAddr, wi.WR.RDMA().Rkey = pi.Addr+50000, pi.Rkey
					wi.Ex.SetImmData(77)
					rd := f.send(3, verbs.ExpWRRDMARead, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{12000, 9000}), 1)
					rd.WR.RDMA().RemoteAddr, rd.WR.RDMA().Rkey = pi.Addr+20000, pi.Rkey
					cs := f.send(4, verbs.ExpWRAtomicCmpAndSwp, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{40000, 8}), 1)
					cs.WR.Atomic().RemoteAddr, cs.WR.Atomic().Rkey = pi.Addr+60000, pi.Extra[0]
					cs.WR.Atomic().CompareAdd, cs.WR.Atomic().Swap = 41, 1000
					fa := f.send(5, verbs.ExpWRAtomicFetchAndAdd, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{40008, 8}), 1)
					fa.WR.Atomic().RemoteAddr, fa.WR.Atomic().Rkey = pi.Addr+60000, pi.Extra[0]
					fa.WR.Atomic().CompareAdd = 5
					f.postSend(n.qp[p], wr, wi, rd, cs, fa)
					got := n.await(p, 5, 5*time.Second)
					q := n.qp[p].QPNum
					want := []wcSum{{1, verbs.WCSuccess, verbs.ExpWCRDMAWrite, 9000, q}, {2, verbs.WCSuccess, verbs.ExpWCRDMAWrite, 10, q},
						{3, verbs.WCSuccess, verbs.ExpWCRDMARead, 9000, q}, {4, verbs.WCSuccess, verbs.ExpWCCompSwap, 8, q},
						{5, verbs.WCSuccess, verbs.ExpWCFetchAdd, 8, q}}
					if !equalSums(sum(got), want) {
						n.t.Fatalf("to rank %d: %+v, want %+v", p, sum(got), want)
					}
					for i := range 9000 {
						if f.buf[12000+i] != byte(255-i%256+p) {
							n.t.Fatalf("RDMA READ from rank %d byte %d: %d", p, i, f.buf[12000+i])
						}
					}
					if a, b := le64(f.buf[40000:]), le64(f.buf[40008:]); a != 41 || b != 1000 {
						n.t.Errorf("from rank %d: CMP_AND_SWP saw %d (want 41), FETCH_AND_ADD %d (want 1000)", p, a, b)
					}
				})
				n.barrier("done")
			}},

		// A PSN the responder does not expect (ahead, behind, across the
		// wrap) is never taken; the requester's retries run out.
		{name: "WrongPSNAhead", attr: psnAttr(5000, 100), run: retryExceeded(10, 3)},
		{name: "WrongPSNBehind", attr: psnAttr(100, 5000), run: retryExceeded(10, 3)},
		{name: "WrongPSNWrap", attr: psnAttr(0xfffff0, 0x10), run: retryExceeded(10, 3)},
		// A QP number the peer device does not have: dropped there.
		{name: "WrongQPN", attr: requesterAttr(func(l *linkAttr) { l.timeout, l.retry, l.destQPN = 10, 2, 0x777 }),
			run: retryExceeded(10, 2)},
		// A GID where no device listens.
		{name: "UnreachableGID", attr: requesterAttr(func(l *linkAttr) { l.timeout, l.retry, l.dgid = 10, 2, &nobodyGID }),
			run: retryExceeded(10, 2)},

		// RNR: no receive WQE, rnr_retry 3: four NAKs, three waits of the
		// responder's min_rnr_timer (14: 1.28 ms), IBV_WC_RNR_RETRY_EXC_ERR.
		{name: "RNRRetriesRunOut",
			attr: func(self, peer int) linkAttr {
				l := defaultLink()
				l.rnr, l.minRNR = 3, 14
				return l
			},
			run: func(n *meshNode) {
				f := n.f
				if n.rank != 0 {
					n.barrier("done")
					return
				}
				start := time.Now()
				n.eachPeer(func(p int) {
					f.postSend(n.qp[p], f.send(1, verbs.ExpWRSend, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{0, 8}), 1))
				})
				n.eachPeer(func(p int) {
					c := n.await(p, 1, 5*time.Second)[0]
					if c.Status != verbs.WCRnrRetryExcErr {
						n.t.Errorf("to rank %d: %+v, want RNR_RETRY_EXC_ERR", p, sum([]verbs.ExpWC{c}))
					}
					// One packet, sent once and again after each of the
					// first 3 NAKs (the retransmissions were counted twice).
					if w, _ := f.d.QPWire(n.qp[p]); w.RNRNaksReceived != 4 || w.Retransmitted != 3 || w.TxPackets != 4 {
						n.t.Errorf("to rank %d: %d RNR NAKs, %d packets, %d sent again; want rnr_retry + 1 = 4, 4, 3", p, w.RNRNaksReceived, w.TxPackets, w.Retransmitted)
					}
					if min := 3 * 1280 * time.Microsecond; time.Since(start) < min {
						n.t.Errorf("to rank %d: failed after %v, before 3 RNR timers (%v)", p, time.Since(start), min)
					}
				})
				n.barrier("done")
			}},

		// A receive posted late, rnr_retry 7, min_rnr_timer 18 (5.12
		// ms): the send goes through, after RNR NAKs. The responder posts
		// its receive once it has sent two RNR NAKs (counted, not timed:
		// at load 5 a 20 ms sleep saw one retry only, the sender's timer
		// late), so the requester must have taken at least two.
		{name: "RNRLateReceive", attr: responderAttr(func(l *linkAttr) { l.minRNR = 18 }), run: func(n *meshNode) {
			f := n.f
			if n.rank != 0 {
				n.barrier("sent")
				for end := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
					f.poll(n.cq[0]) // a device run by polls takes the frames here
					if w, _ := f.d.QPWire(n.qp[0]); w.RNRNaksSent >= 2 {
						break
					} else if time.Now().After(end) {
						n.t.Fatalf("%d RNR NAKs sent in 5 s of 5.12 ms timers, want 2 before posting the receive", w.RNRNaksSent)
					}
				}
				f.postRecv(n.qp[0], f.recv(9, f.sges(f.mr.Lkey, [2]int{0, 16}), 1))
				if r := n.await(0, 1, 5*time.Second)[0]; r.Status != verbs.WCSuccess || string(f.buf[:4]) != "late" {
					n.t.Errorf("receive %+v, data %q", sum([]verbs.ExpWC{r}), f.buf[:4])
				}
				return
			}
			copy(f.buf, "late")
			n.eachPeer(func(p int) {
				f.postSend(n.qp[p], f.send(1, verbs.ExpWRSend, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{0, 4}), 1))
			})
			f.poll(n.cq[1]) // the send queues run in polls: send now
			n.barrier("sent")
			n.eachPeer(func(p int) {
				if c := n.await(p, 1, 5*time.Second)[0]; c.Status != verbs.WCSuccess {
					n.t.Errorf("to rank %d: %+v", p, sum([]verbs.ExpWC{c}))
				}
				if w, _ := f.d.QPWire(n.qp[p]); w.RNRNaksReceived < 2 {
					n.t.Errorf("to rank %d: %d RNR NAKs received, want the 2 the responder sent before posting its receive", p, w.RNRNaksReceived)
				}
			})
		}},

		// The responder checks rkey, range and access on every request:
		// REM_ACCESS_ERR at the requester, nothing written, the responder
		// in ERR with IBV_EVENT_QP_ACCESS_ERR.
		{name: "RemoteAccessWrongRkey", attr: plainAttr, run: remoteAccess(func(pi meshInfo) (uint64, uint32) { return pi.Addr + 1000, pi.Rkey ^ 0x100 })},
		{name: "RemoteAccessPastMR", attr: plainAttr, run: remoteAccess(func(pi meshInfo) (uint64, uint32) { return pi.Addr + bufSize - 10, pi.Rkey })},
		{name: "RemoteAccessNoWrite", attr: plainAttr,
			setup: func(n *meshNode) {
				if n.rank != 0 {
					n.extra = []uint32{n.f.reg(n.f.buf, verbs.AccessLocalWrite|verbs.AccessRemoteRead).Rkey}
				}
			},
			run: remoteAccess(func(pi meshInfo) (uint64, uint32) { return pi.Addr + 1000, pi.Extra[0] })},

		// A receive too small: LOC_LEN_ERR at the responder (the next
		// receive flushed), REM_INV_REQ_ERR at the requester.
		{name: "ReceiveTooSmall", attr: plainAttr, run: func(n *meshNode) {
			f := n.f
			if n.rank != 0 {
				f.postRecv(n.qp[0], f.recv(5, f.sges(f.mr.Lkey, [2]int{0, 10}), 1), f.recv(6, f.sges(f.mr.Lkey, [2]int{100, 10}), 1))
				n.barrier("posted")
				got := n.await(0, 2, 5*time.Second)
				if got[0].WRID != 5 || got[0].Status != verbs.WCLocLenErr || got[1].WRID != 6 || got[1].Status != verbs.WCWRFlushErr {
					n.t.Errorf("responder: %+v, want LOC_LEN_ERR then a flush", sum(got))
				}
				return
			}
			n.barrier("posted")
			n.eachPeer(func(p int) {
				f.postSend(n.qp[p], f.send(1, verbs.ExpWRSend, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{0, 3000}), 1))
			})
			n.eachPeer(func(p int) {
				if c := n.await(p, 1, 5*time.Second)[0]; c.Status != verbs.WCRemInvReqErr {
					n.t.Errorf("to rank %d: %+v, want REM_INV_REQ_ERR", p, sum([]verbs.ExpWC{c}))
				}
			})
		}},

		// A responder that dies (its device gone; between processes, kill
		// -9): the requester's outstanding send fails with
		// IBV_WC_RETRY_EXC_ERR within the timers, the QP goes to ERR and
		// its receives are flushed. Never a hang.
		{name: "PeerDies", attr: requesterAttr(func(l *linkAttr) { l.timeout, l.retry = 12, 3 }), run: func(n *meshNode) {
			f := n.f
			if n.rank != 0 {
				f.postRecv(n.qp[0], f.recv(1, f.sges(f.mr.Lkey, [2]int{0, 8}), 1))
				n.await(0, 1, 5*time.Second)
				n.barrier("up")
				n.die()
				return
			}
			n.eachPeer(func(p int) {
				f.postRecv(n.qp[p], f.recv(70, f.sges(f.mr.Lkey, [2]int{0, 8}), 1))
				f.postSend(n.qp[p], f.send(1, verbs.ExpWRSend, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{0, 8}), 1))
				n.await(p, 1, 5*time.Second)
			})
			n.barrier("up")
			time.Sleep(50 * time.Millisecond) // the peers are gone
			start := time.Now()
			n.eachPeer(func(p int) {
				f.postSend(n.qp[p], f.send(2, verbs.ExpWRSend, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{0, 8}), 1))
			})
			_, hi := retryBound(12, 3)
			n.eachPeer(func(p int) {
				got := n.await(p, 2, hi)
				want := []wcSum{{2, verbs.WCRetryExcErr, verbs.ExpWCSend, 0, n.qp[p].QPNum}, {70, verbs.WCWRFlushErr, verbs.ExpWCRecv, 0, n.qp[p].QPNum}}
				if !equalSums(sum(got), want) {
					n.t.Errorf("to rank %d after it died: %+v, want %+v", p, sum(got), want)
				}
			})
			if took := time.Since(start); took > hi {
				n.t.Errorf("the failures took %v (bound %v)", took, hi)
			}
		}},
	}
}

func psnAttr(sq, peerRQ uint32) func(self, peer int) linkAttr {
	return func(self, peer int) linkAttr {
		l := defaultLink()
		l.timeout, l.retry = 10, 3 // 4.2 ms × 4
		if self == 0 {
			l.sqPSN = sq
		} else {
			l.rqPSN = peerRQ
		}
		return l
	}
}

// remoteAccess: rank 0 writes where target points in each peer.
func remoteAccess(target func(meshInfo) (uint64, uint32)) func(n *meshNode) {
	return func(n *meshNode) {
		f := n.f
		if n.rank != 0 {
			for i := range f.buf {
				f.buf[i] = byte(i * 3)
			}
			before := append([]byte(nil), f.buf...)
			n.barrier("ready")
			n.barrier("done")
			if !bytes.Equal(f.buf, before) {
				n.t.Error("the responder's memory changed")
			}
			if st, _, _, _ := f.d.QPStats(n.qp[0]); st != verbs.QpsErr {
				n.t.Errorf("responder in %v, want ERR", st)
			}
			expectEvent(n.t, f.d, verbs.EventQPAccessErr, n.qp[0])
			return
		}
		copy(f.buf, "0123456789abcdef")
		n.barrier("ready")
		n.eachPeer(func(p int) {
			w := f.send(1, verbs.ExpWRRDMAWrite, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{0, 16}), 1)
			w.WR.RDMA().RemoteAddr, w.WR.RDMA().Rkey = target(n.peers[p])
			f.postSend(n.qp[p], w)
		})
		n.eachPeer(func(p int) {
			if c := n.await(p, 1, 5*time.Second)[0]; c.Status != verbs.WCRemAccessErr {
				n.t.Errorf("to rank %d: %+v, want REM_ACCESS_ERR", p, sum([]verbs.ExpWC{c}))
			}
		})
		n.barrier("done")
	}
}

// expectEvent reads one asynchronous event and wants it to be typ on qp.
func expectEvent(t testing.TB, d *Device, typ verbs.EventType, qp *verbs.QP) {
	t.Helper()
	if readable(t.(*testing.T), d.AsyncFD(), 2*time.Second) == 0 {
		t.Fatalf("no asynchronous event (want %v)", typ)
	}
	ev, err := d.GetAsyncEvent()
	if err != nil {
		t.Fatal(err)
	}
	defer d.AckAsyncEvent(ev)
	if ev.EventType != typ || ev.Element.QP() != qp {
		t.Fatalf("event %v on %p, want %v on %p", ev.EventType, ev.Element.QP(), typ, qp)
	}
}

func killSelf() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) }

func TestWireRules(t *testing.T) {
	for _, rule := range wireRules() {
		runMesh(t, 2, rule)
	}
}

// TestWireRulesProcesses runs every rule between 2 and 3 processes, each
// rank its own device at its own loopback address.
func TestWireRulesProcesses(t *testing.T) {
	self, isRank := multiproc.Rank()
	if !isRank && testing.Short() {
		t.Skip("SKIPPED in -short: starts 2 and 3 processes per rule")
	}
	for _, rule := range wireRules() {
		t.Run(rule.name, func(t *testing.T) {
			for _, n := range []int{2, 3} {
				t.Run(sizeName(n), func(t *testing.T) {
					if isRank {
						meshRank(t, self, rule) // the parent's -test.run chose this one
						return
					}
					cfg := multiproc.Config{Timeout: 60 * time.Second}
					if rule.name == "PeerDies" {
						cfg.Expect = func(rank int, err error) error {
							var ee *exec.ExitError
							if rank != 0 && errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL {
								return nil // killed itself, as it should
							}
							if rank != 0 {
								return errors.New("the responder was to die by SIGKILL")
							}
							return err
						}
					}
					multiproc.Run(t, n, cfg)
				})
			}
		})
	}
}

func sizeName(n int) string { return string(rune('0'+n)) + "procs" }

// TestWireLinkDown: two hosts (network namespaces joined by a veth
// pair), a device in each. Rank 1 pulls its own cable (its veth end
// goes down): its port goes down with IBV_EVENT_PORT_ERR (and comes back
// with IBV_EVENT_PORT_ACTIVE), and rank 0's send, which cannot reach it,
// fails with IBV_WC_RETRY_EXC_ERR within the timers, its receive
// flushed. The cable comes out only once rank 0 holds the ACK of the
// SEND before (barrier "acked"): rank 1's receive completes before its
// ACK has left (a poll holds a plain ACK back for a moment, see
// transport_wire.c's flush), and pulled then, the cable took that ACK
// with it and the first SEND failed instead, with 4 timeouts of 16.8 ms.
func TestWireLinkDown(t *testing.T) {
	self, isRank := multiproc.Rank()
	if !isRank {
		hosts := netns.Hosts(t, 2, "10.213.8")
		multiproc.Run(t, 2, multiproc.Config{Timeout: 60 * time.Second,
			Wrap: func(r int) []string { return hosts[r].Wrap() },
			Env: func(r int) []string {
				return []string{AddrEnv + "=" + hosts[r].Addr, "VXNS_NAME=" + hosts[r].Name, "VXNS_DEV=" + hosts[r].Dev}
			}})
		return
	}
	// The ACK timer at 67 ms (timeout 14), 3 retries: WR 1's budget,
	// 268 ms, also covers the connection's setup in fresh namespaces on
	// a loaded host (a 67 ms budget ran out there now and then).
	const timeout, retries = 14, 3
	rule := wireRule{name: "LinkDown", attr: requesterAttr(func(l *linkAttr) { l.timeout, l.retry = timeout, retries }), run: func(n *meshNode) {
		f := n.f
		h := netns.Host{Name: os.Getenv("VXNS_NAME"), Dev: os.Getenv("VXNS_DEV")}
		if n.rank == 1 {
			f.postRecv(n.qp[0], f.recv(1, f.sges(f.mr.Lkey, [2]int{0, 8}), 1))
			if got := n.await(0, 1, 5*time.Second); got[0].Status != verbs.WCSuccess {
				n.t.Errorf("the SEND before the link went down: %+v, want success", sum(got))
			}
			n.barrier("acked")
			h.SetLink(n.t, false)
			expectPortEvent(n.t, f.d, verbs.EventPortErr)
			if a, _ := f.d.QueryPort(1); a.State != verbs.PortDown {
				n.t.Errorf("port %v with its link down", a.State)
			}
			n.barrier("down")
			n.barrier("checked")
			h.SetLink(n.t, true)
			expectPortEvent(n.t, f.d, verbs.EventPortActive)
			return
		}
		f.postRecv(n.qp[1], f.recv(70, f.sges(f.mr.Lkey, [2]int{0, 8}), 1))
		f.postSend(n.qp[1], f.send(1, verbs.ExpWRSend, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{0, 8}), 1))
		if got := n.await(1, 1, 5*time.Second); len(got) != 1 || got[0].Status != verbs.WCSuccess || got[0].WRID != 1 {
			n.t.Fatalf("the SEND before the link went down: %+v, want WR 1 with success", sum(got))
		}
		n.barrier("acked")
		n.barrier("down")
		f.postSend(n.qp[1], f.send(2, verbs.ExpWRSend, verbs.ExpSendSignaled, f.sges(f.mr.Lkey, [2]int{0, 8}), 1))
		_, hi := retryBound(timeout, retries)
		got := n.await(1, 2, hi)
		want := []wcSum{{2, verbs.WCRetryExcErr, verbs.ExpWCSend, 0, n.qp[1].QPNum}, {70, verbs.WCWRFlushErr, verbs.ExpWCRecv, 0, n.qp[1].QPNum}}
		if !equalSums(sum(got), want) {
			n.t.Errorf("with the peer's link down: %+v, want %+v", sum(got), want)
		}
		n.barrier("checked")
	}}
	meshRank(t, self, rule)
}

// expectPortEvent reads the next asynchronous event and wants it to be
// typ on port 1.
func expectPortEvent(t testing.TB, d *Device, typ verbs.EventType) {
	t.Helper()
	if readable(t.(*testing.T), d.AsyncFD(), 3*time.Second) == 0 {
		t.Fatalf("no asynchronous event (want %v)", typ)
	}
	ev, err := d.GetAsyncEvent()
	if err != nil {
		t.Fatal(err)
	}
	if ev.EventType != typ || ev.Element.PortNum() != 1 {
		t.Fatalf("event %v (port %d), want %v on port 1", ev.EventType, ev.Element.PortNum(), typ)
	}
	if err := d.AckAsyncEvent(ev); err != nil {
		t.Fatal(err)
	}
}
