//go:build linux && cgo

/*
 * The exported verbs of libibverbs, for this device's objects.
 *
 * An application calls ibv_alloc_pd, ibv_create_cq, ibv_modify_qp,
 * ibv_get_async_event, … in libibverbs, which does some bookkeeping and
 * calls the provider's ops. This device runs without libibverbs, so it
 * supplies those functions itself: libverbs.go registers each one below
 * with dynlib.Provide for the legacy verbs ABI, and the generated
 * wrappers (verbs.AllocPD, …) and the generated weak stubs the headers'
 * inline verbs call (ibv_query_port from ___ibv_query_port, ibv_create_qp
 * from ibv_exp_create_qp) find them instead of the library's. Each one
 * does what legacy libibverbs does when its argument is an object of a
 * device of this package (a context, or a PD, MR, CQ or QP, found by
 * address among the open devices' objects, never by reading it), and
 * otherwise forwards to the library's own function, resolved at that
 * moment under the same guard as the generated package; without it the
 * call fails with ENOSYS, as the wrapper would.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "engine.h"
#include "front_go.h"
#include "../../abiutil/dynlib/dynlib.h"
#include "_cgo_export.h"

/* The library and ABI these functions stand in for: legacy MLNX_OFED
 * libibverbs, identified by the marker the generated package's guard
 * requires (shim.LegacyGuard). */
static const char *const sdl_libs[] = {"libibverbs.so.1", "libibverbs.so", NULL};
#define SDL_MARKER "ibv_exp_cmd_query_device"

/* ------------------------------------------------------------------ */
/* Open devices                                                         */
/* ------------------------------------------------------------------ */

/* An open device: calls in flight hold it (users), so Close waits for
 * them before closing it (a blocked ibv_get_async_event polls the fds
 * Close closes). gone: closing, no new calls. A closed device's entry
 * moves to sdl_closed and stays, as its tombstone does (sd_close): a
 * verb on its context or objects then fails with ENODEV, where an
 * unknown one would be forwarded to the library, which would call the
 * closed device's dispatch table (some of whose operations are NULL). */
struct sdl_dev {
	struct sd_device *d;
	uintptr_t         handle; /* the Go *Device, for ibv_close_device */
	int               users;
	int               gone;
	struct sdl_dev   *next;
};

static pthread_mutex_t sdl_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t  sdl_idle = PTHREAD_COND_INITIALIZER;
static struct sdl_dev *sdl_devs, *sdl_closed;

/* What the lookups return for a device being closed or closed, and what
 * the verbs then return, in each one's convention. */
static struct sdl_dev sdl_gone_mark;
#define SDL_GONE   (&sdl_gone_mark)
#define GONE_INT   (errno = ENODEV, ENODEV)
#define GONE_MINUS (errno = ENODEV, -1)
#define GONE_NULL  (errno = ENODEV, NULL)

int sdl_register(struct ibv_context *ctx, uintptr_t handle)
{
	struct sdl_dev *e = calloc(1, sizeof *e);
	if (e == NULL)
		return ENOMEM;
	e->d = sd_dev(ctx);
	e->handle = handle;
	pthread_mutex_lock(&sdl_mu);
	e->next = sdl_devs;
	sdl_devs = e;
	pthread_mutex_unlock(&sdl_mu);
	return 0;
}

void sdl_forget(struct ibv_context *ctx)
{
	pthread_mutex_lock(&sdl_mu);
	struct sdl_dev **p = &sdl_devs;
	while (*p != NULL && &(*p)->d->vctx.context != ctx)
		p = &(*p)->next;
	struct sdl_dev *e = *p;
	if (e != NULL) {
		e->gone = 1;
		while (e->users > 0)
			pthread_cond_wait(&sdl_idle, &sdl_mu);
		*p = e->next;
		e->next = sdl_closed;
		sdl_closed = e;
	}
	pthread_mutex_unlock(&sdl_mu);
}

static void release(struct sdl_dev *e)
{
	pthread_mutex_lock(&sdl_mu);
	if (--e->users == 0)
		pthread_cond_broadcast(&sdl_idle);
	pthread_mutex_unlock(&sdl_mu);
}

/* Holds e if it is open: e, SDL_GONE if closing, NULL if e is NULL. */
static struct sdl_dev *hold(struct sdl_dev *e)
{
	if (e == NULL)
		return NULL;
	if (e->gone)
		return SDL_GONE;
	e->users++;
	return e;
}

/* The open device whose context ctx is, held; SDL_GONE if it is being
 * closed or was; NULL if ctx is no device's of this package. */
