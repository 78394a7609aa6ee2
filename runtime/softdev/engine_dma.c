//go:build linux && cgo

/*
 * softdev DMA: what the device reads and writes in host memory on behalf
 * of a WQE or a packet, and the checks an HCA makes first: local keys
 * against the QP's PD, remote keys, ranges and access against the
 * responder's MRs. Also the calc reduction and the atomics, which are
 * computed where the data is.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "engine.h"

/* ------------------------------------------------------------------ */
/* Registration: is the memory there                                    */
/* ------------------------------------------------------------------ */

/* One line of /proc/self/maps, "start-end perms ...": 1 if it parses. */
static int maps_line(const char *line, uintptr_t *lo, uintptr_t *hi, char perms[5])
{
	char *end;
	errno = 0;
	unsigned long long a = strtoull(line, &end, 16);
	if (end == line || *end != '-' || errno != 0)
		return 0;
	const char *b = end + 1;
	unsigned long long z = strtoull(b, &end, 16);
	if (end == b || *end != ' ' || errno != 0)
		return 0;
	for (int i = 0; i < 4; i++)
		if (end[1 + i] == 0 || end[1 + i] == '\n')
			return 0;
	memcpy(perms, end + 1, 4);
	perms[4] = 0;
	*lo = (uintptr_t)a;
	*hi = (uintptr_t)z;
	return 1;
}

/* msync(MS_ASYNC) fails with ENOMEM when part of the page range is not
 * mapped, and does nothing else: the check without /proc (mapping only,
 * not the permissions). */
int sd_check_mapped_msync(uintptr_t addr, size_t len, struct sd_unmapped *why)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t lo = addr & ~(page - 1), end = addr + len;
	if (end < addr || end > UINTPTR_MAX - page)
		return EINVAL;
	uintptr_t hi = (end + page - 1) & ~(page - 1);
	if (msync((void *)lo, hi - lo, MS_ASYNC) != 0) {
		if (why != NULL) {
			why->at = addr;
			why->perms[0] = 0;
		}
		return EFAULT;
	}
	return 0;
}

/*
 * What registration checks, as an HCA's driver finds out when it pins the
 * pages (get_user_pages fails with EFAULT): [addr, addr+len) is mapped
 * memory the process may read, and write too if write is set. It walks
 * /proc/self/maps (sorted, one line per mapping) and needs contiguous
 * mappings with those permissions from the first byte to the last: exact,
 * for the cost of reading a file of a few KB. Without /proc it falls back
 * to msync(2), which sees holes but not permissions. 0, EINVAL (the range
 * wraps around the address space) or EFAULT, with why (if not NULL)
 * saying the first address that is not so and the permissions found
 * there ("" for a hole). Both front ends call it, without the device
 * lock: the Go API's RegMR and the exported ibv_reg_mr (sd_reg_mr), and
 * the driver's reg_mr (op_reg_mr).
 */
int sd_check_mapped(uintptr_t addr, size_t len, int write, struct sd_unmapped *why)
{
	uintptr_t end = addr + len;
	if (end < addr)
		return EINVAL;
	FILE *f = fopen("/proc/self/maps", "re");
	if (f == NULL)
		return sd_check_mapped_msync(addr, len, why);
	/* Only the head of a line matters: a longer one (a long path) is read
	 * on to its newline and skipped. */
	char line[256];
	uintptr_t cur = addr;
	int err = EFAULT, head = 1;
	char perms[5] = "";
	while (fgets(line, sizeof line, f) != NULL) {
		int was_head = head;
		head = strchr(line, '\n') != NULL;
		uintptr_t lo, hi;
		char p4[5];
		if (!was_head || !maps_line(line, &lo, &hi, p4) || hi <= cur)
			continue;
		if (lo > cur)
			break; /* a hole at cur */
		if (p4[0] != 'r' || (write && p4[1] != 'w')) {
			memcpy(perms, p4, sizeof perms);
			break;
		}
		cur = hi;
		if (cur >= end) {
			err = 0;
			break;
		}
	}
	fclose(f);
	if (err != 0 && why != NULL) {
		why->at = cur;
		memcpy(why->perms, perms, sizeof why->perms);
	}
	return err;
}

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

int sd_local_ok(struct sd_device *d, struct sd_pd *pd, const struct ibv_sge *sg, int n, int write)
{
	for (int i = 0; i < n; i++)
		if (!local_ok(d, pd, &sg[i], write))
			return 0;
	return 1;
}

/* A remote range: rkey names a live MR in the responder's PD that grants
 * the access, and the range fits in it. (The responder QP's own access
 * flags are the transport's check.) */
int sd_remote_ok(struct sd_device *d, struct sd_qp *resp, uint64_t addr, uint64_t len,
                 uint32_t rkey, int access)
{
	struct sd_mr *m = sd_mr_by_key(d, rkey);
	return m != NULL && m->ibv.rkey == rkey && m->pd == resp->pd && (m->access & access) &&
	       in_mr(m, addr, len);
}

/* Copies len bytes from src (ns SGEs, starting soff bytes in) to dst (nd
 * SGEs, starting doff bytes in), piece by piece. Both lists were checked
 * and hold the bytes. */
void sd_sg_copy(const struct ibv_sge *dst, int nd, uint64_t doff, const struct ibv_sge *src, int ns,
                uint64_t soff, uint64_t len)
{
	int i = 0, j = 0;
	while (i < nd && doff >= dst[i].length)
		doff -= dst[i++].length;
	while (j < ns && soff >= src[j].length)
		soff -= src[j++].length;
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
uint32_t sd_calc(const struct sd_wqe *w, const struct ibv_sge *sg, uint8_t out[16])
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
/* Atomics                                                              */
/* ------------------------------------------------------------------ */

/* CMP_AND_SWP and FETCH_AND_ADD on the responder's 8 aligned bytes at
 * addr, a host-order uint64 (IBV_ATOMIC_HCA: atomic against the other
 * atomics of the device, which all run under its lock; __atomic keeps
 * them whole against the host too). Returns the value found there. */
uint64_t sd_atomic(int op, uint64_t addr, uint64_t compare_add, uint64_t swap)
{
	uint64_t *p = (uint64_t *)(uintptr_t)addr;
	if (op == SD_OP_FETCH_ADD)
		return __atomic_fetch_add(p, compare_add, __ATOMIC_SEQ_CST);
	uint64_t expected = compare_add;
	__atomic_compare_exchange_n(p, &expected, swap, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	return expected; /* the old value, whether it swapped or not */
}
