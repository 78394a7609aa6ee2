//go:build linux && cgo

/*
 * softdev post path: every work request is checked and turned into a
 * 64-byte WQE in the QP's ring at once (its SGEs copied to the ring's
 * side table, an inline payload to the inline area), so callers may
 * reuse their WR structs, SGE arrays and inline buffers as soon as the
 * call returns. Nothing executes here; see engine_exec.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include "engine.h"

/* What the post path needs of a send request, whichever struct it came
 * in (struct ibv_send_wr or struct ibv_exp_send_wr). */
struct sd_sreq {
	uint64_t                      wr_id;
	struct ibv_sge               *sg;
	int                           num_sge;
	uint32_t                      opcode; /* enum ibv_exp_wr_opcode */
	uint64_t                      flags;  /* enum ibv_exp_send_flags */
	uint32_t                      imm;
	uint64_t                      remote_addr;
	uint32_t                      rkey;
	uint64_t                      compare_add, swap; /* atomics (their remote_addr and rkey too) */
	uint64_t                      atomic_addr;
	uint32_t                      atomic_rkey;
	struct ibv_ah                *ah;     /* UD: wr.ud */
	uint32_t                      remote_qpn, remote_qkey;
	const struct ibv_exp_send_wr *x;      /* exp fields; NULL for ibv_send_wr */
};

/* Full when depth slots are not yet free: posted and not retired, or
 * retired and no polled CQE has covered them yet (mlx4 and mlx5 move
 * the tail they compare against only in poll_cq). A slot is written
 * only once it is free, so a retired WQE stays intact until then. */
static int queue_full(const struct sd_queue *q)
{
	return q->head - q->freed >= q->depth;
}

/* Copies n SGEs into the side table row of slot idx and returns their
 * total length, or -1 if it does not fit in 32 bits (a message limit). */
static int64_t copy_sges(struct sd_queue *q, uint32_t idx, const struct ibv_sge *sg, int n)
{
	struct ibv_sge *row = &q->sge[(size_t)idx * q->max_sge];
	uint64_t total = 0;
	for (int i = 0; i < n; i++) {
		row[i] = sg[i];
		total += sg[i].length;
	}
	return total > 0x7fffffffu ? -1 : (int64_t)total;
}

/* Is (op, type) a calculation the device performs? The table of mlx4
 * and mlx5: ADD, BAND, BXOR and BOR on INT, UINT and FLOAT; MAXLOC on
 * UINT only. */
static int calc_supported(uint32_t op, uint32_t type)
{
	if (type >= IBV_EXP_CALC_DATA_TYPE_NUMBER)
		return 0;
	switch (op) {
	case IBV_EXP_CALC_OP_ADD:
	case IBV_EXP_CALC_OP_BAND:
	case IBV_EXP_CALC_OP_BXOR:
	case IBV_EXP_CALC_OP_BOR:
		return 1;
	case IBV_EXP_CALC_OP_MAXLOC:
		return type == IBV_EXP_CALC_DATA_TYPE_UINT;
	}
	return 0;
}

/* CQE_WAIT: the wait index is the CQ's wait base plus cq_count; the
 * largest count since the base last moved is remembered, and
 * WAIT_EN_LAST moves the base by it (as the mlx4/mlx5 providers compute
 * wait_index at post time). */
static int build_wait(struct sd_device *d, const struct sd_sreq *r, struct sd_wqe *w)
{
	struct sd_cq *c = sd_cq_of(d, r->x->task.cqe_wait.cq);
	int32_t count = r->x->task.cqe_wait.cq_count;
	if (c == NULL || count < 0)
		return EINVAL;
	w->u.wait.cq = c;
	w->u.wait.base = c->wait_base;
	w->u.wait.count = count;
	w->u.wait.target = c->wait_base + (uint64_t)count;
	if ((uint64_t)count > c->wait_count)
		c->wait_count = (uint64_t)count;
	if (r->flags & IBV_EXP_SEND_WAIT_EN_LAST) {
		c->wait_base += c->wait_count;
		c->wait_count = 0;
	}
	c->refs++;
	return 0;
}

/* SEND_ENABLE / RECV_ENABLE: the target queue must be managed. wqe_count
 * N > 0 releases up to the queue's enable base plus N, which must not
 * pass what has been posted there; N = 0 releases everything posted to
 * it now. The largest release beyond the base is remembered, and
 * WAIT_EN_LAST moves the base to it. Nothing changes on a refusal. */