static struct sdl_dev *by_ctx(struct ibv_context *ctx)
{
	pthread_mutex_lock(&sdl_mu);
	struct sdl_dev *e = sdl_devs;
	while (e != NULL && &e->d->vctx.context != ctx)
		e = e->next;
	if (e == NULL)
		for (e = sdl_closed; e != NULL && &e->d->vctx.context != ctx; e = e->next)
			;
	e = hold(e);
	pthread_mutex_unlock(&sdl_mu);
	return e;
}

static int owns(struct sdl_dev *e, enum sd_kind kind, const void *obj)
{
	sd_lock(e->d);
	int mine = sd_owns(e->d, kind, obj) != 0;
	sd_unlock(e->d);
	return mine;
}

/* The open device owning obj, held; SDL_GONE if its device is being
 * closed or was; NULL if none. Compares addresses only: obj may be
 * anything (another provider's object, a stale one). Closed devices are
 * searched last, so only a miss among the open ones pays for them. */
static struct sdl_dev *by_obj(enum sd_kind kind, const void *obj)
{
	if (obj == NULL)
		return NULL;
	pthread_mutex_lock(&sdl_mu);
	struct sdl_dev *e;
	for (e = sdl_devs; e != NULL && !owns(e, kind, obj); e = e->next)
		;
	if (e == NULL)
		for (e = sdl_closed; e != NULL && !owns(e, kind, obj); e = e->next)
			;
	e = hold(e);
	pthread_mutex_unlock(&sdl_mu);
	return e;
}

static struct ibv_context *ctx_of(struct sdl_dev *e) { return &e->d->vctx.context; }

/* ------------------------------------------------------------------ */
/* Forwarding                                                           */
/* ------------------------------------------------------------------ */

/* The library's own function, resolved at the first forward (under the
 * legacy guard: an rdma-core libibverbs is not called), or NULL. */
static void *real_fn(void **cache, const char *name)
{
	void *f = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
	if (f == NULL && verbsexp_dynlib_real != NULL) {
		f = verbsexp_dynlib_real(sdl_libs, SDL_MARKER, name);
		if (f != NULL)
			__atomic_store_n(cache, f, __ATOMIC_RELEASE);
	}
	return f;
}

/* REAL(ibv_x) is the library's ibv_x, typed as the headers declare it. */
#define REAL(name) ((__typeof__(&name))real_fn(&real_##name, #name))

/* Each function below has exactly the prototype the headers give the verb
 * it stands for: the generated trampolines call it through that type. */
#define SAME_TYPE(ours, verb)                                                  \
	static void *real_##verb;                                              \
	_Static_assert(__builtin_types_compatible_p(__typeof__(&ours), __typeof__(&verb)), \
	               "softdev: " #ours " does not have the prototype of " #verb)

/* ------------------------------------------------------------------ */
/* Device and port                                                      */
/* ------------------------------------------------------------------ */

static int sdl_close_device(struct ibv_context *ctx);
SAME_TYPE(sdl_close_device, ibv_close_device);

/* ibv_close_device: closes the Device this context belongs to, as
 * Device.Close does (objects left open are freed; Close's LeakError is
 * not reported through the verb, which has no way to say it). */
static int sdl_close_device(struct ibv_context *ctx)
{
	struct sdl_dev *e = by_ctx(ctx);
	if (e == SDL_GONE)
		return GONE_INT;
	if (e == NULL) {
		__typeof__(&ibv_close_device) f = REAL(ibv_close_device);
		if (f == NULL)
			return errno = ENOSYS, ENOSYS;
		return f(ctx);
	}
	uintptr_t h = e->handle;
	release(e); /* Close waits for calls in flight: not for this one */
	return sdlCloseDevice(h);
}

static int sdl_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr);
SAME_TYPE(sdl_query_device, ibv_query_device);

static int sdl_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
	struct sdl_dev *e = by_ctx(ctx);
	if (e == SDL_GONE)
		return GONE_INT;
	if (e == NULL) {
		__typeof__(&ibv_query_device) f = REAL(ibv_query_device);
		return f ? f(ctx, attr) : (errno = ENOSYS, ENOSYS);
	}
	int err = ctx->ops.query_device(ctx, attr);
	release(e);
	return err;
}

static int sdl_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr);
SAME_TYPE(sdl_query_port, ibv_query_port);

static int sdl_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr)
{
	struct sdl_dev *e = by_ctx(ctx);
	if (e == SDL_GONE)
		return GONE_INT;
	if (e == NULL) {
		__typeof__(&ibv_query_port) f = REAL(ibv_query_port);
		return f ? f(ctx, port, attr) : (errno = ENOSYS, ENOSYS);
	}
	int err = sd_query_port(ctx, port, attr);
	release(e);
	return err;
}

/* The GID table has one entry, the device's address (legacy libibverbs
 * reads it from the HCA's sysfs directory; this device answers itself).
 * There is no P_Key table. */
static int sdl_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid);
SAME_TYPE(sdl_query_gid, ibv_query_gid);

