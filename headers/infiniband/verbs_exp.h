/*
 * verbsexp: experimental verbs declarations (restated ABI subset).
 *
 * Covers the records, constants and inline verbs of the "cross-channel"
 * surface: device/CQ/QP creation and modification with the experimental
 * attributes, experimental send/poll, and task posting.  Layouts, names
 * and values follow MLNX_OFED 4.6; the text is this project's own.
 * See ../NOTICE.
 */
#ifndef INFINIBAND_VERBS_EXP_H
/*
 * This restatement stands in for MLNX_OFED's own headers only where
 * they are not installed: when the compiler finds a verbs_exp.h in a
 * directory it searches after this one (the system's /usr/include, where
 * MLNX_OFED installs it), that file is used instead, and the build guards
 * of the code including it check it; another copy of the restatement
 * found later (verbsexp_restated.h beside it) is not.
 * VERBSEXP_RESTATEMENT_ONLY turns this off (the generator reads the
 * restatement itself).
 */
#if !defined(VERBSEXP_RESTATEMENT_ONLY) && defined(__has_include_next)
#if __has_include_next(<infiniband/verbs_exp.h>) && \
    !__has_include_next(<infiniband/verbsexp_restated.h>)
#define VERBSEXP_INSTALLED_HEADERS 1
#endif
#endif

#ifdef VERBSEXP_INSTALLED_HEADERS
#undef VERBSEXP_INSTALLED_HEADERS /* not seen by the headers deferred to */
#include_next <infiniband/verbs_exp.h>
#else
#define INFINIBAND_VERBS_EXP_H
/* The restatement in use: the code including it can tell. */
#define VERBSEXP_RESTATED_HEADERS "MLNX_OFED 4.6"

#include <infiniband/verbs.h>

/*
 * Another infiniband/verbs.h found first on the include path (upstream
 * rdma-core's, in a directory named with -I before this one) would mix
 * with this restatement: say so once and declare nothing more (code that
 * includes this file skips its own checks when VERBSEXP_HEADERS_REFUSED
 * is set).
 */
#ifndef VERBSEXP_RESTATED_VERBS
#define VERBSEXP_HEADERS_REFUSED 1
#ifdef VERBS_API_H
#error "verbsexp: the infiniband/verbs.h found first is upstream rdma-core's (MLNX_OFED 5.1 and later, distributions' libibverbs-dev), in a directory named with -I that has no infiniband/verbs_exp.h. These bindings need MLNX_OFED's legacy verbs (3.1 to 4.9). Point -I (CGO_CFLAGS) at MLNX_OFED 4.9 or earlier's include directory, or drop that -I to build on the bundled restatement (softdev); for rdma-core, generate bindings of its own: go tool gen -I DIR -entry infiniband/verbs.h -o DIR."
#else
#error "verbsexp: the infiniband/verbs.h found first (in a directory named with -I) is not the one that goes with an infiniband/verbs_exp.h: point -I at a directory holding both (MLNX_OFED 3.1 to 4.9), or drop it to build on the bundled restatement."
#endif
#endif

#ifndef VERBSEXP_HEADERS_REFUSED
#include <stdio.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ */
/* Forward declarations (types only reached through function-pointer    */
/* parameters, or left opaque as in the original)                       */
/* ------------------------------------------------------------------ */

struct ibv_exp_peer_direct_attr;
struct ibv_exp_peer_commit;
struct ibv_exp_rollback_ctx;
struct ibv_exp_peer_peek;
struct ibv_exp_peer_abort_peek;
struct ibv_exp_dm;
struct ibv_exp_alloc_dm_attr;
struct ibv_exp_memcpy_dm_attr;
struct ibv_exp_ops_wr;
struct ibv_exp_create_srq_attr;
struct ibv_exp_open_device_attr;
struct ibv_exp_ah_attr;
struct ibv_exp_ec_calc;
struct ibv_exp_ec_calc_init_attr;
struct ibv_exp_ec_mem;
struct ibv_exp_ec_comp;
struct ibv_exp_ec_stripe;
struct ibv_exp_gid_attr;
struct ibv_exp_wq;
struct ibv_exp_wq_attr;
struct ibv_exp_wq_init_attr;
struct ibv_exp_rwq_ind_table_init_attr;
struct ibv_exp_dc_info_ent;
struct ibv_exp_query_intf_params;
struct ibv_exp_release_intf_params;
struct ibv_exp_res_domain_init_attr;
struct ibv_exp_destroy_res_domain_attr;
struct ibv_exp_dereg_out;
struct ibv_exp_prefetch_attr;
struct ibv_exp_mkey_list_container_attr;
struct ibv_exp_mkey_attr;
struct ibv_exp_create_mr_in;
struct ibv_exp_arm_attr;
struct ibv_exp_mw_bind;
struct ibv_exp_reg_mr_in;
struct ibv_exp_values;
struct ibv_exp_reg_shared_mr_in;
struct ibv_exp_flow;
struct ibv_exp_flow_attr;
struct ibv_exp_port_attr;
struct ibv_exp_dct_init_attr;
struct ibv_exp_dct_attr;

/* ------------------------------------------------------------------ */
/* Plain integer constants                                              */
/* ------------------------------------------------------------------ */

/* Length argument that asks for an implicit (whole address space) MR. */
#define IBV_EXP_IMPLICIT_MR_SIZE      (~(size_t)0)

/* First bit past ibv_exp_device_attr_comp_mask. */
#define IBV_EXP_DEVICE_ATTR_RESERVED  0x100000000ULL

/* Hash on inner headers (rx_hash_fields_mask). */
#define IBV_EXP_RX_HASH_INNER         0x80000000ULL

#define ETHERNET_LL_SIZE              6
#define VERBS_MAX_ENV_VAL             4096

/* ------------------------------------------------------------------ */
/* Enumerations                                                         */
/* ------------------------------------------------------------------ */

/* Experimental enumerators start at 0x40, experimental flag bits at
 * bit 32. */
enum ibv_exp_start_values {
    IBV_EXP_START_ENUM     = 0x40,
    IBV_EXP_START_FLAG_LOC = 0x20,
    IBV_EXP_START_FLAG     = 0x100000000
};

enum ibv_exp_atomic_cap {
    IBV_EXP_ATOMIC_NONE         = 0,
    IBV_EXP_ATOMIC_HCA          = 1,
    IBV_EXP_ATOMIC_GLOB         = 2,
    IBV_EXP_ATOMIC_HCA_REPLY_BE = 0x40
};

/* Bits of ibv_exp_device_attr.exp_device_cap_flags. */
enum ibv_exp_device_cap_flags {
    IBV_EXP_DEVICE_RESIZE_MAX_WR            = 0x0000000000000001,
    IBV_EXP_DEVICE_BAD_PKEY_CNTR            = 0x0000000000000002,
    IBV_EXP_DEVICE_BAD_QKEY_CNTR            = 0x0000000000000004,
    IBV_EXP_DEVICE_RAW_MULTI                = 0x0000000000000008,
    IBV_EXP_DEVICE_AUTO_PATH_MIG            = 0x0000000000000010,
    IBV_EXP_DEVICE_CHANGE_PHY_PORT          = 0x0000000000000020,
    IBV_EXP_DEVICE_UD_AV_PORT_ENFORCE       = 0x0000000000000040,
    IBV_EXP_DEVICE_CURR_QP_STATE_MOD        = 0x0000000000000080,
    IBV_EXP_DEVICE_SHUTDOWN_PORT            = 0x0000000000000100,
    IBV_EXP_DEVICE_INIT_TYPE                = 0x0000000000000200,
    IBV_EXP_DEVICE_PORT_ACTIVE_EVENT        = 0x0000000000000400,
    IBV_EXP_DEVICE_SYS_IMAGE_GUID           = 0x0000000000000800,
    IBV_EXP_DEVICE_RC_RNR_NAK_GEN           = 0x0000000000001000,
    IBV_EXP_DEVICE_SRQ_RESIZE               = 0x0000000000002000,
    IBV_EXP_DEVICE_N_NOTIFY_CQ              = 0x0000000000004000,
    IBV_EXP_DEVICE_XRC                      = 0x0000000000100000,
    IBV_EXP_DEVICE_DC_TRANSPORT             = 0x0000000100000000,
    IBV_EXP_DEVICE_QPG                      = 0x0000000200000000,
    IBV_EXP_DEVICE_UD_RSS                   = 0x0000000400000000,
    IBV_EXP_DEVICE_UD_TSS                   = 0x0000000800000000,
    IBV_EXP_DEVICE_EXT_ATOMICS              = 0x0000001000000000,
    IBV_EXP_DEVICE_NOP                      = 0x0000002000000000,
    IBV_EXP_DEVICE_UMR                      = 0x0000004000000000,
    IBV_EXP_DEVICE_ODP                      = 0x0000008000000000,
    IBV_EXP_DEVICE_VXLAN_SUPPORT            = 0x0000040000000000,
    IBV_EXP_DEVICE_RX_CSUM_TCP_UDP_PKT      = 0x0000080000000000,
    IBV_EXP_DEVICE_RX_CSUM_IP_PKT           = 0x0000100000000000,
    IBV_EXP_DEVICE_EC_OFFLOAD               = 0x0000200000000000,
    IBV_EXP_DEVICE_EXT_MASKED_ATOMICS       = 0x0000400000000000,
    IBV_EXP_DEVICE_RX_TCP_UDP_PKT_TYPE      = 0x0000800000000000,
    IBV_EXP_DEVICE_SCATTER_FCS              = 0x0001000000000000,
    IBV_EXP_DEVICE_MEM_WINDOW               = 0x0002000000000000,
    IBV_EXP_DEVICE_WQ_DELAY_DROP            = 0x0004000000000000,
    IBV_EXP_DEVICE_PHYSICAL_RANGE_MR        = 0x0008000000000000,
    IBV_EXP_DEVICE_CAPI                     = 0x0010000000000000,
    IBV_EXP_DEVICE_MEM_MGT_EXTENSIONS       = 0x0020000000000000,
    IBV_EXP_DEVICE_DC_INFO                  = 0x0040000000000000,
    IBV_EXP_DEVICE_MW_TYPE_2A               = 0x0080000000000000,
    IBV_EXP_DEVICE_MW_TYPE_2B               = 0x0100000000000000,
    IBV_EXP_DEVICE_UMR_FIXED_SIZE           = 0x0200000000000000,
    IBV_EXP_DEVICE_PACKET_BASED_CREDIT_MODE = 0x0400000000000000,
    IBV_EXP_DEVICE_CROSS_CHANNEL            = 0x1000000000000000,
    IBV_EXP_DEVICE_MANAGED_FLOW_STEERING    = 0x2000000000000000,
    IBV_EXP_DEVICE_MR_ALLOCATE              = 0x4000000000000000,
    IBV_EXP_DEVICE_SHARED_MR                = 0x8000000000000000
};

