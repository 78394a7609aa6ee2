//go:build linux && cgo

/*
 * softdev RC transport: what an HCA's reliable-connection transport does
 * with a QP's data WQEs once the engine hands them over, and with the
 * packets that arrive for it. Every rule an HCA applies per packet lives
 * here, the same for a peer QP on this device and one across the wire:
 *
 *  - Requester: each SEND, WRITE, READ or atomic WQE takes PSNs from the
 *    QP's sq_psn on, and goes out as path_mtu-sized packets (a READ as
 *    one request, its response as packets). It completes when the
 *    responder answers: an ACK covering its last PSN, its READ response
 *    or its ATOMIC ACK; answers come in order, and an ACK answers every
 *    PSN up to its own. A NAK ends the WQE with the error it names. The
 *    local ACK timer (4.096 us << timeout) sends everything unanswered
 *    again, retry_cnt times, then fails the oldest WQE with
 *    IBV_WC_RETRY_EXC_ERR; a PSN sequence NAK resends from its PSN and
 *    counts as a retry too. An RNR NAK waits out the responder's
 *    min_rnr_timer and resends, rnr_retry times (7: for ever), then
 *    IBV_WC_RNR_RETRY_EXC_ERR. max_rd_atomic READs and atomics may be
 *    outstanding at once.
 *  - Responder: a packet is taken only if it names a QP in RTR or RTS
 *    whose path leads back to its sender (the source GID, the source QP
 *    number), with the expected PSN: one ahead of it gets a sequence NAK
 *    (once until the expected one comes), one behind it is a duplicate
 *    and is answered again without being executed again (READs and
 *    atomics from what was kept of them). Then the opcode sequence, the
 *    QP's access flags, a receive WQE for a SEND (or an RDMA WRITE with
 *    immediate; none: an RNR NAK), the packet lengths against path_mtu
 *    and the RETH or AtomicETH against the MRs. Errors a receive WQE can
 *    report complete it (LOC_LEN_ERR, LOC_PROT_ERR) and NAK the
 *    requester; the others (an invalid request, an access violation)
 *    NAK the requester and move the responder to the error state with
 *    the affiliated event an HCA raises (IBV_EVENT_QP_REQ_ERR,
 *    IBV_EVENT_QP_ACCESS_ERR). The first packet a QP takes in RTR raises
 *    IBV_EVENT_COMM_EST.
 *
 * Between QPs of one device the link delivers within the engine's step
 * (transport_link.c), which keeps in-process schedules deterministic: nothing is
 * ever lost there, so what the timers would retry is decided at once. A
 * packet nobody answers (no such QP, a QP not connected back, a PSN out
 * of sequence) fails its WQE with IBV_WC_RETRY_EXC_ERR as soon as the
 * step ends, and a SEND that would find no receive WQE is not sent: it
 * waits, at no cost, until one is posted or released (an RNR retry that
 * never gives up). Across the wire (transport_wire.c) time is real.
 */
#include <errno.h>
#include <string.h>
#include <time.h>
#include "transport.h"

enum {
	SD_WINDOW     = 4096, /* PSNs a QP may have unanswered: 16 MiB at a 4 KiB MTU */
	SD_TX_BUDGET  = 32,  /* packets one step of one QP sends */
};

/* ------------------------------------------------------------------ */
/* PSNs and time                                                        */
/* ------------------------------------------------------------------ */

static uint32_t psn_add(uint32_t a, uint32_t n) { return (a + n) & 0xffffff; }

/* a - b in the 24-bit PSN space: > 0 when a comes after b. */
static int32_t psn_diff(uint32_t a, uint32_t b) { return (int32_t)((a - b) << 8) >> 8; }

uint64_t sd_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* The local ACK timeout, 4.096 us << timeout (0: none, wait for ever). */
static uint64_t ack_timeout(const struct sd_port *port, const struct sd_qp *q)
{
	if (q->path.timeout == 0)
		return 0;
	return (uint64_t)((double)(4096ull << (q->path.timeout > 31 ? 31 : q->path.timeout)) * port->timescale);
}

/* The RNR NAK timer an encoded min_rnr_timer asks for, in units of 10 us
 * (the InfiniBand table: 0 is 655.36 ms, 1 is 0.01 ms, ..., 31 is
 * 491.52 ms). */
static const uint32_t rnr_10us[32] = {
	65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192,
	256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152,
};

static uint64_t rnr_delay(const struct sd_port *port, uint8_t t)
{
	return (uint64_t)((double)rnr_10us[t & 31] * 10000.0 * port->timescale);
}

static void arm(struct sd_port *port, struct sd_qp *q, uint64_t delay)
{
	struct sd_req *r = &q->req;
	r->deadline = sd_now() + delay;
	if (!r->armed) {
		r->armed = 1;
		port->timers++;
	}
	if (port->timers == 1 || r->deadline < port->next_deadline)
		port->next_deadline = r->deadline;
	sd_net_timer_armed(port, r->deadline);
}

static void disarm(struct sd_port *port, struct sd_qp *q)
{
	if (q->req.armed) {
		q->req.armed = 0;
		port->timers--;
	}
}

/* After an answer: restart the ACK timer while PSNs are outstanding. */
static void rearm(struct sd_port *port, struct sd_qp *q)
{
	uint64_t t = ack_timeout(port, q);
	if (q->req.una != q->req.npsn && t != 0 && !q->req.rnr_wait)
		arm(port, q, t);
	else if (!q->req.rnr_wait)
		disarm(port, q);
}

/* ------------------------------------------------------------------ */
/* Packets out                                                          */
/* ------------------------------------------------------------------ */

/* The transport of a QP's packets. */
static uint8_t tp_of(const struct sd_qp *q)
{
	return q->ibv.qp_type == IBV_QPT_UD ? SD_TP_UD : q->ibv.qp_type == IBV_QPT_UC ? SD_TP_UC : SD_TP_RC;
}

static void pkt_init(struct sd_pkt *p, const struct sd_qp *q, uint8_t op, uint32_t psn)
{
	memset(p, 0, sizeof *p);
	p->op = op;
	p->tp = tp_of(q);
	p->dst_qpn = q->path.dest_qpn;
	p->src_qpn = q->ibv.qp_num;
	p->psn = psn;
}

static void send_ack(struct sd_port *port, struct sd_qp *q, uint8_t syndrome, uint32_t psn)
{
	struct sd_pkt p;
	pkt_init(&p, q, SD_PKT_ACK, psn);
	p.syndrome = syndrome;
	p.msn = q->resp.msn;
	if (syndrome == SD_AETH_RNR) {
		p.rnr_timer = q->path.min_rnr_timer;
		q->ws.rnr_naks_tx++;
	} else if (syndrome == SD_AETH_NAK_SEQ) {
		q->ws.seq_naks_tx++;
	}
	if (q->path.link != NULL)
		sd_link_send(port, q->path.link, &p);
}

static int is_rdatomic(uint8_t op)
{
	return op == SD_OP_READ || op == SD_OP_CMP_SWAP || op == SD_OP_FETCH_ADD;
}