static int sdl_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid)
{
	struct sdl_dev *e = by_ctx(ctx);
	if (e == SDL_GONE)
		return GONE_MINUS;
	if (e == NULL) {
		__typeof__(&ibv_query_gid) f = REAL(ibv_query_gid);
		return f ? f(ctx, port, index, gid) : (errno = ENOSYS, -1);
	}
	int err = gid == NULL ? EINVAL : sd_query_gid(ctx, port, index, gid);
	release(e);
	if (err != 0) {
		errno = err;
		return -1;
	}
	return 0;
}

static int sdl_query_pkey(struct ibv_context *ctx, uint8_t port, int index, uint16_t *pkey);
SAME_TYPE(sdl_query_pkey, ibv_query_pkey);

static int sdl_query_pkey(struct ibv_context *ctx, uint8_t port, int index, uint16_t *pkey)
{
	struct sdl_dev *e = by_ctx(ctx);
	if (e == SDL_GONE)
		return GONE_MINUS;
	if (e == NULL) {
		__typeof__(&ibv_query_pkey) f = REAL(ibv_query_pkey);
		return f ? f(ctx, port, index, pkey) : (errno = ENOSYS, -1);
	}
	release(e);
	errno = EOPNOTSUPP;
	return -1;
}

/* ------------------------------------------------------------------ */
/* Asynchronous events                                                  */
/* ------------------------------------------------------------------ */

static int sdl_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev);
SAME_TYPE(sdl_get_async_event, ibv_get_async_event);

/* ibv_get_async_event: blocks until an event is pending unless async_fd
 * is non-blocking (-1, EAGAIN), as the verb's read of the fd does;
 * closing the device ends a blocked call (-1, ECANCELED). */
static int sdl_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev)
{
	struct sdl_dev *e = by_ctx(ctx);
	if (e == SDL_GONE)
		return GONE_MINUS;
	if (e == NULL) {
		__typeof__(&ibv_get_async_event) f = REAL(ibv_get_async_event);
		return f ? f(ctx, ev) : (errno = ENOSYS, -1);
	}
	int type;
	void *elem;
	int err = sd_get_async_event(ctx, &type, &elem);
	release(e);
	if (err != 0) {
		errno = err;
		return -1;
	}
	ev->event_type = (enum ibv_event_type)type;
	if (type == IBV_EVENT_CQ_ERR)
		ev->element.cq = elem;
	else if (type == IBV_EVENT_SRQ_ERR || type == IBV_EVENT_SRQ_LIMIT_REACHED)
		ev->element.srq = elem;
	else if (type == IBV_EVENT_PORT_ERR || type == IBV_EVENT_PORT_ACTIVE)
		ev->element.port_num = 1;
	else
		ev->element.qp = elem;
	return 0;
}

/* Which event counter bump adds to. */
enum sdl_counter { SDL_ASYNC, SDL_COMP };

/* Adds n to one of obj's event counters under its mutex and wakes its
 * waiters, as libibverbs does, if obj is still live (a destroyed one's
 * mutex is gone): a QP's or SRQ's events_completed, a CQ's async or
 * completion events. Nothing else in the device takes these mutexes. */
static void bump(struct sdl_dev *e, enum sd_kind kind, void *obj, enum sdl_counter which, unsigned int n)
{
	sd_lock(e->d);
	if (sd_owns(e->d, kind, obj) == 1) {
		pthread_mutex_t *mu;
		pthread_cond_t *cond;
		uint32_t *counter;
		if (kind == SD_CQ) {
			struct ibv_cq *cq = obj;
			mu = &cq->mutex, cond = &cq->cond;
			counter = which == SDL_COMP ? &cq->comp_events_completed : &cq->async_events_completed;
		} else if (kind == SD_SRQ) {
			struct ibv_srq *srq = obj;
			mu = &srq->mutex, cond = &srq->cond, counter = &srq->events_completed;
		} else {
			struct ibv_qp *qp = obj;
			mu = &qp->mutex, cond = &qp->cond, counter = &qp->events_completed;
		}
		pthread_mutex_lock(mu);
		*counter += n;
		pthread_cond_signal(cond);
		pthread_mutex_unlock(mu);
	}
	sd_unlock(e->d);
}

/* Acknowledges ev, an event of the device e, as libibverbs does: the
 * element's counter, then the device's count of events awaiting an ack
 * (EINVAL when none does). Device.AckAsyncEvent runs it too. */
static int ack_event(struct sdl_dev *e, struct ibv_async_event *ev)
{
	switch (sd_event_kind(ev->event_type)) {
	case SD_CQ:
		bump(e, SD_CQ, ev->element.cq, SDL_ASYNC, 1);
		break;
	case SD_SRQ:
		bump(e, SD_SRQ, ev->element.srq, SDL_ASYNC, 1);
		break;
	case SD_QP:
		bump(e, SD_QP, ev->element.qp, SDL_ASYNC, 1);
		break;
	default:
		return 0; /* a port event: nothing counts it, as in libibverbs */
	}
	return sd_ack_async_event(ctx_of(e));
}