/* Bits of ibv_exp_device_attr.comp_mask.  The top bit (which makes this
 * enum signed, value INT_MIN) says comp_mask_2 is valid. */
enum ibv_exp_device_attr_comp_mask {
    IBV_EXP_DEVICE_ATTR_CALC_CAP             = 0x00000001,
    IBV_EXP_DEVICE_ATTR_WITH_TIMESTAMP_MASK  = 0x00000002,
    IBV_EXP_DEVICE_ATTR_WITH_HCA_CORE_CLOCK  = 0x00000004,
    IBV_EXP_DEVICE_ATTR_EXP_CAP_FLAGS        = 0x00000008,
    IBV_EXP_DEVICE_DC_RD_REQ                 = 0x00000010,
    IBV_EXP_DEVICE_DC_RD_RES                 = 0x00000020,
    IBV_EXP_DEVICE_ATTR_INLINE_RECV_SZ       = 0x00000040,
    IBV_EXP_DEVICE_ATTR_RSS_TBL_SZ           = 0x00000080,
    IBV_EXP_DEVICE_ATTR_EXT_ATOMIC_ARGS      = 0x00000100,
    IBV_EXP_DEVICE_ATTR_UMR                  = 0x00000200,
    IBV_EXP_DEVICE_ATTR_ODP                  = 0x00000400,
    IBV_EXP_DEVICE_ATTR_MAX_DCT              = 0x00000800,
    IBV_EXP_DEVICE_ATTR_MAX_CTX_RES_DOMAIN   = 0x00001000,
    IBV_EXP_DEVICE_ATTR_RX_HASH              = 0x00002000,
    IBV_EXP_DEVICE_ATTR_MAX_WQ_TYPE_RQ       = 0x00004000,
    IBV_EXP_DEVICE_ATTR_MAX_DEVICE_CTX       = 0x00008000,
    IBV_EXP_DEVICE_ATTR_MP_RQ                = 0x00010000,
    IBV_EXP_DEVICE_ATTR_VLAN_OFFLOADS        = 0x00020000,
    IBV_EXP_DEVICE_ATTR_EC_CAPS              = 0x00040000,
    IBV_EXP_DEVICE_ATTR_MASKED_ATOMICS       = 0x00080000,
    IBV_EXP_DEVICE_ATTR_RX_PAD_END_ALIGN     = 0x00100000,
    IBV_EXP_DEVICE_ATTR_TSO_CAPS             = 0x00200000,
    IBV_EXP_DEVICE_ATTR_PACKET_PACING_CAPS   = 0x00400000,
    IBV_EXP_DEVICE_ATTR_EC_GF_BASE           = 0x00800000,
    IBV_EXP_DEVICE_ATTR_OOO_CAPS             = 0x01000000,
    IBV_EXP_DEVICE_ATTR_SW_PARSING_CAPS      = 0x02000000,
    IBV_EXP_DEVICE_ATTR_ODP_MAX_SIZE         = 0x04000000,
    IBV_EXP_DEVICE_ATTR_TM_CAPS              = 0x08000000,
    IBV_EXP_DEVICE_ATTR_TUNNEL_OFFLOADS_CAPS = 0x10000000,
    IBV_EXP_DEVICE_ATTR_MAX_DM_SIZE          = 0x20000000,
    IBV_EXP_DEVICE_ATTR_TUNNELED_ATOMIC      = 0x40000000,
    IBV_EXP_DEVICE_ATTR_COMP_MASK_2          = -0x7fffffff - 1
};

/* Bits of ibv_exp_device_attr.comp_mask_2. */
enum ibv_exp_device_attr_comp_mask_2 {
    IBV_EXP_DEVICE_ATTR_UMR_FIXED_SIZE_CAPS = 0x1,
    IBV_EXP_DEVICE_ATTR_PCI_ATOMIC_CAPS     = 0x2,
    IBV_EXP_DEVICE_ATTR_RESERVED_2          = 0x4
};

enum ibv_exp_tunnel_offloads_caps {
    IBV_EXP_RAW_PACKET_CAP_TUNNELED_OFFLOAD_VXLAN  = 0x1,
    IBV_EXP_RAW_PACKET_CAP_TUNNELED_OFFLOAD_GRE    = 0x2,
    IBV_EXP_RAW_PACKET_CAP_TUNNELED_OFFLOAD_GENEVE = 0x4
};

enum ibv_exp_tunneled_atomic_caps {
    IBV_EXP_TUNNELED_ATOMIC_SUPPORTED = 0x1
};

enum ibv_odp_general_cap_bits {
    IBV_EXP_ODP_SUPPORT          = 0x1,
    IBV_EXP_ODP_SUPPORT_IMPLICIT = 0x2
};

enum ibv_exp_odp_transport_cap_bits {
    IBV_EXP_ODP_SUPPORT_SEND     = 0x01,
    IBV_EXP_ODP_SUPPORT_RECV     = 0x02,
    IBV_EXP_ODP_SUPPORT_WRITE    = 0x04,
    IBV_EXP_ODP_SUPPORT_READ     = 0x08,
    IBV_EXP_ODP_SUPPORT_ATOMIC   = 0x10,
    IBV_EXP_ODP_SUPPORT_SRQ_RECV = 0x20
};

enum ibv_exp_supported_qp_types {
    IBV_EXP_QPT_RC         = 0x01,
    IBV_EXP_QPT_UC         = 0x02,
    IBV_EXP_QPT_UD         = 0x04,
    IBV_EXP_QPT_XRC_INIT   = 0x08,
    IBV_EXP_QPT_XRC_TGT    = 0x10,
    IBV_EXP_QPT_RAW_PACKET = 0x20,
    IBV_EXP_QPT_RESERVED   = 0x40
};

enum ibv_exp_mp_rq_shifts {
    IBV_EXP_MP_RQ_NO_SHIFT     = 0,
    IBV_EXP_MP_RQ_2BYTES_SHIFT = 1
};

enum ibv_exp_mp_rq_sup_types {
    IBV_EXP_MP_RQ_SUP_TYPE_SRQ_TM = 0x01,
    IBV_EXP_MP_RQ_SUP_TYPE_WQ_RQ  = 0x20
};

enum ibv_exp_packet_pacing_cap_flags {
    IBV_EXP_QP_SUPPORT_BURST = 0x1
};

enum ibv_exp_ooo_transport_cap_bits {
    IBV_EXP_OOO_SUPPORT_RW_DATA_PLACEMENT = 0x1
};

enum ibv_exp_sw_parsing_offloads {
    IBV_EXP_SW_PARSING      = 0x1,
    IBV_EXP_SW_PARSING_CSUM = 0x2,
    IBV_EXP_SW_PARSING_LSO  = 0x4
};

enum ibv_exp_tm_cap_flags {
    IBV_EXP_TM_CAP_RC = 0x1,
    IBV_EXP_TM_CAP_DC = 0x2
};

enum ibv_exp_pci_atomic_cap_ops_supported_sizes {
    IBV_EXP_PCI_ATOMIC_OP_SIZE_SUP_4_BYTES  = 0x1,
    IBV_EXP_PCI_ATOMIC_OP_SIZE_SUP_8_BYTES  = 0x2,
    IBV_EXP_PCI_ATOMIC_OP_SIZE_SUP_16_BYTES = 0x4
};

/* Bits of ibv_exp_device_attr.wq_vlan_offloads_cap. */
enum ibv_exp_vlan_offloads {
    IBV_EXP_RECEIVE_WQ_CVLAN_STRIP            = 0x1,
    IBV_EXP_RECEIVE_WQ_CVLAN_INSERTION        = 0x2,
    IBV_EXP_RECEIVE_WQ_VLAN_OFFLOADS_RESERVED = 0x4
};

enum ibv_exp_rx_hash_function_flags {
    IBV_EXP_RX_HASH_FUNC_TOEPLITZ = 0x1,
    IBV_EXP_RX_HASH_FUNC_XOR      = 0x2
};

enum ibv_exp_rx_hash_fields {
    IBV_EXP_RX_HASH_SRC_IPV4     = 0x01,
    IBV_EXP_RX_HASH_DST_IPV4     = 0x02,
    IBV_EXP_RX_HASH_SRC_IPV6     = 0x04,
    IBV_EXP_RX_HASH_DST_IPV6     = 0x08,
    IBV_EXP_RX_HASH_SRC_PORT_TCP = 0x10,
    IBV_EXP_RX_HASH_DST_PORT_TCP = 0x20,
    IBV_EXP_RX_HASH_SRC_PORT_UDP = 0x40,
    IBV_EXP_RX_HASH_DST_PORT_UDP = 0x80
};

