//go:build linux && cgo

/*
 * softdev engine, objects: the context, the dispatch tables and the
 * control path (PDs, MRs, CQs, QPs and their state machine). The post
 * path is in engine_post.c, execution and polling in engine_exec.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "engine.h"

/* The exp record must end exactly where the verbs context starts:
 * verbs_get_exp_ctx() finds it by subtracting its size. */
_Static_assert(offsetof(struct sd_device, vctx) == sizeof(struct verbs_context_exp),
               "softdev: padding between verbs_context_exp and verbs_context");
_Static_assert(sizeof(struct sd_wqe) == 64, "softdev: a WQE must be 64 bytes");
/* A UD WQE's immediate data and length are where a data WQE's are: the
 * engine reads them as u.xfer's for every SEND. */
_Static_assert(offsetof(struct sd_wqe, u.ud.imm) == offsetof(struct sd_wqe, u.xfer.imm) &&
               offsetof(struct sd_wqe, u.ud.length) == offsetof(struct sd_wqe, u.xfer.length),
               "softdev: u.ud must overlay u.xfer's imm and length");

struct sd_device *sd_dev(struct ibv_context *ctx)
{
	return container_of(ctx, struct sd_device, vctx.context);
}

/* Every hold of the lock may change what the engine can run (a post, an
 * enable's target reset, a state change), so it marks the device dirty;
 * the poll and progress paths, which change nothing the engine reads
 * (a poll only moves a CQ's consumer index, and a full ring never
 * blocks a producer), take it with sd_lock_clean and let sd_run skip a
 * device that has run to quiescence since. */
void sd_lock(struct sd_device *d)
{
	pthread_mutex_lock(&d->lock);
	d->quiet = 0;
}
void sd_lock_clean(struct sd_device *d) { pthread_mutex_lock(&d->lock); }
void sd_unlock(struct sd_device *d)
{
	if (d->port.wire_gathers > 0)
		sd_net_settle(&d->port);
	pthread_mutex_unlock(&d->lock);
}
/* For a process's exit, which must not wait: 1 if the lock was free and
 * is held now. */
int sd_trylock_clean(struct sd_device *d) { return pthread_mutex_trylock(&d->lock) == 0; }

/* A closed device's record and its objects' records are never freed
 * (sd_close), and neither is its lock: an entry point reached through a
 * handle that outlived Close locks valid memory, sees closed, and fails. */
static int enter_closed(struct sd_device *d)
{
	if (!d->closed)
		return 0;
	sd_unlock(d);
	return ENODEV;
}
int sd_enter(struct sd_device *d)
{
	sd_lock(d);
	return enter_closed(d);
}
int sd_enter_clean(struct sd_device *d)
{
	sd_lock_clean(d);
	return enter_closed(d);
}

/* For the entry points that read only what never changes: 0, or ENODEV
 * once the device is closed. */
static int check_open(struct sd_device *d)
{
	int err = sd_enter_clean(d);
	if (err == 0)
		sd_unlock(d);
	return err;
}

/* Doubly linked lists in creation order; the same four lines for each
 * object kind. */
#define LIST_APPEND(head, tail, o) do {                      \
	(o)->prev = (tail); (o)->next = NULL;                \
	if (tail) (tail)->next = (o); else (head) = (o);     \
	(tail) = (o);                                        \
} while (0)
#define LIST_REMOVE(head, tail, o) do {                      \
	if ((o)->prev) (o)->prev->next = (o)->next; else (head) = (o)->next; \
	if ((o)->next) (o)->next->prev = (o)->prev; else (tail) = (o)->prev; \
} while (0)

/* Does the list from head hold the record whose verbs struct is obj? */
#define LIST_HAS(head, obj) ({                                         \
	__typeof__(head) o_ = (head);                                  \
	while (o_ != NULL && (const void *)&o_->ibv != (obj))          \
		o_ = o_->next;                                         \
	o_ != NULL;                                                    \
})

/* Users hand us raw pointers: only pointers we gave out are converted,
 * found by address in the device's lists (destroyed CQs and QPs are in
 * the dead lists for good: sd_close). */
static uint32_t addr_slot(const struct sd_addrset *s, const void *p)
{
	return (uint32_t)((((uintptr_t)p >> 4) * 0x9e3779b97f4a7c15ull) >> 32) & (s->cap - 1);
}

static int addrset_get(const struct sd_addrset *s, const void *p)
{
	if (s->cap == 0)
		return 0;
	for (uint32_t i = addr_slot(s, p);; i = (i + 1) & (s->cap - 1)) {
		if (s->keys[i] == NULL)
			return 0;
		if (s->keys[i] == p)
			return s->state[i];
	}
}

/* Sets p's state, adding p if it is new; ENOMEM if the set cannot grow. */
static int addrset_put(struct sd_addrset *s, const void *p, int8_t state)
{
	if (2 * (s->n + 1) > s->cap) {
		struct sd_addrset g = { NULL, NULL, s->cap ? 2 * s->cap : 64, 0 };
		g.keys = calloc(g.cap, sizeof *g.keys);
		g.state = calloc(g.cap, sizeof *g.state);
		if (g.keys == NULL || g.state == NULL) {
			free(g.keys);
			free(g.state);
			return ENOMEM;
		}
		for (uint32_t i = 0; i < s->cap; i++)
			if (s->keys[i] != NULL)
				addrset_put(&g, s->keys[i], s->state[i]);
		free(s->keys);
		free(s->state);
		*s = g;
	}
	uint32_t i = addr_slot(s, p);
	while (s->keys[i] != NULL && s->keys[i] != p)
		i = (i + 1) & (s->cap - 1);
	if (s->keys[i] == NULL)
		s->n++;
	s->keys[i] = p;
	s->state[i] = state;
	return 0;
}

int sd_owns(struct sd_device *d, enum sd_kind kind, const void *obj)
{
	switch (kind) {
	case SD_PD:
		return LIST_HAS(d->pds, obj);
	case SD_MR:
		return LIST_HAS(d->mrs, obj);
	case SD_CQ:
		if (d->closed) /* the set went with the device; the records stay */
			return LIST_HAS(d->cqs, obj) ? 1 : LIST_HAS(d->dead_cqs, obj) ? -1 : 0;
		return addrset_get(&d->cqset, obj);
	case SD_QP:
		return LIST_HAS(d->qps, obj) ? 1 : LIST_HAS(d->dead_qps, obj) ? -1 : 0;
	case SD_AH:
		return LIST_HAS(d->ahs, obj);
	case SD_SRQ:
		return LIST_HAS(d->srqs, obj) ? 1 : LIST_HAS(d->dead_srqs, obj) ? -1 : 0;
	}
	return 0;
}

/* Is cq one of this device's live CQs? */
struct sd_cq *sd_cq_of(struct sd_device *d, struct ibv_cq *cq)
{
	return !d->closed && sd_owns(d, SD_CQ, cq) == 1 ? (struct sd_cq *)cq : NULL;
}

/* The QP behind a handle the verbs hand us (the header's inline code has
 * already read qp->context). Destroyed QPs stay allocated (sd_close
 * keeps every record), so a stale handle reads valid memory and misses
 * here. */
struct sd_qp *sd_qp_of(struct sd_device *d, struct ibv_qp *qp)
{
	if (qp == NULL || qp->context != &d->vctx.context || d->closed)
		return NULL;
	struct sd_qp *q = sd_qp_by_num(d, qp->qp_num);
	return q != NULL && &q->ibv == qp ? q : NULL;
}

struct sd_qp *sd_qp_by_num(struct sd_device *d, uint32_t qpn)
{
	if (qpn < SD_QPN_BASE || qpn - SD_QPN_BASE >= d->nqpn)
		return NULL;
	return d->qpn[qpn - SD_QPN_BASE];
}

/* The device's QPs in creation order: the first (q NULL), or the one
 * after q; NULL after the last. */
struct sd_qp *sd_qp_next(struct sd_device *d, const struct sd_qp *q)
{
	return q == NULL ? d->qps : q->next;
}

/* Keys: slot index in the upper 24 bits, a generation tag in the low 7,
 * bit 7 set for the remote key. A stale or mistyped key misses. */
struct sd_mr *sd_mr_by_key(struct sd_device *d, uint32_t key)
{
	uint32_t slot = key >> 8;
	if (slot >= d->nkeys || d->keys[slot] == NULL)
		return NULL;
	struct sd_mr *m = d->keys[slot];
	return (m->ibv.lkey == key || m->ibv.rkey == key) ? m : NULL;
}

static int grow(void **arr, uint32_t *cap, uint32_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	uint32_t n = *cap ? *cap * 2 : 16;
	while (n < need)
		n *= 2;
	void *p = realloc(*arr, (size_t)n * elem);
	if (p == NULL)
		return ENOMEM;
	memset((char *)p + (size_t)*cap * elem, 0, (size_t)(n - *cap) * elem);
	*arr = p;
	*cap = n;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Protection domains and memory regions                               */
/* ------------------------------------------------------------------ */

static struct ibv_pd *op_alloc_pd(struct ibv_context *ctx)
{
	struct sd_device *d = sd_dev(ctx);
	struct sd_pd *p = calloc(1, sizeof *p);
	if (p == NULL) {
		errno = ENOMEM;
		return NULL;
	}
	if ((errno = sd_enter(d)) != 0) {
		free(p);
		return NULL;
	}
	p->dev = d;
	p->ibv.context = ctx;
	p->ibv.handle = ++d->next_handle;
	LIST_APPEND(d->pds, d->pds_tail, p);
	sd_unlock(d);
	return &p->ibv;
}

/* The cores below run with the device lock held, so that the Go API's
 * entry points (sd_dealloc_pd, sd_reg_mr, sd_dereg_mr) check that the
 * object is a live one and use it under one hold of the lock: two
 * goroutines freeing the same PD or MR at once, or a registration racing
 * the PD's deallocation, cannot both pass the check. The ops (what a
 * libibverbs would call, trusting its argument) take the lock around
 * the same cores. */
static int dealloc_pd_locked(struct sd_device *d, struct sd_pd *p)
{
	if (p->refs != 0)
		return EBUSY;
	LIST_REMOVE(d->pds, d->pds_tail, p);
	free(p);
	return 0;
}

static int op_dealloc_pd(struct ibv_pd *pd)
{
	struct sd_pd *p = (struct sd_pd *)pd;
	struct sd_device *d = p->dev;
	int err = sd_enter(d);
	if (err != 0)
		return err;
	err = dealloc_pd_locked(d, p);
	sd_unlock(d);
	return err;
}

/* NULL with errno set on failure. */
static struct ibv_mr *reg_mr_locked(struct sd_device *d, struct sd_pd *p, void *addr,
                                    size_t length, int access)
{
	const int known = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
	                  IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

	/* As on hardware: remote write or atomic access needs local write. */
	if ((access & ~known) != 0 || addr == NULL || length == 0 ||
	    ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
	     !(access & IBV_ACCESS_LOCAL_WRITE)) ||
	    (uintptr_t)addr + length < (uintptr_t)addr) {
		errno = EINVAL;
		return NULL;
	}
	struct sd_mr *m = calloc(1, sizeof *m);
	if (m == NULL) {
		errno = ENOMEM;
		return NULL;
	}
	/* Reuse the first free key slot, else append one. */
	uint32_t slot = 0;
	while (slot < d->nkeys && d->keys[slot] != NULL)
		slot++;
	if (slot == d->nkeys) {
		if (slot >= (1u << 24) || grow((void **)&d->keys, &d->keycap, slot + 1, sizeof *d->keys)) {
			free(m);
			errno = ENOMEM;
			return NULL;
		}
		d->nkeys++;
	}
	uint32_t tag = (++d->key_gen) & 0x7f;
	m->dev = d;
	m->pd = p;
	m->slot = slot;
	m->access = access;
	m->ibv.context = p->ibv.context;
	m->ibv.pd = &p->ibv;
	m->ibv.addr = addr;
	m->ibv.length = length;
	m->ibv.handle = ++d->next_handle;
	m->ibv.lkey = slot << 8 | tag;
	m->ibv.rkey = slot << 8 | 0x80 | tag;
	d->keys[slot] = m;
	p->refs++;
	LIST_APPEND(d->mrs, d->mrs_tail, m);
	return &m->ibv;
}

