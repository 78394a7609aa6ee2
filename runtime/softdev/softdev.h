/*
 * softdev: a software verbs provider with cross-channel ("CORE-Direct")
 * semantics, living in the calling process.
 *
 * This header is private to the package: it declares the device's own
 * records (each one embeds the public verbs record it stands for as its
 * first member, so a struct ibv_qp * handed out to users converts back
 * to a struct sd_qp * with a cast) and the entry points the Go side calls.
 */
#ifndef SOFTDEV_H
#define SOFTDEV_H

#include <stdint.h>
#include <stddef.h>
#include <pthread.h>
#include <infiniband/verbs_exp.h>

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

/* Internal opcodes of a WQE (the ring does not keep the verbs values). */
enum sd_op {
	SD_OP_RECV = 1,
	SD_OP_SEND,
	SD_OP_SEND_IMM,
	SD_OP_WRITE,
	SD_OP_WRITE_IMM,
	SD_OP_READ,
	SD_OP_NOP,
	SD_OP_WAIT,
	SD_OP_SEND_EN,
	SD_OP_RECV_EN,
};

/* Bits of sd_wqe.flags. */
enum {
	SD_WQE_SIGNALED = 0x01, /* produce a CQE on success */
	SD_WQE_INLINE   = 0x02, /* payload was copied into the ring's inline area */
	SD_WQE_CALC     = 0x04, /* reduce the operands, send the result */
	SD_WQE_EN_LAST  = 0x08, /* IBV_EXP_SEND_WAIT_EN_LAST was given */
};

/*
 * One ring slot: exactly 64 bytes, built at post time from the caller's
 * work request. Scatter/gather entries are copied to a side table that
 * has max_sge entries per slot, inline payloads to an area with
 * max_inline bytes per slot; nothing points back at the caller's WR.
 * Data WQEs use u.xfer; CQE_WAIT and the enables keep the target and the
 * index computed at post time, with the base and count it came from (for
 * deadlock reports).
 */
struct sd_wqe {
	uint64_t wr_id;
	uint8_t  op;          /* enum sd_op */
	uint8_t  flags;       /* SD_WQE_* */
	uint8_t  calc_op;     /* enum ibv_exp_calc_op (SD_WQE_CALC) */
	uint8_t  calc_type;   /* enum ibv_exp_calc_data_type (SD_WQE_CALC) */
	uint16_t num_sge;
	uint16_t reserved0;
	union {
		struct {
			uint32_t imm;         /* immediate data, as the caller gave it */
			uint32_t rkey;        /* RDMA: remote key */
			uint64_t remote_addr; /* RDMA: remote address */
			uint64_t length;      /* bytes named by the SGEs (or inline bytes) */
		} xfer;
		struct {
			struct sd_cq *cq;
			uint64_t      target; /* CQEs the CQ must have produced */
			uint64_t      base;   /* the CQ's wait base when posted */
			int32_t       count;  /* cq_count */
		} wait;
		struct {
			struct sd_qp *qp;
			uint64_t      target; /* the queue position this enable releases up to */
			uint64_t      base;   /* the queue's enable base when posted */
			int32_t       count;  /* wqe_count (0: everything posted) */
			uint32_t      gen;    /* the target queue's generation (RESET bumps it) */
		} enable;
	} u;
	uint64_t reserved1[2];
};

/* A send or receive ring. Indexes count WQEs since creation (or since the
 * last move to RESET). */
struct sd_queue {
	struct sd_wqe  *ring;
	struct ibv_sge *sge;        /* depth * max_sge entries */
	uint8_t        *inl;        /* depth * max_inline bytes, or NULL */
	uint32_t        depth;      /* slots */
	uint32_t        max_sge;
	uint32_t        max_inline;
	int             managed;    /* WQEs run only once released by an enable */
	uint64_t        head;       /* WQEs posted (producer index) */
	uint64_t        tail;       /* WQEs retired (consumer index) */
	uint64_t        freed;      /* slots below this position may be posted into again: moved
	                             * by polling the CQEs of retired WQEs, as on mlx4/mlx5 */
	uint64_t        released;   /* managed: WQEs below this position may run */
	uint64_t        en_base;    /* managed: the enable base (moved by WAIT_EN_LAST) */
	uint64_t        en_count;   /* managed: largest release beyond the base since it moved */
	uint32_t        gen;        /* bumped by RESET: stale enables release nothing */
};

struct sd_device;

struct sd_pd {
	struct ibv_pd     ibv;
	struct sd_device *dev;
	uint32_t          refs;     /* MRs and QPs in this PD */
	struct sd_pd     *prev, *next;
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
	uint64_t      wqe_pos;   /* the position of the WQE it completes in its queue */
	uint32_t      wqe_gen;   /* that queue's generation when the WQE retired */
	uint32_t      wqe_queue; /* SD_CQE_SEND or SD_CQE_RECV: the queue a poll frees slots of */
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
	struct sd_cq     *prev, *next;
};

