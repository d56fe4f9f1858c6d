/*
 * What the C test programs share: checks that stop at the first mismatch,
 * the pattern the image files hold, the parameter file, and collecting
 * and checking fragments. See api_test.c for the parameter file.
 */
#ifndef LEECHIO_TEST_COMMON_H
#define LEECHIO_TEST_COMMON_H

#include "leechio.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- checking ---- */

/* Checks made so far (the programs print it when all passed). */
extern unsigned checks;

#define CHECK(cond, ...)                                                                 \
    do {                                                                                 \
        checks++;                                                                        \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "%s:%d: check failed: %s\n  ", __FILE__, __LINE__, #cond);   \
            fprintf(stderr, __VA_ARGS__);                                                \
            fprintf(stderr, "\n  last error: %s\n", last_error());                       \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

#define CHECK_STATUS(call, expected)                                                     \
    do {                                                                                 \
        leechio_status got_ = (call);                                                    \
        CHECK(got_ == (expected), "%s returned %u (%s), expected %u", #call,             \
              (unsigned)got_, leechio_status_message(got_), (unsigned)(expected));       \
    } while (0)

/* This thread's last error message (a static buffer). */
const char *last_error(void);

/* ---- the images' contents ---- */

uint64_t pattern_word(uint64_t addr);
uint8_t pattern_byte(uint64_t addr);
/* The whole file, malloc'd; its size in *size. */
uint8_t *read_file(const char *path, size_t *size);

/* ---- parameters ---- */

#define MAX_VTOP 256

extern struct params {
    char version[4096], phys[4096], virt[4096];
    uint64_t dtb, dtb5, vbase, vsize, vseed;
    size_t nvtop;
    uint64_t vtop_va[MAX_VTOP], vtop_pa[MAX_VTOP];
    int vtop_mapped[MAX_VTOP];
} P;

void read_params(const char *path);
/* Decodes `hex` (two digits a byte; "-" for no bytes) into `out`, which
 * holds `cap` bytes; returns the byte count. */
size_t unhex(const char *hex, uint8_t *out, size_t cap);

/* ---- devices and fragments ---- */

uint64_t scatter_calls(const leechio_device *d, uint32_t kind);
/* Opens the device string `fmt` with `path` in it; stops on failure. */
leechio_device *open_device(const char *fmt, const char *path);

/* The Linux kernel in `d`'s memory, found with no hints and no cache
 * (a test must not read what an earlier run left); stops on failure. */
leechio_kernel *find_kernel(const leechio_device *d);

/* Fragments gathered by a callback. */
#define MAX_FRAGS 1024
typedef struct {
    size_t n;
    leechio_fragment f[MAX_FRAGS];
} frags;

/* A leechio_fragment_fn appending to the frags at `context`. */
void collect(void *context, const leechio_fragment *fragment);

/* One expected fragment: its length and status. */
typedef struct {
    size_t len;
    leechio_status status;
} run;

/* Checks that op `op` of `len` bytes is covered in order by fragments
 * whose statuses are `expect` (a run-length list of {length, status}
 * pairs, ended by length 0). */
void check_fragments(const frags *fs, size_t op, size_t len, const run *expect);

#endif
