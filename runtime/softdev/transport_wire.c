//go:build linux && cgo

/*
 * softdev wire: the link between devices in different processes or on
 * different hosts. A device listens on its IP address at SD_WIRE_PORT
 * (TCP); its GID is that address (IPv4-mapped, as RoCE v2 forms it, or
 * IPv6), so a path's dgid says where to connect. A device opens one
 * connection per peer device it sends to, unless that peer opened one to
 * it first: then it sends its frames back on that one (conn_carrier).
 * Frames in both directions on one TCP connection let TCP's ACKs ride
 * on them; two one-way connections cost a bare TCP ACK per frame, about
 * 3 us of a 7 us one-way trip between two polling processes on this
 * project's 2-core machine. A link keeps the connection it took until
 * that breaks, so its frames never pass each other, and leaves it to the
 * next link to that peer when it goes; when both ends open at once, each
 * sends on its own.
 *
 * A connection opens with a handshake in which each end proves it holds
 * the wire key (transport_auth.c) without sending it: the opener's
 * hello names its GID (checked against the connection's source address:
 * the opener binds to its own address first), the GID it means to reach
 * and a nonce; the acceptor's reply its own nonce and an HMAC of both
 * messages; the opener's proof an HMAC of the same with another label
 * (the AU_ offsets have the layout). Fresh nonces on both sides make a
 * recorded handshake worthless. The opener sends no frame before the
 * reply proves the acceptor (a stranger listening where a device was
 * would otherwise take its payloads), the acceptor reads none before the
 * proof; a connection whose handshake fails is closed and counted
 * (sd_wire_guard), and only authenticated ones carry links. A hello
 * with SD_HELLO_BOTH says the opener reads frames on it too; the
 * acceptor sends only on those. Then frames: a
 * 4-byte length, a 64-byte header (every field little-endian at a fixed
 * offset) and the payload, at most SD_PKT_MAX bytes. A frame that does
 * not parse closes its connection; one that parses goes to the RC
 * transport (transport_rc.c), which drops it unless it names a QP
 * connected to that GID and that source QP, with the PSN it expects. Nothing a frame says is trusted further: lengths are
 * bounded here and ranges checked against the MRs there.
 *
 * Strangers get little: a connection still in its handshake is watched
 * by the transport thread alone (never by the application's polls), has
 * no buffers (struct sd_conn's own bytes, read and answered exactly),
 * and counts against a budget of its own (SD_HELLO_CONNS, the oldest
 * shed for a new one) and its source address's (SD_PER_SOURCE), apart
 * from the authenticated connections (SD_IN_CONNS) and from the
 * device's own (SD_OUT_CONNS); when one is full, connections that carry
 * no link go, the least recently read first. accept(2) out of file
 * descriptors rests the listener for a while rather than spin on it.
 *
 * Frames queue in the connection's buffer and leave at the end of the
 * engine's pass, all in one sendmsg(2), which takes payloads of 1 KiB or
 * more from the MRs they are in (struct sd_gather); plain ACKs wait
 * aside and may be held for the next pass's requests (flush).
 *
 * A transport thread per device takes what arrives, runs the timers and
 * sends what is queued, as an HCA does while the host computes; the
 * engine's own runs (polls, Progress, and the thread too on an
 * autonomous device) look at the wire first. All of it under the device
 * lock. The polls read the connections' epoll set (epfd), the thread its
 * own (tfd), which holds the connections too unless an application's
 * polls have been taking the frames (sd_net_polled).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <linux/sockios.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include "transport.h"

enum {
	SD_AUTH_LEN     = 100,              /* a handshake message (the AU_ offsets) */
	SD_FRAME_MAX    = 4 + SD_PKT_HDR + SD_PKT_MAX,
	SD_OUT_SOFT     = 1 << 20,          /* queued bytes past which a link is busy for new work */
	SD_OUT_HARD     = 64 << 20,         /* queued bytes past which packets are dropped */
	SD_IN_BUF       = 256 << 10,        /* bytes read at a time from one connection */
	SD_OUT_CONNS    = 4096,             /* connections this device opened, */
	SD_IN_CONNS     = 4096,             /* ... it accepted that authenticated, */
	SD_HELLO_CONNS  = 256,              /* ... it accepted that are still in their handshake */
	SD_PER_SOURCE   = 16,               /* accepted connections from one source address */
	SD_SRC_BUCKETS  = 1024,             /* of the source addresses' table */
	SD_HELLO_NS     = 2000000000,       /* a handshake must be over within 2 s */
	SD_ACCEPT_REST_MIN = 50000000,      /* accept(2) out of descriptors: the listener rests 50 ms, */
	SD_ACCEPT_REST_MAX = 1000000000,    /* doubling up to 1 s while that goes on */
	SD_BACKOFF_MIN  = 20000000,         /* 20 ms between attempts to reach an unreachable peer, */
	SD_BACKOFF_MAX  = 1000000000,       /* doubling up to 1 s */
	SD_LINGER_NS    = 500000000,        /* Close waits this long for queued frames to leave */
	SD_PORT_CHECK_NS = 200000000,       /* how often the port's interface is looked at */
	SD_SCAN_PROBE   = 256,              /* taken loopback addresses between checks for a wildcard listener */
	SD_HOLD_NS      = 20000,            /* an ACK may wait this long for a frame to leave with */
	SD_HOLD_MAX_NS  = 1000000,          /* ... and, if the device goes quiet, at most this long */
	SD_HOLD_ACTIVE_NS = 100000000,      /* the thread keeps that bound this long after a hold */
	SD_HELLO_BOTH   = 1,                /* hello flags (byte 14): the opener takes frames on it too */
	SD_POLLER_NS    = 3000,             /* a poll this recent means the application reads the wire, and
	                                     * the thread leaves frames to it this long at most */
	SD_THREAD_EVENTS = 64,              /* events the thread takes at a time */
	SD_POLLED_RUN   = 64,               /* reads of frames by polls in a row, after which */
	SD_POLL_GAP_NS  = 200000,           /* frames stop waking the thread until polls stop this long */
	SD_POLLED_RUN_MAX = 1 << 20,        /* the run doubles, up to this, each time a frame waited for that */
	SD_POLL_ROUNDS  = 4,                /* reads of the wire in one poll while a frame is still coming */
	SD_GATHER_MIN   = 1024,             /* payload bytes from which a frame's payload is not copied
	                                     * into obuf but sent from where it is (struct sd_gather) */
	SD_GATHERS      = 256,              /* such payloads a connection holds at most */
	SD_GATHER_IOV   = 4,                /* pieces of one (scatter/gather entries it spans) */
	SD_SEND_IOV     = 128,              /* pieces of one sendmsg(2) */
};

static const char sd_magic[8] = { 'V', 'X', 'S', 'D', 'W', 'I', 'R', 'E' };
/* The handshake's version. 1 was a bare hello; 2 authenticates. The
 * frames are version 1's: a header's transport bits (the opcode byte's
 * top three, as in an IB BTH), a UD datagram's Q_Key (bytes 60..63) and
 * GRH hop limit (byte 3) are 0 in an RC frame. */
enum { SD_WIRE_VERSION = 2 };

/*
 * A handshake message (SD_AUTH_LEN bytes after its 4-byte length), at
 * these offsets: the magic; the version; the message (AU_HELLO from the
 * opener, AU_REPLY from the acceptor, AU_PROOF from the opener); flags
 * (the hello's SD_HELLO_BOTH); the sender's GID, the GID it means to
 * reach, its node GUID and a nonce (16 random bytes; 0 in a proof); an
 * HMAC-SHA256 (0 in a hello). The reply's is of "softdev wire acceptor"
 * and the first AU_SIGNED bytes of the hello and of the reply; the
 * proof's of "softdev wire opener" and the same bytes.
 */
enum {
	AU_MAGIC = 0, AU_VERSION = 8, AU_TYPE = 9, AU_FLAGS = 10, AU_FROM = 12, AU_TO = 28, AU_GUID = 44,
	AU_NONCE = 52, AU_MAC = 68, AU_SIGNED = 68,
};
enum { AU_HELLO = 1, AU_REPLY = 2, AU_PROOF = 3 };

/* A connection's states: opened, until the connect completes
 * (CONNECTING) and the acceptor's reply proves it (REPLY); accepted,
 * until the hello (HELLO) and the proof (PROOF) come; then UP. */
enum { CONN_CONNECTING = 1, CONN_REPLY, CONN_HELLO, CONN_PROOF, CONN_UP };

/* A frame's payload left in the application's memory (its MR) when the
 * frame was queued (sd_wire_send): the flush that ends the pass gathers
 * it from there (sendmsg), which saves copying it into obuf and back out
 * (a 64 KiB message costs 2-4 us a copy here). What the socket does not
 * take then is copied in (gathers_in), and so is anything still left when
 * the device lock is released (sd_net_settle): past the pass, the
 * application may reuse or deregister that memory. */
struct sd_gather {
	size_t       at;  /* where in obuf its bytes belong (the room is there, unwritten) */
	size_t       len;
	int          n;
	struct iovec iov[SD_GATHER_IOV];
};

/* Tags of epoll events: the listener, the wake fd, the poll-gap timer,
 * then connection ids (struct sd_conn). */
enum { TAG_LISTEN = 1, TAG_WAKE = 2, TAG_GAP = 3, TAG_FIRST_CONN = 16 };
/* On a connection's tag while it is in its handshake: the thread's
 * alone, never an application's poll's to take (poller_takes). */
#define TAG_HANDSHAKE (1ull << 63)

/* Accepted connections from one source address. */
struct sd_src {
	uint8_t        addr[16];
	uint32_t       n;
	struct sd_src *next;
};

/* A connection. Its id (the epoll events' tag) is its slot in the
 * device's table (conn_by_id) plus TAG_FIRST_CONN, with a generation
 * above, so an event for one closed since is not taken for its slot's
 * next. */
struct sd_conn {
	uint64_t        id;
	int             fd;
	int             out;      /* opened by this device (else accepted) */
	int             both;     /* accepted, and its opener takes frames on it too (hello) */
	int             broken;   /* a send failed: only what the peer sent before is still read */
	int             state;
	int             want_out; /* EPOLLOUT is armed */
	uint8_t         peer[16]; /* accepted: the GID its hello claimed; opened: the link's */
	struct sd_link *link;     /* the link whose frames it carries, if any */
	uint8_t        *obuf;
	size_t          ooff, olen, ocap;
	struct sd_gather *gathers; /* payloads obuf has room for but not yet the bytes, in order */
	int             ngathers;
	uint8_t        *abuf;     /* plain ACKs not yet in obuf (sd_wire_send, flush) */
	size_t          alen, acap;
	uint64_t        acks_at;  /* when the first of them was queued */
	int             held;     /* a pass held them back (flush) */
	int             pingpong; /* requests to the peer follow its ACKs: the thread holds them too */
	uint64_t        lone_at;  /* when ACKs last left alone, until the next request (0) */
	uint8_t        *ibuf;
	size_t          ilen, icap;
	uint64_t        since;    /* when its handshake started (SD_HELLO_NS) */
	uint64_t        used;     /* when it was last read or sent on (sd_net.activity) */
	struct sd_src  *src;      /* accepted: its source address's count */
	struct sd_conn *prev, *next; /* in the device's conns (opened, or authenticated) or hellos */
	/* The handshake (SD_AUTH_LEN messages): the hello and the reply as
	 * far as the MACs cover them, and the message being read. */
	uint8_t         au_hello[AU_SIGNED], au_reply[AU_SIGNED];
	uint8_t         au_in[4 + SD_AUTH_LEN];
	uint8_t         au_len;
};

