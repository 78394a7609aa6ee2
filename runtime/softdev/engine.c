//go:build linux && cgo

/*
 * softdev engine: executes the WQEs the post path built, and hands
 * completions to the poll operations.
 *
 * Scheduling is a fixed round robin over the QPs in creation order: in
 * each round every QP gets one step (run or flush the WQE at the head of
 * its send queue), and rounds repeat until one makes no progress. Posts
 * and polls take the same device lock, so the outcome depends only on the
 * order of the calls made on the device, never on timing.
 */
#include <errno.h>
#include <string.h>
#include "softdev.h"

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
static void cq_push(struct sd_device *d, struct sd_cq *c, struct sd_qp *q, const struct sd_cqe *e)
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
	default:
		return IBV_EXP_WC_SEND; /* SEND, NOP, WAIT and the enables */
	}
}

/* ------------------------------------------------------------------ */
/* Memory checks and copies                                             */
/* ------------------------------------------------------------------ */

static int in_mr(const struct sd_mr *m, uint64_t addr, uint64_t len)
{
	uint64_t lo = (uintptr_t)m->ibv.addr, hi = lo + m->ibv.length;
	return addr >= lo && addr <= hi && len <= hi - addr;
}

/* A local SGE: its lkey names a live MR of the QP's PD, the range lies in
 * it, and (for data arriving) the MR allows local write. */
static int local_ok(struct sd_device *d, struct sd_pd *pd, const struct ibv_sge *s, int write)
{
	struct sd_mr *m = sd_mr_by_key(d, s->lkey);
	if (m == NULL || m->ibv.lkey != s->lkey || m->pd != pd)
		return 0;
	if (write && !(m->access & IBV_ACCESS_LOCAL_WRITE))
		return 0;
	return in_mr(m, s->addr, s->length);
}

static int all_local_ok(struct sd_device *d, struct sd_pd *pd, const struct ibv_sge *sg, int n, int write)
{
	for (int i = 0; i < n; i++)
		if (!local_ok(d, pd, &sg[i], write))
			return 0;
	return 1;
}

/* A remote range: rkey names a live MR in the responder's PD that grants
 * the access, the responder QP grants it too, and the range fits. */
static int remote_ok(struct sd_device *d, struct sd_qp *resp, uint64_t addr, uint64_t len,
                     uint32_t rkey, int access)
{
	struct sd_mr *m = sd_mr_by_key(d, rkey);
	return m != NULL && m->ibv.rkey == rkey && m->pd == resp->pd &&
	       (m->access & access) && (resp->access & access) && in_mr(m, addr, len);
}

/* Copies len bytes from one SGE list to another, piece by piece. Both
 * lists were checked and hold at least len bytes. */
static void sg_copy(const struct ibv_sge *dst, int nd, const struct ibv_sge *src, int ns, uint64_t len)
{
	int i = 0, j = 0;
	uint64_t doff = 0, soff = 0;
	while (len > 0 && i < nd && j < ns) {
		uint64_t n = len;
		if (dst[i].length - doff < n)
			n = dst[i].length - doff;
		if (src[j].length - soff < n)
			n = src[j].length - soff;
		if (n > 0)
			memmove((void *)(uintptr_t)(dst[i].addr + doff),
			        (const void *)(uintptr_t)(src[j].addr + soff), n);
		len -= n;
		doff += n;
		soff += n;
		if (doff == dst[i].length) {
			i++;
			doff = 0;
		}
		if (soff == src[j].length) {
			j++;
			soff = 0;
		}
	}
}

/* ------------------------------------------------------------------ */
/* Calc                                                                 */
/* ------------------------------------------------------------------ */

/* Operands and results are big-endian 64-bit words, as the HCA reads and
 * writes them on the wire. */
static uint64_t ld_be64(uint64_t addr)
{
	const uint8_t *p = (const uint8_t *)(uintptr_t)addr;
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

static void st_be64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--) {
		p[i] = (uint8_t)v;
		v >>= 8;
	}
}

static double as_f64(uint64_t v)
{
	double f;
	memcpy(&f, &v, 8);
	return f;
}

static uint64_t from_f64(double f)
{
	uint64_t v;
	memcpy(&v, &f, 8);
	return v;
}

/*
 * Reduces the operands, one per 16-byte gather entry (a big-endian value,
 * then a big-endian id), in SGE order, into out and returns the result's
 * size: 8 bytes (the value, big-endian), or 16 for MAXLOC (the largest
 * value and its id; among equal values the smallest id).
 */