/* PSNs a data WQE takes. */
static uint32_t wqe_npkts(const struct sd_qp *q, const struct sd_wqe *w, uint64_t len)
{
	if (w->op == SD_OP_CMP_SWAP || w->op == SD_OP_FETCH_ADD || len == 0)
		return 1;
	return (uint32_t)((len + q->path.mtu - 1) / q->path.mtu);
}

/* Where the payload of a send WQE comes from: its SGEs, its inline
 * bytes, or a calc result (recomputed for each transmission, as an HCA
 * reads the operands again). */
struct src {
	const struct ibv_sge *sg;
	int                   nsg;
	const uint8_t        *flat; /* inline or calc: contiguous */
	uint64_t              len;
	uint8_t               calc[16];
};

static void wqe_src(struct sd_qp *q, uint64_t pos, struct sd_wqe *w, struct ibv_sge *sg, struct src *s)
{
	memset(s, 0, sizeof *s);
	s->sg = sg;
	s->nsg = w->num_sge;
	s->len = w->u.xfer.length;
	if (w->flags & SD_WQE_INLINE) {
		s->flat = &q->sq.inl[(size_t)(pos % q->sq.depth) * q->sq.max_inline];
		s->nsg = 0;
	} else if (w->flags & SD_WQE_CALC) {
		s->len = sd_calc(w, sg, s->calc);
		s->flat = s->calc;
		s->nsg = 0;
	}
}

/* Sends packets of the WQE at pos from packet index from on (the READ
 * request or atomic as one packet). Returns the packets sent; fewer than
 * asked when the link is busy. The last one sent asks for an ACK. */
static uint32_t emit(struct sd_port *port, struct sd_qp *q, uint64_t pos, uint32_t from, uint32_t budget)
{
	struct ibv_sge *sg;
	struct sd_wqe *w = sd_wqe_at(&q->sq, pos, &sg);
	struct sd_link *l = q->path.link;
	uint32_t mtu = q->path.mtu, n = 0;

	if (w->op == SD_OP_READ || w->op == SD_OP_CMP_SWAP || w->op == SD_OP_FETCH_ADD) {
		if (from != 0 && w->op != SD_OP_READ)
			return 0;
		if (sd_link_busy(port, l))
			return 0;
		struct sd_pkt p;
		pkt_init(&p, q, w->op == SD_OP_READ ? SD_PKT_READ_REQ : w->op == SD_OP_CMP_SWAP ? SD_PKT_CMP_SWAP : SD_PKT_FETCH_ADD,
		         psn_add(w->psn, from));
		p.flags = SD_PKT_F_ACKREQ;
		if (w->op == SD_OP_READ) {
			/* Resent from a response packet on: the rest of the range. */
			uint64_t off = (uint64_t)from * mtu;
			p.va = w->u.xfer.remote_addr + off;
			p.rkey = w->u.xfer.rkey;
			p.dma_len = (uint32_t)(w->u.xfer.length - off);
		} else {
			p.va = w->u.atomic.remote_addr;
			p.rkey = w->u.atomic.rkey;
			p.swap_add = w->op == SD_OP_CMP_SWAP ? w->u.atomic.swap : w->u.atomic.compare_add;
			p.compare = w->u.atomic.compare_add;
		}
		sd_link_send(port, l, &p);
		q->ws.tx_pkts++;
		return 1;
	}

	struct src s;
	wqe_src(q, pos, w, sg, &s);
	int write = w->op == SD_OP_WRITE || w->op == SD_OP_WRITE_IMM;
	int imm = w->op == SD_OP_SEND_IMM || w->op == SD_OP_WRITE_IMM;
	for (uint32_t i = from; i < w->npkts && n < budget; i++) {
		if (sd_link_busy(port, l))
			break;
		int first = i == 0, last = i + 1 == w->npkts;
		uint8_t op;
		if (first && last)
			op = write ? SD_PKT_WRITE_ONLY : SD_PKT_SEND_ONLY;
		else if (first)
			op = write ? SD_PKT_WRITE_FIRST : SD_PKT_SEND_FIRST;
		else if (last)
			op = write ? SD_PKT_WRITE_LAST : SD_PKT_SEND_LAST;
		else
			op = write ? SD_PKT_WRITE_MIDDLE : SD_PKT_SEND_MIDDLE;
		struct sd_pkt p;
		pkt_init(&p, q, op, psn_add(w->psn, i));
		uint64_t off = (uint64_t)i * mtu;
		p.len = (uint32_t)(s.len - off < mtu ? s.len - off : mtu);
		if (s.flat != NULL) {
			if (s.flat == s.calc) {
				memcpy(p.small, s.calc + off, p.len);
				p.data = p.small;
			} else {
				p.data = s.flat + off;
			}
		} else {
			p.sg = s.sg;
			p.nsg = s.nsg;
			p.off = off;
		}
		if (first && write) {
			p.va = w->u.xfer.remote_addr;
			p.rkey = w->u.xfer.rkey;
			p.dma_len = (uint32_t)s.len;
		}
		if (last && imm) {
			p.flags |= SD_PKT_F_IMM;
			p.imm = w->u.xfer.imm;
		}
		if (last && (w->flags & SD_WQE_SOLICITED))
			p.flags |= SD_PKT_F_SE;
		if (last || n + 1 == budget)
			p.flags |= SD_PKT_F_ACKREQ; /* the last of a burst: its answer says the burst arrived */
		sd_link_send(port, l, &p);
		q->ws.tx_pkts++;
		n++;
	}
	return n;
}

/* The send queue position of the transmitted WQE that took psn, or
 * UINT64_MAX. Only WQEs between tail and hw can have taken one. */
static uint64_t wqe_of_psn(struct sd_qp *q, uint32_t psn)
{
	for (uint64_t pos = q->sq.tail; pos < q->req.hw; pos++) {
		struct sd_wqe *w = sd_wqe_at(&q->sq, pos, NULL);
		if (w->state != SD_WQE_SENT)
			continue;
		int32_t k = psn_diff(psn, w->psn);
		if (k >= 0 && (uint32_t)k < w->npkts)
			return pos;
	}
	return UINT64_MAX;
}

/* Ends the transmitted WQE at pos with status (an error). It retires once
 * the WQEs before it have, and then puts the QP in the error state (the
 * engine flushes the rest); until then nothing after it is sent (the
 * transmit position stops at a failed WQE). */
static void fail_wqe(struct sd_port *port, struct sd_qp *q, uint64_t pos, uint32_t status)
{
	struct sd_wqe *w = sd_wqe_at(&q->sq, pos, NULL);
	if (w->state == SD_WQE_SENT && is_rdatomic(w->op) && q->req.rd_out > 0)
		q->req.rd_out--;
	w->state = SD_WQE_DONE;
	w->status = (uint8_t)status;
	sd_sq_retire(port->dev, q);
}

/*
 * The step for a data WQE at sq.next: its first transmission checks the
 * local SGEs (a bad one fails it with IBV_WC_LOC_PROT_ERR before any
 * packet goes) and gives it its PSNs; later calls after a rewind send it
 * again with the same PSNs. Returns 1 if it moved.
 */