struct sd_net {
	int             lfd, epfd, wake;
	int             tfd;         /* the thread's set: listener, wake, gap, and the connections
	                              * while it watches them (epfd: listener and connections, polls') */
	int             gap;         /* timerfd: the polls stopped (sd_net_polled) */
	uint64_t        gap_at;      /* when it fires */
	int             watching;    /* the connections are in tfd: frames wake the thread */
	int             polls_read;  /* the polls take the frames: frames need not wake the thread */
	uint32_t        polled_run;  /* reads by polls since the thread last read what no poll would */
	uint32_t        polled_need; /* ... after which the polls take the connections (SD_POLLED_RUN on) */
	int             in_thread;   /* the thread's pass runs: what conn_read reads is the thread's,
	                              * and ACKs are held only for an answering peer (flush) */
	int             partial;     /* a read left a frame half in (read_on reads again) */
	pthread_t       thread;
	int             running, stop;
	uint64_t        next_id;
	uint64_t        sleep_until; /* what the thread's wait is bounded by */
	int             timer_armed; /* a transport timer was armed in this pass (sd_net_flush) */
	uint64_t        last_hold;   /* when a pass last held an ACK back (sd_net_flush) */
	int             holding;     /* the last flush held some: polls look again (sd_net_poll) */
	uint64_t        poll_at;     /* when an application's poll last read the wire, or
	                              * UINT64_MAX while one does (sd_net_poll) */
	uint64_t        wake_by;     /* the earliest bound kicks asked of the thread's wait
	                              * since it last set it (UINT64_MAX: none) */
	struct sd_conn *conns;       /* opened, and accepted that authenticated */
	struct sd_conn *hellos, *hellos_tail; /* accepted in their handshake, oldest first */
	uint32_t        nconns, nhellos, nin, nout, replies; /* replies: opened ones in CONN_REPLY */
	struct sd_conn **slots;      /* conn_by_id: connections by id */
	uint32_t       *free_slots;
	uint32_t        nslots, nfree;
	struct sd_src **srcs;        /* accepted connections by source address (SD_SRC_BUCKETS) */
	uint64_t        src_seed[2]; /* the table's hash is keyed: its chains cannot be chosen */
	uint64_t        activity;    /* reads and sends of connections so far (sd_conn.used) */
	struct sd_conn *reading;     /* the connection whose frames are being taken (not evicted) */
	struct sd_hmac  keyed;       /* HMAC with the wire key, its key taken in */
	int             resting;     /* the listener is out of the thread's set until rest_until */
	uint64_t        rest_until, rest;
	uint64_t        backoff;
	uint64_t        port_check; /* when the port's interface is looked at next */
	int             port_down;  /* IBV_EVENT_PORT_ERR raised, not yet PORT_ACTIVE */
	struct sd_port *port;
	struct sd_net  *next_net;   /* the process's devices with a network (flush_at_exit) */
};

/* The devices of this process that have a network, for flush_at_exit. */
static pthread_mutex_t nets_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sd_net *nets;

/* ------------------------------------------------------------------ */
/* Addresses                                                            */
/* ------------------------------------------------------------------ */

static int gid_is_v4(const uint8_t g[16])
{
	static const uint8_t pre[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	return memcmp(g, pre, 12) == 0;
}

/* LIDs as a subnet manager would assign them to devices on one subnet:
 * a port's LID is its address's low 16 bits, so a dlid names the address
 * with those bits in the device's own /16 (IPv4) or /112 (IPv6). Bits
 * that are not a unicast LID (0, or 0xc000 and up) give the port none. */
uint16_t sd_lid_of(const uint8_t gid[16])
{
	uint16_t lid = (uint16_t)(gid[14] << 8 | gid[15]);
	return lid >= 1 && lid < 0xc000 ? lid : 0;
}

void sd_gid_of_lid(const uint8_t own[16], uint16_t lid, uint8_t out[16])
{
	memcpy(out, own, 14);
	out[14] = (uint8_t)(lid >> 8);
	out[15] = (uint8_t)lid;
}

/* The socket address a GID names, at port. */
static socklen_t gid_sockaddr(const uint8_t g[16], uint16_t port, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof *ss);
	if (gid_is_v4(g)) {
		struct sockaddr_in *a = (struct sockaddr_in *)ss;
		a->sin_family = AF_INET;
		a->sin_port = htons(port);
		memcpy(&a->sin_addr, g + 12, 4);
		return sizeof *a;
	}
	struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
	a->sin6_family = AF_INET6;
	a->sin6_port = htons(port);
	memcpy(&a->sin6_addr, g, 16);
	return sizeof *a;
}

