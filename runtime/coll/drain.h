/* The completion side of a schedule's run, in one C call (coll_test):
 * poll the communicator's completion CQ for the run's CQEs, and once
 * the last has come, drain every other CQ the run fed and check that
 * each held exactly the CQEs the schedule produces, all successful.
 * Draining is what frees a send or receive queue's slots on mlx4 and
 * mlx5 (their providers retire WQEs when the CQE is polled), so every
 * CQ a standing schedule feeds is polled once per run. */
#ifndef COLL_DRAIN_H
#define COLL_DRAIN_H

#include <stdint.h>
#include <infiniband/verbs_exp.h>

struct coll_test {
	struct ibv_cq  *done;        /* the manager's send CQ */
	uint32_t        done_expect; /* CQEs it gets per run, the last done_id */
	uint32_t        seen;        /* of this run, so far */
	uint64_t        done_id;
	int             ncq;
	struct ibv_cq **cq;          /* the others, with their per-run counts */
	uint32_t       *expect;
	unsigned char  *bounded;     /* 1: poll no more than expect (the rest are the next run's) */
	/* What went wrong (coll_test returned -1). */
	int             failed;
	int             bad_cq;      /* -1: done; else the index in cq */
	int             status;      /* enum ibv_wc_status, or -1: a count */
	int             poll_ret;    /* a negative ibv_exp_poll_cq result, or 0 */
	uint64_t        wr_id;
	uint32_t        qp_num;
	uint32_t        got;         /* CQEs found (counts) */
};

struct coll_test *coll_test_new(int ncq);
void coll_test_free(struct coll_test *t);
int coll_test(struct coll_test *t);

#endif