struct sd_qp {
	struct ibv_qp     ibv;
	struct sd_device *dev;
	struct sd_pd     *pd;
	struct sd_cq     *scq, *rcq;
	struct sd_queue   sq, rq;
	uint32_t          create_flags; /* enum ibv_exp_qp_create_flags bits */
	int               sig_all;
	uint32_t          dest_qpn;
	int               access;       /* remote access the QP permits as responder */
	int               dead;         /* destroyed: kept so stale handles fail cleanly */
	uint32_t          refs;         /* pending ENABLE WQEs naming this QP */
	struct sd_qp     *prev, *next;
};

/* An affiliated asynchronous event waiting to be read. */
struct sd_event {
	int   type;    /* enum ibv_event_type */
	void *element; /* struct ibv_cq * or struct ibv_qp * */
};

/*
 * The device: the experimental dispatch record directly in front of the
 * verbs context (whose last member is the struct ibv_context users see),
 * as verbs_get_exp_ctx() expects, then the device's own state.
 */
/* A set of object addresses, each live (1) or destroyed (-1): open
 * addressing, so finding a CQ among thousands (a poll, a CQE_WAIT naming
 * it) compares addresses without reading the object. */
struct sd_addrset {
	const void **keys;
	int8_t      *state;
	uint32_t     cap, n; /* cap a power of two, n < cap / 2 */
};

struct sd_device {
	struct verbs_context_exp exp;
	struct verbs_context     vctx;
	pthread_mutex_t          lock;    /* everything below */
	struct sd_pd            *pds, *pds_tail;
	struct sd_mr            *mrs, *mrs_tail;
	struct sd_cq            *cqs, *cqs_tail;
	struct sd_addrset        cqset;   /* every CQ handed out, live or destroyed: sd_owns in O(1) */
	struct sd_qp            *qps, *qps_tail; /* creation order: the round-robin order */
	struct sd_cq            *dead_cqs;       /* destroyed, freed at close */
	struct sd_qp            *dead_qps;
	struct sd_mr           **keys;    /* MR per key slot */
	uint32_t                 nkeys, keycap;
	struct sd_qp           **qpn;     /* QP per (qp_num - SD_QPN_BASE) */
	uint32_t                 nqpn, qpncap;
	uint32_t                 next_handle;
	uint32_t                 key_gen;
	uint32_t                 max_qp_wr, max_cqe;
	uint64_t                 node_guid; /* unique per device opened in the process */
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
	int                      wake_fd;
	/* The most recent ibv_exp_post_task failure. */
	struct ibv_exp_task     *fail_task;
	void                    *fail_wr;
	int                      fail_errno;
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
	uint32_t pds, mrs, cqs, qps;
};

/* ---- entry points used by the Go side ---- */

/* NULL with *err the errno (ENOMEM, or EMFILE/ENFILE when no file
 * descriptor is left for async_fd). */
struct ibv_context *sd_open(uint32_t max_qp_wr, uint32_t max_cqe, int *err);
/* Closes a device that was handed out: see sd_close in provider.c for
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

/* ---- shared between the C files ---- */

struct sd_device *sd_dev(struct ibv_context *ctx);
void sd_lock(struct sd_device *d);
void sd_lock_clean(struct sd_device *d);
void sd_unlock(struct sd_device *d);
/* What every entry point that users (or the headers' inline verbs)
 * reach starts with: sd_lock or sd_lock_clean, then 0, or ENODEV with
 * the lock released once the device is closed. */
int sd_enter(struct sd_device *d);
int sd_enter_clean(struct sd_device *d);
/* The kinds of object the device hands out. sd_owns says whether obj is
 * one of d's objects of that kind, comparing addresses only (obj is
 * never read): 1 live, -1 destroyed (a CQ's or QP's record stays until
 * close), 0 not d's. Device lock held, as for the lookups after it. */
enum sd_kind { SD_PD, SD_MR, SD_CQ, SD_QP };
int sd_owns(struct sd_device *d, enum sd_kind kind, const void *obj);
struct sd_cq *sd_cq_of(struct sd_device *d, struct ibv_cq *cq);
struct sd_qp *sd_qp_of(struct sd_device *d, struct ibv_qp *qp);
struct sd_qp *sd_qp_by_num(struct sd_device *d, uint32_t qpn);
struct sd_mr *sd_mr_by_key(struct sd_device *d, uint32_t key);
void sd_queue_release_refs(struct sd_queue *q);
void sd_queue_reset(struct sd_queue *q);
long sd_run(struct sd_device *d);
void sd_raise(struct sd_device *d, int type, void *element);
void sd_qp_fatal(struct sd_device *d, struct sd_qp *q);

/* Data path operations installed in the dispatch tables. */
int sd_op_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int sd_op_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int sd_op_exp_post_send(struct ibv_qp *qp, struct ibv_exp_send_wr *wr, struct ibv_exp_send_wr **bad);
int sd_op_post_task(struct ibv_context *ctx, struct ibv_exp_task *task, struct ibv_exp_task **bad);
int sd_op_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int sd_op_exp_poll_cq(struct ibv_cq *cq, int n, struct ibv_exp_wc *wc, uint32_t wc_size);
/* ops.query_qp, with the exported verbs in libverbs.c. */
int sd_op_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init);

#endif /* SOFTDEV_H */