/* Registration checks that the memory is there, as an HCA's pinning does
 * (sd_check_mapped: EFAULT), before it takes the device lock: a write
 * access needs writable pages. A zero length is reg_mr_locked's EINVAL. */
static int reg_mapped(void *addr, size_t length, int access)
{
	int write = (access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) != 0;
	return length == 0 ? 0 : sd_check_mapped((uintptr_t)addr, length, write, NULL);
}

static struct ibv_mr *op_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	struct sd_pd *p = (struct sd_pd *)pd;
	struct sd_device *d = p->dev;
	if ((errno = reg_mapped(addr, length, access)) != 0)
		return NULL;
	if ((errno = sd_enter(d)) != 0)
		return NULL;
	struct ibv_mr *mr = reg_mr_locked(d, p, addr, length, access);
	sd_unlock(d);
	return mr;
}

static void dereg_mr_locked(struct sd_device *d, struct sd_mr *m)
{
	d->keys[m->slot] = NULL;
	m->pd->refs--;
	LIST_REMOVE(d->mrs, d->mrs_tail, m);
	free(m);
}

static int op_dereg_mr(struct ibv_mr *mr)
{
	struct sd_mr *m = (struct sd_mr *)mr;
	struct sd_device *d = m->dev;
	int err = sd_enter(d);
	if (err != 0)
		return err;
	dereg_mr_locked(d, m);
	sd_unlock(d);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Completion queues                                                    */
/* ------------------------------------------------------------------ */

/* The exp create op: ibv_exp_create_cq() itself fills context, channel,
 * cq_context, the event counters and the mutex/cond after we return.
 * Like mlx4 and mlx5, the ring has the smallest power of two of slots
 * above cqe, and the CQ reports that size minus one as its cqe. */
static struct ibv_cq *op_exp_create_cq(struct ibv_context *ctx, int cqe,
                                       struct ibv_comp_channel *channel, int vector,
                                       struct ibv_exp_cq_init_attr *attr)
{
	struct sd_device *d = sd_dev(ctx);
	uint32_t flags = 0;

	if (cqe <= 0 || (uint32_t)cqe > d->max_cqe) {
		errno = EINVAL;
		return NULL;
	}
	if (attr != NULL && (attr->comp_mask & IBV_EXP_CQ_INIT_ATTR_FLAGS)) {
		if (attr->flags & ~(uint32_t)IBV_EXP_CQ_CREATE_CROSS_CHANNEL) {
			errno = EINVAL; /* timestamps, compression: not simulated */
			return NULL;
		}
		flags = attr->flags;
	}
	if (attr != NULL && (attr->comp_mask & ~(uint32_t)IBV_EXP_CQ_INIT_ATTR_FLAGS)) {
		errno = EINVAL; /* resource domains, peer-direct: not simulated */
		return NULL;
	}
	uint32_t size = 1;
	while (size <= (uint32_t)cqe)
		size <<= 1;
	struct sd_cq *c = calloc(1, sizeof *c);
	struct sd_cqe *ring = calloc(size, sizeof *ring);
	if (c == NULL || ring == NULL) {
		free(c);
		free(ring);
		errno = ENOMEM;
		return NULL;
	}
	for (uint32_t i = 0; i < size; i++)
		ring[i].idx = UINT64_MAX;
	/* Events go to the channel's pipe through a writer of the CQ's own
	 * (sd_event_pipe): the channel outlives the CQ (libibverbs refuses
	 * to destroy it before), the writer goes with the CQ. */
	c->notify_fd = -1;
	if (channel != NULL) {
		char path[64];
		snprintf(path, sizeof path, "/proc/self/fd/%d", channel->fd);
		struct stat st;
		int e = 0;
		if (fstat(channel->fd, &st) != 0 || !S_ISFIFO(st.st_mode))
			e = EINVAL; /* not a channel sd_event_pipe made */
		else if ((c->notify_fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC)) < 0)
			e = errno;
		if (e != 0) {
			free(c);
			free(ring);
			errno = e;
			return NULL;
		}
		c->channel = channel;
	}
	if ((errno = sd_enter(d)) != 0) {
		if (c->notify_fd >= 0)
			close(c->notify_fd);
		free(c);
		free(ring);
		return NULL;
	}
	c->dev = d;
	c->ring = ring;
	c->size = size;
	c->flags = (flags & IBV_EXP_CQ_CREATE_CROSS_CHANNEL) ? SD_CQ_CROSS_CHANNEL : 0;
	c->ibv.cqe = (int)(size - 1);
	if (addrset_put(&d->cqset, &c->ibv, 1) != 0) {
		sd_unlock(d);
		if (c->notify_fd >= 0)
			close(c->notify_fd);
		free(c);
		free(ring);
		errno = ENOMEM;
		return NULL;
	}
	c->ibv.handle = ++d->next_handle;
	LIST_APPEND(d->cqs, d->cqs_tail, c);
	sd_unlock(d);
	return &c->ibv;
}

/* Legacy create (only reachable if a real libibverbs routes here). */
static struct ibv_cq *op_create_cq(struct ibv_context *ctx, int cqe,
                                   struct ibv_comp_channel *channel, int vector)
{
	return op_exp_create_cq(ctx, cqe, channel, vector, NULL);
}

/* Takes one count off the event fd, if it has one. The device reads and
 * writes its counts through ev_fd, a private dup of async_fd (the same
 * eventfd), so a user closing async_fd, or its number being reused for
 * another file, cannot make the device fail or write into that file; and
 * it reads only what poll says is there, so a user who read the fd
 * directly (taking counts that were not theirs) cannot make it block or
 * fail. Device lock held. */
static void ev_take(struct sd_device *d)
{
	struct pollfd p = {d->ev_fd, POLLIN, 0};
	uint64_t one;
	if (poll(&p, 1, 0) == 1 && (p.revents & POLLIN))
		(void)!read(d->ev_fd, &one, sizeof one);
}

/* An event on a kernel_events device's async_fd: struct
 * ibv_kern_async_event, as the kernel's uverbs file gives it (the
 * object, or the port number for a port event). */
struct sd_kern_event {
	uint64_t element;
	uint32_t event_type, reserved;
};

/* Takes back from a pipe of events the records (rec bytes each, the
 * object's address first, as struct ibv_kern_async_event and struct
 * ibv_comp_event both begin) that name element: what the kernel does on
 * an object's DESTROY (ib_uverbs_release_uevent). rd is a non-blocking
 * reader of the pipe, wr a writer. The pipe is drained whole (nothing
 * else writes it meanwhile: its writers hold the device lock, as the
 * caller does, and every read and write of it is of whole records), the
 * other records written back in their order; a reader of the
 * application may take some meanwhile, which are then not dropped.
 * *dropped counts what was taken back. ENOMEM, with nothing dropped,
 * when there is no memory to drain the pipe into. */
static int pipe_drop(int rd, int wr, size_t rec, void *element, uint32_t *dropped)
{
	*dropped = 0;
	int avail = 0;
	if (ioctl(rd, FIONREAD, &avail) != 0 || avail <= 0)
		return 0;
	char *b = malloc((size_t)avail);
	if (b == NULL)
		return ENOMEM;
	size_t got = 0;
	while (got < (size_t)avail) {
		ssize_t n = read(rd, b + got, (size_t)avail - got);
		if (n > 0)
			got += (size_t)n;
		else if (n == 0 || errno != EINTR)
			break;
	}
	size_t kept = 0;
	for (size_t at = 0; at + rec <= got; at += rec) {
		uint64_t named;
		memcpy(&named, b + at, sizeof named);
		if (named == (uintptr_t)element)
			(*dropped)++;
		else
			memmove(b + kept, b + at, rec), kept += rec;
	}
	const char *p = b;
	while (kept > 0) { /* room for all: the pipe held them a moment ago */
		ssize_t w = write(wr, p, kept);
		if (w > 0)
			p += w, kept -= (size_t)w;
		else if (w < 0 && errno != EINTR)
			break;
	}
	free(b);
	return 0;
}

/* Drops the events still queued for element (a CQ, QP or SRQ being
 * destroyed), with their eventfd counts. Device lock held.
 *
 * On a kernel_events device the events are in async_fd's pipe, where
 * libibverbs reads them (struct ibv_kern_async_event), and the device
 * does what the kernel's DESTROY commands do: the object's unread events
 * are removed (pipe_drop), and the answer says how many of them the
 * application did read (events_reported), for ibv_cmd_destroy_* to wait
 * until it has acknowledged each (await_acks): *reported is raised (what
 * was written for the object) less what was dropped; 0 in process, where
 * nothing waits. */
static int drop_events(struct sd_device *d, void *element, uint32_t raised, uint32_t *reported)
{
	*reported = 0;
	if (d->kernel_events) {
		uint32_t dropped;
		int e = pipe_drop(d->ev_rd, d->ev_fd, sizeof(struct sd_kern_event), element, &dropped);
		if (e == 0)
			*reported = raised - dropped;
		return e;
	}
	uint32_t kept = 0;
	for (uint32_t i = 0; i < d->ev_len; i++) {
		struct sd_event e = d->events[(d->ev_head + i) % d->ev_cap];
		if (e.element == element) {
			ev_take(d);
			continue;
		}
		d->events[(d->ev_head + kept) % d->ev_cap] = e;
		kept++;
	}
	d->ev_len = kept;
	return 0;
}

/* What ibv_cmd_destroy_qp, _cq and _srq do once the kernel answered:
 * wait until the application has acknowledged each event of the object
 * it read (ibv_ack_async_event adds them to *completed under the
 * object's mutex and signals its cond), so that no acknowledgement
 * writes into an object after its destroy returned. kernel_events
 * devices only; device lock not held. */
static void await_acks(pthread_mutex_t *mu, pthread_cond_t *cond, const uint32_t *completed, uint32_t reported)
{
	pthread_mutex_lock(mu);
	while (*completed != reported)
		pthread_cond_wait(cond, mu);
	pthread_mutex_unlock(mu);
}

/* The completion events of a CQ being destroyed still unread in its
 * channel go with it, as the kernel drops them from the channel's file
 * on the CQ's DESTROY (ib_uverbs_release_ucq); *reported is what the
 * application did read, each to be acknowledged with ibv_ack_cq_events
 * before ibv_cmd_destroy_cq returns (comp_events_reported). The channel
 * may serve other CQs: theirs stay, in order. Device lock held. */
static int drop_comp_events(struct sd_cq *c, uint32_t *reported)
{
	*reported = c->comp_raised;
	if (c->notify_fd < 0)
		return 0;
	char path[64];
	snprintf(path, sizeof path, "/proc/self/fd/%d", c->channel->fd);
	int rd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (rd < 0)
		return errno;
	uint32_t dropped;
	int e = pipe_drop(rd, c->notify_fd, sizeof(uint64_t), &c->ibv, &dropped);
	close(rd);
	if (e == 0)
		*reported -= dropped;
	return e;
}

/* Destroyed CQs keep their record (not their ring) for good (sd_close):
 * a stale handle then reads valid memory, and every entry point refuses
 * it. */
