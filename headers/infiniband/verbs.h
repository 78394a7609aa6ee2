/*
 * verbsexp: core verbs declarations (restated ABI subset).
 *
 * Layouts, names and values follow the libibverbs ABI shipped with
 * MLNX_OFED 4.6; the text is this project's own.  See ../NOTICE.
 */
#ifndef INFINIBAND_VERBS_H
/* MLNX_OFED's own verbs.h where its verbs_exp.h is installed (see verbs_exp.h). */
#if !defined(VERBSEXP_RESTATEMENT_ONLY) && defined(__has_include_next)
#if __has_include_next(<infiniband/verbs_exp.h>) && __has_include_next(<infiniband/verbs.h>) && \
    !__has_include_next(<infiniband/verbsexp_restated.h>)
#define VERBSEXP_INSTALLED_VERBS 1
#endif
#endif

#ifdef VERBSEXP_INSTALLED_VERBS
#undef VERBSEXP_INSTALLED_VERBS /* not seen by the headers deferred to */
#include_next <infiniband/verbs.h>
#else
#define INFINIBAND_VERBS_H
#define VERBSEXP_RESTATED_VERBS "MLNX_OFED 4.6"

#include <stdint.h>
#include <stddef.h>
#include <errno.h>
#include <string.h>
#include <pthread.h>
#include <infiniband/ofa_verbs.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ */
/* Helpers                                                              */
/* ------------------------------------------------------------------ */

#ifndef container_of
#define container_of(ptr, type, member) \
    ((type *)(void *)((char *)(ptr) - offsetof(type, member)))
#endif

/* Non-zero when member fld of type starts inside the first sz bytes. */
#define vext_field_avail(type, fld, sz) \
    ((size_t)(sz) > (size_t)offsetof(type, fld))

/* Value of ibv_context.abi_compat on contexts that carry a
 * struct verbs_context in front of them: the all-ones pointer. */
#define __VERBS_ABI_IS_EXTENDED ((void *)~(uintptr_t)0)

/* ------------------------------------------------------------------ */
/* Forward declarations                                                 */
/* ------------------------------------------------------------------ */

struct ibv_context;
struct ibv_device;
struct ibv_pd;
struct ibv_mr;
struct ibv_mw;
struct ibv_cq;
struct ibv_qp;
struct ibv_srq;
struct ibv_ah;
struct ibv_xrcd;
struct ibv_flow;
struct ibv_exp_dct;

/* ------------------------------------------------------------------ */
/* Enumerations                                                         */
/* ------------------------------------------------------------------ */

enum ibv_node_type {
    IBV_NODE_UNKNOWN             = -1,
    IBV_NODE_CA                  = 1,
    IBV_NODE_SWITCH              = 2,
    IBV_NODE_ROUTER              = 3,
    IBV_NODE_RNIC                = 4,
    IBV_EXP_NODE_TYPE_START      = 32,
    IBV_EXP_NODE_MIC             = 32
};

enum ibv_transport_type {
    IBV_TRANSPORT_UNKNOWN        = -1,
    IBV_TRANSPORT_IB             = 0,
    IBV_TRANSPORT_IWARP          = 1,
    IBV_EXP_TRANSPORT_TYPE_START = 32,
    IBV_EXP_TRANSPORT_SCIF       = 32
};

enum ibv_device_cap_flags {
    IBV_DEVICE_RESIZE_MAX_WR         = 0x00000001,
    IBV_DEVICE_BAD_PKEY_CNTR         = 0x00000002,
    IBV_DEVICE_BAD_QKEY_CNTR         = 0x00000004,
    IBV_DEVICE_RAW_MULTI             = 0x00000008,
    IBV_DEVICE_AUTO_PATH_MIG         = 0x00000010,
    IBV_DEVICE_CHANGE_PHY_PORT       = 0x00000020,
    IBV_DEVICE_UD_AV_PORT_ENFORCE    = 0x00000040,
    IBV_DEVICE_CURR_QP_STATE_MOD     = 0x00000080,
    IBV_DEVICE_SHUTDOWN_PORT         = 0x00000100,
    IBV_DEVICE_INIT_TYPE             = 0x00000200,
    IBV_DEVICE_PORT_ACTIVE_EVENT     = 0x00000400,
    IBV_DEVICE_SYS_IMAGE_GUID        = 0x00000800,
    IBV_DEVICE_RC_RNR_NAK_GEN        = 0x00001000,
    IBV_DEVICE_SRQ_RESIZE            = 0x00002000,
    IBV_DEVICE_N_NOTIFY_CQ           = 0x00004000,
    IBV_DEVICE_MEM_WINDOW            = 0x00020000,
    IBV_DEVICE_XRC                   = 0x00100000,
    IBV_DEVICE_MEM_MGT_EXTENSIONS    = 0x00200000,
    IBV_DEVICE_MEM_WINDOW_TYPE_2A    = 0x00800000,
    IBV_DEVICE_MEM_WINDOW_TYPE_2B    = 0x01000000,
    IBV_DEVICE_MANAGED_FLOW_STEERING = 0x20000000
};

enum ibv_atomic_cap {
    IBV_ATOMIC_NONE = 0,
    IBV_ATOMIC_HCA  = 1,
    IBV_ATOMIC_GLOB = 2
};