static void sockaddr_gid(const struct sockaddr_storage *ss, uint8_t g[16])
{
	memset(g, 0, 16);
	if (ss->ss_family == AF_INET) {
		g[10] = g[11] = 0xff;
		memcpy(g + 12, &((const struct sockaddr_in *)ss)->sin_addr, 4);
	} else if (ss->ss_family == AF_INET6) {
		memcpy(g, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
	}
}

/* The MTU and flags of the interface the device's address is on (by
 * subnet, so 127.0.0.5 is lo's). 0 if none holds it. */
static int iface_of(const uint8_t g[16], uint32_t *mtu, int *up)
{
	struct ifaddrs *all;
	if (getifaddrs(&all) != 0)
		return 0;
	int found = 0;
	char name[IFNAMSIZ];
	for (struct ifaddrs *i = all; i != NULL && !found; i = i->ifa_next) {
		if (i->ifa_addr == NULL || i->ifa_netmask == NULL)
			continue;
		uint8_t a[16], m[16];
		sockaddr_gid((const struct sockaddr_storage *)(void *)i->ifa_addr, a);
		sockaddr_gid((const struct sockaddr_storage *)(void *)i->ifa_netmask, m);
		if (i->ifa_addr->sa_family != (gid_is_v4(g) ? AF_INET : AF_INET6))
			continue;
		int lo = gid_is_v4(g) ? 12 : 0, match = 1;
		for (int k = lo; k < 16; k++)
			if ((a[k] & m[k]) != (g[k] & m[k]))
				match = 0;
		if (match) {
			found = 1;
			strncpy(name, i->ifa_name, IFNAMSIZ - 1);
			name[IFNAMSIZ - 1] = 0;
			*up = (i->ifa_flags & IFF_UP) && (i->ifa_flags & IFF_RUNNING);
		}
	}
	freeifaddrs(all);
	if (!found)
		return 0;
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct ifreq r;
	memset(&r, 0, sizeof r);
	strncpy(r.ifr_name, name, IFNAMSIZ - 1);
	*mtu = 1500;
	if (s >= 0 && ioctl(s, SIOCGIFMTU, &r) == 0 && r.ifr_mtu > 0)
		*mtu = (uint32_t)r.ifr_mtu;
	if (s >= 0)
		close(s);
	return 1;
}

/* The largest InfiniBand MTU that fits an Ethernet frame of ifmtu bytes
 * with the RoCE v2 headers (about 58 bytes): enum ibv_mtu. */
static int ib_mtu_of(uint32_t ifmtu)
{
	for (int k = IBV_MTU_4096; k >= IBV_MTU_256; k--)
		if ((128u << k) + 58 <= ifmtu)
			return k;
	return IBV_MTU_256;
}

/* The port's state and active MTU as a RoCE port reports them. */
void sd_port_state(struct sd_port *port, int *active, int *mtu)
{
	uint32_t ifmtu = port->ifmtu;
	int up = 1;
	if (!iface_of(port->gid, &ifmtu, &up)) {
		ifmtu = port->ifmtu;
		up = 0; /* the address is gone from every interface */
	}
	*active = up;
	*mtu = ib_mtu_of(ifmtu);
}

/* The active MTU in bytes, from the interface's MTU seen at open: the
 * largest datagram a UD QP sends. */
uint32_t sd_port_mtu(const struct sd_port *port)
{
	return 128u << ib_mtu_of(port->ifmtu);
}

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* A listener on g at SD_WIRE_PORT, or -1 with errno. */
static int listen_on(const uint8_t g[16])
{
	struct sockaddr_storage ss;
	socklen_t sl = gid_sockaddr(g, SD_WIRE_PORT, &ss);
	int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (ss.ss_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
	if (bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, 128) != 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* The loopback address 127.x.y.z of k (x.y.z = k, from 2), as a GID. */
static void loopback_gid(uint32_t k, uint8_t g[16])
{
	static const uint8_t pre[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	memcpy(g, pre, 12);
	g[12] = 127;
	g[13] = (uint8_t)(k >> 16);
	g[14] = (uint8_t)(k >> 8);
	g[15] = (uint8_t)k;
}

/* Whether SD_WIRE_PORT is taken at every IPv4 loopback address at once:
 * what one listener at the wildcard address (0.0.0.0, or [::] taking
 * IPv4 too) does, and then no device can listen anywhere. Two addresses
 * drawn at random from 127.1.0.0 up are tried, bound but not listening:
 * both taken is that listener (the scan from 127.0.0.2 puts devices
 * there only once 65 000 are open, and other listeners at two random
 * addresses of 16 million are not to be expected). Without this the
 * scan would try all 16.7 million, a bind each (90 s on 2 cores), and
 * then blame them all. */
static int port_taken_everywhere(void)
{
	for (int i = 0; i < 2; i++) {
		uint32_t r;
		if (getrandom(&r, sizeof r, 0) != sizeof r)
			r = (uint32_t)(sd_now() * 0x9e3779b97f4a7c15ull >> 32);
		uint32_t k = (1u << 16) + r % ((1u << 24) - (1u << 16) - 1);
		if ((uint8_t)k == 0 || (uint8_t)k == 255)
			k ^= 1; /* .1 or .254: the scan skips .0 and .255 */
		uint8_t g[16];
		loopback_gid(k, g);
		struct sockaddr_storage ss;
		socklen_t sl = gid_sockaddr(g, SD_WIRE_PORT, &ss);
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return 0;
		int one = 1;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		int taken = bind(fd, (struct sockaddr *)&ss, sl) != 0 && errno == EADDRINUSE;
		close(fd);
		if (!taken)
			return 0;
	}
	return 1;
}

/* ------------------------------------------------------------------ */
/* Connections                                                          */
/* ------------------------------------------------------------------ */

/* What a connection is watched for: frames, and room to send when
 * something waits for it. */
static struct epoll_event conn_event(const struct sd_conn *c)
{
	uint64_t tag = c->id | (c->state == CONN_HELLO || c->state == CONN_PROOF ? TAG_HANDSHAKE : 0);
	return (struct epoll_event){ .events = EPOLLIN | (c->want_out ? EPOLLOUT : 0), .data.u64 = tag };
}

/* An accepted connection in its handshake: a stranger's, for all the
 * device knows. */
static int in_handshake(const struct sd_conn *c)
{
	return c->state == CONN_HELLO || c->state == CONN_PROOF;
}

/* Watches c in the polls' set and, while it watches the wire, the
 * thread's; an accepted one in its handshake in the thread's alone (no
 * poll works for a stranger). */
static void conn_watch(struct sd_net *n, struct sd_conn *c, int op)
{
	struct epoll_event ev = conn_event(c);
	if (!in_handshake(c))
		epoll_ctl(n->epfd, op, c->fd, &ev);
	if (n->watching || in_handshake(c))
		epoll_ctl(n->tfd, op, c->fd, &ev);
}

/* Forgets c's gathers (their frames are sent, or lost with c). */
static void gathers_drop(struct sd_port *port, struct sd_conn *c)
{
	port->wire_gathers -= (uint32_t)c->ngathers;
	c->ngathers = 0;
}

/* Copies into obuf the gathered payloads the socket has not taken. */
static void gathers_in(struct sd_port *port, struct sd_conn *c)
{
	for (int i = 0; i < c->ngathers; i++) {
		struct sd_gather *g = &c->gathers[i];
		if (g->at + g->len <= c->ooff)
			continue;
		port->wire_gather_copies++;
		uint8_t *to = c->obuf + g->at;
		for (int j = 0; j < g->n; j++) {
			memcpy(to, g->iov[j].iov_base, g->iov[j].iov_len);
			to += g->iov[j].iov_len;
		}
	}
	gathers_drop(port, c);
}

/* The lists: conns (opened, and accepted that authenticated), and
 * hellos, accepted in their handshake, in the order they came. */
static void list_del(struct sd_net *n, struct sd_conn *c)
{
	struct sd_conn **head = in_handshake(c) ? &n->hellos : &n->conns;
	if (c->prev != NULL)
		c->prev->next = c->next;
	else
		*head = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
	else if (in_handshake(c))
		n->hellos_tail = c->prev;
	c->prev = c->next = NULL;
	if (in_handshake(c))
		n->nhellos--;
	else
		n->nconns--;
}

static void list_add(struct sd_net *n, struct sd_conn *c)
{
	if (in_handshake(c)) {
		c->prev = n->hellos_tail;
		if (n->hellos_tail != NULL)
			n->hellos_tail->next = c;
		else
			n->hellos = c;
		n->hellos_tail = c;
		n->nhellos++;
		return;
	}
	c->prev = NULL;
	c->next = n->conns;
	if (n->conns != NULL)
		n->conns->prev = c;
	n->conns = c;
	n->nconns++;
}

/* The connection with an epoll tag, or NULL if it is closed. */
static struct sd_conn *conn_by_id(struct sd_net *n, uint64_t id)
{
	id &= ~TAG_HANDSHAKE;
	uint32_t slot = (uint32_t)id - TAG_FIRST_CONN;
	struct sd_conn *c = slot < n->nslots ? n->slots[slot] : NULL;
	return c != NULL && c->id == id ? c : NULL;
}

/* A slot for a new connection: 0, or -1 out of memory. */
static int slot_take(struct sd_net *n, uint32_t *slot)
{
	if (n->nfree == 0) {
		uint32_t cap = n->nslots ? 2 * n->nslots : 64;
		struct sd_conn **s = realloc(n->slots, cap * sizeof *s);
		if (s == NULL)
			return -1;
		n->slots = s;
		uint32_t *f = realloc(n->free_slots, cap * sizeof *f);
		if (f == NULL)
			return -1;
		n->free_slots = f;
		for (uint32_t i = cap; i > n->nslots; i--) {
			n->slots[i - 1] = NULL;
			n->free_slots[n->nfree++] = i - 1;
		}
		n->nslots = cap;
	}
	*slot = n->free_slots[--n->nfree];
	return 0;
}

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 32;
	x *= 0xd6e8feb86659fd93ull;
	x ^= x >> 32;
	x *= 0xd6e8feb86659fd93ull;
	return x ^ x >> 32;
}

static uint32_t src_bucket(const struct sd_net *n, const uint8_t a[16])
{
	uint64_t lo, hi;
	memcpy(&lo, a, 8);
	memcpy(&hi, a + 8, 8);
	return (uint32_t)(mix64(mix64(lo ^ n->src_seed[0]) ^ hi ^ n->src_seed[1]) & (SD_SRC_BUCKETS - 1));
}

/* The count of accepted connections from a, made if need be (NULL out
 * of memory). */
static struct sd_src *src_get(struct sd_net *n, const uint8_t a[16])
{
	struct sd_src **b = &n->srcs[src_bucket(n, a)];
	for (struct sd_src *s = *b; s != NULL; s = s->next)
		if (memcmp(s->addr, a, 16) == 0)
			return s;
	struct sd_src *s = calloc(1, sizeof *s);
	if (s == NULL)
		return NULL;
	memcpy(s->addr, a, 16);
	s->next = *b;
	*b = s;
	return s;
}

static void src_put(struct sd_net *n, struct sd_src *s)
{
	if (s == NULL || --s->n > 0)
		return;
	for (struct sd_src **pp = &n->srcs[src_bucket(n, s->addr)]; *pp != NULL; pp = &(*pp)->next) {
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	}
	free(s);
}

/* A connection on fd, opened here (out) or accepted in state (from
 * src, counted there): in its list, not yet watched. */
static struct sd_conn *conn_new(struct sd_net *n, int fd, int out, int state, struct sd_src *src)
{
	uint32_t slot;
	struct sd_conn *c = calloc(1, sizeof *c);
	if (c == NULL || slot_take(n, &slot) != 0) {
		free(c);
		return NULL;
	}
	c->id = n->next_id++ << 32 | (uint64_t)(slot + TAG_FIRST_CONN);
	n->slots[slot] = c;
	c->fd = fd;
	c->out = out;
	c->state = state;
	c->src = src;
	if (src != NULL)
		src->n++;
	if (out)
		n->nout++;
	list_add(n, c);
	return c;
}

static void conn_free(struct sd_port *port, struct sd_conn *c)
{
	struct sd_net *n = port->net;
	list_del(n, c);
	n->slots[(uint32_t)c->id - TAG_FIRST_CONN] = NULL;
	n->free_slots[n->nfree++] = (uint32_t)c->id - TAG_FIRST_CONN;
	if (c->out)
		n->nout--;
	else if (c->state == CONN_UP)
		n->nin--;
	if (c->state == CONN_REPLY)
		n->replies--;
	src_put(n, c->src);
	if (c->link != NULL && c->link->conn == c)
		c->link->conn = NULL;
	conn_watch(n, c, EPOLL_CTL_DEL);
	close(c->fd);
	gathers_drop(port, c);
	free(c->gathers);
	free(c->obuf);
	free(c->abuf);
	free(c->ibuf);
	free(c);
}

/* Makes room for a connection by closing one that carries no link:
 * opened here (out), or accepted and authenticated (from src, or any
 * source if NULL); the one read the least recently. 1 if one went. */
static int evict_idle(struct sd_port *port, int out, const struct sd_src *src)
{
	struct sd_conn *victim = NULL;
	for (struct sd_conn *c = port->net->conns; c != NULL; c = c->next)
		if (c->out == out && c->link == NULL && c != port->net->reading && (src == NULL || c->src == src) &&
		    (victim == NULL || c->used < victim->used))
			victim = c;
	if (victim == NULL)
		return 0;
	port->guard.evicted++;
	conn_free(port, victim);
	return 1;
}

/* A connection failed: what it held for the peer is lost (the
 * transport's timers resend it), and the link's next attempt waits. One
 * that was up and not read to its end (drained) may still hold what the
 * peer sent before it reset (its last ACKs, on a connection both send
 * on): it is kept, broken, for conn_read to take that and close it (a
 * reset connection reads out what came before the reset). */
static void conn_fail(struct sd_port *port, struct sd_conn *c, int err, int drained)
{
	struct sd_net *n = port->net;
	port->wire_connect_fails++;
	port->wire_last_errno = err;
	if (c->link != NULL) {
		c->link->dropped++;
		c->link->retry_at = sd_now() + n->backoff;
		n->backoff = n->backoff * 2 > SD_BACKOFF_MAX ? SD_BACKOFF_MAX : n->backoff * 2;
		c->link->conn = NULL;
		c->link = NULL;
	}
	if (drained || c->state != CONN_UP || c->broken) {
		conn_free(port, c);
		return;
	}
	c->broken = 1;
	gathers_drop(port, c);
	c->ooff = c->olen = c->alen = 0;
	c->held = 0;
	if (c->want_out) {
		c->want_out = 0;
		conn_watch(n, c, EPOLL_CTL_MOD);
	}
}

static int out_reserve(struct sd_conn *c, size_t more)
{
	if (c->ooff > 0 && (c->ooff == c->olen || c->ooff > c->ocap / 2)) {
		memmove(c->obuf, c->obuf + c->ooff, c->olen - c->ooff);
		for (int i = 0; i < c->ngathers; i++)
			c->gathers[i].at -= c->ooff; /* all queued after ooff */
		c->olen -= c->ooff;
		c->ooff = 0;
	}
	if (c->olen + more <= c->ocap)
		return 0;
	size_t cap = c->ocap ? c->ocap : 64 << 10;
	while (cap < c->olen + more)
		cap *= 2;
	uint8_t *b = realloc(c->obuf, cap);
	if (b == NULL)
		return -1;
	c->obuf = b;
	c->ocap = cap;
	return 0;
}

/* Moves the ACKs held aside (sd_wire_send) to the end of the output. 0,
 * or -1 out of memory (they stay aside). */
static int acks_out(struct sd_conn *c)
{
	if (c->alen == 0)
		return 0;
	if (out_reserve(c, c->alen) != 0)
		return -1;
	memcpy(c->obuf + c->olen, c->abuf, c->alen);
	c->olen += c->alen;
	c->alen = 0;
	return 0;
}

static void put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint32_t get32(const uint8_t *p) { uint32_t v = 0; for (int i = 3; i >= 0; i--) v = v << 8 | p[i]; return v; }
static uint64_t get64(const uint8_t *p) { uint64_t v = 0; for (int i = 7; i >= 0; i--) v = v << 8 | p[i]; return v; }

/* A handshake message of type from this device to the GID to, its
 * nonce drawn (hello, reply): at m, SD_AUTH_LEN bytes after their
 * length. 0, or -1 with no random bytes. */
static int auth_message(struct sd_port *port, uint8_t *m, int type, int flags, const uint8_t to[16])
{
	put32(m, SD_AUTH_LEN);
	uint8_t *b = m + 4;
	memset(b, 0, SD_AUTH_LEN);
	memcpy(b + AU_MAGIC, sd_magic, 8);
	b[AU_VERSION] = SD_WIRE_VERSION;
	b[AU_TYPE] = (uint8_t)type;
	b[AU_FLAGS] = (uint8_t)flags;
	memcpy(b + AU_FROM, port->gid, 16);
	memcpy(b + AU_TO, to, 16);
	put64(b + AU_GUID, port->node_guid);
	return type == AU_PROOF ? 0 : sd_random(b + AU_NONCE, 16);
}

/* The MAC of a handshake (hello and reply) by label: the acceptor's or
 * the opener's. */
static void auth_mac(struct sd_net *n, const struct sd_conn *c, const char *label, uint8_t out[32])
{
	struct sd_hmac m = n->keyed;
	sd_hmac_update(&m, label, strlen(label));
	sd_hmac_update(&m, c->au_hello, AU_SIGNED);
	sd_hmac_update(&m, c->au_reply, AU_SIGNED);
	sd_hmac_final(&m, out);
	explicit_bzero(&m, sizeof m);
}

static const char au_acceptor[] = "softdev wire acceptor", au_opener[] = "softdev wire opener";

/* Sends a handshake message whole: it is the first thing on its
 * connection in that direction, or follows one the peer answered, so the
 * socket has room for it. 0, or -1. */
static int auth_send(struct sd_conn *c, const uint8_t *m)
{
	ssize_t k;
	do
		k = send(c->fd, m, 4 + SD_AUTH_LEN, MSG_DONTWAIT | MSG_NOSIGNAL);
	while (k < 0 && errno == EINTR);
	return k == 4 + SD_AUTH_LEN ? 0 : -1;
}

/* Opens the connection of link l: nonblocking, from the device's own
 * address; the hello leaves once it connects (auth_hello). */
static struct sd_conn *conn_open(struct sd_port *port, struct sd_link *l)
{
	struct sd_net *n = port->net;
	struct sockaddr_storage to, from;
	socklen_t tl = gid_sockaddr(l->gid, SD_WIRE_PORT, &to);
	socklen_t fl = gid_sockaddr(port->gid, 0, &from);
	if (to.ss_family != from.ss_family || (n->nout >= SD_OUT_CONNS && !evict_idle(port, 1, NULL)))
		return NULL;
	int fd = socket(to.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return NULL;
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	/* The source port is chosen by connect, knowing the destination, so
	 * that it is not one a TIME_WAIT connection to that peer still holds. */
	setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
	if (bind(fd, (struct sockaddr *)&from, fl) != 0 ||
	    (connect(fd, (struct sockaddr *)&to, tl) != 0 && errno != EINPROGRESS)) {
		port->wire_connect_fails++;
		port->wire_last_errno = errno;
		close(fd);
		return NULL;
	}
	struct sd_conn *c = conn_new(n, fd, 1, CONN_CONNECTING, NULL);
	if (c == NULL) {
		close(fd);
		return NULL;
	}
	c->link = l;
	memcpy(c->peer, l->gid, 16);
	c->want_out = 1;
	conn_watch(n, c, EPOLL_CTL_ADD);
	return c;
}

/* Sends from ooff on what obuf holds with the gathered payloads in
 * their places, as far as SD_SEND_IOV pieces go (*asked bytes). ooff is
 * never inside a gathered payload (conn_flush). */
static ssize_t send_gathered(struct sd_conn *c, size_t *asked)
{
	struct iovec iov[SD_SEND_IOV];
	int n = 0, i = 0;
	size_t at = c->ooff;
	for (; i < c->ngathers; i++) {
		const struct sd_gather *g = &c->gathers[i];
		if (g->at < at)
			continue; /* sent */
		if (n + 1 + g->n + 1 > SD_SEND_IOV)
			break; /* room for what comes before it, its pieces, and the tail */
		if (g->at > at)
			iov[n++] = (struct iovec){ c->obuf + at, g->at - at };
		for (int j = 0; j < g->n; j++)
			iov[n++] = g->iov[j];
		at = g->at + g->len;
	}
	if (i == c->ngathers && at < c->olen) {
		iov[n++] = (struct iovec){ c->obuf + at, c->olen - at };
		at = c->olen;
	}
	*asked = at - c->ooff;
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = (size_t)n };
	return sendmsg(c->fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
}

/* Sends what the connection holds, as far as the socket takes it; what
 * it leaves is all in obuf then. */
static void conn_flush(struct sd_port *port, struct sd_conn *c)
{
	c->held = 0;
	acks_out(c); /* after the requests queued meanwhile */
	if (c->state != CONN_UP) {
		gathers_in(port, c); /* they leave once the handshake is over */
		return;
	}
	while (c->ooff < c->olen) {
		size_t asked = c->olen - c->ooff;
		ssize_t k = c->ngathers > 0 ? send_gathered(c, &asked)
		                            : send(c->fd, c->obuf + c->ooff, asked, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (k > 0) {
			c->ooff += (size_t)k;
			c->used = ++port->net->activity;
			if ((size_t)k < asked)
				gathers_in(port, c); /* the socket is full: obuf holds the rest */
			continue;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			gathers_in(port, c);
			if (!c->want_out) {
				c->want_out = 1;
				conn_watch(port->net, c, EPOLL_CTL_MOD);
			}
			return;
		}
		conn_fail(port, c, k < 0 ? errno : EPIPE, 0);
		return;
	}
	gathers_drop(port, c);
	c->ooff = c->olen = 0;
	if (c->want_out) {
		c->want_out = 0;
		conn_watch(port->net, c, EPOLL_CTL_MOD);
	}
}

/* ------------------------------------------------------------------ */
/* Frames                                                               */
/* ------------------------------------------------------------------ */

/* A frame at f: its length, the header, and the payload unless it is
 * gathered later (the room is left for it). */
static void encode(uint8_t *f, const struct sd_pkt *p, int payload)
{
	put32(f, (uint32_t)(SD_PKT_HDR + p->len));
	uint8_t *h = f + 4;
	memset(h, 0, SD_PKT_HDR);
	h[0] = (uint8_t)(p->tp << 5 | p->op);
	h[1] = p->flags;
	h[2] = p->syndrome;
	h[3] = p->tp == SD_TP_UD ? p->hop_limit : p->rnr_timer;
	put32(h + 4, p->dst_qpn);
	put32(h + 8, p->src_qpn);
	put32(h + 12, p->psn);
	put32(h + 16, p->len);
	put32(h + 20, p->imm);
	put64(h + 24, p->va);
	put32(h + 32, p->rkey);
	put32(h + 36, p->dma_len);
	put64(h + 40, p->swap_add);
	put64(h + 48, p->compare);
	put32(h + 56, p->msn);
	put32(h + 60, p->qkey);
	if (p->len > 0 && payload) {
		if (p->data != NULL) {
			memcpy(h + SD_PKT_HDR, p->data, p->len);
		} else {
			struct ibv_sge to = { (uintptr_t)(h + SD_PKT_HDR), p->len, 0 };
			sd_sg_copy(&to, 1, 0, p->sg, p->nsg, p->off, p->len);
		}
	}
}

/* Leaves p's payload where it is, for the flush to gather (struct
 * sd_gather) at obuf offset at: 1 if it does, 0 if the payload must be
 * copied (small, given by value, or in too many pieces). */
static int gather_later(struct sd_port *port, struct sd_conn *c, const struct sd_pkt *p, size_t at)
{
	if (p->data != NULL || p->len < SD_GATHER_MIN || c->ngathers == SD_GATHERS)
		return 0;
	if (c->gathers == NULL && (c->gathers = malloc(SD_GATHERS * sizeof *c->gathers)) == NULL)
		return 0;
	struct sd_gather *g = &c->gathers[c->ngathers];
	const struct ibv_sge *sg = p->sg;
	uint64_t off = p->off, left = p->len;
	int j = 0;
	while (j < p->nsg && off >= sg[j].length)
		off -= sg[j++].length;
	g->n = 0;
	for (; left > 0 && j < p->nsg; j++, off = 0) {
		uint64_t k = sg[j].length - off < left ? sg[j].length - off : left;
		if (g->n == SD_GATHER_IOV)
			return 0;
		g->iov[g->n++] = (struct iovec){ (void *)(uintptr_t)(sg[j].addr + off), k };
		left -= k;
	}
	if (left > 0)
		return 0; /* the list is shorter than the payload: encode copies what there is */
	g->at = at;
	g->len = p->len;
	c->ngathers++;
	port->wire_gathers++;
	port->wire_gathered++;
	return 1;
}

/* A connection to l's peer that carries no link, taken for l: one the
 * peer opened and reads (SD_HELLO_BOTH), or one this device opened for
 * an earlier link (sd_wire_close_link); or NULL. */
static struct sd_conn *conn_offered(struct sd_port *port, struct sd_link *l)
{
	for (struct sd_conn *c = port->net->conns; c != NULL; c = c->next) {
		if (c->link == NULL && !c->broken && (c->out || (c->both && c->state == CONN_UP)) && memcmp(c->peer, l->gid, 16) == 0) {
			c->link = l;
			return c;
		}
	}
	return NULL;
}

/* The connection l's frames go on from now: one its peer offers, else a
 * new one, or NULL if none can be had now. */
static struct sd_conn *conn_carrier(struct sd_port *port, struct sd_link *l)
{
	struct sd_conn *c = conn_offered(port, l);
	if (c == NULL && sd_now() >= l->retry_at)
		c = conn_open(port, l);
	return c;
}

/* Queues a packet on l's connection, opening it if need be. Returns 0,
 * or -1 when the packet is dropped (no connection can be had now, or too
 * much is queued): the transport's timers deal with that, as with a
 * packet lost on a fabric.
 *
 * A plain ACK is put aside (abuf): it may wait a little for requests to
 * the same peer and then go after them, in the same send(2) (flush). The
 * ACK answers this device's responder, the requests come from its
 * requesters: two sequences that RC orders each on its own. Any other
 * answer (a READ response, an atomic ACK, a NAK) takes the ACKs put aside
 * before it along, so that answers keep their order. */
int sd_wire_send(struct sd_port *port, struct sd_link *l, const struct sd_pkt *p)
{
	struct sd_conn *c = l->conn;
	if (c == NULL) {
		if (port->net == NULL || (c = conn_carrier(port, l)) == NULL) {
			l->dropped++;
			return -1;
		}
		l->conn = c;
	}
	size_t len = 4 + SD_PKT_HDR + p->len;
	if (p->len > SD_PKT_MAX) {
		l->dropped++;
		return -1;
	}
	if (p->op == SD_PKT_ACK && p->syndrome == SD_AETH_ACK) {
		if (c->alen + len > c->acap) {
			size_t cap = c->acap ? 2 * c->acap : 4096;
			uint8_t *b = cap > SD_OUT_HARD ? NULL : realloc(c->abuf, cap);
			if (b == NULL) {
				l->dropped++;
				return -1;
			}
			c->abuf = b;
			c->acap = cap;
		}
		if (c->alen == 0)
			c->acks_at = sd_now();
		encode(c->abuf + c->alen, p, 1);
		c->alen += len;
		return 0;
	}
	if ((p->op > SD_PKT_FETCH_ADD && acks_out(c) != 0) ||
	    c->olen - c->ooff + len > SD_OUT_HARD || out_reserve(c, len) != 0) {
		l->dropped++;
		return -1;
	}
	if (c->lone_at != 0) {
		if (sd_now() - c->lone_at < SD_HOLD_NS)
			c->pingpong = 1; /* it would have carried them */
		c->lone_at = 0;
	}
	encode(c->obuf + c->olen, p, !gather_later(port, c, p, c->olen + 4 + SD_PKT_HDR));
	c->olen += len;
	return 0;
}

int sd_wire_busy(struct sd_port *port, struct sd_link *l)
{
	(void)port;
	return l->conn != NULL && l->conn->olen - l->conn->ooff > SD_OUT_SOFT;
}

/* Decodes one frame body (len bytes at b) into a packet whose payload
 * points into b. 0 if it is not one. */
int sd_wire_decode(const uint8_t *b, size_t len, struct sd_pkt *p)
{
	if (len < SD_PKT_HDR || len > SD_PKT_HDR + SD_PKT_MAX)
		return 0;
	memset(p, 0, sizeof *p);
	p->op = b[0] & 0x1f;
	p->tp = b[0] >> 5;
	p->flags = b[1];
	p->syndrome = b[2];
	if (p->tp == SD_TP_UD)
		p->hop_limit = b[3];
	else
		p->rnr_timer = b[3];
	p->dst_qpn = get32(b + 4) & 0xffffff;
	p->src_qpn = get32(b + 8) & 0xffffff;
	p->psn = get32(b + 12) & 0xffffff;
	p->len = get32(b + 16);
	p->imm = get32(b + 20);
	p->va = get64(b + 24);
	p->rkey = get32(b + 32);
	p->dma_len = get32(b + 36);
	p->swap_add = get64(b + 40);
	p->compare = get64(b + 48);
	p->msn = get32(b + 56) & 0xffffff;
	p->qkey = get32(b + 60);
	if (p->op == 0 || p->op >= SD_PKT_OP_END || p->len != len - SD_PKT_HDR ||
	    (p->tp != SD_TP_RC && p->tp != SD_TP_UC && p->tp != SD_TP_UD) ||
	    (p->flags & ~(SD_PKT_F_IMM | SD_PKT_F_ACKREQ | SD_PKT_F_SE | SD_PKT_F_GRH)) != 0 ||
	    p->syndrome > SD_AETH_NAK_OP)
		return 0;
	p->data = b + SD_PKT_HDR;
	return 1;
}

/* A handshake message's body (SD_AUTH_LEN bytes) is of type, this
 * version, from the GID from to this device. */
static int auth_is(const struct sd_port *port, const uint8_t *b, int type, const uint8_t from[16])
{
	return memcmp(b + AU_MAGIC, sd_magic, 8) == 0 && b[AU_VERSION] == SD_WIRE_VERSION && b[AU_TYPE] == type &&
	       memcmp(b + AU_FROM, from, 16) == 0 && memcmp(b + AU_TO, port->gid, 16) == 0;
}

/* Opened, connected: the hello leaves, and the reply is awaited. -1 if
 * it could not be sent (c failed). */
static int auth_hello(struct sd_port *port, struct sd_conn *c)
{
	uint8_t m[4 + SD_AUTH_LEN];
	if (auth_message(port, m, AU_HELLO, SD_HELLO_BOTH, c->peer) != 0 || auth_send(c, m) != 0) {
		conn_fail(port, c, errno ? errno : EIO, 1);
		return -1;
	}
	memcpy(c->au_hello, m + 4, AU_SIGNED);
	c->state = CONN_REPLY;
	c->since = sd_now();
	port->net->replies++;
	return 0;
}

/* The handshake's next message, whole in c->au_in: answered, and c one
 * step on. Returns 0; 1 once it is up, its frames may follow at once;
 * -1 when it was refused and is gone. */
static int auth_step(struct sd_port *port, struct sd_conn *c)
{
	struct sd_net *n = port->net;
	const uint8_t *b = c->au_in + 4;
	uint8_t m[4 + SD_AUTH_LEN], mac[32];
	switch (c->state) {
	case CONN_HELLO:
		/* From the connection's source address (c->peer), to us. */
		if (!auth_is(port, b, AU_HELLO, c->peer))
			break;
		memcpy(c->au_hello, b, AU_SIGNED);
		c->both = (b[AU_FLAGS] & SD_HELLO_BOTH) != 0;
		if (auth_message(port, m, AU_REPLY, 0, c->peer) != 0)
			break;
		memcpy(c->au_reply, m + 4, AU_SIGNED);
		auth_mac(n, c, au_acceptor, m + 4 + AU_MAC);
		if (auth_send(c, m) != 0)
			break;
		c->state = CONN_PROOF;
		return 0;
	case CONN_PROOF:
		auth_mac(n, c, au_opener, mac);
		if (memcmp(b + AU_MAGIC, sd_magic, 8) != 0 || b[AU_VERSION] != SD_WIRE_VERSION || b[AU_TYPE] != AU_PROOF ||
		    !sd_mac_equal(mac, b + AU_MAC, 32))
			break;
		/* Authenticated: among the device's connections now, within
		 * their budget (the least recently read that carries no link
		 * goes), and the polls may read it. */
		if (n->nin >= SD_IN_CONNS && !evict_idle(port, 0, NULL)) {
			port->guard.refused++;
			conn_free(port, c);
			return -1;
		}
		list_del(n, c);
		epoll_ctl(n->tfd, EPOLL_CTL_DEL, c->fd, NULL);
		c->state = CONN_UP;
		n->nin++;
		list_add(n, c);
		conn_watch(n, c, EPOLL_CTL_ADD);
		return 1;
	case CONN_REPLY:
		/* From the device the link means, to us, proving the key. */
		memcpy(c->au_reply, b, AU_SIGNED);
		auth_mac(n, c, au_acceptor, mac);
		if (!auth_is(port, b, AU_REPLY, c->peer) || !sd_mac_equal(mac, b + AU_MAC, 32)) {
			port->guard.auth_refused++;
			conn_fail(port, c, EACCES, 1);
			return -1;
		}
		auth_message(port, m, AU_PROOF, 0, c->peer); /* no nonce: it cannot fail */
		auth_mac(n, c, au_opener, m + 4 + AU_MAC);
		if (auth_send(c, m) != 0) {
			conn_fail(port, c, errno ? errno : EIO, 1);
			return -1;
		}
		c->state = CONN_UP;
		n->replies--;
		n->backoff = SD_BACKOFF_MIN;
		uint64_t id = c->id;
		conn_flush(port, c); /* what waited for it; may fail c */
		return conn_by_id(n, id) != NULL ? 1 : -1;
	}
	port->guard.auth_refused++;
	conn_free(port, c);
	return -1;
}

/* Reads a connection in its handshake: its next message, exactly, into
 * au_in (nothing of what follows, which is frames). 1 once the
 * handshake is over, 0 if more must come, -1 if c is gone. */
static int auth_read(struct sd_port *port, struct sd_conn *c)
{
	for (;;) {
		ssize_t k = recv(c->fd, c->au_in + c->au_len, sizeof c->au_in - c->au_len, MSG_DONTWAIT);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (k <= 0) {
			/* the peer closed, or died */
			if (c->out)
				conn_fail(port, c, k == 0 ? ECONNRESET : errno, 1);
			else
				conn_free(port, c);
			return -1;
		}
		c->au_len += (uint8_t)k;
		if (c->au_len >= 4 && get32(c->au_in) != SD_AUTH_LEN) {
			/* not a handshake message: an older device, or anything */
			port->guard.auth_refused++;
			if (c->out)
				conn_fail(port, c, EPROTO, 1);
			else
				conn_free(port, c);
			return -1;
		}
		if (c->au_len < sizeof c->au_in)
			continue;
		c->au_len = 0;
		int r = auth_step(port, c);
		if (r != 0)
			return r;
	}
}

/* Takes the complete frames in c's input buffer. 0, or -1 when one does
 * not parse (the connection must close). */
static int conn_frames(struct sd_port *port, struct sd_conn *c)
{
	size_t at = 0;
	int bad = 0;
	while (c->ilen - at >= 4) {
		uint32_t len = get32(c->ibuf + at);
		if (len > SD_FRAME_MAX - 4) {
			bad = 1;
			break;
		}
		if (c->ilen - at - 4 < len)
			break;
		const uint8_t *b = c->ibuf + at + 4;
		at += 4 + len;
		struct sd_pkt p;
		if (!sd_wire_decode(b, len, &p)) {
			bad = 1;
			break;
		}
		struct sd_link from = { .kind = SD_LINK_WIRE };
		memcpy(from.gid, c->peer, 16);
		sd_rc_rx(port, &from, &p);
	}
	memmove(c->ibuf, c->ibuf + at, c->ilen - at);
	c->ilen -= at;
	if (bad)
		port->wire_dropped++;
	return bad ? -1 : 0;
}

/* Who reads the frames (sd_net_polled): a read by a poll counts towards
 * SD_POLLED_RUN; one by the thread with no poll for SD_POLLER_NS (the
 * application does something else between its polls, or polls no more)
 * starts the count anew. */
static void count_read(struct sd_net *n)
{
	if (!n->in_thread) {
		if (++n->polled_run >= n->polled_need)
			n->polls_read = 1;
		return;
	}
	uint64_t at = __atomic_load_n(&n->poll_at, __ATOMIC_RELAXED);
	if (at != UINT64_MAX && sd_now() - at >= SD_POLLER_NS)
		n->polled_run = 0;
}

/* Reads a connection: up to SD_IN_BUF bytes, then its frames. One this
 * device opened that the peer closed failed (conn_fail). */
static void conn_read(struct sd_port *port, struct sd_conn *c)
{
	if (c->state != CONN_UP && auth_read(port, c) != 1)
		return;
	c->used = ++port->net->activity;
	if (c->icap == 0) {
		c->ibuf = malloc(SD_IN_BUF + SD_FRAME_MAX);
		if (c->ibuf == NULL) {
			conn_free(port, c);
			return;
		}
		c->icap = SD_IN_BUF + SD_FRAME_MAX;
	}
	size_t budget = SD_IN_BUF;
	while (budget > 0) {
		size_t room = c->icap - c->ilen;
		ssize_t k = recv(c->fd, c->ibuf + c->ilen, room, MSG_DONTWAIT);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (k <= 0) {
			/* the peer closed, or died */
			if (c->out && !c->broken)
				conn_fail(port, c, k == 0 ? ECONNRESET : errno, 1);
			else
				conn_free(port, c);
			return;
		}
		c->ilen += (size_t)k;
		count_read(port->net);
		budget = budget > (size_t)k ? budget - (size_t)k : 0;
		port->net->reading = c;
		int bad = conn_frames(port, c);
		port->net->reading = NULL;
		if (bad != 0) {
			conn_free(port, c);
			return;
		}
		if ((size_t)k < room) {
			/* drained: what comes later is reported again (level-triggered) */
			port->net->partial |= c->ilen > 0;
			return;
		}
	}
}

/* The listener rests (accept(2) found no file descriptor, or no
 * memory): out of the thread's set until rest_until, so that the
 * connection it could not take, still queued, does not wake the thread
 * again at once for ever. */
static void accept_rest(struct sd_port *port)
{
	struct sd_net *n = port->net;
	port->guard.accept_pauses++;
	n->rest = n->rest == 0 ? SD_ACCEPT_REST_MIN : n->rest * 2 > SD_ACCEPT_REST_MAX ? SD_ACCEPT_REST_MAX : n->rest * 2;
	n->rest_until = sd_now() + n->rest;
	n->resting = 1;
	epoll_ctl(n->tfd, EPOLL_CTL_DEL, n->lfd, NULL);
}

static void accept_resume(struct sd_net *n)
{
	struct epoll_event le = { .events = EPOLLIN, .data.u64 = TAG_LISTEN };
	n->resting = 0;
	epoll_ctl(n->tfd, EPOLL_CTL_ADD, n->lfd, &le);
}

/* The oldest connection from src still in its handshake, or NULL. */
static struct sd_conn *oldest_hello(struct sd_net *n, const struct sd_src *src)
{
	for (struct sd_conn *c = n->hellos; c != NULL; c = c->next)
		if (c->src == src)
			return c;
	return NULL;
}

/*
 * Takes the connections waiting at the listener. Each is a stranger's
 * until its handshake is over, and is held within budgets a stranger
 * cannot push the device's peers out of: SD_HELLO_CONNS in their
 * handshake (the oldest goes for a new one: a peer's handshake takes a
 * round trip, a stranger's may take 2 s), and SD_PER_SOURCE from one
 * source address (its oldest in a handshake goes, else its
 * authenticated one read the least recently that carries no link, else
 * the new one is refused).
 */
static void do_accept(struct sd_port *port)
{
	struct sd_net *n = port->net;
	for (;;) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof ss;
		int fd = accept4(n->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				accept_rest(port); /* EMFILE, ENFILE, ENOBUFS, ENOMEM */
			return;
		}
		n->rest = 0;
		uint8_t from[16];
		sockaddr_gid(&ss, from);
		struct sd_src *src = src_get(n, from);
		struct sd_conn *c = NULL;
		if (src != NULL) {
			src->n++; /* held while connections go below */
			if (src->n > SD_PER_SOURCE) {
				struct sd_conn *old = oldest_hello(n, src);
				if (old != NULL) {
					port->guard.evicted++;
					conn_free(port, old);
				} else if (!evict_idle(port, 0, src)) {
					src_put(n, src);
					src = NULL;
				}
			}
		}
		if (src != NULL && n->nhellos >= SD_HELLO_CONNS) {
			port->guard.evicted++;
			conn_free(port, n->hellos);
		}
		if (src != NULL)
			c = conn_new(n, fd, 0, CONN_HELLO, src);
		if (src != NULL)
			src_put(n, src); /* c holds it now, if it was made */
		if (c == NULL) {
			port->guard.refused++;
			close(fd);
			continue;
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		memcpy(c->peer, from, 16); /* what its hello must claim */
		c->since = sd_now();
		conn_watch(n, c, EPOLL_CTL_ADD);
	}
}

/* Whether frames wake the transport thread (the connections' set is in
 * the thread's). Device lock held. */
static void watch_wire(struct sd_net *n, int on)
{
	if (n->watching == on)
		return;
	for (struct sd_conn *c = n->conns; c != NULL; c = c->next) {
		struct epoll_event ev = conn_event(c);
		epoll_ctl(n->tfd, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, c->fd, &ev);
	}
	n->watching = on;
}

/*
 * An application's CQ poll (the device lock held). An application that
 * polls in a loop takes the frames itself (sd_net_poll), and a transport
 * thread woken for each of them only takes a core from it, or from its
 * peer, whose send(2) does the wake-up: perftest's ib_send_lat at 64 KiB,
 * where each side polls the whole time, woke each thread 2 to 5 times a
 * message, and the 2 cores ran both programs' threads and one of the
 * programs on one core (perf sched). So once the polls have read the
 * frames SD_POLLED_RUN times in a row (count_read), the polls take the
 * connections out of the thread's set, and a timer (gap) that each poll
 * pushes on to SD_POLL_GAP_NS away puts them back when the polls stop
 * (polls_stopped): a frame then waits that long at most with nobody
 * polling. An application that arms a CQ for an event (sd_net_app_waits)
 * may sleep on its channel next: the thread watches from then on.
 */
void sd_net_polled(struct sd_port *port)
{
	struct sd_net *n = port->net;
	if (n == NULL || !n->polls_read)
		return;
	uint64_t now = sd_now();
	if (n->gap_at < now + SD_POLL_GAP_NS / 2) {
		uint64_t at = now + SD_POLL_GAP_NS;
		struct itimerspec it = { .it_value = { (time_t)(at / 1000000000ull), (long)(at % 1000000000ull) } };
		if (timerfd_settime(n->gap, TFD_TIMER_ABSTIME, &it, NULL) != 0)
			return; /* the thread keeps watching */
		n->gap_at = at;
	}
	if (n->watching) {
		watch_wire(n, 0);
		port->wire_unwatched++;
	}
}

/* The thread watches the connections again, and counts anew: polls
 * stopped (gap), or the application armed a CQ for an event and may
 * sleep on its channel now. Device lock held. */
static void polls_stopped(struct sd_net *n)
{
	struct epoll_event ev;
	if (!n->watching && epoll_wait(n->epfd, &ev, 1, 0) > 0 && n->polled_need < SD_POLLED_RUN_MAX)
		/* A frame waited for the gap: this application stops
		 * polling to do something else (perftest's ib_write_lat spins
		 * on memory for the peer's WRITE after it polled its own
		 * WRITE's completion; its 2 B run met that 16 times in 10 000
		 * iterations at a run of 64). It has to poll longer now before
		 * the polls take the connections again. */
		n->polled_need *= 2;
	n->polls_read = 0;
	n->polled_run = 0;
	watch_wire(n, 1);
}

void sd_net_app_waits(struct sd_port *port)
{
	if (port->net != NULL)
		polls_stopped(port->net);
}

/* One event of the device's epoll set. Device lock held. */
static void handle(struct sd_port *port, const struct epoll_event *ev)
{
	struct sd_net *n = port->net;
	if (ev->data.u64 == TAG_LISTEN) {
		do_accept(port);
		return;
	}
	if (ev->data.u64 == TAG_WAKE || ev->data.u64 == TAG_GAP) {
		uint64_t v;
		(void)!read(ev->data.u64 == TAG_WAKE ? n->wake : n->gap, &v, sizeof v);
		if (ev->data.u64 == TAG_GAP)
			polls_stopped(n);
		return;
	}
	struct sd_conn *c = conn_by_id(n, ev->data.u64);
	if (c == NULL)
		return; /* closed since the event was reported */
	if (c->out && c->state == CONN_CONNECTING) {
		if (!(ev->events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
			return;
		int err = 0;
		socklen_t el = sizeof err;
		if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0) {
			conn_fail(port, c, err ? err : errno, 1);
			return;
		}
		if (auth_hello(port, c) != 0)
			return;
		c->want_out = 0; /* what is queued waits for the reply (conn_flush) */
		conn_watch(n, c, EPOLL_CTL_MOD);
		return;
	}
	if (ev->events & EPOLLOUT) {
		uint64_t id = c->id;
		conn_flush(port, c); /* may free c (the connection broke) */
		if (conn_by_id(n, id) == NULL)
			return;
	}
	if (ev->events & (EPOLLIN | EPOLLERR | EPOLLHUP))
		conn_read(port, c);
}

/* Handshakes not over within SD_HELLO_NS fail: accepted connections
 * (oldest first) are closed, opened ones wait for their link's next
 * attempt (an acceptor that never replies is no device of ours). */
static void expire_hellos(struct sd_port *port, uint64_t now)
{
	struct sd_net *n = port->net;
	while (n->hellos != NULL && now - n->hellos->since > SD_HELLO_NS) {
		port->guard.hello_expired++;
		conn_free(port, n->hellos);
	}
	for (struct sd_conn *c = n->conns, *next; c != NULL && n->replies > 0; c = next) {
		next = c->next;
		if (c->state == CONN_REPLY && now - c->since > SD_HELLO_NS) {
			port->guard.hello_expired++;
			conn_fail(port, c, ETIMEDOUT, 1);
		}
	}
}

/* When the next handshake expires (UINT64_MAX: none is under way). */
static uint64_t hellos_until(const struct sd_net *n, uint64_t now)
{
	uint64_t until = n->hellos != NULL ? n->hellos->since + SD_HELLO_NS + 1 : UINT64_MAX;
	if (n->replies > 0 && now + SD_HELLO_NS < until)
		until = now + SD_HELLO_NS;
	return until;
}

enum { HOLD_NONE, HOLD_ACKS, HOLD_PINGPONG }; /* what flush holds */
static int flush(struct sd_port *port, int hold);
static uint64_t held_until(struct sd_port *port, uint64_t now);

/*
 * Reads the connections that have frames, and again while a read left a
 * frame half in (partial): the rest is on its way (a 64 KiB message is
 * two TCP segments on loopback) and is read now, by the poll or the
 * thread that read the first part. A poll left it to the transport
 * thread in 2 of 3 messages of ib_send_lat at 64 KiB, and the poll that
 * came meanwhile waited for the device lock; the thread went back to its
 * wait, and to poller_takes, for it. rounds: the reads made already.
 * Returns 1 if it read anything. Device lock held.
 */
static int read_on(struct sd_port *port, int rounds)
{
	struct sd_net *n = port->net;
	struct epoll_event evs[32];
	int did = 0;
	for (; rounds < SD_POLL_ROUNDS; rounds++) {
		int k = epoll_wait(n->epfd, evs, 32, 0);
		for (int i = 0; i < k; i++) {
			handle(port, &evs[i]);
			did = 1;
		}
		if (!n->partial)
			break;
		n->partial = 0;
	}
	return did;
}

/* What the wire has for the device, without waiting: frames, then the
 * transport's timers. Device lock held. 1 if anything happened. */
int sd_net_poll(struct sd_port *port)
{
	struct sd_net *n = port->net;
	int did = 0;
	uint64_t now = 0;
	if (n != NULL && n->holding)
		flush(port, HOLD_ACKS); /* what was held SD_HOLD_NS ago leaves, even if nothing else happens */
	if (n != NULL && n->nconns > 0) {
		/* The transport thread leaves frames to this poll (poller_takes). */
		__atomic_store_n(&n->poll_at, UINT64_MAX, __ATOMIC_RELAXED);
		n->partial = 0;
		did = read_on(port, 0);
		now = sd_now();
		__atomic_store_n(&n->poll_at, now, __ATOMIC_RELAXED);
	}
	if (port->timers > 0 && sd_rc_timers(port, now != 0 ? now : sd_now()))
		did = 1;
	return did;
}

/* What the wire refused or shed, and the connections it holds (Device.
 * Wire's Guard). Device lock held. */
void sd_net_guard(struct sd_port *port, struct sd_wire_guard *out)
{
	*out = port->guard;
	if (port->net != NULL) {
		out->in = port->net->nin;
		out->out = port->net->nout;
		out->hellos = port->net->nhellos;
	}
}

/* For tests: a poll in progress (on), as sd_net_poll marks its read of
 * the wire, or none (off), without reading anything. */
void sd_net_poll_mark(struct sd_port *port, int on)
{
	if (port->net != NULL)
		__atomic_store_n(&port->net->poll_at, on ? UINT64_MAX : 0, __ATOMIC_RELAXED);
}

/* Wakes the transport thread to wait until by at the latest: a timer
 * became due, or an ACK was held, sooner than its wait ends, or (by 0) it
 * must stop. The bound travels with the wake-up, so the thread sets its
 * wait anew without the device lock, which a poller may be holding. */
static void kick(struct sd_port *port, uint64_t by)
{
	struct sd_net *n = port->net;
	if (n == NULL)
		return;
	uint64_t cur = __atomic_load_n(&n->wake_by, __ATOMIC_RELAXED);
	while (by < cur && !__atomic_compare_exchange_n(&n->wake_by, &cur, by, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
		;
	uint64_t one = 1;
	(void)!write(n->wake, &one, sizeof one);
}

/* Sends what the opened connections hold. With hold, a connection whose
 * output is only ACKs put aside less than SD_HOLD_NS ago (sd_wire_send)
 * keeps them: the requests the application posts next (a reply to what
 * it just polled, the next write) carry them in the same send(2), which
 * on a loopback TCP connection costs as much as the frame's own, and
 * after them, so a peer that polls for the ACK finds the data placed
 * when it sees it. What is held leaves with the next request, at the
 * first poll or pass after SD_HOLD_NS (sd_net_poll looks, even on a
 * device with nothing else to do, so a spinning poller sends it within
 * SD_HOLD_NS whatever the transport thread's lot), or when the transport
 * thread flushes (it wakes within SD_HOLD_MAX_NS while holds happen).
 * The thread holds a connection's ACKs only while requests to that peer
 * follow them (HOLD_PINGPONG; pingpong is set when a request is queued
 * within SD_HOLD_NS of ACKs that left alone, and cleared when held ACKs
 * wait out SD_HOLD_NS): ib_write_lat's program spins on memory while its
 * thread places the peer's WRITE, and answers within microseconds, and
 * an ACK sent at once completes the peer's WRITE before the answer
 * comes, so that the peer's polls stop and its thread must place that
 * answer in turn (64 KiB rounds 30 % slower); a program that answers
 * nothing would wait SD_HOLD_NS for every completion instead
 * (ib_write_bw -t 1 ran at a quarter of its rate).
 *
 * Returns 1 if a link that was busy for new work (sd_wire_busy) is not
 * any more: work that waited for it may go now, and nothing else would
 * say so (UC and UD get no answers that would run the queues again).
 * Device lock held. */
static int flush(struct sd_port *port, int hold)
{
	struct sd_net *n = port->net;
	uint64_t now = 0;
	int held = 0, freed = 0;
	for (struct sd_conn *c = n->conns, *next; c != NULL; c = next) {
		next = c->next;
		if (c->link == NULL || (c->olen == c->ooff && c->alen == 0))
			continue;
		int was_held = c->held;
		c->held = 0;
		if (hold != HOLD_NONE && c->olen == c->ooff) {
			if (now == 0)
				now = sd_now();
			int fresh = now - c->acks_at < SD_HOLD_NS;
			if (was_held && !fresh)
				c->pingpong = 0; /* no request came to carry them */
			c->held = fresh && (hold == HOLD_ACKS || c->pingpong);
			held |= c->held;
			if (c->held && !was_held && hold == HOLD_PINGPONG)
				port->wire_thread_holds++;
			if (!c->held)
				c->lone_at = now;
		}
		if (c->held)
			continue;
		int busy = c->olen - c->ooff > SD_OUT_SOFT;
		struct sd_link *l = c->link;
		conn_flush(port, c); /* may free c (the connection broke) */
		if (busy && l != NULL && !sd_wire_busy(port, l))
			freed = 1;
	}
	n->holding = held;
	if (held) {
		n->last_hold = now;
		if (now + SD_HOLD_MAX_NS < __atomic_load_n(&n->sleep_until, __ATOMIC_RELAXED))
			kick(port, held_until(port, now));
	}
	return freed;
}

/* What ends every pass of the engine: sends what the connections hold
 * (plain ACKs may wait, see flush), and wakes the transport thread if a
 * timer armed in this pass is still armed and due before its wait ends
 * (sd_net_timer_armed). Returns flush's answer. Device lock held. */
int sd_net_flush(struct sd_port *port)
{
	struct sd_net *n = port->net;
	if (n == NULL)
		return 0;
	int freed = flush(port, n->in_thread ? HOLD_PINGPONG : HOLD_ACKS);
	if (n->timer_armed) {
		n->timer_armed = 0;
		if (port->timers > 0 && port->next_deadline < __atomic_load_n(&n->sleep_until, __ATOMIC_RELAXED))
			kick(port, port->next_deadline);
	}
	return freed;
}

/* Before the device lock is released: the payloads queued frames would
 * gather from the application's memory are copied in (struct sd_gather).
 * A pass's flush has sent them or done so already, unless the pass did
 * not end in one. Device lock held. */
void sd_net_settle(struct sd_port *port)
{
	for (struct sd_conn *c = port->net->conns; c != NULL && port->wire_gathers > 0; c = c->next)
		if (c->ngathers > 0)
			gathers_in(port, c);
}

/* When the transport thread must wake to send what passes held: the
 * oldest held frame's SD_HOLD_NS, and while holds happen (an application
 * may go quiet right after one) at most SD_HOLD_MAX_NS on. */
static uint64_t held_until(struct sd_port *port, uint64_t now)
{
	struct sd_net *n = port->net;
	uint64_t until = UINT64_MAX;
	for (struct sd_conn *c = n->conns; c != NULL; c = c->next)
		if (c->held && c->alen > 0 && c->acks_at + SD_HOLD_NS < until)
			until = c->acks_at + SD_HOLD_NS;
	if (n->last_hold != 0 && now - n->last_hold < SD_HOLD_ACTIVE_NS && now + SD_HOLD_MAX_NS < until)
		until = now + SD_HOLD_MAX_NS;
	return until;
}

/* A path resolved to l: its connection is opened now, so that the first
 * packets do not wait for it, by the end with the lower GID only: both
 * ends resolve their paths at about the same time (RTR), and the higher
 * then finds the lower's connection to send back on (conn_carrier) when
 * its first packet leaves, instead of each sending on its own. */
void sd_wire_open_link(struct sd_port *port, struct sd_link *l)
{
	if (l->kind != SD_LINK_WIRE || l->conn != NULL || port->net == NULL)
		return;
	l->conn = memcmp(port->gid, l->gid, 16) < 0 ? conn_carrier(port, l) : conn_offered(port, l);
}

/* A wire link is let go: its connection stays, for what it still holds
 * (a datagram queued while it was connecting), for the frames the peer
 * sends on it, and for the next link to that peer (conn_offered). */
void sd_wire_close_link(struct sd_port *port, struct sd_link *l)
{
	if (l->conn != NULL) {
		struct sd_conn *c = l->conn;
		c->link = NULL;
		l->conn = NULL;
		conn_flush(port, c); /* what it holds, if the socket takes it now (else on EPOLLOUT) */
	}
}

/* A transport timer was armed: the thread hears of it when the pass
 * ends (sd_net_flush), if it is armed still. A transfer between two QPs
 * of this device arms and disarms within one pass; waking the thread at
 * once cost a system call and a context switch per message. */
void sd_net_timer_armed(struct sd_port *port, uint64_t deadline)
{
	(void)deadline;
	if (port->net != NULL)
		port->net->timer_armed = 1;
}

/* The engine holds completions until a time (port->cq_due): the thread
 * wakes for it if it would sleep past it. Device lock held. */
void sd_net_wake_at(struct sd_port *port, uint64_t at)
{
	if (port->net != NULL && at < __atomic_load_n(&port->net->sleep_until, __ATOMIC_RELAXED))
		kick(port, at);
}

/* ------------------------------------------------------------------ */
/* The transport thread                                                 */
/* ------------------------------------------------------------------ */

/* Is the port's interface looked at? While the device has peers on the
 * wire, and always behind libibverbs, where a program may watch the port
 * alone (ibv_asyncwatch). */
static int watched_port(const struct sd_port *port)
{
	return port->links != NULL || port->watch_always;
}

/* The port follows the interface holding the device's address: when it
 * goes down (or the address leaves it) the device raises
 * IBV_EVENT_PORT_ERR, when it is back IBV_EVENT_PORT_ACTIVE, as an HCA
 * does for its link (checked when watched_port). Device lock held. */
static void watch_port(struct sd_port *port)
{
	int active, mtu;
	sd_port_state(port, &active, &mtu);
	if (active == !port->net->port_down)
		return; /* as it was */
	port->net->port_down = !active;
	sd_raise(port->dev, active ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR, NULL);
}

/*
 * Whether the k events the thread was woken for are the application's to
 * take: only frames arrived, and an application is polling the wire now
 * or was SD_POLLER_NS ago, so its poll reads them (sd_net_poll). The
 * thread then waits again instead of queueing for the device lock behind
 * the poller: frames the poller has taken are not reported again (the
 * set is level-triggered), and what it leaves more than SD_POLLER_NS
 * after the thread first left them (*left_at) is the thread's. Taking
 * the lock there cost a futex sleep and wake of the poller or the thread
 * for nearly every frame, and the thread's share of the CPU against
 * spinning programs: perftest's ib_write_lat at 64 KiB, whose program
 * spins on memory between polls of its send CQ, ran 560 us an iteration
 * in 3 of 6 runs on two cores (the thread waited a scheduler tick to
 * place the peer's WRITE), 36 to 47 us with the thread leaving frames to
 * the poller. The bound keeps the thread from spinning on the poller's
 * frames while it places a long message: leaving them for as long as the
 * poller polled cost ib_send_lat at 64 KiB 41 to 46 us (medians of 10).
 */
static int poller_takes(struct sd_port *port, const struct epoll_event *evs, int k, uint64_t *left_at)
{
	if (k <= 0)
		return 0;
	for (int i = 0; i < k; i++)
		if (evs[i].data.u64 < TAG_FIRST_CONN || (evs[i].data.u64 & TAG_HANDSHAKE))
			return 0; /* the wake fd, the listener, a handshake: the thread's */
	uint64_t now = sd_now(), at = __atomic_load_n(&port->net->poll_at, __ATOMIC_RELAXED);
	if (at != UINT64_MAX && now - at >= SD_POLLER_NS)
		return 0;
	if (*left_at == 0)
		*left_at = now;
	if (now - *left_at >= SD_POLLER_NS)
		return 0;
	__atomic_fetch_add(&port->wire_left_to_poller, 1, __ATOMIC_RELAXED);
	return 1;
}

/* Waits for the thread's events until the monotonic time until
 * (UINT64_MAX: no bound). */
static int wait_events(struct sd_net *n, struct epoll_event *evs, uint64_t until)
{
	struct timespec ts, *tp = NULL;
	uint64_t now = until == UINT64_MAX ? 0 : sd_now();
	if (until != UINT64_MAX) {
		uint64_t wait = until > now ? until - now : 0;
		ts.tv_sec = (time_t)(wait / 1000000000ull);
		ts.tv_nsec = (long)(wait % 1000000000ull);
		tp = &ts;
	}
	int k = epoll_pwait2(n->tfd, evs, SD_THREAD_EVENTS, tp, NULL);
	if (k < 0 && errno == ENOSYS) {
		int ms = tp == NULL ? -1 : (int)((until - now + 999999) / 1000000);
		k = epoll_wait(n->tfd, evs, SD_THREAD_EVENTS, ms);
	}
	return k;
}

static void *transport(void *arg)
{
	struct sd_port *port = arg;
	struct sd_net *n = port->net;
	struct epoll_event evs[SD_THREAD_EVENTS];
	sd_lock_clean(port->dev);
	for (;;) {
		if (n->stop) {
			sd_unlock(port->dev);
			return NULL;
		}
		uint64_t now = sd_now(), until = UINT64_MAX;
		if (port->timers > 0)
			until = port->next_deadline;
		if (watched_port(port) && n->port_check < until)
			until = n->port_check;
		uint64_t hellos = hellos_until(n, now);
		if (hellos < until)
			until = hellos;
		if (n->resting && n->rest_until < until)
			until = n->rest_until;
		uint64_t held = held_until(port, now);
		if (held < until)
			until = held;
		if (port->cq_due != 0 && port->cq_due < until)
			until = port->cq_due;
		__atomic_store_n(&n->wake_by, UINT64_MAX, __ATOMIC_RELAXED); /* the bound says it all */
		__atomic_store_n(&n->sleep_until, until, __ATOMIC_RELAXED);
		sd_unlock(port->dev);
		int k;
		for (uint64_t left_at = 0;;) {
			k = wait_events(n, evs, until);
			if (k == 1 && evs[0].data.u64 == TAG_WAKE) {
				/* A kick alone: its bound, not the lock (polls leave
				 * the wake fd to the thread, sd_net_poll). The fd is
				 * read first: a kick after the read wakes it again. */
				uint64_t v;
				(void)!read(n->wake, &v, sizeof v);
				uint64_t by = __atomic_exchange_n(&n->wake_by, UINT64_MAX, __ATOMIC_ACQUIRE);
				if (by < until) {
					until = by;
					__atomic_store_n(&n->sleep_until, until, __ATOMIC_RELAXED);
				}
				continue;
			}
			if (!poller_takes(port, evs, k, &left_at))
				break;
		}
		/* Waits for the lock. A poller holding it reads the wire
		 * itself meanwhile: the events taken here may be stale by then,
		 * which every handler takes (the set is level-triggered and
		 * every read, accept and write is non-blocking). Trying the
		 * lock and yielding the CPU instead (as this loop did) cost
		 * a scheduler period each time on a busy host: perftest's
		 * ib_write_lat, whose program spins on memory while the thread
		 * must take the peer's WRITE, ran at 4 to 8 ms an iteration
		 * with 2 cores loaded, 17 to 22 us with this wait (interleaved
		 * runs, ib_send_lat 14 to 340 us before, 16 to 22 after). */
		sd_lock_clean(port->dev);
		__atomic_store_n(&n->sleep_until, 0, __ATOMIC_RELAXED);
		if (n->stop) {
			sd_unlock(port->dev);
			return NULL;
		}
		int did = 0;
		n->in_thread = 1;
		n->partial = 0;
		for (int i = 0; i < k; i++) {
			handle(port, &evs[i]);
			did = 1;
		}
		if (n->partial && read_on(port, 1))
			did = 1;
		now = sd_now();
		if (port->timers > 0 && sd_rc_timers(port, now))
			did = 1;
		expire_hellos(port, now);
		if (n->resting && now >= n->rest_until)
			accept_resume(n);
		if (watched_port(port) && now >= n->port_check) {
			watch_port(port);
			n->port_check = now + SD_PORT_CHECK_NS;
		}
		if (port->cq_due != 0 && now >= port->cq_due && sd_comp_deliver(port->dev, now) > 0)
			did = 1; /* completions whose time came: an event, a wait met */
		if (did)
			sd_changed(port->dev);
		if (port->autonomous)
			sd_run_queues(port->dev); /* the wire was read just above */
		if (flush(port, HOLD_PINGPONG)) {
			/* A link freed: what waited for it runs (here, or in
			 * the next poll of a device driven by polls). */
			sd_changed(port->dev);
			if (port->autonomous)
				sd_run_queues(port->dev);
		}
		sd_comp_schedule(port->dev); /* the loop's top sleeps until cq_due at most */
		n->in_thread = 0;
		n->timer_armed = 0; /* the loop's top looks at the timers */
	}
}

/* A listener someone bound for the device (a launcher holding its
 * address): a duplicate of it, if it is a listening TCP socket bound to
 * g at SD_WIRE_PORT; else -1 with EINVAL. */
static int take_listener(int fd, const uint8_t g[16])
{
	struct sockaddr_storage ss, want;
	socklen_t sl = sizeof ss;
	int listening = 0;
	socklen_t ll = sizeof listening;
	gid_sockaddr(g, SD_WIRE_PORT, &want);
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0 ||
	    getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &ll) != 0 || !listening ||
	    ss.ss_family != want.ss_family ||
	    (ss.ss_family == AF_INET
	         ? memcmp(&((struct sockaddr_in *)&ss)->sin_addr, &((struct sockaddr_in *)&want)->sin_addr, 4) != 0 ||
	               ((struct sockaddr_in *)&ss)->sin_port != htons(SD_WIRE_PORT)
	         : memcmp(&((struct sockaddr_in6 *)&ss)->sin6_addr, &((struct sockaddr_in6 *)&want)->sin6_addr, 16) != 0 ||
	               ((struct sockaddr_in6 *)&ss)->sin6_port != htons(SD_WIRE_PORT))) {
		errno = EINVAL;
		return -1;
	}
	int d = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (d >= 0 && set_nonblock(d) != 0) {
		close(d);
		return -1;
	}
	return d;
}

/* Opens the device's network: a listener on addr (auto: the first free
 * 127.x.y.z from 127.0.0.2 on; listen_fd >= 0: that one, bound already),
 * which gives the port its address (and LID, and the loopback link's
 * end), the epoll set and the transport thread. Returns 0, an errno or
 * SD_ERR_PORT_EVERYWHERE. */
int sd_net_open(struct sd_port *port, const uint8_t addr[16], int auto_loopback, int listen_fd)
{
	struct sd_net *n = calloc(1, sizeof *n);
	if (n == NULL)
		return ENOMEM;
	n->lfd = n->epfd = n->wake = n->tfd = n->gap = -1;
	n->wake_by = UINT64_MAX;
	n->polled_need = SD_POLLED_RUN;
	n->next_id = 1;
	n->backoff = SD_BACKOFF_MIN;
	uint8_t g[16];
	memcpy(g, addr, 16);
	int err = 0;
	/* The key first: without it the device could talk to no one. */
	uint8_t key[SD_KEY_MAX];
	size_t keylen = 0;
	char why[4096];
	int kerr = sd_wire_key(key, &keylen, why, sizeof why);
	if (kerr > 0) {
		err = kerr; /* out of descriptors or memory: Open says that */
		goto fail;
	}
	if (kerr != 0) {
		sd_wire_key_failed(why);
		err = SD_ERR_WIRE_KEY;
		goto fail;
	}
	sd_hmac_init(&n->keyed, key, keylen);
	explicit_bzero(key, sizeof key);
	n->srcs = calloc(SD_SRC_BUCKETS, sizeof *n->srcs);
	if (n->srcs == NULL || sd_random(n->src_seed, sizeof n->src_seed) != 0) {
		err = ENOMEM;
		goto fail;
	}
	if (auto_loopback) {
		/* Taken addresses are skipped (another device, or another
		 * program, listens there); processes racing for one are
		 * settled by listen, which only one of them passes. A port
		 * taken everywhere is looked for at the first taken address
		 * and every SD_SCAN_PROBE after it (a wildcard listener can
		 * start only while no device listens, so it may come between
		 * two taken addresses). */
		uint32_t taken = 0;
		for (uint32_t k = 2; k < (1u << 24) - 1; k++) {
			if ((uint8_t)k == 0 || (uint8_t)k == 255)
				continue;
			loopback_gid(k, g);
			n->lfd = listen_on(g);
			if (n->lfd >= 0 || errno != EADDRINUSE)
				break;
			if (taken++ % SD_SCAN_PROBE == 0 && port_taken_everywhere()) {
				err = SD_ERR_PORT_EVERYWHERE;
				goto fail;
			}
			errno = EADDRINUSE;
		}
	} else if (listen_fd >= 0) {
		n->lfd = take_listener(listen_fd, g);
	} else {
		n->lfd = listen_on(g);
	}
	if (n->lfd < 0) {
		err = errno;
		goto fail;
	}
	memcpy(port->gid, g, 16);
	port->lid = port->port_ib ? sd_lid_of(g) : 0;
	int up = 1;
	port->ifmtu = 1500;
	iface_of(g, &port->ifmtu, &up);
	port->loop.kind = SD_LINK_LOOP;
	memcpy(port->loop.gid, g, 16);
	n->epfd = epoll_create1(EPOLL_CLOEXEC);
	n->tfd = epoll_create1(EPOLL_CLOEXEC);
	n->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	n->gap = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (n->epfd < 0 || n->tfd < 0 || n->wake < 0 || n->gap < 0) {
		err = errno;
		goto fail;
	}
	struct epoll_event le = { .events = EPOLLIN, .data.u64 = TAG_LISTEN };
	struct epoll_event we = { .events = EPOLLIN, .data.u64 = TAG_WAKE };
	struct epoll_event ge = { .events = EPOLLIN, .data.u64 = TAG_GAP };
	if (epoll_ctl(n->tfd, EPOLL_CTL_ADD, n->lfd, &le) != 0 ||
	    epoll_ctl(n->tfd, EPOLL_CTL_ADD, n->wake, &we) != 0 ||
	    epoll_ctl(n->tfd, EPOLL_CTL_ADD, n->gap, &ge) != 0) {
		err = errno;
		goto fail;
	}
	n->watching = 1;
	port->net = n;
	n->port = port;
	if ((err = pthread_create(&n->thread, NULL, transport, port)) != 0) {
		port->net = NULL;
		goto fail;
	}
	n->running = 1;
	pthread_setname_np(n->thread, "softdev-wire"); /* in top, perf and gdb: the device's, not the program's */
	pthread_mutex_lock(&nets_lock);
	n->next_net = nets;
	nets = n;
	pthread_mutex_unlock(&nets_lock);
	return 0;
fail:
	if (n->lfd >= 0)
		close(n->lfd);
	if (n->epfd >= 0)
		close(n->epfd);
	if (n->tfd >= 0)
		close(n->tfd);
	if (n->wake >= 0)
		close(n->wake);
	if (n->gap >= 0)
		close(n->gap);
	free(n->srcs);
	explicit_bzero(&n->keyed, sizeof n->keyed);
	free(n);
	return err ? err : EINVAL;
}

/* Waits, up to SD_LINGER_NS, until what the connections hold has been
 * sent, by this device and by the kernel (SIOCOUTQNSD): what the device
 * answered before it closed is on the wire, as an HCA's acknowledgements
 * leave with the data they acknowledge. (A connection closed with input
 * unread resets, and the kernel then drops what it had not sent: the
 * last ACKs, on a connection the peer also sends on, sd_net_close.) */
static void linger(struct sd_port *port)
{
	struct sd_net *n = port->net;
	uint64_t end = sd_now() + SD_LINGER_NS;
	for (;;) {
		sd_lock_clean(port->dev);
		flush(port, HOLD_NONE);
		int pending = 0;
		for (struct sd_conn *c = n->conns; c != NULL; c = c->next) {
			int unsent = 0;
			if (c->olen > c->ooff || c->alen > 0 ||
			    (c->state == CONN_UP && ioctl(c->fd, SIOCOUTQNSD, &unsent) == 0 && unsent > 0))
				pending = 1;
		}
		sd_unlock(port->dev);
		if (!pending || sd_now() > end)
			return;
		struct timespec ts = { 0, 200000 };
		nanosleep(&ts, NULL); /* the thread finishes connecting meanwhile */
	}
}

/* Stops the transport thread, once what it holds is sent. Device lock
 * NOT held. */
void sd_net_stop(struct sd_port *port)
{
	struct sd_net *n = port->net;
	if (n == NULL || !n->running)
		return;
	linger(port);
	sd_lock(port->dev);
	n->stop = 1;
	sd_unlock(port->dev);
	kick(port, 0);
	pthread_join(n->thread, NULL);
	n->running = 0;
}

/* Closes every connection and the listener. Device lock held, thread
 * stopped. */
void sd_net_close(struct sd_port *port)
{
	struct sd_net *n = port->net;
	if (n == NULL)
		return;
	pthread_mutex_lock(&nets_lock);
	for (struct sd_net **pp = &nets; *pp != NULL; pp = &(*pp)->next_net) {
		if (*pp == n) {
			*pp = n->next_net;
			break;
		}
	}
	pthread_mutex_unlock(&nets_lock);
	while (n->conns != NULL) {
		/* What the peer sent and nobody will read is read now (up to
		 * SD_IN_BUF), so that the close ends the connection (FIN)
		 * rather than resetting it. */
		char b[4096];
		for (size_t got = 0; got < SD_IN_BUF && recv(n->conns->fd, b, sizeof b, MSG_DONTWAIT) > 0; got += sizeof b)
			;
		conn_free(port, n->conns);
	}
	while (n->hellos != NULL)
		conn_free(port, n->hellos);
	close(n->lfd);
	close(n->epfd);
	close(n->tfd);
	close(n->wake);
	close(n->gap);
	free(n->srcs);
	free(n->slots);
	free(n->free_slots);
	explicit_bzero(&n->keyed, sizeof n->keyed);
	free(n);
	port->net = NULL;
}

/* A program that exits (exit(3)) right after a poll, without closing its
 * device, may leave ACKs held (flush): they go to the sockets now, which
 * the kernel sends on after the process is gone. Best effort: a device
 * whose lock another thread holds at that moment is skipped. */
__attribute__((destructor)) static void flush_at_exit(void)
{
	pthread_mutex_lock(&nets_lock);
	for (struct sd_net *n = nets; n != NULL; n = n->next_net) {
		if (sd_trylock_clean(n->port->dev)) {
			flush(n->port, 0);
			sd_unlock(n->port->dev);
		}
	}
	pthread_mutex_unlock(&nets_lock);
}
