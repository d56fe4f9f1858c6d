/*
 * The C API against real LeechCore devices (file images), compiled and run
 * by ffi/tests/c_api.rs with -Wall -Wextra -Werror against the installed
 * header and library.
 *
 * Usage: api_test PARAMS_FILE, where PARAMS_FILE has lines
 *   version V        leechio's expected version string
 *   phys PATH        a pattern image: the 8 bytes at an 8-aligned address a
 *                    are pattern_word(a), little-endian
 *   virt PATH        an image with page tables made by memflow's DummyOs
 *   dtb X            the process's page-table root in the virt image
 *   dtb5 X           a 5-level root whose PML5 entries 0 and 1 both name
 *                    the PML4 at dtb
 *   vbase X          first virtual address of its mapping
 *   vsize X          size of the mapping; its byte at offset o is
 *                    pattern_byte(vseed + o)
 *   vseed X
 *   vtop VA PA|none  memflow's own translation of VA
 *
 * Bytes are checked against the image files read with stdio (and those
 * against the pattern), failed ranges against the image size and the
 * mapping, translations against memflow, and device round trips against
 * LeechCore's own counter of scatter calls. Exits 1 on the first mismatch.
 */
#include "common.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- small helpers ---- */

static uint64_t rng_state = 0x1eec;
static uint64_t rng(uint64_t bound) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (rng_state >> 33) % bound;
}

/* ---- A: information and errors ---- */

static void test_info_and_errors(const uint8_t *image, size_t image_size) {
    CHECK(!strcmp(leechio_version(), P.version), "version %s, expected %s", leechio_version(),
          P.version);

    leechio_device *d = open_device("file://%s", P.phys);
    leechio_device_info info;
    CHECK_STATUS(leechio_device_get_info(d, &info), LEECHIO_OK);
    CHECK(info.read_only && !info.is_volatile && !info.remote, "flags of a plain file device");
    CHECK(info.max_address == image_size, "max address %#" PRIx64 ", image is %#zx bytes",
          info.max_address, image_size);

    char text[64], expect[64];
    size_t len = 0;
    CHECK_STATUS(leechio_device_name(d, text, sizeof text, &len), LEECHIO_OK);
    CHECK(!strcmp(text, "file") && len == 4, "device name %s", text);
    CHECK_STATUS(leechio_device_name(d, text, 3, &len), LEECHIO_BUFFER_TOO_SMALL);
    CHECK(!strcmp(text, "fi") && len == 4, "truncated name %s, length %zu", text, len);
    /* A length query is no failure: it leaves the last error (the
       truncation just above) as it was. */
    char truncated[256];
    leechio_last_error_message(truncated, sizeof truncated, NULL);
    len = 0;
    CHECK_STATUS(leechio_device_name(d, NULL, 0, &len), LEECHIO_OK);
    CHECK(len == 4, "queried length %zu", len);
    CHECK(!strcmp(last_error(), truncated), "a query changed the last error to: %s", last_error());
    CHECK_STATUS(leechio_device_leechcore_version(d, text, sizeof text, NULL), LEECHIO_OK);
    snprintf(expect, sizeof expect, "%" PRIu64 ".%" PRIu64 ".%" PRIu64, info.leechcore_major,
             info.leechcore_minor, info.leechcore_revision);
    CHECK(!strcmp(text, expect) && info.leechcore_major == 2, "LeechCore %s vs %s", text,
          expect);
    CHECK_STATUS(leechio_device_library_path(d, text, 2, &len), LEECHIO_BUFFER_TOO_SMALL);
    CHECK(len > strlen("leechcore.so"), "library path length %zu", len);

    size_t count = 0;
    leechio_last_error_message(truncated, sizeof truncated, NULL);
    CHECK_STATUS(leechio_device_memory_map(d, NULL, 0, &count), LEECHIO_OK);
    CHECK(!strcmp(last_error(), truncated), "a query changed the last error to: %s", last_error());
    CHECK(count == 1, "memory map of a file has %zu ranges", count);
    leechio_memory_range ranges[4];
    CHECK_STATUS(leechio_device_memory_map(d, ranges, 4, &count), LEECHIO_OK);
    CHECK(ranges[0].start == 0 && ranges[0].size == image_size && ranges[0].remap == 0,
          "range %#" PRIx64 "+%#" PRIx64, ranges[0].start, ranges[0].size);

    /* Every pointer is checked; nothing reaches the device. */
    uint64_t before = scatter_calls(d, LEECHIO_CALL_READ_SCATTER);
    uint8_t a[16], b[16];
    leechio_read_op overlapping[2] = {{0x1000, a, 16}, {0x2000, a + 8, 8}};
    CHECK_STATUS(leechio_read(d, overlapping, 2, NULL, NULL), LEECHIO_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "overlap") != NULL, "message: %s", last_error());
    leechio_read_op null_buffer[2] = {{0x1000, b, 16}, {0x2000, NULL, 8}};
    CHECK_STATUS(leechio_read(d, null_buffer, 2, NULL, NULL), LEECHIO_NULL_ARGUMENT);
    CHECK_STATUS(leechio_read(NULL, null_buffer, 1, NULL, NULL), LEECHIO_NULL_ARGUMENT);
    CHECK_STATUS(leechio_read(d, NULL, 3, NULL, NULL), LEECHIO_NULL_ARGUMENT);
    CHECK_STATUS(leechio_read(d, NULL, 0, NULL, NULL), LEECHIO_OK);
    CHECK_STATUS(leechio_device_get_info(d, NULL), LEECHIO_NULL_ARGUMENT);
    CHECK_STATUS(leechio_device_memory_map(d, NULL, 2, &count), LEECHIO_NULL_ARGUMENT);
    CHECK_STATUS(leechio_device_call_count(d, 99, &before), LEECHIO_INVALID_ARGUMENT);
    CHECK_STATUS(leechio_space_translate(NULL, 0, NULL), LEECHIO_NULL_ARGUMENT);
    CHECK_STATUS(leechio_queue_flush(NULL, NULL), LEECHIO_NULL_ARGUMENT);
    CHECK(leechio_queue_pending(NULL) == 0, "pending of NULL");
    CHECK(scatter_calls(d, LEECHIO_CALL_READ_SCATTER) == 0, "refused calls reached LeechCore");
    leechio_device_close(d);
    leechio_device_close(NULL);

    leechio_device *missing = (leechio_device *)&a; /* must be overwritten */
    CHECK_STATUS(leechio_device_open("file:///nonexistent/leechio-test.raw", NULL, NULL, &missing),
                 LEECHIO_OPEN_FAILED);
    CHECK(missing == NULL, "failed open left a handle");
    CHECK(strstr(last_error(), "/nonexistent/leechio-test.raw") != NULL, "message: %s",
          last_error());
    char spec[4200];
    snprintf(spec, sizeof spec, "file://%s", P.phys);
    CHECK_STATUS(leechio_device_open(spec, NULL, "/nonexistent/leechcore.so", &missing),
                 LEECHIO_LOAD_FAILED);
    CHECK(strstr(last_error(), "/nonexistent/leechcore.so") != NULL, "message: %s",
          last_error());
    CHECK_STATUS(leechio_device_open(NULL, NULL, NULL, &missing), LEECHIO_NULL_ARGUMENT);
    CHECK_STATUS(leechio_device_open(spec, NULL, NULL, NULL), LEECHIO_NULL_ARGUMENT);
    CHECK(strlen(leechio_status_message(LEECHIO_NOT_MAPPED)) > 0, "status message");
    (void)image;
}