enum {
    IBV_EXP_ACCESS_FLAGS_SHIFT = 15
};

/* Standard access bits keep their values; the rest start at bit 37. */
enum ibv_exp_access_flags {
    IBV_EXP_ACCESS_LOCAL_WRITE           = 0x0000000000000001,
    IBV_EXP_ACCESS_REMOTE_WRITE          = 0x0000000000000002,
    IBV_EXP_ACCESS_REMOTE_READ           = 0x0000000000000004,
    IBV_EXP_ACCESS_REMOTE_ATOMIC         = 0x0000000000000008,
    IBV_EXP_ACCESS_MW_BIND               = 0x0000000000000010,
    IBV_EXP_ACCESS_ALLOCATE_MR           = 0x0000002000000000,
    IBV_EXP_ACCESS_SHARED_MR_USER_READ   = 0x0000004000000000,
    IBV_EXP_ACCESS_SHARED_MR_USER_WRITE  = 0x0000008000000000,
    IBV_EXP_ACCESS_SHARED_MR_GROUP_READ  = 0x0000010000000000,
    IBV_EXP_ACCESS_SHARED_MR_GROUP_WRITE = 0x0000020000000000,
    IBV_EXP_ACCESS_SHARED_MR_OTHER_READ  = 0x0000040000000000,
    IBV_EXP_ACCESS_SHARED_MR_OTHER_WRITE = 0x0000080000000000,
    IBV_EXP_ACCESS_NO_RDMA               = 0x0000100000000000,
    IBV_EXP_ACCESS_MW_ZERO_BASED         = 0x0000200000000000,
    IBV_EXP_ACCESS_ON_DEMAND             = 0x0000400000000000,
    IBV_EXP_ACCESS_RELAXED               = 0x0000800000000000,
    IBV_EXP_ACCESS_PHYSICAL_ADDR         = 0x0001000000000000,
    IBV_EXP_ACCESS_TUNNELED_ATOMIC       = 0x0002000000000000,
    IBV_EXP_ACCESS_RESERVED              = 0x0004000000000000
};

/* Reduction performed by a calc send. */
enum ibv_exp_calc_op {
    IBV_EXP_CALC_OP_ADD    = 0,
    IBV_EXP_CALC_OP_MAXLOC = 1,
    IBV_EXP_CALC_OP_BAND   = 2,
    IBV_EXP_CALC_OP_BXOR   = 3,
    IBV_EXP_CALC_OP_BOR    = 4,
    IBV_EXP_CALC_OP_NUMBER = 5
};

enum ibv_exp_calc_data_type {
    IBV_EXP_CALC_DATA_TYPE_INT    = 0,
    IBV_EXP_CALC_DATA_TYPE_UINT   = 1,
    IBV_EXP_CALC_DATA_TYPE_FLOAT  = 2,
    IBV_EXP_CALC_DATA_TYPE_NUMBER = 3
};

enum ibv_exp_calc_data_size {
    IBV_EXP_CALC_DATA_SIZE_64_BIT = 0,
    IBV_EXP_CALC_DATA_SIZE_NUMBER = 1
};

/* Standard opcodes keep their values; the experimental ones are offset
 * by IBV_EXP_START_ENUM (0x40). */
enum ibv_exp_wr_opcode {
    IBV_EXP_WR_RDMA_WRITE                      = 0,
    IBV_EXP_WR_RDMA_WRITE_WITH_IMM             = 1,
    IBV_EXP_WR_SEND                            = 2,
    IBV_EXP_WR_SEND_WITH_IMM                   = 3,
    IBV_EXP_WR_RDMA_READ                       = 4,
    IBV_EXP_WR_ATOMIC_CMP_AND_SWP              = 5,
    IBV_EXP_WR_ATOMIC_FETCH_AND_ADD            = 6,
    IBV_EXP_WR_LOCAL_INV                       = 7,
    IBV_EXP_WR_BIND_MW                         = 8,
    IBV_EXP_WR_SEND_WITH_INV                   = 9,
    IBV_EXP_WR_TSO                             = 0x4f,
    IBV_EXP_WR_SEND_ENABLE                     = 0x60,
    IBV_EXP_WR_RECV_ENABLE                     = 0x61,
    IBV_EXP_WR_CQE_WAIT                        = 0x62,
    IBV_EXP_WR_EXT_MASKED_ATOMIC_CMP_AND_SWP   = 0x63,
    IBV_EXP_WR_EXT_MASKED_ATOMIC_FETCH_AND_ADD = 0x64,
    IBV_EXP_WR_NOP                             = 0x65,
    IBV_EXP_WR_UMR_FILL                        = 0x66,
    IBV_EXP_WR_UMR_INVALIDATE                  = 0x67
};

/* Bits of ibv_exp_send_wr.exp_send_flags. */
enum ibv_exp_send_flags {
    IBV_EXP_SEND_FENCE             = 0x1,
    IBV_EXP_SEND_SIGNALED          = 0x2,
    IBV_EXP_SEND_SOLICITED         = 0x4,
    IBV_EXP_SEND_INLINE            = 0x8,
    IBV_EXP_SEND_IP_CSUM           = 0x100000000,
    IBV_EXP_SEND_WITH_CALC         = 0x200000000,
    IBV_EXP_SEND_WAIT_EN_LAST      = 0x400000000,
    IBV_EXP_SEND_EXT_ATOMIC_INLINE = 0x800000000
};

enum ibv_exp_send_wr_comp_mask {
    IBV_EXP_SEND_WR_ATTR_RESERVED = 0x1
};

enum ibv_exp_umr_wr_type {
    IBV_EXP_UMR_MR_LIST            = 0,
    IBV_EXP_UMR_REPEAT             = 1,
    IBV_EXP_UMR_MR_LIST_FIXED_SIZE = 2
};

/* Values for ibv_exp_cq_init_attr.flags. */
enum ibv_exp_cq_create_flags {
    IBV_EXP_CQ_CREATE_CROSS_CHANNEL  = 0x01,
    IBV_EXP_CQ_TIMESTAMP             = 0x02,
    IBV_EXP_CQ_TIMESTAMP_TO_SYS_TIME = 0x04,
    IBV_EXP_CQ_COMPRESSED_CQE        = 0x08,
    IBV_EXP_CQ_AS_NOTIFY             = 0x10
};

enum {
    IBV_EXP_CQ_CREATE_FLAGS_MASK = 0x1f   /* all of the above */
};

/* Bits of ibv_exp_cq_init_attr.comp_mask (RESERVED and RES_DOMAIN
 * deliberately share a value). */
enum ibv_exp_cq_init_attr_mask {
    IBV_EXP_CQ_INIT_ATTR_FLAGS       = 0x1,
    IBV_EXP_CQ_INIT_ATTR_RESERVED    = 0x2,
    IBV_EXP_CQ_INIT_ATTR_RES_DOMAIN  = 0x2,
    IBV_EXP_CQ_INIT_ATTR_PEER_DIRECT = 0x4,
    IBV_EXP_CQ_INIT_ATTR_RESERVED1   = 0x8
};

/* Bits selecting which attributes ibv_exp_modify_qp() applies. */
enum ibv_exp_qp_attr_mask {
    IBV_EXP_QP_STATE                 = 0x0000000000000001,
    IBV_EXP_QP_CUR_STATE             = 0x0000000000000002,
    IBV_EXP_QP_EN_SQD_ASYNC_NOTIFY   = 0x0000000000000004,
    IBV_EXP_QP_ACCESS_FLAGS          = 0x0000000000000008,
    IBV_EXP_QP_PKEY_INDEX            = 0x0000000000000010,
    IBV_EXP_QP_PORT                  = 0x0000000000000020,
    IBV_EXP_QP_QKEY                  = 0x0000000000000040,
    IBV_EXP_QP_AV                    = 0x0000000000000080,
    IBV_EXP_QP_PATH_MTU              = 0x0000000000000100,
    IBV_EXP_QP_TIMEOUT               = 0x0000000000000200,
    IBV_EXP_QP_RETRY_CNT             = 0x0000000000000400,
    IBV_EXP_QP_RNR_RETRY             = 0x0000000000000800,
    IBV_EXP_QP_RQ_PSN                = 0x0000000000001000,
    IBV_EXP_QP_MAX_QP_RD_ATOMIC      = 0x0000000000002000,
    IBV_EXP_QP_ALT_PATH              = 0x0000000000004000,
    IBV_EXP_QP_MIN_RNR_TIMER         = 0x0000000000008000,
    IBV_EXP_QP_SQ_PSN                = 0x0000000000010000,
    IBV_EXP_QP_MAX_DEST_RD_ATOMIC    = 0x0000000000020000,
    IBV_EXP_QP_PATH_MIG_STATE        = 0x0000000000040000,
    IBV_EXP_QP_CAP                   = 0x0000000000080000,
    IBV_EXP_QP_DEST_QPN              = 0x0000000000100000,
    IBV_EXP_QP_GROUP_RSS             = 0x0020000000000000,
    IBV_EXP_QP_DC_KEY                = 0x0040000000000000,
    IBV_EXP_QP_FLOW_ENTROPY          = 0x0080000000000000,
    IBV_EXP_QP_OOO_RW_DATA_PLACEMENT = 0x0100000000000000,
    IBV_EXP_QP_RATE_LIMIT            = 0x0200000000000000
};

