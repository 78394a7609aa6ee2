/*
 * softdev's engine: queues, work requests and the post path, execution,
 * CQs, the CORE-Direct rules, objects and their state machine, DMA checks
 * and calc. The two front ends (front_go.c with the Go files, and
 * driver/driver.c) include this header; it includes the transport's seam
 * (transport.h), the only way down.
 *
 * The device's own records each embed the public verbs record they stand
 * for as their first member, so a struct ibv_qp * handed out to users
 * converts back to a struct sd_qp * with a cast. The records the
 * transport works on too (the WQE, the queue, the QP) are declared in
 * transport.h, and so is the transport's own record of the device, the
 * port (sd_device.port), which the engine passes to every call down.
 */
#ifndef SOFTDEV_ENGINE_H
#define SOFTDEV_ENGINE_H

#include <pthread.h>
#include "transport.h"

/* Limits the device enforces by default (Open's options may change the
 * first two) and limits of its own layout. */
enum {
	SD_MAX_QP_WR    = 1 << 15, /* default max_qp_wr: WQEs per send or receive ring */
	SD_MAX_CQE      = 1 << 20, /* default max_cqe: entries a CQ may be asked for */
	SD_LIMIT_QP_WR  = 1 << 24, /* the most max_qp_wr may be raised to */
	SD_LIMIT_CQE    = 1 << 24, /* the most max_cqe may be raised to */
	SD_MAX_SGE      = 64,      /* scatter/gather entries per WQE */
	SD_MAX_INLINE   = 1024,    /* inline bytes per send WQE */
	SD_QPN_BASE     = 0x100,   /* the first QP number handed out */
	SD_CALC_OPERAND = 16,      /* bytes per calc operand: big-endian value, then an id */
};

struct sd_pd {
	struct ibv_pd     ibv;
	struct sd_device *dev;
	uint32_t          refs;     /* MRs and QPs in this PD */
	struct sd_pd     *prev, *next;
};

/* An address handle (UD): where datagrams sent with it go. */
struct sd_ah {
	struct ibv_ah     ibv;
	struct sd_device *dev;
	struct sd_pd     *pd;
	struct sd_link   *link;     /* the device the address names */
	uint8_t           global;   /* is_global: datagrams carry a GRH */
	uint8_t           hop_limit;
	struct sd_ah     *prev, *next;
};

struct sd_mr {
	struct ibv_mr     ibv;
	struct sd_device *dev;
	struct sd_pd     *pd;
	uint32_t          slot;     /* index in the device's key table */
	int               access;   /* enum ibv_access_flags bits */
	struct sd_mr     *prev, *next;
};

/* A completion as the device keeps it; converted when polled. idx is the
 * producer index it was written at (UINT64_MAX: slot never written): a
 * poll at consumer index c takes the slot only if idx is in c's pass
 * over the ring, as an HCA's ownership bit says. */
struct sd_cqe {
	uint64_t      wr_id;
	uint64_t      exp_flags; /* enum ibv_exp_wc_flags bits */
	struct ibv_qp *qp;
	uint64_t      idx;
	uint32_t      solicited; /* a receive of a SEND with IBV_SEND_SOLICITED: wakes SD_ARM_SOLICITED */
	uint64_t      wqe_pos;   /* the position of the WQE it completes in its queue */
	uint32_t      wqe_gen;   /* that queue's generation when the WQE retired */
	uint32_t      wqe_queue; /* SD_CQE_SEND, SD_CQE_RECV or SD_CQE_SRQ: the queue a poll frees slots of */
	struct sd_srq *srq;      /* SD_CQE_SRQ: the SRQ whose WQE it completes (its record outlives it) */
	uint16_t      slid;      /* receives on an InfiniBand port: the sender's LID */
	uint32_t      status;    /* enum ibv_wc_status */
	uint32_t      opcode;    /* enum ibv_exp_wc_opcode (same values as ibv_wc_opcode) */
	uint32_t      byte_len;
	uint32_t      imm;
	uint32_t      qp_num;
	uint32_t      src_qp;
};

enum {
	SD_CQE_SEND = 1,
	SD_CQE_RECV = 2,
	SD_CQE_SRQ  = 3,
};

enum {
	SD_CQ_CROSS_CHANNEL  = 0x1, /* created with IBV_EXP_CQ_CREATE_CROSS_CHANNEL */
	SD_CQ_IGNORE_OVERRUN = 0x2, /* IBV_EXP_CQ_IGNORE_OVERRUN set by modify */
};

