/*
 * softdev's transport, and the seam between it and the engine above.
 *
 * The transport is RC/UC/UD's packet rules (transport_rc.c), the links
 * that carry packets to a device (transport_link.c) and the wire between
 * devices (transport_wire.c). It includes this header only; the engine
 * (engine.h) includes it, and nothing the transport calls is declared
 * anywhere else. The seam has four parts:
 *
 *  - the transport's own records: packets, links, the port (struct
 *    sd_port: a device's address, links, timers and wire), a QP's path,
 *    requester and responder state and counters;
 *  - the engine's records the transport works on in place, as an HCA's
 *    transport works on the QP context and the rings in host memory: the
 *    WQE and queue formats, and the QP, which carries the transport's
 *    per-QP records (the engine owns them; its other records, the device
 *    among them, stay in engine.h);
 *  - calls down, which the transport implements and the engine makes:
 *    they take the port;
 *  - calls up, which the engine implements and the transport makes: they
 *    take the engine's device, an opaque type here, which the port names
 *    (sd_port.dev). They are the engine's own functions, which its files
 *    call too, so they keep the engine's record rather than each get a
 *    twin that maps a port back to its device.
 */
#ifndef SOFTDEV_TRANSPORT_H
#define SOFTDEV_TRANSPORT_H

#include <stdint.h>
#include <stddef.h>
#include <infiniband/verbs_exp.h>

/* Every device listens on its IP at RoCE v2's port number (TCP here). */
enum { SD_WIRE_PORT = 4791 };

/* Not an errno: with auto_loopback, SD_WIRE_PORT is taken at every
 * loopback address at once (a listener at the wildcard address,
 * 0.0.0.0 or a [::] that takes IPv4 too), so no address can be had. */
enum { SD_ERR_PORT_EVERYWHERE = 1 << 16 };

/* Not an errno either: the wire key could not be had (transport_auth.c;
 * sd_wire_key_error says why). */
enum { SD_ERR_WIRE_KEY = (1 << 16) + 1 };

/* ---- the transport's own records ---- */

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
	uint32_t        rkey;      /* WRITE in progress: the RETH's R_Key, checked again at every packet */
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

/* What a device's wire refused or shed to stay reachable (Device.Wire's
 * Guard): counters, and the connections it holds now (sd_net_guard). */
struct sd_wire_guard {
	uint64_t auth_refused;  /* connections whose other end did not prove the key (or spoke no hello) */
	uint64_t hello_expired; /* ... that did not finish their hello in time */
	uint64_t refused;       /* accepted connections closed at once, over a limit with nothing to shed */
	uint64_t evicted;       /* connections closed to make room for new ones */
	uint64_t accept_pauses; /* accept(2) out of file descriptors or memory: the listener rested */
	uint32_t in, out, hellos; /* accepted and authenticated; opened here; accepted, in their hello */
};

struct sd_net;
struct sd_qp;
struct sd_device; /* the engine's (engine.h), opaque here */

/*
 * The port: the transport's record of a device, embedded in the engine's
 * (sd_device.port). The engine sets its configuration before
 * sd_net_open, and reads its address (query_port, query_gid, address
 * handles) and counters (WireStats); the rest is the transport's.
 */
struct sd_port {
	struct sd_device *dev;        /* the device, for the calls up */
	/* The configuration. */
	uint64_t          node_guid;  /* unique per device opened in the process (hellos carry it) */
	int               port_ib;    /* the port is InfiniBand (LIDs), else Ethernet (RoCE) */
	double            timescale;  /* transport timers are multiplied by it */
	int               autonomous; /* the thread also runs the send queues (the engine sets it later too) */
	int               watch_always; /* the port's interface is watched with no peer on the wire too */
	/* The address: GID table entry 0 (the device's IP address, IPv4-
	 * mapped or IPv6; the listener is there at SD_WIRE_PORT), set by
	 * sd_net_open. */
	uint8_t           gid[16];
	uint16_t          lid;        /* InfiniBand port: the address's low 16 bits (sd_lid_of) */
	uint32_t          ifmtu;      /* MTU of the interface the address is on */
	/* The links: to the device itself and the packets on it, and the
	 * wire's. */
	struct sd_link    loop;
	struct sd_pkt    *loopq;      /* loopback packets not yet delivered */
	uint32_t          loopq_head, loopq_len, loopq_cap;
	struct sd_qp     *loop_sender; /* the QP whose step sent on the loopback link */
	uint32_t          loop_upto;  /* the PSN after what it sent */
	struct sd_link   *links;      /* wire links */
	/* The timers. */
	uint32_t          timers;     /* QPs with a transport timer armed */
	uint64_t          next_deadline;
	/* The wire: the state of transport_wire.c (listener, connections,
	 * the transport thread), and its counters. */
	struct sd_net    *net;
	uint64_t          wire_dropped;       /* frames for no QP, or not from its peer */
	uint64_t          wire_connect_fails; /* connections to peers that could not be made or broke */
	int               wire_last_errno;    /* why the last one failed */
	uint64_t          wire_left_to_poller; /* frames the thread left to a polling application (atomic) */
	uint64_t          wire_unwatched; /* times the polls took the connections from the thread (sd_net_polled) */
	uint64_t          wire_thread_holds; /* times the thread held a connection's ACKs (flush, HOLD_PINGPONG) */
	uint32_t          wire_gathers;   /* payloads queued frames still gather from the MRs (sd_net_settle) */
	uint64_t          wire_gathered;  /* payloads left in the MRs for the flush to send (struct sd_gather) */
	uint64_t          wire_gather_copies; /* ... copied after all (gathers_in) */
	struct sd_wire_guard guard;       /* what the wire refused or shed (sd_net_guard) */
	uint64_t          cq_due;         /* the engine's deferred completions: the thread writes them
	                                   * (sd_comp_deliver) from this monotonic ns on; 0: none due */
};