static uint32_t calc(const struct sd_wqe *w, const struct ibv_sge *sg, uint8_t out[16])
{
	uint64_t acc = ld_be64(sg[0].addr);
	if (w->calc_op == IBV_EXP_CALC_OP_MAXLOC) { /* UINT only (checked at post) */
		uint64_t id = ld_be64(sg[0].addr + 8);
		for (int i = 1; i < w->num_sge; i++) {
			uint64_t v = ld_be64(sg[i].addr), vi = ld_be64(sg[i].addr + 8);
			if (v > acc || (v == acc && vi < id)) {
				acc = v;
				id = vi;
			}
		}
		st_be64(out, acc);
		st_be64(out + 8, id);
		return 16;
	}
	for (int i = 1; i < w->num_sge; i++) {
		uint64_t v = ld_be64(sg[i].addr);
		switch (w->calc_op) {
		case IBV_EXP_CALC_OP_ADD:
			if (w->calc_type == IBV_EXP_CALC_DATA_TYPE_FLOAT)
				acc = from_f64(as_f64(acc) + as_f64(v));
			else
				acc += v; /* two's complement: the same bits for int and uint */
			break;
		case IBV_EXP_CALC_OP_BAND: acc &= v; break;
		case IBV_EXP_CALC_OP_BXOR: acc ^= v; break;
		case IBV_EXP_CALC_OP_BOR:  acc |= v; break;
		}
	}
	st_be64(out, acc);
	return 8;
}

/* ------------------------------------------------------------------ */
/* Execution                                                            */
/* ------------------------------------------------------------------ */

static int ready(const struct sd_queue *q)
{
	return q->tail < q->head && (!q->managed || q->tail < q->released);
}

static struct sd_wqe *head_wqe(struct sd_queue *q, struct ibv_sge **sg)
{
	uint32_t idx = (uint32_t)(q->tail % q->depth);
	if (sg != NULL)
		*sg = &q->sge[(size_t)idx * q->max_sge];
	return &q->ring[idx];
}

/* Retires the head WQE of a queue and returns its position. Its slot
 * stays taken until a polled CQE covers it (poll_free). */
static uint64_t retire(struct sd_device *d, struct sd_queue *q)
{
	d->executed++;
	return q->tail++;
}

/* Drops the references a WAIT or ENABLE WQE holds. */
static void release(struct sd_wqe *w)
{
	if (w->op == SD_OP_WAIT)
		w->u.wait.cq->refs--;
	else if (w->op == SD_OP_SEND_EN || w->op == SD_OP_RECV_EN)
		w->u.enable.qp->refs--;
}

/* Retires the head send WQE; success completes only if signaled,
 * errors always complete, and put the QP in the error state. */
static void retire_send(struct sd_device *d, struct sd_qp *q, struct sd_wqe *w, uint32_t status,
                        uint64_t len)
{
	uint64_t pos = retire(d, &q->sq);
	if (status != IBV_WC_SUCCESS)
		q->ibv.state = IBV_QPS_ERR;
	if (status != IBV_WC_SUCCESS || (w->flags & SD_WQE_SIGNALED))
		complete(d, q->scq, q, w->wr_id, status, send_wc_opcode(w->op), len, pos);
}

/* Retires the head receive WQE of p, with the data that arrived from q. */
static void retire_recv(struct sd_device *d, struct sd_qp *p, struct sd_qp *from, uint32_t status,
                        uint32_t opcode, uint64_t len, int with_imm, uint32_t imm)
{
	struct sd_wqe *r = head_wqe(&p->rq, NULL);
	struct sd_cqe e = {
		.wr_id = r->wr_id,
		.exp_flags = IBV_EXP_WC_QP | (with_imm ? IBV_EXP_WC_WITH_IMM : 0),
		.qp = &p->ibv,
		.wqe_pos = p->rq.tail,
		.wqe_gen = p->rq.gen,
		.wqe_queue = SD_CQE_RECV,
		.status = status,
		.opcode = opcode,
		.byte_len = (uint32_t)len,
		.imm = with_imm ? imm : 0,
		.qp_num = p->ibv.qp_num,
		.src_qp = from->ibv.qp_num,
	};
	retire(d, &p->rq);
	if (status != IBV_WC_SUCCESS)
		p->ibv.state = IBV_QPS_ERR;
	cq_push(d, p->rcq, p, &e);
}

/* SEND, WRITE and READ: returns 0 when blocked (no receive WQE ready at
 * the peer, as an RNR retry that never gives up), else 1. */