int sdl_ack(struct ibv_context *ctx, struct ibv_async_event *ev)
{
	struct sdl_dev *e = by_ctx(ctx);
	if (e == SDL_GONE)
		return ENODEV;
	if (e == NULL)
		return EINVAL;
	int err = ack_event(e, ev);
	release(e);
	return err;
}

static void sdl_ack_async_event(struct ibv_async_event *ev);
SAME_TYPE(sdl_ack_async_event, ibv_ack_async_event);

/* ibv_ack_async_event: the event's element says whose it is. */
static void sdl_ack_async_event(struct ibv_async_event *ev)
{
	struct sdl_dev *e = NULL;
	int kind = sd_event_kind(ev->event_type);
	if (kind == SD_CQ)
		e = by_obj(SD_CQ, ev->element.cq);
	else if (kind == SD_SRQ)
		e = by_obj(SD_SRQ, ev->element.srq);
	else if (kind == SD_QP)
		e = by_obj(SD_QP, ev->element.qp);
	else if (ev->event_type == IBV_EVENT_PORT_ERR || ev->event_type == IBV_EVENT_PORT_ACTIVE)
		return; /* names no object: nothing counts it (softdev's or a library's) */
	if (e == SDL_GONE) {
		errno = ENODEV;
		return;
	}
	if (e == NULL) {
		__typeof__(&ibv_ack_async_event) f = REAL(ibv_ack_async_event);
		if (f == NULL)
			errno = ENOSYS;
		else
			f(ev);
		return;
	}
	ack_event(e, ev);
	release(e);
}

/* ------------------------------------------------------------------ */
/* Protection domains and memory regions                               */
/* ------------------------------------------------------------------ */

static struct ibv_pd *sdl_alloc_pd(struct ibv_context *ctx);
SAME_TYPE(sdl_alloc_pd, ibv_alloc_pd);

static struct ibv_pd *sdl_alloc_pd(struct ibv_context *ctx)
{
	struct sdl_dev *e = by_ctx(ctx);
	if (e == SDL_GONE)
		return GONE_NULL;
	if (e == NULL) {
		__typeof__(&ibv_alloc_pd) f = REAL(ibv_alloc_pd);
		return f ? f(ctx) : (errno = ENOSYS, NULL);
	}
	int err = 0;
	struct ibv_pd *pd = sd_alloc_pd(ctx, &err);
	release(e);
	if (pd == NULL)
		errno = err;
	return pd;
}

static int sdl_dealloc_pd(struct ibv_pd *pd);
SAME_TYPE(sdl_dealloc_pd, ibv_dealloc_pd);

static int sdl_dealloc_pd(struct ibv_pd *pd)
{
	struct sdl_dev *e = by_obj(SD_PD, pd);
	if (e == SDL_GONE)
		return GONE_INT;
	if (e == NULL) {
		__typeof__(&ibv_dealloc_pd) f = REAL(ibv_dealloc_pd);
		return f ? f(pd) : (errno = ENOSYS, ENOSYS);
	}
	int err = sd_dealloc_pd(ctx_of(e), pd);
	release(e);
	return err;
}

static struct ibv_mr *sdl_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access);
SAME_TYPE(sdl_reg_mr, ibv_reg_mr);

/* ibv_reg_mr: sd_reg_mr checks, as Device.RegMR and the driver's reg_mr
 * do, that the range is mapped with the access asked for, as an HCA
 * pinning it finds out (EFAULT). */
static struct ibv_mr *sdl_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	struct sdl_dev *e = by_obj(SD_PD, pd);
	if (e == SDL_GONE)
		return GONE_NULL;
	if (e == NULL) {
		__typeof__(&ibv_reg_mr) f = REAL(ibv_reg_mr);
		return f ? f(pd, addr, length, access) : (errno = ENOSYS, NULL);
	}
	int err = 0;
	struct ibv_mr *mr = sd_reg_mr(ctx_of(e), pd, addr, length, access, &err);
	release(e);
	if (mr == NULL)
		errno = err;
	return mr;
}

static int sdl_dereg_mr(struct ibv_mr *mr);
SAME_TYPE(sdl_dereg_mr, ibv_dereg_mr);

static int sdl_dereg_mr(struct ibv_mr *mr)
{
	struct sdl_dev *e = by_obj(SD_MR, mr);
	if (e == SDL_GONE)
		return GONE_INT;
	if (e == NULL) {
		__typeof__(&ibv_dereg_mr) f = REAL(ibv_dereg_mr);
		return f ? f(mr) : (errno = ENOSYS, ENOSYS);
	}
	int err = sd_dereg_mr(ctx_of(e), mr);
	release(e);
	return err;
}