/* Bits of ibv_exp_qp_attr.comp_mask. */
enum ibv_exp_qp_attr_comp_mask {
    IBV_EXP_QP_ATTR_FLOW_ENTROPY = 0x1,
    IBV_EXP_QP_ATTR_BURST_INFO   = 0x2,
    IBV_EXP_QP_ATTR_RESERVED     = 0x4
};

/* Bits of ibv_exp_qp_init_attr.comp_mask (RESERVED and RES_DOMAIN
 * deliberately share a value). */
enum ibv_exp_qp_init_attr_comp_mask {
    IBV_EXP_QP_INIT_ATTR_PD             = 0x0001,
    IBV_EXP_QP_INIT_ATTR_XRCD           = 0x0002,
    IBV_EXP_QP_INIT_ATTR_CREATE_FLAGS   = 0x0004,
    IBV_EXP_QP_INIT_ATTR_INL_RECV       = 0x0008,
    IBV_EXP_QP_INIT_ATTR_QPG            = 0x0010,
    IBV_EXP_QP_INIT_ATTR_ATOMICS_ARG    = 0x0020,
    IBV_EXP_QP_INIT_ATTR_MAX_INL_KLMS   = 0x0040,
    IBV_EXP_QP_INIT_ATTR_RESERVED       = 0x0080,
    IBV_EXP_QP_INIT_ATTR_RES_DOMAIN     = 0x0080,
    IBV_EXP_QP_INIT_ATTR_RX_HASH        = 0x0100,
    IBV_EXP_QP_INIT_ATTR_PORT           = 0x0200,
    IBV_EXP_QP_INIT_ATTR_PEER_DIRECT    = 0x0400,
    IBV_EXP_QP_INIT_ATTR_MAX_TSO_HEADER = 0x0800,
    IBV_EXP_QP_INIT_ATTR_ASSOCIATED_QPN = 0x1000,
    IBV_EXP_QP_INIT_ATTR_RESERVED1      = 0x2000
};

enum ibv_exp_qpg_type {
    IBV_EXP_QPG_NONE     = 0,
    IBV_EXP_QPG_PARENT   = 1,
    IBV_EXP_QPG_CHILD_RX = 2,
    IBV_EXP_QPG_CHILD_TX = 4
};

/* Values for ibv_exp_qp_init_attr.exp_create_flags. */
enum ibv_exp_qp_create_flags {
    IBV_EXP_QP_CREATE_CROSS_CHANNEL            = 0x00004,
    IBV_EXP_QP_CREATE_MANAGED_SEND             = 0x00008,
    IBV_EXP_QP_CREATE_MANAGED_RECV             = 0x00010,
    IBV_EXP_QP_CREATE_IGNORE_SQ_OVERFLOW       = 0x00040,
    IBV_EXP_QP_CREATE_IGNORE_RQ_OVERFLOW       = 0x00080,
    IBV_EXP_QP_CREATE_ATOMIC_BE_REPLY          = 0x00100,
    IBV_EXP_QP_CREATE_UMR                      = 0x00200,
    IBV_EXP_QP_CREATE_EC_PARITY_EN             = 0x00400,
    IBV_EXP_QP_CREATE_RX_END_PADDING           = 0x00800,
    IBV_EXP_QP_CREATE_SCATTER_FCS              = 0x01000,
    IBV_EXP_QP_CREATE_TUNNEL_OFFLOADS          = 0x02000,
    IBV_EXP_QP_CREATE_INTERNAL_USE             = 0x08000,
    IBV_EXP_QP_CREATE_PACKET_BASED_CREDIT_MODE = 0x10000,
    IBV_EXP_QP_CREATE_MASK                     = 0x13fdc
};

/* cq_attr_mask argument of ibv_exp_modify_cq(). */
enum ibv_exp_cq_attr_mask {
    IBV_EXP_CQ_MODERATION = 0x1,
    IBV_EXP_CQ_CAP_FLAGS  = 0x2
};

enum ibv_exp_cq_cap_flags {
    IBV_EXP_CQ_IGNORE_OVERRUN = 0x1,
    IBV_EXP_CQ_CAP_MASK       = 0x1
};

/* Bits of ibv_exp_cq_attr.comp_mask. */
enum ibv_exp_cq_attr_comp_mask {
    IBV_EXP_CQ_ATTR_MODERATION   = 0x1,
    IBV_EXP_CQ_ATTR_CQ_CAP_FLAGS = 0x2,
    IBV_EXP_CQ_ATTR_RESERVED     = 0x4
};

/* Receive completions have bit 7 set, as in enum ibv_wc_opcode. */
enum ibv_exp_wc_opcode {
    IBV_EXP_WC_SEND               = 0,
    IBV_EXP_WC_RDMA_WRITE         = 1,
    IBV_EXP_WC_RDMA_READ          = 2,
    IBV_EXP_WC_COMP_SWAP          = 3,
    IBV_EXP_WC_FETCH_ADD          = 4,
    IBV_EXP_WC_BIND_MW            = 5,
    IBV_EXP_WC_LOCAL_INV          = 6,
    IBV_EXP_WC_MASKED_COMP_SWAP   = 9,
    IBV_EXP_WC_MASKED_FETCH_ADD   = 10,
    IBV_EXP_WC_TSO                = 11,
    IBV_EXP_WC_UMR                = 0x100,
    IBV_EXP_WC_RECV               = 0x80,
    IBV_EXP_WC_RECV_RDMA_WITH_IMM = 0x81,
    IBV_EXP_WC_TM_ADD             = 0xc0,
    IBV_EXP_WC_TM_DEL             = 0xc1,
    IBV_EXP_WC_TM_SYNC            = 0xc2,
    IBV_EXP_WC_TM_RECV            = 0xc3,
    IBV_EXP_WC_TM_NO_TAG          = 0xc4,
    IBV_EXP_WC_RECV_NOP           = 0xc5
};

/* Bits of ibv_exp_wc.exp_wc_flags. */
enum ibv_exp_wc_flags {
    IBV_EXP_WC_GRH                      = 0x0000000000000001,
    IBV_EXP_WC_WITH_IMM                 = 0x0000000000000002,
    IBV_EXP_WC_WITH_INV                 = 0x0000000000000008,
    IBV_EXP_WC_WITH_SL                  = 0x0000001000000000,
    IBV_EXP_WC_WITH_SLID                = 0x0000002000000000,
    IBV_EXP_WC_WITH_TIMESTAMP           = 0x0000004000000000,
    IBV_EXP_WC_QP                       = 0x0000008000000000,
    IBV_EXP_WC_SRQ                      = 0x0000010000000000,
    IBV_EXP_WC_DCT                      = 0x0000020000000000,
    IBV_EXP_WC_RX_IP_CSUM_OK            = 0x0000040000000000,
    IBV_EXP_WC_RX_TCP_UDP_CSUM_OK       = 0x0000080000000000,
    IBV_EXP_WC_RX_IPV4_PACKET           = 0x0000100000000000,
    IBV_EXP_WC_RX_IPV6_PACKET           = 0x0000200000000000,
    IBV_EXP_WC_RX_TUNNEL_PACKET         = 0x0000400000000000,
    IBV_EXP_WC_RX_OUTER_IP_CSUM_OK      = 0x0000800000000000,
    IBV_EXP_WC_RX_OUTER_TCP_UDP_CSUM_OK = 0x0001000000000000,
    IBV_EXP_WC_RX_OUTER_IPV4_PACKET     = 0x0002000000000000,
    IBV_EXP_WC_RX_OUTER_IPV6_PACKET     = 0x0004000000000000,
    IBV_EXP_WC_TM_SYNC_REQ              = 0x0008000000000000,
    IBV_EXP_WC_TM_DEL_FAILED            = 0x0010000000000000,
    IBV_EXP_WC_TM_MATCH                 = 0x0020000000000000,
    IBV_EXP_WC_TM_DATA_VALID            = 0x0040000000000000,
    IBV_EXP_WC_TM_RNDV_INCOMPLETE       = 0x0080000000000000,
    IBV_EXP_WC_MP_WR_MORE_IN_MSG        = 0x0100000000000000,
    IBV_EXP_WC_MP_WR_CONSUMED           = 0x0200000000000000
};

/* Which queue of item.qp an ibv_exp_task feeds. */
enum ibv_exp_task_type {
    IBV_EXP_TASK_SEND = 0,
    IBV_EXP_TASK_RECV = 1
};

enum ibv_exp_task_comp_mask {
    IBV_EXP_TASK_RESERVED = 0x1
};

/* Result codes of the interface query entry point. */
enum ibv_exp_query_intf_status {
    IBV_EXP_INTF_STAT_OK                         = 0,
    IBV_EXP_INTF_STAT_VENDOR_NOT_SUPPORTED       = 1,
    IBV_EXP_INTF_STAT_INTF_NOT_SUPPORTED         = 2,
    IBV_EXP_INTF_STAT_VERSION_NOT_SUPPORTED      = 3,
    IBV_EXP_INTF_STAT_INVAL_PARARM               = 4,
    IBV_EXP_INTF_STAT_INVAL_OBJ_STATE            = 5,
    IBV_EXP_INTF_STAT_INVAL_OBJ                  = 6,
    IBV_EXP_INTF_STAT_FLAGS_NOT_SUPPORTED        = 7,
    IBV_EXP_INTF_STAT_FAMILY_FLAGS_NOT_SUPPORTED = 8
};

/* ------------------------------------------------------------------ */
/* Device attributes                                                    */
/* ------------------------------------------------------------------ */

struct ibv_exp_device_calc_cap {
    uint64_t data_types;
    uint64_t data_sizes;
    uint64_t int_ops;
    uint64_t uint_ops;
    uint64_t fp_ops;
};

