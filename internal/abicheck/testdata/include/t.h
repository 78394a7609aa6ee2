/* A small header for the abicheck tests: a record with a nested member
 * and a pointer (whose size differs per target), and constants. */
#include <stdint.h>

struct t_item {
    uint32_t kind;
    void *ptr;
    struct { uint16_t lo, hi; } pair;
    uint64_t tail;
};

enum t_kind { T_KIND_A = 1, T_KIND_B = 7 };
#define T_LIMIT (1ULL << 40)