static int build_enable(struct sd_device *d, const struct sd_sreq *r, struct sd_wqe *w)
{
	struct sd_qp *t = sd_qp_of(d, r->x->task.wqe_enable.qp);
	int32_t count = r->x->task.wqe_enable.wqe_count;
	if (t == NULL || count < 0)
		return EINVAL;
	struct sd_queue *tq = w->op == SD_OP_SEND_EN ? &t->sq : &t->rq;
	if (!tq->managed)
		return EINVAL;
	uint64_t target, span;
	if (count > 0) {
		target = tq->en_base + (uint64_t)count;
		if (target > tq->head)
			return EINVAL; /* would release WQEs not posted yet */
		span = (uint64_t)count > tq->en_count ? (uint64_t)count : tq->en_count;
	} else {
		target = tq->head;
		span = tq->head - tq->en_base;
	}
	w->u.enable.qp = t;
	w->u.enable.base = tq->en_base;
	w->u.enable.count = count;
	w->u.enable.target = target;
	w->u.enable.gen = tq->gen;
	tq->en_count = span;
	if (r->flags & IBV_EXP_SEND_WAIT_EN_LAST) {
		tq->en_base += tq->en_count;
		tq->en_count = 0;
	}
	t->refs++;
	return 0;
}

/* Builds one send WQE; returns 0 or an errno, leaving the ring and every
 * counter untouched on error. Called with the device lock held. */
