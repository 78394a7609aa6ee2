/* Golden case: enums with ULL values, negative values, aliases, flag sets, and macros. */
#include <stddef.h>

enum color { RED, GREEN = 5, BLUE, CRIMSON = RED };

enum wide_flags {
	WF_A = 1ULL << 0,
	WF_B = 1ULL << 1,
	WF_TOP = 1ULL << 63,
};

enum signed_enum { NEG = -2, ZERO = 0, POS = 3 };

enum { ANON_ONE = 1, ANON_BIG = 1 << 20 };

struct sized { long a; char b; };

#define MACRO_SHIFT (1ULL << 40)
#define MACRO_EXPR (BLUE * 2 + 1)
#define MACRO_SIZEOF (sizeof(struct sized))
#define MACRO_NEG (-7)
#define MACRO_MAX (~0ULL)
#define MACRO_STRING "not a number"
#define MACRO_FN(x) ((x) + 1)

struct uses { enum color c; enum wide_flags f; };
