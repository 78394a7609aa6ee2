/*
 * softdev's libibverbs front end: the engine as a provider ("driver") of
 * the legacy MLNX_OFED libibverbs, built into libsoftdev-rdmav2.so with
 * no Go runtime inside (make softdev-driver).
 *
 * The library finds it as it finds a hardware provider: a `driver` line
 * in /etc/libibverbs.d (or RDMAV_DRIVERS) makes it dlopen the object,
 * whose constructor registers with verbs_register_driver. For every
 * uverbs device of its sysfs tree ($SYSFS_PATH) the library asks us
 * whether the device is ours; we claim those whose hca_type is
 * "softdev" and read the rest of their configuration from the same tree:
 * port 1's GID 0 is the device's address (the engine listens there), its
 * link_layer says InfiniBand (LIDs, sd_lid_of) or Ethernet (RoCE), the
 * node_guid is the node GUID. The tree is the one source of truth, so
 * what ibv_query_gid reads from it and what the engine does agree.
 *
 * ibv_open_device allocates the verbs_context_exp, the verbs_context and
 * size_of_context more bytes in one block, in that order, and calls
 * init_context: struct sd_device has exactly that layout (its exp and
 * vctx members first), so the engine runs in the library's block
 * (sd_init) and the library frees it after uninit_context (sd_fini).
 *
 * A kernel answers a few calls the library makes itself on the device's
 * file (ibv_create_comp_channel writes a command there and reads the
 * answer from memory the kernel filled in). There is no kernel here, so:
 *  - the file descriptor the library opened is replaced, at open, by one
 *    that refuses every write (EINVAL): a call that needs the kernel
 *    fails with an errno the program reports, never with a garbage fd;
 *  - preloaded (LD_PRELOAD, as `softdev exec` runs programs), this object
 *    also defines write(2): a command written to a device's file is
 *    served here as the kernel would (CREATE_COMP_CHANNEL: a new event
 *    pipe, sd_event_pipe, its fd written to the response), and every other
 *    write goes to the C library's write unchanged.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <infiniband/driver.h>
#include <infiniband/kern-abi.h>
#include "../engine.h"

/* The device a sysfs entry describes, as registered with the library.
 * owner is the process whose context is open on it (0: none): one per
 * device per process, see init_context. */
struct sd_driver_dev {
	struct verbs_device vdev;
	struct sd_config    cfg;
	char                ibdev[64];
	pid_t               owner;
};

/* ------------------------------------------------------------------ */
/* The files libibverbs writes commands to                              */
/* ------------------------------------------------------------------ */

enum { SD_MAX_CMD_FDS = 256 };

/* The fd number of every open context's command file (-1: free slot):
 * write() serves what is written to these. */
static int cmd_fds[SD_MAX_CMD_FDS];
static ssize_t (*libc_write)(int, const void *, size_t);

static int is_cmd_fd(int fd)
{
	for (int i = 0; i < SD_MAX_CMD_FDS; i++)
		if (__atomic_load_n(&cmd_fds[i], __ATOMIC_ACQUIRE) == fd)
			return 1;
	return 0;
}

static int cmd_fd_add(int fd)
{
	for (int i = 0; i < SD_MAX_CMD_FDS; i++) {
		int free_slot = -1;
		if (__atomic_compare_exchange_n(&cmd_fds[i], &free_slot, fd, 0, __ATOMIC_ACQ_REL,
		                                __ATOMIC_ACQUIRE))
			return 0;
	}
	return EMFILE;
}