/* ---- B: a physical batch is one device call, with exact failed ranges ---- */

static void test_physical_read(const uint8_t *image, size_t size) {
    leechio_device *d = open_device("file://%s", P.phys);
    enum { N = 66 };
    leechio_read_op ops[N];
    for (size_t i = 0; i < N; i++) {
        size_t len = 1 + (size_t)rng(9000);
        ops[i].length = len;
        ops[i].address = rng(size - len);
        ops[i].buffer = malloc(len);
        memset(ops[i].buffer, 0xa5, len);
    }
    /* The last two run past the end of the image. */
    ops[N - 2].address = size - 0x800;
    ops[N - 2].length = 0x1000;
    ops[N - 2].buffer = realloc(ops[N - 2].buffer, 0x1000);
    memset(ops[N - 2].buffer, 0xa5, 0x1000);
    ops[N - 1].address = size + 0x10000;
    ops[N - 1].length = 16;
    memset(ops[N - 1].buffer, 0xa5, 16);

    frags fs = {0};
    uint64_t before = scatter_calls(d, LEECHIO_CALL_READ_SCATTER);
    CHECK_STATUS(leechio_read(d, ops, N, collect, &fs), LEECHIO_INCOMPLETE);
    CHECK(scatter_calls(d, LEECHIO_CALL_READ_SCATTER) - before == 1,
          "a batch of %d reads took %" PRIu64 " device calls", N,
          scatter_calls(d, LEECHIO_CALL_READ_SCATTER) - before);

    for (size_t i = 0; i < N - 2; i++) {
        run whole[] = {{ops[i].length, LEECHIO_OK}, {0, LEECHIO_OK}};
        check_fragments(&fs, i, ops[i].length, whole);
        CHECK(!memcmp(ops[i].buffer, image + ops[i].address, ops[i].length),
              "op %zu: bytes at %#" PRIx64 " differ from the image", i, ops[i].address);
    }
    run straddle[] = {{0x800, LEECHIO_OK}, {0x800, LEECHIO_OUT_OF_RANGE}, {0, LEECHIO_OK}};
    check_fragments(&fs, N - 2, 0x1000, straddle);
    CHECK(!memcmp(ops[N - 2].buffer, image + size - 0x800, 0x800), "bytes before the end");
    run past[] = {{16, LEECHIO_OUT_OF_RANGE}, {0, LEECHIO_OK}};
    check_fragments(&fs, N - 1, 16, past);
    for (size_t k = 0x800; k < 0x1000; k++)
        CHECK(ops[N - 2].buffer[k] == 0xa5, "failed byte +%#zx was written", k);
    for (size_t k = 0; k < 16; k++)
        CHECK(ops[N - 1].buffer[k] == 0xa5, "failed byte +%#zx was written", k);
    CHECK(strstr(last_error(), "2 operation(s) failed") != NULL, "message: %s", last_error());

    for (size_t i = 0; i < N; i++) free(ops[i].buffer);
    leechio_device_close(d);
}

/* ---- C: writes, then pointer chasing through a queue ---- */

enum { CHAINS = 8, DEPTH = 4 };
#define CHAIN_BASE 0x800000ull

/* Node k of a chain holds the address of node k + 1; the last holds the
 * chain's sentinel. Every node has a page of its own: the engine keeps
 * writes to one page in order, one device call each. */
static uint64_t node(int chain, int k) {
    return CHAIN_BASE + (uint64_t)(chain * DEPTH + k) * 0x1000 + (uint64_t)chain * 0x108;
}

static uint64_t sentinel(int chain) { return 0xc0de0000ull + (uint64_t)chain; }

