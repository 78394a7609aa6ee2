//go:build linux && cgo

/*
 * softdev engine: executes the WQEs the post path built, and hands
 * completions to the poll operations.
 *
 * Scheduling is a fixed round robin over the QPs in creation order: in
 * each round every QP gets one step (run, transmit or flush the WQE at
 * its send queue's transmit position), and rounds repeat until one makes
 * no progress. Data WQEs become packets of the RC transport (transport_rc.c);
 * between QPs of this device they are delivered within the step, so
 * posts and polls, which take the same device lock, decide the outcome
 * by their order alone. Packets of the wire come when they come.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "engine.h"

/* ------------------------------------------------------------------ */
/* Completions                                                          */
/* ------------------------------------------------------------------ */

/*
 * A CQ is a ring of size slots written at the producer index (prod) and
 * read at the consumer index (cons), as an HCA's is:
 *
 *  - A CQ that does not ignore overruns refuses a CQE once size of them
 *    are unpolled: the CQ goes into error (IBV_EVENT_CQ_ERR, once), the
 *    CQE is lost, and the QP that produced it goes to the error state
 *    (IBV_EVENT_QP_FATAL). Later CQEs for a CQ in error are lost too,
 *    each sending its QP to the error state. What the ring holds stays
 *    pollable.
 *  - A CQ that ignores overruns (IBV_EXP_CQ_IGNORE_OVERRUN, or created
 *    cross-channel) writes every CQE, over unpolled ones if it must. A
 *    poll takes a slot only if it was written in the consumer's pass over
 *    the ring (the ownership bit), so after a wrap the unpolled entries
 *    look stale and polls find nothing until the writer comes round.
 *
 * prod counts the CQEs written: that is what CQE_WAIT compares against,
 * polled or not.
 */
/* A completion event, as ibv_req_notify_cq asked for it: one struct
 * ibv_comp_event (the CQ's address) on the channel's fd, read there by
 * ibv_get_cq_event; the arm is spent. A solicited-only arm wakes for a
 * solicited receive or an error, as on an HCA. */
static void cq_notify(struct sd_cq *c, const struct sd_cqe *e)
{
	if (c->armed == SD_ARM_NONE ||
	    (c->armed == SD_ARM_SOLICITED && !e->solicited && e->status == IBV_WC_SUCCESS))
		return;
	c->armed = SD_ARM_NONE;
	uint64_t handle = (uintptr_t)&c->ibv;
	if (write(c->notify_fd, &handle, sizeof handle) == (ssize_t)sizeof handle) /* non-blocking: a full pipe loses it */
		c->comp_raised++;
}

/* Can the consumer take the slot at its index? Written in its pass. */
static int cq_ready(const struct sd_cq *c, uint64_t at);

/*
 * ibv_req_notify_cq: arms the CQ for its next CQE (solicited_only: its
 * next solicited or failed one). As mlx4 and mlx5 arm a CQ relative to
 * the consumer index they write in the arm doorbell (mlx5_arm_cq), a CQE
 * already there and not polled counts: the event is written at once (the
 * kernel's mlx4 and mlx5 arm_cq never report missed events, and mlx5e
 * arms after its last poll without polling again). Programs that take
 * one event, re-arm and poll only part of the CQ (perftest's
 * ctx_notify_events with CTX_POLL_BATCH: ib_send_bw -e) rely on it. The
 * other side of the same rule: a program that re-arms before it polls
 * gets a second event for the CQE it was woken for, as on the HCA;
 * perftest 4.5's ib_send_lat -e, one channel for both CQs and one poll
 * per event, loses count on it (upstream perftest later gave each CQ
 * its own channel). Device lock held.
 */
void sd_cq_arm(struct sd_cq *c, int solicited_only)
{
	if (c->armed != SD_ARM_ANY)
		c->armed = solicited_only ? SD_ARM_SOLICITED : SD_ARM_ANY;
	for (uint64_t at = c->cons; at - c->cons < c->size && cq_ready(c, at); at++) {
		const struct sd_cqe *e = &c->ring[at % c->size];
		if (c->armed == SD_ARM_ANY || e->solicited || e->status != IBV_WC_SUCCESS) {
			cq_notify(c, e);
			return;
		}
	}
}

/* Writes a CQE to its CQ now: what the CQ's consumers (polls, CQE_WAIT,
 * completion events) see. */
static void cq_write(struct sd_device *d, struct sd_cq *c, struct sd_qp *q, const struct sd_cqe *e)
{
	int ignore = (c->flags & (SD_CQ_CROSS_CHANNEL | SD_CQ_IGNORE_OVERRUN)) != 0;
	if (c->overrun || (!ignore && c->prod - c->cons >= c->size)) {
		c->lost++;
		if (!c->overrun) {
			c->overrun = 1;
			sd_raise(d, IBV_EVENT_CQ_ERR, &c->ibv);
		}
		sd_qp_fatal(d, q);
		return;
	}
	struct sd_cqe *slot = &c->ring[c->prod % c->size];
	if (slot->idx != UINT64_MAX && slot->idx >= c->cons)
		c->lost++; /* overwritten before it was polled */
	*slot = *e;
	slot->idx = c->prod++;
	cq_notify(c, e);
}