static int op_destroy_cq(struct ibv_cq *cq)
{
	struct sd_cq *c = (struct sd_cq *)cq;
	struct sd_device *d = c->dev;
	int gone = sd_enter(d);
	if (gone != 0)
		return gone;
	uint32_t reported, comp_reported;
	int err = c->dead ? EINVAL : c->refs != 0 ? EBUSY : drop_comp_events(c, &comp_reported);
	if (err == 0)
		err = drop_events(d, cq, c->events_raised, &reported);
	if (err != 0) {
		sd_unlock(d);
		return err;
	}
	LIST_REMOVE(d->cqs, d->cqs_tail, c);
	addrset_put(&d->cqset, cq, -1); /* present already: cannot fail */
	c->dead = 1;
	free(c->ring);
	c->ring = NULL;
	if (c->notify_fd >= 0)
		close(c->notify_fd);
	c->notify_fd = -1;
	c->armed = SD_ARM_NONE;
	c->next = d->dead_cqs;
	d->dead_cqs = c;
	sd_unlock(d);
	if (d->kernel_events) {
		await_acks(&cq->mutex, &cq->cond, &cq->comp_events_completed, comp_reported);
		await_acks(&cq->mutex, &cq->cond, &cq->async_events_completed, reported);
	}
	pthread_mutex_destroy(&c->ibv.mutex); /* set up by ibv_exp_create_cq */
	pthread_cond_destroy(&c->ibv.cond);
	return 0;
}

/* ibv_exp_modify_cq: IBV_EXP_CQ_CAP_FLAGS sets or clears ignore-overrun;
 * moderation is accepted and has no effect (completions are immediate). */
static int op_exp_modify_cq(struct ibv_cq *cq, struct ibv_exp_cq_attr *attr, int mask)
{
	struct sd_device *d = sd_dev(cq->context);
	int err = sd_enter(d);
	if (err != 0)
		return err;
	struct sd_cq *c = sd_cq_of(d, cq);
	if (c == NULL || (mask & ~(IBV_EXP_CQ_MODERATION | IBV_EXP_CQ_CAP_FLAGS)))
		err = EINVAL;
	else if ((mask & IBV_EXP_CQ_CAP_FLAGS) &&
	         (!(attr->comp_mask & IBV_EXP_CQ_ATTR_CQ_CAP_FLAGS) ||
	          (attr->cq_cap_flags & ~(uint32_t)IBV_EXP_CQ_CAP_MASK)))
		err = EINVAL;
	else if ((mask & IBV_EXP_CQ_MODERATION) && !(attr->comp_mask & IBV_EXP_CQ_ATTR_MODERATION))
		err = EINVAL;
	else if (mask & IBV_EXP_CQ_CAP_FLAGS) {
		if (attr->cq_cap_flags & IBV_EXP_CQ_IGNORE_OVERRUN)
			c->flags |= SD_CQ_IGNORE_OVERRUN;
		else
			c->flags &= ~(uint32_t)SD_CQ_IGNORE_OVERRUN;
	}
	sd_unlock(d);
	return err;
}

/* Arms the CQ (sd_cq_arm: its next CQE, or one not polled yet, writes an
 * event to its channel). A CQ without a channel has nowhere to send it:
 * EINVAL. */
static int op_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	struct sd_device *d = sd_dev(cq->context);
	int err = sd_enter(d);
	if (err != 0)
		return err;
	struct sd_cq *c = sd_cq_of(d, cq);
	if (c == NULL || c->notify_fd < 0)
		err = EINVAL;
	else {
		sd_cq_arm(c, solicited_only);
		sd_net_app_waits(&d->port);
		sd_comp_schedule(d); /* its completions held back fire the event when due, polled or not */
	}
	sd_unlock(d);
	return err;
}

/* ------------------------------------------------------------------ */
/* Address handles                                                      */
/* ------------------------------------------------------------------ */

/*
 * An address handle names the device datagrams go to, as a QP's path
 * does: port 1; on InfiniBand a LID (sd_lid_of) unless a GRH is given,
 * whose dgid (sgid_index 0, the only GID) names it then; on Ethernet
 * (RoCE) a GRH is required. As mlx5_create_ah refuses them: a port other
 * than 1, dlid 0 on InfiniBand, no GRH on Ethernet (EINVAL). The AH keeps
 * its PD busy (EBUSY from dealloc_pd) and holds its link; a UD WQE copies
 * what it needs at post (the link, with a reference of its own), so the
 * AH may be destroyed while its sends are in flight. Device lock held.
 */
static struct ibv_ah *create_ah_locked(struct sd_device *d, struct sd_pd *p, const struct ibv_ah_attr *a)
{
	if (a->port_num != 1 || (d->port.port_ib && a->dlid == 0) || (!d->port.port_ib && !a->is_global) ||
	    (a->is_global && a->grh.sgid_index != 0)) {
		errno = EINVAL;
		return NULL;
	}
	uint8_t dgid[16];
	if (a->is_global)
		memcpy(dgid, a->grh.dgid.raw, 16);
	else
		sd_gid_of_lid(d->port.gid, a->dlid, dgid);
	struct sd_ah *h = calloc(1, sizeof *h);
	struct sd_link *l = h != NULL ? sd_link_get(&d->port, dgid) : NULL;
	if (l == NULL) {
		free(h);
		errno = ENOMEM;
		return NULL;
	}
	sd_wire_open_link(&d->port, l);
	if (l->kind == SD_LINK_WIRE && d->run_mode == SD_RUN_AUTO)
		d->port.autonomous = 1; /* a peer elsewhere: run like an HCA */
	h->dev = d;
	h->pd = p;
	h->link = l;
	h->global = a->is_global != 0;
	h->hop_limit = a->grh.hop_limit;
	h->ibv.context = p->ibv.context;
	h->ibv.pd = &p->ibv;
	h->ibv.handle = ++d->next_handle;
	p->refs++;
	LIST_APPEND(d->ahs, d->ahs_tail, h);
	return &h->ibv;
}

static void destroy_ah_locked(struct sd_device *d, struct sd_ah *h)
{
	LIST_REMOVE(d->ahs, d->ahs_tail, h);
	sd_link_put(&d->port, h->link);
	h->pd->refs--;
	free(h);
}

static struct ibv_ah *op_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct sd_pd *p = (struct sd_pd *)pd;
	struct sd_device *d = p->dev;
	if ((errno = sd_enter(d)) != 0)
		return NULL;
	struct ibv_ah *ah = create_ah_locked(d, p, attr);
	sd_unlock(d);
	return ah;
}

static int op_destroy_ah(struct ibv_ah *ah)
{
	struct sd_device *d = sd_dev(ah->context);
	int err = sd_enter(d);
	if (err != 0)
		return err;
	if (sd_owns(d, SD_AH, ah) == 1)
		destroy_ah_locked(d, (struct sd_ah *)ah);
	else
		err = EINVAL;
	sd_unlock(d);
	return err;
}

/* ------------------------------------------------------------------ */
/* Shared receive queues                                                */
/* ------------------------------------------------------------------ */

static int queue_init(struct sd_queue *q, uint32_t depth, uint32_t max_sge, uint32_t max_inline);
static void queue_free(struct sd_queue *q);

/*
 * ibv_create_srq: max_wr receive WQEs of max_sge entries each, reported
 * back exactly (max_wr 1..max_srq_wr, max_sge up to SD_MAX_SGE, else
 * EINVAL). srq_limit is not armed at creation (as the mlx4 and mlx5
 * kernel drivers take it only from modify_srq). The library fills in
 * context, srq_context, pd, events_completed, mutex and cond afterwards.
 */
static struct ibv_srq *op_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct sd_pd *p = (struct sd_pd *)pd;
	struct sd_device *d = p->dev;
	uint32_t wr = attr->attr.max_wr, sge = attr->attr.max_sge;
	if (wr == 0 || wr > d->max_qp_wr || sge > SD_MAX_SGE) {
		errno = EINVAL;
		return NULL;
	}
	struct sd_srq *s = calloc(1, sizeof *s);
	if (s == NULL || queue_init(&s->rq, wr, sge, 0) != 0) {
		if (s != NULL)
			queue_free(&s->rq);
		free(s);
		errno = ENOMEM;
		return NULL;
	}
	if ((errno = sd_enter(d)) != 0) {
		queue_free(&s->rq);
		free(s);
		return NULL;
	}
	s->dev = d;
	s->pd = p;
	s->ibv.context = pd->context;
	s->ibv.pd = pd;
	s->ibv.handle = ++d->next_handle;
	p->refs++;
	LIST_APPEND(d->srqs, d->srqs_tail, s);
	sd_unlock(d);
	return &s->ibv;
}

/* ibv_modify_srq: IBV_SRQ_LIMIT arms the limit (IBV_EVENT_SRQ_LIMIT_REACHED
 * once fewer WQEs than it are left, then disarmed); it must be below
 * max_wr (mlx5_ib_modify_srq). IBV_SRQ_MAX_WR is EINVAL: SRQs do not
 * resize (the mlx4 and mlx5 kernel drivers refuse it, and the device
 * does not report IBV_DEVICE_SRQ_RESIZE). Nothing changes on a refusal. */
static int op_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask)
{
	struct sd_device *d = sd_dev(srq->context);
	int err = sd_enter(d);
	if (err != 0)
		return err;
	struct sd_srq *s = sd_owns(d, SD_SRQ, srq) == 1 ? (struct sd_srq *)srq : NULL;
	if (s == NULL || (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) || (mask & IBV_SRQ_MAX_WR) ||
	    ((mask & IBV_SRQ_LIMIT) && attr->srq_limit >= s->rq.depth))
		err = EINVAL;
	else if (mask & IBV_SRQ_LIMIT)
		s->limit = attr->srq_limit;
	sd_unlock(d);
	return err;
}

static int op_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	struct sd_device *d = sd_dev(srq->context);
	int err = sd_enter(d);
	if (err != 0)
		return err;
	struct sd_srq *s = sd_owns(d, SD_SRQ, srq) == 1 ? (struct sd_srq *)srq : NULL;
	if (s == NULL) {
		err = EINVAL;
	} else {
		attr->max_wr = s->rq.depth;
		attr->max_sge = s->rq.max_sge;
		attr->srq_limit = s->limit;
	}
	sd_unlock(d);
	return err;
}

/* Destroyed SRQs keep their record (not their ring) for good, as CQs do:
 * ibv_post_srq_recv reads srq->context before any code of the device
 * runs, and a CQE still in a CQ names its SRQ. EBUSY while QPs use it. */
