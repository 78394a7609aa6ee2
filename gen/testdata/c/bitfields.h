/* Golden case: bit-fields, signed and unsigned, sharing bytes with plain members. */
#include <stdint.h>

struct flags {
	uint8_t kind;
	uint32_t valid : 1;
	uint32_t mode : 3;
	int32_t delta : 5;
	uint32_t : 0;
	uint16_t port;
	uint64_t wide : 40;
	uint64_t rest : 24;
	_Bool on : 1;
};
