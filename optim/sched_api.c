/*
 * sched_api.c — zinc_schedule_eval: DeepSpeed's scheduler classes without an engine. A front-end
 * offering deepspeed.runtime.lr_schedules' classes over a caller's optimizer asks here for each
 * group's lr, so that the formulas live once (sched.c) and read the same config rules.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "config/config.h"
#include "optim/optim.h"

/* Every error line of a rejected section in one message (a section has few). */
static zinc_status rejected(const zcfg_diag *d)
{
    char msg[1024] = "";
    size_t n = 0;
    for (int i = 0; i < d->nerrors && n < sizeof msg - 1; i++)
        n += (size_t)snprintf(msg + n, sizeof msg - n, "%s%s", i ? "; " : "", d->errors[i]);
    return zerr_thread(ZINC_ERR_CONFIG, "zinc_schedule_eval: %s",
                       d->nerrors ? msg : "scheduler section rejected");
}

zinc_status zinc_schedule_eval(const char *scheduler_json, double base_lr,
                               int64_t last_batch_iteration, double *lr, double *beta1,
                               double *beta2, int *sets_betas)
{
    if (!scheduler_json || !lr || !beta1 || !beta2 || !sets_betas)
        return zerr_thread(ZINC_ERR_INVALID_ARG, "zinc_schedule_eval: %s is NULL",
                           !scheduler_json ? "scheduler_json" : !lr ? "lr"
                           : !beta1 ? "beta1" : !beta2 ? "beta2" : "sets_betas");
    if (!isfinite(base_lr) || base_lr < 0)
        return zerr_thread(ZINC_ERR_INVALID_ARG,
                           "zinc_schedule_eval: base_lr %g: expected a finite value >= 0",
                           base_lr);
    /* DeepSpeed's classes start at -1; below it they give values no schedule defines (OneCycle
     * runs its cycle backwards). The bound also keeps it + 1 from overflowing. */
    if (last_batch_iteration < -1 || last_batch_iteration == INT64_MAX)
        return zerr_thread(ZINC_ERR_INVALID_ARG,
                           "zinc_schedule_eval: last_batch_iteration %lld: expected -1 (the "
                           "start) up to 2^63 - 2",
                           (long long)last_batch_iteration);
    zcfg_sched s;
    zcfg_diag diag = {0};
    zinc_status st = zcfg_parse_scheduler_text(scheduler_json, base_lr, &s, &diag);
    if (st == ZINC_ERR_CONFIG) st = rejected(&diag);
    else if (st != ZINC_OK)
        st = zerr_thread(st, "zinc_schedule_eval: %s",
                         diag.nerrors ? diag.errors[0] : "out of memory");
    zcfg_diag_free(&diag);
    if (st != ZINC_OK) return st;
    /* zsched_lr counts applied updates: update k runs with the value DeepSpeed's scheduler
     * holds at last_batch_iteration k - 1 (sched.c); at -1 the constructor's value, which is
     * every class's get_lr() there too. OneCycle's get_mom() at -1 is not what its constructor
     * writes, so the betas come from the formula at the position itself. */
    *lr = zsched_lr(&s, base_lr, last_batch_iteration + 1);
    *sets_betas = zsched_sets_betas(&s);
    if (*sets_betas) {
        *beta1 = zsched_get_mom(&s, *beta1, last_batch_iteration);
        *beta2 = zsched_beta2(&s, *beta2, last_batch_iteration + 1);
    }
    return ZINC_OK;
}