enum ibv_odp_transport_cap_bits {
    IBV_ODP_SUPPORT_SEND   = 0x01,
    IBV_ODP_SUPPORT_RECV   = 0x02,
    IBV_ODP_SUPPORT_WRITE  = 0x04,
    IBV_ODP_SUPPORT_READ   = 0x08,
    IBV_ODP_SUPPORT_ATOMIC = 0x10
};

enum ibv_odp_general_caps {
    IBV_ODP_SUPPORT = 0x1
};

enum ibv_mtu {
    IBV_MTU_256  = 1,
    IBV_MTU_512  = 2,
    IBV_MTU_1024 = 3,
    IBV_MTU_2048 = 4,
    IBV_MTU_4096 = 5
};

enum ibv_port_state {
    IBV_PORT_NOP          = 0,
    IBV_PORT_DOWN         = 1,
    IBV_PORT_INIT         = 2,
    IBV_PORT_ARMED        = 3,
    IBV_PORT_ACTIVE       = 4,
    IBV_PORT_ACTIVE_DEFER = 5
};

/* Values of ibv_port_attr.link_layer. */
enum {
    IBV_LINK_LAYER_UNSPECIFIED = 0,
    IBV_LINK_LAYER_INFINIBAND  = 1,
    IBV_LINK_LAYER_ETHERNET    = 2,
    IBV_EXP_LINK_LAYER_START   = 32,
    IBV_EXP_LINK_LAYER_SCIF    = 32
};

enum ibv_port_cap_flags {
    IBV_PORT_SM                        = 0x00000002,
    IBV_PORT_NOTICE_SUP                = 0x00000004,
    IBV_PORT_TRAP_SUP                  = 0x00000008,
    IBV_PORT_OPT_IPD_SUP               = 0x00000010,
    IBV_PORT_AUTO_MIGR_SUP             = 0x00000020,
    IBV_PORT_SL_MAP_SUP                = 0x00000040,
    IBV_PORT_MKEY_NVRAM                = 0x00000080,
    IBV_PORT_PKEY_NVRAM                = 0x00000100,
    IBV_PORT_LED_INFO_SUP              = 0x00000200,
    IBV_PORT_SYS_IMAGE_GUID_SUP        = 0x00000800,
    IBV_PORT_PKEY_SW_EXT_PORT_TRAP_SUP = 0x00001000,
    IBV_PORT_EXTENDED_SPEEDS_SUP       = 0x00004000,
    IBV_PORT_CM_SUP                    = 0x00010000,
    IBV_PORT_SNMP_TUNNEL_SUP           = 0x00020000,
    IBV_PORT_REINIT_SUP                = 0x00040000,
    IBV_PORT_DEVICE_MGMT_SUP           = 0x00080000,
    IBV_PORT_VENDOR_CLASS              = 0x01000000,
    IBV_PORT_CLIENT_REG_SUP            = 0x02000000,
    IBV_PORT_IP_BASED_GIDS             = 0x04000000
};

enum ibv_event_type {
    IBV_EVENT_CQ_ERR                = 0,
    IBV_EVENT_QP_FATAL              = 1,
    IBV_EVENT_QP_REQ_ERR            = 2,
    IBV_EVENT_QP_ACCESS_ERR         = 3,
    IBV_EVENT_COMM_EST              = 4,
    IBV_EVENT_SQ_DRAINED            = 5,
    IBV_EVENT_PATH_MIG              = 6,
    IBV_EVENT_PATH_MIG_ERR          = 7,
    IBV_EVENT_DEVICE_FATAL          = 8,
    IBV_EVENT_PORT_ACTIVE           = 9,
    IBV_EVENT_PORT_ERR              = 10,
    IBV_EVENT_LID_CHANGE            = 11,
    IBV_EVENT_PKEY_CHANGE           = 12,
    IBV_EVENT_SM_CHANGE             = 13,
    IBV_EVENT_SRQ_ERR               = 14,
    IBV_EVENT_SRQ_LIMIT_REACHED     = 15,
    IBV_EVENT_QP_LAST_WQE_REACHED   = 16,
    IBV_EVENT_CLIENT_REREGISTER     = 17,
    IBV_EVENT_GID_CHANGE            = 18,
    IBV_EXP_EVENT_DCT_KEY_VIOLATION = 32,
    IBV_EXP_EVENT_DCT_ACCESS_ERR    = 33,
    IBV_EXP_EVENT_DCT_REQ_ERR       = 34
};

enum ibv_wc_status {
    IBV_WC_SUCCESS            = 0,
    IBV_WC_LOC_LEN_ERR        = 1,
    IBV_WC_LOC_QP_OP_ERR      = 2,
    IBV_WC_LOC_EEC_OP_ERR     = 3,
    IBV_WC_LOC_PROT_ERR       = 4,
    IBV_WC_WR_FLUSH_ERR       = 5,
    IBV_WC_MW_BIND_ERR        = 6,
    IBV_WC_BAD_RESP_ERR       = 7,
    IBV_WC_LOC_ACCESS_ERR     = 8,
    IBV_WC_REM_INV_REQ_ERR    = 9,
    IBV_WC_REM_ACCESS_ERR     = 10,
    IBV_WC_REM_OP_ERR         = 11,
    IBV_WC_RETRY_EXC_ERR      = 12,
    IBV_WC_RNR_RETRY_EXC_ERR  = 13,
    IBV_WC_LOC_RDD_VIOL_ERR   = 14,
    IBV_WC_REM_INV_RD_REQ_ERR = 15,
    IBV_WC_REM_ABORT_ERR      = 16,
    IBV_WC_INV_EECN_ERR       = 17,
    IBV_WC_INV_EEC_STATE_ERR  = 18,
    IBV_WC_FATAL_ERR          = 19,
    IBV_WC_RESP_TIMEOUT_ERR   = 20,
    IBV_WC_GENERAL_ERR        = 21
};