int sd_rc_transmit(struct sd_port *port, struct sd_qp *q)
{
	struct sd_req *r = &q->req;
	struct ibv_sge *sg;
	uint64_t pos = q->sq.next;
	struct sd_wqe *w = sd_wqe_at(&q->sq, pos, &sg);
	struct sd_link *l = q->path.link;

	int uc = q->ibv.qp_type == IBV_QPT_UC;
	if (r->rnr_wait)
		return 0;
	int rdat = is_rdatomic(w->op);
	/* The local SGEs, which the packets read (a READ's and an atomic's
	 * answers write them), are checked at every transmission: the first,
	 * each later burst of a message the link took in parts, and each
	 * retransmission. */
	int local_ok = (w->flags & SD_WQE_INLINE) || sd_local_ok(port->dev, q->pd, sg, w->num_sge, rdat);
	if (w->state == SD_WQE_QUEUED) {
		if (!local_ok) {
			sd_sq_done_next(port->dev, q, IBV_WC_LOC_PROT_ERR);
			return 1;
		}
		if (rdat && q->path.max_rd_atomic == 0) {
			sd_sq_done_next(port->dev, q, IBV_WC_LOC_QP_OP_ERR);
			return 1;
		}
		if (rdat && r->rd_out >= q->path.max_rd_atomic)
			return 0;
		if (psn_diff(r->npsn, r->una) >= SD_WINDOW || sd_link_busy(port, l))
			return 0;
		/* A SEND to a QP of this device with no receive WQE for it
		 * waits here instead of being NAKed (see the top). UC has no
		 * RNR: there the message is sent, and dropped. */
		if (!uc && l->kind == SD_LINK_LOOP &&
		    (w->op == SD_OP_SEND || w->op == SD_OP_SEND_IMM || w->op == SD_OP_WRITE_IMM)) {
			struct sd_qp *p = sd_qp_by_num(port->dev, q->path.dest_qpn);
			if (p != NULL && (p->ibv.state == IBV_QPS_RTR || p->ibv.state == IBV_QPS_RTS) &&
			    p->path.link == &port->loop && p->path.dest_qpn == q->ibv.qp_num && !sd_recv_ready(p))
				return 0;
		}
		uint64_t len = w->op == SD_OP_CMP_SWAP || w->op == SD_OP_FETCH_ADD ? 8 : w->u.xfer.length;
		if (w->flags & SD_WQE_CALC) {
			uint8_t tmp[16];
			len = sd_calc(w, sg, tmp);
		}
		w->psn = r->npsn;
		w->npkts = wqe_npkts(q, w, len);
		r->npsn = psn_add(r->npsn, w->npkts);
		r->sent = 0;
		if (rdat)
			r->rd_out++;
		w->state = SD_WQE_SENT;
		if (uc)
			r->una = r->npsn; /* nothing is ever answered: nothing outstanding */
		else if (r->una == w->psn || !r->armed)
			rearm(port, q);
	} else if (sd_link_busy(port, l)) {
		return 0;
	} else if (!local_ok) {
		/* Its MR went after its first packet left: it ends with a local
		 * protection error, and nothing more of it is read. */
		fail_wqe(port, q, pos, IBV_WC_LOC_PROT_ERR);
		return 1;
	}
	uint32_t n = emit(port, q, pos, r->sent, SD_TX_BUDGET);
	if (n == 0)
		return 0;
	if (pos < r->hw)
		q->ws.retrans += n;
	/* A READ or an atomic is one request, however many PSNs its
	 * answer takes. */
	int whole = is_rdatomic(w->op) || r->sent + n >= w->npkts;
	r->sent = whole ? 0 : r->sent + n;
	if (uc) {
		/* UC: the requester completes a WQE when its last packet is out
		 * (IB spec 9.7.x: no acknowledgements, no retries). */
		if (whole) {
			q->sq.next = pos + 1;
			r->hw = q->sq.next;
			w->state = SD_WQE_DONE;
			w->status = IBV_WC_SUCCESS;
			sd_sq_retire(port->dev, q);
		}
		return 1;
	}
	if (l->kind == SD_LINK_LOOP) {
		port->loop_sender = q;
		port->loop_upto = whole ? psn_add(w->psn, w->npkts) : psn_add(w->psn, r->sent);
	}
	if (whole) {
		q->sq.next = pos + 1;
		if (q->sq.next > r->hw)
			r->hw = q->sq.next;
	}
	return 1;
}

/*
 * UD: a SEND is one datagram to the QP and Q_Key its WR named, at the
 * device its address handle names (u.ud), with a GRH if that handle had
 * one, and the requester completes it once the datagram is out: nothing
 * answers it, and what is not taken (no such QP, a wrong Q_Key, no
 * receive WQE) is dropped there unseen. A Q_Key with its high bit set
 * means the QP's own (IB spec 10.2.4, as mlx4 and mlx5 send it). A
 * datagram longer than the port's MTU completes too and is never
 * delivered: the fabric drops it (rxe's fake_udp_send, after IBA 10.7.3).
 * Local SGEs are checked first (IBV_WC_LOC_PROT_ERR), as for any send.
 * Returns 1 if it moved.
 */
int sd_ud_transmit(struct sd_port *port, struct sd_qp *q)
{
	struct ibv_sge *sg;
	struct sd_wqe *w = sd_wqe_at(&q->sq, q->sq.next, &sg);
	struct sd_link *l = w->u.ud.link;
	if (!(w->flags & SD_WQE_UD) || l == NULL) {
		sd_sq_done_next(port->dev, q, IBV_WC_LOC_QP_OP_ERR); /* cannot be: post builds every UD SEND */
		return 1;
	}
	if (sd_link_busy(port, l))
		return 0;
	if (!(w->flags & SD_WQE_INLINE) && !sd_local_ok(port->dev, q->pd, sg, w->num_sge, 0)) {
		sd_wqe_release(port->dev, w);
		sd_sq_done_next(port->dev, q, IBV_WC_LOC_PROT_ERR);
		return 1;
	}
	struct src s;
	wqe_src(q, q->sq.next, w, sg, &s);
	if (s.len <= sd_port_mtu(port)) {
		struct sd_pkt p;
		pkt_init(&p, q, SD_PKT_SEND_ONLY, q->req.npsn);
		p.dst_qpn = w->u.ud.remote_qpn;
		p.qkey = (w->u.ud.remote_qkey & 0x80000000u) ? q->qkey : w->u.ud.remote_qkey;
		p.len = (uint32_t)s.len;
		if (s.flat != NULL) {
			p.data = s.flat;
		} else {
			p.sg = s.sg;
			p.nsg = s.nsg;
		}
		if (w->op == SD_OP_SEND_IMM) {
			p.flags |= SD_PKT_F_IMM;
			p.imm = w->u.ud.imm;
		}
		if (w->flags & SD_WQE_SOLICITED)
			p.flags |= SD_PKT_F_SE;
		if (w->flags & SD_WQE_GRH) {
			p.flags |= SD_PKT_F_GRH;
			p.hop_limit = w->u.ud.hop_limit;
		}
		sd_link_send(port, l, &p);
		q->ws.tx_pkts++;
	} else {
		q->ws.dropped++;
	}
	w->psn = q->req.npsn;
	w->npkts = 1;
	q->req.npsn = q->req.una = psn_add(q->req.npsn, 1);
	sd_wqe_release(port->dev, w);
	sd_sq_done_next(port->dev, q, IBV_WC_SUCCESS);
	return 1;
}