static int transfer(struct sd_device *d, struct sd_qp *q, struct sd_wqe *w, struct ibv_sge *sg)
{
	struct sd_qp *p = sd_qp_by_num(d, q->dest_qpn);
	if (p == NULL || (p->ibv.state != IBV_QPS_RTR && p->ibv.state != IBV_QPS_RTS)) {
		retire_send(d, q, w, IBV_WC_RETRY_EXC_ERR, 0); /* nobody answers */
		return 1;
	}
	int wants_recv = w->op == SD_OP_SEND || w->op == SD_OP_SEND_IMM || w->op == SD_OP_WRITE_IMM;
	if (wants_recv && !ready(&p->rq))
		return 0;

	/* The local side: where the payload comes from (or goes to). */
	uint8_t result[16];
	struct ibv_sge flat;
	const struct ibv_sge *src = sg;
	int nsrc = w->num_sge;
	uint64_t len = w->u.xfer.length;
	if (w->flags & SD_WQE_INLINE) {
		uint32_t idx = (uint32_t)(q->sq.tail % q->sq.depth);
		flat.addr = (uintptr_t)&q->sq.inl[(size_t)idx * q->sq.max_inline];
		flat.length = (uint32_t)len;
		src = &flat;
		nsrc = 1;
	} else if (!all_local_ok(d, q->pd, sg, w->num_sge, w->op == SD_OP_READ)) {
		retire_send(d, q, w, IBV_WC_LOC_PROT_ERR, 0);
		return 1;
	} else if (w->flags & SD_WQE_CALC) {
		len = calc(w, sg, result);
		flat.addr = (uintptr_t)result;
		flat.length = (uint32_t)len;
		src = &flat;
		nsrc = 1;
	}

	switch (w->op) {
	case SD_OP_SEND:
	case SD_OP_SEND_IMM: {
		struct ibv_sge *rsg;
		struct sd_wqe *r = head_wqe(&p->rq, &rsg);
		if (len > r->u.xfer.length) {
			retire_recv(d, p, q, IBV_WC_LOC_LEN_ERR, IBV_EXP_WC_RECV, 0, 0, 0);
			retire_send(d, q, w, IBV_WC_REM_INV_REQ_ERR, 0);
			return 1;
		}
		if (!all_local_ok(d, p->pd, rsg, r->num_sge, 1)) {
			retire_recv(d, p, q, IBV_WC_LOC_PROT_ERR, IBV_EXP_WC_RECV, 0, 0, 0);
			retire_send(d, q, w, IBV_WC_REM_OP_ERR, 0);
			return 1;
		}
		sg_copy(rsg, r->num_sge, src, nsrc, len);
		retire_recv(d, p, q, IBV_WC_SUCCESS, IBV_EXP_WC_RECV, len, w->op == SD_OP_SEND_IMM,
		            w->u.xfer.imm);
		retire_send(d, q, w, IBV_WC_SUCCESS, len);
		return 1;
	}
	case SD_OP_WRITE:
	case SD_OP_WRITE_IMM: {
		if (!remote_ok(d, p, w->u.xfer.remote_addr, len, w->u.xfer.rkey, IBV_ACCESS_REMOTE_WRITE)) {
			retire_send(d, q, w, IBV_WC_REM_ACCESS_ERR, 0);
			return 1;
		}
		struct ibv_sge remote = { .addr = w->u.xfer.remote_addr, .length = (uint32_t)len };
		sg_copy(&remote, 1, src, nsrc, len);
		if (w->op == SD_OP_WRITE_IMM)
			retire_recv(d, p, q, IBV_WC_SUCCESS, IBV_EXP_WC_RECV_RDMA_WITH_IMM, len, 1,
			            w->u.xfer.imm);
		retire_send(d, q, w, IBV_WC_SUCCESS, len);
		return 1;
	}
	case SD_OP_READ: {
		if (!remote_ok(d, p, w->u.xfer.remote_addr, len, w->u.xfer.rkey, IBV_ACCESS_REMOTE_READ)) {
			retire_send(d, q, w, IBV_WC_REM_ACCESS_ERR, 0);
			return 1;
		}
		struct ibv_sge remote = { .addr = w->u.xfer.remote_addr, .length = (uint32_t)len };
		sg_copy(sg, w->num_sge, &remote, 1, len);
		retire_send(d, q, w, IBV_WC_SUCCESS, len);
		return 1;
	}
	}
	return 0;
}

/* In the error state every WQE completes with IBV_WC_WR_FLUSH_ERR, send
 * queue first, one per step, whether released or not. */