/* ---- the engine's records the transport works on ---- */

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

/* The receive WQE a QP with an SRQ took for the message arriving now: a
 * copy, as the SRQ's slot may be posted into again before it completes. */
struct sd_held {
	int             valid;
	uint64_t        wr_id;
	uint64_t        length;
	uint16_t        num_sge;
	struct ibv_sge *sge;        /* the SRQ's max_sge entries */
};

/*
 * The QP context, the engine's, with the transport's own per-QP records
 * at its end. Of the engine's part the transport reads ibv (type, state,
 * number), pd, qkey, access and dead, and works the send queue: it moves
 * sq.next over the WQEs it transmits and marks them (psn, npkts, state,
 * status).
 */
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
	int               access;       /* remote access the QP permits as responder */
	int               dead;         /* destroyed: kept so stale handles fail cleanly */
	uint32_t          refs;         /* pending ENABLE WQEs naming this QP */
	uint32_t          events_raised; /* kernel_events: async events written for it (drop_events) */
	struct sd_qp     *prev, *next;
	/* The transport's own records of the QP. */
	struct sd_path    path;
	struct sd_req     req;
	struct sd_resp    resp;
	struct sd_wire_stats ws;
};

/* ---- calls down: the transport implements them ---- */

/* transport_rc.c */
uint64_t sd_now(void);
int sd_rc_transmit(struct sd_port *port, struct sd_qp *q);
int sd_ud_transmit(struct sd_port *port, struct sd_qp *q);
void sd_rc_rx(struct sd_port *port, const struct sd_link *from, const struct sd_pkt *p);
int sd_rc_timers(struct sd_port *port, uint64_t now);
void sd_rc_unanswered(struct sd_port *port, struct sd_qp *q);
void sd_rc_rtr(struct sd_qp *q);
void sd_rc_rts(struct sd_qp *q);
void sd_rc_stop(struct sd_port *port, struct sd_qp *q);

/* transport_link.c */
int sd_link_send(struct sd_port *port, struct sd_link *l, const struct sd_pkt *p);
int sd_link_busy(struct sd_port *port, struct sd_link *l);
void sd_loop_drain(struct sd_port *port);
struct sd_link *sd_link_get(struct sd_port *port, const uint8_t gid[16]);
void sd_link_put(struct sd_port *port, struct sd_link *l);
void sd_link_free_all(struct sd_port *port);

/* transport_auth.c: SHA-256 and HMAC-SHA256; random bytes; the wire
 * key (0; -1 with a message for the user in err; or EMFILE, ENFILE or
 * ENOMEM, which kept it from looking). */
enum { SD_KEY_MIN = 16, SD_KEY_MAX = 64 }; /* bytes of a wire key */
struct sd_sha256 {
	uint32_t h[8];
	uint64_t len;
	uint8_t  buf[64];
	size_t   n;
};
struct sd_hmac {
	struct sd_sha256 inner, outer;
};
void sd_sha256_init(struct sd_sha256 *s);
void sd_sha256_update(struct sd_sha256 *s, const void *data, size_t len);
void sd_sha256_final(struct sd_sha256 *s, uint8_t out[32]);
void sd_hmac_init(struct sd_hmac *m, const uint8_t *key, size_t klen);
void sd_hmac_update(struct sd_hmac *m, const void *p, size_t n);
void sd_hmac_final(struct sd_hmac *m, uint8_t out[32]);
void sd_hmac_sha256(const uint8_t *key, size_t klen, const uint8_t *msg, size_t mlen, uint8_t out[32]);
int sd_mac_equal(const uint8_t *a, const uint8_t *b, size_t n);
int sd_random(void *buf, size_t len);
int sd_wire_key(uint8_t key[SD_KEY_MAX], size_t *len, char *err, size_t errlen);
/* A key failure: kept for sd_wire_key_error, and written to stderr
 * unless the front end said it reports them itself (sd_wire_key_quiet). */
