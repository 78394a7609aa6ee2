/* Golden case: slice forms. A count beside a pointer to records (the
 * array), a stride after them, arrays of pointers, a returned list and its
 * free, and the candidates the rule refuses. The poll functions have the
 * real names, for their count convention (shim.Overrides); the others are
 * arrays_…, which the package's name drops from their Go names. */
#include <stddef.h>
#include <stdint.h>
#include <errno.h>

struct ibv_cq { int ready; }; /* completions there are to poll */
struct ibv_wc { uint64_t wr_id; int status; };
struct ibv_exp_wc { uint64_t wr_id; int status; uint32_t byte_len; };
struct ibv_sge { uint64_t addr; uint32_t length; uint32_t lkey; };
struct ibv_device { char name[8]; };
struct thing; /* declared, never defined */

/* The array after its count: min(num_entries, ready) completions. */
static inline int ibv_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc)
{
	int n = num_entries < cq->ready ? num_entries : cq->ready;
	for (int i = 0; i < n; i++) {
		wc[i].wr_id = 100 + i;
		wc[i].status = 0;
	}
	return n;
}

/* A stride after the pair: C refuses any but the size of its element. */
static inline int ibv_exp_poll_cq(struct ibv_cq *ibcq, int num_entries, struct ibv_exp_wc *wc, uint32_t wc_size)
{
	if (wc_size != sizeof *wc)
		return -EINVAL;
	int n = num_entries < ibcq->ready ? num_entries : ibcq->ready;
	for (int i = 0; i < n; i++) {
		wc[i].wr_id = 200 + i;
		wc[i].byte_len = 64;
	}
	return n;
}

/* The array before its count, a 16-bit one: the lengths' sum. */
static inline int arrays_sum(struct ibv_cq *cq, uint64_t *total, const struct ibv_sge *sg_list, uint16_t num_sge)
{
	uint64_t t = 0;
	for (int i = 0; i < num_sge; i++)
		t += sg_list[i].length;
	*total = t;
	return 0;
}

/* A size_t count, which every slice length fits. */
static inline int arrays_count(struct ibv_cq *cq, size_t count, struct ibv_sge *sge)
{
	return count == (size_t)cq->ready ? 0 : EINVAL;
}

/* An array of pointers to records: every device named. */
static inline int arrays_named(struct ibv_cq *cq, size_t num_devices, struct ibv_device **devices)
{
	for (size_t i = 0; i < num_devices; i++)
		if (devices[i] == NULL || devices[i]->name[0] == 0)
			return EINVAL;
	return 0;
}

/* Refused: a count between two pointers. */
static inline int arrays_between(struct ibv_cq *cq, struct ibv_sge *a, int num_sge, struct ibv_wc *b) { return 0; }
/* Refused: a count beside a record that has no size. */
static inline int arrays_things(struct ibv_cq *cq, struct thing *things, int num_things) { return 0; }
/* Refused: a count beside integers (a table entry would say so). */
static inline int arrays_values(struct ibv_cq *cq, uint64_t *values, uint32_t nvalues) { return 0; }
/* No candidates: a count beside the call's object only, an index. */
static inline int arrays_ack(struct ibv_cq *cq, unsigned int nevents) { return 0; }
static inline int arrays_at(struct ibv_cq *cq, int index, struct ibv_wc *wc) { return 0; }

/* A returned list and its free (exported: the test provides them). */
struct ibv_device **ibv_get_device_list(int *num_devices);
void ibv_free_device_list(struct ibv_device **list);
/* Refused: a returned list that no function frees. */
struct ibv_device **arrays_list(int *num_devices);
