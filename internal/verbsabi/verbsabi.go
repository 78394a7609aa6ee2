// Package verbsabi names the two libibverbs ABIs that share the soname
// libibverbs.so.1, and how to tell them apart by their exports: the
// generator writes it into the guard of every package of the legacy
// ABI (gen/internal/shim), and softdev's launcher checks with it the
// library it runs programs with (runtime/softdev/launch). One text, so
// that both say the same.
package verbsabi

const (
	// LegacySymbol is in the libibverbs.map of every legacy release,
	// MLNX_OFED 3.1 to 4.9; rdma-core exports no ibv_exp_* symbol.
	LegacySymbol = "ibv_exp_cmd_query_device"
	// LegacyABI names the legacy ABI in messages.
	LegacyABI = "the MLNX_OFED legacy verbs (infiniband/verbs_exp.h, MLNX_OFED 3.x and 4.x)"
	// LegacyFix says what to do when another library is found.
	LegacyFix = "install MLNX_OFED 4.9 or earlier (the last release with the legacy verbs), or, to use this rdma-core library, regenerate the package from its headers with -entry infiniband/verbs.h"
	// RDMACoreSymbol is exported by rdma-core v17 and later and by no
	// legacy release.
	RDMACoreSymbol = "_verbs_init_and_alloc_context"
	// RDMACore names the library usually found instead.
	RDMACore = "upstream rdma-core's libibverbs, as in MLNX_OFED 5.x and later and in Linux distributions"
)