static void test_writes(size_t size) {
    /* A read-only device refuses, per byte, without a device call; bytes
     * past its end fail for that reason. */
    leechio_device *ro = open_device("file://%s", P.phys);
    uint64_t value = 1;
    leechio_write_op two[2] = {{0x1000, (const uint8_t *)&value, 8},
                               {size - 4, (const uint8_t *)&value, 8}};
    frags fs = {0};
    CHECK_STATUS(leechio_write(ro, two, 2, collect, &fs), LEECHIO_INCOMPLETE);
    run refused[] = {{8, LEECHIO_READ_ONLY}, {0, LEECHIO_OK}};
    check_fragments(&fs, 0, 8, refused);
    run refused_end[] = {{4, LEECHIO_READ_ONLY}, {4, LEECHIO_OUT_OF_RANGE}, {0, LEECHIO_OK}};
    check_fragments(&fs, 1, 8, refused_end);
    CHECK(scatter_calls(ro, LEECHIO_CALL_WRITE_SCATTER) == 0, "read-only device was written");
    leechio_device_close(ro);

    leechio_device *d = open_device("file://file=%s,write=1", P.phys);
    leechio_device_info info;
    CHECK_STATUS(leechio_device_get_info(d, &info), LEECHIO_OK);
    CHECK(!info.read_only, "write=1 device is read-only");

    static uint64_t words[CHAINS * DEPTH];
    leechio_write_op ops[CHAINS * DEPTH + 2];
    size_t n = 0;
    for (int c = 0; c < CHAINS; c++) {
        for (int k = 0; k < DEPTH; k++) {
            words[n] = k + 1 < DEPTH ? node(c, k + 1) : sentinel(c);
            ops[n] = (leechio_write_op){node(c, k), (const uint8_t *)&words[n], 8};
            n++;
        }
    }
    static const uint8_t odd[5] = {1, 2, 3, 4, 5};
    static const uint8_t tail[8] = {9, 9, 9, 9, 9, 9, 9, 9};
    ops[n++] = (leechio_write_op){0x900003, odd, 5};
    ops[n++] = (leechio_write_op){size - 4, tail, 8};
    fs.n = 0;
    uint64_t writes = scatter_calls(d, LEECHIO_CALL_WRITE_SCATTER);
    uint64_t reads = scatter_calls(d, LEECHIO_CALL_READ_SCATTER);
    CHECK_STATUS(leechio_write(d, ops, n, collect, &fs), LEECHIO_INCOMPLETE);
    CHECK(scatter_calls(d, LEECHIO_CALL_WRITE_SCATTER) - writes == 1, "writes took %" PRIu64
          " calls", scatter_calls(d, LEECHIO_CALL_WRITE_SCATTER) - writes);
    /* Short and unaligned pieces are read, patched and written whole. */
    CHECK(scatter_calls(d, LEECHIO_CALL_READ_SCATTER) - reads == 1, "patch reads took %" PRIu64
          " calls", scatter_calls(d, LEECHIO_CALL_READ_SCATTER) - reads);
    for (size_t i = 0; i + 1 < n; i++) {
        run whole[] = {{ops[i].length, LEECHIO_OK}, {0, LEECHIO_OK}};
        check_fragments(&fs, i, ops[i].length, whole);
    }
    run tail_runs[] = {{4, LEECHIO_OK}, {4, LEECHIO_OUT_OF_RANGE}, {0, LEECHIO_OK}};
    check_fragments(&fs, n - 1, 8, tail_runs);
    leechio_device_close(d); /* LeechCore's file device writes on close */

    size_t after_size;
    uint8_t *after = read_file(P.phys, &after_size);
    CHECK(after_size == size, "the image changed size");
    for (size_t i = 0; i + 1 < n; i++)
        CHECK(!memcmp(after + ops[i].address, ops[i].data, ops[i].length),
              "write %zu did not land at %#" PRIx64, i, ops[i].address);
    CHECK(!memcmp(after + size - 4, tail, 4), "the last 4 bytes");
    /* Bytes around the unaligned write kept the pattern. */
    for (uint64_t a = 0x900000; a < 0x900010; a++)
        if (a < 0x900003 || a >= 0x900008)
            CHECK(after[a] == pattern_byte(a), "byte %#" PRIx64 " next to a write changed", a);
    free(after);
}

typedef struct {
    int chain, hops, busy_checked;
    uint64_t value;
} chase;

static unsigned chase_callbacks, cancelled;
/* Who completed in the first flush, in callback order (-1: the straddle). */
static int first_order[CHAINS + 1], first_count;

static void on_hop(void *context, leechio_queue *q, const leechio_completion *c) {
    chase *ch = context;
    chase_callbacks++;
    CHECK(q != NULL, "a flushed read was cancelled");
    CHECK(c->status == LEECHIO_OK && c->fragment_count == 1 && c->length == 8,
          "chain %d hop %d: status %u", ch->chain, ch->hops, (unsigned)c->status);
    CHECK(c->address == node(ch->chain, ch->hops), "chain %d hop %d read %#" PRIx64, ch->chain,
          ch->hops, c->address);
    if (!ch->busy_checked) {
        ch->busy_checked = 1;
        CHECK_STATUS(leechio_queue_flush(q, NULL), LEECHIO_BUSY);
    }
    if (ch->hops == 0) first_order[first_count++] = ch->chain;
    ch->hops++;
    if (ch->hops < DEPTH)
        CHECK_STATUS(leechio_queue_read(q, ch->value, (uint8_t *)&ch->value, 8, on_hop, ch),
                     LEECHIO_OK);
}

static void on_straddle(void *context, leechio_queue *q, const leechio_completion *c) {
    frags *fs = context;
    (void)q;
    first_order[first_count++] = -1;
    CHECK(c->status == LEECHIO_INCOMPLETE, "straddling queued read: status %u",
          (unsigned)c->status);
    for (size_t i = 0; i < c->fragment_count; i++) collect(fs, &c->fragments[i]);
}

static void on_cancel(void *context, leechio_queue *q, const leechio_completion *c) {
    (void)context;
    CHECK(q == NULL && c->status == LEECHIO_NOT_ISSUED && c->fragment_count == 1 &&
              c->fragments[0].status == LEECHIO_NOT_ISSUED,
          "cancelled read: queue %p status %u", (void *)q, (unsigned)c->status);
    cancelled++;
}

static void test_queue(size_t size) {
    size_t image_size;
    uint8_t *image = read_file(P.phys, &image_size);
    leechio_device *d = open_device("file://%s", P.phys);
    leechio_queue *q = NULL;
    CHECK_STATUS(leechio_queue_new(d, &q), LEECHIO_OK);

    chase chains[CHAINS];
    for (int c = 0; c < CHAINS; c++) {
        chains[c] = (chase){c, 0, c != 0, 0};
        CHECK_STATUS(leechio_queue_read(q, node(c, 0), (uint8_t *)&chains[c].value, 8, on_hop,
                                        &chains[c]),
                     LEECHIO_OK);
    }
    uint8_t straddle[0x1000];
    memset(straddle, 0xa5, sizeof straddle);
    frags fs = {0};
    CHECK_STATUS(leechio_queue_read(q, size - 0x800, straddle, sizeof straddle, on_straddle, &fs),
                 LEECHIO_OK);
    CHECK_STATUS(leechio_queue_read(q, 0, straddle, 8, NULL, NULL), LEECHIO_NULL_ARGUMENT);
    CHECK(leechio_queue_pending(q) == CHAINS + 1, "pending %zu", leechio_queue_pending(q));

    uint64_t before = scatter_calls(d, LEECHIO_CALL_READ_SCATTER);
    size_t flushes = 0;
    CHECK_STATUS(leechio_queue_run(q, &flushes), LEECHIO_OK);
    uint64_t calls = scatter_calls(d, LEECHIO_CALL_READ_SCATTER) - before;
    CHECK(flushes == DEPTH && calls == DEPTH,
          "%d chains of depth %d took %zu flushes and %" PRIu64 " device calls", CHAINS, DEPTH,
          flushes, calls);
    CHECK(chase_callbacks == CHAINS * DEPTH, "%u callbacks", chase_callbacks);
    /* Callbacks run in the order the reads were queued. */
    CHECK(first_count == CHAINS + 1 && first_order[CHAINS] == -1, "first flush order");
    for (int c = 0; c < CHAINS; c++)
        CHECK(first_order[c] == c, "callback %d was chain %d", c, first_order[c]);
    for (int c = 0; c < CHAINS; c++)
        CHECK(chains[c].hops == DEPTH && chains[c].value == sentinel(c),
              "chain %d ended at %#" PRIx64, c, chains[c].value);
    run runs[] = {{0x800, LEECHIO_OK}, {0x800, LEECHIO_OUT_OF_RANGE}, {0, LEECHIO_OK}};
    check_fragments(&fs, 0, 0x1000, runs);
    CHECK(!memcmp(straddle, image + size - 0x800, 0x800), "queued bytes before the end");
    for (size_t k = 0x800; k < 0x1000; k++)
        CHECK(straddle[k] == 0xa5, "failed queued byte +%#zx was written", k);

    /* Freeing a queue cancels what is left, each callback once. */
    CHECK_STATUS(leechio_queue_read(q, 0x1000, straddle, 8, on_cancel, NULL), LEECHIO_OK);
    CHECK_STATUS(leechio_queue_read(q, 0x2000, straddle + 8, 8, on_cancel, NULL), LEECHIO_OK);
    leechio_queue_free(q);
    CHECK(cancelled == 2, "%u cancel callbacks", cancelled);
    leechio_device_close(d);
    free(image);
}