struct ibv_exp_ext_atomics_params {
    uint64_t log_atomic_arg_sizes;        /* bit n: 2^n bytes supported */
    uint32_t max_fa_bit_boundary;
    uint32_t log_max_atomic_inline;
};

struct ibv_exp_masked_atomic_params {
    uint32_t max_fa_bit_boundary;
    uint32_t log_max_atomic_inline;
    uint64_t masked_log_atomic_arg_sizes;
    uint64_t masked_log_atomic_arg_sizes_network_endianness;
};

struct ibv_exp_umr_caps {
    uint32_t max_klm_list_size;
    uint32_t max_send_wqe_inline_klms;
    uint32_t max_umr_recursion_depth;
    uint32_t max_umr_stride_dimension;
};

struct ibv_exp_odp_caps {
    uint64_t general_odp_caps;
    struct {
        uint32_t rc_odp_caps;
        uint32_t uc_odp_caps;
        uint32_t ud_odp_caps;
        uint32_t dc_odp_caps;
        uint32_t xrc_odp_caps;
        uint32_t raw_eth_odp_caps;
    } per_transport_caps;
};

struct ibv_exp_rx_hash_caps {
    uint32_t max_rwq_indirection_tables;
    uint32_t max_rwq_indirection_table_size;
    uint8_t  supported_hash_functions;    /* ibv_exp_rx_hash_function_flags */
    uint64_t supported_packet_fields;     /* ibv_exp_rx_hash_fields */
    uint32_t supported_qps;               /* ibv_exp_supported_qp_types */
};

struct ibv_exp_mp_rq_caps {
    uint32_t supported_qps;               /* ibv_exp_mp_rq_sup_types */
    uint32_t allowed_shifts;              /* ibv_exp_mp_rq_shifts */
    uint8_t  min_single_wqe_log_num_of_strides;
    uint8_t  max_single_wqe_log_num_of_strides;
    uint8_t  min_single_stride_log_num_of_bytes;
    uint8_t  max_single_stride_log_num_of_bytes;
};

struct ibv_exp_ec_caps {
    uint32_t max_ec_data_vector_count;
    uint32_t max_ec_calc_inflight_calcs;
};

struct ibv_exp_tso_caps {
    uint32_t max_tso;
    uint32_t supported_qpts;
};

struct ibv_exp_packet_pacing_caps {
    uint32_t qp_rate_limit_min;
    uint32_t qp_rate_limit_max;           /* kbit/s */
    uint32_t supported_qpts;
    uint8_t  cap_flags;                   /* ibv_exp_packet_pacing_cap_flags */
    uint8_t  reserved[3];
};

struct ibv_exp_ooo_caps {
    uint32_t rc_caps;
    uint32_t xrc_caps;
    uint32_t dc_caps;
    uint32_t ud_caps;
};

struct ibv_exp_sw_parsing_caps {
    uint32_t sw_parsing_offloads;         /* ibv_exp_sw_parsing_offloads */
    uint32_t supported_qpts;
};

struct ibv_exp_tm_caps {
    uint32_t max_rndv_hdr_size;
    uint32_t max_num_tags;
    uint32_t capability_flags;            /* ibv_exp_tm_cap_flags */
    uint32_t max_ops;
    uint32_t max_sge;
};

struct ibv_exp_umr_fixed_size_caps {
    uint64_t max_entity_size;
};

struct ibv_exp_pci_atomic_caps {
    uint16_t fetch_add;
    uint16_t swap;
    uint16_t compare_swap;
};

/* The leading part lines up with struct ibv_device_attr. */
struct ibv_exp_device_attr {
    char                                fw_ver[64];
    uint64_t                            node_guid;
    uint64_t                            sys_image_guid;
    uint64_t                            max_mr_size;
    uint64_t                            page_size_cap;
    uint32_t                            vendor_id;
    uint32_t                            vendor_part_id;
    uint32_t                            hw_ver;
    int                                 max_qp;
    int                                 max_qp_wr;
    int                                 reserved;
    int                                 max_sge;
    int                                 max_sge_rd;
    int                                 max_cq;
    int                                 max_cqe;
    int                                 max_mr;
    int                                 max_pd;
    int                                 max_qp_rd_atom;
    int                                 max_ee_rd_atom;
    int                                 max_res_rd_atom;
    int                                 max_qp_init_rd_atom;
    int                                 max_ee_init_rd_atom;
    enum ibv_exp_atomic_cap             exp_atomic_cap;
    int                                 max_ee;
    int                                 max_rdd;
    int                                 max_mw;
    int                                 max_raw_ipv6_qp;
    int                                 max_raw_ethy_qp;
    int                                 max_mcast_grp;
    int                                 max_mcast_qp_attach;
    int                                 max_total_mcast_qp_attach;
    int                                 max_ah;
    int                                 max_fmr;
    int                                 max_map_per_fmr;
    int                                 max_srq;
    int                                 max_srq_wr;
    int                                 max_srq_sge;
    uint16_t                            max_pkeys;
    uint8_t                             local_ca_ack_delay;
    uint8_t                             phys_port_cnt;
    uint32_t                            comp_mask;
    struct ibv_exp_device_calc_cap      calc_cap;
    uint64_t                            timestamp_mask;
    uint64_t                            hca_core_clock;
    uint64_t                            exp_device_cap_flags;
    int                                 max_dc_req_rd_atom;
    int                                 max_dc_res_rd_atom;
    int                                 inline_recv_sz;
    uint32_t                            max_rss_tbl_sz;
    struct ibv_exp_ext_atomics_params   ext_atom;
    struct ibv_exp_umr_caps             umr_caps;
    struct ibv_exp_odp_caps             odp_caps;
    int                                 max_dct;
    int                                 max_ctx_res_domain;
    struct ibv_exp_rx_hash_caps         rx_hash_caps;
    uint32_t                            max_wq_type_rq;
    int                                 max_device_ctx;
    struct ibv_exp_mp_rq_caps           mp_rq_caps;
    uint16_t                            wq_vlan_offloads_cap;
    struct ibv_exp_ec_caps              ec_caps;
    struct ibv_exp_masked_atomic_params masked_atomic;
    int                                 rx_pad_end_addr_align;
    struct ibv_exp_tso_caps             tso_caps;
    struct ibv_exp_packet_pacing_caps   packet_pacing_caps;
    uint32_t                            ec_w_mask;
    struct ibv_exp_ooo_caps             ooo_caps;
    struct ibv_exp_sw_parsing_caps      sw_parsing_caps;
    uint64_t                            odp_mr_max_size;
    struct ibv_exp_tm_caps              tm_caps;
    uint32_t                            tunnel_offloads_caps;
    uint64_t                            max_dm_size;
    uint32_t                            tunneled_atomic_caps;
    uint64_t                            comp_mask_2;
    struct ibv_exp_umr_fixed_size_caps  umr_fixed_size_caps;
    struct ibv_exp_pci_atomic_caps      pci_atomic_caps;
};

/* ------------------------------------------------------------------ */
/* Work requests                                                        */
/* ------------------------------------------------------------------ */

struct ibv_exp_mw_bind_info {
    struct ibv_mr *mr;
    uint64_t       addr;
    uint64_t       length;
    uint64_t       exp_mw_access_flags;   /* ibv_exp_access_flags */
};

/* Masked atomic operands. */
struct ibv_exp_cmp_swap {
    uint64_t compare_mask;
    uint64_t compare_val;
    uint64_t swap_val;
    uint64_t swap_mask;
};

struct ibv_exp_fetch_add {
    uint64_t add_val;
    uint64_t field_boundary;
};

struct ibv_exp_mem_region {
    uint64_t       base_addr;
    struct ibv_mr *mr;
    size_t         length;
};

struct ibv_exp_mem_repeat_block {
    uint64_t       base_addr;
    struct ibv_mr *mr;
    size_t        *byte_count;            /* one per dimension */
    size_t        *stride;                /* one per dimension */
};

struct ibv_exp_mkey_list_container {
    uint32_t            max_klm_list_size;
    struct ibv_context *context;
};

/* Extended send request.  The leading fields line up with
 * struct ibv_send_wr. */