static int post_send_one(struct sd_device *d, struct sd_qp *q, const struct sd_sreq *r)
{
	struct sd_queue *sq = &q->sq;
	const uint64_t known = IBV_EXP_SEND_FENCE | IBV_EXP_SEND_SIGNALED |
	                       IBV_EXP_SEND_SOLICITED | IBV_EXP_SEND_INLINE |
	                       IBV_EXP_SEND_WITH_CALC | IBV_EXP_SEND_WAIT_EN_LAST;
	uint8_t op;

	if (q->ibv.state != IBV_QPS_RTS && q->ibv.state != IBV_QPS_ERR)
		return EINVAL;
	if (queue_full(sq))
		return ENOMEM;
	if ((r->flags & ~known) || r->num_sge < 0 || (uint32_t)r->num_sge > sq->max_sge ||
	    (r->num_sge > 0 && r->sg == NULL) || (r->x != NULL && r->x->comp_mask != 0))
		return EINVAL;

	switch (r->opcode) {
	case IBV_EXP_WR_SEND:                op = SD_OP_SEND; break;
	case IBV_EXP_WR_SEND_WITH_IMM:       op = SD_OP_SEND_IMM; break;
	case IBV_EXP_WR_RDMA_WRITE:          op = SD_OP_WRITE; break;
	case IBV_EXP_WR_RDMA_WRITE_WITH_IMM: op = SD_OP_WRITE_IMM; break;
	case IBV_EXP_WR_RDMA_READ:           op = SD_OP_READ; break;
	case IBV_EXP_WR_NOP:                 op = SD_OP_NOP; break;
	case IBV_EXP_WR_CQE_WAIT:            op = SD_OP_WAIT; break;
	case IBV_EXP_WR_SEND_ENABLE:         op = SD_OP_SEND_EN; break;
	case IBV_EXP_WR_RECV_ENABLE:         op = SD_OP_RECV_EN; break;
	case IBV_EXP_WR_ATOMIC_CMP_AND_SWP:  op = SD_OP_CMP_SWAP; break;
	case IBV_EXP_WR_ATOMIC_FETCH_AND_ADD: op = SD_OP_FETCH_ADD; break;
	default:
		return EINVAL; /* memory windows, UMR, TSO, masked atomics: not simulated */
	}
	/* The opcodes of each transport (ibv_post_send(3)'s table; rxe
	 * refuses the others at post): UD sends SENDs only, UC has no READs
	 * or atomics. The local opcodes run on any. */
	enum ibv_qp_type type = q->ibv.qp_type;
	if ((type == IBV_QPT_UD && (op == SD_OP_WRITE || op == SD_OP_WRITE_IMM)) ||
	    (type != IBV_QPT_RC && (op == SD_OP_READ || op == SD_OP_CMP_SWAP || op == SD_OP_FETCH_ADD)))
		return EINVAL;
	/* An atomic returns the 8 bytes it found into one 8-byte SGE. */
	if ((op == SD_OP_CMP_SWAP || op == SD_OP_FETCH_ADD) &&
	    (r->num_sge != 1 || r->sg[0].length != 8 || (r->flags & (IBV_EXP_SEND_INLINE | IBV_EXP_SEND_WITH_CALC))))
		return EINVAL;
	int cross = op == SD_OP_WAIT || op == SD_OP_SEND_EN || op == SD_OP_RECV_EN;
	int calc = (r->flags & IBV_EXP_SEND_WITH_CALC) != 0;
	int inl = (r->flags & IBV_EXP_SEND_INLINE) != 0;

	/* The posting-QP gate: the cross-channel opcodes and calc need a QP
	 * created with IBV_EXP_QP_CREATE_CROSS_CHANNEL. */
	if ((cross || calc) && !(q->create_flags & IBV_EXP_QP_CREATE_CROSS_CHANNEL))
		return EINVAL;
	if (cross && r->x == NULL)
		return EINVAL;
	/* IBV_EXP_SEND_WAIT_EN_LAST means something to CQE_WAIT and the
	 * enables only; on other opcodes mlx4 and mlx5 ignore it, and so
	 * does this device. */
	if (calc && ((op != SD_OP_SEND && op != SD_OP_WRITE_IMM) || inl || r->x == NULL || type == IBV_QPT_UD))
		return EINVAL;
	if (inl && op != SD_OP_SEND && op != SD_OP_SEND_IMM && op != SD_OP_WRITE && op != SD_OP_WRITE_IMM)
		return EINVAL;

	uint32_t idx = (uint32_t)(sq->head % sq->depth);
	struct sd_wqe w;
	memset(&w, 0, sizeof w);
	w.wr_id = r->wr_id;
	w.op = op;
	if ((r->flags & IBV_EXP_SEND_SIGNALED) || q->sig_all)
		w.flags |= SD_WQE_SIGNALED;
	if (cross && (r->flags & IBV_EXP_SEND_WAIT_EN_LAST))
		w.flags |= SD_WQE_EN_LAST;
	if (r->flags & IBV_EXP_SEND_SOLICITED)
		w.flags |= SD_WQE_SOLICITED;

	if (calc) {
		const struct ibv_exp_send_wr *x = r->x;
		if (x->op.calc.data_size != IBV_EXP_CALC_DATA_SIZE_64_BIT ||
		    !calc_supported(x->op.calc.calc_op, x->op.calc.data_type) || r->num_sge < 1)
			return EINVAL;
		for (int i = 0; i < r->num_sge; i++)
			if (r->sg[i].length != SD_CALC_OPERAND)
				return EINVAL; /* one operand per 16-byte gather entry */
		w.flags |= SD_WQE_CALC;
		w.calc_op = (uint8_t)x->op.calc.calc_op;
		w.calc_type = (uint8_t)x->op.calc.data_type;
	}

	/* A datagram's address: a live address handle of this device (found
	 * by address, never read before). The WQE copies what it needs of it
	 * (its link, with a reference of its own), as an HCA's WQE holds the
	 * address vector: the AH may go before the send runs. */
	struct sd_ah *ah = NULL;
	if (type == IBV_QPT_UD && (op == SD_OP_SEND || op == SD_OP_SEND_IMM)) {
		if (r->ah == NULL || sd_owns(d, SD_AH, r->ah) != 1)
			return EINVAL;
		ah = (struct sd_ah *)r->ah;
		/* The CA compares the AH's PD with the QP's when the send is
		 * posted (IB spec; as "InfiniBand Network Architecture",
		 * ch. 20, sums it up): a mismatch is refused at post, the
		 * first of the two outcomes the spec allows (the other is an
		 * error CQE, Local Operation Error). */
		if (ah->pd != q->pd)
			return EINVAL;
	}

	int err = 0;
	if (op == SD_OP_WAIT) {
		err = build_wait(d, r, &w);
	} else if (op == SD_OP_SEND_EN || op == SD_OP_RECV_EN) {
		err = build_enable(d, r, &w);
	} else if (op == SD_OP_CMP_SWAP || op == SD_OP_FETCH_ADD) {
		copy_sges(sq, idx, r->sg, 1);
		w.num_sge = 1;
		w.u.atomic.remote_addr = r->atomic_addr;
		w.u.atomic.rkey = r->atomic_rkey;
		w.u.atomic.compare_add = r->compare_add;
		w.u.atomic.swap = r->swap;
	} else {
		w.u.xfer.imm = r->imm;
		w.u.xfer.remote_addr = r->remote_addr;
		w.u.xfer.rkey = r->rkey;
		if (inl) {
			uint64_t total = 0;
			for (int i = 0; i < r->num_sge; i++)
				total += r->sg[i].length;
			if (total > sq->max_inline)
				return EINVAL;
			uint8_t *dst = &sq->inl[(size_t)idx * sq->max_inline];
			for (int i = 0; i < r->num_sge; i++) {
				if (r->sg[i].length != 0)
					memcpy(dst, (const void *)(uintptr_t)r->sg[i].addr, r->sg[i].length);
				dst += r->sg[i].length;
			}
			w.flags |= SD_WQE_INLINE;
			w.u.xfer.length = total;
		} else if (op != SD_OP_NOP) {
			int64_t total = copy_sges(sq, idx, r->sg, r->num_sge);
			if (total < 0)
				return EINVAL;
			w.num_sge = (uint16_t)r->num_sge;
			w.u.xfer.length = (uint64_t)total;
		}
	}
	if (err)
		return err;
	if (ah != NULL) {
		/* After the payload's checks, which may refuse the WR: the
		 * reference is taken only for a WQE that is posted. */
		w.flags |= SD_WQE_UD | (ah->global ? SD_WQE_GRH : 0);
		w.u.ud.remote_qpn = r->remote_qpn & 0xffffff;
		w.u.ud.remote_qkey = r->remote_qkey;
		w.u.ud.hop_limit = ah->hop_limit;
		w.u.ud.link = ah->link;
		ah->link->refs++;
	}
	sq->ring[idx] = w;
	sq->head++;
	return 0;
}