struct sd_cq {
	struct ibv_cq     ibv;
	struct sd_device *dev;
	struct sd_cqe    *ring;
	uint32_t          size;         /* slots: a power of two above the cqe asked for */
	uint32_t          flags;        /* SD_CQ_* */
	uint64_t          prod;         /* CQEs written since creation (what CQE_WAIT counts) */
	uint64_t          cons;         /* CQEs polled */
	uint64_t          lost;         /* CQEs overwritten unpolled, or refused after an overrun */
	uint64_t          wait_base;    /* CQE_WAIT base (moved by WAIT_EN_LAST) */
	uint64_t          wait_count;   /* largest cq_count since the base moved */
	int               overrun;      /* overran without ignore-overrun: in error */
	int               dead;         /* destroyed: kept so stale handles fail cleanly */
	uint32_t          refs;         /* QPs using the CQ, pending WAITs naming it */
	uint32_t          events_raised; /* kernel_events: async events written for it (drop_events) */
	/* Completion events: the channel given at creation (its fd takes one
	 * struct ibv_comp_event per event, as the kernel writes them), and
	 * what ibv_req_notify_cq armed (SD_ARM_*). */
	struct ibv_comp_channel *channel;
	int               notify_fd;    /* a non-blocking writer to channel->fd's pipe, or -1 */
	uint32_t          comp_raised;  /* completion events written for it (op_destroy_cq) */
	int               armed;
	struct sd_cq     *prev, *next;
};

/* What a CQ is armed for (ibv_req_notify_cq): the next CQE, or the next
 * solicited or failed one. */
enum { SD_ARM_NONE = 0, SD_ARM_ANY, SD_ARM_SOLICITED };

/* A shared receive queue. Its ring's tail counts the WQEs handed out to
 * QPs, which complete in any order; freed counts those whose CQEs were
 * polled, so head - freed is what the SRQ holds for capacity (as mlx4
 * and mlx5 free an SRQ WQE in poll_cq). */
struct sd_srq {
	struct ibv_srq    ibv;
	struct sd_device *dev;
	struct sd_pd     *pd;
	struct sd_queue   rq;
	uint32_t          limit;    /* armed srq_limit (0: not armed) */
	uint32_t          refs;     /* QPs attached */
	uint32_t          events_raised; /* kernel_events: async events written for it (drop_events) */
	int               dead;     /* destroyed: kept so stale handles fail cleanly */
	struct sd_srq    *prev, *next;
};

/* A completion the device has produced and not yet written to its CQ:
 * it becomes visible at ready (monotonic ns), as an HCA's CQE appears
 * microseconds after the doorbell (see sd_comp_* in engine_exec.c). */
struct sd_pending {
	struct sd_cq  *cq;
	struct sd_qp  *qp;
	uint64_t       ready;
	struct sd_cqe  e;
};

/* The device's completion latency unless SyncCompletions: a loopback
 * completion is written to its CQ this long after the engine produced it
 * (1 us, a loopback SEND's latency on a ConnectX HCA). */
enum { SD_COMP_LATENCY_NS = 1000 };

/* An affiliated asynchronous event waiting to be read. */
struct sd_event {
	int   type;    /* enum ibv_event_type */
	void *element; /* struct ibv_cq *, struct ibv_qp * or struct ibv_srq * */
};

/* One queue that cannot make progress, for deadlock reports. */
struct sd_blocked {
	uint32_t qp_num;
	uint32_t kind;      /* SD_BLOCK_* */
	uint64_t wr_id;
	uint32_t op;        /* enum sd_op of the head WQE */
	uint32_t target;    /* ENABLE: qp_num of the queue it releases */
	void    *cq;        /* WAIT: the struct ibv_cq waited on */
	uint32_t cq_handle;
	uint32_t dest_qpn;  /* RNR: the peer without a usable receive WQE */
	uint64_t base;      /* WAIT/ENABLE: the base the count was added to */
	int64_t  count;     /* WAIT/ENABLE: the count posted */
	uint64_t needed;    /* WAIT: CQEs needed; ENABLE: position released up to */
	uint64_t produced;  /* WAIT: CQEs produced so far */
	uint64_t position;  /* GATED: the head WQE's position in its queue */
	uint64_t released;  /* GATED: the queue's release point; RNR: the peer's */
	uint64_t qbase;     /* GATED: the queue's enable base now; RNR: the peer's */
	uint64_t posted;    /* RNR: receives posted at the peer */
	int      managed;   /* RNR: the peer's receive queue is managed */
};