void sd_wire_key_failed(const char *msg);
void sd_wire_key_error(char *buf, size_t len);
void sd_wire_key_quiet(void);

/* transport_wire.c */
int sd_net_open(struct sd_port *port, const uint8_t addr[16], int auto_loopback, int listen_fd);
void sd_net_stop(struct sd_port *port);
void sd_net_close(struct sd_port *port);
int sd_net_poll(struct sd_port *port);
void sd_net_polled(struct sd_port *port);
void sd_net_app_waits(struct sd_port *port);
void sd_net_poll_mark(struct sd_port *port, int on);
int sd_net_flush(struct sd_port *port);
void sd_net_settle(struct sd_port *port);
void sd_net_timer_armed(struct sd_port *port, uint64_t deadline);
void sd_net_wake_at(struct sd_port *port, uint64_t at);
int sd_wire_send(struct sd_port *port, struct sd_link *l, const struct sd_pkt *p);
int sd_wire_busy(struct sd_port *port, struct sd_link *l);
void sd_wire_close_link(struct sd_port *port, struct sd_link *l);
void sd_wire_open_link(struct sd_port *port, struct sd_link *l);
void sd_net_guard(struct sd_port *port, struct sd_wire_guard *out);
void sd_port_state(struct sd_port *port, int *active, int *mtu);
uint32_t sd_port_mtu(const struct sd_port *port);
int sd_wire_decode(const uint8_t *b, size_t len, struct sd_pkt *p);
/* A port's LID for an address (InfiniBand ports): its low 16 bits when
 * they make a unicast LID, else 0 (no LID); and the address a LID names
 * from a device's own address (the same /16, or /112 for IPv6). */
uint16_t sd_lid_of(const uint8_t gid[16]);
void sd_gid_of_lid(const uint8_t own[16], uint16_t lid, uint8_t out[16]);

/* ---- calls up: the engine implements them ---- */

/* engine_objects.c: the device lock (the transport thread holds it
 * for everything it does, as every call in this header expects); the
 * QPs in creation order, the QP with a number; a WQE's references
 * dropped; an asynchronous event. */
void sd_lock(struct sd_device *d);
void sd_lock_clean(struct sd_device *d);
int sd_trylock_clean(struct sd_device *d);
void sd_unlock(struct sd_device *d);
struct sd_qp *sd_qp_next(struct sd_device *d, const struct sd_qp *q);
struct sd_qp *sd_qp_by_num(struct sd_device *d, uint32_t qpn);
void sd_wqe_release(struct sd_device *d, struct sd_wqe *w);
void sd_raise(struct sd_device *d, int type, void *element);

/* engine_exec.c: the send queues run (the transport thread runs them on
 * an autonomous device), and run again after a change the engine did not
 * see; the queues and CQs as the transport completes their WQEs. */
long sd_run_queues(struct sd_device *d);
void sd_changed(struct sd_device *d);
/* Deferred completions: those due by now written to their CQs (the
 * thread's part when port->cq_due comes); port->cq_due set anew, and
 * the thread woken for it if it would sleep past it. */
long sd_comp_deliver(struct sd_device *d, uint64_t now);
void sd_comp_schedule(struct sd_device *d);
struct sd_wqe *sd_wqe_at(struct sd_queue *q, uint64_t pos, struct ibv_sge **sg);
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

/* engine_dma.c */
int sd_local_ok(struct sd_device *d, struct sd_pd *pd, const struct ibv_sge *sg, int n, int write);
int sd_remote_ok(struct sd_device *d, struct sd_qp *resp, uint64_t addr, uint64_t len,
                 uint32_t rkey, int access);
void sd_sg_copy(const struct ibv_sge *dst, int nd, uint64_t doff, const struct ibv_sge *src, int ns,
                uint64_t soff, uint64_t len);
uint32_t sd_calc(const struct sd_wqe *w, const struct ibv_sge *sg, uint8_t out[16]);
uint64_t sd_atomic(int op, uint64_t addr, uint64_t compare_add, uint64_t swap);

#endif /* SOFTDEV_TRANSPORT_H */