/* Receives may be posted in any state, RESET included (as mlx4 and mlx5
 * allow: the vendor's tests post them before INIT); RESET discards them.
 * The same for a QP's receive queue and an SRQ's (a QP with an SRQ has a
 * queue of no slots: ENOMEM, as mlx4 and mlx5 find it full). */
static int post_recv_one(struct sd_queue *rq, const struct ibv_recv_wr *wr)
{
	if (queue_full(rq))
		return ENOMEM;
	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > rq->max_sge ||
	    (wr->num_sge > 0 && wr->sg_list == NULL))
		return EINVAL;
	uint32_t idx = (uint32_t)(rq->head % rq->depth);
	int64_t total = copy_sges(rq, idx, wr->sg_list, wr->num_sge);
	if (total < 0)
		return EINVAL;
	struct sd_wqe *w = &rq->ring[idx];
	memset(w, 0, sizeof *w);
	w->wr_id = wr->wr_id;
	w->op = SD_OP_RECV;
	w->num_sge = (uint16_t)wr->num_sge;
	w->u.xfer.length = (uint64_t)total;
	rq->head++;
	return 0;
}

/* A send WR's comp_mask must be 0 (verbs_exp.h defines no bit of it:
 * IBV_EXP_SEND_WR_ATTR_RESERVED is 1). This device refuses any other
 * value with EINVAL; MLNX_OFED's mlx5 provider ignores the field, so a
 * program that leaves it uninitialised may run on an HCA by luck and
 * fail here. The errno alone does not say which field, so the first
 * refusal on a device says it on stderr, as the headers' inline verbs
 * say a bad comp_mask: the verb, the WR's index in the list and its
 * wr_id, the value and what to do. */
static void say_comp_mask(struct sd_device *d, int task, unsigned index, const struct ibv_exp_send_wr *wr)
{
	if (d->said_comp_mask)
		return;
	d->said_comp_mask = 1;
	char where[64] = "";
	if (task >= 0)
		snprintf(where, sizeof where, " (task %d's list)", task);
	fprintf(stderr,
	        "softdev: %s: work request %u%s, wr_id %" PRIu64 ", has comp_mask 0x%x: EINVAL, *bad_wr "
	        "pointing at it. comp_mask must be 0 (verbs_exp.h defines no bit of it); softdev refuses "
	        "any other value where MLNX_OFED's mlx5 provider ignores it. Zero the work request "
	        "(memset, or = {0}) before filling it in. (Said once per device.)\n",
	        task >= 0 ? "ibv_exp_post_task" : "ibv_exp_post_send", index, where, (uint64_t)wr->wr_id,
	        wr->comp_mask);
}

