/*
 * The paging mode through the C API on a live guest, 4-level or 5-level
 * (CR4.LA57): tests/c_paging.rs runs it with the guest paused, the
 * monitor's own walks of the kernel's tables in the parameter file, and
 * checks what it prints against the monitor too.
 *
 * Parameter file, one item a line:
 *   device STRING      the guest's LeechCore device string
 *   levels N           its paging mode per CR4.LA57: 4 or 5
 *   dtb X              the kernel's top-level table (init_top_pgt)
 *   walk VA KIND PA E0 E1 E2 E3 E4
 *                      the monitor's walk of VA from dtb: KIND ok, unmapped
 *                      or noncanonical; PA where ok (else 0); the entry read
 *                      at each level (PML5E first) in hex, - where none
 *   user PID ARGS_HEX  a user process and its /proc/PID/cmdline bytes
 *                      ("-" for none)
 *   pattern PID START  the pattern process and its first patterned address
 *
 * Prints "pattern-walk DTB VA PA E0 E1 E2 E3 E4", the library's walk of
 * the pattern's first address in the process's space (entries as above),
 * for the driver to check against the monitor. Exits 1 on the first
 * mismatch.
 */
#include "common.h"

#include <inttypes.h>
#include <string.h>

#define MAX_WALKS 64
#define MAX_USERS 64
#define MAX_SEEN 4096
#define ARGS 8192

typedef struct {
    uint64_t va, pa;
    leechio_status status;
    int read[LEECHIO_LEVELS];
    uint64_t entries[LEECHIO_LEVELS];
} walk;

static struct {
    char device[4096];
    uint32_t levels;
    uint64_t dtb, pattern_start;
    uint32_t pattern_pid;
    size_t nwalks, nusers;
    walk walks[MAX_WALKS];
    uint32_t user_pid[MAX_USERS];
    uint8_t user_args[MAX_USERS][ARGS];
    size_t user_args_length[MAX_USERS];
} Q;

static void read_parameters(const char *path) {
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "cannot open %s", path);
    static char key[32], a[64], b[2 * ARGS + 8];
    while (fscanf(f, "%31s", key) == 1) {
        if (!strcmp(key, "device")) CHECK(fscanf(f, "%4095s", Q.device) == 1, "device");
        else if (!strcmp(key, "levels")) CHECK(fscanf(f, "%" SCNu32, &Q.levels) == 1, "levels");
        else if (!strcmp(key, "dtb")) CHECK(fscanf(f, "%" SCNx64, &Q.dtb) == 1, "dtb");
        else if (!strcmp(key, "pattern"))
            CHECK(fscanf(f, "%" SCNu32 " %" SCNx64, &Q.pattern_pid, &Q.pattern_start) == 2,
                  "pattern");
        else if (!strcmp(key, "user")) {
            CHECK(Q.nusers < MAX_USERS, "too many user processes");
            size_t i = Q.nusers++;
            CHECK(fscanf(f, "%" SCNu32 " %16391s", &Q.user_pid[i], b) == 2, "user line");
            Q.user_args_length[i] = unhex(b, Q.user_args[i], ARGS);
        } else if (!strcmp(key, "walk")) {
            CHECK(Q.nwalks < MAX_WALKS, "too many walks");
            walk *w = &Q.walks[Q.nwalks++];
            CHECK(fscanf(f, "%" SCNx64 " %63s %" SCNx64, &w->va, a, &w->pa) == 3, "walk line");
            w->status = !strcmp(a, "ok")         ? LEECHIO_OK
                        : !strcmp(a, "unmapped") ? LEECHIO_NOT_MAPPED
                                                 : LEECHIO_NON_CANONICAL;
            for (int l = 0; l < LEECHIO_LEVELS; l++) {
                CHECK(fscanf(f, "%63s", a) == 1, "walk entries");
                w->read[l] = strcmp(a, "-") != 0;
                w->entries[l] = w->read[l] ? strtoull(a, NULL, 16) : 0;
            }
        } else CHECK(0, "unknown parameter %s", key);
    }
    fclose(f);
}

/* `t` is the monitor's walk `w`, in the guest's mode: the same end, and
 * the same entry at every level. */
static void check_walk(const leechio_translation *t, const walk *w) {
    uint32_t read = 0;
    int last = -1;
    for (int l = 0; l < LEECHIO_LEVELS; l++) {
        CHECK(t->entries[l] == w->entries[l], "%#" PRIx64 ": entry at level %d is %#" PRIx64
              ", the monitor read %#" PRIx64, w->va, l, t->entries[l], w->entries[l]);
        if (w->read[l]) read++, last = l;
    }
    CHECK(t->va == w->va && t->status == w->status && t->pa == w->pa &&
              t->paging_levels == Q.levels && t->entry_count == read,
          "%#" PRIx64 ": status %u pa %#" PRIx64 " (%u entries in %u levels); the monitor: "
          "status %u pa %#" PRIx64 " (%u entries)",
          w->va, (unsigned)t->status, t->pa, t->entry_count, t->paging_levels,
          (unsigned)w->status, w->pa, read);
    /* A walk that ends at a PTE maps 4 KiB, at a PDE 2 MiB, at a PDPTE 1 GiB. */
    uint64_t size = w->status == LEECHIO_OK ? 1ull << (12 + 9 * (LEECHIO_LEVEL_PTE - last)) : 0;
    int failed = w->status == LEECHIO_NOT_MAPPED ? last : -1;
    CHECK(t->page_size == size && t->failed_level == failed,
          "%#" PRIx64 ": page size %#" PRIx64 " failed at %d, expected %#" PRIx64 " at %d", w->va,
          t->page_size, t->failed_level, size, failed);
}