static int flush_one(struct sd_device *d, struct sd_qp *q)
{
	if (q->sq.tail < q->sq.head) {
		struct sd_wqe *w = head_wqe(&q->sq, NULL);
		release(w);
		retire_send(d, q, w, IBV_WC_WR_FLUSH_ERR, 0);
		return 1;
	}
	if (q->rq.tail < q->rq.head) {
		struct sd_wqe *r = head_wqe(&q->rq, NULL);
		struct sd_cqe e = {
			.wr_id = r->wr_id,
			.exp_flags = IBV_EXP_WC_QP,
			.qp = &q->ibv,
			.wqe_pos = q->rq.tail,
			.wqe_gen = q->rq.gen,
			.wqe_queue = SD_CQE_RECV,
			.status = IBV_WC_WR_FLUSH_ERR,
			.opcode = IBV_EXP_WC_RECV,
			.qp_num = q->ibv.qp_num,
		};
		retire(d, &q->rq);
		cq_push(d, q->rcq, q, &e);
		return 1;
	}
	return 0;
}

/* One step of one QP: 1 if a WQE retired, 0 if it is idle or blocked. */
static int step(struct sd_device *d, struct sd_qp *q)
{
	if (q->ibv.state == IBV_QPS_ERR)
		return flush_one(d, q);
	if (q->ibv.state != IBV_QPS_RTS || !ready(&q->sq))
		return 0;
	struct ibv_sge *sg;
	struct sd_wqe *w = head_wqe(&q->sq, &sg);
	switch (w->op) {
	case SD_OP_NOP:
		retire_send(d, q, w, IBV_WC_SUCCESS, 0);
		return 1;
	case SD_OP_WAIT:
		if (w->u.wait.cq->prod < w->u.wait.target)
			return 0; /* blocks the rest of this send queue */
		release(w);
		retire_send(d, q, w, IBV_WC_SUCCESS, 0);
		return 1;
	case SD_OP_SEND_EN:
	case SD_OP_RECV_EN: {
		struct sd_qp *t = w->u.enable.qp;
		struct sd_queue *tq = w->op == SD_OP_SEND_EN ? &t->sq : &t->rq;
		if (w->u.enable.gen == tq->gen && w->u.enable.target > tq->released)
			tq->released = w->u.enable.target;
		release(w);
		retire_send(d, q, w, IBV_WC_SUCCESS, 0);
		return 1;
	}
	default:
		return transfer(d, q, w, sg);
	}
}

long sd_run(struct sd_device *d)
{
	long total = 0;
	if (d->quiet)
		return 0;
	for (;;) {
		long n = 0;
		for (struct sd_qp *q = d->qps; q != NULL; q = q->next)
			n += step(d, q);
		if (n == 0) {
			d->quiet = 1;
			return total;
		}
		total += n;
	}
}

/* A QP whose send queue holds work that cannot run, after sd_run: every
 * RTS QP with a WQE posted and not retired (its head is a wait not met,
 * a send without a usable receive at the peer, or not released). */
static int blocked(const struct sd_qp *q)
{
	return q->ibv.state == IBV_QPS_RTS && q->sq.tail < q->sq.head;
}

/* Returned by value: Go passes no pointer, so nothing escapes. */
struct sd_progress_result sd_progress(struct ibv_context *ctx)
{
	struct sd_device *d = sd_dev(ctx);
	struct sd_progress_result r = { 0, 0 };
	if (sd_enter_clean(d) != 0)
		return r; /* the Go side holds the Device's lock: not reached */
	r.executed = sd_run(d);
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
		struct sd_wqe *w = head_wqe(&q->sq, NULL);
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
		if (!ready(&q->sq)) {
			b->kind = SD_BLOCK_GATED;
			b->position = q->sq.tail;
			b->released = q->sq.released;
			b->qbase = q->sq.en_base;
		} else if (w->op == SD_OP_WAIT) {
			b->kind = SD_BLOCK_WAIT;
		} else {
			struct sd_qp *p = sd_qp_by_num(d, q->dest_qpn);
			b->kind = SD_BLOCK_RNR;
			b->dest_qpn = q->dest_qpn;
			if (p != NULL) {
				b->posted = p->rq.head;
				b->released = p->rq.managed ? p->rq.released : p->rq.head;
				b->qbase = p->rq.en_base;
				b->managed = p->rq.managed;
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
		o->wc_flags = (e->exp_flags & IBV_EXP_WC_WITH_IMM) ? IBV_WC_WITH_IMM : 0;
	}
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
		o.qp = e->qp;
		o.exp_wc_flags = e->exp_flags;
		/* Entries are wc_size apart; a smaller struct gets its prefix. */
		memcpy((char *)wc + (size_t)k * wc_size, &o, wc_size < sizeof o ? wc_size : sizeof o);
		k++;
	}
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