/* Lists. Each returns 0, or the errno of the first WR that failed with
 * *bad pointing at it; the WRs before it stay posted. task: the index of
 * the task whose list it is (ibv_exp_post_task), else -1. */

static int post_exp_list(struct sd_device *d, struct sd_qp *q, struct ibv_exp_send_wr *wr,
                         struct ibv_exp_send_wr **bad, int task)
{
	for (unsigned index = 0; wr != NULL; wr = wr->next, index++) {
		struct sd_sreq r = {
			.wr_id = wr->wr_id,
			.sg = wr->sg_list,
			.num_sge = wr->num_sge,
			.opcode = wr->exp_opcode,
			.flags = wr->exp_send_flags,
			.imm = wr->ex.imm_data,
			.remote_addr = wr->wr.rdma.remote_addr,
			.rkey = wr->wr.rdma.rkey,
			.compare_add = wr->wr.atomic.compare_add,
			.swap = wr->wr.atomic.swap,
			.atomic_addr = wr->wr.atomic.remote_addr,
			.atomic_rkey = wr->wr.atomic.rkey,
			.ah = wr->wr.ud.ah,
			.remote_qpn = wr->wr.ud.remote_qpn,
			.remote_qkey = wr->wr.ud.remote_qkey,
			.x = wr,
		};
		int err = post_send_one(d, q, &r);
		if (err) {
			if (err == EINVAL && wr->comp_mask != 0)
				say_comp_mask(d, task, index, wr);
			if (bad != NULL)
				*bad = wr;
			return err;
		}
	}
	return 0;
}

static int post_recv_list(struct sd_queue *rq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	for (; wr != NULL; wr = wr->next) {
		int err = post_recv_one(rq, wr);
		if (err) {
			if (bad != NULL)
				*bad = wr;
			return err;
		}
	}
	return 0;
}

/* ---- the operations the inline verbs dispatch to ---- */

/* Unlocks after a post. An autonomous device starts on what was posted
 * at once, as an HCA's doorbell starts it: the posting thread runs the
 * send queues until nothing more can run (what then waits for a peer is
 * the transport thread's, when the peer's packets come: the post does not
 * read the wire); other devices run it in the next poll or Progress. */
static void doorbell(struct sd_device *d)
{
	if (d->port.autonomous)
		sd_run_queues(d);
	sd_unlock(d);
}

int sd_op_exp_post_send(struct ibv_qp *qp, struct ibv_exp_send_wr *wr, struct ibv_exp_send_wr **bad)
{
	struct sd_device *d = sd_dev(qp->context);
	int err = sd_enter(d);
	if (err != 0) {
		if (bad != NULL)
			*bad = wr;
		return err;
	}
	struct sd_qp *q = sd_qp_of(d, qp);
	err = q == NULL ? EINVAL : post_exp_list(d, q, wr, bad, -1);
	if (q == NULL && bad != NULL)
		*bad = wr;
	doorbell(d);
	return err;
}

int sd_op_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct sd_device *d = sd_dev(qp->context);
	int err = sd_enter(d);
	if (err != 0) {
		if (bad != NULL)
			*bad = wr;
		return err;
	}
	struct sd_qp *q = sd_qp_of(d, qp);
	err = q == NULL ? EINVAL : 0;
	for (; err == 0 && wr != NULL; wr = wr->next) {
		struct sd_sreq r = {
			.wr_id = wr->wr_id,
			.sg = wr->sg_list,
			.num_sge = wr->num_sge,
			.opcode = (uint32_t)wr->opcode, /* same values as the exp opcodes */
			.flags = (uint32_t)wr->send_flags,
			.imm = wr->imm_data,
			.remote_addr = wr->wr.rdma.remote_addr,
			.rkey = wr->wr.rdma.rkey,
			.compare_add = wr->wr.atomic.compare_add,
			.swap = wr->wr.atomic.swap,
			.atomic_addr = wr->wr.atomic.remote_addr,
			.atomic_rkey = wr->wr.atomic.rkey,
			.ah = wr->wr.ud.ah,
			.remote_qpn = wr->wr.ud.remote_qpn,
			.remote_qkey = wr->wr.ud.remote_qkey,
			.x = NULL,
		};
		err = post_send_one(d, q, &r);
		if (err)
			break;
	}
	if (err && bad != NULL)
		*bad = wr;
	doorbell(d);
	return err;
}