/*
 * Deferred completions. An HCA writes a CQE microseconds after the
 * doorbell, from the device; a program that polls once right after a
 * post and counts on the completion fails there. So unless the device
 * was opened with synchronous completions, a CQE the engine produces for
 * a QP that is not on the wire (loopback, a manager's local WQEs) waits
 * in d->pend until comp_latency has passed, and with jitter each CQE
 * waits a random extra share of comp_jitter (a wire QP's CQEs, which
 * waited for a real round trip already, only that). The CQE is written
 * to its CQ then, as an HCA writes it: polls see it, CQE_WAIT counts it,
 * an armed CQ's event fires. d->pend is sorted by ready time; CQEs of one
 * QP's send queue, or of its receives, keep their order (the verbs
 * promise it), so jitter reorders only what no verb orders: CQEs of
 * different QPs, and a QP's sends against its receives.
 *
 * Pending CQEs are written at the start of every run of the engine
 * (polls, Progress, an autonomous device's posts and thread), never in
 * the run that produced them: a poll returns no completion of work it
 * ran itself, however long the run took. Progress writes them all, at
 * once: it is the explicit "run the device until it can do no more".
 * The transport thread writes them when they are due if nobody else
 * may: for an armed CQ (the program may sleep on its channel) and on a
 * device whose thread runs the queues (a wait must be met with nobody
 * polling). Device lock held throughout.
 */
static uint64_t comp_rand(struct sd_device *d)
{
	uint64_t x = d->comp_rng;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	d->comp_rng = x;
	return x;
}

/* Room for one more pending CQE at the end: 0, or ENOMEM. */
static int pend_room(struct sd_device *d)
{
	if (d->pend_head + d->pend_len < d->pend_cap)
		return 0;
	if (d->pend_head > 0) {
		memmove(d->pend, d->pend + d->pend_head, (size_t)d->pend_len * sizeof *d->pend);
		d->pend_head = 0;
		return 0;
	}
	uint32_t cap = d->pend_cap != 0 ? d->pend_cap * 2 : 64;
	struct sd_pending *p = realloc(d->pend, (size_t)cap * sizeof *p);
	if (p == NULL)
		return ENOMEM;
	d->pend = p;
	d->pend_cap = cap;
	return 0;
}

static void cq_push(struct sd_device *d, struct sd_cq *c, struct sd_qp *q, const struct sd_cqe *e)
{
	if (!d->comp_async) {
		cq_write(d, c, q, e);
		return;
	}
	uint64_t delay = 0;
	if (q->path.link == NULL || q->path.link->kind != SD_LINK_WIRE)
		delay = d->comp_latency;
	if (d->comp_jitter != 0)
		delay += comp_rand(d) % (d->comp_jitter + 1);
	/* The latest pending CQE of the same queue of the same QP: this one
	 * may not pass it. */
	int recv = e->wqe_queue != SD_CQE_SEND;
	uint64_t after = 0;
	for (uint32_t i = d->pend_len; i > 0; i--) {
		const struct sd_pending *p = &d->pend[d->pend_head + i - 1];
		if (p->qp == q && (p->e.wqe_queue != SD_CQE_SEND) == recv) {
			after = p->ready;
			break;
		}
	}
	if ((delay == 0 && after == 0) || pend_room(d) != 0) {
		cq_write(d, c, q, e); /* out of memory: written now rather than lost */
		return;
	}
	uint64_t ready = sd_now() + delay;
	if (ready < after)
		ready = after;
	/* Sorted by ready time, in production order among equals. */
	uint32_t at = d->pend_len;
	while (at > 0 && d->pend[d->pend_head + at - 1].ready > ready)
		at--;
	struct sd_pending *base = d->pend + d->pend_head;
	memmove(base + at + 1, base + at, (size_t)(d->pend_len - at) * sizeof *base);
	base[at] = (struct sd_pending){ .cq = c, .qp = q, .ready = ready, .e = *e };
	d->pend_len++;
}

long sd_comp_deliver(struct sd_device *d, uint64_t now)
{
	long n = 0;
	while (d->pend_len > 0 && d->pend[d->pend_head].ready <= now) {
		struct sd_pending p = d->pend[d->pend_head];
		d->pend_head++;
		d->pend_len--;
		cq_write(d, p.cq, p.qp, &p.e);
		n++;
	}
	if (d->pend_len == 0)
		d->pend_head = 0;
	if (n > 0)
		d->quiet = 0; /* a wait may be met now */
	return n;
}

