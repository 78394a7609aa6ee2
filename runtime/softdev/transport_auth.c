//go:build linux && cgo

/*
 * softdev wire authentication: the key devices prove to each other in
 * the wire's hello (transport_wire.c), and the HMAC-SHA256 they prove it
 * with. An HCA's source QP and GID come from the kernel and the
 * hardware; a TCP connection's claims come from whoever opened it, and
 * on loopback any local user may bind any source address. So a
 * connection carries frames only once both ends have shown they hold the
 * same secret, without sending it.
 *
 * The key, the first of:
 *  - $VERBSEXP_SOFTDEV_KEY: 32 to 128 hex digits (16 to 64 bytes), what a
 *    job across hosts sets for all its processes, as it does the
 *    rendezvous token;
 *  - $VERBSEXP_SOFTDEV_KEY_FILE: a file holding such digits;
 *  - the user's own key file, ~/.cache/verbsexp/softdev-wire.key (the
 *    home directory of the effective uid, from the password database, so
 *    that a process under sudo or with another $HOME finds the same one),
 *    made at first use with 32 random bytes.
 * A key file is used only if it is a regular file owned by the effective
 * uid that no one else may read or write, and every directory on its
 * (resolved) path belongs to root or to that uid and is writable by no
 * one else unless sticky (/tmp): a file another user planted, or could
 * replace, is refused with a message saying why and what to do. So by
 * default the devices of one user on a host trust each other, and no
 * one else's.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include "transport.h"

/* ------------------------------------------------------------------ */
/* SHA-256 (FIPS 180-4) and HMAC (RFC 2104)                             */
/* ------------------------------------------------------------------ */

