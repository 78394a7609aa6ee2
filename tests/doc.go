// Package tests pins the ABI of the committed package: generated/ must be
// exactly what the generator makes of headers/, and every size, alignment,
// offset and constant in generated/abi.json must be what each target's C
// compiler says for the same headers.
//
// Two optional inputs extend the checks to the real MLNX_OFED headers,
// which are never committed:
//
//	VERBSEXP_OFED_INCLUDE=DIR     DIR/infiniband/verbs_exp.h of one release
//	VERBSEXP_OFED_RELEASES=DIR    DIR/<release>/include/infiniband/… for many
package tests