static int op_destroy_srq(struct ibv_srq *srq)
{
	struct sd_device *d = sd_dev(srq->context);
	int err = sd_enter(d);
	if (err != 0)
		return err;
	struct sd_srq *s = sd_owns(d, SD_SRQ, srq) == 1 ? (struct sd_srq *)srq : NULL;
	uint32_t reported;
	err = s == NULL ? EINVAL : s->refs != 0 ? EBUSY : drop_events(d, srq, s->events_raised, &reported);
	if (err != 0) {
		sd_unlock(d);
		return err;
	}
	LIST_REMOVE(d->srqs, d->srqs_tail, s);
	s->pd->refs--;
	queue_free(&s->rq);
	memset(&s->rq, 0, sizeof s->rq);
	s->dead = 1;
	s->next = d->dead_srqs;
	d->dead_srqs = s;
	sd_unlock(d);
	if (d->kernel_events)
		await_acks(&srq->mutex, &srq->cond, &srq->events_completed, reported);
	pthread_mutex_destroy(&srq->mutex); /* set up by ibv_create_srq */
	pthread_cond_destroy(&srq->cond);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Queue pairs                                                          */
/* ------------------------------------------------------------------ */

static int queue_init(struct sd_queue *q, uint32_t depth, uint32_t max_sge, uint32_t max_inline)
{
	q->depth = depth;
	q->max_sge = max_sge;
	q->max_inline = max_inline;
	q->ring = calloc(depth ? depth : 1, sizeof *q->ring);
	q->sge = calloc((size_t)(depth ? depth : 1) * (max_sge ? max_sge : 1), sizeof *q->sge);
	q->inl = max_inline ? calloc(depth ? depth : 1, max_inline) : NULL;
	return (q->ring && q->sge && (q->inl || !max_inline)) ? 0 : ENOMEM;
}

static void queue_free(struct sd_queue *q)
{
	free(q->ring);
	free(q->sge);
	free(q->inl);
}

static void qp_free(struct sd_qp *q)
{
	queue_free(&q->sq);
	queue_free(&q->rq);
	free(q->held.sge);
	free(q);
}

/*
 * ibv_exp_create_qp (and ibv_create_qp): an RC, UC or UD QP. With an SRQ
 * (a live one of this device) the QP has no receive queue of its own:
 * its max_recv_wr and max_recv_sge are ignored and reported as 0, and
 * receives come from the SRQ. Cross-channel and managed queues are
 * accepted on every type, as mlx5 takes them.
 */
static struct ibv_qp *op_exp_create_qp(struct ibv_context *ctx, struct ibv_exp_qp_init_attr *a)
{
	struct sd_device *d = sd_dev(ctx);
	const uint32_t known_mask = IBV_EXP_QP_INIT_ATTR_PD | IBV_EXP_QP_INIT_ATTR_CREATE_FLAGS;
	const uint32_t known_flags = IBV_EXP_QP_CREATE_CROSS_CHANNEL |
	                             IBV_EXP_QP_CREATE_MANAGED_SEND |
	                             IBV_EXP_QP_CREATE_MANAGED_RECV;
	uint32_t flags = (a->comp_mask & IBV_EXP_QP_INIT_ATTR_CREATE_FLAGS) ? a->exp_create_flags : 0;
	struct ibv_qp_cap cap = a->cap;

	if (a->srq != NULL)
		cap.max_recv_wr = cap.max_recv_sge = 0;
	if ((a->comp_mask & ~known_mask) || !(a->comp_mask & IBV_EXP_QP_INIT_ATTR_PD) ||
	    a->pd == NULL || (a->qp_type != IBV_QPT_RC && a->qp_type != IBV_QPT_UC && a->qp_type != IBV_QPT_UD) ||
	    (flags & ~known_flags) || a->send_cq == NULL || a->recv_cq == NULL ||
	    cap.max_send_sge > SD_MAX_SGE || cap.max_recv_sge > SD_MAX_SGE ||
	    cap.max_inline_data > SD_MAX_INLINE) {
		errno = EINVAL;
		return NULL;
	}
	if (cap.max_send_wr > d->max_qp_wr || cap.max_recv_wr > d->max_qp_wr) {
		errno = EINVAL; /* as mlx4 and mlx5: more than max_qp_wr */
		return NULL;
	}
	struct sd_qp *q = calloc(1, sizeof *q);
	if (q == NULL) {
		errno = ENOMEM;
		return NULL;
	}
	if (queue_init(&q->sq, cap.max_send_wr, cap.max_send_sge, cap.max_inline_data) ||
	    queue_init(&q->rq, cap.max_recv_wr, cap.max_recv_sge, 0)) {
		qp_free(q);
		errno = ENOMEM;
		return NULL;
	}
	q->sq.managed = (flags & IBV_EXP_QP_CREATE_MANAGED_SEND) != 0;
	q->rq.managed = (flags & IBV_EXP_QP_CREATE_MANAGED_RECV) != 0;

	int gone = sd_enter(d);
	if (gone != 0) {
		qp_free(q);
		errno = gone;
		return NULL;
	}
	struct sd_cq *scq = sd_cq_of(d, a->send_cq), *rcq = sd_cq_of(d, a->recv_cq);
	struct sd_pd *pd = (struct sd_pd *)a->pd;
	struct sd_srq *srq = (struct sd_srq *)a->srq;
	/* A live PD (and SRQ) of this device, found by address: a stale or
	 * foreign one is never read. */
	int ok = scq && rcq && sd_owns(d, SD_PD, a->pd) == 1 && (srq == NULL || sd_owns(d, SD_SRQ, srq) == 1);
	int e = ok ? 0 : EINVAL;
	if (e == 0 && srq != NULL &&
	    (q->held.sge = calloc(srq->rq.max_sge ? srq->rq.max_sge : 1, sizeof *q->held.sge)) == NULL)
		e = ENOMEM;
	if (e == 0 && grow((void **)&d->qpn, &d->qpncap, d->nqpn + 1, sizeof *d->qpn))
		e = ENOMEM;
	if (e != 0) {
		sd_unlock(d);
		qp_free(q);
		errno = e;
		return NULL;
	}
	q->dev = d;
	q->pd = pd;
	q->scq = scq;
	q->rcq = rcq;
	q->srq = srq;
	q->create_flags = flags;
	q->sig_all = a->sq_sig_all;
	pd->refs++;
	scq->refs++;
	rcq->refs++;
	if (srq != NULL)
		srq->refs++;
	q->ibv.context = ctx;
	q->ibv.qp_context = a->qp_context;
	q->ibv.pd = a->pd;
	q->ibv.send_cq = a->send_cq;
	q->ibv.recv_cq = a->recv_cq;
	q->ibv.srq = a->srq;
	q->ibv.handle = ++d->next_handle;
	q->ibv.qp_num = SD_QPN_BASE + d->nqpn;
	q->ibv.state = IBV_QPS_RESET;
	q->ibv.qp_type = a->qp_type;
	q->ibv.events_completed = 0;
	pthread_mutex_init(&q->ibv.mutex, NULL);
	pthread_cond_init(&q->ibv.cond, NULL);
	d->qpn[d->nqpn++] = q;
	LIST_APPEND(d->qps, d->qps_tail, q);
	sd_unlock(d);
	a->cap = cap; /* report the capacities granted: exactly those asked */
	return &q->ibv;
}

/* Legacy create: same attributes with only a PD. */
static struct ibv_qp *op_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct ibv_exp_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.qp_context = attr->qp_context;
	a.send_cq = attr->send_cq;
	a.recv_cq = attr->recv_cq;
	a.srq = attr->srq;
	a.cap = attr->cap;
	a.qp_type = attr->qp_type;
	a.sq_sig_all = attr->sq_sig_all;
	a.comp_mask = IBV_EXP_QP_INIT_ATTR_PD;
	a.pd = pd;
	struct ibv_qp *qp = op_exp_create_qp(pd->context, &a);
	if (qp != NULL)
		attr->cap = a.cap;
	return qp;
}

/* Drops the references a WQE holds: a WAIT's CQ, an enable's QP, a UD
 * SEND's link. Each is dropped once (the link pointer is cleared). */
void sd_wqe_release(struct sd_device *d, struct sd_wqe *w)
{
	if (w->op == SD_OP_WAIT)
		w->u.wait.cq->refs--;
	else if ((w->op == SD_OP_SEND_EN || w->op == SD_OP_RECV_EN) && w->u.enable.qp != NULL)
		w->u.enable.qp->refs--;
	else if ((w->op == SD_OP_SEND || w->op == SD_OP_SEND_IMM) && w->u.ud.link != NULL &&
	         (w->flags & SD_WQE_UD)) {
		sd_link_put(&d->port, w->u.ud.link);
		w->u.ud.link = NULL;
	}
}

/* Give back the references held by WQEs that will never run. */
void sd_queue_release_refs(struct sd_device *d, struct sd_queue *q)
{
	for (uint64_t i = q->tail; i < q->head; i++) {
		struct sd_wqe *w = &q->ring[i % q->depth];
		if (w->state == SD_WQE_DONE && !(w->flags & SD_WQE_UD))
			continue; /* ran: it let go when it did */
		sd_wqe_release(d, w);
	}
}

/* RESET: everything posted is discarded and every slot is free (CQEs of
 * the old generation still in a CQ free nothing when polled), the enable
 * base goes back to 0, and enables posted before (by other QPs) release
 * nothing any more. */
void sd_queue_reset(struct sd_device *d, struct sd_queue *q)
{
	sd_queue_release_refs(d, q);
	q->head = q->tail = q->next = q->freed = q->released = q->en_base = q->en_count = 0;
	q->gen++;
}

/* References to qp held by WQEs in qp's own queues (an ENABLE of itself):
 * they go away with the QP and must not keep it alive. */
static long self_refs(struct sd_qp *qp)
{
	long n = 0;
	struct sd_queue *qs[2] = {&qp->sq, &qp->rq};
	for (int k = 0; k < 2; k++) {
		struct sd_queue *q = qs[k];
		for (uint64_t i = q->tail; i < q->head; i++) {
			struct sd_wqe *w = &q->ring[i % q->depth];
			if ((w->op == SD_OP_SEND_EN || w->op == SD_OP_RECV_EN) && w->state != SD_WQE_DONE &&
			    w->u.enable.qp == qp)
				n++;
		}
	}
	return n;
}

/* A QP reset or destroyed while it held an SRQ WQE for a message it was
 * taking: the WQE is dropped without a completion, as the QP's own
 * receives are, and its slot in the SRQ is free again (it was copied out
 * when handed over). */
static void drop_held(struct sd_qp *q)
{
	if (q->held.valid) {
		q->held.valid = 0;
		q->srq->rq.freed++;
	}
}

/* Destroyed QPs keep their record (not their rings) for good (sd_close),
 * off the QP-number table: a stale handle reads valid memory and misses.
 * *reported: as drop_events says; the caller destroys the QP's mutex and
 * cond once nothing waits on them. */
static int destroy_qp_locked(struct sd_device *d, struct sd_qp *q, uint32_t *reported)
{
	/* Only WQEs of other QPs that still name this one keep it busy. */
	if (q->refs - self_refs(q) != 0)
		return EBUSY;
	int err = drop_events(d, &q->ibv, q->events_raised, reported);
	if (err != 0)
		return err;
	sd_comp_deliver_qp(d, q); /* its completions held back are written now, as they were before it went */
	sd_queue_release_refs(d, &q->sq);
	sd_queue_release_refs(d, &q->rq);
	sd_rc_stop(&d->port, q);
	sd_link_put(&d->port, q->path.link);
	q->path.link = NULL;
	q->pd->refs--;
	q->scq->refs--;
	q->rcq->refs--;
	if (q->srq != NULL) {
		drop_held(q);
		q->srq->refs--;
	}
	d->qpn[q->ibv.qp_num - SD_QPN_BASE] = NULL;
	LIST_REMOVE(d->qps, d->qps_tail, q);
	queue_free(&q->sq);
	queue_free(&q->rq);
	memset(&q->sq, 0, sizeof q->sq);
	memset(&q->rq, 0, sizeof q->rq);
	free(q->held.sge);
	q->held.sge = NULL;
	q->dead = 1;
	q->ibv.state = IBV_QPS_ERR;
	q->next = d->dead_qps;
	d->dead_qps = q;
	return 0;
}

static int op_destroy_qp(struct ibv_qp *qp)
{
	struct sd_device *d = sd_dev(qp->context);
	int err = sd_enter(d);
	if (err != 0)
		return err;
	struct sd_qp *q = sd_qp_of(d, qp);
	uint32_t reported;
	err = q == NULL ? EINVAL : destroy_qp_locked(d, q, &reported);
	sd_unlock(d);
	if (err != 0)
		return err;
	if (d->kernel_events)
		await_acks(&qp->mutex, &qp->cond, &qp->events_completed, reported);
	pthread_mutex_destroy(&qp->mutex); /* set up by the create */
	pthread_cond_destroy(&qp->cond);
	return 0;
}

