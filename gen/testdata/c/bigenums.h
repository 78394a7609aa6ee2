/* Enumerators beyond int, typed as gcc types them (an extension): an
 * enum with no negative value and one above 2^63 is unsigned long; with
 * a negative one it is long, and 2^63 wraps to -2^63 (gcc warns that the
 * values exceed the range of the largest integer). */

enum big_unsigned { BIG_TOP = 1ULL << 63, BIG_MAX = 0xffffffffffffffffULL, BIG_ONE = 1 };
enum big_signed { BIG_NEG = -1, BIG_WRAP = 0x8000000000000000ULL, BIG_MID = 0x80000000 };
enum { BIG_ANON_NEG = -1, BIG_ANON_WRAP = 1ULL << 63 };
enum big_flags { BIG_F0 = 1, BIG_F63 = 1ULL << 63 };

struct big_use {
	enum big_unsigned u;
	enum big_signed s;
	enum big_flags f;
};