void sd_comp_deliver_qp(struct sd_device *d, struct sd_qp *q)
{
	uint32_t k = 0;
	for (uint32_t i = 0; i < d->pend_len; i++) {
		struct sd_pending *p = &d->pend[d->pend_head + i];
		if (p->qp == q)
			cq_write(d, p->cq, p->qp, &p->e);
		else
			d->pend[d->pend_head + k++] = *p;
	}
	if (k != d->pend_len)
		d->quiet = 0;
	d->pend_len = k;
	if (k == 0)
		d->pend_head = 0;
}

void sd_comp_schedule(struct sd_device *d)
{
	uint64_t due = 0;
	if (d->pend_len > 0) {
		int needed = d->port.autonomous;
		for (uint32_t i = 0; !needed && i < d->pend_len; i++)
			needed = d->pend[d->pend_head + i].cq->armed != SD_ARM_NONE;
		if (needed)
			due = d->pend[d->pend_head].ready;
	}
	d->port.cq_due = due;
	if (due != 0)
		sd_net_wake_at(&d->port, due);
}

/* Can the consumer take the slot at its index? Written in its pass. */
static int cq_ready(const struct sd_cq *c, uint64_t at)
{
	uint64_t idx = c->ring[at % c->size].idx;
	return idx != UINT64_MAX && ((idx ^ at) & c->size) == 0;
}

/* A send CQE for the WQE at position pos of q's send queue. */
static void complete(struct sd_device *d, struct sd_cq *c, struct sd_qp *q, uint64_t wr_id,
                     uint32_t status, uint32_t opcode, uint64_t byte_len, uint64_t pos)
{
	struct sd_cqe e = {
		.wr_id = wr_id,
		.exp_flags = IBV_EXP_WC_QP,
		.qp = &q->ibv,
		.wqe_pos = pos,
		.wqe_gen = q->sq.gen,
		.wqe_queue = SD_CQE_SEND,
		.status = status,
		.opcode = opcode,
		.byte_len = (uint32_t)byte_len,
		.qp_num = q->ibv.qp_num,
	};
	cq_push(d, c, q, &e);
}

static uint32_t send_wc_opcode(uint8_t op)
{
	switch (op) {
	case SD_OP_WRITE:
	case SD_OP_WRITE_IMM:
		return IBV_EXP_WC_RDMA_WRITE;
	case SD_OP_READ:
		return IBV_EXP_WC_RDMA_READ;
	case SD_OP_CMP_SWAP:
		return IBV_EXP_WC_COMP_SWAP;
	case SD_OP_FETCH_ADD:
		return IBV_EXP_WC_FETCH_ADD;
	default:
		return IBV_EXP_WC_SEND; /* SEND, NOP, WAIT and the enables */
	}
}

/* byte_len of a successful send completion: the bytes the WR named (8
 * for an atomic); 0 for the local opcodes and every error. */