/*
 * The QP state machine, as the kernel's ib_modify_qp_is_ok and an HCA
 * take it, for RC: RESET -> INIT (port, P_Key index and access flags
 * required) -> RTR (the path: an address vector, path MTU, destination
 * QP, rq_psn, max_dest_rd_atomic and min_rnr_timer required) -> RTS
 * (timeout, retry_cnt, rnr_retry, sq_psn and max_rd_atomic required);
 * INIT -> INIT, RTR -> RTR and RTS -> RTS with the optional attributes;
 * any state -> ERR (WQEs then complete with IBV_WC_WR_FLUSH_ERR) and ->
 * RESET (WQEs are discarded). UC is RC without what acknowledgements and
 * READs need: RTR takes no max_dest_rd_atomic or min_rnr_timer, RTS only
 * sq_psn. UD has no path: INIT takes the Q_Key instead of access flags,
 * RTR nothing, RTS sq_psn; the Q_Key may change in INIT, RTR and RTS (the
 * tables of ibv_modify_qp(3)). A required attribute missing, one the
 * transition does not take, or a value out of range is EINVAL, before
 * anything changes. The port is 1, with one GID: on Ethernet (RoCE) the
 * address vector must carry a GRH, whose dgid (sgid_index 0) names the
 * device the path goes to, this one included; on InfiniBand the dlid
 * does unless a GRH is given (sd_lid_of).
 */

/* What modify_qp uses of struct ibv_qp_attr / ibv_exp_qp_attr (the same
 * members in the same order up to alt_timeout). */
struct sd_qp_attr {
	enum ibv_qp_state state;
	uint32_t dest_qpn, rq_psn, sq_psn, qkey;
	int access;
	enum ibv_mtu path_mtu;
	struct ibv_ah_attr ah;
	uint16_t pkey_index;
	uint8_t max_rd_atomic, max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry;
};

#define SD_QP_ATTR_FROM(a) { (a)->qp_state, (a)->dest_qp_num, (a)->rq_psn, (a)->sq_psn, (a)->qkey, \
	(a)->qp_access_flags, (a)->path_mtu, (a)->ah_attr, (a)->pkey_index, (a)->max_rd_atomic, \
	(a)->max_dest_rd_atomic, (a)->min_rnr_timer, (a)->port_num, (a)->timeout, (a)->retry_cnt, (a)->rnr_retry }

enum { SD_MAX_RD_ATOMIC = 16 };

/* Required and optional attributes of each transition of a QP of type t
 * (the kernel's table); a transition not listed is illegal. */
static int transition(enum ibv_qp_type t, enum ibv_qp_state cur, enum ibv_qp_state next, uint64_t *req,
                      uint64_t *opt)
{
	const uint64_t init = t == IBV_QPT_UD ? IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY
	                                      : IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	*req = *opt = 0;
	if (next == IBV_QPS_RESET || next == IBV_QPS_ERR)
		return 1;
	switch (cur * 16 + next) {
	case IBV_QPS_RESET * 16 + IBV_QPS_INIT:
		*req = init;
		return 1;
	case IBV_QPS_INIT * 16 + IBV_QPS_INIT:
		*opt = init;
		return 1;
	case IBV_QPS_INIT * 16 + IBV_QPS_RTR:
		if (t == IBV_QPT_UD) {
			*opt = IBV_QP_PKEY_INDEX | IBV_QP_QKEY;
			return 1;
		}
		*req = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
		if (t == IBV_QPT_RC)
			*req |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		*opt = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
		return 1;
	case IBV_QPS_RTR * 16 + IBV_QPS_RTR:
		if (t == IBV_QPT_UD)
			return 0;
		*opt = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
		return 1;
	case IBV_QPS_RTR * 16 + IBV_QPS_RTS:
		*req = IBV_QP_SQ_PSN;
		if (t == IBV_QPT_UD) {
			*opt = IBV_QP_CUR_STATE | IBV_QP_QKEY;
			return 1;
		}
		*opt = IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MIG_STATE;
		if (t == IBV_QPT_RC) {
			*req |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
			*opt |= IBV_QP_MIN_RNR_TIMER;
		}
		return 1;
	case IBV_QPS_RTS * 16 + IBV_QPS_RTS:
		if (t == IBV_QPT_UD) {
			*opt = IBV_QP_CUR_STATE | IBV_QP_QKEY;
			return 1;
		}
		*opt = IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE;
		if (t == IBV_QPT_RC)
			*opt |= IBV_QP_MIN_RNR_TIMER;
		return 1;
	}
	return 0;
}

static int modify_qp(struct ibv_qp *qp, struct sd_qp_attr *a, uint64_t mask)
{
	struct sd_device *d = sd_dev(qp->context);
	int err = sd_enter(d);
	if (err != 0)
		return err;
	struct sd_qp *q = sd_qp_of(d, qp);
	err = EINVAL;
	if (q == NULL)
		goto out;
	enum ibv_qp_state cur = q->ibv.state;
	enum ibv_qp_state next = (mask & IBV_QP_STATE) ? a->state : cur;
	uint64_t req, opt;
	if (mask >> 21 != 0 || !transition(q->ibv.qp_type, cur, next, &req, &opt))
		goto out; /* exp-only attributes (DC, RSS, ...), or an illegal transition */
	uint64_t given = mask & ~(uint64_t)IBV_QP_STATE;
	if ((given & req) != req || (given & ~(req | opt)) != 0)
		goto out;
	if ((mask & IBV_QP_PORT) && a->port_num != 1)
		goto out;
	if ((mask & IBV_QP_ACCESS_FLAGS) &&
	    (a->access & ~(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
	                   IBV_ACCESS_REMOTE_ATOMIC)))
		goto out;
	if ((mask & IBV_QP_PATH_MTU) && (a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_4096))
		goto out;
	if (((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a->max_dest_rd_atomic > SD_MAX_RD_ATOMIC) ||
	    ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a->max_rd_atomic > SD_MAX_RD_ATOMIC) ||
	    ((mask & IBV_QP_MIN_RNR_TIMER) && a->min_rnr_timer > 31) ||
	    ((mask & IBV_QP_TIMEOUT) && a->timeout > 31) ||
	    ((mask & IBV_QP_RETRY_CNT) && a->retry_cnt > 7) ||
	    ((mask & IBV_QP_RNR_RETRY) && a->rnr_retry > 7) ||
	    ((mask & IBV_QP_DEST_QPN) && a->dest_qpn > 0xffffff))
		goto out;
	struct sd_link *link = NULL;
	uint8_t dgid[16];
	if (mask & IBV_QP_AV) {
		/* The port is 1, with one GID. On RoCE the GRH names the peer;
		 * on InfiniBand the dlid does unless a GRH is given (sd_lid_of:
		 * LID 0 leads nowhere: what is sent there is never answered). */
		if ((!a->ah.is_global && !d->port.port_ib) || a->ah.port_num != 1 ||
		    (a->ah.is_global && a->ah.grh.sgid_index != 0))
			goto out;
		if (a->ah.is_global)
			memcpy(dgid, a->ah.grh.dgid.raw, 16);
		else if (a->ah.dlid == 0)
			memset(dgid, 0, 16);
		else
			sd_gid_of_lid(d->port.gid, a->ah.dlid, dgid);
		if ((link = sd_link_get(&d->port, dgid)) == NULL) {
			err = ENOMEM;
			goto out;
		}
	}
	err = 0;
	struct sd_path *path = &q->path;
	if (link != NULL) {
		sd_link_put(&d->port, path->link);
		path->link = link;
		sd_wire_open_link(&d->port, link);
		if (link->kind == SD_LINK_WIRE && d->run_mode == SD_RUN_AUTO)
			d->port.autonomous = 1; /* a peer elsewhere: run like an HCA */
		memcpy(path->dgid, dgid, 16);
		path->global = a->ah.is_global;
		path->dlid = a->ah.dlid;
		path->hop_limit = a->ah.grh.hop_limit;
		path->port = a->ah.port_num;
		path->sgid_index = a->ah.grh.sgid_index;
	}
	if (mask & IBV_QP_ACCESS_FLAGS)
		q->access = a->access;
	if (mask & IBV_QP_QKEY)
		q->qkey = a->qkey;
	if (mask & IBV_QP_DEST_QPN)
		path->dest_qpn = a->dest_qpn;
	if (mask & IBV_QP_RQ_PSN)
		path->rq_psn = a->rq_psn & 0xffffff;
	if (mask & IBV_QP_SQ_PSN)
		path->sq_psn = a->sq_psn & 0xffffff;
	if (mask & IBV_QP_PATH_MTU) {
		path->path_mtu = (uint8_t)a->path_mtu;
		path->mtu = 128u << a->path_mtu;
	}
	if (mask & IBV_QP_TIMEOUT)
		path->timeout = a->timeout;
	if (mask & IBV_QP_RETRY_CNT)
		path->retry_cnt = a->retry_cnt;
	if (mask & IBV_QP_RNR_RETRY)
		path->rnr_retry = a->rnr_retry;
	if (mask & IBV_QP_MIN_RNR_TIMER)
		path->min_rnr_timer = a->min_rnr_timer;
	if (mask & IBV_QP_MAX_QP_RD_ATOMIC)
		path->max_rd_atomic = a->max_rd_atomic;
	if (mask & IBV_QP_MAX_DEST_RD_ATOMIC)
		path->max_dest_rd_atomic = a->max_dest_rd_atomic;
	if (next == IBV_QPS_RESET) {
		sd_rc_stop(&d->port, q);
		sd_queue_reset(d, &q->sq);
		sd_queue_reset(d, &q->rq);
		if (q->srq != NULL)
			drop_held(q);
		q->last_wqe = 0;
		q->qkey = 0;
		sd_link_put(&d->port, path->link);
		memset(path, 0, sizeof *path);
		memset(&q->req, 0, sizeof q->req);
		memset(&q->resp, 0, sizeof q->resp);
	} else if (next == IBV_QPS_ERR) {
		sd_qp_error(d, q);
	} else if (cur == IBV_QPS_INIT && next == IBV_QPS_RTR) {
		sd_rc_rtr(q);
	} else if (cur == IBV_QPS_RTR && next == IBV_QPS_RTS) {
		sd_rc_rts(q);
	}
	q->ibv.state = next;
out:
	sd_unlock(d);
	return err;
}

static int op_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	struct sd_qp_attr a = SD_QP_ATTR_FROM(attr);
	return modify_qp(qp, &a, (uint32_t)mask);
}

static int op_exp_modify_qp(struct ibv_qp *qp, struct ibv_exp_qp_attr *attr, uint64_t mask)
{
	struct sd_qp_attr a = SD_QP_ATTR_FROM(attr);
	/* The low 21 bits of the exp mask are the standard ones. */
	return modify_qp(qp, &a, mask);
}

/* ops.query_qp: what the device keeps of a QP: its state, access, path
 * (address vector with its GRH, MTU, destination, PSNs as set), timers,
 * retry counts and read/atomic depths, and its capacities. */