/* Receive completions have bit 7 set. */
enum ibv_wc_opcode {
    IBV_WC_SEND               = 0,
    IBV_WC_RDMA_WRITE         = 1,
    IBV_WC_RDMA_READ          = 2,
    IBV_WC_COMP_SWAP          = 3,
    IBV_WC_FETCH_ADD          = 4,
    IBV_WC_BIND_MW            = 5,
    IBV_WC_LOCAL_INV          = 6,
    IBV_WC_RECV               = 0x80,
    IBV_WC_RECV_RDMA_WITH_IMM = 0x81
};

enum ibv_wc_flags {
    IBV_WC_GRH      = 0x1,
    IBV_WC_WITH_IMM = 0x2,
    IBV_WC_WITH_INV = 0x8
};

enum ibv_access_flags {
    IBV_ACCESS_LOCAL_WRITE   = 0x01,
    IBV_ACCESS_REMOTE_WRITE  = 0x02,
    IBV_ACCESS_REMOTE_READ   = 0x04,
    IBV_ACCESS_REMOTE_ATOMIC = 0x08,
    IBV_ACCESS_MW_BIND       = 0x10,
    IBV_ACCESS_ZERO_BASED    = 0x20,
    IBV_ACCESS_ON_DEMAND     = 0x40
};

enum ibv_xrcd_init_attr_mask {
    IBV_XRCD_INIT_ATTR_FD       = 0x1,
    IBV_XRCD_INIT_ATTR_OFLAGS   = 0x2,
    IBV_XRCD_INIT_ATTR_RESERVED = 0x4
};

enum ibv_mw_type {
    IBV_MW_TYPE_1 = 1,
    IBV_MW_TYPE_2 = 2
};

/* Encoded static rates (not in numeric order of speed). */
enum ibv_rate {
    IBV_RATE_MAX      = 0,
    IBV_RATE_2_5_GBPS = 2,
    IBV_RATE_5_GBPS   = 5,
    IBV_RATE_10_GBPS  = 3,
    IBV_RATE_20_GBPS  = 6,
    IBV_RATE_30_GBPS  = 4,
    IBV_RATE_40_GBPS  = 7,
    IBV_RATE_60_GBPS  = 8,
    IBV_RATE_80_GBPS  = 9,
    IBV_RATE_120_GBPS = 10,
    IBV_RATE_14_GBPS  = 11,
    IBV_RATE_56_GBPS  = 12,
    IBV_RATE_112_GBPS = 13,
    IBV_RATE_168_GBPS = 14,
    IBV_RATE_25_GBPS  = 15,
    IBV_RATE_100_GBPS = 16,
    IBV_RATE_200_GBPS = 17,
    IBV_RATE_300_GBPS = 18
};

enum ibv_srq_attr_mask {
    IBV_SRQ_MAX_WR = 0x1,
    IBV_SRQ_LIMIT  = 0x2
};

enum ibv_srq_type {
    IBV_SRQT_BASIC = 0,
    IBV_SRQT_XRC   = 1
};

enum ibv_srq_init_attr_mask {
    IBV_SRQ_INIT_ATTR_TYPE     = 0x01,
    IBV_SRQ_INIT_ATTR_PD       = 0x02,
    IBV_SRQ_INIT_ATTR_XRCD     = 0x04,
    IBV_SRQ_INIT_ATTR_CQ       = 0x08,
    IBV_SRQ_INIT_ATTR_RESERVED = 0x10
};

enum ibv_qp_type {
    IBV_QPT_RC            = 2,
    IBV_QPT_UC            = 3,
    IBV_QPT_UD            = 4,
    IBV_QPT_XRC           = 5,
    IBV_QPT_RAW_PACKET    = 8,
    IBV_QPT_RAW_ETH       = 8,
    IBV_QPT_XRC_SEND      = 9,
    IBV_QPT_XRC_RECV      = 10,
    IBV_EXP_QP_TYPE_START = 32,
    IBV_EXP_QPT_DC_INI    = 32
};

enum ibv_qp_init_attr_mask {
    IBV_QP_INIT_ATTR_PD       = 0x1,
    IBV_QP_INIT_ATTR_XRCD     = 0x2,
    IBV_QP_INIT_ATTR_RESERVED = 0x4
};

enum ibv_qp_open_attr_mask {
    IBV_QP_OPEN_ATTR_NUM      = 0x01,
    IBV_QP_OPEN_ATTR_XRCD     = 0x02,
    IBV_QP_OPEN_ATTR_CONTEXT  = 0x04,
    IBV_QP_OPEN_ATTR_TYPE     = 0x08,
    IBV_QP_OPEN_ATTR_RESERVED = 0x10
};

