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
	SD_WIRE_PORT    = 4791,    /* every device listens on its IP at RoCE v2's port number (TCP here) */
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
	SD_OP_CMP_SWAP,
	SD_OP_FETCH_ADD,
};

/* Bits of sd_wqe.flags. */
enum {
	SD_WQE_SIGNALED = 0x01, /* produce a CQE on success */
	SD_WQE_INLINE   = 0x02, /* payload was copied into the ring's inline area */
	SD_WQE_CALC     = 0x04, /* reduce the operands, send the result */
	SD_WQE_EN_LAST  = 0x08, /* IBV_EXP_SEND_WAIT_EN_LAST was given */
	SD_WQE_SOLICITED = 0x10, /* IBV_SEND_SOLICITED: the responder's CQE is a solicited event */
	SD_WQE_GRH      = 0x20, /* UD: the address handle had a GRH (the datagram carries one) */
	SD_WQE_UD       = 0x40, /* a UD SEND: u.ud holds its address */
};

/* Where a send WQE is between post and retirement (sd_wqe.state). */
enum {
	SD_WQE_QUEUED = 0, /* posted, not transmitted (or rewound for retransmission) */
	SD_WQE_SENT,       /* its request packets are out: waiting for the responder */
	SD_WQE_DONE,       /* executed (local ops), answered (data) or failed: status says */
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
			uint64_t remote_addr; /* RDMA and atomics: remote address */
			uint64_t length;      /* bytes named by the SGEs (or inline bytes) */
		} xfer;
		struct {
			uint32_t imm;         /* unused (keeps rkey and remote_addr where xfer has them) */
			uint32_t rkey;
			uint64_t remote_addr;
			uint64_t compare_add; /* CMP_AND_SWP: compare; FETCH_AND_ADD: the addend */
			uint64_t swap;
		} atomic;
		struct {
			/* UD SEND: what the WQE copied of its address handle (as an
			 * HCA's datagram segment holds the address vector, so the AH
			 * may go before the WQE runs). imm and length sit where xfer
			 * has them. */
			uint32_t        imm;
			uint32_t        remote_qkey;
			struct sd_link *link;       /* a reference of its own, dropped when the WQE is done */
			uint64_t        length;
			uint32_t        remote_qpn;
			uint8_t         hop_limit;
		} ud;
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
	uint32_t psn;    /* data WQEs: the PSN of the first packet, set at transmission */
	uint32_t npkts;  /* PSNs it takes: packets of a SEND or WRITE, responses of a READ, 1 for an atomic */
	uint8_t  state;  /* SD_WQE_QUEUED, SENT, DONE */
	uint8_t  status; /* enum ibv_wc_status once DONE */
	uint16_t reserved1;
	uint32_t reserved2;
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
	uint64_t        next;       /* send queue: the next WQE to transmit or execute (tail..head) */
	uint64_t        freed;      /* slots below this position may be posted into again: moved
	                             * by polling the CQEs of retired WQEs, as on mlx4/mlx5 */
	uint64_t        released;   /* managed: WQEs below this position may run */
	uint64_t        en_base;    /* managed: the enable base (moved by WAIT_EN_LAST) */
	uint64_t        en_count;   /* managed: largest release beyond the base since it moved */
	uint32_t        gen;        /* bumped by RESET: stale enables release nothing */
};

struct sd_device;
struct sd_net;

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
	/* Completion events: the channel given at creation (its fd takes one
	 * struct ibv_comp_event per event, as the kernel writes them), and
	 * what ibv_req_notify_cq armed (SD_ARM_*). */
	struct ibv_comp_channel *channel;
	int               notify_fd;    /* a non-blocking writer to channel->fd's pipe, or -1 */
	int               armed;
	struct sd_cq     *prev, *next;
};

/* What a CQ is armed for (ibv_req_notify_cq): the next CQE, or the next
 * solicited or failed one. */
enum { SD_ARM_NONE = 0, SD_ARM_ANY, SD_ARM_SOLICITED };

/* ---- the RC transport (rc.c) and its links (link.c, wire.c) ---- */

/*
 * A packet, as the RC transport sends and takes it: a BTH-like header
 * (opcode, destination and source QP numbers, PSN), the extended headers
 * some opcodes carry (immediate data, RETH, AtomicETH, AETH) and a
 * payload. Between QPs of one device the payload travels by reference
 * (sg at off, or small); from the wire it is data, in the frame that
 * brought it.
 */
