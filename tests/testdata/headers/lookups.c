/* Exercises the private helpers of headers/ (macros since they must not
 * become Go API) through the inline verbs that use them: a context laid
 * out as a provider lays it out, verbs_context_exp | verbs_context, with
 * the op lookups' three outcomes (member set, member NULL, record too
 * short to reach the member) and the comp_mask refusal. Only members
 * every MLNX_OFED release has are used, so the real headers run it too. Prints one line
 * per failed check and exits 1 if any failed. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <infiniband/verbs_exp.h>

static int failed;
#define CHECK(cond)                                                  \
    do {                                                             \
        if (!(cond)) {                                               \
            printf("%s:%d: check failed: %s\n", __FILE__, __LINE__,  \
                   #cond);                                           \
            failed = 1;                                              \
        }                                                            \
    } while (0)

static struct {
    struct verbs_context_exp exp;
    struct verbs_context vc;
} provider;

static int post_task_calls;

static int fake_post_task(struct ibv_context *ctx, struct ibv_exp_task *task,
                          struct ibv_exp_task **bad)
{
    (void)ctx; (void)task; (void)bad;
    post_task_calls++;
    return 0;
}

static struct ibv_qp *fake_open_qp(struct ibv_context *ctx,
                                   struct ibv_qp_open_attr *attr)
{
    (void)ctx; (void)attr;
    return NULL;
}

int main(void)
{
    struct ibv_context *ctx = &provider.vc.context;
    struct ibv_exp_task task;
    struct ibv_exp_task *bad = NULL;
    const size_t full_exp = sizeof(struct verbs_context_exp);
    const size_t full_vc = sizeof(struct verbs_context);

    memset(&task, 0, sizeof(task));
    ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
    provider.vc.sz = full_vc;
    provider.vc.has_comp_mask = VERBS_CONTEXT_EXP;
    provider.exp.sz = full_exp;

    /* The lookups find the records where the provider put them. */
    CHECK(verbs_get_ctx(ctx) == &provider.vc);
    CHECK(verbs_get_exp_ctx(ctx) == &provider.exp);

    /* verbs_get_ctx_op: NULL member, then set, then out of reach. */
    CHECK(verbs_get_ctx_op(ctx, open_qp) == NULL);
    provider.vc.open_qp = fake_open_qp;
    CHECK(verbs_get_ctx_op(ctx, open_qp) == &provider.vc);
    provider.vc.sz = full_vc - offsetof(struct verbs_context, open_qp) - 1;
    /* A shorter verbs_context also moves the exp record: only the op
     * lookup of verbs_context is asked here. */
    CHECK(verbs_get_ctx_op(ctx, open_qp) == NULL);
    provider.vc.sz = full_vc;

    /* verbs_get_exp_ctx_op through ibv_exp_post_task. */
    CHECK(ibv_exp_post_task(ctx, &task, &bad) == ENOSYS);
    provider.exp.lib_exp_post_task = fake_post_task;
    CHECK(ibv_exp_post_task(ctx, &task, &bad) == 0 && post_task_calls == 1);
    provider.exp.sz = full_exp - offsetof(struct verbs_context_exp, lib_exp_post_task) - 1;
    CHECK(ibv_exp_post_task(ctx, &task, &bad) == ENOSYS && post_task_calls == 1);
    provider.exp.sz = full_exp - offsetof(struct verbs_context_exp, lib_exp_post_task);
    CHECK(ibv_exp_post_task(ctx, &task, &bad) == 0 && post_task_calls == 2);

    /* verbsexp_comp_mask_ok: a reserved bit is EINVAL, errno too, and the
     * provider is not called. */
    task.comp_mask = IBV_EXP_TASK_RESERVED;
    errno = 0;
    CHECK(ibv_exp_post_task(ctx, &task, &bad) == EINVAL && errno == EINVAL);
    CHECK(post_task_calls == 2);
    task.comp_mask = IBV_EXP_TASK_RESERVED - 1;
    CHECK(ibv_exp_post_task(ctx, &task, &bad) == 0 && post_task_calls == 3);

    /* Not extended: every lookup is NULL. */
    ctx->abi_compat = NULL;
    CHECK(verbs_get_ctx(ctx) == NULL && verbs_get_exp_ctx(ctx) == NULL);
    CHECK(ibv_exp_post_task(ctx, &task, &bad) == ENOSYS);

    if (!failed)
        printf("ok\n");
    return failed;
}
