#include <stdlib.h>
#include "drain.h"

struct coll_test *coll_test_new(int ncq)
{
	struct coll_test *t = calloc(1, sizeof *t);
	if (t == NULL)
		return NULL;
	t->ncq = ncq;
	t->cq = calloc((size_t)ncq + 1, sizeof *t->cq);
	t->expect = calloc((size_t)ncq + 1, sizeof *t->expect);
	t->bounded = calloc((size_t)ncq + 1, sizeof *t->bounded);
	if (t->cq == NULL || t->expect == NULL || t->bounded == NULL) {
		coll_test_free(t);
		return NULL;
	}
	return t;
}

void coll_test_free(struct coll_test *t)
{
	if (t == NULL)
		return;
	free(t->cq);
	free(t->expect);
	free(t->bounded);
	free(t);
}

enum { BATCH = 16 };

/* Keeps the error that says most: the first one, unless it is a flush
 * (a QP in error flushes what it held) and a later one is not, as the
 * cause of a flush (a failed send, say) usually sits on another CQ. */
static void record(struct coll_test *t, int which, const struct ibv_exp_wc *wc, uint32_t got)
{
	if (t->failed && !(t->status == IBV_WC_WR_FLUSH_ERR && wc->status != IBV_WC_WR_FLUSH_ERR))
		return;
	t->failed = 1;
	t->bad_cq = which, t->poll_ret = 0, t->status = wc->status;
	t->wr_id = wc->wr_id, t->qp_num = wc->qp_num, t->got = got;
}

/* Polls cq until it is empty, or until *got reaches limit (0: none),
 * adding what it held to *got; the unsuccessful CQEs are recorded
 * (record), a poll error ends it. */
static void drain(struct coll_test *t, struct ibv_cq *cq, int which, uint32_t *got, uint32_t limit, uint64_t done_id, int *done)
{
	struct ibv_exp_wc wc[BATCH];
	for (;;) {
		int want = BATCH;
		if (limit != 0) {
			if (*got >= limit)
				return;
			if (limit - *got < BATCH)
				want = (int)(limit - *got);
		}
		int n = ibv_exp_poll_cq(cq, want, wc, sizeof wc[0]);
		if (n < 0) {
			if (!t->failed)
				t->failed = 1, t->bad_cq = which, t->poll_ret = n, t->status = -1;
			return;
		}
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS)
				record(t, which, &wc[i], *got + (uint32_t)i);
			else if (done != NULL && wc[i].wr_id == done_id)
				*done = 1;
		}
		*got += (uint32_t)n;
		if (n < want)
			return;
	}
}

static void count_error(struct coll_test *t, int which, uint32_t got)
{
	if (!t->failed)
		t->failed = 1, t->bad_cq = which, t->poll_ret = 0, t->status = -1, t->got = got;
}

/* 1: the run is complete and every CQ held what it should; 0: not yet;
 * -1: it failed (t says how; every CQ has been drained). */
int coll_test(struct coll_test *t)
{
	int done = 0;
	t->failed = 0;
	drain(t, t->done, -1, &t->seen, 0, t->done_id, &done);
	if (!done && !t->failed)
		return 0;
	uint32_t seen = t->seen;
	t->seen = 0;
	if (seen != t->done_expect)
		count_error(t, -1, seen);
	for (int i = 0; i < t->ncq; i++) {
		uint32_t got = 0;
		drain(t, t->cq[i], i, &got, t->bounded[i] ? t->expect[i] : 0, 0, NULL);
		if (got != t->expect[i])
			count_error(t, i, got);
	}
	return t->failed ? -1 : 1;
}