static void test_kernel_tables(leechio_device *d) {
    leechio_space *found = NULL, *given = NULL;
    CHECK_STATUS(leechio_space_new(d, Q.dtb, LEECHIO_PAGING_DETECT, NULL, &found), LEECHIO_OK);
    CHECK(leechio_space_levels(found) == Q.levels, "the kernel's tables found in %u levels, not %u",
          leechio_space_levels(found), Q.levels);
    CHECK_STATUS(leechio_space_new(d, Q.dtb, Q.levels, NULL, &given), LEECHIO_OK);
    uint64_t vas[MAX_WALKS];
    leechio_translation t[MAX_WALKS], again[MAX_WALKS];
    for (size_t i = 0; i < Q.nwalks; i++) vas[i] = Q.walks[i].va;
    leechio_space_translate_many(found, vas, Q.nwalks, t);
    leechio_space_translate_many(given, vas, Q.nwalks, again);
    for (size_t i = 0; i < Q.nwalks; i++) {
        check_walk(&t[i], &Q.walks[i]);
        CHECK(!memcmp(&t[i], &again[i], sizeof t[i]), "%#" PRIx64 ": the mode given walks apart",
              vas[i]);
    }
    leechio_space_free(found);
    leechio_space_free(given);
}

/* What the process list gave: every process, its arguments copied. */
static struct {
    size_t n;
    leechio_process p[MAX_SEEN];
    uint8_t args[MAX_SEEN][ARGS];
} seen;

static void collect_process(void *context, const leechio_process *p) {
    (void)context;
    CHECK(seen.n < MAX_SEEN && p->args_length <= ARGS, "too many processes, or arguments");
    seen.p[seen.n] = *p;
    memcpy(seen.args[seen.n], p->args, p->args_length);
    seen.p[seen.n].name = seen.p[seen.n].cmdline = seen.p[seen.n].args = NULL;
    seen.n++;
}

static void test_processes(leechio_device *d) {
    leechio_kernel *k = find_kernel(d);
    CHECK(leechio_kernel_levels(k) == Q.levels, "the kernel's mode: %u levels, not %u",
          leechio_kernel_levels(k), Q.levels);
    CHECK_STATUS(leechio_kernel_processes(k, collect_process, NULL), LEECHIO_OK);

    /* The user processes /proc listed, with their arguments, and each
     * one's tables in the guest's mode, found from its own root too. */
    size_t users = 0;
    for (size_t i = 0; i < seen.n; i++) {
        const leechio_process *p = &seen.p[i];
        if (p->kernel_thread) continue;
        users++;
        size_t u = 0;
        while (u < Q.nusers && Q.user_pid[u] != p->pid) u++;
        CHECK(u < Q.nusers, "pid %" PRIu32 " is not in /proc", p->pid);
        CHECK(p->args_length == Q.user_args_length[u] &&
                  !memcmp(seen.args[i], Q.user_args[u], p->args_length),
              "pid %" PRIu32 ": %zu bytes of arguments, /proc %zu", p->pid, p->args_length,
              Q.user_args_length[u]);
        if (p->dtb == 0) continue;
        leechio_space *s = NULL;
        CHECK_STATUS(leechio_space_new(d, p->dtb, LEECHIO_PAGING_DETECT, NULL, &s), LEECHIO_OK);
        CHECK(leechio_space_levels(s) == Q.levels, "pid %" PRIu32 ": its root reads in %u levels",
              p->pid, leechio_space_levels(s));
        leechio_space_free(s);
        CHECK_STATUS(leechio_space_new_for_pid(k, p->pid, NULL, &s), LEECHIO_OK);
        CHECK(leechio_space_levels(s) == Q.levels, "pid %" PRIu32 ": its space has %u levels",
              p->pid, leechio_space_levels(s));
        leechio_space_free(s);
    }
    CHECK(users == Q.nusers, "%zu user processes, /proc listed %zu", users, Q.nusers);

    /* The pattern process: its bytes, and its walk for the driver. */
    leechio_space *s = NULL;
    CHECK_STATUS(leechio_space_new_for_pid(k, Q.pattern_pid, NULL, &s), LEECHIO_OK);
    uint64_t words[16];
    leechio_read_op op = {Q.pattern_start, (uint8_t *)words, sizeof words};
    CHECK_STATUS(leechio_space_read(s, &op, 1, NULL, NULL), LEECHIO_OK);
    for (int i = 0; i < 16; i++)
        CHECK(words[i] == pattern_word(Q.pattern_start + 8 * (uint64_t)i), "word %d", i);
    leechio_translation t;
    CHECK_STATUS(leechio_space_translate(s, Q.pattern_start, &t), LEECHIO_OK);
    uint64_t dtb = 0;
    for (size_t i = 0; i < seen.n; i++)
        if (seen.p[i].pid == Q.pattern_pid) dtb = seen.p[i].dtb;
    printf("pattern-walk %#" PRIx64 " %#" PRIx64 " %#" PRIx64, dtb, t.va, t.pa);
    for (uint32_t l = 0; l < LEECHIO_LEVELS; l++) {
        uint32_t top = LEECHIO_LEVELS - t.paging_levels;
        if (l >= top && l < top + t.entry_count) printf(" %#" PRIx64, t.entries[l]);
        else printf(" -");
    }
    printf("\n");
    leechio_space_free(s);
    leechio_kernel_free(k);
}

int main(int argc, char **argv) {
    CHECK(argc == 2, "usage: %s PARAMS", argv[0]);
    read_parameters(argv[1]);
    CHECK(Q.levels == 4 || Q.levels == 5, "levels %u", Q.levels);
    leechio_device *d = open_device("%s", Q.device);
    test_kernel_tables(d);
    test_processes(d);
    leechio_device_close(d);
    printf("leechio C paging test: %u checks passed\n", checks);
    return 0;
}