enum ibv_qp_attr_mask {
    IBV_QP_STATE               = 0x000001,
    IBV_QP_CUR_STATE           = 0x000002,
    IBV_QP_EN_SQD_ASYNC_NOTIFY = 0x000004,
    IBV_QP_ACCESS_FLAGS        = 0x000008,
    IBV_QP_PKEY_INDEX          = 0x000010,
    IBV_QP_PORT                = 0x000020,
    IBV_QP_QKEY                = 0x000040,
    IBV_QP_AV                  = 0x000080,
    IBV_QP_PATH_MTU            = 0x000100,
    IBV_QP_TIMEOUT             = 0x000200,
    IBV_QP_RETRY_CNT           = 0x000400,
    IBV_QP_RNR_RETRY           = 0x000800,
    IBV_QP_RQ_PSN              = 0x001000,
    IBV_QP_MAX_QP_RD_ATOMIC    = 0x002000,
    IBV_QP_ALT_PATH            = 0x004000,
    IBV_QP_MIN_RNR_TIMER       = 0x008000,
    IBV_QP_SQ_PSN              = 0x010000,
    IBV_QP_MAX_DEST_RD_ATOMIC  = 0x020000,
    IBV_QP_PATH_MIG_STATE      = 0x040000,
    IBV_QP_CAP                 = 0x080000,
    IBV_QP_DEST_QPN            = 0x100000
};

enum ibv_qp_state {
    IBV_QPS_RESET   = 0,
    IBV_QPS_INIT    = 1,
    IBV_QPS_RTR     = 2,
    IBV_QPS_RTS     = 3,
    IBV_QPS_SQD     = 4,
    IBV_QPS_SQE     = 5,
    IBV_QPS_ERR     = 6,
    IBV_QPS_UNKNOWN = 7
};

enum ibv_mig_state {
    IBV_MIG_MIGRATED = 0,
    IBV_MIG_REARM    = 1,
    IBV_MIG_ARMED    = 2
};

enum ibv_wr_opcode {
    IBV_WR_RDMA_WRITE           = 0,
    IBV_WR_RDMA_WRITE_WITH_IMM  = 1,
    IBV_WR_SEND                 = 2,
    IBV_WR_SEND_WITH_IMM        = 3,
    IBV_WR_RDMA_READ            = 4,
    IBV_WR_ATOMIC_CMP_AND_SWP   = 5,
    IBV_WR_ATOMIC_FETCH_AND_ADD = 6,
    IBV_WR_LOCAL_INV            = 7,
    IBV_WR_BIND_MW              = 8,
    IBV_WR_SEND_WITH_INV        = 9
};

enum ibv_send_flags {
    IBV_SEND_FENCE     = 0x1,
    IBV_SEND_SIGNALED  = 0x2,
    IBV_SEND_SOLICITED = 0x4,
    IBV_SEND_INLINE    = 0x8
};

enum ibv_flow_flags {
    IBV_FLOW_ATTR_FLAGS_ALLOW_LOOP_BACK = 0x1,
    IBV_FLOW_ATTR_FLAGS_DONT_TRAP       = 0x2
};

enum ibv_flow_attr_type {
    IBV_FLOW_ATTR_NORMAL      = 0,
    IBV_FLOW_ATTR_ALL_DEFAULT = 1,
    IBV_FLOW_ATTR_MC_DEFAULT  = 2
};

/* Lengths of the name/path arrays in struct ibv_device. */
enum {
    IBV_SYSFS_NAME_MAX = 64,
    IBV_SYSFS_PATH_MAX = 256
};

/* Bits of verbs_context.has_comp_mask. */
enum verbs_context_mask {
    VERBS_CONTEXT_XRCD     = 0x1,
    VERBS_CONTEXT_SRQ      = 0x2,
    VERBS_CONTEXT_QP       = 0x4,
    VERBS_CONTEXT_RESERVED = 0x8,
    VERBS_CONTEXT_EXP      = 0x4000000000000000
};

/* ------------------------------------------------------------------ */
/* Records                                                              */
/* ------------------------------------------------------------------ */

union ibv_gid {
    uint8_t  raw[16];
    struct {
        uint64_t subnet_prefix;
        uint64_t interface_id;
    } global;
};

struct ibv_device_attr {
    char                fw_ver[64];
    uint64_t            node_guid;
    uint64_t            sys_image_guid;
    uint64_t            max_mr_size;
    uint64_t            page_size_cap;
    uint32_t            vendor_id;
    uint32_t            vendor_part_id;
    uint32_t            hw_ver;
    int                 max_qp;
    int                 max_qp_wr;
    uint32_t            device_cap_flags;
    int                 max_sge;
    int                 max_sge_rd;
    int                 max_cq;
    int                 max_cqe;
    int                 max_mr;
    int                 max_pd;
    int                 max_qp_rd_atom;
    int                 max_ee_rd_atom;
    int                 max_res_rd_atom;
    int                 max_qp_init_rd_atom;
    int                 max_ee_init_rd_atom;
    enum ibv_atomic_cap atomic_cap;
    int                 max_ee;
    int                 max_rdd;
    int                 max_mw;
    int                 max_raw_ipv6_qp;
    int                 max_raw_ethy_qp;
    int                 max_mcast_grp;
    int                 max_mcast_qp_attach;
    int                 max_total_mcast_qp_attach;
    int                 max_ah;
    int                 max_fmr;
    int                 max_map_per_fmr;
    int                 max_srq;
    int                 max_srq_wr;
    int                 max_srq_sge;
    uint16_t            max_pkeys;
    uint8_t             local_ca_ack_delay;
    uint8_t             phys_port_cnt;
};