/* ------------------------------------------------------------------ */
/* Completion queues                                                    */
/* ------------------------------------------------------------------ */

/*
 * Completion channels. A channel of a device of this package is the
 * engine's event pipe (sd_event_pipe): the device writes one struct
 * ibv_comp_event per event of an armed CQ (engine_exec.c, cq_notify), and
 * ibv_get_cq_event reads them, as libibverbs reads the kernel's channel
 * file. The channels made here are listed, so the channel verbs know
 * theirs from a library's; a channel outlives its device's Close, as a
 * kernel channel outlives ibv_close_device, until destroyed.
 */
struct sdl_chan {
	struct ibv_comp_channel *ch;
	struct sdl_chan         *next;
};

static struct sdl_chan *sdl_chans; /* under sdl_mu */

static int is_chan(struct ibv_comp_channel *ch)
{
	pthread_mutex_lock(&sdl_mu);
	struct sdl_chan *c = sdl_chans;
	while (c != NULL && c->ch != ch)
		c = c->next;
	pthread_mutex_unlock(&sdl_mu);
	return c != NULL;
}

static struct ibv_comp_channel *sdl_create_comp_channel(struct ibv_context *ctx);
SAME_TYPE(sdl_create_comp_channel, ibv_create_comp_channel);

static struct ibv_comp_channel *sdl_create_comp_channel(struct ibv_context *ctx)
{
	struct sdl_dev *e = by_ctx(ctx);
	if (e == SDL_GONE)
		return GONE_NULL;
	if (e == NULL) {
		__typeof__(&ibv_create_comp_channel) f = REAL(ibv_create_comp_channel);
		return f ? f(ctx) : (errno = ENOSYS, NULL);
	}
	release(e);
	struct ibv_comp_channel *ch = calloc(1, sizeof *ch);
	struct sdl_chan *c = calloc(1, sizeof *c);
	int fd = -1, err = ch == NULL || c == NULL ? ENOMEM : sd_event_pipe(&fd, NULL);
	if (err != 0) {
		free(ch);
		free(c);
		errno = err;
		return NULL;
	}
	ch->context = ctx;
	ch->fd = fd;
	ch->refcnt = 0;
	c->ch = ch;
	pthread_mutex_lock(&sdl_mu);
	c->next = sdl_chans;
	sdl_chans = c;
	pthread_mutex_unlock(&sdl_mu);
	return ch;
}

static int sdl_destroy_comp_channel(struct ibv_comp_channel *ch);
SAME_TYPE(sdl_destroy_comp_channel, ibv_destroy_comp_channel);

/* ibv_destroy_comp_channel: EBUSY while CQs use it (libibverbs counts
 * them in refcnt under the context's mutex), else the fd closes. */
static int sdl_destroy_comp_channel(struct ibv_comp_channel *ch)
{
	if (ch == NULL || !is_chan(ch)) {
		__typeof__(&ibv_destroy_comp_channel) f = REAL(ibv_destroy_comp_channel);
		return f ? f(ch) : (errno = ENOSYS, ENOSYS);
	}
	pthread_mutex_lock(&ch->context->mutex);
	int busy = ch->refcnt != 0;
	pthread_mutex_unlock(&ch->context->mutex);
	if (busy)
		return EBUSY;
	pthread_mutex_lock(&sdl_mu);
	struct sdl_chan **p = &sdl_chans;
	while (*p != NULL && (*p)->ch != ch)
		p = &(*p)->next;
	struct sdl_chan *c = *p;
	if (c != NULL)
		*p = c->next;
	pthread_mutex_unlock(&sdl_mu);
	if (c == NULL)
		return EINVAL; /* destroyed by another thread meanwhile */
	close(ch->fd);
	free(ch);
	free(c);
	return 0;
}

static int sdl_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context);
SAME_TYPE(sdl_get_cq_event, ibv_get_cq_event);

/* ibv_get_cq_event: one event read from the channel (blocking unless its
 * fd was made non-blocking), the CQ it names and that CQ's cq_context;
 * -1 with errno when the read fails. */
static int sdl_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context)
{
	if (ch == NULL || !is_chan(ch)) {
		__typeof__(&ibv_get_cq_event) f = REAL(ibv_get_cq_event);
		return f ? f(ch, cq, cq_context) : (errno = ENOSYS, -1);
	}
	uint64_t cq_handle; /* struct ibv_comp_event, as the kernel writes it */
	ssize_t n;
	do
		n = read(ch->fd, &cq_handle, sizeof cq_handle);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof cq_handle) {
		if (n >= 0)
			errno = EIO;
		return -1;
	}
	*cq = (struct ibv_cq *)(uintptr_t)cq_handle;
	*cq_context = (*cq)->cq_context; /* a destroyed CQ's record stays (sd_close) */
	return 0;
}