int sd_op_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct sd_device *d = sd_dev(qp->context);
	int err = sd_enter(d);
	if (err != 0) {
		if (bad != NULL)
			*bad = wr;
		return err;
	}
	struct sd_qp *q = sd_qp_of(d, qp);
	if (q == NULL) {
		err = EINVAL;
		if (bad != NULL)
			*bad = wr;
	} else {
		err = post_recv_list(&q->rq, wr, bad);
	}
	doorbell(d);
	return err;
}

/* ibv_post_srq_recv (the header's inline verb calls ops.post_srq_recv):
 * into the SRQ's ring, as into a QP's; a send waiting for a receive at
 * any of its QPs may go then. */
int sd_op_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct sd_device *d = sd_dev(srq->context);
	int err = sd_enter(d);
	if (err != 0) {
		if (bad != NULL)
			*bad = wr;
		return err;
	}
	if (sd_owns(d, SD_SRQ, srq) != 1) {
		err = EINVAL;
		if (bad != NULL)
			*bad = wr;
	} else {
		err = post_recv_list(&((struct sd_srq *)srq)->rq, wr, bad);
	}
	doorbell(d);
	return err;
}

/* The task whose next closes a loop in the list from head (Brent's
 * cycle finding: one pass, no memory), or NULL if the list ends. Such a
 * list would be walked for ever (or until a ring fills), posting its
 * WRs again and again. */
static struct ibv_exp_task *task_loop(struct ibv_exp_task *head)
{
	if (head == NULL)
		return NULL;
	struct ibv_exp_task *tort = head, *hare = head->next;
	unsigned long power = 1, len = 1;
	while (hare != tort) {
		if (hare == NULL)
			return NULL;
		if (power == len) {
			tort = hare;
			power <<= 1;
			len = 0;
		}
		hare = hare->next;
		len++;
	}
	/* len is the loop's length: find where it starts, then the task
	 * len - 1 further on, whose next goes back there. */
	struct ibv_exp_task *a = head, *b = head;
	for (unsigned long i = 0; i < len; i++)
		b = b->next;
	while (a != b) {
		a = a->next;
		b = b->next;
	}
	for (unsigned long i = 1; i < len; i++)
		a = a->next;
	return a;
}

/* ibv_exp_post_task: each task's WR list goes to its QP's send or
 * receive queue, in list order, under one hold of the device lock (the
 * engine never sees half a list). The first failure stops the walk:
 * *bad_task names the task, and the WRs posted before it stay posted.
 * A list that loops back is refused whole (EINVAL, *bad_task the task
 * whose next closes the loop). */
int sd_op_post_task(struct ibv_context *ctx, struct ibv_exp_task *task, struct ibv_exp_task **bad)
{
	struct sd_device *d = sd_dev(ctx);
	int err = sd_enter(d);
	if (err != 0) {
		if (bad != NULL)
			*bad = task;
		return err;
	}
	void *bad_wr = NULL;
	struct ibv_exp_task *t = task_loop(task);
	if (t != NULL) {
		err = EINVAL; /* nothing posted: the list loops back at t */
		goto out;
	}
	int index = 0;
	for (t = task; t != NULL; t = t->next, index++) {
		struct sd_qp *q = sd_qp_of(d, t->item.qp);
		if (q == NULL || t->comp_mask != 0)
			err = EINVAL;
		else if (t->task_type == IBV_EXP_TASK_SEND)
			err = post_exp_list(d, q, t->item.send_wr, (struct ibv_exp_send_wr **)&bad_wr, index);
		else if (t->task_type == IBV_EXP_TASK_RECV)
			err = post_recv_list(&q->rq, t->item.recv_wr, (struct ibv_recv_wr **)&bad_wr);
		else
			err = EINVAL;
		if (err)
			break;
	}
out:
	if (err) {
		if (bad != NULL)
			*bad = t;
		d->fail_task = t;
		d->fail_wr = bad_wr;
		d->fail_errno = err;
	}
	doorbell(d);
	return err;
}

void sd_task_failure(struct ibv_context *ctx, void **task, void **wr, int *err)
{
	struct sd_device *d = sd_dev(ctx);
	*task = *wr = NULL;
	*err = 0;
	if (sd_enter(d) != 0)
		return;
	*task = d->fail_task;
	*wr = d->fail_wr;
	*err = d->fail_errno;
	sd_unlock(d);
}