/* What callbacks see of their own queue while it flushes or is freed. */
static size_t pending_seen[3], pending_count;

static void on_count(void *context, leechio_queue *q, const leechio_completion *c) {
    (void)context;
    (void)c;
    pending_seen[pending_count++] = leechio_queue_pending(q);
    size_t flushes = 99;
    CHECK_STATUS(leechio_queue_run(q, &flushes), LEECHIO_BUSY);
    CHECK(flushes == 99, "a refused run wrote %zu flushes", flushes);
}

static void on_cancel_reenter(void *context, leechio_queue *q, const leechio_completion *c) {
    leechio_queue *self = context;
    uint8_t byte;
    CHECK(q == NULL && c->status == LEECHIO_NOT_ISSUED, "cancelled read: status %u",
          (unsigned)c->status);
    /* The queue being freed refuses everything; under valgrind a use of
       freed memory here fails the test. */
    CHECK_STATUS(leechio_queue_read(self, 0x1000, &byte, 1, on_cancel, NULL), LEECHIO_BUSY);
    CHECK_STATUS(leechio_queue_flush(self, NULL), LEECHIO_BUSY);
    leechio_queue_free(self);
    CHECK(strstr(last_error(), "cannot be freed") != NULL, "nested free: %s", last_error());
    cancelled++;
}

static void test_queue_reentry(void) {
    leechio_device *d = open_device("file://%s", P.phys);
    leechio_queue *q = NULL;
    CHECK_STATUS(leechio_queue_new(d, &q), LEECHIO_OK);
    uint8_t bytes[3][8];
    for (int i = 0; i < 3; i++)
        CHECK_STATUS(leechio_queue_read(q, 0x1000 * (uint64_t)(i + 1), bytes[i], 8, on_count, NULL),
                     LEECHIO_OK);
    size_t completed = 0;
    CHECK_STATUS(leechio_queue_flush(q, &completed), LEECHIO_OK);
    /* Each callback counts the ones of its flush still to come. */
    CHECK(completed == 3 && pending_count == 3, "%zu completed, %zu callbacks", completed,
          pending_count);
    for (size_t i = 0; i < pending_count; i++)
        CHECK(pending_seen[i] == 2 - i, "callback %zu saw %zu pending", i, pending_seen[i]);

    unsigned before = cancelled;
    CHECK_STATUS(leechio_queue_read(q, 0x1000, bytes[0], 8, on_cancel_reenter, q), LEECHIO_OK);
    CHECK_STATUS(leechio_queue_read(q, 0x2000, bytes[1], 8, on_cancel_reenter, q), LEECHIO_OK);
    leechio_queue_free(q);
    CHECK(cancelled - before == 2, "%u cancel callbacks", cancelled - before);
    leechio_device_close(d);
}

/* ---- D: virtual memory against memflow's DummyOs ---- */

static void check_virtual_bytes(const leechio_read_op *op, size_t valid) {
    for (size_t k = 0; k < valid; k++) {
        uint64_t off = op->address - P.vbase + k;
        CHECK(op->buffer[k] == pattern_byte(P.vseed + off), "virtual byte %#" PRIx64 " differs",
              op->address + k);
    }
}

static void count_mapping(void *context, const leechio_mapping *m) {
    leechio_mapping *all = context;
    size_t i = 0;
    while (all[i].size != 0) i++;
    CHECK(i < 255, "too many mappings");
    all[i] = *m;
}

typedef struct {
    leechio_read_op *op;
    int done;
} vread;

static void on_virtual(void *context, leechio_queue *q, const leechio_completion *c) {
    vread *v = context;
    (void)q;
    CHECK(c->status == LEECHIO_OK, "queued virtual read: status %u", (unsigned)c->status);
    check_virtual_bytes(v->op, v->op->length);
    v->done = 1;
}