enum sd_pkt_op {
	SD_PKT_SEND_FIRST = 1,
	SD_PKT_SEND_MIDDLE,
	SD_PKT_SEND_LAST,
	SD_PKT_SEND_ONLY,
	SD_PKT_WRITE_FIRST,
	SD_PKT_WRITE_MIDDLE,
	SD_PKT_WRITE_LAST,
	SD_PKT_WRITE_ONLY,
	SD_PKT_READ_REQ,
	SD_PKT_CMP_SWAP,
	SD_PKT_FETCH_ADD,
	SD_PKT_READ_RESP_FIRST,
	SD_PKT_READ_RESP_MIDDLE,
	SD_PKT_READ_RESP_LAST,
	SD_PKT_READ_RESP_ONLY,
	SD_PKT_ACK,
	SD_PKT_ATOMIC_ACK,
	SD_PKT_OP_END,
};

enum {
	SD_PKT_F_IMM    = 0x1, /* SEND or WRITE LAST/ONLY with immediate data */
	SD_PKT_F_ACKREQ = 0x2, /* the requester wants this packet acknowledged */
	SD_PKT_F_SE     = 0x4, /* solicited event: the responder's CQE wakes a solicited-only arm */
	SD_PKT_F_GRH    = 0x8, /* UD: the datagram carries a GRH (its address handle was global) */
};

/* The transport a packet belongs to, as the top bits of an IB opcode say:
 * a QP takes only its own transport's packets. */
enum { SD_TP_RC = 0, SD_TP_UC = 1, SD_TP_UD = 3 };

/* AETH syndromes of ACK, READ response and ATOMIC ACK packets. */
enum {
	SD_AETH_ACK = 0,
	SD_AETH_RNR,        /* receiver not ready: retry after rnr_timer */
	SD_AETH_NAK_SEQ,    /* PSN sequence error: resend from psn */
	SD_AETH_NAK_INV,    /* invalid request */
	SD_AETH_NAK_ACCESS, /* remote access error */
	SD_AETH_NAK_OP,     /* remote operational error */
};

enum {
	SD_PKT_HDR  = 64,   /* header bytes on the wire */
	SD_PKT_MAX  = 4096, /* the largest payload (IBV_MTU_4096) */
};

struct sd_pkt {
	uint8_t               op, flags, syndrome, rnr_timer;
	uint8_t               tp;       /* SD_TP_* */
	uint8_t               hop_limit; /* UD with a GRH: the hop limit its address handle set */
	uint32_t              qkey;     /* UD: the DETH's Q_Key */
	uint32_t              dst_qpn, src_qpn, psn;
	uint32_t              len, imm;
	uint64_t              va;       /* RETH or AtomicETH */
	uint32_t              rkey, dma_len;
	uint64_t              swap_add; /* AtomicETH swap or addend; ATOMIC ACK: the original value */
	uint64_t              compare;
	uint32_t              msn;
	const uint8_t        *data;     /* payload bytes, or NULL: gather from sg */
	const struct ibv_sge *sg;
	int                   nsg;
	uint64_t              off;      /* where in sg the payload starts */
	uint8_t               small[16]; /* a calc result carried by value (data points here) */
};

/* A link carries packets to one device: this one (in process, at once)
 * or a peer on the wire. QP paths share them. */
enum { SD_LINK_LOOP = 1, SD_LINK_WIRE = 2 };

struct sd_conn;

struct sd_link {
	int             kind;
	uint8_t         gid[16];  /* the device at the other end */
	uint32_t        refs;     /* QP paths resolved to it */
	struct sd_conn *conn;     /* wire: the outgoing connection, or NULL */
	uint64_t        retry_at; /* wire: no new connection attempt before (monotonic ns) */
	uint64_t        dropped;  /* packets it could not carry */
	struct sd_link *next;
};

/* What ibv_modify_qp sets of an RC connection; nothing else reaches the
 * transport (no side channel). */
struct sd_path {
	uint8_t         dgid[16];   /* ah_attr.grh.dgid: the responder's GID */
	uint32_t        dest_qpn;
	uint32_t        rq_psn, sq_psn;
	uint32_t        mtu;        /* path_mtu in bytes */
	uint8_t         path_mtu;   /* enum ibv_mtu */
	uint8_t         timeout;    /* local ACK timeout: 4.096 us << timeout, 0 = none */
	uint8_t         retry_cnt, rnr_retry, min_rnr_timer;
	uint8_t         max_rd_atomic, max_dest_rd_atomic;
	uint8_t         port, sgid_index, hop_limit;
	uint8_t         global;     /* the address vector had a GRH (else dlid named the peer) */
	uint16_t        dlid;
	struct sd_link *link;       /* resolved from dgid at RTR (NULL before) */
};