static struct ibv_cq *sdl_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
                                    struct ibv_comp_channel *channel, int vector);
SAME_TYPE(sdl_create_cq, ibv_create_cq);

/* ibv_create_cq: the provider's create_cq, then what libibverbs fills in
 * (context, channel, cq_context, the event counters, mutex and cond),
 * under the context's mutex. */
static struct ibv_cq *sdl_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
                                    struct ibv_comp_channel *channel, int vector)
{
	struct sdl_dev *e = by_ctx(ctx);
	if (e == SDL_GONE)
		return GONE_NULL;
	if (e == NULL) {
		__typeof__(&ibv_create_cq) f = REAL(ibv_create_cq);
		return f ? f(ctx, cqe, cq_context, channel, vector) : (errno = ENOSYS, NULL);
	}
	pthread_mutex_lock(&ctx->mutex);
	struct ibv_cq *cq = ctx->ops.create_cq(ctx, cqe, channel, vector);
	int err = errno;
	if (cq != NULL) {
		cq->context = ctx;
		cq->channel = channel;
		if (channel != NULL)
			++channel->refcnt;
		cq->cq_context = cq_context;
		cq->comp_events_completed = 0;
		cq->async_events_completed = 0;
		pthread_mutex_init(&cq->mutex, NULL);
		pthread_cond_init(&cq->cond, NULL);
	}
	pthread_mutex_unlock(&ctx->mutex);
	release(e);
	if (cq == NULL)
		errno = err;
	return cq;
}

static int sdl_resize_cq(struct ibv_cq *cq, int cqe);
SAME_TYPE(sdl_resize_cq, ibv_resize_cq);

/* ibv_resize_cq: the device has no resize_cq op, for which libibverbs
 * returns ENOSYS. */
static int sdl_resize_cq(struct ibv_cq *cq, int cqe)
{
	struct sdl_dev *e = by_obj(SD_CQ, cq);
	if (e == SDL_GONE)
		return GONE_INT;
	if (e == NULL) {
		__typeof__(&ibv_resize_cq) f = REAL(ibv_resize_cq);
		return f ? f(cq, cqe) : (errno = ENOSYS, ENOSYS);
	}
	release(e);
	return ENOSYS;
}

static int sdl_destroy_cq(struct ibv_cq *cq);
SAME_TYPE(sdl_destroy_cq, ibv_destroy_cq);

static int sdl_destroy_cq(struct ibv_cq *cq)
{
	struct sdl_dev *e = by_obj(SD_CQ, cq);
	if (e == SDL_GONE)
		return GONE_INT;
	if (e == NULL) {
		__typeof__(&ibv_destroy_cq) f = REAL(ibv_destroy_cq);
		return f ? f(cq) : (errno = ENOSYS, ENOSYS);
	}
	int err = sd_destroy_cq(ctx_of(e), cq);
	release(e);
	return err;
}

static void sdl_ack_cq_events(struct ibv_cq *cq, unsigned int nevents);
SAME_TYPE(sdl_ack_cq_events, ibv_ack_cq_events);

/* ibv_ack_cq_events: adds to comp_events_completed (the events
 * ibv_get_cq_event took from the CQ's channel). */
static void sdl_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	struct sdl_dev *e = by_obj(SD_CQ, cq);
	if (e == SDL_GONE) {
		errno = ENODEV;
		return;
	}
	if (e == NULL) {
		__typeof__(&ibv_ack_cq_events) f = REAL(ibv_ack_cq_events);
		if (f == NULL)
			errno = ENOSYS;
		else
			f(cq, nevents);
		return;
	}
	if (nevents > 0)
		bump(e, SD_CQ, cq, SDL_COMP, nevents);
	release(e);
}

/* ------------------------------------------------------------------ */
/* Queue pairs                                                          */
/* ------------------------------------------------------------------ */

static struct ibv_qp *sdl_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
SAME_TYPE(sdl_create_qp, ibv_create_qp);

/* ibv_create_qp: the provider's create_qp. What libibverbs fills in
 * afterwards (context, pd, CQs, state RESET, events_completed, mutex and
 * cond) this provider's create has set already, as the exp create path
 * (lib_exp_create_qp) needs it to: initialising the mutex twice would be
 * undefined. */
static struct ibv_qp *sdl_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct sdl_dev *e = by_obj(SD_PD, pd);
	if (e == SDL_GONE)
		return GONE_NULL;
	if (e == NULL) {
		__typeof__(&ibv_create_qp) f = REAL(ibv_create_qp);
		return f ? f(pd, attr) : (errno = ENOSYS, NULL);
	}
	struct ibv_qp *qp = attr == NULL ? (errno = EINVAL, NULL) : ctx_of(e)->ops.create_qp(pd, attr);
	int err = errno;
	release(e);
	errno = err;
	return qp;
}