struct ibv_query_device_ex_input {
    uint32_t comp_mask;
};

struct ibv_odp_caps {
    uint64_t general_caps;
    struct {
        uint32_t rc_odp_caps;
        uint32_t uc_odp_caps;
        uint32_t ud_odp_caps;
    } per_transport_caps;
};

struct ibv_device_attr_ex {
    struct ibv_device_attr orig_attr;
    uint32_t               comp_mask;
    struct ibv_odp_caps    odp_caps;
};

struct ibv_port_attr {
    enum ibv_port_state state;
    enum ibv_mtu        max_mtu;
    enum ibv_mtu        active_mtu;
    int                 gid_tbl_len;
    uint32_t            port_cap_flags;
    uint32_t            max_msg_sz;
    uint32_t            bad_pkey_cntr;
    uint32_t            qkey_viol_cntr;
    uint16_t            pkey_tbl_len;
    uint16_t            lid;
    uint16_t            sm_lid;
    uint8_t             lmc;
    uint8_t             max_vl_num;
    uint8_t             sm_sl;
    uint8_t             subnet_timeout;
    uint8_t             init_type_reply;
    uint8_t             active_width;
    uint8_t             active_speed;
    uint8_t             phys_state;
    uint8_t             link_layer;
    uint8_t             reserved;
};

struct ibv_async_event {
    union {
        struct ibv_cq      *cq;
        struct ibv_qp      *qp;
        struct ibv_srq     *srq;
        struct ibv_exp_dct *dct;
        int                 port_num;
        uint32_t            xrc_qp_num;
    } element;
    enum ibv_event_type event_type;
};

struct ibv_wc {
    uint64_t           wr_id;
    enum ibv_wc_status status;
    enum ibv_wc_opcode opcode;
    uint32_t           vendor_err;
    uint32_t           byte_len;
    uint32_t           imm_data;       /* network order; or invalidated rkey */
    uint32_t           qp_num;
    uint32_t           src_qp;
    int                wc_flags;       /* enum ibv_wc_flags bits */
    uint16_t           pkey_index;
    uint16_t           slid;
    uint8_t            sl;
    uint8_t            dlid_path_bits;
};

struct ibv_mw_bind_info {
    struct ibv_mr *mr;
    uint64_t       addr;
    uint64_t       length;
    int            mw_access_flags;    /* enum ibv_access_flags bits */
};

struct ibv_pd {
    struct ibv_context *context;
    uint32_t            handle;
};

struct ibv_xrcd_init_attr {
    uint32_t comp_mask;
    int      fd;
    int      oflags;
};

struct ibv_xrcd {
    struct ibv_context *context;
};

struct ibv_mr {
    struct ibv_context *context;
    struct ibv_pd      *pd;
    void               *addr;
    size_t              length;
    uint32_t            handle;
    uint32_t            lkey;
    uint32_t            rkey;
};

struct ibv_mw {
    struct ibv_context *context;
    struct ibv_pd      *pd;
    uint32_t            rkey;
    uint32_t            handle;
    enum ibv_mw_type    type;
};

struct ibv_global_route {
    union ibv_gid dgid;
    uint32_t      flow_label;
    uint8_t       sgid_index;
    uint8_t       hop_limit;
    uint8_t       traffic_class;
};

struct ibv_ah_attr {
    struct ibv_global_route grh;
    uint16_t                dlid;
    uint8_t                 sl;
    uint8_t                 src_path_bits;
    uint8_t                 static_rate;   /* enum ibv_rate */
    uint8_t                 is_global;
    uint8_t                 port_num;
};

struct ibv_srq_attr {
    uint32_t max_wr;
    uint32_t max_sge;
    uint32_t srq_limit;
};

struct ibv_srq_init_attr {
    void               *srq_context;
    struct ibv_srq_attr attr;
};

struct ibv_srq_init_attr_ex {
    void               *srq_context;
    struct ibv_srq_attr attr;
    uint32_t            comp_mask;
    enum ibv_srq_type   srq_type;
    struct ibv_pd      *pd;
    struct ibv_xrcd    *xrcd;
    struct ibv_cq      *cq;
};

struct ibv_qp_cap {
    uint32_t max_send_wr;
    uint32_t max_recv_wr;
    uint32_t max_send_sge;
    uint32_t max_recv_sge;
    uint32_t max_inline_data;
};

struct ibv_qp_init_attr {
    void                  *qp_context;
    struct ibv_cq         *send_cq;
    struct ibv_cq         *recv_cq;
    struct ibv_srq        *srq;
    struct ibv_qp_cap      cap;
    enum ibv_qp_type       qp_type;
    int                    sq_sig_all;
    struct ibv_xrc_domain *xrc_domain; /* legacy XRC */
};

