/*
 * verbsexp: legacy XRC compatibility records (restated ABI subset).
 * See ../NOTICE for what this file is and is not.
 */
#ifndef INFINIBAND_OFA_VERBS_H
#define INFINIBAND_OFA_VERBS_H

#include <stdint.h>
#include <pthread.h>

struct ibv_context;
struct ibv_pd;
struct ibv_cq;

/* Handle value that marks an SRQ as a legacy XRC one. */
#define LEGACY_XRC_SRQ_HANDLE 0xffffffff

struct ibv_xrc_domain {
    struct ibv_context    *context;
    uint32_t               handle;
};

/* Older SRQ layout; the trailing three fields share offsets with the
 * matching legacy fields at the end of struct ibv_srq. */
struct ibv_srq_legacy {
    struct ibv_context    *context;
    void                  *srq_context;
    struct ibv_pd         *pd;
    uint32_t               handle;
    uint32_t               events_completed;
    uint32_t               xrc_srq_num_bin_compat;
    struct ibv_xrc_domain *xrc_domain_bin_compat;
    struct ibv_cq         *xrc_cq_bin_compat;
    pthread_mutex_t        mutex;
    pthread_cond_t         cond;
    void                  *ibv_srq;
    uint32_t               xrc_srq_num;
    struct ibv_xrc_domain *xrc_domain;
    struct ibv_cq         *xrc_cq;
};

#endif /* INFINIBAND_OFA_VERBS_H */