static int sdl_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
SAME_TYPE(sdl_modify_qp, ibv_modify_qp);

/* ibv_modify_qp: the provider's modify_qp, which records qp->state under
 * the device lock itself (libibverbs' own write after it would race with
 * the device moving the QP to the error state). */
static int sdl_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	struct sdl_dev *e = by_obj(SD_QP, qp);
	if (e == SDL_GONE)
		return GONE_INT;
	if (e == NULL) {
		__typeof__(&ibv_modify_qp) f = REAL(ibv_modify_qp);
		return f ? f(qp, attr, mask) : (errno = ENOSYS, ENOSYS);
	}
	int err = attr == NULL ? EINVAL : sd_modify_qp(ctx_of(e), qp, attr, mask);
	release(e);
	return err;
}

static int sdl_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask,
                        struct ibv_qp_init_attr *init);
SAME_TYPE(sdl_query_qp, ibv_query_qp);

static int sdl_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask,
                        struct ibv_qp_init_attr *init)
{
	struct sdl_dev *e = by_obj(SD_QP, qp);
	if (e == SDL_GONE)
		return GONE_INT;
	if (e == NULL) {
		__typeof__(&ibv_query_qp) f = REAL(ibv_query_qp);
		return f ? f(qp, attr, mask, init) : (errno = ENOSYS, ENOSYS);
	}
	int err = attr == NULL || init == NULL ? EINVAL : ctx_of(e)->ops.query_qp(qp, attr, mask, init);
	release(e);
	return err;
}


static int sdl_destroy_qp(struct ibv_qp *qp);
SAME_TYPE(sdl_destroy_qp, ibv_destroy_qp);

static int sdl_destroy_qp(struct ibv_qp *qp)
{
	struct sdl_dev *e = by_obj(SD_QP, qp);
	if (e == SDL_GONE)
		return GONE_INT;
	if (e == NULL) {
		__typeof__(&ibv_destroy_qp) f = REAL(ibv_destroy_qp);
		return f ? f(qp) : (errno = ENOSYS, ENOSYS);
	}
	int err = sd_destroy_qp(ctx_of(e), qp);
	release(e);
	return err;
}

static struct ibv_ah *sdl_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr);
SAME_TYPE(sdl_create_ah, ibv_create_ah);

/* ibv_create_ah: the provider's create_ah (sd_create_ah checks the PD),
 * then what libibverbs fills in (context, pd). */
static struct ibv_ah *sdl_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct sdl_dev *e = by_obj(SD_PD, pd);
	if (e == SDL_GONE)
		return GONE_NULL;
	if (e == NULL) {
		__typeof__(&ibv_create_ah) f = REAL(ibv_create_ah);
		return f ? f(pd, attr) : (errno = ENOSYS, NULL);
	}
	int err = 0;
	struct ibv_ah *ah = sd_create_ah(ctx_of(e), pd, attr, &err);
	release(e);
	if (ah == NULL)
		errno = err;
	return ah;
}

static int sdl_destroy_ah(struct ibv_ah *ah);
SAME_TYPE(sdl_destroy_ah, ibv_destroy_ah);

static int sdl_destroy_ah(struct ibv_ah *ah)
{
	struct sdl_dev *e = by_obj(SD_AH, ah);
	if (e == SDL_GONE)
		return GONE_INT;
	if (e == NULL) {
		__typeof__(&ibv_destroy_ah) f = REAL(ibv_destroy_ah);
		return f ? f(ah) : (errno = ENOSYS, ENOSYS);
	}
	int err = sd_destroy_ah(ctx_of(e), ah);
	release(e);
	return err;
}

/* ------------------------------------------------------------------ */
/* Shared receive queues                                                */
/* ------------------------------------------------------------------ */

/* The SRQ verbs, as libibverbs exports them (ibv_create_srq(3),
 * ibv_modify_srq(3)): the project's headers restate only what the
 * generated package wraps, which these are not. */
struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *srq_init_attr);
int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr, int srq_attr_mask);
int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr);
int ibv_destroy_srq(struct ibv_srq *srq);

static struct ibv_srq *sdl_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr);
SAME_TYPE(sdl_create_srq, ibv_create_srq);

static struct ibv_srq *sdl_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct sdl_dev *e = by_obj(SD_PD, pd);
	if (e == SDL_GONE)
		return GONE_NULL;
	if (e == NULL) {
		__typeof__(&ibv_create_srq) f = REAL(ibv_create_srq);
		return f ? f(pd, attr) : (errno = ENOSYS, NULL);
	}
	int err = 0;
	struct ibv_srq *srq = sd_create_srq(ctx_of(e), pd, attr, &err);
	release(e);
	if (srq == NULL)
		errno = err;
	return srq;
}