/* Sends again, at once, what a rewind put back (WQEs below hw), without
 * running the rest of the send queue: what the transport retries itself
 * in a device that is driven by polls. */
static void retransmit(struct sd_port *port, struct sd_qp *q)
{
	while (q->ibv.state == IBV_QPS_RTS && q->sq.next < q->req.hw && !q->req.rnr_wait) {
		struct sd_wqe *w = sd_wqe_at(&q->sq, q->sq.next, NULL);
		if (w->state == SD_WQE_DONE) {
			if (w->status != IBV_WC_SUCCESS)
				return;
			q->sq.next++;
			continue;
		}
		if (!sd_rc_transmit(port, q))
			return;
	}
}

/* Goes back to psn: the WQE that took it is sent again from that packet,
 * and every transmitted WQE after it (their PSNs stay). */
static void rewind_to(struct sd_qp *q, uint32_t psn)
{
	uint64_t pos = wqe_of_psn(q, psn);
	if (pos == UINT64_MAX)
		return;
	struct sd_wqe *w = sd_wqe_at(&q->sq, pos, NULL);
	q->sq.next = pos;
	/* A SEND or WRITE from that packet; a READ asks again for the rest
	 * of its range from that response on; an atomic is one packet. */
	q->req.sent = w->op == SD_OP_CMP_SWAP || w->op == SD_OP_FETCH_ADD ? 0 : (uint32_t)psn_diff(psn, w->psn);
}

/* Ends the WQE that took psn (the oldest unanswered) with status; the
 * engine retires it, puts the QP in the error state and flushes the rest. */
static void fail_at(struct sd_port *port, struct sd_qp *q, uint32_t psn, uint32_t status)
{
	uint64_t pos = wqe_of_psn(q, psn);
	if (pos == UINT64_MAX)
		return;
	disarm(port, q);
	fail_wqe(port, q, pos, status);
}

/* Every transmitted WQE whose PSNs end at or before psn is answered
 * (a READ or an atomic only by its own response: an ACK past one means
 * its response was lost, so it is sent again). */
static void ack_upto(struct sd_port *port, struct sd_qp *q, uint32_t psn)
{
	struct sd_req *r = &q->req;
	if (psn_diff(psn, r->una) < 0)
		return; /* answers nothing new */
	for (uint64_t pos = q->sq.tail; pos < r->hw; pos++) {
		struct sd_wqe *w = sd_wqe_at(&q->sq, pos, NULL);
		if (w->state == SD_WQE_DONE)
			continue;
		if (w->state != SD_WQE_SENT)
			break;
		uint32_t last = psn_add(w->psn, w->npkts - 1);
		if (psn_diff(last, psn) > 0) {
			r->una = psn_add(psn, 1);
			break;
		}
		if (is_rdatomic(w->op)) {
			r->una = w->psn;
			q->ws.dropped++;
			rewind_to(q, w->psn);
			retransmit(port, q);
			break;
		}
		w->state = SD_WQE_DONE;
		w->status = IBV_WC_SUCCESS;
		r->una = psn_add(last, 1);
	}
	r->retries = q->path.retry_cnt;
	r->rnr_left = q->path.rnr_retry;
	/* The transmit position skips what was answered meanwhile. */
	while (q->sq.next < r->hw && sd_wqe_at(&q->sq, q->sq.next, NULL)->state == SD_WQE_DONE &&
	       sd_wqe_at(&q->sq, q->sq.next, NULL)->status == IBV_WC_SUCCESS) {
		q->sq.next++;
		r->sent = 0;
	}
	rearm(port, q);
	sd_sq_retire(port->dev, q);
}

/* A READ response or ATOMIC ACK for the WQE at pos, taken in order. */
static void answer_rdatomic(struct sd_port *port, struct sd_qp *q, const struct sd_pkt *p)
{
	struct sd_req *r = &q->req;
	uint64_t pos = wqe_of_psn(q, p->psn);
	if (pos == UINT64_MAX) {
		q->ws.dropped++;
		return;
	}
	struct ibv_sge *sg;
	struct sd_wqe *w = sd_wqe_at(&q->sq, pos, &sg);
	int atomic = p->op == SD_PKT_ATOMIC_ACK;
	if ((atomic && w->op != SD_OP_CMP_SWAP && w->op != SD_OP_FETCH_ADD) || (!atomic && w->op != SD_OP_READ)) {
		q->ws.dropped++;
		return;
	}
	/* A response answers every PSN before it. */
	if (psn_diff(w->psn, r->una) > 0)
		ack_upto(port, q, psn_add(w->psn, 0xffffff));
	if (p->psn != r->una || w->state != SD_WQE_SENT) {
		q->ws.dropped++; /* out of order: a duplicate, or one after a loss */
		return;
	}
	uint32_t k = (uint32_t)psn_diff(p->psn, w->psn);
	if (atomic && !sd_local_ok(port->dev, q->pd, sg, w->num_sge, 1)) {
		fail_wqe(port, q, pos, IBV_WC_LOC_PROT_ERR); /* its MR went while it was out */
		return;
	}
	if (atomic) {
		uint8_t v[8];
		memcpy(v, &p->swap_add, 8);
		struct ibv_sge flat = { (uintptr_t)v, 8, 0 };
		sd_sg_copy(sg, w->num_sge, 0, &flat, 1, 0, 8);
	} else {
		uint64_t off = (uint64_t)k * q->path.mtu;
		int first = p->op == SD_PKT_READ_RESP_FIRST || p->op == SD_PKT_READ_RESP_ONLY;
		int last = p->op == SD_PKT_READ_RESP_LAST || p->op == SD_PKT_READ_RESP_ONLY;
		uint64_t want = w->u.xfer.length - off < q->path.mtu ? w->u.xfer.length - off : q->path.mtu;
		if ((k == 0) != first || (k + 1 == w->npkts) != last || p->len != want) {
			q->ws.dropped++;
			return;
		}
		if (!sd_local_ok(port->dev, q->pd, sg, w->num_sge, 1)) {
			fail_wqe(port, q, pos, IBV_WC_LOC_PROT_ERR); /* its MR went while it was out */
			return;
		}
		if (p->data != NULL) {
			struct ibv_sge flat = { (uintptr_t)p->data, p->len, 0 };
			sd_sg_copy(sg, w->num_sge, off, &flat, 1, 0, p->len);
		} else {
			sd_sg_copy(sg, w->num_sge, off, p->sg, p->nsg, p->off, p->len);
		}
	}
	r->una = psn_add(p->psn, 1);
	r->retries = q->path.retry_cnt;
	r->rnr_left = q->path.rnr_retry;
	if (k + 1 == w->npkts) {
		w->state = SD_WQE_DONE;
		w->status = IBV_WC_SUCCESS;
		r->rd_out--;
	}
	rearm(port, q);
	sd_sq_retire(port->dev, q);
}