static void test_virtual(void) {
    leechio_device *d = open_device("file://%s", P.virt);
    const leechio_cache_options forever = {UINT64_MAX, UINT64_MAX};
    leechio_space *s = NULL;
    CHECK_STATUS(leechio_space_new(d, P.dtb, 4, &forever, &s), LEECHIO_OK);
    CHECK(leechio_space_levels(s) == 4, "a space made with 4 levels has %u",
          leechio_space_levels(s));

    /* Translations agree with memflow's; a cold batch walks once. */
    leechio_translation t[MAX_VTOP + 1];
    uint64_t vas[MAX_VTOP + 1];
    memcpy(vas, P.vtop_va, P.nvtop * sizeof vas[0]);
    vas[P.nvtop] = 0x0000800000000000ull; /* non-canonical */
    uint64_t before = scatter_calls(d, LEECHIO_CALL_READ_SCATTER);
    CHECK_STATUS(leechio_space_translate_many(s, vas, P.nvtop + 1, t), LEECHIO_INCOMPLETE);
    CHECK(scatter_calls(d, LEECHIO_CALL_READ_SCATTER) - before == 4,
          "%zu cold walks took %" PRIu64 " calls (one per level expected)", P.nvtop,
          scatter_calls(d, LEECHIO_CALL_READ_SCATTER) - before);
    for (size_t i = 0; i < P.nvtop; i++) {
        CHECK(t[i].paging_levels == 4 && t[i].entries[LEECHIO_LEVEL_PML5E] == 0,
              "%#" PRIx64 ": a 4-level walk in mode %u with PML5E %#" PRIx64, vas[i],
              t[i].paging_levels, t[i].entries[LEECHIO_LEVEL_PML5E]);
        if (P.vtop_mapped[i]) {
            CHECK(t[i].status == LEECHIO_OK && t[i].pa == P.vtop_pa[i] &&
                      t[i].page_size == 4096 && t[i].entry_count == 4 &&
                      t[i].failed_level == -1,
                  "%#" PRIx64 ": status %u pa %#" PRIx64 ", memflow says %#" PRIx64, vas[i],
                  (unsigned)t[i].status, t[i].pa, P.vtop_pa[i]);
            CHECK((t[i].entries[LEECHIO_LEVEL_PTE] & 0x000ffffffffff000ull) ==
                      (P.vtop_pa[i] & ~0xfffull),
                  "PTE of %#" PRIx64, vas[i]);
            for (int l = LEECHIO_LEVEL_PML4E; l <= LEECHIO_LEVEL_PTE; l++)
                CHECK(t[i].entries[l] & 1, "%#" PRIx64 ": entry %d not present", vas[i], l);
        } else {
            /* It stopped at the entry it read last, not present. */
            CHECK(t[i].status == LEECHIO_NOT_MAPPED &&
                      t[i].failed_level >= LEECHIO_LEVEL_PML4E &&
                      t[i].entry_count == (uint32_t)t[i].failed_level &&
                      !(t[i].entries[t[i].failed_level] & 1),
                  "%#" PRIx64 ": status %u, memflow says unmapped", vas[i],
                  (unsigned)t[i].status);
        }
    }
    CHECK(t[P.nvtop].status == LEECHIO_NON_CANONICAL && t[P.nvtop].failed_level == -1 &&
              t[P.nvtop].entry_count == 0 && t[P.nvtop].paging_levels == 4,
          "non-canonical: status %u", (unsigned)t[P.nvtop].status);
    leechio_translation one;
    CHECK_STATUS(leechio_space_translate(s, P.vbase + 0x10, &one), LEECHIO_OK);
    CHECK_STATUS(leechio_space_translate(s, vas[P.nvtop], &one), LEECHIO_NON_CANONICAL);

    /* Mappings cover exactly the process's range, consistent with memflow. */
    static leechio_mapping maps[256];
    CHECK_STATUS(leechio_space_mappings(s, P.vbase - 0x10000, P.vbase + P.vsize + 0xffff,
                                        count_mapping, maps),
                 LEECHIO_OK);
    uint64_t at = P.vbase;
    for (size_t i = 0; maps[i].size != 0; i++) {
        CHECK(maps[i].va == at && maps[i].status == LEECHIO_OK && maps[i].page_size == 4096,
              "mapping %zu at %#" PRIx64 ", expected %#" PRIx64, i, maps[i].va, at);
        /* Its access is what its entries say: R/W and U/S at every level,
         * NX at none. */
        leechio_translation first;
        CHECK_STATUS(leechio_space_translate(s, maps[i].va, &first), LEECHIO_OK);
        uint32_t access = LEECHIO_ACCESS_WRITE | LEECHIO_ACCESS_EXECUTE | LEECHIO_ACCESS_USER;
        for (uint32_t l = LEECHIO_LEVEL_PML4E; l < LEECHIO_LEVEL_PML4E + first.entry_count; l++) {
            if (!(first.entries[l] & 2)) access &= ~(uint32_t)LEECHIO_ACCESS_WRITE;
            if (!(first.entries[l] & 4)) access &= ~(uint32_t)LEECHIO_ACCESS_USER;
            if (first.entries[l] >> 63) access &= ~(uint32_t)LEECHIO_ACCESS_EXECUTE;
        }
        CHECK(maps[i].access == access, "mapping %zu: access %#x, its entries say %#x", i,
              maps[i].access, access);
        for (size_t k = 0; k < P.nvtop; k++)
            if (P.vtop_va[k] >= maps[i].va && P.vtop_va[k] < maps[i].va + maps[i].size)
                CHECK(P.vtop_pa[k] == maps[i].pa + (P.vtop_va[k] - maps[i].va),
                      "mapping of %#" PRIx64 " disagrees with memflow", P.vtop_va[k]);
        at += maps[i].size;
    }
    CHECK(at == P.vbase + P.vsize, "mappings end at %#" PRIx64, at);
    CHECK_STATUS(leechio_space_mappings(s, 0, 1, NULL, NULL), LEECHIO_NULL_ARGUMENT);
    /* A reversed range is refused, and nothing is reported. */
    static leechio_mapping none[256];
    CHECK_STATUS(leechio_space_mappings(s, P.vbase + P.vsize, P.vbase, count_mapping, none),
                 LEECHIO_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "is past `last`") != NULL && none[0].size == 0, "message: %s",
          last_error());
    /* Both ends are included: the last byte of a mapping is one byte. */
    static leechio_mapping one_byte[256];
    CHECK_STATUS(leechio_space_mappings(s, P.vbase + P.vsize - 1, P.vbase + P.vsize - 1,
                                        count_mapping, one_byte),
                 LEECHIO_OK);
    CHECK(one_byte[0].va == P.vbase + P.vsize - 1 && one_byte[0].size == 1 &&
              one_byte[1].size == 0,
          "the last byte: mapping at %#" PRIx64 " of %#" PRIx64 " bytes", one_byte[0].va,
          one_byte[0].size);
    /* A NULL array is named by its own parameter. */
    CHECK_STATUS(leechio_space_translate_many(s, NULL, 3, t), LEECHIO_NULL_ARGUMENT);
    CHECK(strstr(last_error(), "`vas` is NULL") != NULL, "message: %s", last_error());

    /* A batch of virtual reads: cold = 4 levels + data, warm = data only. */
    enum { N = 34 };
    leechio_read_op ops[N];
    for (size_t i = 0; i < N - 2; i++) {
        ops[i].length = 1 + (size_t)rng(3 * 4096);
        ops[i].address = P.vbase + rng(P.vsize - ops[i].length);
        ops[i].buffer = malloc(ops[i].length);
    }
    ops[N - 2] = (leechio_read_op){P.vbase + P.vsize - 0x100, malloc(0x200), 0x200};
    ops[N - 1] = (leechio_read_op){0x0000900000000000ull, malloc(16), 16};
    /* A fresh space for a cold start (the one above has cached walks). */
    leechio_space_free(s);
    CHECK_STATUS(leechio_space_new(d, P.dtb, 4, &forever, &s), LEECHIO_OK);
    /* Round 0 is cold, round 1 warm (caches kept forever), round 2 cold
     * again after leechio_space_invalidate. */
    uint64_t expected_calls[3] = {5, 1, 5};
    for (int round = 0; round < 3; round++) {
        if (round == 2) CHECK_STATUS(leechio_space_invalidate(s), LEECHIO_OK);
        for (size_t i = 0; i < N; i++) memset(ops[i].buffer, 0xa5, ops[i].length);
        frags fs = {0};
        before = scatter_calls(d, LEECHIO_CALL_READ_SCATTER);
        CHECK_STATUS(leechio_space_read(s, ops, N, collect, &fs), LEECHIO_INCOMPLETE);
        uint64_t calls = scatter_calls(d, LEECHIO_CALL_READ_SCATTER) - before;
        CHECK(calls == expected_calls[round], "round %d: %d virtual reads took %" PRIu64
              " calls, expected %" PRIu64, round, N, calls, expected_calls[round]);
        for (size_t i = 0; i < N - 2; i++) {
            run whole[] = {{ops[i].length, LEECHIO_OK}, {0, LEECHIO_OK}};
            check_fragments(&fs, i, ops[i].length, whole);
            check_virtual_bytes(&ops[i], ops[i].length);
        }
        run end_runs[] = {{0x100, LEECHIO_OK}, {0x100, LEECHIO_NOT_MAPPED}, {0, LEECHIO_OK}};
        check_fragments(&fs, N - 2, 0x200, end_runs);
        check_virtual_bytes(&ops[N - 2], 0x100);
        for (size_t k = 0x100; k < 0x200; k++)
            CHECK(ops[N - 2].buffer[k] == 0xa5, "unmapped byte +%#zx was written", k);
        run bad[] = {{16, LEECHIO_NON_CANONICAL}, {0, LEECHIO_OK}};
        check_fragments(&fs, N - 1, 16, bad);
    }

    /* Queued virtual reads: a cold walk completes after five flushes. */
    leechio_space *cold = NULL;
    CHECK_STATUS(leechio_space_new(d, P.dtb, 4, NULL, &cold), LEECHIO_OK);
    leechio_queue *q = NULL;
    CHECK_STATUS(leechio_queue_new(d, &q), LEECHIO_OK);
    vread v[4];
    for (int i = 0; i < 4; i++) {
        v[i] = (vread){&ops[i], 0};
        CHECK_STATUS(leechio_queue_read_virtual(q, cold, ops[i].address, ops[i].buffer,
                                                ops[i].length, on_virtual, &v[i]),
                     LEECHIO_OK);
    }
    size_t flushes = 0;
    before = scatter_calls(d, LEECHIO_CALL_READ_SCATTER);
    CHECK_STATUS(leechio_queue_run(q, &flushes), LEECHIO_OK);
    CHECK(flushes == 5 && scatter_calls(d, LEECHIO_CALL_READ_SCATTER) - before == 5,
          "queued cold virtual reads: %zu flushes", flushes);
    for (int i = 0; i < 4; i++) CHECK(v[i].done, "virtual read %d never completed", i);

    /* A space from another device handle is refused for this queue. */
    leechio_device *other = open_device("file://%s", P.virt);
    leechio_space *foreign = NULL;
    CHECK_STATUS(leechio_space_new(other, P.dtb, 4, NULL, &foreign), LEECHIO_OK);
    CHECK_STATUS(leechio_queue_read_virtual(q, foreign, P.vbase, ops[0].buffer, 8, on_virtual,
                                            &v[0]),
                 LEECHIO_INVALID_ARGUMENT);
    leechio_space_free(foreign);
    leechio_device_close(other);
    leechio_queue_free(q);
    leechio_space_free(cold);

    /* A space outlives its device handle: LeechCore closes with the last. */
    leechio_device_close(d);
    CHECK_STATUS(leechio_space_read(s, ops, 1, NULL, NULL), LEECHIO_OK);
    check_virtual_bytes(&ops[0], ops[0].length);
    leechio_space_free(s);
    for (size_t i = 0; i < N; i++) free(ops[i].buffer);
}