static uint64_t byte_len(const struct sd_wqe *w)
{
	if (w->status != IBV_WC_SUCCESS)
		return 0;
	switch (w->op) {
	case SD_OP_SEND:
	case SD_OP_SEND_IMM:
	case SD_OP_WRITE:
	case SD_OP_WRITE_IMM:
	case SD_OP_READ:
		return w->u.xfer.length;
	case SD_OP_CMP_SWAP:
	case SD_OP_FETCH_ADD:
		return 8;
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Execution                                                            */
/* ------------------------------------------------------------------ */

/* Can the send queue's next WQE run: posted and, on a managed queue,
 * released? (A receive queue is "ready" when its tail WQE is.) */
static int sq_ready(const struct sd_queue *q)
{
	return q->next < q->head && (!q->managed || q->next < q->released);
}

int sd_rq_ready(const struct sd_queue *q)
{
	return q->tail < q->head && (!q->managed || q->tail < q->released);
}

struct sd_wqe *sd_wqe_at(struct sd_queue *q, uint64_t pos, struct ibv_sge **sg)
{
	uint32_t idx = (uint32_t)(pos % q->depth);
	if (sg != NULL)
		*sg = &q->sge[(size_t)idx * q->max_sge];
	return &q->ring[idx];
}


/* Retires, in order, the send WQEs at the tail that are done (executed,
 * answered or failed). Success completes only if signaled; an error
 * always completes and puts the QP in the error state, after which the
 * rest is flushed. Its slot stays taken until a polled CQE covers it
 * (poll_free). */
void sd_sq_retire(struct sd_device *d, struct sd_qp *q)
{
	struct sd_queue *sq = &q->sq;
	while (q->ibv.state != IBV_QPS_ERR && sq->tail < sq->head) {
		struct sd_wqe *w = sd_wqe_at(sq, sq->tail, NULL);
		if (w->state != SD_WQE_DONE)
			return;
		uint64_t pos = sq->tail++;
		if (sq->next < sq->tail)
			sq->next = sq->tail;
		d->executed++;
		if (w->status != IBV_WC_SUCCESS)
			sd_qp_error(d, q);
		if (w->status != IBV_WC_SUCCESS || (w->flags & SD_WQE_SIGNALED))
			complete(d, q->scq, q, w->wr_id, w->status, send_wc_opcode(w->op), byte_len(w), pos);
	}
}

/* Marks the WQE at the transmit position done with status (the local
 * opcodes, and data WQEs that fail before a packet leaves) and moves on;
 * after an error nothing more is sent: the position stays on it until
 * it retires and the QP goes to the error state. */
void sd_sq_done_next(struct sd_device *d, struct sd_qp *q, uint32_t status)
{
	struct sd_wqe *w = sd_wqe_at(&q->sq, q->sq.next, NULL);
	w->state = SD_WQE_DONE;
	w->status = (uint8_t)status;
	if (status == IBV_WC_SUCCESS)
		q->sq.next++;
	sd_sq_retire(d, q);
}

/*
 * Receives. A QP without an SRQ takes them in order from its own queue
 * (the tail WQE is the one a message lands in). With an SRQ, the first
 * packet of a message that needs one (a SEND's, an RDMA WRITE with
 * immediate's last) takes the SRQ's next WQE: it is copied out (held)
 * and completes later, in any order among the SRQ's QPs, as mlx4 and
 * mlx5 hand them out. Taking one may leave fewer than the armed limit:
 * IBV_EVENT_SRQ_LIMIT_REACHED, once, and the limit is disarmed (as the
 * kernel's rxe get_srq_wqe and the IB spec's SRQ limit say).
 */
int sd_recv_ready(const struct sd_qp *q)
{
	if (q->srq != NULL)
		return q->held.valid || sd_rq_ready(&q->srq->rq);
	return sd_rq_ready(&q->rq);
}

void sd_recv_take(struct sd_device *d, struct sd_qp *q)
{
	struct sd_srq *s = q->srq;
	if (s == NULL || q->held.valid)
		return;
	struct ibv_sge *sg;
	struct sd_wqe *w = sd_wqe_at(&s->rq, s->rq.tail, &sg);
	q->held.valid = 1;
	q->held.wr_id = w->wr_id;
	q->held.length = w->u.xfer.length;
	q->held.num_sge = w->num_sge;
	memcpy(q->held.sge, sg, (size_t)w->num_sge * sizeof *sg);
	s->rq.tail++;
	if (s->limit != 0 && s->rq.head - s->rq.tail < s->limit) {
		s->limit = 0;
		sd_raise(d, IBV_EVENT_SRQ_LIMIT_REACHED, &s->ibv);
	}
}

void sd_recv_wqe(struct sd_qp *q, uint64_t *length, struct ibv_sge **sg, int *nsge)
{
	if (q->srq != NULL) {
		*length = q->held.length;
		*sg = q->held.sge;
		*nsge = q->held.num_sge;
		return;
	}
	struct sd_wqe *w = sd_wqe_at(&q->rq, q->rq.tail, sg);
	*length = w->u.xfer.length;
	*nsge = w->num_sge;
}

/* The receive CQE of the WQE a message landed in (sd_recv_take took it
 * from the SRQ), which retires. */
static void recv_cqe(struct sd_qp *p, struct sd_cqe *e)
{
	e->qp = &p->ibv;
	e->qp_num = p->ibv.qp_num;
	if (p->srq != NULL) {
		e->wr_id = p->held.wr_id;
		e->wqe_queue = SD_CQE_SRQ;
		e->srq = p->srq;
		p->held.valid = 0;
	} else {
		e->wr_id = sd_wqe_at(&p->rq, p->rq.tail, NULL)->wr_id;
		e->wqe_pos = p->rq.tail;
		e->wqe_gen = p->rq.gen;
		e->wqe_queue = SD_CQE_RECV;
		p->rq.tail++;
	}
}

/* Retires the receive WQE with what arrived: a CQE on the receive CQ,
 * src_qp and slid the sender's (the peer's of a connection, a datagram's
 * own); an error puts the QP in the error state. */
void sd_rq_complete_from(struct sd_device *d, struct sd_qp *p, uint32_t status, uint32_t opcode,
                         uint64_t len, int flags, uint32_t imm, uint32_t src_qp, uint16_t slid)
{
	int with_imm = (flags & SD_RQ_IMM) != 0;
	struct sd_cqe e = {
		.exp_flags = IBV_EXP_WC_QP | (with_imm ? IBV_EXP_WC_WITH_IMM : 0) |
		             ((flags & SD_RQ_GRH) ? IBV_EXP_WC_GRH : 0),
		.status = status,
		.opcode = opcode,
		.byte_len = (uint32_t)len,
		.imm = with_imm ? imm : 0,
		.src_qp = src_qp,
		.slid = slid,
		.solicited = (flags & SD_RQ_SOLICITED) != 0,
	};
	recv_cqe(p, &e);
	d->executed++;
	if (status != IBV_WC_SUCCESS)
		sd_qp_error(d, p);
	cq_push(d, p->rcq, p, &e);
}

void sd_rq_complete(struct sd_device *d, struct sd_qp *p, uint32_t status, uint32_t opcode,
                    uint64_t len, int flags, uint32_t imm)
{
	uint16_t slid = d->port.port_ib && p->path.link != NULL ? sd_lid_of(p->path.link->gid) : 0;
	sd_rq_complete_from(d, p, status, opcode, len, flags, imm, p->path.dest_qpn, slid);
}

/* The QP goes to the error state (a completion with an error, a fatal
 * event, or modify_qp): the transport drops what it had outstanding and
 * the engine flushes every WQE left. */
void sd_qp_error(struct sd_device *d, struct sd_qp *q)
{
	q->ibv.state = IBV_QPS_ERR;
	sd_rc_stop(&d->port, q);
}

/* In the error state every WQE completes with IBV_WC_WR_FLUSH_ERR, send
 * queue first, one per step, whether released or not, transmitted or
 * not. A QP with an SRQ flushes the WQE it held for a message, not the
 * SRQ's (they are for its other QPs), then raises
 * IBV_EVENT_QP_LAST_WQE_REACHED once: nothing more will be taken from
 * the SRQ for it (the IB spec's Last WQE Reached; rxe raises it there). */
static int flush_one(struct sd_device *d, struct sd_qp *q)
{
	if (q->sq.tail < q->sq.head) {
		struct sd_wqe *w = sd_wqe_at(&q->sq, q->sq.tail, NULL);
		if (w->state != SD_WQE_DONE || (w->flags & SD_WQE_UD))
			sd_wqe_release(d, w); /* a wait, enable or datagram that never ran */
		uint64_t pos = q->sq.tail++;
		if (q->sq.next < q->sq.tail)
			q->sq.next = q->sq.tail;
		d->executed++;
		complete(d, q->scq, q, w->wr_id, IBV_WC_WR_FLUSH_ERR, send_wc_opcode(w->op), 0, pos);
		return 1;
	}
	if (q->srq != NULL ? q->held.valid : q->rq.tail < q->rq.head) {
		struct sd_cqe e = {
			.exp_flags = IBV_EXP_WC_QP,
			.status = IBV_WC_WR_FLUSH_ERR,
			.opcode = IBV_EXP_WC_RECV,
		};
		recv_cqe(q, &e);
		d->executed++;
		cq_push(d, q->rcq, q, &e);
		return 1;
	}
	if (q->srq != NULL && !q->last_wqe) {
		q->last_wqe = 1;
		sd_raise(d, IBV_EVENT_QP_LAST_WQE_REACHED, &q->ibv);
	}
	return 0;
}

/* One step of one QP: 1 if it moved (a WQE executed, transmitted,
 * retired or flushed), 0 if it is idle or blocked. The local opcodes run
 * here; data WQEs go to the RC transport, which retires them when their
 * responder answers. */
static int step(struct sd_device *d, struct sd_qp *q)
{
	if (q->ibv.state == IBV_QPS_ERR)
		return flush_one(d, q);
	if (q->ibv.state != IBV_QPS_RTS || !sq_ready(&q->sq))
		return 0;
	struct sd_wqe *w = sd_wqe_at(&q->sq, q->sq.next, NULL);
	if (w->state == SD_WQE_DONE) {
		if (w->status != IBV_WC_SUCCESS)
			return 0; /* failed before it was sent: nothing after it goes */
		q->sq.next++; /* ran before a retransmission went back past it */
		return 1;
	}
	switch (w->op) {
	case SD_OP_NOP:
		sd_sq_done_next(d, q, IBV_WC_SUCCESS);
		return 1;
	case SD_OP_WAIT:
		if (w->u.wait.cq->prod < w->u.wait.target)
			return 0; /* blocks the rest of this send queue */
		sd_wqe_release(d, w);
		sd_sq_done_next(d, q, IBV_WC_SUCCESS);
		return 1;
	case SD_OP_SEND_EN:
	case SD_OP_RECV_EN: {
		struct sd_qp *t = w->u.enable.qp;
		struct sd_queue *tq = w->op == SD_OP_SEND_EN ? &t->sq : &t->rq;
		if (w->u.enable.gen == tq->gen && w->u.enable.target > tq->released)
			tq->released = w->u.enable.target;
		sd_wqe_release(d, w);
		sd_sq_done_next(d, q, IBV_WC_SUCCESS);
		return 1;
	}
	default:
		if (q->ibv.qp_type == IBV_QPT_UD)
			return sd_ud_transmit(&d->port, q);
		return sd_rc_transmit(&d->port, q);
	}
}

/* Rounds over the QPs in creation order until one makes no progress.
 * Packets between QPs of this device are delivered after each step, so
 * such a transfer completes within its step, at both ends. Then what the
 * wire holds goes; if that frees a link work waited for, the rounds run
 * again before the device counts as quiet (a UC or UD sender half way
 * through a message would otherwise wait for an answer that never
 * comes). */
long sd_run_queues(struct sd_device *d)
{
	long total = 0;
	if (d->pend_len > 0)
		sd_comp_deliver(d, sd_now());
	if (d->quiet)
		return 0;
	do {
		for (;;) {
			long n = 0;
			for (struct sd_qp *q = d->qps; q != NULL; q = q->next) {
				n += step(d, q);
				sd_loop_drain(&d->port);
			}
			if (n == 0)
				break;
			total += n;
		}
	} while (sd_net_flush(&d->port));
	d->quiet = 1;
	if (d->pend_len > 0 || d->port.cq_due != 0)
		sd_comp_schedule(d);
	return total;
}

/* Something the engine's next run must look at happened (the wire
 * brought packets, a busy link freed): the device is not quiet. */
void sd_changed(struct sd_device *d)
{
	d->quiet = 0;
}

/* sd_run_queues after a look at the wire (it may have brought answers),
 * whether or not the device was quiet: what polls and Progress run. */
long sd_run(struct sd_device *d)
{
	if (sd_net_poll(&d->port))
		d->quiet = 0;
	return sd_run_queues(d);
}

/* A QP whose send queue holds work that cannot run, after sd_run: every
 * RTS QP with a WQE posted and not retired (its next is a wait not met,
 * a send without a usable receive at the peer, or not released). */
static int blocked(const struct sd_qp *q)
{
	return q->ibv.state == IBV_QPS_RTS && q->sq.tail < q->sq.head;
}

/* Is any QP connected over the wire? Then work that cannot run now may
 * run when a peer answers, and nothing is a deadlock this device can
 * prove. */
static int on_wire(const struct sd_device *d)
{
	for (const struct sd_qp *q = d->qps; q != NULL; q = q->next)
		if (q->path.link != NULL && q->path.link->kind == SD_LINK_WIRE &&
		    (q->ibv.state == IBV_QPS_RTR || q->ibv.state == IBV_QPS_RTS))
			return 1;
	return 0;
}

/* Returned by value: Go passes no pointer, so nothing escapes. */
struct sd_progress_result sd_progress(struct ibv_context *ctx)
{
	struct sd_device *d = sd_dev(ctx);
	struct sd_progress_result r = { 0, 0 };
	if (sd_enter_clean(d) != 0)
		return r; /* the Go side holds the Device's lock: not reached */
	r.executed = sd_run(d);
	while (d->pend_len > 0) {
		/* Progress runs the device until it can do no more: the
		 * completions it holds back are written now, and what they
		 * let run (a wait met) runs. */
		sd_comp_deliver(d, UINT64_MAX);
		r.executed += sd_run_queues(d);
	}
	if (!on_wire(d))
		for (struct sd_qp *q = d->qps; q != NULL; q = q->next)
			if (blocked(q))
				r.stalled++;
	sd_unlock(d);
	return r;
}

int sd_blocked(struct ibv_context *ctx, struct sd_blocked *out, int max)
{
	struct sd_device *d = sd_dev(ctx);
	int n = 0;
	if (sd_enter(d) != 0)
		return 0;
	for (struct sd_qp *q = d->qps; q != NULL && n < max; q = q->next) {
		if (!blocked(q))
			continue;
		struct sd_wqe *w = sd_wqe_at(&q->sq, q->sq.next < q->sq.head ? q->sq.next : q->sq.tail, NULL);
		struct sd_blocked *b = &out[n++];
		memset(b, 0, sizeof *b);
		b->qp_num = q->ibv.qp_num;
		b->wr_id = w->wr_id;
		b->op = w->op;
		if (w->op == SD_OP_WAIT) {
			b->cq = &w->u.wait.cq->ibv;
			b->cq_handle = w->u.wait.cq->ibv.handle;
			b->base = w->u.wait.base;
			b->count = w->u.wait.count;
			b->needed = w->u.wait.target;
			b->produced = w->u.wait.cq->prod;
		} else if (w->op == SD_OP_SEND_EN || w->op == SD_OP_RECV_EN) {
			b->target = w->u.enable.qp->ibv.qp_num;
			b->base = w->u.enable.base;
			b->count = w->u.enable.count;
			b->needed = w->u.enable.target;
		}
		if (q->sq.next < q->sq.head && !sq_ready(&q->sq)) {
			b->kind = SD_BLOCK_GATED;
			b->position = q->sq.next;
			b->released = q->sq.released;
			b->qbase = q->sq.en_base;
		} else if (w->op == SD_OP_WAIT) {
			b->kind = SD_BLOCK_WAIT;
		} else {
			struct sd_qp *p = sd_qp_by_num(d, q->path.dest_qpn);
			b->kind = SD_BLOCK_RNR;
			b->dest_qpn = q->path.dest_qpn;
			if (p != NULL) {
				const struct sd_queue *prq = p->srq != NULL ? &p->srq->rq : &p->rq;
				b->posted = prq->head;
				b->released = prq->managed ? prq->released : prq->head;
				b->qbase = prq->en_base;
				b->managed = prq->managed;
			}
		}
	}
	sd_unlock(d);
	return n;
}

/* ------------------------------------------------------------------ */
/* Polling                                                              */
/* ------------------------------------------------------------------ */

/*
 * A polled CQE frees ring slots of the queue whose WQE it completes, as
 * mlx4 and mlx5 move their tail in poll_cq: a send CQE every slot up to
 * and including its WQE's (the unsignaled WQEs before it too), a receive
 * CQE one slot (receive CQEs come in order; one lost frees nothing, and
 * its slot stays taken). A CQE from before its QP's last RESET, or of a
 * destroyed QP, frees nothing (their queues are empty). The QP's record
 * outlives its destruction (and the device: sd_close), so reading it is safe.
 */
static void poll_free(const struct sd_cqe *e)
{
	const struct sd_qp *q = (const struct sd_qp *)e->qp; /* ibv is its first member */
	if (e->wqe_queue == SD_CQE_SRQ) {
		/* Any slot of the SRQ: they are taken in order, and what was
		 * handed out was copied (sd_recv_take). A destroyed SRQ's
		 * record stays, with nothing to free. */
		if (!e->srq->dead && e->srq->rq.freed < e->srq->rq.tail)
			e->srq->rq.freed++;
		return;
	}
	if (q == NULL || q->dead)
		return;
	struct sd_queue *wq = e->wqe_queue == SD_CQE_SEND ? (struct sd_queue *)&q->sq
	                                                  : (struct sd_queue *)&q->rq;
	if (wq->gen != e->wqe_gen)
		return;
	if (e->wqe_queue == SD_CQE_SEND) {
		if (e->wqe_pos + 1 > wq->freed)
			wq->freed = e->wqe_pos + 1;
	} else if (wq->freed < wq->tail) {
		wq->freed++;
	}
}

/* Both polls run the engine first, so completions appear without an
 * explicit progress call, then take the CQEs the ring holds for them.
 * On a quiet device (nothing posted since the engine last ran) a CQ that
 * holds a CQE already is read as it is, as an HCA's is: the wire waits
 * for the poll that finds it empty (reading it cost a system call, 0.5
 * of the 9 us one-way trip of perftest's ib_send_lat between two
 * processes, whose second poll after a message finds the receive's CQE).
 * The CQ is looked up among the device's live ones by address
 * (sd_cq_of), never read as a struct sd_cq before: a destroyed CQ (its
 * record is kept) or a copy of a CQ's struct ibv_cq (whose context led the
 * dispatch here) is refused, not read past its end. Returns the CQ with
 * the device lock held, or NULL with it released and *err EINVAL (or
 * ENODEV: the device is closed). */
static struct sd_cq *poll_begin(struct ibv_cq *cq, int n, int *err)
{
	struct sd_device *d = sd_dev(cq->context);
	if ((*err = sd_enter_clean(d)) != 0)
		return NULL;
	struct sd_cq *c = sd_cq_of(d, cq);
	if (c == NULL || n < 0) {
		sd_unlock(d);
		*err = EINVAL;
		return NULL;
	}
	if (!d->quiet || !cq_ready(c, c->cons))
		sd_run(d);
	return c;
}

int sd_op_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	int err;
	struct sd_cq *c = poll_begin(cq, n, &err);
	if (c == NULL)
		return -err;
	int k = 0;
	while (k < n && cq_ready(c, c->cons)) {
		const struct sd_cqe *e = &c->ring[c->cons++ % c->size];
		poll_free(e);
		struct ibv_wc *o = &wc[k++];
		memset(o, 0, sizeof *o);
		o->wr_id = e->wr_id;
		o->status = e->status;
		o->opcode = e->opcode;
		o->byte_len = e->byte_len;
		o->imm_data = e->imm;
		o->qp_num = e->qp_num;
		o->src_qp = e->src_qp;
		o->slid = e->slid;
		o->wc_flags = ((e->exp_flags & IBV_EXP_WC_WITH_IMM) ? IBV_WC_WITH_IMM : 0) |
		              ((e->exp_flags & IBV_EXP_WC_GRH) ? IBV_WC_GRH : 0);
	}
	sd_net_polled(&c->dev->port);
	sd_unlock(c->dev);
	return k;
}

int sd_op_exp_poll_cq(struct ibv_cq *cq, int n, struct ibv_exp_wc *wc, uint32_t wc_size)
{
	if (wc_size < offsetof(struct ibv_exp_wc, src_qp))
		return -EINVAL;
	int err;
	struct sd_cq *c = poll_begin(cq, n, &err);
	if (c == NULL)
		return -err;
	int k = 0;
	while (k < n && cq_ready(c, c->cons)) {
		const struct sd_cqe *e = &c->ring[c->cons++ % c->size];
		poll_free(e);
		struct ibv_exp_wc o;
		memset(&o, 0, sizeof o);
		o.wr_id = e->wr_id;
		o.status = e->status;
		o.exp_opcode = e->opcode;
		o.byte_len = e->byte_len;
		o.imm_data = e->imm;
		o.qp_num = e->qp_num;
		o.src_qp = e->src_qp;
		o.slid = e->slid;
		o.qp = e->qp;
		o.srq = e->srq != NULL ? &e->srq->ibv : NULL;
		o.exp_wc_flags = e->exp_flags | (e->srq != NULL ? IBV_EXP_WC_SRQ : 0);
		/* Entries are wc_size apart; a smaller struct gets its prefix. */
		memcpy((char *)wc + (size_t)k * wc_size, &o, wc_size < sizeof o ? wc_size : sizeof o);
		k++;
	}
	sd_net_polled(&c->dev->port);
	sd_unlock(c->dev);
	return k;
}

/* ------------------------------------------------------------------ */
/* Introspection for the Go side                                        */
/* ------------------------------------------------------------------ */

int sd_cq_state(struct ibv_context *ctx, struct ibv_cq *cq, uint64_t *produced,
                uint64_t *queued, uint64_t *dropped, int *overrun)
{
	struct sd_device *d = sd_dev(ctx);
	int err = sd_enter(d);
	if (err != 0)
		return err;
	struct sd_cq *c = sd_cq_of(d, cq);
	if (c != NULL) {
		uint64_t k = 0;
		while (k < c->size && cq_ready(c, c->cons + k))
			k++;
		*produced = c->prod;
		*queued = k;
		*dropped = c->lost;
		*overrun = c->overrun;
	}
	sd_unlock(d);
	return c != NULL ? 0 : EINVAL;
}

int sd_qp_state(struct ibv_context *ctx, struct ibv_qp *qp, int *state,
                uint64_t *sq_posted, uint64_t *sq_done, uint64_t *sq_enabled, uint64_t *sq_freed,
                uint64_t *rq_posted, uint64_t *rq_done, uint64_t *rq_enabled, uint64_t *rq_freed)
{
	struct sd_device *d = sd_dev(ctx);
	int err = sd_enter(d);
	if (err != 0)
		return err;
	struct sd_qp *q = sd_qp_of(d, qp);
	if (q != NULL) {
		*state = q->ibv.state;
		*sq_posted = q->sq.head;
		*sq_done = q->sq.tail;
		*sq_enabled = q->sq.managed ? q->sq.released : q->sq.head;
		*sq_freed = q->sq.freed;
		*rq_posted = q->rq.head;
		*rq_done = q->rq.tail;
		*rq_enabled = q->rq.managed ? q->rq.released : q->rq.head;
		*rq_freed = q->rq.freed;
	}
	sd_unlock(d);
	return q != NULL ? 0 : EINVAL;
}

int sd_qp_wire(struct ibv_context *ctx, struct ibv_qp *qp, struct sd_wire_stats *out)
{
	struct sd_device *d = sd_dev(ctx);
	int err = sd_enter_clean(d);
	if (err != 0)
		return err;
	struct sd_qp *q = sd_qp_of(d, qp);
	if (q != NULL)
		*out = q->ws;
	sd_unlock(d);
	return q != NULL ? 0 : EINVAL;
}

void sd_dev_wire(struct ibv_context *ctx, struct sd_dev_wire_stats *out)
{
	struct sd_device *d = sd_dev(ctx);
	memset(out, 0, sizeof *out);
	if (sd_enter_clean(d) != 0)
		return;
	memcpy(out->gid, d->port.gid, 16);
	out->dropped = d->port.wire_dropped;
	out->connect_fails = d->port.wire_connect_fails;
	out->last_errno = d->port.wire_last_errno;
	out->left_to_poller = __atomic_load_n(&d->port.wire_left_to_poller, __ATOMIC_RELAXED);
	out->unwatched = d->port.wire_unwatched;
	out->thread_holds = d->port.wire_thread_holds;
	out->gathered = d->port.wire_gathered;
	out->gather_copies = d->port.wire_gather_copies;
	sd_net_guard(&d->port, &out->guard);
	struct sd_wire_stats *qps = &out->qps;
	for (const struct sd_qp *q = d->qps; q != NULL; q = q->next) {
		const struct sd_wire_stats *w = &q->ws;
		qps->tx_pkts += w->tx_pkts, qps->rx_pkts += w->rx_pkts, qps->retrans += w->retrans;
		qps->timeouts += w->timeouts, qps->rnr_naks_rx += w->rnr_naks_rx, qps->rnr_naks_tx += w->rnr_naks_tx;
		qps->seq_naks_rx += w->seq_naks_rx, qps->seq_naks_tx += w->seq_naks_tx;
		qps->dups += w->dups, qps->dropped += w->dropped;
	}
	sd_unlock(d);
}

/* For tests: the device's wire sees a poll in progress (on) or none. */
void sd_dev_poll_mark(struct ibv_context *ctx, int on)
{
	struct sd_device *d = sd_dev(ctx);
	if (sd_enter_clean(d) != 0)
		return;
	sd_net_poll_mark(&d->port, on);
	sd_unlock(d);
}