struct ibv_qp_init_attr_ex {
    void             *qp_context;
    struct ibv_cq    *send_cq;
    struct ibv_cq    *recv_cq;
    struct ibv_srq   *srq;
    struct ibv_qp_cap cap;
    enum ibv_qp_type  qp_type;
    int               sq_sig_all;
    uint32_t          comp_mask;
    struct ibv_pd    *pd;
    struct ibv_xrcd  *xrcd;
};

struct ibv_qp_open_attr {
    uint32_t         comp_mask;
    uint32_t         qp_num;
    struct ibv_xrcd *xrcd;
    void            *qp_context;
    enum ibv_qp_type qp_type;
};

struct ibv_qp_attr {
    enum ibv_qp_state  qp_state;
    enum ibv_qp_state  cur_qp_state;
    enum ibv_mtu       path_mtu;
    enum ibv_mig_state path_mig_state;
    uint32_t           qkey;
    uint32_t           rq_psn;
    uint32_t           sq_psn;
    uint32_t           dest_qp_num;
    int                qp_access_flags;
    struct ibv_qp_cap  cap;
    struct ibv_ah_attr ah_attr;
    struct ibv_ah_attr alt_ah_attr;
    uint16_t           pkey_index;
    uint16_t           alt_pkey_index;
    uint8_t            en_sqd_async_notify;
    uint8_t            sq_draining;
    uint8_t            max_rd_atomic;
    uint8_t            max_dest_rd_atomic;
    uint8_t            min_rnr_timer;
    uint8_t            port_num;
    uint8_t            timeout;
    uint8_t            retry_cnt;
    uint8_t            rnr_retry;
    uint8_t            alt_port_num;
    uint8_t            alt_timeout;
};

struct ibv_sge {
    uint64_t addr;
    uint32_t length;
    uint32_t lkey;
};

struct ibv_send_wr {
    uint64_t            wr_id;
    struct ibv_send_wr *next;
    struct ibv_sge     *sg_list;
    int                 num_sge;
    enum ibv_wr_opcode  opcode;
    int                 send_flags;   /* enum ibv_send_flags bits */
    uint32_t            imm_data;     /* network order */
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
    struct {
        struct ibv_mw          *mw;
        uint32_t                rkey;
        struct ibv_mw_bind_info bind_info;
    } bind_mw;
};

struct ibv_recv_wr {
    uint64_t            wr_id;
    struct ibv_recv_wr *next;
    struct ibv_sge     *sg_list;
    int                 num_sge;
};

struct ibv_mw_bind {
    uint64_t                wr_id;
    int                     send_flags;
    struct ibv_mw_bind_info bind_info;
};

struct ibv_srq {
    struct ibv_context    *context;
    void                  *srq_context;
    struct ibv_pd         *pd;
    uint32_t               handle;
    pthread_mutex_t        mutex;
    pthread_cond_t         cond;
    uint32_t               events_completed;
    /* padding that mirrors struct ibv_srq_legacy */
    uint32_t               xrc_srq_num_bin_compat_padding;
    struct ibv_xrc_domain *xrc_domain_bin_compat_padding;
    struct ibv_cq         *xrc_cq_bin_compat_padding;
    void                  *ibv_srq_padding;
    /* legacy XRC fields */
    uint32_t               xrc_srq_num;
    struct ibv_xrc_domain *xrc_domain;
    struct ibv_cq         *xrc_cq;
};

struct ibv_qp {
    struct ibv_context *context;
    void               *qp_context;
    struct ibv_pd      *pd;
    struct ibv_cq      *send_cq;
    struct ibv_cq      *recv_cq;
    struct ibv_srq     *srq;
    uint32_t            handle;
    uint32_t            qp_num;
    enum ibv_qp_state   state;
    enum ibv_qp_type    qp_type;
    pthread_mutex_t     mutex;
    pthread_cond_t      cond;
    uint32_t            events_completed;
};

struct ibv_comp_channel {
    struct ibv_context *context;
    int                 fd;
    int                 refcnt;
};

struct ibv_cq {
    struct ibv_context      *context;
    struct ibv_comp_channel *channel;
    void                    *cq_context;
    uint32_t                 handle;
    int                      cqe;
    pthread_mutex_t          mutex;
    pthread_cond_t           cond;
    uint32_t                 comp_events_completed;
    uint32_t                 async_events_completed;
};

struct ibv_ah {
    struct ibv_context *context;
    struct ibv_pd      *pd;
    uint32_t            handle;
};

/* Flow specifications follow this header in memory. */
struct ibv_flow_attr {
    uint32_t                comp_mask;
    enum ibv_flow_attr_type type;
    uint16_t                size;
    uint16_t                priority;
    uint8_t                 num_of_specs;
    uint8_t                 port;
    uint32_t                flags;
};

struct ibv_flow {
    uint32_t            comp_mask;
    struct ibv_context *context;
    uint32_t            handle;
};

struct ibv_device_ops {
    struct ibv_context *(*alloc_context)(struct ibv_device *device, int cmd_fd);
    void                (*free_context)(struct ibv_context *context);
};

struct ibv_device {
    struct ibv_device_ops   ops;
    enum ibv_node_type      node_type;
    enum ibv_transport_type transport_type;
    char                    name[IBV_SYSFS_NAME_MAX];       /* kernel device */
    char                    dev_name[IBV_SYSFS_NAME_MAX];   /* uverbs device */
    char                    dev_path[IBV_SYSFS_PATH_MAX];
    char                    ibdev_path[IBV_SYSFS_PATH_MAX];
};

