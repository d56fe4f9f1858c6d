/*
 * What the header promises beyond the bytes read, checked as a C program
 * sees it: a returned write is in the file for every reader, overlapping
 * writes land in the order given, every byte of every struct the library
 * fills is defined, optional pointers may be NULL, callbacks may call back
 * into the library, the load error tells a C caller how to choose the
 * library, and page tables built to explode a walk are walked once. Compiled and run by ffi/tests/c_api.rs like api_test.c (same
 * parameter file), also under valgrind, where a byte left undefined fails
 * the run.
 */
#define _XOPEN_SOURCE 700

#include "common.h"

#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <unistd.h>

/* ---- every byte defined ---- */

/* Branches on every byte of `p`: under valgrind an undefined one is an
 * error ("conditional jump depends on uninitialised value"). Returns the
 * number of odd bytes so the loop cannot be dropped. */
static size_t branch_on_bytes(const void *p, size_t n) {
    const volatile unsigned char *b = p;
    size_t odd = 0;
    for (size_t i = 0; i < n; i++)
        if (b[i] & 1) odd++;
    return odd;
}

#define CHECK_DEFINED(value)                                                             \
    CHECK(branch_on_bytes(&(value), sizeof(value)) <= sizeof(value), "%s", #value)

#define FIELD(type, field) sizeof(((type *)0)->field)

/* The members of each struct the library fills add up to its size: no
 * padding byte is left for the library to leave undefined. */
_Static_assert(sizeof(leechio_device_info) ==
                   4 * sizeof(uint64_t) + 3 * sizeof(bool) +
                       FIELD(leechio_device_info, padding),
               "leechio_device_info has padding");
_Static_assert(sizeof(leechio_memory_range) == 3 * sizeof(uint64_t),
               "leechio_memory_range has padding");
_Static_assert(sizeof(leechio_fragment) == 3 * sizeof(size_t) + sizeof(leechio_status) +
                                               FIELD(leechio_fragment, padding),
               "leechio_fragment has padding");
_Static_assert(sizeof(leechio_completion) ==
                   sizeof(uint64_t) + sizeof(uint8_t *) + sizeof(size_t) +
                       sizeof(leechio_status) + FIELD(leechio_completion, padding) +
                       sizeof(const leechio_fragment *) + sizeof(size_t),
               "leechio_completion has padding");
_Static_assert(sizeof(leechio_translation) ==
                   sizeof(uint64_t) + sizeof(leechio_status) + sizeof(uint32_t) +
                       2 * sizeof(uint64_t) + LEECHIO_LEVELS * sizeof(uint64_t) +
                       sizeof(uint32_t) + sizeof(int32_t),
               "leechio_translation has padding");
_Static_assert(sizeof(leechio_kernel_hints) ==
                   2 * sizeof(uint64_t) + sizeof(const char *) + sizeof(uint32_t) +
                       sizeof(bool) + FIELD(leechio_kernel_hints, padding),
               "leechio_kernel_hints has padding");
_Static_assert(sizeof(leechio_mapping) == 5 * sizeof(uint64_t) + sizeof(leechio_status) +
                                              FIELD(leechio_mapping, access),
               "leechio_mapping has padding");

static void check_fragment_defined(void *context, const leechio_fragment *f) {
    leechio_fragment copy = *f;
    CHECK_DEFINED(copy);
    CHECK(copy.padding == 0, "fragment padding %#x", copy.padding);
    collect(context, f);
}

static void check_mapping_defined(void *context, const leechio_mapping *m) {
    leechio_mapping copy = *m;
    CHECK_DEFINED(copy);
    CHECK((copy.access & ~7u) == 0, "mapping access %#x", copy.access);
    (*(size_t *)context)++;
}

static void check_completion_defined(void *context, leechio_queue *q,
                                     const leechio_completion *c) {
    (void)q;
    leechio_completion copy = *c;
    CHECK_DEFINED(copy);
    CHECK(copy.padding == 0, "completion padding %#x", copy.padding);
    for (size_t i = 0; i < c->fragment_count; i++) {
        leechio_fragment f = c->fragments[i];
        CHECK_DEFINED(f);
        CHECK(f.padding == 0, "fragment padding %#x", f.padding);
    }
    (*(int *)context)++;
}

static void test_defined_bytes(void) {
    leechio_device *d = open_device("file://%s", P.virt);
    leechio_device_info info;
    memset(&info, 0xaa, sizeof info);
    CHECK_STATUS(leechio_device_get_info(d, &info), LEECHIO_OK);
    CHECK_DEFINED(info);
    for (size_t i = 0; i < sizeof info.padding; i++)
        CHECK(info.padding[i] == 0, "device info padding byte %zu: %#x", i, info.padding[i]);
    leechio_memory_range ranges[2];
    memset(ranges, 0xaa, sizeof ranges);
    CHECK_STATUS(leechio_device_memory_map(d, ranges, 2, NULL), LEECHIO_OK);
    CHECK_DEFINED(ranges[0]);

    leechio_space *s = NULL, *s5 = NULL;
    CHECK_STATUS(leechio_space_new(d, P.dtb, 4, NULL, &s), LEECHIO_OK);
    CHECK_STATUS(leechio_space_new(d, P.dtb5, 5, NULL, &s5), LEECHIO_OK);
    /* Mapped, unmapped and non-canonical: every way a translation ends,
     * in both modes. Entries a walk did not read are 0, not left as they
     * were. */
    uint64_t vas[3] = {P.vbase, P.vbase + P.vsize + 0x10000, 0x0000800000000000ull};
    leechio_translation t[3], t5[3];
    memset(t, 0xaa, sizeof t);
    memset(t5, 0xaa, sizeof t5);
    CHECK_STATUS(leechio_space_translate_many(s, vas, 3, t), LEECHIO_INCOMPLETE);
    CHECK_STATUS(leechio_space_translate_many(s5, vas, 3, t5), LEECHIO_INCOMPLETE);
    for (int i = 0; i < 3; i++) {
        CHECK_DEFINED(t[i]);
        CHECK_DEFINED(t5[i]);
        CHECK(t[i].paging_levels == 4 && t5[i].paging_levels == 5, "translation %d modes %u, %u",
              i, t[i].paging_levels, t5[i].paging_levels);
        const leechio_translation *both[2] = {&t[i], &t5[i]};
        for (int m = 0; m < 2; m++) {
            uint32_t top = LEECHIO_LEVELS - both[m]->paging_levels;
            for (uint32_t l = 0; l < LEECHIO_LEVELS; l++)
                if (l < top || l >= top + both[m]->entry_count)
                    CHECK(both[m]->entries[l] == 0, "translation %d (%u levels): entry %u is %#" PRIx64,
                          i, both[m]->paging_levels, l, both[m]->entries[l]);
        }
    }
    leechio_translation one;
    memset(&one, 0xaa, sizeof one);
    CHECK_STATUS(leechio_space_translate(s, vas[1], &one), LEECHIO_NOT_MAPPED);
    CHECK_DEFINED(one);
    CHECK(!memcmp(&one, &t[1], sizeof one), "one translation differs from the same in a batch");
    leechio_space_free(s5);

    size_t mappings = 0;
    CHECK_STATUS(leechio_space_mappings(s, P.vbase, P.vbase + P.vsize - 1, check_mapping_defined,
                                        &mappings),
                 LEECHIO_OK);
    CHECK(mappings > 0, "no mapping reported");
    uint8_t buf[32];
    leechio_read_op op = {P.vbase + P.vsize - 16, buf, sizeof buf};
    frags fs = {0};
    CHECK_STATUS(leechio_space_read(s, &op, 1, check_fragment_defined, &fs), LEECHIO_INCOMPLETE);
    CHECK(fs.n == 2, "%zu fragments", fs.n);

    leechio_queue *q = NULL;
    CHECK_STATUS(leechio_queue_new(d, &q), LEECHIO_OK);
    int completions = 0;
    CHECK_STATUS(leechio_queue_read(q, 0x1000, buf, 8, check_completion_defined, &completions),
                 LEECHIO_OK);
    CHECK_STATUS(leechio_queue_read_virtual(q, s, op.address, buf, sizeof buf,
                                            check_completion_defined, &completions),
                 LEECHIO_OK);
    CHECK_STATUS(leechio_queue_run(q, NULL), LEECHIO_OK);
    /* Cancelled reads get their completion built another way. */
    CHECK_STATUS(leechio_queue_read(q, 0x2000, buf, 8, check_completion_defined, &completions),
                 LEECHIO_OK);
    leechio_queue_free(q);
    CHECK(completions == 3, "%d completions", completions);
    leechio_space_free(s);
    leechio_device_close(d);
}

/* ---- writes: in the file when the call returns, in the order given ---- */

static void check_file_holds(int fd, uint64_t at, const uint8_t *want, size_t len,
                             const char *what) {
    uint8_t *got = malloc(len);
    CHECK(got && pread(fd, got, len, (off_t)at) == (ssize_t)len, "pread at %#" PRIx64, at);
    for (size_t i = 0; i < len; i++)
        CHECK(got[i] == want[i], "%s: byte %#" PRIx64 " of the file is %#x, expected %#x", what,
              at + i, got[i], want[i]);
    free(got);
}

static void test_writes_reach_the_file(void) {
    size_t size;
    uint8_t *model = read_file(P.phys, &size);
    /* Another reader: its own descriptor, opened before the device. */
    int fd = open(P.phys, O_RDONLY);
    CHECK(fd >= 0, "cannot open %s", P.phys);
    leechio_device *d = open_device("file://file=%s,write=1", P.phys);

    /* One op at a time: each is in the file as soon as its call returns,
     * with the device still open and no call after it. */
    static const uint8_t small[5] = {1, 2, 3, 4, 5};
    static uint8_t page[0x1000];
    memset(page, 0x5c, sizeof page);
    leechio_write_op singles[3] = {{0x3003, small, 5}, {0x4000, page, 0x1000}, {0x3004, small, 2}};
    for (int i = 0; i < 3; i++) {
        CHECK_STATUS(leechio_write(d, &singles[i], 1, NULL, NULL), LEECHIO_OK);
        memcpy(model + singles[i].address, singles[i].data, singles[i].length);
        check_file_holds(fd, 0x3000, model + 0x3000, 0x2000, "a single write");
    }

    /* Overlapping ops of one call: the later op's bytes win. */
    static uint8_t fill[5][16];
    for (int i = 0; i < 5; i++) memset(fill[i], 0x11 * (i + 1), sizeof fill[i]);
    leechio_write_op overlapping[5] = {
        {0x6000, fill[0], 16}, {0x6004, fill[1], 4}, {0x6002, fill[2], 8},
        {0x6ffc, fill[3], 8},  {0x7000, fill[4], 2},
    };
    frags fs = {0};
    CHECK_STATUS(leechio_write(d, overlapping, 5, collect, &fs), LEECHIO_OK);
    CHECK(fs.n == 5, "%zu fragments", fs.n);
    for (int i = 0; i < 5; i++)
        memcpy(model + overlapping[i].address, overlapping[i].data, overlapping[i].length);
    check_file_holds(fd, 0x6000, model + 0x6000, 0x1010, "overlapping writes");
    /* And the device reads back what the file holds. */
    uint8_t back[0x1010];
    leechio_read_op r = {0x6000, back, sizeof back};
    CHECK_STATUS(leechio_read(d, &r, 1, NULL, NULL), LEECHIO_OK);
    CHECK(!memcmp(back, model + 0x6000, sizeof back), "overlapping writes read back differ");
    leechio_device_close(d);
    close(fd);
    free(model);
}

static void test_virtual_writes_overlap_in_order(void) {
    int fd = open(P.virt, O_RDONLY);
    CHECK(fd >= 0, "cannot open %s", P.virt);
    leechio_device *d = open_device("file://file=%s,write=1", P.virt);
    leechio_space *s = NULL;
    CHECK_STATUS(leechio_space_new(d, P.dtb, 4, NULL, &s), LEECHIO_OK);
    /* Across a page boundary: two physical pages. */
    uint64_t va = P.vbase + 0x2ff8;
    static const uint8_t first[16] = "aaaaaaaaaaaaaaaa", second[6] = "bbbbbb";
    leechio_write_op ops[2] = {{va, first, 16}, {va + 5, second, 6}};
    CHECK_STATUS(leechio_space_write(s, ops, 2, NULL, NULL), LEECHIO_OK);
    uint8_t want[16];
    memcpy(want, first, 16);
    memcpy(want + 5, second, 6);
    leechio_translation lo, hi;
    CHECK_STATUS(leechio_space_translate(s, va, &lo), LEECHIO_OK);
    CHECK_STATUS(leechio_space_translate(s, va + 8, &hi), LEECHIO_OK);
    check_file_holds(fd, lo.pa, want, 8, "overlapping virtual writes, first page");
    check_file_holds(fd, hi.pa, want + 8, 8, "overlapping virtual writes, second page");
    leechio_space_free(s);
    leechio_device_close(d);
    close(fd);
}

/* ---- optional pointers ---- */

static void test_optional_pointers(void) {
    leechio_device *d = open_device("file://%s", P.phys);
    /* The memory map's count is optional, like every out-count. */
    CHECK_STATUS(leechio_device_memory_map(d, NULL, 0, NULL), LEECHIO_OK);
    leechio_memory_range ranges[3] = {{0}};
    CHECK_STATUS(leechio_device_memory_map(d, ranges, 3, NULL), LEECHIO_OK);
    size_t size;
    uint8_t *image = read_file(P.phys, &size);
    free(image);
    CHECK(ranges[0].start == 0 && ranges[0].size == size && ranges[1].size == 0,
          "map without a count: %#" PRIx64 "+%#" PRIx64 ", then size %#" PRIx64,
          ranges[0].start, ranges[0].size, ranges[1].size);
    CHECK_STATUS(leechio_device_memory_map(d, ranges, 0, NULL), LEECHIO_BUFFER_TOO_SMALL);
    CHECK_STATUS(leechio_device_memory_map(NULL, NULL, 0, NULL), LEECHIO_NULL_ARGUMENT);
    CHECK_STATUS(leechio_device_name(d, NULL, 0, NULL), LEECHIO_OK);
    CHECK_STATUS(leechio_last_error_message(NULL, 0, NULL), LEECHIO_OK);
    leechio_queue *q = NULL;
    CHECK_STATUS(leechio_queue_new(d, &q), LEECHIO_OK);
    CHECK_STATUS(leechio_queue_flush(q, NULL), LEECHIO_OK);
    CHECK_STATUS(leechio_queue_run(q, NULL), LEECHIO_OK);
    leechio_queue_free(q);
    /* Required ones are refused, named in the message. */
    CHECK_STATUS(leechio_queue_new(d, NULL), LEECHIO_NULL_ARGUMENT);
    CHECK(strstr(last_error(), "`out` is NULL") != NULL, "message: %s", last_error());
    leechio_space *s = NULL;
    CHECK_STATUS(leechio_space_new(NULL, P.dtb, 4, NULL, &s), LEECHIO_NULL_ARGUMENT);
    CHECK(s == NULL && strstr(last_error(), "`device` is NULL") != NULL, "message: %s",
          last_error());
    leechio_device_close(d);
}

/* ---- callbacks calling back into the library ---- */

typedef struct {
    leechio_device *device;
    leechio_space *space;
    const uint8_t *image;
    int calls;
} reentry;

static void nested_fragment(void *context, const leechio_fragment *f) {
    (*(int *)context)++;
    CHECK(f->status == LEECHIO_OK, "nested fragment status %u", (unsigned)f->status);
}

/* From a batch's callback: a read on the same device, with a callback of
 * its own, and a call that fails. */
static void on_fragment_reenter(void *context, const leechio_fragment *f) {
    reentry *r = context;
    (void)f;
    r->calls++;
    uint64_t word = 0;
    int nested = 0;
    leechio_read_op op = {0x2000 + 8 * (uint64_t)r->calls, (uint8_t *)&word, 8};
    CHECK_STATUS(leechio_read(r->device, &op, 1, nested_fragment, &nested), LEECHIO_OK);
    CHECK(nested == 1 && word == pattern_word(op.address), "nested read of %#" PRIx64,
          op.address);
    leechio_device_info info;
    CHECK_STATUS(leechio_device_get_info(r->device, &info), LEECHIO_OK);
    CHECK_STATUS(leechio_device_get_info(r->device, NULL), LEECHIO_NULL_ARGUMENT);
}

/* From a mapping callback: a translation and a read in the same space. */
static void on_mapping_reenter(void *context, const leechio_mapping *m) {
    reentry *r = context;
    r->calls++;
    leechio_translation t;
    CHECK_STATUS(leechio_space_translate(r->space, m->va, &t), LEECHIO_OK);
    CHECK(t.pa == m->pa, "translation of %#" PRIx64 " from a mapping callback", m->va);
    uint8_t byte = 0;
    leechio_read_op op = {m->va, &byte, 1};
    CHECK_STATUS(leechio_space_read(r->space, &op, 1, NULL, NULL), LEECHIO_OK);
    CHECK(byte == pattern_byte(P.vseed + (m->va - P.vbase)), "byte at %#" PRIx64, m->va);
}

/* From a queued read's callback: a synchronous read and a translation on
 * the queue's device and space, then closing the device handle (the queue
 * keeps the device open). */
static void on_completion_reenter(void *context, leechio_queue *q, const leechio_completion *c) {
    reentry *r = context;
    CHECK(q != NULL && c->status == LEECHIO_OK, "queued read: status %u", (unsigned)c->status);
    r->calls++;
    if (r->device != NULL) {
        uint8_t bytes[16];
        leechio_read_op op = {0x3000, bytes, sizeof bytes};
        CHECK_STATUS(leechio_read(r->device, &op, 1, NULL, NULL), LEECHIO_OK);
        CHECK(!memcmp(bytes, r->image + 0x3000, sizeof bytes), "read from a queue callback");
        leechio_translation t;
        CHECK_STATUS(leechio_space_translate(r->space, P.vbase, &t), LEECHIO_OK);
        leechio_device_close(r->device);
        r->device = NULL;
    }
    if (r->calls < 3)
        CHECK_STATUS(leechio_queue_read(q, c->address + 8, c->buffer, 8, on_completion_reenter, r),
                     LEECHIO_OK);
}

static void test_callbacks_reenter(void) {
    size_t size;
    uint8_t *image = read_file(P.phys, &size);
    leechio_device *d = open_device("file://%s", P.phys);
    reentry r = {d, NULL, image, 0};
    uint8_t a[8], b[16];
    leechio_read_op ops[2] = {{0x1000, a, 8}, {size - 8, b, 16}};
    CHECK_STATUS(leechio_read(d, ops, 2, on_fragment_reenter, &r), LEECHIO_INCOMPLETE);
    CHECK(r.calls == 3, "%d fragment callbacks", r.calls);
    /* The failed call's message replaced the callbacks' failure... */
    CHECK(strstr(last_error(), "leechio_read: 1 operation(s) failed") == last_error(),
          "message: %s", last_error());
    /* ...and a call that succeeds leaves the callbacks' own. */
    r.calls = 0;
    CHECK_STATUS(leechio_read(d, ops, 1, on_fragment_reenter, &r), LEECHIO_OK);
    CHECK(!strcmp(last_error(), "leechio_device_get_info: `out` is NULL"), "message: %s",
          last_error());
    leechio_device_close(d);

    leechio_device *v = open_device("file://%s", P.virt);
    leechio_space *s = NULL;
    CHECK_STATUS(leechio_space_new(v, P.dtb, 4, NULL, &s), LEECHIO_OK);
    reentry m = {v, s, NULL, 0};
    CHECK_STATUS(leechio_space_mappings(s, P.vbase, P.vbase + P.vsize - 1, on_mapping_reenter, &m),
                 LEECHIO_OK);
    CHECK(m.calls > 0, "no mapping");

    uint8_t *virt = read_file(P.virt, &size);
    leechio_queue *q = NULL;
    CHECK_STATUS(leechio_queue_new(v, &q), LEECHIO_OK);
    reentry qr = {v, s, virt, 0};
    uint64_t word = 0;
    CHECK_STATUS(leechio_queue_read(q, 0x1000, (uint8_t *)&word, 8, on_completion_reenter, &qr),
                 LEECHIO_OK);
    size_t flushes = 0;
    CHECK_STATUS(leechio_queue_run(q, &flushes), LEECHIO_OK);
    CHECK(qr.calls == 3 && flushes == 3 && qr.device == NULL, "%d queue callbacks", qr.calls);
    uint64_t last;
    memcpy(&last, virt + 0x1010, 8);
    CHECK(word == last, "the last queued read after the device handle was closed");
    leechio_queue_free(q);
    leechio_space_free(s);
    free(virt);
    free(image);
}

/* ---- messages ---- */

static void test_messages(void) {
    char spec[4200];
    snprintf(spec, sizeof spec, "file://%s", P.phys);
    leechio_device *d = NULL;
    /* The load error tells a C caller its own ways to choose the library. */
    CHECK_STATUS(leechio_device_open(spec, NULL, "/nonexistent/leechcore.so", &d),
                 LEECHIO_LOAD_FAILED);
    const char *why = last_error();
    CHECK(strstr(why, "/nonexistent/leechcore.so (explicit path)") != NULL &&
              strstr(why, "`library` argument of leechio_device_open") != NULL &&
              strstr(why, "LEECHCORE_LIB") != NULL && strstr(why, "--lib") == NULL &&
              strstr(why, "lib=") == NULL,
          "load error: %s", why);
    /* LEECHCORE_LIB is a file path; when it is set, nothing else is tried:
     * a folder fails, though leechcore.so is beside libleechio. */
    char folder[4200];
    snprintf(folder, sizeof folder, "%s", P.phys);
    *strrchr(folder, '/') = '\0';
    CHECK(setenv("LEECHCORE_LIB", folder, 1) == 0, "setenv");
    CHECK_STATUS(leechio_device_open(spec, NULL, NULL, &d), LEECHIO_LOAD_FAILED);
    why = last_error();
    char tried[4300];
    snprintf(tried, sizeof tried, "looked in:\n  - %s (LEECHCORE_LIB): ", folder);
    CHECK(strstr(why, tried) != NULL && strstr(why, "beside this module") == NULL,
          "LEECHCORE_LIB naming a folder: %s", why);
    CHECK(unsetenv("LEECHCORE_LIB") == 0, "unsetenv");
    d = open_device("file://%s", P.phys);
    leechio_device_close(d);

    /* LEECHIO_INCOMPLETE is also what translate_many returns: its fixed
     * message speaks of translations too, not of fragments alone. */
    CHECK(!strcmp(leechio_status_message(LEECHIO_INCOMPLETE),
                  "partly failed: the fragments, translations or mappings reported say which "
                  "part and why"),
          "%s", leechio_status_message(LEECHIO_INCOMPLETE));
}

/* ---- hostile page tables: walked once, faults named ---- */

typedef struct {
    size_t ok, alias, reserved, other;
    leechio_mapping first_ok, first_alias, first_reserved;
} mapping_counts;

static void count_kinds(void *context, const leechio_mapping *m) {
    mapping_counts *c = context;
    switch (m->status) {
    case LEECHIO_OK:
        if (!c->ok++) c->first_ok = *m;
        break;
    case LEECHIO_ALIAS:
        if (!c->alias++) c->first_alias = *m;
        break;
    case LEECHIO_RESERVED_BITS:
        if (!c->reserved++) c->first_reserved = *m;
        break;
    default:
        c->other++;
    }
}

/* A table whose entries all point at itself but the last, which is a
 * faulting entry at every level above the page tables (PS in a PML5E or
 * PML4E; reserved bits in a large page) and a 4 KiB page in a page table:
 * 512^4 paths in 4-level paging, 512^5 in 5-level, one table read a
 * level. Its mode cannot be found: both readings fault. */
static void test_hostile_tables(void) {
    const uint64_t table = 0x400000, size = 16 << 20, last = 0x12345083;
    char path[] = "/tmp/leechio-hostile-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0 && ftruncate(fd, (off_t)size) == 0, "temporary image");
    uint64_t entries[512];
    for (int i = 0; i < 511; i++) entries[i] = table | 3;
    entries[511] = last;
    CHECK(pwrite(fd, entries, sizeof entries, (off_t)table) == (ssize_t)sizeof entries, "pwrite");
    close(fd);
    leechio_device *d = open_device("file://%s", path);
    for (uint32_t levels = 4; levels <= 5; levels++) {
        leechio_space *s = NULL;
        CHECK_STATUS(leechio_space_new(d, table, levels, NULL, &s), LEECHIO_OK);
        CHECK(leechio_space_levels(s) == levels, "%u levels", leechio_space_levels(s));
        /* Every level above the page tables: 510 aliases and a fault. */
        size_t above = levels - 1;
        mapping_counts c = {0};
        CHECK_STATUS(leechio_space_mappings(s, 0, UINT64_MAX, count_kinds, &c),
                     LEECHIO_INCOMPLETE);
        CHECK(c.ok == 512 && c.alias == above * 510 && c.reserved == above && c.other == 0,
              "%u levels: %zu mappings, %zu aliases, %zu reserved, %zu other", levels, c.ok,
              c.alias, c.reserved, c.other);
        CHECK(c.first_ok.va == 0 && c.first_ok.pa == table && c.first_ok.size == 0x1000,
              "first mapping %#" PRIx64 " -> %#" PRIx64, c.first_ok.va, c.first_ok.pa);
        /* The first alias: entry 1 of the page directory, 2 MiB, as 0. */
        CHECK(c.first_alias.va == 0x200000 && c.first_alias.size == 0x200000 &&
                  c.first_alias.same_as == 0 && c.first_alias.pa == 0,
              "first alias %#" PRIx64 " (%#" PRIx64 ") as %#" PRIx64, c.first_alias.va,
              c.first_alias.size, c.first_alias.same_as);
        /* The first faulting range: entry 511 of the page directory. */
        CHECK(c.first_reserved.va == 511ull << 21 && c.first_reserved.size == 0x200000,
              "first reserved %#" PRIx64, c.first_reserved.va);
        /* The top entry of the last address faults at the top level. */
        leechio_translation t;
        CHECK_STATUS(leechio_space_translate(s, 0xffffff8000000000ull, &t),
                     LEECHIO_RESERVED_BITS);
        int top = (int)(LEECHIO_LEVELS - levels);
        CHECK(t.status == LEECHIO_RESERVED_BITS && t.failed_level == top &&
                  t.entries[top] == last && t.entry_count == 1,
              "translation: %u at level %d", (unsigned)t.status, t.failed_level);
        leechio_space_free(s);
    }
    CHECK(!strcmp(leechio_status_message(LEECHIO_RESERVED_BITS),
                  "page-table entry with reserved bits set (a CPU would fault)"),
          "%s", leechio_status_message(LEECHIO_RESERVED_BITS));

    /* Asked to find the mode: neither fits, and the message says where
     * each reading faults. */
    leechio_space *s = (leechio_space *)&s;
    CHECK_STATUS(leechio_space_new(d, table, LEECHIO_PAGING_DETECT, NULL, &s),
                 LEECHIO_PAGING_UNKNOWN);
    CHECK(s == NULL && strstr(last_error(), "the tables at 0x400000 fit neither mode: read as "
                                            "4-level, PML4E 0x12345083 at 0x400ff8") != NULL &&
              strstr(last_error(), "as 5-level, PML5E 0x12345083 at 0x400ff8") != NULL,
          "%s", last_error());
    /* A root of zeros maps nothing in either mode: nothing tells. */
    CHECK_STATUS(leechio_space_new(d, table + 0x1000, 0, NULL, &s), LEECHIO_PAGING_UNKNOWN);
    CHECK(strstr(last_error(), "read as well in 4-level as in 5-level paging") != NULL, "%s",
          last_error());
    leechio_device_close(d);
    unlink(path);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s PARAMS_FILE\n", argv[0]);
        return 2;
    }
    read_params(argv[1]);
    test_defined_bytes();
    test_optional_pointers();
    test_callbacks_reenter();
    test_messages();
    test_writes_reach_the_file();
    test_virtual_writes_overlap_in_order();
    test_hostile_tables();
    printf("leechio C API promises: %u checks passed\n", checks);
    return 0;
}