static void requester_rx(struct sd_port *port, struct sd_qp *q, const struct sd_pkt *p)
{
	struct sd_req *r = &q->req;
	if (q->ibv.state != IBV_QPS_RTS) {
		q->ws.dropped++;
		return;
	}
	/* Answers outside the outstanding PSNs are ghosts. */
	if (psn_diff(p->psn, r->una) < 0 || psn_diff(p->psn, r->npsn) >= 0) {
		q->ws.dropped++;
		return;
	}
	if (p->op != SD_PKT_ACK) {
		answer_rdatomic(port, q, p);
		return;
	}
	uint32_t before = psn_add(p->psn, 0xffffff); /* p->psn - 1 */
	switch (p->syndrome) {
	case SD_AETH_ACK:
		ack_upto(port, q, p->psn);
		return;
	case SD_AETH_RNR:
		ack_upto(port, q, before);
		q->ws.rnr_naks_rx++;
		if (q->path.rnr_retry != 7) {
			if (r->rnr_left == 0) {
				fail_at(port, q, p->psn, IBV_WC_RNR_RETRY_EXC_ERR);
				return;
			}
			r->rnr_left--;
		}
		rewind_to(q, p->psn);
		r->rnr_wait = 1;
		arm(port, q, rnr_delay(port, p->rnr_timer));
		return;
	case SD_AETH_NAK_SEQ:
		ack_upto(port, q, before);
		q->ws.seq_naks_rx++;
		if (r->rnr_wait)
			return; /* the rest of a burst an RNR NAK already stopped */
		if (r->retries == 0) {
			fail_at(port, q, p->psn, IBV_WC_RETRY_EXC_ERR);
			return;
		}
		r->retries--;
		rewind_to(q, p->psn);
		retransmit(port, q);
		return;
	case SD_AETH_NAK_INV:
		ack_upto(port, q, before);
		fail_at(port, q, p->psn, IBV_WC_REM_INV_REQ_ERR);
		return;
	case SD_AETH_NAK_ACCESS:
		ack_upto(port, q, before);
		fail_at(port, q, p->psn, IBV_WC_REM_ACCESS_ERR);
		return;
	case SD_AETH_NAK_OP:
		ack_upto(port, q, before);
		fail_at(port, q, p->psn, IBV_WC_REM_OP_ERR);
		return;
	}
	q->ws.dropped++;
}

/* ------------------------------------------------------------------ */
/* Responder                                                            */
/* ------------------------------------------------------------------ */

/* An error no receive WQE can report: NAK it and move the responder to
 * the error state, with the affiliated event. */
static void responder_fatal(struct sd_port *port, struct sd_qp *q, uint8_t syndrome, int event)
{
	send_ack(port, q, syndrome, q->resp.epsn);
	q->resp.in_msg = 0;
	sd_qp_error(port->dev, q);
	sd_raise(port->dev, event, &q->ibv);
}

/* Sends the responses of a READ the responder kept, from PSN psn on. */
static void read_reply(struct sd_port *port, struct sd_qp *q, const struct sd_rdres *res, uint32_t psn)
{
	uint32_t mtu = q->path.mtu;
	uint32_t n = (uint32_t)psn_diff(res->last, res->first) + 1;
	uint32_t k0 = (uint32_t)psn_diff(psn, res->first);
	for (uint32_t k = k0; k < n; k++) {
		uint8_t op;
		if (n == 1)
			op = SD_PKT_READ_RESP_ONLY;
		else if (k == 0)
			op = SD_PKT_READ_RESP_FIRST;
		else if (k + 1 == n)
			op = SD_PKT_READ_RESP_LAST;
		else
			op = SD_PKT_READ_RESP_MIDDLE;
		struct sd_pkt p;
		pkt_init(&p, q, op, psn_add(res->first, k));
		uint64_t off = (uint64_t)k * mtu;
		p.len = (uint32_t)(res->len - off < mtu ? res->len - off : mtu);
		p.data = (const uint8_t *)(uintptr_t)(res->va + off);
		p.msn = q->resp.msn;
		sd_link_send(port, q->path.link, &p);
	}
}

static struct sd_rdres *find_res(struct sd_qp *q, uint32_t psn, int read)
{
	for (uint32_t i = 0; i < q->path.max_dest_rd_atomic && i < 16; i++) {
		struct sd_rdres *r = &q->resp.res[i];
		if (r->op == 0 || (r->op == SD_OP_READ) != read)
			continue;
		if (psn_diff(psn, r->first) >= 0 && psn_diff(psn, r->last) <= 0)
			return r;
	}
	return NULL;
}

static struct sd_rdres *new_res(struct sd_qp *q)
{
	uint32_t n = q->path.max_dest_rd_atomic < 16 ? q->path.max_dest_rd_atomic : 16;
	struct sd_rdres *r = &q->resp.res[q->resp.res_next++ % n];
	memset(r, 0, sizeof *r);
	return r;
}

/* A request behind the expected PSN: answered again, not executed again
 * (C9-105: SENDs and WRITEs are ACKed; READs and atomics are replayed
 * from what the responder kept of them, or dropped). */
static void duplicate(struct sd_port *port, struct sd_qp *q, const struct sd_pkt *p)
{
	q->ws.dups++;
	switch (p->op) {
	case SD_PKT_READ_REQ: {
		struct sd_rdres *r = find_res(q, p->psn, 1);
		uint64_t off = r != NULL ? (uint64_t)psn_diff(p->psn, r->first) * q->path.mtu : 0;
		if (r == NULL || p->rkey != r->rkey || p->va != r->va + off ||
		    !sd_remote_ok(port->dev, q, r->va, r->len, r->rkey, IBV_ACCESS_REMOTE_READ)) {
			q->ws.dropped++;
			return;
		}
		read_reply(port, q, r, p->psn);
		return;
	}
	case SD_PKT_CMP_SWAP:
	case SD_PKT_FETCH_ADD: {
		struct sd_rdres *r = find_res(q, p->psn, 0);
		if (r == NULL) {
			q->ws.dropped++;
			return;
		}
		struct sd_pkt a;
		pkt_init(&a, q, SD_PKT_ATOMIC_ACK, p->psn);
		a.swap_add = r->orig;
		a.msn = q->resp.msn;
		sd_link_send(port, q->path.link, &a);
		return;
	}
	default:
		send_ack(port, q, SD_AETH_ACK, psn_add(q->resp.epsn, 0xffffff));
	}
}

/* Places a packet's payload at off in the receive WQE's SGEs or at va. */
static void place(const struct ibv_sge *dst, int nd, uint64_t off, const struct sd_pkt *p)
{
	if (p->len == 0)
		return;
	if (p->data != NULL) {
		struct ibv_sge flat = { (uintptr_t)p->data, p->len, 0 };
		sd_sg_copy(dst, nd, off, &flat, 1, 0, p->len);
	} else {
		sd_sg_copy(dst, nd, off, p->sg, p->nsg, p->off, p->len);
	}
}

/* UC: the message being taken is abandoned (a packet lost, or one out
 * of sequence). Its receive WQE is not completed and takes the next
 * message (class D1 of rxe's responder, as IB spec 9.8.x has a UC
 * responder silently drop an incomplete message); what an RDMA WRITE
 * placed stays. */
static void uc_abandon(struct sd_qp *q)
{
	q->resp.in_msg = 0;
	q->resp.off = 0;
}