/* Requester side of a QP: packets out, responses in. */
struct sd_req {
	uint32_t npsn;        /* next PSN to send */
	uint32_t una;         /* oldest PSN not yet answered (== npsn: nothing outstanding) */
	uint32_t sent;        /* packets of the WQE at sq.next already sent */
	uint64_t hw;          /* sq position one past the last WQE ever transmitted */
	uint8_t  retries;     /* transport retries left (retry_cnt) */
	uint8_t  rnr_left;    /* RNR retries left (rnr_retry; 7 never runs out) */
	uint8_t  rnr_wait;    /* waiting out an RNR NAK (on the device itself: for a receive) */
	uint8_t  armed;       /* deadline is set */
	uint64_t deadline;    /* monotonic ns: retransmit or RNR retry due */
	uint32_t rd_out;      /* READ and atomic WQEs outstanding */
};

/* A READ or atomic the responder answered, kept for duplicates. */
struct sd_rdres {
	uint8_t  op;          /* SD_OP_READ or an atomic; 0 unused */
	uint32_t first, last; /* PSNs */
	uint64_t va;
	uint32_t rkey;
	uint32_t len;
	uint64_t orig;        /* atomic: the value it returned */
};

/* Responder side: requests in, acknowledgements out. */
struct sd_resp {
	uint32_t        epsn;      /* expected PSN */
	uint32_t        msn;       /* messages completed (AETH) */
	uint8_t         nak_sent;  /* a sequence NAK went out for epsn */
	uint8_t         in_msg;    /* 0, or SD_OP_SEND / SD_OP_WRITE: a message's middle is due */
	uint8_t         comm_est;  /* IBV_EVENT_COMM_EST raised */
	uint64_t        off;       /* bytes of the current message placed so far */
	uint64_t        va;        /* WRITE in progress: where the next byte goes */
	uint64_t        len;       /* WRITE in progress: the RETH length */
	struct sd_rdres res[16];   /* max_dest_rd_atomic of them, round robin */
	uint32_t        res_next;
	uint8_t         drop_msg;  /* UC: the rest of a message is being dropped (a PSN gap) */
};

/* Counters a test reads (QPWire). */
struct sd_wire_stats {
	uint64_t tx_pkts, rx_pkts;     /* request and response packets sent and taken */
	uint64_t retrans;              /* packets sent again (timeout, sequence NAK, RNR) */
	uint64_t timeouts;             /* local ACK timer expiries */
	uint64_t rnr_naks_rx, rnr_naks_tx;
	uint64_t seq_naks_rx, seq_naks_tx;
	uint64_t dups;                 /* duplicate requests answered again */
	uint64_t dropped;              /* packets for this QP dropped (state, source, sequence) */
};

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
	int               dead;     /* destroyed: kept so stale handles fail cleanly */
	struct sd_srq    *prev, *next;
};

/* The receive WQE a QP with an SRQ took for the message arriving now: a
 * copy, as the SRQ's slot may be posted into again before it completes. */
struct sd_held {
	int             valid;
	uint64_t        wr_id;
	uint64_t        length;
	uint16_t        num_sge;
	struct ibv_sge *sge;        /* the SRQ's max_sge entries */
};

struct sd_qp {
	struct ibv_qp     ibv;
	struct sd_device *dev;
	struct sd_pd     *pd;
	struct sd_cq     *scq, *rcq;
	struct sd_queue   sq, rq;
	struct sd_srq    *srq;          /* receives come from here (rq is then empty) */
	struct sd_held    held;         /* with an SRQ: the WQE of the message arriving */
	uint32_t          qkey;         /* UD */
	int               last_wqe;     /* with an SRQ, in error: IBV_EVENT_QP_LAST_WQE_REACHED raised */
	uint32_t          create_flags; /* enum ibv_exp_qp_create_flags bits */
	int               sig_all;
	struct sd_path    path;
	struct sd_req     req;
	struct sd_resp    resp;
	struct sd_wire_stats ws;
	int               access;       /* remote access the QP permits as responder */
	int               dead;         /* destroyed: kept so stale handles fail cleanly */
	uint32_t          refs;         /* pending ENABLE WQEs naming this QP */
	struct sd_qp     *prev, *next;
};