static void cmd_fd_remove(int fd)
{
	for (int i = 0; i < SD_MAX_CMD_FDS; i++) {
		int was = fd;
		if (__atomic_compare_exchange_n(&cmd_fds[i], &was, -1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			return;
	}
}

/* A command as the kernel's uverbs file takes it. */
static ssize_t serve_command(const void *buf, size_t n)
{
	struct ibv_query_params hdr; /* command, in_words, out_words: every command starts so */
	if (n < sizeof(struct ibv_create_comp_channel)) {
		errno = EINVAL;
		return -1;
	}
	memcpy(&hdr, buf, sizeof hdr);
	if (hdr.command != IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL) {
		errno = ENOSYS; /* libibverbs sends no other command itself; the engine needs none */
		return -1;
	}
	struct ibv_create_comp_channel cmd;
	memcpy(&cmd, buf, sizeof cmd);
	int fd;
	int e = sd_event_pipe(&fd, NULL);
	if (e != 0) {
		errno = e;
		return -1;
	}
	struct ibv_create_comp_channel_resp resp = { .fd = (__u32)fd };
	memcpy((void *)(uintptr_t)cmd.response, &resp, sizeof resp);
	return (ssize_t)n;
}

/* write(2), when this object is preloaded: see the top of the file. The
 * exported name is an alias, so that preloaded() can tell this
 * definition from whichever the program's calls reach. */
__attribute__((visibility("hidden"))) ssize_t sd_driver_write(int fd, const void *buf, size_t n)
{
	if (is_cmd_fd(fd))
		return serve_command(buf, n);
	if (libc_write != NULL)
		return libc_write(fd, buf, n);
	return syscall(SYS_write, fd, buf, n);
}
__attribute__((visibility("default"))) ssize_t write(int fd, const void *buf, size_t n)
	__attribute__((alias("sd_driver_write")));

/* Is our write() the one the program's calls reach? */
static int preloaded(void)
{
	return dlsym(RTLD_DEFAULT, "write") == (void *)sd_driver_write;
}

/* ------------------------------------------------------------------ */
/* Contexts                                                             */
/* ------------------------------------------------------------------ */

/* The engine in the library's record for ctx. */
static int init_engine(struct sd_driver_dev *dev, struct ibv_context *ctx, int cmd_fd)
{
	/* The library keeps cmd_fd's number and closes it at close: make it
	 * a file that refuses writes (an epoll instance), so that nothing a
	 * kernel would answer is ever half-answered. */
	int refuse = epoll_create1(EPOLL_CLOEXEC);
	if (refuse < 0)
		return errno;
	int e = dup3(refuse, cmd_fd, O_CLOEXEC) < 0 ? errno : 0;
	close(refuse);
	if (e != 0)
		return e;
	if (preloaded() && (e = cmd_fd_add(cmd_fd)) != 0)
		return e;
	struct sd_device *d = sd_dev(ctx);
	if ((e = sd_init(d, &dev->cfg)) != 0) {
		cmd_fd_remove(cmd_fd);
		return e;
	}
	return 0;
}

/*
 * One context per device per process. Each context is an engine of its
 * own (the library allocates the record, sd_init runs in it): two of them
 * would number their QPs alike from SD_QPN_BASE and share the device's
 * one listener, so a SEND from one context to a QP of the other would land
 * in the sender's own receive queue and both would complete with success.
 * An HCA keeps QP numbers unique across a device's contexts; rather than
 * misdeliver, the second ibv_open_device is refused (EBUSY), saying so on
 * stderr. A child after fork(2) may open the device again (its parent's
 * context is not its own).
 */
static int claim(struct sd_driver_dev *dev)
{
	pid_t me = getpid(), was = __atomic_load_n(&dev->owner, __ATOMIC_ACQUIRE);
	for (;;) {
		if (was == me) {
			fprintf(stderr,
			        "softdev: ibv_open_device(%s): the device is open in this process already; softdev "
			        "supports one context per device per process (open it once and share the struct "
			        "ibv_context)\n",
			        dev->ibdev);
			return EBUSY;
		}
		if (__atomic_compare_exchange_n(&dev->owner, &was, me, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			return 0;
	}
}

static void unclaim(struct sd_driver_dev *dev)
{
	pid_t me = getpid();
	__atomic_compare_exchange_n(&dev->owner, &me, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

/* The library returns NULL from ibv_open_device when this fails, without
 * setting errno from what it returns: errno says why. */
static int init_context(struct verbs_device *vdev, struct ibv_context *ctx, int cmd_fd)
{
	struct sd_driver_dev *dev = (struct sd_driver_dev *)vdev;
	int e = claim(dev);
	if (e == 0 && (e = init_engine(dev, ctx, cmd_fd)) != 0)
		unclaim(dev);
	if (e != 0)
		errno = e;
	return e;
}

static void uninit_context(struct verbs_device *vdev, struct ibv_context *ctx)
{
	cmd_fd_remove(ctx->cmd_fd);
	sd_fini(sd_dev(ctx));
	unclaim((struct sd_driver_dev *)vdev);
}

/* ------------------------------------------------------------------ */
/* Devices                                                              */
/* ------------------------------------------------------------------ */

/* Reads dir/file (a sysfs attribute) without its newline; 0 or -1. */
static int read_attr(const char *dir, const char *file, char *buf, size_t len)
{
	int n = ibv_read_sysfs_file(dir, file, buf, len);
	if (n <= 0)
		return -1;
	buf[strcspn(buf, "\n")] = 0;
	return 0;
}

/* A GID as sysfs writes it: eight groups of four hex digits. */
static int parse_gid(const char *s, uint8_t g[16])
{
	for (int i = 0; i < 8; i++) {
		unsigned v;
		if (sscanf(s + i * 5, "%4x", &v) != 1)
			return -1;
		g[2 * i] = (uint8_t)(v >> 8);
		g[2 * i + 1] = (uint8_t)v;
	}
	return 0;
}

/* The listener a launcher bound for the device, from
 * SOFTDEV_LISTEN_FDS="ibdev=fd[,ibdev=fd...]"; -1 if none. A listening
 * socket found there is made close-on-exec: it is this process's device's,
 * and a program this one starts would hold the address serving nobody. */
static int listener_of(const char *ibdev)
{
	const char *env = getenv("SOFTDEV_LISTEN_FDS");
	size_t k = strlen(ibdev);
	for (const char *p = env; p != NULL && *p != 0;) {
		if (strncmp(p, ibdev, k) == 0 && p[k] == '=') {
			int fd = atoi(p + k + 1), listening = 0;
			socklen_t len = sizeof listening;
			if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening)
				fcntl(fd, F_SETFD, FD_CLOEXEC);
			return fd;
		}
		p = strchr(p, ',');
		if (p != NULL)
			p++;
	}
	return -1;
}

/* $VERBSEXP_SOFTDEV_JITTER (the Go package's JitterEnv): a bound on the
 * random delay added to each completion, as a Go duration ("50us",
 * "1.5ms", "200ns", "1s"; "0" or unset: none), at most 1 s. A value
 * that does not parse is said on stderr and the device runs without. */
static uint64_t jitter_of_env(void)
{
	const char *env = getenv("VERBSEXP_SOFTDEV_JITTER");
	if (env == NULL || *env == 0 || strcmp(env, "0") == 0)
		return 0;
	char *end;
	double v = strtod(env, &end);
	static const struct { const char *unit; double ns; } units[] = {
		{ "ns", 1 }, { "us", 1e3 }, { "\xc2\xb5s", 1e3 }, { "ms", 1e6 }, { "s", 1e9 },
	};
	for (size_t i = 0; end != env && i < sizeof units / sizeof units[0]; i++)
		if (strcmp(end, units[i].unit) == 0 && v >= 0 && v * units[i].ns <= 1e9)
			return (uint64_t)(v * units[i].ns);
	fprintf(stderr, "softdev: VERBSEXP_SOFTDEV_JITTER=%s: want a duration from 0 to 1s such as 50us; "
	        "the device runs without jitter\n", env);
	return 0;
}

static struct verbs_device *driver_init(const char *uverbs_sys_path, int abi_version)
{
	char ibdev[64], dir[512], value[64], guidstr[64];
	if (read_attr(uverbs_sys_path, "ibdev", ibdev, sizeof ibdev) != 0)
		return NULL;
	snprintf(dir, sizeof dir, "%s/class/infiniband/%s", ibv_get_sysfs_path(), ibdev);
	if (read_attr(dir, "hca_type", value, sizeof value) != 0 || strcmp(value, "softdev") != 0)
		return NULL; /* not ours */
	struct sd_config cfg = {
		.max_qp_wr = SD_MAX_QP_WR,
		.max_cqe = SD_MAX_CQE,
		.listen_fd = listener_of(ibdev),
		.autonomous = SD_RUN_THREAD, /* programs poll; nobody calls Progress */
		.timescale = 1,
		.kernel_events = 1,
		.jitter_ns = jitter_of_env(),
	};
	unsigned short guid[4];
	if (read_attr(dir, "ports/1/gids/0", value, sizeof value) != 0 || parse_gid(value, cfg.addr) != 0 ||
	    read_attr(dir, "ports/1/link_layer", value, sizeof value) != 0 ||
	    read_attr(dir, "node_guid", guidstr, sizeof guidstr) != 0 ||
	    sscanf(guidstr, "%hx:%hx:%hx:%hx", &guid[0], &guid[1], &guid[2], &guid[3]) != 4) {
		fprintf(stderr, "softdev: %s: its sysfs entry lacks ports/1/gids/0, ports/1/link_layer or node_guid\n", dir);
		return NULL;
	}
	cfg.port_ib = strcmp(value, "InfiniBand") == 0;
	/* ibv_get_device_guid and query_device both say the node GUID: the
	 * former reads sysfs, the latter asks the engine. */
	uint64_t g = (uint64_t)guid[0] << 48 | (uint64_t)guid[1] << 32 | (uint64_t)guid[2] << 16 | guid[3];
	cfg.node_guid = htobe64(g);

	struct sd_driver_dev *dev = calloc(1, sizeof *dev);
	if (dev == NULL)
		return NULL;
	dev->cfg = cfg;
	snprintf(dev->ibdev, sizeof dev->ibdev, "%s", ibdev);
	dev->vdev.sz = sizeof dev->vdev;
	/* The library allocates sizeof(struct verbs_context_exp) +
	 * sizeof(struct verbs_context) + size_of_context: the device's record. */
	dev->vdev.size_of_context = sizeof(struct sd_device) - sizeof(struct verbs_context_exp) -
	                            sizeof(struct verbs_context);
	dev->vdev.init_context = init_context;
	dev->vdev.uninit_context = uninit_context;
	return &dev->vdev;
}

_Static_assert(offsetof(struct sd_device, vctx) == sizeof(struct verbs_context_exp),
               "softdev driver: the library puts the verbs context right after the exp record");

__attribute__((constructor)) static void register_softdev(void)
{
	for (int i = 0; i < SD_MAX_CMD_FDS; i++)
		cmd_fds[i] = -1;
	libc_write = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
	verbs_register_driver("softdev", driver_init);
}
