/* Nesting that Go's type checker pays for exponentially (go/types
 * computes struct sizes without memoizing): a chain of nested structs,
 * each the last member of the one before, and records holding two of the
 * previous one by value. The generator cuts both into storage with
 * pointer accessors once a member would cost it 4096 steps. */

struct deep_chain {
	int head;
	struct {
		struct {
			struct {
				struct {
					struct {
						struct {
							struct {
								struct {
									struct {
										struct {
											struct {
												struct {
													struct {
														int leaf;
													} l12;
												} l11;
											} l10;
										} l9;
									} l8;
								} l7;
							} l6;
						} l5;
					} l4;
				} l3;
			} l2;
		} l1;
	} l0;
};

struct dag0 { int x; };
struct dag1 { struct dag0 a, b; };
struct dag2 { struct dag1 a, b; };
struct dag3 { struct dag2 a, b; };
struct dag4 { struct dag3 a, b; };
struct dag5 { struct dag4 a, b; };
struct dag6 { struct dag5 a, b; };
struct dag7 { struct dag6 a, b; };
struct dag8 { struct dag7 a, b; };
struct dag9 { struct dag8 a, b; };