int sd_op_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask,
                   struct ibv_qp_init_attr *init)
{
	struct sd_device *d = sd_dev(qp->context);
	int err = sd_enter(d);
	if (err != 0)
		return err;
	struct sd_qp *q = sd_qp_of(d, qp);
	if (q == NULL) {
		sd_unlock(d);
		return EINVAL;
	}
	struct ibv_qp_cap cap = {
		.max_send_wr = q->sq.depth, .max_recv_wr = q->rq.depth,
		.max_send_sge = q->sq.max_sge, .max_recv_sge = q->rq.max_sge,
		.max_inline_data = q->sq.max_inline,
	};
	memset(attr, 0, sizeof *attr);
	attr->qp_state = attr->cur_qp_state = q->ibv.state;
	attr->qp_access_flags = q->access;
	attr->dest_qp_num = q->path.dest_qpn;
	attr->port_num = 1;
	attr->cap = cap;
	attr->path_mtu = q->path.path_mtu ? (enum ibv_mtu)q->path.path_mtu : IBV_MTU_256;
	attr->rq_psn = q->path.rq_psn;
	attr->sq_psn = q->path.sq_psn;
	attr->timeout = q->path.timeout;
	attr->retry_cnt = q->path.retry_cnt;
	attr->rnr_retry = q->path.rnr_retry;
	attr->min_rnr_timer = q->path.min_rnr_timer;
	attr->max_rd_atomic = q->path.max_rd_atomic;
	attr->max_dest_rd_atomic = q->path.max_dest_rd_atomic;
	attr->qkey = q->qkey;
	if (q->path.link != NULL) {
		attr->ah_attr.is_global = q->path.global;
		memcpy(attr->ah_attr.grh.dgid.raw, q->path.dgid, 16);
		attr->ah_attr.grh.hop_limit = q->path.hop_limit;
		attr->ah_attr.grh.sgid_index = q->path.sgid_index;
		attr->ah_attr.dlid = q->path.dlid;
		attr->ah_attr.port_num = q->path.port;
	}
	memset(init, 0, sizeof *init);
	init->qp_context = q->ibv.qp_context;
	init->send_cq = q->ibv.send_cq;
	init->recv_cq = q->ibv.recv_cq;
	init->cap = cap;
	init->qp_type = q->ibv.qp_type;
	init->srq = q->ibv.srq;
	init->sq_sig_all = q->sig_all;
	sd_unlock(d);
	(void)mask; /* every attribute is filled, as providers may */
	return 0;
}

/* ibv_exp_query_intf: the accelerated verbs families (ibv_intf,
 * perftest's --verb_type=accl) are not simulated. Without the op the
 * header's inline returns NULL with errno ENOSYS and leaves *status as
 * the caller had it (ibv_intf then prints a status of 0, "OK"); with it
 * the caller learns IBV_EXP_INTF_STAT_INTF_NOT_SUPPORTED. */
static void *op_exp_query_intf(struct ibv_context *ctx, struct ibv_exp_query_intf_params *params,
                               enum ibv_exp_query_intf_status *status)
{
	(void)ctx;
	(void)params;
	if (status != NULL)
		*status = IBV_EXP_INTF_STAT_INTF_NOT_SUPPORTED;
	errno = EOPNOTSUPP;
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Device queries                                                       */
/* ------------------------------------------------------------------ */

/* The limits both queries report: ibv_query_device's struct and the exp
 * one have these members, at different offsets. */
#define FILL_COMMON_ATTR(d, a) do {                                              \
	strcpy((a)->fw_ver, "softdev-2");                                        \
	(a)->node_guid = (d)->port.node_guid;                                    \
	(a)->sys_image_guid = (d)->port.node_guid;                               \
	(a)->max_qp = 1 << 16;                                                   \
	(a)->max_qp_wr = (int)(d)->max_qp_wr;                                    \
	(a)->max_sge = SD_MAX_SGE;                                               \
	(a)->max_cq = 1 << 16;                                                   \
	(a)->max_cqe = (int)(d)->max_cqe;                                        \
	(a)->max_mr = 1 << 24;                                                   \
	(a)->max_pd = 1 << 16;                                                   \
	(a)->max_ah = 1 << 16;                                                   \
	(a)->max_srq = 1 << 16;                                                  \
	(a)->max_srq_wr = (int)(d)->max_qp_wr;                                   \
	(a)->max_srq_sge = SD_MAX_SGE;                                           \
	(a)->phys_port_cnt = 1;                                                  \
	(a)->max_qp_rd_atom = (a)->max_qp_init_rd_atom = (a)->max_res_rd_atom = SD_MAX_RD_ATOMIC; \
} while (0)

static int op_query_device(struct ibv_context *ctx, struct ibv_device_attr *a)
{
	int err = check_open(sd_dev(ctx));
	if (err != 0)
		return err;
	memset(a, 0, sizeof *a);
	FILL_COMMON_ATTR(sd_dev(ctx), a);
	a->atomic_cap = IBV_ATOMIC_HCA;
	return 0;
}

/* The calc capabilities are those mlx4 and mlx5 report: 64-bit INT,
 * UINT and FLOAT with ADD, BAND, BXOR and BOR (MAXLOC is accepted on
 * UINT, as those providers do, without being reported). */
static int op_exp_query_device(struct ibv_context *ctx, struct ibv_exp_device_attr *a)
{
	int err = check_open(sd_dev(ctx));
	if (err != 0)
		return err;
	uint32_t want = a->comp_mask;
	const uint64_t ops = 1ull << IBV_EXP_CALC_OP_ADD | 1ull << IBV_EXP_CALC_OP_BAND |
	                     1ull << IBV_EXP_CALC_OP_BXOR | 1ull << IBV_EXP_CALC_OP_BOR;
	memset(a, 0, offsetof(struct ibv_exp_device_attr, comp_mask));
	FILL_COMMON_ATTR(sd_dev(ctx), a);
	a->exp_atomic_cap = IBV_EXP_ATOMIC_HCA; /* replies in host order */
	a->comp_mask = want & (IBV_EXP_DEVICE_ATTR_CALC_CAP | IBV_EXP_DEVICE_ATTR_EXP_CAP_FLAGS);
	if (want & IBV_EXP_DEVICE_ATTR_CALC_CAP) {
		a->calc_cap.data_types = 1ull << IBV_EXP_CALC_DATA_TYPE_INT |
		                         1ull << IBV_EXP_CALC_DATA_TYPE_UINT |
		                         1ull << IBV_EXP_CALC_DATA_TYPE_FLOAT;
		a->calc_cap.data_sizes = 1ull << IBV_EXP_CALC_DATA_SIZE_64_BIT;
		a->calc_cap.int_ops = a->calc_cap.uint_ops = a->calc_cap.fp_ops = ops;
	}
	if (want & IBV_EXP_DEVICE_ATTR_EXP_CAP_FLAGS)
		a->exp_device_cap_flags = IBV_EXP_DEVICE_CROSS_CHANNEL;
	return 0;
}

/* The port as a RoCE port reports itself: Ethernet, no LID, one GID
 * (the device's address), active while the interface holding that
 * address is up and running, with the largest MTU its frames carry. An
 * InfiniBand port (port_ib) is the same with a link layer of its kind, a
 * LID (sd_lid_of) and a subnet manager at LID 1. */
static int op_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *a)
{
	int err = check_open(sd_dev(ctx));
	if (err != 0)
		return err;
	if (port != 1)
		return EINVAL;
	int active, mtu;
	sd_port_state(&sd_dev(ctx)->port, &active, &mtu);
	memset(a, 0, sizeof *a);
	a->state = active ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
	a->phys_state = active ? 5 : 3; /* LinkUp, Disabled */
	a->max_mtu = IBV_MTU_4096;
	a->active_mtu = (enum ibv_mtu)mtu;
	a->gid_tbl_len = 1;
	a->pkey_tbl_len = 1;
	a->max_msg_sz = 1u << 31;
	a->link_layer = IBV_LINK_LAYER_ETHERNET;
	if (sd_dev(ctx)->port.port_ib) {
		a->link_layer = IBV_LINK_LAYER_INFINIBAND;
		a->lid = sd_dev(ctx)->port.lid;
		a->sm_lid = 1;
	}
	return 0;
}

int sd_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid)
{
	int err = check_open(sd_dev(ctx));
	if (err != 0)
		return err;
	if (port != 1 || index != 0)
		return EINVAL;
	memcpy(gid->raw, sd_dev(ctx)->port.gid, 16);
	return 0;
}

void sd_limits(struct ibv_context *ctx, uint32_t *max_qp_wr, uint32_t *max_cqe)
{
	struct sd_device *d = sd_dev(ctx);
	*max_qp_wr = d->max_qp_wr;
	*max_cqe = d->max_cqe;
}

/* ------------------------------------------------------------------ */
/* Asynchronous events                                                  */
/* ------------------------------------------------------------------ */

/* Queues an event and makes async_fd readable (one eventfd count per
 * queued event). Device lock held. */
void sd_raise(struct sd_device *d, int type, void *element)
{
	if (d->kernel_events) {
		/* As the kernel writes them for libibverbs to read. A full pipe
		 * loses it; the object counts those written (drop_events). */
		struct sd_kern_event k = { element != NULL ? (uintptr_t)element : 1, (uint32_t)type, 0 };
		uint32_t *raised = NULL;
		switch (element != NULL ? sd_event_kind(type) : -1) {
		case SD_CQ:
			raised = &((struct sd_cq *)element)->events_raised;
			break;
		case SD_QP:
			raised = &((struct sd_qp *)element)->events_raised;
			break;
		case SD_SRQ:
			raised = &((struct sd_srq *)element)->events_raised;
			break;
		}
		if (write(d->ev_fd, &k, sizeof k) == (ssize_t)sizeof k && raised != NULL)
			++*raised;
		return;
	}
	if (d->ev_len == d->ev_cap) {
		uint32_t cap = d->ev_cap ? 2 * d->ev_cap : 16;
		struct sd_event *n = malloc((size_t)cap * sizeof *n);
		if (n == NULL)
			return; /* out of memory: the event is lost, as the kernel would drop it */
		for (uint32_t i = 0; i < d->ev_len; i++)
			n[i] = d->events[(d->ev_head + i) % d->ev_cap];
		free(d->events);
		d->events = n;
		d->ev_cap = cap;
		d->ev_head = 0;
	}
	d->events[(d->ev_head + d->ev_len) % d->ev_cap] = (struct sd_event){type, element};
	d->ev_len++;
	uint64_t one = 1;
	(void)!write(d->ev_fd, &one, sizeof one); /* only a counter near 2^64 refuses it */
}

int sd_event_kind(int type)
{
	switch (type) {
	case IBV_EVENT_CQ_ERR:
		return SD_CQ;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		return SD_QP;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		return SD_SRQ;
	default:
		return -1;
	}
}

/* The QP whose completion overran a CQ (or met a CQ in error) goes to
 * the error state with IBV_EVENT_QP_FATAL, once. Device lock held. */
void sd_qp_fatal(struct sd_device *d, struct sd_qp *q)
{
	if (q->ibv.state == IBV_QPS_ERR)
		return;
	sd_qp_error(d, q);
	sd_raise(d, IBV_EVENT_QP_FATAL, &q->ibv);
}

/* ibv_get_async_event: the oldest pending event. Blocks until one is
 * pending unless async_fd was made non-blocking (then EAGAIN), as the
 * real verb reads the fd; sd_wake ends the wait with ECANCELED. */
int sd_get_async_event(struct ibv_context *ctx, int *type, void **element)
{
	struct sd_device *d = sd_dev(ctx);
	for (;;) {
		int gone = sd_enter(d);
		if (gone != 0)
			return gone;
		if (d->ev_len > 0) {
			struct sd_event e = d->events[d->ev_head];
			d->ev_head = (d->ev_head + 1) % d->ev_cap;
			d->ev_len--;
			ev_take(d);
			if (e.element != NULL) /* port events name no object: their ack counts nothing */
				d->ev_unacked++;
			sd_unlock(d);
			*type = e.type;
			*element = e.element;
			return 0;
		}
		sd_unlock(d);
		int fl = fcntl(d->ev_fd, F_GETFL); /* async_fd's flags: one description */
		if (fl >= 0 && (fl & O_NONBLOCK))
			return EAGAIN;
		struct pollfd p[2] = {{d->ev_fd, POLLIN, 0}, {d->wake_fd, POLLIN, 0}};
		if (poll(p, 2, -1) < 0 && errno != EINTR)
			return errno;
		if (p[1].revents & POLLIN)
			return ECANCELED;
		if ((p[0].revents | p[1].revents) & (POLLNVAL | POLLERR))
			return EBADF; /* the device's own fds were closed behind its back */
		if (p[0].revents & POLLIN) {
			/* Readable with no event queued: a count someone wrote to
			 * async_fd. Take it, or this loop would spin on it. */
			sd_lock(d);
			if (d->ev_len == 0)
				ev_take(d);
			sd_unlock(d);
		}
	}
}

