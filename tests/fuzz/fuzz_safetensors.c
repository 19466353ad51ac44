/*
 * fuzz_safetensors.c — the safetensors reader (ckpt/safetensors.c: zst_open, zst_read_f32) on
 * arbitrary files. zst_open reads a path, so each input is written to an anonymous in-memory
 * file (memfd_create) opened through /proc/self/fd. Contract: OK, CORRUPT or NOMEM with a
 * message; an opened file's entries lie inside the data section, and every supported tensor
 * reads back as fp32.
 */
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (4u << 20)) return 0;
    int fd = memfd_create("fuzz.safetensors", MFD_CLOEXEC);
    if (fd < 0) return 0;
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(fd, data + done, size - done);
        if (w <= 0) break;
        done += (size_t)w;
    }
    char path[64], err[ZCK_ERR] = "";
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    zst_file *f = NULL;
    zinc_status s = done == size ? zst_open(path, &f, err) : ZINC_ERR_IO;
    FUZZ_CHECK(s == ZINC_OK || ((s == ZINC_ERR_CORRUPT || s == ZINC_ERR_NOMEM) && err[0]) ||
                   done != size,
               "zst_open: %s: \"%s\"", zinc_status_string(s), err);
    if (s == ZINC_OK) {
        uint64_t dsz = (uint64_t)size - f->data_off;
        for (int i = 0; i < f->n; i++) {
            const zst_entry *e = &f->e[i];
            FUZZ_CHECK(e->begin <= e->end && e->end <= dsz, "entry %d [%llu, %llu) of %llu", i,
                       (unsigned long long)e->begin, (unsigned long long)e->end,
                       (unsigned long long)dsz);
            FUZZ_CHECK(zst_find(f, e->name) >= 0, "entry %s not found by name", e->name);
            if (!e->supported || e->numel > (1u << 20)) continue;
            float *dst = malloc(e->numel ? e->numel * sizeof *dst : 1);
            if (!dst) continue;
            zinc_status r = zst_read_f32(f, i, 0, e->numel, dst, err);
            FUZZ_CHECK(r == ZINC_OK, "reading entry %s: %s", e->name, err);
            free(dst);
        }
        zst_close(f);
    }
    close(fd);
    return 0;
}
