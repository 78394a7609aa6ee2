/* Golden case: call wrappers for each convention, and what cannot be wrapped. */
#include <stdint.h>
#include <errno.h>

struct dev { int fd; };
struct pair { int a, b; };
enum mode { MODE_A, MODE_B };

int dev_status(struct dev *d, enum mode m);            /* 0 or errno */
struct dev *dev_open(const char *name, void *user);    /* NULL + errno */
void dev_close(struct dev *d);                         /* void */
uint64_t dev_guid(struct dev *d);                      /* value */
static inline int dev_poke(struct dev *d, uint16_t v) { return d == 0 ? EINVAL : (d->fd = v, 0); }
int dev_printf(struct dev *d, const char *fmt, ...);   /* variadic: skipped */
int dev_on_event(struct dev *d, void (*cb)(int));      /* function pointer: skipped */
int dev_sum(struct pair p);                            /* record by value: skipped */
int dev_flag(struct dev *d, _Bool on, double w);       /* bool and float parameters */
const char *dev_name(struct dev *d);                   /* const char *: string, NULL + errno */
long dev_count(struct dev *d);                         /* 64-bit status */
static inline const char *dev_label(struct dev *d) { return d->fd > 0 ? "open" : (errno = ENODEV, (const char *)0); }
static inline int dev_fail(struct dev *d, int e) { errno = e; return -1; }   /* -1 + errno */