/* An affiliated asynchronous event waiting to be read. */
struct sd_event {
	int   type;    /* enum ibv_event_type */
	void *element; /* struct ibv_cq *, struct ibv_qp * or struct ibv_srq * */
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
	/* The network: GID table entry 0 (the device's IP address, IPv4-
	 * mapped or IPv6; the listener is there at SD_WIRE_PORT), the link to
	 * the device itself and the packets on it, the wire's links, and the
	 * state of wire.c (listener, connections, the transport thread). */
	uint8_t                  gid[16];
	uint16_t                 lid;       /* InfiniBand port: the address's low 16 bits (sd_lid_of) */
	int                      port_ib;   /* the port is InfiniBand (LIDs), else Ethernet (RoCE) */
	int                      kernel_events; /* async_fd carries struct ibv_kern_async_event records */
	uint32_t                 ifmtu;     /* MTU of the interface the address is on */
	int                      autonomous; /* the thread also runs the send queues */
	int                      run_mode;   /* SD_RUN_*, as opened */
	double                   timescale; /* transport timers are multiplied by it */
	struct sd_link           loop;
	struct sd_pkt           *loopq;     /* loopback packets not yet delivered */
	uint32_t                 loopq_head, loopq_len, loopq_cap;
	struct sd_link          *links;     /* wire links */
	uint32_t                 timers;    /* QPs with a transport timer armed */
	uint64_t                 next_deadline;
	struct sd_net           *net;
	uint64_t                 wire_dropped; /* frames for no QP, or not from its peer */
	uint64_t                 wire_connect_fails; /* connections to peers that could not be made or broke */
	int                      wire_last_errno;    /* why the last one failed */
	struct sd_qp            *loop_sender;  /* the QP whose step sent on the loopback link */
	uint32_t                 loop_upto;    /* the PSN after what it sent */
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
	uint32_t pds, mrs, cqs, qps, ahs, srqs;
};

/* ---- entry points used by the Go side ---- */

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
};

/* Not an errno: with auto_loopback, SD_WIRE_PORT is taken at every
 * loopback address at once (a listener at the wildcard address,
 * 0.0.0.0 or a [::] that takes IPv4 too), so no address can be had. */
enum { SD_ERR_PORT_EVERYWHERE = 1 << 16 };

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
/* A port's LID for an address (InfiniBand ports): its low 16 bits when
 * they make a unicast LID, else 0 (no LID); and the address a LID names
 * from a device's own address (the same /16, or /112 for IPv6). */
uint16_t sd_lid_of(const uint8_t gid[16]);
void sd_gid_of_lid(const uint8_t own[16], uint16_t lid, uint8_t out[16]);
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
void sd_dev_wire(struct ibv_context *ctx, uint8_t gid[16], uint64_t *dropped, uint64_t *connect_fails,
                 int *last_errno, struct sd_wire_stats *qps);
int sd_wire_decode(const uint8_t *b, size_t len, struct sd_pkt *p);

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
enum sd_kind { SD_PD, SD_MR, SD_CQ, SD_QP, SD_AH, SD_SRQ };
int sd_owns(struct sd_device *d, enum sd_kind kind, const void *obj);
struct sd_cq *sd_cq_of(struct sd_device *d, struct ibv_cq *cq);
struct sd_qp *sd_qp_of(struct sd_device *d, struct ibv_qp *qp);
struct sd_qp *sd_qp_by_num(struct sd_device *d, uint32_t qpn);
struct sd_mr *sd_mr_by_key(struct sd_device *d, uint32_t key);
void sd_queue_release_refs(struct sd_device *d, struct sd_queue *q);
void sd_queue_reset(struct sd_device *d, struct sd_queue *q);
void sd_wqe_release(struct sd_device *d, struct sd_wqe *w);
long sd_run(struct sd_device *d);
long sd_run_queues(struct sd_device *d);
void sd_raise(struct sd_device *d, int type, void *element);
void sd_qp_fatal(struct sd_device *d, struct sd_qp *q);

/* engine.c, for the transport */
struct sd_wqe *sd_wqe_at(struct sd_queue *q, uint64_t pos, struct ibv_sge **sg);
int sd_rq_ready(const struct sd_queue *q);
void sd_sq_retire(struct sd_device *d, struct sd_qp *q);
void sd_sq_done_next(struct sd_device *d, struct sd_qp *q, uint32_t status);
/* Receives, from the QP's own queue or its SRQ: is a WQE there for a new
 * message; take it (an SRQ hands it out, raising its limit event); the
 * WQE the message lands in (wr_id, length, SGEs); complete it. */