struct ibv_exp_send_wr {
    uint64_t                wr_id;
    struct ibv_exp_send_wr *next;
    struct ibv_sge         *sg_list;
    int                     num_sge;
    enum ibv_exp_wr_opcode  exp_opcode;
    int                     reserved;
    union {
        uint32_t imm_data;                /* network order */
        uint32_t invalidate_rkey;
    } ex;
    union {
        struct {
            uint64_t remote_addr;
            uint32_t rkey;
        } rdma;
        struct {
            uint64_t remote_addr;
            uint64_t compare_add;
            uint64_t swap;
            uint32_t rkey;
        } atomic;
        struct {
            struct ibv_ah *ah;
            uint32_t       remote_qpn;
            uint32_t       remote_qkey;
        } ud;
    } wr;
    union {
        union {
            struct {
                uint32_t remote_srqn;
            } xrc;
        } qp_type;
        uint32_t xrc_remote_srq_num;
    };
    /* cross-channel (task) operands */
    union {
        struct {
            uint64_t remote_addr;
            uint32_t rkey;
        } rdma;
        struct {
            uint64_t remote_addr;
            uint64_t compare_add;
            uint64_t swap;
            uint32_t rkey;
        } atomic;
        struct {
            struct ibv_cq *cq;
            int32_t        cq_count;
        } cqe_wait;
        struct {
            struct ibv_qp *qp;
            int32_t        wqe_count;
        } wqe_enable;
    } task;
    union {
        struct {
            enum ibv_exp_calc_op        calc_op;
            enum ibv_exp_calc_data_type data_type;
            enum ibv_exp_calc_data_size data_size;
        } calc;
    } op;
    struct {
        struct ibv_ah *ah;
        uint64_t       dct_access_key;
        uint32_t       dct_number;
    } dc;
    union {
        struct {
            struct ibv_mw              *mw;
            uint32_t                    rkey;
            struct ibv_exp_mw_bind_info bind_info;
        } bind_mw;
        struct {
            void    *hdr;
            uint16_t hdr_sz;
            uint16_t mss;
        } tso;
    };
    uint64_t exp_send_flags;              /* ibv_exp_send_flags */
    uint32_t comp_mask;                   /* must be 0 */
    union {
        struct {
            uint32_t                            umr_type;   /* ibv_exp_umr_wr_type */
            struct ibv_exp_mkey_list_container *memory_objects;
            uint64_t                            exp_access; /* ibv_exp_access_flags */
            struct ibv_mr                      *modified_mr;
            uint64_t                            base_addr;
            uint32_t                            num_mrs;
            union {
                struct ibv_exp_mem_region *mem_reg_list;
                struct {
                    struct ibv_exp_mem_repeat_block *mem_repeat_block_list;
                    size_t                          *repeat_count;
                    uint32_t                         stride_dim;
                } rb;
            } mem_list;
        } umr;
        struct {
            uint32_t log_arg_sz;
            uint64_t remote_addr;
            uint32_t rkey;
            union {
                struct {
                    union {
                        struct ibv_exp_cmp_swap  cmp_swap;
                        struct ibv_exp_fetch_add fetch_add;
                    } op;
                } inline_data;
            } wr_data;
        } masked_atomics;
    } ext_op;
};

/* One entry of a cross-channel task list. */
struct ibv_exp_task {
    enum ibv_exp_task_type task_type;
    struct {
        struct ibv_qp *qp;
        union {
            struct ibv_exp_send_wr *send_wr;
            struct ibv_recv_wr     *recv_wr;
        };
    } item;
    struct ibv_exp_task *next;
    uint32_t             comp_mask;       /* must be 0 */
};

/* ------------------------------------------------------------------ */
/* Completion queues                                                    */
/* ------------------------------------------------------------------ */

struct ibv_exp_res_domain {
    struct ibv_context *context;
};

struct ibv_exp_cq_init_attr {
    uint32_t                         comp_mask;   /* ibv_exp_cq_init_attr_mask */
    uint32_t                         flags;       /* ibv_exp_cq_create_flags */
    struct ibv_exp_res_domain       *res_domain;
    struct ibv_exp_peer_direct_attr *peer_direct_attrs;
};

struct ibv_exp_cq_attr {
    uint32_t comp_mask;                   /* ibv_exp_cq_attr_comp_mask */
    struct {
        uint16_t cq_count;
        uint16_t cq_period;
    } moderation;
    uint32_t cq_cap_flags;                /* ibv_exp_cq_cap_flags */
};

struct ibv_exp_dct {
    struct ibv_context *context;
    uint32_t            handle;
    uint32_t            dct_num;
    struct ibv_pd      *pd;
    struct ibv_srq     *srq;
    struct ibv_cq      *cq;
    pthread_mutex_t     mutex;
    pthread_cond_t      cond;
    uint32_t            events_completed;
};

/* Extended completion.  The leading fields line up with struct ibv_wc. */
struct ibv_exp_wc {
    uint64_t               wr_id;
    enum ibv_wc_status     status;
    enum ibv_exp_wc_opcode exp_opcode;
    uint32_t               vendor_err;
    union {
        uint32_t byte_len;
        struct {                          /* multi-packet receive */
            uint16_t strides_offset;
            uint16_t byte_len;
        } mp_wr;
    };
    uint32_t               imm_data;      /* network order */
    uint32_t               qp_num;
    uint32_t               src_qp;
    int                    reserved;
    uint16_t               pkey_index;
    uint16_t               slid;
    uint8_t                sl;
    uint8_t                dlid_path_bits;
    uint64_t               timestamp;
    struct ibv_qp         *qp;
    struct ibv_srq        *srq;
    struct ibv_exp_dct    *dct;
    uint64_t               exp_wc_flags;  /* ibv_exp_wc_flags */
    struct {
        uint64_t tag;
        uint32_t priv;
    } tm_info;
};

/* ------------------------------------------------------------------ */
/* Queue pairs                                                          */
/* ------------------------------------------------------------------ */

struct ibv_exp_burst_info {
    uint32_t max_burst_sz;
    uint16_t typical_pkt_sz;
};

/* Leading part lines up with struct ibv_qp_attr. */
struct ibv_exp_qp_attr {
    enum ibv_qp_state         qp_state;
    enum ibv_qp_state         cur_qp_state;
    enum ibv_mtu              path_mtu;
    enum ibv_mig_state        path_mig_state;
    uint32_t                  qkey;
    uint32_t                  rq_psn;
    uint32_t                  sq_psn;
    uint32_t                  dest_qp_num;
    int                       qp_access_flags;
    struct ibv_qp_cap         cap;
    struct ibv_ah_attr        ah_attr;
    struct ibv_ah_attr        alt_ah_attr;
    uint16_t                  pkey_index;
    uint16_t                  alt_pkey_index;
    uint8_t                   en_sqd_async_notify;
    uint8_t                   sq_draining;
    uint8_t                   max_rd_atomic;
    uint8_t                   max_dest_rd_atomic;
    uint8_t                   min_rnr_timer;
    uint8_t                   port_num;
    uint8_t                   timeout;
    uint8_t                   retry_cnt;
    uint8_t                   rnr_retry;
    uint8_t                   alt_port_num;
    uint8_t                   alt_timeout;
    uint64_t                  dct_key;
    uint32_t                  comp_mask;  /* ibv_exp_qp_attr_comp_mask */
    uint32_t                  flow_entropy;
    uint32_t                  rate_limit;
    struct ibv_exp_burst_info burst_info;
};

struct ibv_exp_qpg_init_attrib {
    uint32_t tss_child_count;
    uint32_t rss_child_count;
};

/* QP group membership; qpg_type selects the live union member. */
struct ibv_exp_qpg {
    uint32_t qpg_type;                    /* ibv_exp_qpg_type */
    union {
        struct ibv_qp                 *qpg_parent;
        struct ibv_exp_qpg_init_attrib parent_attrib;
    };
};

struct ibv_exp_rwq_ind_table {
    struct ibv_context *context;
    struct ibv_pd      *pd;
    int                 ind_tbl_handle;
    int                 ind_tbl_num;
    uint32_t            comp_mask;
};

struct ibv_exp_rx_hash_conf {
    uint8_t                       rx_hash_function;   /* ibv_exp_rx_hash_function_flags */
    uint8_t                       rx_hash_key_len;
    uint8_t                      *rx_hash_key;
    uint64_t                      rx_hash_fields_mask; /* ibv_exp_rx_hash_fields */
    struct ibv_exp_rwq_ind_table *rwq_ind_tbl;
};

/* Leading part lines up with struct ibv_qp_init_attr_ex. */
struct ibv_exp_qp_init_attr {
    void                            *qp_context;
    struct ibv_cq                   *send_cq;
    struct ibv_cq                   *recv_cq;
    struct ibv_srq                  *srq;
    struct ibv_qp_cap                cap;
    enum ibv_qp_type                 qp_type;
    int                              sq_sig_all;
    uint32_t                         comp_mask;        /* ibv_exp_qp_init_attr_comp_mask */
    struct ibv_pd                   *pd;
    struct ibv_xrcd                 *xrcd;
    uint32_t                         exp_create_flags; /* ibv_exp_qp_create_flags */
    uint32_t                         max_inl_recv;
    struct ibv_exp_qpg               qpg;
    uint32_t                         max_atomic_arg;
    uint32_t                         max_inl_send_klms;
    struct ibv_exp_res_domain       *res_domain;
    struct ibv_exp_rx_hash_conf     *rx_hash_conf;
    uint8_t                          port_num;
    struct ibv_exp_peer_direct_attr *peer_direct_attrs;
    uint16_t                         max_tso_header;
    uint32_t                         associated_qpn;
};

/* ------------------------------------------------------------------ */
/* Experimental context                                                 */
/* ------------------------------------------------------------------ */

struct verbs_env_item {
    char                  *name;
    char                  *value;
    struct verbs_env_item *next;
};

struct verbs_environment {
    struct verbs_env_item *head;
    pthread_mutex_t        mtx;
};

/*
 * Experimental entry points.  The library places this record directly
 * in front of the provider's struct verbs_context; new members are
 * added at the top and sz (the last member) says how many bytes,
 * counted back from the end, the provider actually has.
 */