/* ---- 5-level paging ---- */

static void count_queued(void *context, leechio_queue *q, const leechio_completion *c) {
    (void)q;
    CHECK(c->status == LEECHIO_OK, "queued 5-level read: status %u", (unsigned)c->status);
    (*(int *)context)++;
}

/* The process through the 5-level root dtb5, whose PML5 entries 0 and 1
 * name its PML4: every address, and the same address 2^48 higher, ends
 * where memflow's 4-level walk does, with that PML5E on top of the 4-level
 * walk's own entries, each at its own level. */
static void test_five_levels(void) {
    size_t size;
    uint8_t *image = read_file(P.virt, &size);
    CHECK(P.dtb5 + 0x1000 <= size, "dtb5 %#" PRIx64 " is outside the image", P.dtb5);
    uint64_t pml5e[3], pml4e256;
    memcpy(pml5e, image + P.dtb5, sizeof pml5e);
    memcpy(&pml4e256, image + (P.dtb & ~0xfffull) + 256 * 8, 8);
    free(image);
    CHECK(pml5e[0] & pml5e[1] & 1 && !(pml5e[2] & 1) && !(pml4e256 & 1),
          "the image's tables are not as the fixture made them");

    leechio_device *d = open_device("file://%s", P.virt);
    leechio_space *four = NULL, *five = NULL;
    CHECK_STATUS(leechio_space_new(d, P.dtb, 4, NULL, &four), LEECHIO_OK);
    CHECK_STATUS(leechio_space_new(d, P.dtb5, 5, NULL, &five), LEECHIO_OK);
    CHECK(leechio_space_levels(five) == 5, "levels %u", leechio_space_levels(five));

    size_t n = P.nvtop;
    static uint64_t vas[2 * MAX_VTOP + 3];
    static leechio_translation t4[MAX_VTOP], t5[2 * MAX_VTOP + 3];
    for (size_t i = 0; i < n; i++) {
        vas[i] = P.vtop_va[i];
        vas[n + i] = P.vtop_va[i] + (1ull << 48);
    }
    /* Canonical only in 5-level paging: PML4 entry 256 (not present),
     * PML5 entry 2 (not present); then past 57 bits. */
    vas[2 * n] = 0x0000800000000000ull;
    vas[2 * n + 1] = 2ull << 48;
    vas[2 * n + 2] = 0x0100000000000000ull;
    CHECK_STATUS(leechio_space_translate_many(four, vas, n, t4), LEECHIO_INCOMPLETE);
    uint64_t before = scatter_calls(d, LEECHIO_CALL_READ_SCATTER);
    CHECK_STATUS(leechio_space_translate_many(five, vas, 2 * n + 3, t5), LEECHIO_INCOMPLETE);
    uint64_t calls = scatter_calls(d, LEECHIO_CALL_READ_SCATTER) - before;
    CHECK(calls == 5, "%zu cold 5-level walks took %" PRIu64 " calls, not one a level", 2 * n + 3,
          calls);
    for (size_t i = 0; i < 2 * n; i++) {
        const leechio_translation *a = &t4[i % n], *b = &t5[i];
        CHECK(b->paging_levels == 5 && b->va == vas[i] && b->status == a->status &&
                  b->pa == a->pa && b->page_size == a->page_size &&
                  b->failed_level == a->failed_level && b->entry_count == a->entry_count + 1,
              "%#" PRIx64 ": status %u pa %#" PRIx64 " at level %d, 4-level %u %#" PRIx64
              " at %d",
              vas[i], (unsigned)b->status, b->pa, b->failed_level, (unsigned)a->status, a->pa,
              a->failed_level);
        CHECK(b->entries[LEECHIO_LEVEL_PML5E] == pml5e[i / n], "%#" PRIx64 ": PML5E %#" PRIx64,
              vas[i], b->entries[LEECHIO_LEVEL_PML5E]);
        CHECK(!memcmp(&b->entries[LEECHIO_LEVEL_PML4E], &a->entries[LEECHIO_LEVEL_PML4E],
                      4 * sizeof(uint64_t)),
              "%#" PRIx64 ": entries below the PML5E differ from the 4-level walk's", vas[i]);
        if (P.vtop_mapped[i % n])
            CHECK(b->status == LEECHIO_OK && b->pa == P.vtop_pa[i % n], "%#" PRIx64, vas[i]);
    }
    const leechio_translation *pml4_hole = &t5[2 * n], *pml5_hole = &t5[2 * n + 1],
                              *past = &t5[2 * n + 2];
    CHECK(pml4_hole->status == LEECHIO_NOT_MAPPED &&
              pml4_hole->failed_level == LEECHIO_LEVEL_PML4E && pml4_hole->entry_count == 2 &&
              pml4_hole->entries[LEECHIO_LEVEL_PML5E] == pml5e[0] &&
              pml4_hole->entries[LEECHIO_LEVEL_PML4E] == pml4e256,
          "PML4 entry 256: status %u at level %d", (unsigned)pml4_hole->status,
          pml4_hole->failed_level);
    CHECK(pml5_hole->status == LEECHIO_NOT_MAPPED &&
              pml5_hole->failed_level == LEECHIO_LEVEL_PML5E && pml5_hole->entry_count == 1 &&
              pml5_hole->entries[LEECHIO_LEVEL_PML5E] == pml5e[2],
          "PML5 entry 2: status %u at level %d", (unsigned)pml5_hole->status,
          pml5_hole->failed_level);
    CHECK(past->status == LEECHIO_NON_CANONICAL && past->failed_level == -1 &&
              past->entry_count == 0 && past->paging_levels == 5,
          "past 57 bits: status %u", (unsigned)past->status);
    /* The 4-level space calls the first of those non-canonical. */
    leechio_translation t;
    CHECK_STATUS(leechio_space_translate(four, vas[2 * n], &t), LEECHIO_NON_CANONICAL);

    /* Its mappings: the process's, once through each PML5 entry; the
     * second PML5 entry, walked whole, is the first's alias. */
    static leechio_mapping m4[256], m5[256], high[256], whole[256];
    uint64_t lo = P.vbase - 0x10000, hi = P.vbase + P.vsize + 0xffff;
    CHECK_STATUS(leechio_space_mappings(four, lo, hi, count_mapping, m4), LEECHIO_OK);
    CHECK_STATUS(leechio_space_mappings(five, lo, hi, count_mapping, m5), LEECHIO_OK);
    CHECK_STATUS(leechio_space_mappings(five, lo + (1ull << 48), hi + (1ull << 48), count_mapping,
                                        high),
                 LEECHIO_OK);
    size_t k = 0;
    for (; m4[k].size != 0; k++) {
        CHECK(!memcmp(&m4[k], &m5[k], sizeof m4[k]), "5-level mapping %zu differs", k);
        leechio_mapping shifted = m4[k];
        shifted.va += 1ull << 48;
        CHECK(!memcmp(&shifted, &high[k], sizeof shifted), "mapping %zu above 2^48 differs", k);
    }
    CHECK(k > 0 && m5[k].size == 0 && high[k].size == 0, "%zu mappings", k);
    CHECK_STATUS(leechio_space_mappings(five, 0, (2ull << 48) - 1, count_mapping, whole),
                 LEECHIO_OK);
    size_t aliases = 0;
    for (size_t i = 0; whole[i].size != 0; i++) {
        if (whole[i].status != LEECHIO_ALIAS) continue;
        aliases++;
        CHECK(whole[i].va == 1ull << 48 && whole[i].size == 1ull << 48 && whole[i].same_as == 0,
              "alias %#" PRIx64 " of %#" PRIx64 " bytes as %#" PRIx64, whole[i].va,
              whole[i].size, whole[i].same_as);
    }
    CHECK(aliases == 1, "%zu aliases", aliases);

    /* A cold queued read walks five levels: six flushes with its data. */
    leechio_space_invalidate(five);
    leechio_queue *q = NULL;
    CHECK_STATUS(leechio_queue_new(d, &q), LEECHIO_OK);
    uint8_t buf[64];
    int done = 0;
    leechio_read_op op = {P.vbase + (1ull << 48) + 0x123, buf, sizeof buf};
    CHECK_STATUS(leechio_queue_read_virtual(q, five, op.address, buf, sizeof buf, count_queued,
                                            &done),
                 LEECHIO_OK);
    size_t flushes = 0;
    CHECK_STATUS(leechio_queue_run(q, &flushes), LEECHIO_OK);
    CHECK(done == 1 && flushes == 6, "a cold 5-level queued read: %zu flushes", flushes);
    op.address -= 1ull << 48;
    check_virtual_bytes(&op, sizeof buf);
    leechio_queue_free(q);
    leechio_space_free(four);
    leechio_space_free(five);
    leechio_device_close(d);
}