enum {
	SD_BLOCK_WAIT  = 1, /* a CQE_WAIT not yet satisfied */
	SD_BLOCK_RNR   = 2, /* a SEND / WRITE_WITH_IMM finding no usable receive WQE */
	SD_BLOCK_GATED = 3, /* the head of a managed send queue that no enable released */
};

/* Leftover objects found by sd_close. */
struct sd_leaks {
	uint32_t pds, mrs, cqs, qps, ahs, srqs;
};

/* A set of object addresses, each live (1) or destroyed (-1): open
 * addressing, so finding a CQ among thousands (a poll, a CQE_WAIT naming
 * it) compares addresses without reading the object. */
struct sd_addrset {
	const void **keys;
	int8_t      *state;
	uint32_t     cap, n; /* cap a power of two, n < cap / 2 */
};

/*
 * The device: the experimental dispatch record directly in front of the
 * verbs context (whose last member is the struct ibv_context users see),
 * as verbs_get_exp_ctx() expects, then the device's own state.
 */
struct sd_device {
	struct verbs_context_exp exp;
	struct verbs_context     vctx;
	pthread_mutex_t          lock;    /* everything below */
	struct sd_pd            *pds, *pds_tail;
	struct sd_mr            *mrs, *mrs_tail;
	struct sd_cq            *cqs, *cqs_tail;
	struct sd_addrset        cqset;   /* every CQ handed out, live or destroyed: sd_owns in O(1) */
	struct sd_qp            *qps, *qps_tail; /* creation order: the round-robin order */
	struct sd_ah            *ahs, *ahs_tail;
	struct sd_srq           *srqs, *srqs_tail;
	struct sd_cq            *dead_cqs;       /* destroyed, freed at close */
	struct sd_qp            *dead_qps;
	struct sd_srq           *dead_srqs;
	struct sd_mr           **keys;    /* MR per key slot */
	uint32_t                 nkeys, keycap;
	struct sd_qp           **qpn;     /* QP per (qp_num - SD_QPN_BASE) */
	uint32_t                 nqpn, qpncap;
	uint32_t                 next_handle;
	uint32_t                 key_gen;
	uint32_t                 max_qp_wr, max_cqe;
	uint64_t                 executed; /* WQEs retired since open */
	int                      quiet;    /* sd_run found nothing to do and nothing changed since */
	int                      closed;   /* sd_close ran: every entry point fails with ENODEV */
	/* Asynchronous events: queued here, one eventfd count each (the
	 * context's async_fd), so the fd is readable exactly while some are
	 * pending. wake_fd interrupts a blocked reader at close. */
	struct sd_event         *events;
	uint32_t                 ev_head, ev_len, ev_cap;
	uint32_t                 ev_unacked;
	int                      ev_fd;   /* a private dup of async_fd, for the device's own reads and writes */
	int                      ev_rd;   /* kernel_events: a non-blocking reader of async_fd's pipe, else -1 */
	int                      wake_fd;
	int                      kernel_events; /* async_fd carries struct ibv_kern_async_event records */
	int                      run_mode;   /* SD_RUN_*, as opened */
	/* Completions: written to their CQ at once (comp_async 0), or
	 * held in pend, sorted by ready time, until comp_latency (for QPs not
	 * on the wire) plus a random share of comp_jitter has passed. */
	int                      comp_async;
	uint64_t                 comp_latency, comp_jitter;
	uint64_t                 comp_rng;   /* xorshift64 state of the jitter */
	struct sd_pending       *pend;
	uint32_t                 pend_head, pend_len, pend_cap;
	int                      said_comp_mask; /* a WR's nonzero comp_mask was explained on stderr */
	/* The port: the transport's record of the device (its address,
	 * links, timers and wire; transport.h). */
	struct sd_port           port;
	/* The most recent ibv_exp_post_task failure. */
	struct ibv_exp_task     *fail_task;
	void                    *fail_wr;
	int                      fail_errno;
};

/* ---- entry points of the front ends ---- */

/* Who runs a device's send queues besides its polls and Progress. */
enum {
	SD_RUN_POLLS = 0, /* nobody: schedules on one device stay deterministic */
	SD_RUN_THREAD,    /* the transport thread too, from the start (as an HCA) */
	SD_RUN_AUTO,      /* the transport thread too once a QP connects over the wire */
};