/* UC: drops the rest of the current message, silently: UC errors are
 * never answered (class D/E), the QP stays in its state. */
static void uc_drop(struct sd_qp *q)
{
	uc_abandon(q);
	q->resp.drop_msg = 1;
	q->ws.dropped++;
}

/*
 * A request packet for an RC or UC QP. RC is described at the top. UC,
 * as rxe's responder takes it (check_psn, check_op_seq, check_op_valid,
 * and its class D/E errors) and the IB spec's UC responder: a packet with
 * the expected PSN continues or starts a message; after a PSN gap the
 * message in progress is dropped and nothing is taken until a FIRST or
 * ONLY packet starts a new one (with whatever PSN it carries, which the
 * responder then expects from). A continuation of the wrong kind, an RDMA
 * WRITE the QP's access flags or the MRs refuse, packet lengths that
 * break the path MTU rules and a SEND or an RDMA WRITE with immediate
 * finding no receive WQE drop the message, silently. Nothing is ever
 * acknowledged. A SEND longer than its receive WQE completes that WQE
 * with IBV_WC_LOC_LEN_ERR, as for RC (and the QP goes to the error
 * state, as an error CQE takes mlx4 and mlx5 QPs there).
 */
static void responder_rx(struct sd_port *port, struct sd_qp *q, const struct sd_pkt *p)
{
	struct sd_resp *s = &q->resp;
	uint32_t mtu = q->path.mtu;
	int uc = q->ibv.qp_type == IBV_QPT_UC;

	if (q->ibv.state != IBV_QPS_RTR && q->ibv.state != IBV_QPS_RTS) {
		q->ws.dropped++;
		return;
	}
	if (q->ibv.state == IBV_QPS_RTR && !s->comm_est) {
		s->comm_est = 1;
		sd_raise(port->dev, IBV_EVENT_COMM_EST, &q->ibv);
	}
	int send = p->op >= SD_PKT_SEND_FIRST && p->op <= SD_PKT_SEND_ONLY;
	int write = p->op >= SD_PKT_WRITE_FIRST && p->op <= SD_PKT_WRITE_ONLY;
	int starts = p->op == SD_PKT_SEND_FIRST || p->op == SD_PKT_SEND_ONLY || p->op == SD_PKT_WRITE_FIRST ||
	             p->op == SD_PKT_WRITE_ONLY || p->op == SD_PKT_READ_REQ || p->op == SD_PKT_CMP_SWAP ||
	             p->op == SD_PKT_FETCH_ADD;
	int ends = p->op == SD_PKT_SEND_LAST || p->op == SD_PKT_SEND_ONLY || p->op == SD_PKT_WRITE_LAST ||
	           p->op == SD_PKT_WRITE_ONLY;
	int imm = (p->flags & SD_PKT_F_IMM) != 0;
	int rq_flags = (imm ? SD_RQ_IMM : 0) | ((p->flags & SD_PKT_F_SE) ? SD_RQ_SOLICITED : 0);
	int32_t diff = psn_diff(p->psn, s->epsn);

	if (uc) {
		if (s->drop_msg || diff != 0) {
			if (!starts) {
				uc_drop(q);
				return;
			}
			uc_abandon(q);
			s->drop_msg = 0;
			s->epsn = p->psn;
		}
		if (s->in_msg && starts)
			uc_abandon(q); /* a new message before the last one ended */
		if ((s->in_msg == SD_OP_SEND && !send) || (s->in_msg == SD_OP_WRITE && !write) ||
		    (!s->in_msg && !starts) || (imm && !ends) || (!send && !write)) {
			uc_drop(q);
			return;
		}
		if (write && !(q->access & IBV_ACCESS_REMOTE_WRITE)) {
			uc_drop(q);
			return;
		}
	} else {
		if (diff > 0) {
			if (!s->nak_sent) {
				s->nak_sent = 1;
				send_ack(port, q, SD_AETH_NAK_SEQ, s->epsn);
			} else {
				q->ws.dropped++;
			}
			return;
		}
		if (diff < 0) {
			duplicate(port, q, p);
			return;
		}
		s->nak_sent = 0;
		/* The opcode sequence: a message's middle and last packets
		 * follow its first, of its kind; a new message waits for the
		 * last one. */
		if ((s->in_msg == SD_OP_SEND && !(send && !starts)) || (s->in_msg == SD_OP_WRITE && !(write && !starts)) ||
		    (!s->in_msg && !starts) || (imm && !ends) || (!send && !write && !starts)) {
			responder_fatal(port, q, SD_AETH_NAK_INV, IBV_EVENT_QP_REQ_ERR);
			return;
		}
		/* What the QP lets a requester do. */
		int need = write ? IBV_ACCESS_REMOTE_WRITE : p->op == SD_PKT_READ_REQ ? IBV_ACCESS_REMOTE_READ :
		           (p->op == SD_PKT_CMP_SWAP || p->op == SD_PKT_FETCH_ADD) ? IBV_ACCESS_REMOTE_ATOMIC : 0;
		if (need && !(q->access & need)) {
			responder_fatal(port, q, SD_AETH_NAK_ACCESS, IBV_EVENT_QP_ACCESS_ERR);
			return;
		}
	}
	/* Packet lengths: first and middle packets are exactly path_mtu,
	 * last ones 1..path_mtu, only ones up to path_mtu. */
	int bad_len = p->len > mtu || p->len > SD_PKT_MAX;
	if ((send || write) && starts && !ends && p->len != mtu)
		bad_len = 1;
	if ((send || write) && !starts && !ends && p->len != mtu)
		bad_len = 1;
	if ((send || write) && !starts && ends && p->len == 0)
		bad_len = 1;
	if ((write || p->op == SD_PKT_READ_REQ) && starts && p->dma_len > 0x80000000u)
		bad_len = 1;
	if (bad_len && uc) {
		uc_drop(q);
		return;
	}
	/* A receive WQE for a SEND's first packet, or for the immediate of
	 * an RDMA WRITE's last; without one, RNR: nothing happens here (UC:
	 * the message is dropped). The WQE is taken then (from an SRQ: handed
	 * out to this QP). */
	if ((send && starts) || (write && imm)) {
		if (!sd_recv_ready(q)) {
			if (uc) {
				uc_drop(q);
				return;
			}
			/* Later packets of this attempt are dropped, not NAKed
			 * again, until the requester resends this one. */
			s->nak_sent = 1;
			send_ack(port, q, SD_AETH_RNR, p->psn);
			return;
		}
		if (!bad_len)
			sd_recv_take(port->dev, q);
	}
	if ((p->op == SD_PKT_READ_REQ || p->op == SD_PKT_CMP_SWAP || p->op == SD_PKT_FETCH_ADD) &&
	    q->path.max_dest_rd_atomic == 0) {
		responder_fatal(port, q, SD_AETH_NAK_INV, IBV_EVENT_QP_REQ_ERR);
		return;
	}
	if (bad_len) {
		responder_fatal(port, q, SD_AETH_NAK_INV, IBV_EVENT_QP_REQ_ERR);
		return;
	}

	if (send) {
		struct ibv_sge *rsg;
		uint64_t rlen;
		int rnsge;
		sd_recv_wqe(q, &rlen, &rsg, &rnsge);
		if (starts)
			s->off = 0;
		/* Every packet, as an HCA translates each through the keys: an
		 * MR deregistered since the first packet ends the message here,
		 * before anything more is placed. */
		if (!sd_local_ok(port->dev, q->pd, rsg, rnsge, 1)) {
			s->in_msg = 0;
			sd_rq_complete(port->dev, q, IBV_WC_LOC_PROT_ERR, IBV_EXP_WC_RECV, 0, 0, 0);
			if (!uc)
				send_ack(port, q, SD_AETH_NAK_OP, p->psn);
			return;
		}
		if (s->off + p->len > rlen) {
			s->in_msg = 0;
			sd_rq_complete(port->dev, q, IBV_WC_LOC_LEN_ERR, IBV_EXP_WC_RECV, 0, 0, 0);
			if (!uc)
				send_ack(port, q, SD_AETH_NAK_INV, p->psn);
			return;
		}
		place(rsg, rnsge, s->off, p);
		s->off += p->len;
		s->epsn = psn_add(s->epsn, 1);
		if (ends) {
			s->in_msg = 0;
			s->msn++;
			sd_rq_complete(port->dev, q, IBV_WC_SUCCESS, IBV_EXP_WC_RECV, s->off, rq_flags, p->imm);
		} else {
			s->in_msg = SD_OP_SEND;
		}
	} else if (write) {
		if (starts) {
			if (p->dma_len > 0 && !sd_remote_ok(port->dev, q, p->va, p->dma_len, p->rkey, IBV_ACCESS_REMOTE_WRITE)) {
				if (uc) {
					uc_drop(q);
					return;
				}
				responder_fatal(port, q, SD_AETH_NAK_ACCESS, IBV_EVENT_QP_ACCESS_ERR);
				return;
			}
			s->va = p->va;
			s->len = p->dma_len;
			s->rkey = p->rkey;
			s->off = 0;
		} else if (s->len > 0 && !sd_remote_ok(port->dev, q, s->va, s->len, s->rkey, IBV_ACCESS_REMOTE_WRITE)) {
			/* The MR went since the RETH was checked: the rest of the
			 * message is a remote access error, and nothing is placed. */
			if (uc) {
				uc_drop(q);
				return;
			}
			responder_fatal(port, q, SD_AETH_NAK_ACCESS, IBV_EVENT_QP_ACCESS_ERR);
			return;
		}
		if (s->off + p->len > s->len || (ends && s->off + p->len != s->len)) {
			if (uc) {
				uc_drop(q);
				return;
			}
			responder_fatal(port, q, SD_AETH_NAK_INV, IBV_EVENT_QP_REQ_ERR);
			return;
		}
		struct ibv_sge at = { s->va, (uint32_t)s->len, 0 };
		place(&at, 1, s->off, p);
		s->off += p->len;
		s->epsn = psn_add(s->epsn, 1);
		if (ends) {
			s->in_msg = 0;
			s->msn++;
			if (imm)
				sd_rq_complete(port->dev, q, IBV_WC_SUCCESS, IBV_EXP_WC_RECV_RDMA_WITH_IMM, s->len, rq_flags, p->imm);
		} else {
			s->in_msg = SD_OP_WRITE;
		}
	} else if (p->op == SD_PKT_READ_REQ) {
		if (p->dma_len > 0 && !sd_remote_ok(port->dev, q, p->va, p->dma_len, p->rkey, IBV_ACCESS_REMOTE_READ)) {
			responder_fatal(port, q, SD_AETH_NAK_ACCESS, IBV_EVENT_QP_ACCESS_ERR);
			return;
		}
		uint32_t n = p->dma_len == 0 ? 1 : (uint32_t)((p->dma_len + mtu - 1) / mtu);
		struct sd_rdres *res = new_res(q);
		res->op = SD_OP_READ;
		res->first = p->psn;
		res->last = psn_add(p->psn, n - 1);
		res->va = p->va;
		res->rkey = p->rkey;
		res->len = p->dma_len;
		s->epsn = psn_add(s->epsn, n);
		s->msn++;
		read_reply(port, q, res, p->psn);
	} else {
		if ((p->va & 7) != 0) {
			responder_fatal(port, q, SD_AETH_NAK_INV, IBV_EVENT_QP_REQ_ERR);
			return;
		}
		if (!sd_remote_ok(port->dev, q, p->va, 8, p->rkey, IBV_ACCESS_REMOTE_ATOMIC)) {
			responder_fatal(port, q, SD_AETH_NAK_ACCESS, IBV_EVENT_QP_ACCESS_ERR);
			return;
		}
		int op = p->op == SD_PKT_CMP_SWAP ? SD_OP_CMP_SWAP : SD_OP_FETCH_ADD;
		uint64_t orig = sd_atomic(op, p->va, op == SD_OP_CMP_SWAP ? p->compare : p->swap_add, p->swap_add);
		struct sd_rdres *res = new_res(q);
		res->op = (uint8_t)op;
		res->first = res->last = p->psn;
		res->orig = orig;
		s->epsn = psn_add(s->epsn, 1);
		s->msn++;
		struct sd_pkt a;
		pkt_init(&a, q, SD_PKT_ATOMIC_ACK, p->psn);
		a.swap_add = orig;
		a.msn = s->msn;
		sd_link_send(port, q->path.link, &a);
		return;
	}
	if ((send || write) && !uc) {
		if (ends || (p->flags & SD_PKT_F_ACKREQ))
			send_ack(port, q, SD_AETH_ACK, p->psn);
	}
}

