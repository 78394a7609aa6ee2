/* Golden case: C names whose Go spelling collides with another name in
 * its scope: a member with the setter of another (set_x before x), C
 * parameters named as Go keywords, predeclared identifiers and names the
 * wrappers use, and a function named as another's address form. */
#include <stdint.h>

struct rec {
	int set_x;
	union { int p; char q; } x;   /* a union member: accessor X, setter SetX */
	int set_y;
	unsigned int y : 3;           /* a bit-field: Y, SetY */
	int z;
	int set_z;                    /* after z: z took SetZ for its setter */
};

struct tight { char c; int set_w; int w; } __attribute__((packed));

/* Go name C would be cgo's import in shims.go; gcc takes $ and non-ASCII
 * letters in identifiers, Go neither $ nor a first letter without a
 * capital. */
struct c { int a$b; int a_b; int été; int 名前; };

/* Every parameter is a name the wrapper's Go body could not have used. */
static inline int names_all(struct rec *nil, int unpack, int syscall, int int64, int type, int r,
                            int err, int ret, int fn, int errno_, int libibverbs, int len, int true, int symAll,
                            int unsafe, int abiutil, int dynlib, int C)
{
	return nil->z == unpack + syscall + int64 + type + r + err + ret + fn + errno_ + libibverbs + len + true +
	       symAll + unsafe + abiutil + dynlib + C ? 0 : 22;
}

/* ibv_exp_post_task gets an address form, ExpPostTaskCMem; a function of
 * that Go name comes first. */
static inline int ibv_exp_post_task_c_mem(int x) { return x; }
static inline int ibv_exp_post_task(void *context, void *task, void **bad_task) { return context == task ? 0 : 22; }

/* Macros named as the C locals of cgo's wrappers (p0, r, v) and as the
 * trampolines' once were (fn, e, slot2): gcc accepts them, and so must
 * the generated package's C. */
#define p0 1
#define r 2
#define v 3
#define fn 4
#define e 5
#define slot2 6
