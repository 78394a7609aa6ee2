/*
 * verbsexp: legacy XRC compatibility records (restated ABI subset).
 * See ../NOTICE for what this file is and is not.
 */
#ifndef INFINIBAND_OFA_VERBS_H
/* MLNX_OFED's own ofa_verbs.h where its verbs_exp.h is installed (see verbs_exp.h). */
#if !defined(VERBSEXP_RESTATEMENT_ONLY) && defined(__has_include_next)
#if __has_include_next(<infiniband/verbs_exp.h>) && __has_include_next(<infiniband/ofa_verbs.h>) && \
    !__has_include_next(<infiniband/verbsexp_restated.h>)
#define VERBSEXP_INSTALLED_OFA_VERBS 1
#endif
#endif

#ifdef VERBSEXP_INSTALLED_OFA_VERBS
#undef VERBSEXP_INSTALLED_OFA_VERBS /* not seen by the headers deferred to */
#include_next <infiniband/ofa_verbs.h>
#else
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

#endif /* VERBSEXP_INSTALLED_OFA_VERBS */
#endif /* INFINIBAND_OFA_VERBS_H */