struct verbs_context_exp {
    struct ibv_exp_dm *(*exp_alloc_dm)(struct ibv_context *context,
                                       struct ibv_exp_alloc_dm_attr *attr);
    int (*exp_free_dm)(struct ibv_exp_dm *dm);
    int (*exp_memcpy_dm)(struct ibv_exp_dm *dm,
                         struct ibv_exp_memcpy_dm_attr *attr);
    int (*exp_post_srq_ops)(struct ibv_srq *srq, struct ibv_exp_ops_wr *op,
                            struct ibv_exp_ops_wr **bad_op);
    struct ibv_srq *(*exp_create_srq)(struct ibv_context *context,
                                      struct ibv_exp_create_srq_attr *attr);
    int (*drv_exp_set_context_attr)(struct ibv_context *context,
                                    struct ibv_exp_open_device_attr *attr);
    struct ibv_ah *(*drv_exp_ibv_create_kah)(struct ibv_pd *pd,
                                             struct ibv_exp_ah_attr *attr_exp);
    int (*exp_peer_peek_cq)(struct ibv_cq *ibcq,
                            struct ibv_exp_peer_peek *peek_ctx);
    int (*exp_peer_abort_peek_cq)(struct ibv_cq *ibcq,
                                  struct ibv_exp_peer_abort_peek *ack_ctx);
    int (*exp_peer_commit_qp)(struct ibv_qp *qp,
                              struct ibv_exp_peer_commit *peer);
    int (*exp_rollback_send)(struct ibv_qp *qp,
                             struct ibv_exp_rollback_ctx *rollback);
    int (*ec_update_sync)(struct ibv_exp_ec_calc *calc,
                          struct ibv_exp_ec_mem *ec_mem,
                          uint8_t *data_updates, uint8_t *code_updates);
    int (*ec_update_async)(struct ibv_exp_ec_calc *calc,
                           struct ibv_exp_ec_mem *ec_mem,
                           uint8_t *data_updates, uint8_t *code_updates,
                           struct ibv_exp_ec_comp *ec_comp);
    struct ibv_exp_ec_calc *(*alloc_ec_calc)(struct ibv_pd *pd,
                                             struct ibv_exp_ec_calc_init_attr *attr);
    void (*dealloc_ec_calc)(struct ibv_exp_ec_calc *calc);
    int (*ec_encode_async)(struct ibv_exp_ec_calc *calc,
                           struct ibv_exp_ec_mem *ec_mem,
                           struct ibv_exp_ec_comp *ec_comp);
    int (*ec_encode_sync)(struct ibv_exp_ec_calc *calc,
                          struct ibv_exp_ec_mem *ec_mem);
    int (*ec_decode_async)(struct ibv_exp_ec_calc *calc,
                           struct ibv_exp_ec_mem *ec_mem,
                           uint8_t *erasures, uint8_t *decode_matrix,
                           struct ibv_exp_ec_comp *ec_comp);
    int (*ec_decode_sync)(struct ibv_exp_ec_calc *calc,
                          struct ibv_exp_ec_mem *ec_mem,
                          uint8_t *erasures, uint8_t *decode_matrix);
    int (*ec_poll)(struct ibv_exp_ec_calc *calc, int n);
    int (*ec_encode_send)(struct ibv_exp_ec_calc *calc,
                          struct ibv_exp_ec_mem *ec_mem,
                          struct ibv_exp_ec_stripe *data_stripes,
                          struct ibv_exp_ec_stripe *code_stripes);
    int (*exp_query_gid_attr)(struct ibv_context *context, uint8_t port_num,
                              unsigned int index,
                              struct ibv_exp_gid_attr *attr);
    int (*exp_destroy_rwq_ind_table)(struct ibv_exp_rwq_ind_table *rwq_ind_table);
    struct ibv_exp_rwq_ind_table *(*exp_create_rwq_ind_table)(
        struct ibv_context *context,
        struct ibv_exp_rwq_ind_table_init_attr *init_attr);
    int (*exp_destroy_wq)(struct ibv_exp_wq *wq);
    int (*exp_modify_wq)(struct ibv_exp_wq *wq, struct ibv_exp_wq_attr *wq_attr);
    struct ibv_exp_wq *(*exp_create_wq)(struct ibv_context *context,
                                        struct ibv_exp_wq_init_attr *wq_init_attr);
    int (*drv_exp_poll_dc_info)(struct ibv_context *context,
                                struct ibv_exp_dc_info_ent *ents,
                                int nent, int port);
    void *(*exp_query_intf)(struct ibv_context *context,
                            struct ibv_exp_query_intf_params *params,
                            enum ibv_exp_query_intf_status *status);
    int (*exp_release_intf)(struct ibv_context *context, void *intf,
                            struct ibv_exp_release_intf_params *params);
    struct ibv_exp_res_domain *(*exp_create_res_domain)(
        struct ibv_context *context,
        struct ibv_exp_res_domain_init_attr *attr);
    int (*exp_destroy_res_domain)(struct ibv_context *context,
                                  struct ibv_exp_res_domain *res_dom,
                                  struct ibv_exp_destroy_res_domain_attr *attr);
    int (*lib_exp_use_priv_env)(struct ibv_context *context);
    int (*lib_exp_setenv)(struct ibv_context *context, const char *name,
                          const char *value, int overwrite);
    struct verbs_environment *venv;
    int (*drv_exp_dereg_mr)(struct ibv_mr *mr, struct ibv_exp_dereg_out *out);
    void (*ABI_placeholder2)(void);
    void (*ABI_placeholder1)(void);
    int (*drv_exp_prefetch_mr)(struct ibv_mr *mr,
                               struct ibv_exp_prefetch_attr *attr);
    int (*lib_exp_prefetch_mr)(struct ibv_mr *mr,
                               struct ibv_exp_prefetch_attr *attr);
    struct ibv_exp_mkey_list_container *(*drv_exp_alloc_mkey_list_memory)(
        struct ibv_exp_mkey_list_container_attr *attr);
    struct ibv_exp_mkey_list_container *(*lib_exp_alloc_mkey_list_memory)(
        struct ibv_exp_mkey_list_container_attr *attr);
    int (*drv_exp_dealloc_mkey_list_memory)(struct ibv_exp_mkey_list_container *mem);
    int (*lib_exp_dealloc_mkey_list_memory)(struct ibv_exp_mkey_list_container *mem);
    int (*drv_exp_query_mkey)(struct ibv_mr *mr, struct ibv_exp_mkey_attr *mkey_attr);
    int (*lib_exp_query_mkey)(struct ibv_mr *mr, struct ibv_exp_mkey_attr *mkey_attr);
    struct ibv_mr *(*drv_exp_create_mr)(struct ibv_exp_create_mr_in *in);
    struct ibv_mr *(*lib_exp_create_mr)(struct ibv_exp_create_mr_in *in);
    int (*drv_exp_arm_dct)(struct ibv_exp_dct *dct, struct ibv_exp_arm_attr *attr);
    int (*lib_exp_arm_dct)(struct ibv_exp_dct *dct, struct ibv_exp_arm_attr *attr);
    int (*drv_exp_bind_mw)(struct ibv_exp_mw_bind *mw_bind);
    int (*lib_exp_bind_mw)(struct ibv_exp_mw_bind *mw_bind);
    int (*drv_exp_post_send)(struct ibv_qp *qp, struct ibv_exp_send_wr *wr,
                             struct ibv_exp_send_wr **bad_wr);
    struct ibv_mr *(*drv_exp_reg_mr)(struct ibv_exp_reg_mr_in *in);
    struct ibv_mr *(*lib_exp_reg_mr)(struct ibv_exp_reg_mr_in *in);
    struct ibv_ah *(*drv_exp_ibv_create_ah)(struct ibv_pd *pd,
                                            struct ibv_exp_ah_attr *attr_exp);
    int (*drv_exp_query_values)(struct ibv_context *context, int q_values,
                                struct ibv_exp_values *values);
    struct ibv_cq *(*exp_create_cq)(struct ibv_context *context, int cqe,
                                    struct ibv_comp_channel *channel,
                                    int comp_vector,
                                    struct ibv_exp_cq_init_attr *attr);
    int (*drv_exp_ibv_poll_cq)(struct ibv_cq *ibcq, int num_entries,
                               struct ibv_exp_wc *wc, uint32_t wc_size);
    void *(*drv_exp_get_legacy_xrc)(struct ibv_srq *ibv_srq);
    void (*drv_exp_set_legacy_xrc)(struct ibv_srq *ibv_srq, void *legacy_xrc);
    struct ibv_mr *(*drv_exp_ibv_reg_shared_mr)(struct ibv_exp_reg_shared_mr_in *in);
    struct ibv_mr *(*lib_exp_ibv_reg_shared_mr)(struct ibv_exp_reg_shared_mr_in *in);
    int (*drv_exp_modify_qp)(struct ibv_qp *qp, struct ibv_exp_qp_attr *attr,
                             uint64_t exp_attr_mask);
    int (*lib_exp_modify_qp)(struct ibv_qp *qp, struct ibv_exp_qp_attr *attr,
                             uint64_t exp_attr_mask);
    int (*drv_exp_post_task)(struct ibv_context *context,
                             struct ibv_exp_task *task,
                             struct ibv_exp_task **bad_task);
    int (*lib_exp_post_task)(struct ibv_context *context,
                             struct ibv_exp_task *task,
                             struct ibv_exp_task **bad_task);
    int (*drv_exp_modify_cq)(struct ibv_cq *cq, struct ibv_exp_cq_attr *attr,
                             int attr_mask);
    int (*lib_exp_modify_cq)(struct ibv_cq *cq, struct ibv_exp_cq_attr *attr,
                             int attr_mask);
    int (*drv_exp_ibv_destroy_flow)(struct ibv_exp_flow *flow);
    int (*lib_exp_ibv_destroy_flow)(struct ibv_exp_flow *flow);
    struct ibv_exp_flow *(*drv_exp_ibv_create_flow)(struct ibv_qp *qp,
                                                    struct ibv_exp_flow_attr *flow_attr);
    struct ibv_exp_flow *(*lib_exp_ibv_create_flow)(struct ibv_qp *qp,
                                                    struct ibv_exp_flow_attr *flow_attr);
    int (*drv_exp_query_port)(struct ibv_context *context, uint8_t port_num,
                              struct ibv_exp_port_attr *port_attr);
    int (*lib_exp_query_port)(struct ibv_context *context, uint8_t port_num,
                              struct ibv_exp_port_attr *port_attr);
    struct ibv_exp_dct *(*create_dct)(struct ibv_context *context,
                                      struct ibv_exp_dct_init_attr *attr);
    int (*destroy_dct)(struct ibv_exp_dct *dct);
    int (*query_dct)(struct ibv_exp_dct *dct, struct ibv_exp_dct_attr *attr);
    int (*drv_exp_query_device)(struct ibv_context *context,
                                struct ibv_exp_device_attr *attr);
    int (*lib_exp_query_device)(struct ibv_context *context,
                                struct ibv_exp_device_attr *attr);
    struct ibv_qp *(*drv_exp_create_qp)(struct ibv_context *context,
                                        struct ibv_exp_qp_init_attr *init_attr);
    struct ibv_qp *(*lib_exp_create_qp)(struct ibv_context *context,
                                        struct ibv_exp_qp_init_attr *init_attr);
    size_t sz;                            /* must stay the last member */
};