/* Levels 0 finds the mode from the tables, or says it cannot; other
 * numbers than 0, 4 and 5 are refused. */
static void test_paging_detection(void) {
    leechio_device *d = open_device("file://%s", P.virt);
    leechio_space *s = NULL;
    /* The 5-level root's page tables show their mode. */
    CHECK_STATUS(leechio_space_new(d, P.dtb5, LEECHIO_PAGING_DETECT, NULL, &s), LEECHIO_OK);
    CHECK(leechio_space_levels(s) == 5, "dtb5 detected as %u levels", leechio_space_levels(s));
    leechio_translation t;
    CHECK_STATUS(leechio_space_translate(s, P.vbase + (1ull << 48), &t), LEECHIO_OK);
    leechio_space_free(s);
    /* DummyOs's own 4-level root does not show its mode: it maps 4 KiB
     * user pages only, so a 5-level reading takes its page tables for
     * directories and its data pages (the pattern) for page tables, and
     * meets no entry a CPU would fault on either. Nothing is guessed. */
    s = (leechio_space *)&s;
    CHECK_STATUS(leechio_space_new(d, P.dtb, LEECHIO_PAGING_DETECT, NULL, &s),
                 LEECHIO_PAGING_UNKNOWN);
    char expect[160];
    snprintf(expect, sizeof expect,
             "leechio_space_new: the tables at %#" PRIx64
             " read as well in 4-level as in 5-level paging (",
             P.dtb & ~(uint64_t)0xfff);
    CHECK(s == NULL && strstr(last_error(), expect) == last_error() &&
              strstr(last_error(), "; pass `levels` 4 or 5") != NULL,
          "%s", last_error());

    for (uint32_t bad = 1; bad < 8; bad++) {
        if (bad == 4 || bad == 5) continue;
        s = (leechio_space *)&s;
        CHECK_STATUS(leechio_space_new(d, P.dtb, bad, NULL, &s), LEECHIO_INVALID_ARGUMENT);
        CHECK(s == NULL && strstr(last_error(), "`levels` is ") != NULL, "levels %u: %s", bad,
              last_error());
    }
    /* A root past the end of memory is unreadable: that read's reason. */
    leechio_device_info info;
    CHECK_STATUS(leechio_device_get_info(d, &info), LEECHIO_OK);
    s = (leechio_space *)&s;
    CHECK_STATUS(leechio_space_new(d, info.max_address, 0, NULL, &s), LEECHIO_OUT_OF_RANGE);
    snprintf(expect, sizeof expect, "the page-table root %#" PRIx64 " is unreadable",
             info.max_address);
    CHECK(s == NULL && strstr(last_error(), expect) != NULL, "%s", last_error());
    CHECK(leechio_space_levels(NULL) == 0 && strstr(last_error(), "`space` is NULL") != NULL,
          "%s", last_error());
    leechio_device_close(d);
}

