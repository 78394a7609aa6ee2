/* Golden case: packed records and members Go alignment cannot place. */
#include <stdint.h>

struct wire {
	uint8_t op;
	uint64_t addr;
	uint16_t len;
	struct wire *next;
} __attribute__((packed));

struct holder {
	uint8_t tag;
	struct wire w;
	uint32_t after;
};

struct aligned16 {
	uint32_t x;
} __attribute__((aligned(16)));