/* ------------------------------------------------------------------ */
/* Entry points                                                         */
/* ------------------------------------------------------------------ */

static int is_request(uint8_t op) { return op >= SD_PKT_SEND_FIRST && op <= SD_PKT_FETCH_ADD; }

/* The 40-byte GRH a UD receive buffer starts with, as the IB spec lays
 * it out (IPv6's header): version 6, traffic class and flow label 0, the
 * payload length (what follows the GRH up to the ICRC: BTH 12, DETH 8,
 * immediate 4, the payload, ICRC 4), next header 0x1B (BTH), the hop
 * limit, source and destination GID. */
static void write_grh(uint8_t g[40], const struct sd_pkt *p, const uint8_t sgid[16], const uint8_t dgid[16])
{
	uint32_t paylen = 12 + 8 + ((p->flags & SD_PKT_F_IMM) ? 4 : 0) + p->len + 4;
	memset(g, 0, 40);
	g[0] = 0x60;
	g[4] = (uint8_t)(paylen >> 8);
	g[5] = (uint8_t)paylen;
	g[6] = 0x1b;
	g[7] = p->hop_limit;
	memcpy(g + 8, sgid, 16);
	memcpy(g + 24, dgid, 16);
}

/*
 * A datagram for a UD QP (IB spec 9.8.x and C10-1xx; the responder side
 * of rxe's UD): taken in RTR and RTS only, from any device and QP, if its
 * Q_Key is the QP's; then into the next receive WQE (none: dropped,
 * silently). The first 40 bytes of that WQE are the GRH's: written when
 * the datagram carries one (IBV_WC_GRH), left as they were otherwise; the
 * payload follows at offset 40 (ibv_post_recv(3)), and byte_len counts
 * those 40 bytes (as IPoIB reads it on every HCA). A WQE too short for
 * them completes with IBV_WC_LOC_LEN_ERR, one whose SGEs fail their
 * checks with IBV_WC_LOC_PROT_ERR. The completion names the source QP
 * and, on an InfiniBand port, the source LID.
 */