static void test_virtual_write(void) {
    leechio_device *d = open_device("file://file=%s,write=1", P.virt);
    leechio_space *s = NULL;
    CHECK_STATUS(leechio_space_new(d, P.dtb, 4, NULL, &s), LEECHIO_OK);
    /* 16 bytes across a page boundary: two physical pages. */
    uint64_t va = P.vbase + 0x1ff8;
    static const uint8_t data[16] = "leechio virtual";
    leechio_translation lo, hi;
    CHECK_STATUS(leechio_space_translate(s, va, &lo), LEECHIO_OK);
    CHECK_STATUS(leechio_space_translate(s, va + 8, &hi), LEECHIO_OK);
    leechio_write_op w[2] = {{va, data, 16}, {P.vbase + P.vsize - 4, data, 8}};
    frags fs = {0};
    CHECK_STATUS(leechio_space_write(s, w, 2, collect, &fs), LEECHIO_INCOMPLETE);
    run whole[] = {{16, LEECHIO_OK}, {0, LEECHIO_OK}};
    check_fragments(&fs, 0, 16, whole);
    run end_runs[] = {{4, LEECHIO_OK}, {4, LEECHIO_NOT_MAPPED}, {0, LEECHIO_OK}};
    check_fragments(&fs, 1, 8, end_runs);
    uint8_t back[16] = {0};
    leechio_read_op r = {va, back, 16};
    CHECK_STATUS(leechio_space_read(s, &r, 1, NULL, NULL), LEECHIO_OK);
    CHECK(!memcmp(back, data, 16), "virtual write did not read back");
    leechio_space_free(s);
    leechio_device_close(d);

    size_t size;
    uint8_t *image = read_file(P.virt, &size);
    CHECK(!memcmp(image + lo.pa, data, 8) && !memcmp(image + hi.pa, data + 8, 8),
          "virtual write did not land at %#" PRIx64 " and %#" PRIx64, lo.pa, hi.pa);
    free(image);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s PARAMS_FILE\n", argv[0]);
        return 2;
    }
    read_params(argv[1]);
    size_t size;
    uint8_t *image = read_file(P.phys, &size);
    CHECK(size >= 16u << 20, "image of %zu bytes", size);
    for (size_t a = 0; a < size; a += 8) {
        uint64_t word = 0;
        for (int k = 7; k >= 0; k--) word = word << 8 | image[a + (size_t)k];
        CHECK(word == pattern_word(a), "the image does not hold the pattern at %#zx", a);
    }

    test_info_and_errors(image, size);
    test_physical_read(image, size);
    test_writes(size);
    test_queue(size);
    test_queue_reentry();
    test_virtual();
    test_five_levels();
    test_paging_detection();
    test_virtual_write();
    free(image);
    printf("leechio C API test: %u checks passed\n", checks);
    return 0;
}
