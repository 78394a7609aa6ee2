/* Golden case: flexible and zero-length trailing arrays. */
#include <stdint.h>

struct msg {
	uint32_t len;
	uint8_t kind;
	uint64_t data[];
};

struct legacy {
	uint16_t n;
	uint32_t items[0];
};