/* How a device is opened. */
struct sd_config {
	uint32_t max_qp_wr, max_cqe;
	uint8_t  addr[16];      /* the IP address to listen on (IPv4-mapped or IPv6) */
	int      auto_loopback; /* ignore addr: the first free 127.x.y.z from 127.0.0.2 */
	int      listen_fd;     /* >= 0: a listener bound to addr at SD_WIRE_PORT to take (dup'd) */
	int      autonomous;    /* the transport thread runs the send queues: SD_RUN_* */
	double   timescale;     /* transport timers are multiplied by it (1: as on an HCA) */
	int      port_ib;       /* an InfiniBand port: LID from the address, dlid resolves */
	uint64_t node_guid;     /* 0: a random one */
	int      kernel_events; /* async_fd as the kernel's: event records, read by libibverbs */
	int      sync_completions; /* a CQE is visible as soon as it is produced (the old behaviour) */
	uint64_t jitter_ns;     /* each completion's visibility is delayed by up to this more, at random */
};

/* NULL with *err the errno (ENOMEM, EMFILE/ENFILE when no file
 * descriptor is left, the listener's bind error, EAGAIN when the
 * transport thread cannot start) or SD_ERR_PORT_EVERYWHERE. */
struct ibv_context *sd_open(const struct sd_config *cfg, int *err);
/* The same for a device whose record the caller allocated, zeroed but for
 * what libibverbs set in the verbs and exp contexts (the provider front
 * end): 0 or an errno. sd_fini undoes it and frees everything the device
 * holds but the record. */
int sd_init(struct sd_device *d, const struct sd_config *cfg);
void sd_fini(struct sd_device *d);
/* A pipe for events libibverbs reads (async events, a completion
 * channel's): *reader blocking and open for both, *writer (if not NULL)
 * non-blocking. 0 or an errno. */
int sd_event_pipe(int *reader, int *writer);
/* Closes a device that was handed out: see sd_close in engine_objects.c for
 * what outlives it. */
void sd_close(struct ibv_context *ctx, struct sd_leaks *leaks);
/* Frees a device nobody was given (Open failing after sd_open). */
void sd_discard(struct ibv_context *ctx);

/* Control path, dispatched through ctx->ops like libibverbs would. Each
 * first checks that the object is a live one of this device, without
 * reading it. */
struct ibv_pd *sd_alloc_pd(struct ibv_context *ctx, int *err);
int sd_dealloc_pd(struct ibv_context *ctx, struct ibv_pd *pd);
struct ibv_mr *sd_reg_mr(struct ibv_context *ctx, struct ibv_pd *pd, void *addr, size_t len,
                         int access, int *err);
int sd_dereg_mr(struct ibv_context *ctx, struct ibv_mr *mr);
int sd_destroy_cq(struct ibv_context *ctx, struct ibv_cq *cq);
int sd_destroy_qp(struct ibv_context *ctx, struct ibv_qp *qp);
int sd_modify_qp(struct ibv_context *ctx, struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
int sd_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr);
int sd_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid);
void sd_limits(struct ibv_context *ctx, uint32_t *max_qp_wr, uint32_t *max_cqe);

/* Asynchronous events, as ibv_get_async_event / ibv_ack_async_event. */
int sd_get_async_event(struct ibv_context *ctx, int *type, void **element);
int sd_ack_async_event(struct ibv_context *ctx);
void sd_wake(struct ibv_context *ctx);

/* Engine. */
struct sd_progress_result {
	long executed; /* WQEs retired */
	int  stalled;  /* send queues left blocked */
};
struct sd_progress_result sd_progress(struct ibv_context *ctx);
int sd_blocked(struct ibv_context *ctx, struct sd_blocked *out, int max);
int sd_cq_state(struct ibv_context *ctx, struct ibv_cq *cq, uint64_t *produced,
                uint64_t *queued, uint64_t *dropped, int *overrun);
int sd_qp_state(struct ibv_context *ctx, struct ibv_qp *qp, int *state,
                uint64_t *sq_posted, uint64_t *sq_done, uint64_t *sq_enabled, uint64_t *sq_freed,
                uint64_t *rq_posted, uint64_t *rq_done, uint64_t *rq_enabled, uint64_t *rq_freed);
void sd_task_failure(struct ibv_context *ctx, void **task, void **wr, int *err);
int sd_qp_wire(struct ibv_context *ctx, struct ibv_qp *qp, struct sd_wire_stats *out);
/* A device's wire counters (struct sd_port's wire_*), and the sum of its
 * QPs' (sd_qp_wire). */