static void ud_rx(struct sd_port *port, const struct sd_link *from, struct sd_qp *q, const struct sd_pkt *p)
{
	enum { GRH_LEN = 40 };
	if ((q->ibv.state != IBV_QPS_RTR && q->ibv.state != IBV_QPS_RTS) || p->op != SD_PKT_SEND_ONLY ||
	    p->qkey != q->qkey || !sd_recv_ready(q)) {
		q->ws.dropped++;
		return;
	}
	sd_recv_take(port->dev, q);
	struct ibv_sge *rsg;
	uint64_t rlen;
	int rnsge;
	sd_recv_wqe(q, &rlen, &rsg, &rnsge);
	int imm = (p->flags & SD_PKT_F_IMM) != 0;
	int flags = (imm ? SD_RQ_IMM : 0) | ((p->flags & SD_PKT_F_SE) ? SD_RQ_SOLICITED : 0) |
	            ((p->flags & SD_PKT_F_GRH) ? SD_RQ_GRH : 0);
	uint16_t slid = port->port_ib ? sd_lid_of(from->gid) : 0;
	uint32_t status = IBV_WC_SUCCESS;
	if (!sd_local_ok(port->dev, q->pd, rsg, rnsge, 1))
		status = IBV_WC_LOC_PROT_ERR;
	else if (GRH_LEN + (uint64_t)p->len > rlen)
		status = IBV_WC_LOC_LEN_ERR;
	if (status != IBV_WC_SUCCESS) {
		sd_rq_complete_from(port->dev, q, status, IBV_EXP_WC_RECV, 0, 0, 0, p->src_qpn, slid);
		return;
	}
	if (p->flags & SD_PKT_F_GRH) {
		uint8_t g[GRH_LEN];
		write_grh(g, p, from->gid, port->gid);
		struct ibv_sge flat = { (uintptr_t)g, GRH_LEN, 0 };
		sd_sg_copy(rsg, rnsge, 0, &flat, 1, 0, GRH_LEN);
	}
	place(rsg, rnsge, GRH_LEN, p);
	sd_rq_complete_from(port->dev, q, IBV_WC_SUCCESS, IBV_EXP_WC_RECV, GRH_LEN + (uint64_t)p->len, flags, p->imm,
	                    p->src_qpn, slid);
}

/*
 * A packet from the device whose GID is from (this one's own for the
 * loopback link). It is taken only by the QP it names, of its transport;
 * a connected QP (RC, UC) takes it only if its path leads to from and to
 * the packet's source QP, a UD QP from anyone. Anything else is dropped
 * (port->wire_dropped), as an HCA drops packets for a QP they do not belong
 * to.
 */
void sd_rc_rx(struct sd_port *port, const struct sd_link *from, const struct sd_pkt *p)
{
	struct sd_qp *q = sd_qp_by_num(port->dev, p->dst_qpn);
	if (q == NULL || q->dead || p->op == 0 || p->op >= SD_PKT_OP_END || p->tp != tp_of(q)) {
		port->wire_dropped++;
		return;
	}
	if (p->tp == SD_TP_UD) {
		q->ws.rx_pkts++;
		ud_rx(port, from, q, p);
		return;
	}
	if (q->path.link == NULL || q->path.link->kind != from->kind ||
	    memcmp(q->path.link->gid, from->gid, 16) != 0 || q->path.dest_qpn != p->src_qpn) {
		port->wire_dropped++;
		return;
	}
	q->ws.rx_pkts++;
	if (is_request(p->op))
		responder_rx(port, q, p);
	else if (p->tp == SD_TP_UC)
		q->ws.dropped++; /* UC answers nothing: no acknowledgement is one of its packets */
	else
		requester_rx(port, q, p);
}

/*
 * What the timers of the transport do when due: an RNR wait ends and
 * the WQE is sent again; a local ACK timeout sends everything unanswered
 * again (go back N), or, with no retries left, fails the oldest with
 * IBV_WC_RETRY_EXC_ERR. Returns 1 if anything happened.
 */
int sd_rc_timers(struct sd_port *port, uint64_t now)
{
	if (port->timers == 0 || now < port->next_deadline)
		return 0;
	uint64_t next = UINT64_MAX;
	int fired = 0;
	for (struct sd_qp *q = sd_qp_next(port->dev, NULL); q != NULL; q = sd_qp_next(port->dev, q)) {
		struct sd_req *r = &q->req;
		if (!r->armed)
			continue;
		if (r->deadline > now) {
			if (r->deadline < next)
				next = r->deadline;
			continue;
		}
		fired = 1;
		disarm(port, q);
		if (q->ibv.state != IBV_QPS_RTS)
			continue;
		if (r->rnr_wait) {
			r->rnr_wait = 0;
			retransmit(port, q); /* counts what it sends again */
			rearm(port, q);
		} else if (r->una != r->npsn) {
			q->ws.timeouts++;
			if (r->retries == 0) {
				fail_at(port, q, r->una, IBV_WC_RETRY_EXC_ERR);
				continue;
			}
			r->retries--;
			rewind_to(q, r->una);
			retransmit(port, q);
			rearm(port, q);
		}
		if (r->armed && r->deadline < next)
			next = r->deadline;
	}
	port->next_deadline = next;
	return fired;
}

/* Packets to this device itself were all delivered (transport_link.c): whatever
 * the QP that sent them still has unanswered got no answer and never
 * will. Its retries run out at once. */
void sd_rc_unanswered(struct sd_port *port, struct sd_qp *q)
{
	struct sd_req *r = &q->req;
	if (q->ibv.qp_type == IBV_QPT_RC && q->ibv.state == IBV_QPS_RTS && psn_diff(port->loop_upto, r->una) > 0 && !r->rnr_wait)
		fail_at(port, q, r->una, IBV_WC_RETRY_EXC_ERR);
}

/* RTR: the responder expects rq_psn. */
void sd_rc_rtr(struct sd_qp *q)
{
	memset(&q->resp, 0, sizeof q->resp);
	q->resp.epsn = q->path.rq_psn & 0xffffff;
}

/* RTS: the requester starts at sq_psn. */
void sd_rc_rts(struct sd_qp *q)
{
	struct sd_req *r = &q->req;
	r->npsn = r->una = q->path.sq_psn & 0xffffff;
	r->sent = 0;
	r->hw = q->sq.next;
	r->retries = q->path.retry_cnt;
	r->rnr_left = q->path.rnr_retry;
	r->rnr_wait = 0;
	r->rd_out = 0;
}

/* The QP left RTS (error, reset): nothing of the transport stays armed. */
void sd_rc_stop(struct sd_port *port, struct sd_qp *q)
{
	disarm(port, q);
	q->req.rnr_wait = 0;
	q->req.rd_out = 0;
	if (port->loop_sender == q)
		port->loop_sender = NULL;
}