/* ibv_ack_async_event: EINVAL when no event is waiting for its ack. */
int sd_ack_async_event(struct ibv_context *ctx)
{
	struct sd_device *d = sd_dev(ctx);
	int err = sd_enter(d);
	if (err != 0)
		return err;
	err = d->ev_unacked == 0 ? EINVAL : 0;
	if (!err)
		d->ev_unacked--;
	sd_unlock(d);
	return err;
}

/* Wakes a reader blocked in sd_get_async_event, for close. */
void sd_wake(struct ibv_context *ctx)
{
	uint64_t one = 1;
	(void)!write(sd_dev(ctx)->wake_fd, &one, sizeof one); /* non-blocking; set once */
}

/* ------------------------------------------------------------------ */
/* Open and close                                                       */
/* ------------------------------------------------------------------ */

/* A node GUID no other device has, in this process or elsewhere: 40
 * random bits under a fixed prefix (locally administered). */
static uint64_t new_guid(void)
{
	uint64_t r = 0;
	if (getrandom(&r, sizeof r, 0) != sizeof r) {
		struct timespec t;
		clock_gettime(CLOCK_REALTIME, &t);
		r = (uint64_t)t.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid() << 20 ^ (uint64_t)t.tv_sec;
	}
	return 0x02f7de0000000000ull | (r & 0xffffffffffull);
}

/*
 * The async_fd of a device whose events libibverbs reads itself
 * (kernel_events): a pipe taking one struct ibv_kern_async_event per
 * event, as the kernel's uverbs file does. *reader is the context's fd, a
 * blocking description open for reading and writing; *writer the
 * device's own, non-blocking (a full pipe loses the event rather than
 * stalling the device). Both are reopened through /proc/self/fd so that
 * each has a description of its own: O_NONBLOCK on one does not change
 * the other. sd_event_pipe serves completion channels the same way.
 */
int sd_event_pipe(int *reader, int *writer)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) != 0)
		return errno;
	char path[64];
	snprintf(path, sizeof path, "/proc/self/fd/%d", p[0]);
	*reader = open(path, O_RDWR | O_CLOEXEC);
	int e = errno;
	if (writer != NULL)
		*writer = -1;
	if (*reader >= 0 && writer != NULL) {
		snprintf(path, sizeof path, "/proc/self/fd/%d", p[1]);
		*writer = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
		e = errno;
		if (*writer < 0) {
			close(*reader);
			*reader = -1;
		}
	}
	close(p[0]);
	close(p[1]);
	return *reader >= 0 ? 0 : e;
}

/* Opens the device's file descriptors: async_fd (the context's), ev_fd
 * (the device's own way to it), ev_rd (kernel_events: a reader of its
 * own) and wake_fd. 0 or the errno of the call
 * that failed (EMFILE, ENFILE, ENOMEM, …). */
static int open_fds(struct sd_device *d)
{
	struct ibv_context *ctx = &d->vctx.context;
	int afd = -1, efd = -1, rfd = -1, wfd = -1, e = 0;
	if (d->kernel_events) {
		e = sd_event_pipe(&afd, &efd);
		if (e == 0) { /* the device's own reader, for drop_events: a description of its own */
			char path[64];
			snprintf(path, sizeof path, "/proc/self/fd/%d", afd);
			if ((rfd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)) < 0)
				e = errno;
		}
	} else {
		/* async_fd is a real file descriptor, as an application expects
		 * of an HCA's context: poll(2) it, then read events with
		 * Device.GetAsyncEvent. */
		afd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
		efd = afd >= 0 ? fcntl(afd, F_DUPFD_CLOEXEC, 0) : -1;
		e = efd < 0 ? errno : 0;
	}
	if (e == 0 && (wfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
		e = errno;
	if (e != 0) {
		if (afd >= 0)
			close(afd);
		if (efd >= 0)
			close(efd);
		if (rfd >= 0)
			close(rfd);
		return e;
	}
	ctx->async_fd = afd;
	d->ev_fd = efd;
	d->ev_rd = rfd;
	d->wake_fd = wfd;
	return 0;
}

int sd_init(struct sd_device *d, const struct sd_config *cfg)
{
	d->kernel_events = cfg->kernel_events;
	int e = open_fds(d);
	if (e != 0)
		return e;
	pthread_mutex_init(&d->lock, NULL);
	d->max_qp_wr = cfg->max_qp_wr;
	d->max_cqe = cfg->max_cqe;
	d->run_mode = cfg->autonomous;
	d->port.dev = d;
	d->port.node_guid = cfg->node_guid != 0 ? cfg->node_guid : new_guid();
	d->port.port_ib = cfg->port_ib;
	d->port.timescale = cfg->timescale > 0 ? cfg->timescale : 1;
	d->port.autonomous = cfg->autonomous == SD_RUN_THREAD;
	d->port.watch_always = cfg->kernel_events; /* a program may watch the port alone */
	d->comp_async = !cfg->sync_completions || cfg->jitter_ns != 0;
	d->comp_latency = d->comp_async ? SD_COMP_LATENCY_NS : 0;
	d->comp_jitter = cfg->jitter_ns;
	d->comp_rng = new_guid() | 1; /* xorshift64: any state but 0 */
	struct ibv_context *ctx = &d->vctx.context;
	e = sd_net_open(&d->port, cfg->addr, cfg->auto_loopback, cfg->listen_fd);
	if (e != 0) {
		close(ctx->async_fd);
		close(d->ev_fd);
		if (d->ev_rd >= 0)
			close(d->ev_rd);
		close(d->wake_fd);
		pthread_mutex_destroy(&d->lock);
		return e;
	}

	/* The verbs context: extended, and carrying the exp record (as
	 * libibverbs sets them up for a verbs_device's context). */
	d->vctx.sz = sizeof(struct verbs_context);
	d->vctx.has_comp_mask |= VERBS_CONTEXT_EXP;
	ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
	ctx->cmd_fd = -1;
	ctx->num_comp_vectors = 1;
	pthread_mutex_init(&ctx->mutex, NULL);

	struct ibv_context_ops *o = &ctx->ops;
	o->query_device = op_query_device;
	o->query_port = op_query_port;
	o->alloc_pd = op_alloc_pd;
	o->dealloc_pd = op_dealloc_pd;
	o->reg_mr = op_reg_mr;
	o->dereg_mr = op_dereg_mr;
	o->create_cq = op_create_cq;
	o->poll_cq = sd_op_poll_cq;
	o->req_notify_cq = op_req_notify_cq;
	o->destroy_cq = op_destroy_cq;
	o->create_qp = op_create_qp;
	o->modify_qp = op_modify_qp;
	o->query_qp = sd_op_query_qp;
	o->destroy_qp = op_destroy_qp;
	o->post_send = sd_op_post_send;
	o->post_recv = sd_op_post_recv;
	o->create_srq = op_create_srq;
	o->modify_srq = op_modify_srq;
	o->query_srq = op_query_srq;
	o->destroy_srq = op_destroy_srq;
	o->post_srq_recv = sd_op_post_srq_recv;
	o->create_ah = op_create_ah;
	o->destroy_ah = op_destroy_ah;

	/* The experimental entry points the inline verbs dispatch to. */
	d->exp.sz = sizeof(struct verbs_context_exp);
	d->exp.lib_exp_query_device = op_exp_query_device;
	d->exp.drv_exp_query_device = op_exp_query_device;
	d->exp.exp_create_cq = op_exp_create_cq;
	d->exp.lib_exp_modify_cq = op_exp_modify_cq;
	d->exp.drv_exp_modify_cq = op_exp_modify_cq;
	d->exp.lib_exp_create_qp = op_exp_create_qp;
	d->exp.drv_exp_create_qp = op_exp_create_qp;
	d->exp.lib_exp_modify_qp = op_exp_modify_qp;
	d->exp.drv_exp_modify_qp = op_exp_modify_qp;
	d->exp.drv_exp_post_send = sd_op_exp_post_send;
	d->exp.drv_exp_ibv_poll_cq = sd_op_exp_poll_cq;
	d->exp.lib_exp_post_task = sd_op_post_task;
	d->exp.drv_exp_post_task = sd_op_post_task;
	d->exp.exp_query_intf = op_exp_query_intf;
	return 0;
}

struct ibv_context *sd_open(const struct sd_config *cfg, int *err)
{
	struct sd_device *d = calloc(1, sizeof *d);
	if (d == NULL) {
		*err = ENOMEM;
		return NULL;
	}
	if ((*err = sd_init(d, cfg)) != 0) {
		free(d);
		return NULL;
	}
	return &d->vctx.context;
}

/* Frees what a closed or discarded device holds besides the records:
 * the network (its thread stopped), the tables, the event queue, the
 * file descriptors. Device lock held. */
static void free_tables(struct ibv_context *ctx)
{
	struct sd_device *d = sd_dev(ctx);
	sd_net_close(&d->port);
	sd_link_free_all(&d->port);
	free(d->cqset.keys);
	free(d->cqset.state);
	memset(&d->cqset, 0, sizeof d->cqset);
	free(d->keys);
	d->keys = NULL;
	d->nkeys = d->keycap = 0;
	free(d->qpn);
	d->qpn = NULL;
	d->nqpn = d->qpncap = 0;
	free(d->events);
	d->events = NULL;
	d->ev_head = d->ev_len = d->ev_cap = d->ev_unacked = 0;
	/* async_fd is closed, as ibv_close_device closes it, unless the user
	 * closed it already and its number now names another file. */
	struct stat a, e;
	if (!d->kernel_events && fstat(ctx->async_fd, &a) == 0 && fstat(d->ev_fd, &e) == 0 &&
	    a.st_dev == e.st_dev && a.st_ino == e.st_ino)
		close(ctx->async_fd); /* (libibverbs closes a kernel_events device's itself) */
	close(d->ev_fd);
	if (d->ev_rd >= 0)
		close(d->ev_rd);
	close(d->wake_fd);
	ctx->async_fd = d->ev_fd = d->ev_rd = d->wake_fd = -1;
}

/*
 * Closes the device, counting what the user had not destroyed.
 *
 * Handles outlive Close: the headers' inline verbs (ibv_post_send,
 * ibv_poll_cq, ibv_exp_post_task, …) read qp->context, the context's
 * dispatch tables and the exp record before any code of the device runs,
 * and a caller may do that at any moment, Close or not. So the device's
 * record, its lock and the records of every PD, MR, CQ, QP, SRQ and AH
 * live at Close (and of every CQ, QP and SRQ destroyed before) are never
 * freed: they
 * stay as tombstones whose entry points take the lock, find the device
 * closed and fail with ENODEV (sd_enter). Everything else goes: rings,
 * scatter/gather and inline areas, the tables, the event queue, the
 * network and the file descriptors. A tombstone costs the device's
 * record (sizeof(struct sd_device)) plus the objects' records. The
 * transport thread stops first (it takes the lock); calls in flight hold
 * the lock, so they finish before the rest starts.
 */
void sd_close(struct ibv_context *ctx, struct sd_leaks *leaks)
{
	struct sd_device *d = sd_dev(ctx);
	memset(leaks, 0, sizeof *leaks);
	sd_net_stop(&d->port);
	sd_lock(d);
	d->closed = 1;
	for (struct sd_qp *q = d->qps; q != NULL; q = q->next) {
		leaks->qps++;
		sd_rc_stop(&d->port, q);
		q->path.link = NULL; /* free_tables frees the links */
		queue_free(&q->sq);
		queue_free(&q->rq);
		memset(&q->sq, 0, sizeof q->sq);
		memset(&q->rq, 0, sizeof q->rq);
		free(q->held.sge);
		q->held.sge = NULL;
		q->ibv.state = IBV_QPS_ERR;
	}
	for (struct sd_cq *c = d->cqs; c != NULL; c = c->next) {
		leaks->cqs++;
		free(c->ring);
		c->ring = NULL;
		if (c->notify_fd >= 0)
			close(c->notify_fd);
		c->notify_fd = -1;
	}
	for (struct sd_srq *r = d->srqs; r != NULL; r = r->next) {
		leaks->srqs++;
		queue_free(&r->rq);
		memset(&r->rq, 0, sizeof r->rq);
	}
	for (struct sd_ah *h = d->ahs; h != NULL; h = h->next) {
		leaks->ahs++;
		h->link = NULL; /* free_tables frees the links */
	}
	for (struct sd_mr *m = d->mrs; m != NULL; m = m->next)
		leaks->mrs++;
	for (struct sd_pd *p = d->pds; p != NULL; p = p->next)
		leaks->pds++;
	/* The lists stay, linking the tombstones: sd_owns still tells the
	 * exported verbs (front_go.c) that a handle was this device's. */
	free_tables(ctx);
	sd_unlock(d);
}

void sd_discard(struct ibv_context *ctx)
{
	struct sd_device *d = sd_dev(ctx);
	sd_net_stop(&d->port);
	sd_lock(d);
	free_tables(ctx);
	sd_unlock(d);
	pthread_mutex_destroy(&d->lock);
	pthread_mutex_destroy(&ctx->mutex);
	free(d);
}

/* Undoes sd_init for a record someone else frees (libibverbs, after the
 * provider's uninit_context): no tombstones, since the record they would
 * hang from goes too, so every object is freed with its rings. A handle
 * used after ibv_close_device is the caller's bug there, as on an HCA. */
void sd_fini(struct sd_device *d)
{
	sd_net_stop(&d->port);
	sd_lock(d);
	d->closed = 1;
	for (struct sd_qp *q = d->qps; q != NULL; q = q->next)
		sd_rc_stop(&d->port, q);
	free_tables(&d->vctx.context);
	free(d->pend); /* completions held back: their CQs go below */
	d->pend = NULL;
	d->pend_head = d->pend_len = d->pend_cap = 0;
	while (d->qps != NULL || d->dead_qps != NULL) {
		struct sd_qp *q = d->qps != NULL ? d->qps : d->dead_qps;
		if (q == d->qps)
			d->qps = q->next;
		else
			d->dead_qps = q->next;
		qp_free(q);
	}
	while (d->srqs != NULL || d->dead_srqs != NULL) {
		struct sd_srq *r = d->srqs != NULL ? d->srqs : d->dead_srqs;
		if (r == d->srqs)
			d->srqs = r->next;
		else
			d->dead_srqs = r->next;
		queue_free(&r->rq);
		free(r);
	}
	while (d->ahs != NULL) {
		struct sd_ah *h = d->ahs;
		d->ahs = h->next;
		free(h);
	}
	while (d->cqs != NULL || d->dead_cqs != NULL) {
		struct sd_cq *c = d->cqs != NULL ? d->cqs : d->dead_cqs;
		if (c == d->cqs)
			d->cqs = c->next;
		else
			d->dead_cqs = c->next;
		if (c->notify_fd >= 0)
			close(c->notify_fd);
		free(c->ring);
		free(c);
	}
	while (d->mrs != NULL) {
		struct sd_mr *m = d->mrs;
		d->mrs = m->next;
		free(m);
	}
	while (d->pds != NULL) {
		struct sd_pd *p = d->pds;
		d->pds = p->next;
		free(p);
	}
	sd_unlock(d);
	pthread_mutex_destroy(&d->lock);
}

/* ------------------------------------------------------------------ */
/* Control path as libibverbs' exported verbs would run it              */
/* ------------------------------------------------------------------ */

struct ibv_pd *sd_alloc_pd(struct ibv_context *ctx, int *err)
{
	errno = 0;
	struct ibv_pd *pd = ctx->ops.alloc_pd(ctx);
	if (pd == NULL)
		*err = errno ? errno : ENOMEM;
	else
		pd->context = ctx;
	return pd;
}

/* The ops trust their argument; the Go API may be handed anything (nil,
 * a destroyed object, one of another device), so these wrappers first
 * look the pointer up among this device's live objects, comparing
 * addresses only (sd_owns). */
int sd_dealloc_pd(struct ibv_context *ctx, struct ibv_pd *pd)
{
	struct sd_device *d = sd_dev(ctx);
	int err = sd_enter(d);
	if (err != 0)
		return err;
	err = sd_owns(d, SD_PD, pd) == 1 ? dealloc_pd_locked(d, (struct sd_pd *)pd) : EINVAL;
	sd_unlock(d);
	return err;
}

struct ibv_mr *sd_reg_mr(struct ibv_context *ctx, struct ibv_pd *pd, void *addr, size_t len,
                         int access, int *err)
{
	struct sd_device *d = sd_dev(ctx);
	struct ibv_mr *mr = NULL;
	if ((*err = reg_mapped(addr, len, access)) != 0)
		return NULL;
	if ((*err = sd_enter(d)) != 0)
		return NULL;
	errno = 0;
	if (sd_owns(d, SD_PD, pd) != 1)
		errno = EINVAL;
	else
		mr = reg_mr_locked(d, (struct sd_pd *)pd, addr, len, access);
	if (mr == NULL)
		*err = errno ? errno : ENOMEM;
	sd_unlock(d);
	return mr;
}

int sd_dereg_mr(struct ibv_context *ctx, struct ibv_mr *mr)
{
	struct sd_device *d = sd_dev(ctx);
	int err = sd_enter(d);
	if (err != 0)
		return err;
	int ok = sd_owns(d, SD_MR, mr) == 1;
	if (ok)
		dereg_mr_locked(d, (struct sd_mr *)mr);
	sd_unlock(d);
	return ok ? 0 : EINVAL;
}

/* ibv_destroy_cq, with the library's bookkeeping: the CQ's completion
 * channel counts one CQ fewer (refcnt, under the context's mutex). */
int sd_destroy_cq(struct ibv_context *ctx, struct ibv_cq *cq)
{
	struct sd_device *d = sd_dev(ctx);
	int err = sd_enter(d);
	if (err != 0)
		return err;
	int ok = sd_cq_of(d, cq) != NULL;
	sd_unlock(d);
	if (!ok)
		return EINVAL;
	struct ibv_comp_channel *ch = cq->channel;
	if (ch != NULL)
		pthread_mutex_lock(&ch->context->mutex);
	err = ctx->ops.destroy_cq(cq);
	if (ch != NULL) {
		if (err == 0)
			--ch->refcnt;
		pthread_mutex_unlock(&ch->context->mutex);
	}
	return err;
}

int sd_destroy_qp(struct ibv_context *ctx, struct ibv_qp *qp)
{
	struct sd_device *d = sd_dev(ctx);
	int err = sd_enter(d);
	if (err != 0)
		return err;
	int ok = sd_owns(d, SD_QP, qp) == 1;
	sd_unlock(d);
	return ok ? ctx->ops.destroy_qp(qp) : EINVAL;
}

/* ibv_modify_qp and ibv_query_port, as libibverbs runs them: through
 * ops.modify_qp (the standard struct ibv_qp_attr and IBV_QP_* mask) and
 * ops.query_port. */
int sd_modify_qp(struct ibv_context *ctx, struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	struct sd_device *d = sd_dev(ctx);
	int err = sd_enter(d);
	if (err != 0)
		return err;
	int ok = sd_owns(d, SD_QP, qp) == 1;
	sd_unlock(d);
	return ok ? ctx->ops.modify_qp(qp, attr, mask) : EINVAL;
}

int sd_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr)
{
	return ctx->ops.query_port(ctx, port, attr);
}

