/* The helpers of common.h. */
#include "common.h"

#include <string.h>

unsigned checks;

const char *last_error(void) {
    static char buf[1024];
    leechio_last_error_message(buf, sizeof buf, NULL);
    return buf;
}

/* ---- the images' contents ---- */

uint64_t pattern_word(uint64_t addr) {
    uint64_t z = addr + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint8_t pattern_byte(uint64_t addr) {
    return (uint8_t)(pattern_word(addr & ~7ull) >> (8 * (addr & 7)));
}

uint8_t *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *bytes = malloc((size_t)n);
    CHECK(bytes && fread(bytes, 1, (size_t)n, f) == (size_t)n, "cannot read %s", path);
    fclose(f);
    *size = (size_t)n;
    return bytes;
}

/* ---- parameters ---- */

size_t unhex(const char *hex, uint8_t *out, size_t cap) {
    if (!strcmp(hex, "-")) return 0;
    size_t n = strlen(hex) / 2;
    CHECK(n <= cap, "hex of %zu bytes", n);
    for (size_t i = 0; i < n; i++) {
        unsigned byte;
        CHECK(sscanf(hex + 2 * i, "%2x", &byte) == 1, "bad hex %s", hex);
        out[i] = (uint8_t)byte;
    }
    return n;
}

struct params P;

void read_params(const char *path) {
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "cannot open %s", path);
    char key[32], value[4096], pa[64];
    while (fscanf(f, "%31s %4095s", key, value) == 2) {
        if (!strcmp(key, "version")) snprintf(P.version, sizeof P.version, "%s", value);
        else if (!strcmp(key, "phys")) snprintf(P.phys, sizeof P.phys, "%s", value);
        else if (!strcmp(key, "virt")) snprintf(P.virt, sizeof P.virt, "%s", value);
        else if (!strcmp(key, "dtb")) P.dtb = strtoull(value, NULL, 0);
        else if (!strcmp(key, "dtb5")) P.dtb5 = strtoull(value, NULL, 0);
        else if (!strcmp(key, "vbase")) P.vbase = strtoull(value, NULL, 0);
        else if (!strcmp(key, "vsize")) P.vsize = strtoull(value, NULL, 0);
        else if (!strcmp(key, "vseed")) P.vseed = strtoull(value, NULL, 0);
        else if (!strcmp(key, "vtop")) {
            CHECK(P.nvtop < MAX_VTOP && fscanf(f, "%63s", pa) == 1, "bad vtop line");
            P.vtop_va[P.nvtop] = strtoull(value, NULL, 0);
            P.vtop_mapped[P.nvtop] = strcmp(pa, "none") != 0;
            P.vtop_pa[P.nvtop] = P.vtop_mapped[P.nvtop] ? strtoull(pa, NULL, 0) : 0;
            P.nvtop++;
        } else CHECK(0, "unknown parameter %s", key);
    }
    fclose(f);
}

/* ---- devices and fragments ---- */

uint64_t scatter_calls(const leechio_device *d, uint32_t kind) {
    uint64_t n = 0;
    CHECK_STATUS(leechio_device_call_count(d, kind, &n), LEECHIO_OK);
    return n;
}

leechio_device *open_device(const char *fmt, const char *path) {
    char spec[4200];
    snprintf(spec, sizeof spec, fmt, path);
    leechio_device *d = NULL;
    CHECK_STATUS(leechio_device_open(spec, NULL, NULL, &d), LEECHIO_OK);
    CHECK(d != NULL, "open returned no handle");
    return d;
}

leechio_kernel *find_kernel(const leechio_device *d) {
    leechio_kernel_hints hints;
    memset(&hints, 0, sizeof hints);
    hints.no_cache = true;
    leechio_kernel *k = NULL;
    CHECK_STATUS(leechio_kernel_find(d, &hints, &k), LEECHIO_OK);
    CHECK(k != NULL, "no kernel handle");
    return k;
}

void collect(void *context, const leechio_fragment *fragment) {
    frags *fs = context;
    CHECK(fs->n < MAX_FRAGS, "too many fragments");
    fs->f[fs->n++] = *fragment;
}

void check_fragments(const frags *fs, size_t op, size_t len, const run *expect) {
    size_t at = 0, k = 0;
    for (size_t i = 0; i < fs->n; i++) {
        const leechio_fragment *f = &fs->f[i];
        if (f->op != op) continue;
        CHECK(f->offset == at, "op %zu: fragment at +%#zx, expected +%#zx", op, f->offset, at);
        CHECK(expect[k].len != 0, "op %zu: more fragments than expected", op);
        CHECK(f->length == expect[k].len && f->status == expect[k].status,
              "op %zu fragment %zu: +%#zx len %#zx status %u, expected len %#zx status %u", op,
              k, f->offset, f->length, (unsigned)f->status, expect[k].len,
              (unsigned)expect[k].status);
        at += f->length;
        k++;
    }
    CHECK(expect[k].len == 0, "op %zu: only %zu fragments", op, k);
    CHECK(at == len, "op %zu: fragments cover %#zx of %#zx bytes", op, at, len);
}
