/*
 * device.c — opening a device backend by name. The only place that maps "cpu"/"cuda" to a
 * backend; the CUDA entry points exist in every build (kernels/cuda/absent.c says
 * UNSUPPORTED when CUDA was not built).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "kernels/device.h"

zinc_status zdev_open(const char *name, int threads, int device_index, zdev_t **out)
{
    if (!out) return zerr_thread(ZINC_ERR_INVALID_ARG, "zdev_open: out is NULL");
    *out = NULL;
    if (!name || !strcmp(name, "cpu")) return zdev_cpu_open(threads, out);
    if (!strcmp(name, "cuda")) {
        zinc_status s = zdev_cuda_open(device_index, out);
        /* absent.c sets no message; say what the user can do about it. */
        if (s == ZINC_ERR_UNSUPPORTED && !zdev_cuda_version())
            return zerr_thread(s, "zdev_open: device 'cuda' is not available: this zinc was "
                               "built without CUDA (rebuild with nvcc present, -DZINC_CUDA=ON), "
                               "or use device 'cpu'");
        return s;
    }
    return zerr_thread(ZINC_ERR_INVALID_ARG, "zdev_open: unknown device '%s'; use 'cpu' or "
                       "'cuda'", name);
}

void zdev_close(zdev_t *d)
{
    if (!d) return;
    int users = __atomic_load_n(&d->users, __ATOMIC_ACQUIRE);
    if (users > 0) {
        fprintf(stderr, "zinc: internal error: closing the %s device while %d comm(s) still use "
                "it; destroy the comm first\n", d->iface ? d->iface->name : "?", users);
        abort();
    }
    if (d->iface && d->iface->close) d->iface->close(d);
}

void zdev_use(zdev_t *d)
{
    if (d) __atomic_add_fetch(&d->users, 1, __ATOMIC_ACQ_REL);
}

void zdev_unuse(zdev_t *d)
{
    if (d) __atomic_sub_fetch(&d->users, 1, __ATOMIC_ACQ_REL);
}

zinc_status zdev_set_limit(zdev_t *d, uint64_t bytes)
{
    if (!d || !d->iface) return zerr_thread(ZINC_ERR_INVALID_ARG, "zdev_set_limit: no device");
    if (!d->iface->counts_bytes)
        return zerr_thread(ZINC_ERR_UNSUPPORTED, "the %s device does not count its allocations, "
                           "so it cannot enforce a memory limit (zinc.device_memory_limit)", d->iface->name);
    d->limit = bytes;
    return ZINC_OK;
}