/*
 * Memory layout of an experimental-capable context, low to high:
 *   struct verbs_context_exp | provider's verbs_context (vc->sz bytes,
 *   ending with the struct ibv_context) .
 * The provider's verbs_context may be shorter than ours, so the start
 * of the exp record is found from ctx and vc->sz, not from offsetof.
 */
static inline struct verbs_context_exp *verbs_get_exp_ctx(struct ibv_context *ctx)
{
    struct verbs_context *vc = verbs_get_ctx(ctx);
    char *vc_start;

    if (vc == NULL || (vc->has_comp_mask & VERBS_CONTEXT_EXP) == 0)
        return NULL;
    vc_start = (char *)ctx - (vc->sz - sizeof(struct ibv_context));
    return (struct verbs_context_exp *)(void *)
           (vc_start - sizeof(struct verbs_context_exp));
}

/* The verbs_context_exp of ctx if it is present, reaches member op and op
 * is set, else NULL.  A macro like verbs_get_ctx_op, for the same reason. */
#define verbs_get_exp_ctx_op(ctx, op) ({                                  \
    struct verbs_context_exp *verbsexp_xc_ = verbs_get_exp_ctx(ctx);      \
    (verbsexp_xc_ != NULL &&                                              \
     verbsexp_xc_->sz >= sizeof(*verbsexp_xc_) -                          \
                         offsetof(struct verbs_context_exp, op) &&        \
     verbsexp_xc_->op != NULL) ? verbsexp_xc_ : NULL;                     \
})

/* comp_mask validation shared by the inline verbs: 1 when val has no bit
 * above allowed, else 0 with a diagnostic on stderr and errno = EINVAL. */
#define verbsexp_comp_mask_ok(verb, val, allowed) ({                      \
    unsigned long long verbsexp_val_ = (val);                             \
    unsigned long long verbsexp_allowed_ = (allowed);                     \
    int verbsexp_ok_ = verbsexp_val_ <= verbsexp_allowed_;                \
    if (!verbsexp_ok_) {                                                  \
        fprintf(stderr, "%s: unsupported comp_mask 0x%llx "               \
                "(supported up to 0x%llx)\n",                             \
                (verb), verbsexp_val_, verbsexp_allowed_);                \
        errno = EINVAL;                                                   \
    }                                                                     \
    verbsexp_ok_;                                                         \
})

/* ------------------------------------------------------------------ */
/* Verbs                                                                */
/* ------------------------------------------------------------------ */

struct ibv_device **ibv_exp_get_device_list(int *num_devices);

/* Returns 0, or ENOSYS when the provider lacks the verb, or EINVAL. */
static inline int ibv_exp_query_device(struct ibv_context *context,
                                       struct ibv_exp_device_attr *attr)
{
    struct verbs_context_exp *xc =
        verbs_get_exp_ctx_op(context, lib_exp_query_device);

    if (xc == NULL)
        return ENOSYS;
    if ((attr->comp_mask & IBV_EXP_DEVICE_ATTR_COMP_MASK_2) &&
        !verbsexp_comp_mask_ok(__func__, attr->comp_mask_2,
                               IBV_EXP_DEVICE_ATTR_RESERVED_2 - 1))
        return EINVAL;
    return xc->lib_exp_query_device(context, attr);
}

/* NULL with errno set (ENOSYS / EINVAL) on failure.  On success the
 * generic CQ fields are filled in here, under the context lock. */
static inline struct ibv_cq *ibv_exp_create_cq(struct ibv_context *context,
                                               int cqe, void *cq_context,
                                               struct ibv_comp_channel *channel,
                                               int comp_vector,
                                               struct ibv_exp_cq_init_attr *attr)
{
    struct verbs_context_exp *xc = verbs_get_exp_ctx_op(context, exp_create_cq);
    struct ibv_cq *cq;

    if (xc == NULL) {
        errno = ENOSYS;
        return NULL;
    }
    if (!verbsexp_comp_mask_ok(__func__, attr->comp_mask,
                               IBV_EXP_CQ_INIT_ATTR_RESERVED1 - 1))
        return NULL;

    pthread_mutex_lock(&context->mutex);
    cq = xc->exp_create_cq(context, cqe, channel, comp_vector, attr);
    if (cq != NULL) {
        cq->context    = context;
        cq->channel    = channel;
        cq->cq_context = cq_context;
        if (channel != NULL)
            channel->refcnt++;
        cq->comp_events_completed  = 0;
        cq->async_events_completed = 0;
        pthread_mutex_init(&cq->mutex, NULL);
        pthread_cond_init(&cq->cond, NULL);
    }
    pthread_mutex_unlock(&context->mutex);
    return cq;
}

/* Returns 0, or ENOSYS / EINVAL. */
static inline int ibv_exp_modify_cq(struct ibv_cq *cq,
                                    struct ibv_exp_cq_attr *cq_attr,
                                    int cq_attr_mask)
{
    struct verbs_context_exp *xc =
        verbs_get_exp_ctx_op(cq->context, lib_exp_modify_cq);

    if (xc == NULL)
        return ENOSYS;
    if (!verbsexp_comp_mask_ok(__func__, cq_attr->comp_mask,
                               IBV_EXP_CQ_ATTR_RESERVED - 1))
        return EINVAL;
    return xc->lib_exp_modify_cq(cq, cq_attr, cq_attr_mask);
}

/* A request that only names a PD is served by plain ibv_create_qp();
 * anything else needs the provider.  NULL with errno set on failure. */
static inline struct ibv_qp *
ibv_exp_create_qp(struct ibv_context *context,
                  struct ibv_exp_qp_init_attr *qp_init_attr)
{
    struct verbs_context_exp *xc;

    if (qp_init_attr->comp_mask == IBV_EXP_QP_INIT_ATTR_PD)
        return ibv_create_qp(qp_init_attr->pd,
                             (struct ibv_qp_init_attr *)(void *)qp_init_attr);

    xc = verbs_get_exp_ctx_op(context, lib_exp_create_qp);
    if (xc == NULL) {
        errno = ENOSYS;
        return NULL;
    }
    if (!verbsexp_comp_mask_ok(__func__, qp_init_attr->comp_mask,
                               IBV_EXP_QP_INIT_ATTR_RESERVED1 - 1))
        return NULL;
    return xc->lib_exp_create_qp(context, qp_init_attr);
}

/* Returns 0; ENOSYS (errno set too) without provider support; EINVAL. */
static inline int ibv_exp_modify_qp(struct ibv_qp *qp,
                                    struct ibv_exp_qp_attr *attr,
                                    uint64_t exp_attr_mask)
{
    struct verbs_context_exp *xc =
        verbs_get_exp_ctx_op(qp->context, lib_exp_modify_qp);

    if (xc == NULL) {
        errno = ENOSYS;
        return ENOSYS;
    }
    if (!verbsexp_comp_mask_ok(__func__, attr->comp_mask,
                               IBV_EXP_QP_ATTR_RESERVED - 1))
        return EINVAL;
    return xc->lib_exp_modify_qp(qp, attr, exp_attr_mask);
}

/* Data path: -ENOSYS when the provider has no such entry point. */
static inline int ibv_exp_post_send(struct ibv_qp *qp,
                                    struct ibv_exp_send_wr *wr,
                                    struct ibv_exp_send_wr **bad_wr)
{
    struct verbs_context_exp *xc =
        verbs_get_exp_ctx_op(qp->context, drv_exp_post_send);

    if (xc == NULL)
        return -ENOSYS;
    return xc->drv_exp_post_send(qp, wr, bad_wr);
}

static inline int ibv_exp_poll_cq(struct ibv_cq *ibcq, int num_entries,
                                  struct ibv_exp_wc *wc, uint32_t wc_size)
{
    struct verbs_context_exp *xc =
        verbs_get_exp_ctx_op(ibcq->context, drv_exp_ibv_poll_cq);

    if (xc == NULL)
        return -ENOSYS;
    return xc->drv_exp_ibv_poll_cq(ibcq, num_entries, wc, wc_size);
}

/* Posts a linked list of cross-channel tasks.  Returns 0, ENOSYS or
 * EINVAL. */
static inline int ibv_exp_post_task(struct ibv_context *context,
                                    struct ibv_exp_task *task,
                                    struct ibv_exp_task **bad_task)
{
    struct verbs_context_exp *xc =
        verbs_get_exp_ctx_op(context, lib_exp_post_task);

    if (xc == NULL)
        return ENOSYS;
    if (!verbsexp_comp_mask_ok(__func__, task->comp_mask,
                               IBV_EXP_TASK_RESERVED - 1))
        return EINVAL;
    return xc->lib_exp_post_task(context, task, bad_task);
}

#ifdef __cplusplus
}
#endif

#endif /* !VERBSEXP_HEADERS_REFUSED */
#endif /* VERBSEXP_INSTALLED_HEADERS */
#endif /* INFINIBAND_VERBS_EXP_H */