/* Provider entry points reached through ibv_context.ops. */
struct ibv_context_ops {
    int             (*query_device)(struct ibv_context *context,
                                    struct ibv_device_attr *device_attr);
    int             (*query_port)(struct ibv_context *context, uint8_t port_num,
                                  struct ibv_port_attr *port_attr);
    struct ibv_pd  *(*alloc_pd)(struct ibv_context *context);
    int             (*dealloc_pd)(struct ibv_pd *pd);
    struct ibv_mr  *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t length,
                              int access);
    int             (*rereg_mr)(struct ibv_mr *mr, int flags, struct ibv_pd *pd,
                                void *addr, size_t length, int access);
    int             (*dereg_mr)(struct ibv_mr *mr);
    struct ibv_mw  *(*alloc_mw)(struct ibv_pd *pd, enum ibv_mw_type type);
    int             (*bind_mw)(struct ibv_qp *qp, struct ibv_mw *mw,
                               struct ibv_mw_bind *mw_bind);
    int             (*dealloc_mw)(struct ibv_mw *mw);
    struct ibv_cq  *(*create_cq)(struct ibv_context *context, int cqe,
                                 struct ibv_comp_channel *channel,
                                 int comp_vector);
    int             (*poll_cq)(struct ibv_cq *cq, int num_entries,
                               struct ibv_wc *wc);
    int             (*req_notify_cq)(struct ibv_cq *cq, int solicited_only);
    void            (*cq_event)(struct ibv_cq *cq);
    int             (*resize_cq)(struct ibv_cq *cq, int cqe);
    int             (*destroy_cq)(struct ibv_cq *cq);
    struct ibv_srq *(*create_srq)(struct ibv_pd *pd,
                                  struct ibv_srq_init_attr *srq_init_attr);
    int             (*modify_srq)(struct ibv_srq *srq,
                                  struct ibv_srq_attr *srq_attr,
                                  int srq_attr_mask);
    int             (*query_srq)(struct ibv_srq *srq,
                                 struct ibv_srq_attr *srq_attr);
    int             (*destroy_srq)(struct ibv_srq *srq);
    int             (*post_srq_recv)(struct ibv_srq *srq,
                                     struct ibv_recv_wr *recv_wr,
                                     struct ibv_recv_wr **bad_recv_wr);
    struct ibv_qp  *(*create_qp)(struct ibv_pd *pd,
                                 struct ibv_qp_init_attr *attr);
    int             (*query_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr,
                                int attr_mask,
                                struct ibv_qp_init_attr *init_attr);
    int             (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr,
                                 int attr_mask);
    int             (*destroy_qp)(struct ibv_qp *qp);
    int             (*post_send)(struct ibv_qp *qp, struct ibv_send_wr *wr,
                                 struct ibv_send_wr **bad_wr);
    int             (*post_recv)(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                                 struct ibv_recv_wr **bad_wr);
    struct ibv_ah  *(*create_ah)(struct ibv_pd *pd, struct ibv_ah_attr *attr);
    int             (*destroy_ah)(struct ibv_ah *ah);
    int             (*attach_mcast)(struct ibv_qp *qp, const union ibv_gid *gid,
                                    uint16_t lid);
    int             (*detach_mcast)(struct ibv_qp *qp, const union ibv_gid *gid,
                                    uint16_t lid);
    void            (*async_event)(struct ibv_async_event *event);
};

struct ibv_context {
    struct ibv_device     *device;
    struct ibv_context_ops ops;
    int                    cmd_fd;
    int                    async_fd;
    int                    num_comp_vectors;
    pthread_mutex_t        mutex;
    void                  *abi_compat;   /* __VERBS_ABI_IS_EXTENDED if extended */
};

/*
 * Extended context.  It is allocated directly in front of the
 * struct ibv_context handed to applications (that context is its last
 * member); newer entry points are added at the top, and sz records how
 * many bytes of the record, counted back from the end, really exist.
 */
struct verbs_context {
    int              (*query_device_ex)(struct ibv_context *context,
                                        const struct ibv_query_device_ex_input *input,
                                        struct ibv_device_attr_ex *attr,
                                        size_t attr_size);
    int              (*_reserved_2)(void);
    int              (*destroy_flow)(struct ibv_flow *flow);
    int              (*_reserved_1)(void);
    struct ibv_flow *(*create_flow)(struct ibv_qp *qp,
                                    struct ibv_flow_attr *flow_attr);
    struct ibv_qp   *(*open_qp)(struct ibv_context *context,
                                struct ibv_qp_open_attr *attr);
    struct ibv_qp   *(*create_qp_ex)(struct ibv_context *context,
                                     struct ibv_qp_init_attr_ex *qp_init_attr_ex);
    int              (*get_srq_num)(struct ibv_srq *srq, uint32_t *srq_num);
    struct ibv_srq  *(*create_srq_ex)(struct ibv_context *context,
                                      struct ibv_srq_init_attr_ex *srq_init_attr_ex);
    struct ibv_xrcd *(*open_xrcd)(struct ibv_context *context,
                                  struct ibv_xrcd_init_attr *xrcd_init_attr);
    int              (*close_xrcd)(struct ibv_xrcd *xrcd);
    uint64_t           has_comp_mask;   /* enum verbs_context_mask bits */
    size_t             sz;
    struct ibv_context context;
};

