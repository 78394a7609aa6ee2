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
	if (t->cq == NULL || t->expect == NULL) {
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
	free(t);
}

enum { BATCH = 16 };

/* Polls cq until it is empty, adding what it held to *got; -1 on the
 * first unsuccessful CQE or poll error (recorded in t). */
static int drain(struct coll_test *t, struct ibv_cq *cq, int which, uint32_t *got, uint64_t done_id, int *done)
{
	struct ibv_exp_wc wc[BATCH];
	for (;;) {
		int n = ibv_exp_poll_cq(cq, BATCH, wc, sizeof wc[0]);
		if (n < 0) {
			t->bad_cq = which, t->poll_ret = n, t->status = -1;
			return -1;
		}
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS) {
				t->bad_cq = which, t->poll_ret = 0, t->status = wc[i].status;
				t->wr_id = wc[i].wr_id, t->qp_num = wc[i].qp_num, t->got = *got + (uint32_t)i;
				return -1;
			}
			if (done != NULL && wc[i].wr_id == done_id)
				*done = 1;
		}
		*got += (uint32_t)n;
		if (n < BATCH)
			return 0;
	}
}

/* 1: the run is complete and every CQ held what it should; 0: not yet;
 * -1: it failed (t says how). */
int coll_test(struct coll_test *t)
{
	int done = 0;
	if (drain(t, t->done, -1, &t->seen, t->done_id, &done) < 0)
		return -1;
	if (!done)
		return 0;
	uint32_t seen = t->seen;
	t->seen = 0;
	if (seen != t->done_expect) {
		t->bad_cq = -1, t->poll_ret = 0, t->status = -1, t->got = seen;
		return -1;
	}
	for (int i = 0; i < t->ncq; i++) {
		uint32_t got = 0;
		if (drain(t, t->cq[i], i, &got, 0, NULL) < 0)
			return -1;
		if (got != t->expect[i]) {
			t->bad_cq = i, t->poll_ret = 0, t->status = -1, t->got = got;
			return -1;
		}
	}
	return 1;
}