/* ibv_create_srq: the op, then what libibverbs fills in (context,
 * srq_context, pd, events_completed, mutex, cond). */
struct ibv_srq *sd_create_srq(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_srq_init_attr *attr,
                              int *err)
{
	struct sd_device *d = sd_dev(ctx);
	if ((*err = sd_enter(d)) != 0)
		return NULL;
	int ok = sd_owns(d, SD_PD, pd) == 1;
	sd_unlock(d);
	if (!ok || attr == NULL) {
		*err = EINVAL;
		return NULL;
	}
	errno = 0;
	struct ibv_srq *srq = ctx->ops.create_srq(pd, attr);
	if (srq == NULL) {
		*err = errno ? errno : ENOMEM;
		return NULL;
	}
	srq->context = ctx;
	srq->srq_context = attr->srq_context;
	srq->pd = pd;
	srq->events_completed = 0;
	pthread_mutex_init(&srq->mutex, NULL);
	pthread_cond_init(&srq->cond, NULL);
	return srq;
}

/* The SRQ verbs on a handle that must be a live SRQ of the device. */
static int srq_live(struct sd_device *d, struct ibv_srq *srq)
{
	int err = sd_enter(d);
	if (err != 0)
		return err;
	err = sd_owns(d, SD_SRQ, srq) == 1 ? 0 : EINVAL;
	sd_unlock(d);
	return err;
}

int sd_modify_srq(struct ibv_context *ctx, struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask)
{
	int err = srq_live(sd_dev(ctx), srq);
	if (err == 0 && attr == NULL)
		err = EINVAL;
	return err != 0 ? err : ctx->ops.modify_srq(srq, attr, mask);
}

int sd_query_srq(struct ibv_context *ctx, struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	int err = srq_live(sd_dev(ctx), srq);
	if (err == 0 && attr == NULL)
		err = EINVAL;
	return err != 0 ? err : ctx->ops.query_srq(srq, attr);
}

int sd_destroy_srq(struct ibv_context *ctx, struct ibv_srq *srq)
{
	int err = srq_live(sd_dev(ctx), srq);
	return err != 0 ? err : ctx->ops.destroy_srq(srq);
}

/* ibv_post_srq_recv is the header's inline verb, which reads
 * srq->context first: the handle is checked before that. */
int sd_post_srq_recv(struct ibv_context *ctx, struct ibv_srq *srq, struct ibv_recv_wr *wr,
                     struct ibv_recv_wr **bad)
{
	int err = srq_live(sd_dev(ctx), srq);
	if (err != 0) {
		if (bad != NULL)
			*bad = wr;
		return err;
	}
	return ctx->ops.post_srq_recv(srq, wr, bad);
}

/* ibv_create_ah: the op, then what libibverbs fills in (context, pd). */
struct ibv_ah *sd_create_ah(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_ah_attr *attr, int *err)
{
	struct sd_device *d = sd_dev(ctx);
	struct ibv_ah *ah = NULL;
	if ((*err = sd_enter(d)) != 0)
		return NULL;
	errno = 0;
	if (sd_owns(d, SD_PD, pd) != 1 || attr == NULL)
		errno = EINVAL;
	else
		ah = create_ah_locked(d, (struct sd_pd *)pd, attr);
	if (ah == NULL)
		*err = errno ? errno : ENOMEM;
	sd_unlock(d);
	return ah;
}

/* ibv_destroy_ah, checking the handle by address first (a destroyed
 * AH's record is freed: it is never read). */
int sd_destroy_ah(struct ibv_context *ctx, struct ibv_ah *ah)
{
	struct sd_device *d = sd_dev(ctx);
	int err = sd_enter(d);
	if (err != 0)
		return err;
	if (sd_owns(d, SD_AH, ah) == 1)
		destroy_ah_locked(d, (struct sd_ah *)ah);
	else
		err = EINVAL;
	sd_unlock(d);
	return err;
}