int sd_recv_ready(const struct sd_qp *q);
void sd_recv_take(struct sd_device *d, struct sd_qp *q);
void sd_recv_wqe(struct sd_qp *q, uint64_t *length, struct ibv_sge **sg, int *nsge);
void sd_rq_complete(struct sd_device *d, struct sd_qp *p, uint32_t status, uint32_t opcode,
                    uint64_t len, int flags, uint32_t imm);
/* The same for a datagram: its source QP and LID are the packet's. */
void sd_rq_complete_from(struct sd_device *d, struct sd_qp *p, uint32_t status, uint32_t opcode,
                         uint64_t len, int flags, uint32_t imm, uint32_t src_qp, uint16_t slid);
enum { SD_RQ_IMM = 1, SD_RQ_SOLICITED = 2, SD_RQ_GRH = 4 }; /* sd_rq_complete's flags */
void sd_qp_error(struct sd_device *d, struct sd_qp *q);
void sd_cq_arm(struct sd_cq *c, int solicited_only);

/* dma.c */
int sd_local_ok(struct sd_device *d, struct sd_pd *pd, const struct ibv_sge *sg, int n, int write);
int sd_remote_ok(struct sd_device *d, struct sd_qp *resp, uint64_t addr, uint64_t len,
                 uint32_t rkey, int access);
void sd_sg_copy(const struct ibv_sge *dst, int nd, uint64_t doff, const struct ibv_sge *src, int ns,
                uint64_t soff, uint64_t len);
uint32_t sd_calc(const struct sd_wqe *w, const struct ibv_sge *sg, uint8_t out[16]);
uint64_t sd_atomic(int op, uint64_t addr, uint64_t compare_add, uint64_t swap);

/* rc.c */
uint64_t sd_now(void);
int sd_rc_transmit(struct sd_device *d, struct sd_qp *q);
int sd_ud_transmit(struct sd_device *d, struct sd_qp *q);
void sd_rc_rx(struct sd_device *d, const struct sd_link *from, const struct sd_pkt *p);
int sd_rc_timers(struct sd_device *d, uint64_t now);
void sd_rc_unanswered(struct sd_device *d, struct sd_qp *q);
void sd_rc_rtr(struct sd_qp *q);
void sd_rc_rts(struct sd_qp *q);
void sd_rc_stop(struct sd_device *d, struct sd_qp *q);

/* link.c */
int sd_link_send(struct sd_device *d, struct sd_link *l, const struct sd_pkt *p);
int sd_link_busy(struct sd_device *d, struct sd_link *l);
void sd_loop_drain(struct sd_device *d);
struct sd_link *sd_link_get(struct sd_device *d, const uint8_t gid[16]);
void sd_link_put(struct sd_device *d, struct sd_link *l);

/* wire.c */
int sd_net_open(struct sd_device *d, const uint8_t addr[16], int auto_loopback, int listen_fd);
void sd_net_stop(struct sd_device *d);
void sd_net_close(struct sd_device *d);
int sd_net_poll(struct sd_device *d);
int sd_net_flush(struct sd_device *d);
void sd_net_kick(struct sd_device *d);
void sd_net_timer_armed(struct sd_device *d, uint64_t deadline);
int sd_wire_send(struct sd_device *d, struct sd_link *l, const struct sd_pkt *p);
int sd_wire_busy(struct sd_device *d, struct sd_link *l);
void sd_wire_close_link(struct sd_device *d, struct sd_link *l);
void sd_wire_open_link(struct sd_device *d, struct sd_link *l);
void sd_port_state(struct sd_device *d, int *active, int *mtu);
uint32_t sd_port_mtu(const struct sd_device *d);

/* Data path operations installed in the dispatch tables. */
int sd_op_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int sd_op_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int sd_op_exp_post_send(struct ibv_qp *qp, struct ibv_exp_send_wr *wr, struct ibv_exp_send_wr **bad);
int sd_op_post_task(struct ibv_context *ctx, struct ibv_exp_task *task, struct ibv_exp_task **bad);
int sd_op_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int sd_op_exp_poll_cq(struct ibv_cq *cq, int n, struct ibv_exp_wc *wc, uint32_t wc_size);
/* ops.query_qp, with the exported verbs in libverbs.c. */
int sd_op_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init);
int sd_op_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);

/* Shared receive queues and address handles as libibverbs' exported
 * verbs run them (the ops plus the library's bookkeeping), for the
 * in-process front end (libverbs.c, Device). Each checks that its object
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

#endif /* SOFTDEV_H */