static const uint32_t sha_k[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t ror(uint32_t x, int n) { return x >> n | x << (32 - n); }

static void sha_block(uint32_t h[8], const uint8_t *p)
{
	uint32_t w[64];
	for (int i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
	for (int i = 16; i < 64; i++) {
		uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
		uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
	for (int i = 0; i < 64; i++) {
		uint32_t t1 = k + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + sha_k[i] + w[i];
		uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
		k = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
	}
	h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

void sd_sha256_init(struct sd_sha256 *s)
{
	static const uint32_t iv[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
	                                0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };
	memcpy(s->h, iv, sizeof iv);
	s->len = 0;
	s->n = 0;
}

void sd_sha256_update(struct sd_sha256 *s, const void *data, size_t len)
{
	const uint8_t *p = data;
	s->len += len;
	if (s->n > 0) {
		size_t k = 64 - s->n < len ? 64 - s->n : len;
		memcpy(s->buf + s->n, p, k);
		s->n += k, p += k, len -= k;
		if (s->n < 64)
			return;
		sha_block(s->h, s->buf);
		s->n = 0;
	}
	for (; len >= 64; p += 64, len -= 64)
		sha_block(s->h, p);
	memcpy(s->buf, p, len);
	s->n = len;
}

void sd_sha256_final(struct sd_sha256 *s, uint8_t out[32])
{
	uint64_t bits = s->len * 8;
	uint8_t pad[72] = { 0x80 };
	size_t padlen = (s->n < 56 ? 56 : 120) - s->n;
	for (int i = 0; i < 8; i++)
		pad[padlen + i] = (uint8_t)(bits >> (56 - 8 * i));
	sd_sha256_update(s, pad, padlen + 8);
	for (int i = 0; i < 8; i++) {
		out[4 * i] = (uint8_t)(s->h[i] >> 24);
		out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
		out[4 * i + 2] = (uint8_t)(s->h[i] >> 8);
		out[4 * i + 3] = (uint8_t)s->h[i];
	}
}

void sd_hmac_init(struct sd_hmac *m, const uint8_t *key, size_t klen)
{
	uint8_t k[64] = { 0 }, pad[64];
	if (klen > 64) {
		struct sd_sha256 s;
		sd_sha256_init(&s);
		sd_sha256_update(&s, key, klen);
		sd_sha256_final(&s, k);
	} else {
		memcpy(k, key, klen);
	}
	for (int i = 0; i < 64; i++)
		pad[i] = k[i] ^ 0x36;
	sd_sha256_init(&m->inner);
	sd_sha256_update(&m->inner, pad, 64);
	for (int i = 0; i < 64; i++)
		pad[i] = k[i] ^ 0x5c;
	sd_sha256_init(&m->outer);
	sd_sha256_update(&m->outer, pad, 64);
	explicit_bzero(k, sizeof k);
	explicit_bzero(pad, sizeof pad);
}

void sd_hmac_update(struct sd_hmac *m, const void *p, size_t n)
{
	sd_sha256_update(&m->inner, p, n);
}

void sd_hmac_final(struct sd_hmac *m, uint8_t out[32])
{
	uint8_t in[32];
	sd_sha256_final(&m->inner, in);
	sd_sha256_update(&m->outer, in, 32);
	sd_sha256_final(&m->outer, out);
}

void sd_hmac_sha256(const uint8_t *key, size_t klen, const uint8_t *msg, size_t mlen, uint8_t out[32])
{
	struct sd_hmac m;
	sd_hmac_init(&m, key, klen);
	sd_hmac_update(&m, msg, mlen);
	sd_hmac_final(&m, out);
}

int sd_mac_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
	uint8_t d = 0;
	for (size_t i = 0; i < n; i++)
		d |= a[i] ^ b[i];
	return d == 0;
}

int sd_random(void *buf, size_t len)
{
	uint8_t *p = buf;
	while (len > 0) {
		ssize_t k = getrandom(p, len, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		p += k, len -= (size_t)k;
	}
	if (len == 0)
		return 0;
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	while (len > 0) {
		ssize_t k = read(fd, p, len);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		p += k, len -= (size_t)k;
	}
	close(fd);
	return len == 0 ? 0 : -1;
}

/* ------------------------------------------------------------------ */
/* The key                                                              */
/* ------------------------------------------------------------------ */

/* Out of file descriptors or memory while looking for the key: not the
 * key's fault, and Open says so (sd_wire_key returns it). */
static __thread int key_short;

/* strerror(e), noting e if it is a shortage. */
static const char *key_errno(int e)
{
	if (e == EMFILE || e == ENFILE || e == ENOMEM)
		key_short = e;
	return strerror(e);
}

#define KEY_ENV "VERBSEXP_SOFTDEV_KEY"
#define KEY_FILE_ENV "VERBSEXP_SOFTDEV_KEY_FILE"
#define KEY_DIR ".cache/verbsexp"
#define KEY_NAME "softdev-wire.key"
#define KEY_ADVICE                                                                                       \
	"set $" KEY_ENV " to 32 to 128 hex digits (one secret for every device that talks to this one; "  \
	"make one with: od -An -N32 -tx1 /dev/urandom | tr -d ' \\n'), or $" KEY_FILE_ENV                 \
	" to a file of them that only you can read"

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* s (n bytes; trailing white space allowed) as SD_KEY_MIN to SD_KEY_MAX
 * bytes in hex: their count, or 0. */
static size_t parse_key(const char *s, size_t n, uint8_t key[SD_KEY_MAX])
{
	while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t'))
		n--;
	if (n % 2 != 0 || n < 2 * SD_KEY_MIN || n > 2 * SD_KEY_MAX)
		return 0;
	for (size_t i = 0; i < n; i += 2) {
		int hi = hexval((unsigned char)s[i]), lo = hexval((unsigned char)s[i + 1]);
		if (hi < 0 || lo < 0)
			return 0;
		key[i / 2] = (uint8_t)(hi << 4 | lo);
	}
	return n / 2;
}

/* Whether a directory on a key file's path is safe: root's or uid's,
 * and writable by nobody else unless sticky (where others may add
 * entries but not replace ours). */
static const char *dir_unsafe(const struct stat *st, uid_t uid)
{
	if (!S_ISDIR(st->st_mode))
		return "is not a directory";
	if (st->st_uid != 0 && st->st_uid != uid)
		return "belongs to another user";
	if ((st->st_mode & (S_IWGRP | S_IWOTH)) && !(st->st_mode & S_ISVTX))
		return "is writable by other users";
	return NULL;
}

/* Opens the directory at path (resolved first: every component of the
 * real path is then opened without following links and checked), or -1
 * with err. */
static int open_safe_dir(const char *path, uid_t uid, char *err, size_t el)
{
	char *real = realpath(path, NULL);
	if (real == NULL) {
		snprintf(err, el, "%s: %s", path, key_errno(errno));
		return -1;
	}
	int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	char shown[PATH_MAX + 2] = "/";
	const char *why = NULL;
	struct stat st;
	int sep = 0; /* why is an errno's text */
	if (fd < 0 || fstat(fd, &st) != 0) {
		why = key_errno(errno);
		sep = 1;
	} else {
		why = dir_unsafe(&st, uid);
	}
	char *save = NULL;
	for (char *part = strtok_r(real, "/", &save); why == NULL && part != NULL; part = strtok_r(NULL, "/", &save)) {
		int next = openat(fd, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (strlen(shown) > 1)
			strncat(shown, "/", sizeof shown - strlen(shown) - 1);
		strncat(shown, part, sizeof shown - strlen(shown) - 1);
		close(fd);
		fd = next;
		if (fd < 0 || fstat(fd, &st) != 0) {
			why = key_errno(errno);
			sep = 1;
		} else {
			why = dir_unsafe(&st, uid);
		}
	}
	free(real);
	if (why != NULL) {
		snprintf(err, el, "directory %s%s %s", shown, sep ? ":" : "", why);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* Reads the key file name in dfd (shown as path in messages): 0, 1 if
 * there is none, or -1 with err. */
static int read_key_file(int dfd, const char *name, const char *path, uid_t uid, uint8_t key[SD_KEY_MAX],
                         size_t *len, char *err, size_t el)
{
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)
		return 1;
	struct stat st;
	const char *why = NULL;
	char buf[2 * SD_KEY_MAX + 8];
	ssize_t k = 0;
	int sep = 0;
	if (fd < 0 || fstat(fd, &st) != 0)
		why = errno == ELOOP ? "is a symbolic link" : (sep = 1, key_errno(errno));
	else if (!S_ISREG(st.st_mode))
		why = "is not a regular file";
	else if (st.st_uid != uid)
		why = "belongs to another user (someone else may have put it there)";
	else if (st.st_mode & (S_IRWXG | S_IRWXO))
		why = "may be read or written by other users (chmod 600 it, and make a new key if others saw it)";
	else if ((k = read(fd, buf, sizeof buf)) < 0)
		why = (sep = 1, key_errno(errno));
	else if ((*len = parse_key(buf, (size_t)k, key)) == 0)
		why = "does not hold 32 to 128 hex digits";
	if (fd >= 0)
		close(fd);
	explicit_bzero(buf, sizeof buf);
	if (why != NULL) {
		snprintf(err, el, "key file %s%s %s", path, sep ? ":" : "", why);
		return -1;
	}
	return 0;
}

/* Makes the key file name in dfd with a new random key: written whole
 * under a name of its own and linked into place, so a process reading
 * it never sees it half-written, and of two processes making it at once
 * one wins and the other reads the winner's. 0, 1 if another process
 * made it first, or -1 with err. */
static int make_key_file(int dfd, const char *name, const char *path, char *err, size_t el)
{
	uint8_t raw[32], nonce[8];
	char tmp[NAME_MAX + 1], text[2 * sizeof raw + 1];
	if (sd_random(raw, sizeof raw) != 0 || sd_random(nonce, sizeof nonce) != 0) {
		snprintf(err, el, "no random bytes for a new key file %s", path);
		return -1;
	}
	snprintf(tmp, sizeof tmp, ".%.200s.%d.%02x%02x%02x%02x%02x%02x%02x%02x", name, (int)getpid(), nonce[0], nonce[1],
	         nonce[2], nonce[3], nonce[4], nonce[5], nonce[6], nonce[7]);
	for (size_t i = 0; i < sizeof raw; i++)
		snprintf(text + 2 * i, 3, "%02x", raw[i]);
	text[2 * sizeof raw] = '\n';
	explicit_bzero(raw, sizeof raw);
	int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	int e = 0;
	if (fd < 0)
		e = errno;
	else if (fchmod(fd, 0600) != 0 || write(fd, text, sizeof text) != (ssize_t)sizeof text || fsync(fd) != 0)
		e = errno ? errno : EIO;
	explicit_bzero(text, sizeof text);
	if (fd >= 0)
		close(fd);
	int linked = e == 0 ? linkat(dfd, tmp, dfd, name, 0) : -1;
	if (e == 0 && linked != 0 && errno != EEXIST)
		e = errno;
	int lost = e == 0 && linked != 0; /* EEXIST: another process made it first */
	if (fd >= 0)
		unlinkat(dfd, tmp, 0);
	if (e != 0) {
		snprintf(err, el, "cannot make key file %s: %s", path, key_errno(e));
		return -1;
	}
	return lost;
}

/* The key in the file at dir/name: read, or made if there is none. */
static int key_from_file(const char *dir, const char *name, uid_t uid, uint8_t key[SD_KEY_MAX], size_t *len,
                         char *err, size_t el)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	int dfd = open_safe_dir(dir, uid, err, el);
	if (dfd < 0)
		return -1;
	int r = 1;
	for (int tries = 0; r == 1 && tries < 3; tries++) {
		r = read_key_file(dfd, name, path, uid, key, len, err, el);
		if (r == 1 && make_key_file(dfd, name, path, err, el) < 0)
			r = -1;
	}
	close(dfd);
	if (r == 1)
		snprintf(err, el, "key file %s keeps vanishing", path);
	return r == 0 ? 0 : -1;
}

/* The directory the user's key file is in: made if missing (0700). */
static int user_key_dir(uid_t uid, char *dir, size_t dl, char *err, size_t el)
{
	const char *home = NULL;
	struct passwd pw, *res = NULL;
	char pwbuf[4096];
	if (getpwuid_r(uid, &pw, pwbuf, sizeof pwbuf, &res) == 0 && res != NULL && res->pw_dir[0] == '/')
		home = res->pw_dir;
	else if (getenv("HOME") != NULL && getenv("HOME")[0] == '/')
		home = getenv("HOME"); /* a uid with no password entry (a container's) */
	if (home == NULL) {
		snprintf(err, el, "uid %u has no home directory for a key file", (unsigned)uid);
		return -1;
	}
	if ((size_t)snprintf(dir, dl, "%s/.cache", home) >= dl) {
		snprintf(err, el, "home directory %s: name too long", home);
		return -1;
	}
	if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
		snprintf(err, el, "cannot make %s: %s", dir, key_errno(errno));
		return -1;
	}
	snprintf(dir, dl, "%s/" KEY_DIR, home);
	if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
		snprintf(err, el, "cannot make %s: %s", dir, key_errno(errno));
		return -1;
	}
	return 0;
}

int sd_wire_key(uint8_t key[SD_KEY_MAX], size_t *len, char *err, size_t errlen)
{
	char why[PATH_MAX + 256] = "";
	key_short = 0;
	const char *env = getenv(KEY_ENV);
	if (env != NULL && env[0] != 0) {
		if ((*len = parse_key(env, strlen(env), key)) != 0)
			return 0;
		snprintf(err, errlen, "softdev wire key: $" KEY_ENV " is not 32 to 128 hex digits; " KEY_ADVICE);
		return -1;
	}
	uid_t uid = geteuid();
	const char *file = getenv(KEY_FILE_ENV);
	int r;
	if (file != NULL && file[0] != 0) {
		char dir[PATH_MAX];
		const char *slash = strrchr(file, '/');
		if (file[0] != '/' || slash[1] == 0 || (size_t)(slash - file) >= sizeof dir) {
			snprintf(err, errlen, "softdev wire key: $" KEY_FILE_ENV " %s is not an absolute path to a file; " KEY_ADVICE,
			         file);
			return -1;
		}
		memcpy(dir, file, (size_t)(slash - file));
		dir[slash - file] = 0;
		r = key_from_file(slash == file ? "/" : dir, slash + 1, uid, key, len, why, sizeof why);
	} else {
		char dir[PATH_MAX];
		r = user_key_dir(uid, dir, sizeof dir, why, sizeof why);
		if (r == 0)
			r = key_from_file(dir, KEY_NAME, uid, key, len, why, sizeof why);
	}
	if (r != 0 && key_short != 0) {
		snprintf(err, errlen, "softdev wire key: %s", why);
		return key_short;
	}
	if (r != 0)
		snprintf(err, errlen, "softdev wire key: %s; remove what is wrong, or " KEY_ADVICE, why);
	return r;
}

/* The last key failure, for the front end's error (sd_wire_key_error),
 * and whether the front end reports it itself (the Go front end) or it
 * goes to stderr here (the driver, inside a program that would only say
 * that the device did not open). */
static pthread_mutex_t key_err_lock = PTHREAD_MUTEX_INITIALIZER;
static char key_err[PATH_MAX + 1024];
static int key_err_quiet;

void sd_wire_key_failed(const char *msg)
{
	pthread_mutex_lock(&key_err_lock);
	snprintf(key_err, sizeof key_err, "%s", msg);
	int quiet = key_err_quiet;
	pthread_mutex_unlock(&key_err_lock);
	if (!quiet)
		fprintf(stderr, "%s\n", msg);
}

void sd_wire_key_error(char *buf, size_t len)
{
	pthread_mutex_lock(&key_err_lock);
	snprintf(buf, len, "%s", key_err);
	pthread_mutex_unlock(&key_err_lock);
}

void sd_wire_key_quiet(void)
{
	pthread_mutex_lock(&key_err_lock);
	key_err_quiet = 1;
	pthread_mutex_unlock(&key_err_lock);
}