static int sdl_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask);
SAME_TYPE(sdl_modify_srq, ibv_modify_srq);

static int sdl_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask)
{
	struct sdl_dev *e = by_obj(SD_SRQ, srq);
	if (e == SDL_GONE)
		return GONE_INT;
	if (e == NULL) {
		__typeof__(&ibv_modify_srq) f = REAL(ibv_modify_srq);
		return f ? f(srq, attr, mask) : (errno = ENOSYS, ENOSYS);
	}
	int err = sd_modify_srq(ctx_of(e), srq, attr, mask);
	release(e);
	return err;
}

static int sdl_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr);
SAME_TYPE(sdl_query_srq, ibv_query_srq);

static int sdl_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	struct sdl_dev *e = by_obj(SD_SRQ, srq);
	if (e == SDL_GONE)
		return GONE_INT;
	if (e == NULL) {
		__typeof__(&ibv_query_srq) f = REAL(ibv_query_srq);
		return f ? f(srq, attr) : (errno = ENOSYS, ENOSYS);
	}
	int err = sd_query_srq(ctx_of(e), srq, attr);
	release(e);
	return err;
}

static int sdl_destroy_srq(struct ibv_srq *srq);
SAME_TYPE(sdl_destroy_srq, ibv_destroy_srq);

static int sdl_destroy_srq(struct ibv_srq *srq)
{
	struct sdl_dev *e = by_obj(SD_SRQ, srq);
	if (e == SDL_GONE)
		return GONE_INT;
	if (e == NULL) {
		__typeof__(&ibv_destroy_srq) f = REAL(ibv_destroy_srq);
		return f ? f(srq) : (errno = ENOSYS, ENOSYS);
	}
	int err = sd_destroy_srq(ctx_of(e), srq);
	release(e);
	return err;
}

/* ------------------------------------------------------------------ */
/* What libverbs.go registers                                           */
/* ------------------------------------------------------------------ */

static const struct sdl_export sdl_table[] = {
	{"ibv_close_device", (void *)sdl_close_device},
	{"ibv_query_device", (void *)sdl_query_device},
	{"ibv_query_port", (void *)sdl_query_port},
	{"ibv_query_gid", (void *)sdl_query_gid},
	{"ibv_query_pkey", (void *)sdl_query_pkey},
	{"ibv_get_async_event", (void *)sdl_get_async_event},
	{"ibv_ack_async_event", (void *)sdl_ack_async_event},
	{"ibv_alloc_pd", (void *)sdl_alloc_pd},
	{"ibv_dealloc_pd", (void *)sdl_dealloc_pd},
	{"ibv_reg_mr", (void *)sdl_reg_mr},
	{"ibv_dereg_mr", (void *)sdl_dereg_mr},
	{"ibv_create_comp_channel", (void *)sdl_create_comp_channel},
	{"ibv_destroy_comp_channel", (void *)sdl_destroy_comp_channel},
	{"ibv_get_cq_event", (void *)sdl_get_cq_event},
	{"ibv_create_cq", (void *)sdl_create_cq},
	{"ibv_resize_cq", (void *)sdl_resize_cq},
	{"ibv_destroy_cq", (void *)sdl_destroy_cq},
	{"ibv_ack_cq_events", (void *)sdl_ack_cq_events},
	{"ibv_create_qp", (void *)sdl_create_qp},
	{"ibv_modify_qp", (void *)sdl_modify_qp},
	{"ibv_query_qp", (void *)sdl_query_qp},
	{"ibv_destroy_qp", (void *)sdl_destroy_qp},
	{"ibv_create_ah", (void *)sdl_create_ah},
	{"ibv_destroy_ah", (void *)sdl_destroy_ah},
	{"ibv_create_srq", (void *)sdl_create_srq},
	{"ibv_modify_srq", (void *)sdl_modify_srq},
	{"ibv_query_srq", (void *)sdl_query_srq},
	{"ibv_destroy_srq", (void *)sdl_destroy_srq},
};

const struct sdl_export *sdl_exports(const char **lib, const char **marker, int *n)
{
	*lib = sdl_libs[0];
	*marker = SDL_MARKER;
	*n = (int)(sizeof sdl_table / sizeof sdl_table[0]);
	return sdl_table;
}

/* Calls in flight on ctx's device (tests). */
int sdl_users(struct ibv_context *ctx)
{
	pthread_mutex_lock(&sdl_mu);
	int n = -1;
	for (struct sdl_dev *e = sdl_devs; e != NULL; e = e->next)
		if (&e->d->vctx.context == ctx)
			n = e->users;
	pthread_mutex_unlock(&sdl_mu);
	return n;
}
