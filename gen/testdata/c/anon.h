/* Golden case: nested and anonymous members (the shape of ibv_exp_send_wr). */
#include <stdint.h>

struct peer;

struct inner {
	uint32_t a;
	uint16_t b;
};

struct anon {
	uint64_t id;
	struct peer *next;
	union {
		uint32_t imm;
		uint32_t invalidate;
	} ex;
	union {
		struct {
			uint64_t addr;
			uint32_t key;
		} rdma;
		struct inner in;
		uint8_t raw[3];
	} wr;
	union {
		uint32_t srqn;
		struct {
			uint16_t lo;
			uint16_t hi;
		};
	};
	struct {
		struct anon *self;
		union {
			struct anon *a;
			struct inner *b;
		};
	} item;
	void (*callback)(struct anon *, int);
	char name[5];
};
