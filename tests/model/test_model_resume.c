/*
 * test_model_resume.c — train -> stop -> resume ends exactly where an uninterrupted run ends.
 *
 * Run U trains 4 local ranks under ZeRO-3 (bf16) for 16 steps and saves at step 8 (the client
 * blob carries the data position). Run R is a fresh process state: new world, new engines, the
 * model initialised with a different seed (so nothing can leak from initialisation), loads the
 * step-8 checkpoint and trains to step 16. Steps 9-16 must give the same losses and the final
 * fp32 master weights must be identical bit for bit.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "trainer.h"


int main(void)
{
    char dir[] = "/tmp/zinc-model-resume-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    static zt_train_job u, r;
    u.config_json = zt_zero3_bf16_config;
    u.spec = "L1-D32-H2-T32";
    u.ranks = 4;
    u.steps = 16;
    u.seed = 5;
    u.save_dir = dir;
    u.save_at = 8;
    u.ckpt_save = zinc_ckpt_save;
    u.ckpt_wait = zinc_ckpt_wait;
    u.ckpt_load = zinc_ckpt_load;
    zt_train(&u);
    ZT_CHECK(u.failures == 0, "uninterrupted run failed");

    r = u;
    r.weights = NULL;
    r.save_dir = NULL;
    r.save_at = 0;
    r.resume_dir = dir;
    r.resume_tag = "s8";
    r.init_seed = 999;
    zt_train(&r);
    ZT_CHECK(r.failures == 0, "resumed run failed");
    ZT_CHECK(r.start_step == 8, "resumed at step %d, expected 8", r.start_step);
    int same = 1;
    for (int s = 9; s <= 16; s++) {
        same &= !memcmp(&u.loss[s], &r.loss[s], sizeof(double));
        printf("step %2d  uninterrupted %.9f  resumed %.9f\n", s, u.loss[s], r.loss[s]);
    }
    ZT_CHECK(same, "losses of steps 9-16 differ");
    ZT_CHECK(u.weights && r.weights && u.nweights == r.nweights &&
                 !memcmp(u.weights, r.weights, u.nweights * sizeof(float)),
             "final weights differ");
    ZT_CHECK(isnan(r.loss[8]), "the resumed run ran step 8 again");
    zt_train_free(&u);
    zt_train_free(&r);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return zt_finish("test_model_resume");
}