struct sd_dev_wire_stats {
	uint8_t              gid[16];
	uint64_t             dropped, connect_fails, left_to_poller, unwatched, thread_holds, gathered, gather_copies;
	int                  last_errno;
	struct sd_wire_stats qps;
	struct sd_wire_guard guard; /* sd_net_guard */
};
void sd_dev_wire(struct ibv_context *ctx, struct sd_dev_wire_stats *out);
void sd_dev_poll_mark(struct ibv_context *ctx, int on);

/* Registration's check that memory is there (engine_dma.c): 0, EINVAL
 * (the range wraps) or EFAULT, with where and why. */
struct sd_unmapped {
	uintptr_t at;       /* the first address that is not mapped as needed */
	char      perms[5]; /* its mapping's permissions ("r-xp"), "" for a hole */
};
int sd_check_mapped(uintptr_t addr, size_t len, int write, struct sd_unmapped *why);
int sd_check_mapped_msync(uintptr_t addr, size_t len, struct sd_unmapped *why);

/* ---- shared between the engine's files ---- */

struct sd_device *sd_dev(struct ibv_context *ctx);
/* What every entry point that users (or the headers' inline verbs)
 * reach starts with: sd_lock or sd_lock_clean, then 0, or ENODEV with
 * the lock released once the device is closed. */
int sd_enter(struct sd_device *d);
int sd_enter_clean(struct sd_device *d);
/* The kinds of object the device hands out. sd_owns says whether obj is
 * one of d's objects of that kind, comparing addresses only (obj is
 * never read): 1 live, -1 destroyed (a CQ's or QP's record stays until
 * close), 0 not d's. Device lock held, as for the lookups after it. */
enum sd_kind { SD_PD, SD_MR, SD_CQ, SD_QP, SD_AH, SD_SRQ };
int sd_owns(struct sd_device *d, enum sd_kind kind, const void *obj);
struct sd_cq *sd_cq_of(struct sd_device *d, struct ibv_cq *cq);
struct sd_qp *sd_qp_of(struct sd_device *d, struct ibv_qp *qp);
struct sd_mr *sd_mr_by_key(struct sd_device *d, uint32_t key);
void sd_queue_release_refs(struct sd_device *d, struct sd_queue *q);
void sd_queue_reset(struct sd_device *d, struct sd_queue *q);
long sd_run(struct sd_device *d);
void sd_qp_fatal(struct sd_device *d, struct sd_qp *q);
/* The kind of object an asynchronous event of that type names, as
 * libibverbs sorts them: SD_CQ, SD_QP or SD_SRQ; -1 for the port and
 * device events, which name none. */
int sd_event_kind(int type);
int sd_rq_ready(const struct sd_queue *q);
void sd_cq_arm(struct sd_cq *c, int solicited_only);
/* Deferred completions (engine_exec.c; sd_comp_deliver and
 * sd_comp_schedule are calls up, in transport.h): a QP's written at once
 * (it is destroyed). */
void sd_comp_deliver_qp(struct sd_device *d, struct sd_qp *q);

/* Data path operations installed in the dispatch tables. */
int sd_op_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int sd_op_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int sd_op_exp_post_send(struct ibv_qp *qp, struct ibv_exp_send_wr *wr, struct ibv_exp_send_wr **bad);
int sd_op_post_task(struct ibv_context *ctx, struct ibv_exp_task *task, struct ibv_exp_task **bad);
int sd_op_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int sd_op_exp_poll_cq(struct ibv_cq *cq, int n, struct ibv_exp_wc *wc, uint32_t wc_size);
/* ops.query_qp, with the exported verbs in front_go.c. */
int sd_op_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init);
int sd_op_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);

/* Shared receive queues and address handles as libibverbs' exported
 * verbs run them (the ops plus the library's bookkeeping), for the
 * in-process front end (front_go.c, Device). Each checks that its object
 * is a live one of the device first. */
struct ibv_srq *sd_create_srq(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_srq_init_attr *attr,
                              int *err);
int sd_modify_srq(struct ibv_context *ctx, struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask);
int sd_query_srq(struct ibv_context *ctx, struct ibv_srq *srq, struct ibv_srq_attr *attr);
int sd_destroy_srq(struct ibv_context *ctx, struct ibv_srq *srq);
int sd_post_srq_recv(struct ibv_context *ctx, struct ibv_srq *srq, struct ibv_recv_wr *wr,
                     struct ibv_recv_wr **bad);
struct ibv_ah *sd_create_ah(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_ah_attr *attr, int *err);
int sd_destroy_ah(struct ibv_context *ctx, struct ibv_ah *ah);

#endif /* SOFTDEV_ENGINE_H */