/* ------------------------------------------------------------------ */
/* Locating the extended context                                        */
/* ------------------------------------------------------------------ */

/* The verbs_context wrapping ctx, or NULL when ctx is not extended. */
static inline struct verbs_context *verbs_get_ctx(struct ibv_context *ctx)
{
    if (ctx == NULL || ctx->abi_compat != __VERBS_ABI_IS_EXTENDED)
        return NULL;
    return container_of(ctx, struct verbs_context, context);
}

/* The verbs_context of ctx if the provider's record reaches member op
 * and op is set, else NULL.  Helpers private to these headers are macros
 * (GNU statement expressions), never functions: the generator binds every
 * function the headers declare, and these are not verbs (headers/NOTICE). */
#define verbs_get_ctx_op(ctx, op) ({                                      \
    struct verbs_context *verbsexp_vc_ = verbs_get_ctx(ctx);              \
    (verbsexp_vc_ != NULL &&                                              \
     verbsexp_vc_->sz >= sizeof(*verbsexp_vc_) -                          \
                         offsetof(struct verbs_context, op) &&            \
     verbsexp_vc_->op != NULL) ? verbsexp_vc_ : NULL;                     \
})

/* ------------------------------------------------------------------ */
/* Library entry points                                                 */
/* ------------------------------------------------------------------ */

struct ibv_device **ibv_get_device_list(int *num_devices);
void ibv_free_device_list(struct ibv_device **list);
const char *ibv_get_device_name(struct ibv_device *device);
uint64_t ibv_get_device_guid(struct ibv_device *device);
struct ibv_context *ibv_open_device(struct ibv_device *device);
int ibv_close_device(struct ibv_context *context);

int ibv_get_async_event(struct ibv_context *context,
                        struct ibv_async_event *event);
void ibv_ack_async_event(struct ibv_async_event *event);

int ibv_query_device(struct ibv_context *context,
                     struct ibv_device_attr *device_attr);
int ibv_query_port(struct ibv_context *context, uint8_t port_num,
                   struct ibv_port_attr *port_attr);

/* Pre-clears the fields an older library would leave untouched, then
 * asks the library.  ibv_query_port() is routed through this. */
static inline int ___ibv_query_port(struct ibv_context *context,
                                    uint8_t port_num,
                                    struct ibv_port_attr *port_attr)
{
    port_attr->reserved   = 0;
    port_attr->link_layer = IBV_LINK_LAYER_UNSPECIFIED;
    return ibv_query_port(context, port_num, port_attr);
}

#define ibv_query_port(ctx_, port_, attr_) ___ibv_query_port(ctx_, port_, attr_)

int ibv_query_gid(struct ibv_context *context, uint8_t port_num,
                  int index, union ibv_gid *gid);
int ibv_query_pkey(struct ibv_context *context, uint8_t port_num,
                   int index, uint16_t *pkey);

struct ibv_pd *ibv_alloc_pd(struct ibv_context *context);
int ibv_dealloc_pd(struct ibv_pd *pd);

struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr,
                          size_t length, int access);
int ibv_dereg_mr(struct ibv_mr *mr);

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context);
int ibv_destroy_comp_channel(struct ibv_comp_channel *channel);

struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe,
                             void *cq_context,
                             struct ibv_comp_channel *channel,
                             int comp_vector);
int ibv_resize_cq(struct ibv_cq *cq, int cqe);
int ibv_destroy_cq(struct ibv_cq *cq);
int ibv_get_cq_event(struct ibv_comp_channel *channel,
                     struct ibv_cq **cq, void **cq_context);
void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents);

/* Data-path verbs dispatch straight to the provider. */
static inline int ibv_poll_cq(struct ibv_cq *cq, int num_entries,
                              struct ibv_wc *wc)
{
    return cq->context->ops.poll_cq(cq, num_entries, wc);
}

static inline int ibv_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
    return cq->context->ops.req_notify_cq(cq, solicited_only);
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd,
                             struct ibv_qp_init_attr *qp_init_attr);
int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr,
                  int attr_mask);
int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr,
                 int attr_mask, struct ibv_qp_init_attr *init_attr);
int ibv_destroy_qp(struct ibv_qp *qp);

static inline int ibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
                                struct ibv_send_wr **bad_wr)
{
    return qp->context->ops.post_send(qp, wr, bad_wr);
}

static inline int ibv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                                struct ibv_recv_wr **bad_wr)
{
    return qp->context->ops.post_recv(qp, wr, bad_wr);
}

struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr);
int ibv_destroy_ah(struct ibv_ah *ah);

int ibv_fork_init(void);

const char *ibv_wc_status_str(enum ibv_wc_status status);
const char *ibv_node_type_str(enum ibv_node_type node_type);
const char *ibv_port_state_str(enum ibv_port_state port_state);
const char *ibv_event_type_str(enum ibv_event_type event);

#ifdef __cplusplus
}
#endif

/* As in the original layout, the experimental API comes along. */
#include <infiniband/verbs_exp.h>

#endif /* VERBSEXP_INSTALLED_VERBS */
#endif /* INFINIBAND_VERBS_H */
