/*
 * The process list of the C API against a memory image of the test guest
 * (tests/c_processes.rs writes it, and what the guest's /proc said).
 *
 * Parameter file, one item a line:
 *   image PATH          the guest's RAM
 *   levels N            the guest's paging mode (CR4.LA57): 4 or 5
 *   calls N             read calls a list must take
 *   pattern PID START   the pattern process and its first patterned address
 *   user PID PPID STATE NAME_HEX ARGS_HEX
 *                       a user process: its name and its /proc/PID/cmdline
 *                       bytes in hex ("-" for none)
 *   notlinux PATH       an image with no kernel in it
 *   module NAME SIZE ADDRESS STATE
 *                       a line of /proc/modules (in its order; the
 *                       address in hex)
 */
#include "common.h"

#include <string.h>

#define MAX_USER 64
#define MAX_SEEN 4096
#define TEXT 8192

#define MAX_MODULES 64

typedef struct {
    char name[64], state[16];
    uint64_t size, base;
} guest_module;

typedef struct {
    uint32_t pid, ppid;
    char state;
    char name[64];
    uint8_t args[TEXT];
    size_t args_length;
} user_process;

static struct {
    char image[4096], notlinux[4096];
    uint64_t calls, pattern_start;
    unsigned levels;
    uint32_t pattern_pid;
    size_t nuser;
    user_process user[MAX_USER];
    size_t nmodules;
    guest_module modules[MAX_MODULES];
} Q;

/* What the callback saw: every process, copied. */
typedef struct {
    size_t n;
    leechio_process p[MAX_SEEN];
    char name[MAX_SEEN][64];
    uint8_t args[MAX_SEEN][TEXT];
    char cmdline[MAX_SEEN][TEXT];
} seen_list;

static seen_list seen;

static void read_parameters(const char *path) {
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "cannot open %s", path);
    static char key[32], a[TEXT * 2 + 8], b[TEXT * 2 + 8];
    while (fscanf(f, "%31s", key) == 1) {
        if (!strcmp(key, "image")) CHECK(fscanf(f, "%4095s", Q.image) == 1, "image");
        else if (!strcmp(key, "notlinux")) CHECK(fscanf(f, "%4095s", Q.notlinux) == 1, "notlinux");
        else if (!strcmp(key, "levels")) CHECK(fscanf(f, "%u", &Q.levels) == 1, "levels");
        else if (!strcmp(key, "calls")) CHECK(fscanf(f, "%lu", (unsigned long *)&Q.calls) == 1, "calls");
        else if (!strcmp(key, "pattern")) {
            unsigned long start;
            CHECK(fscanf(f, "%u %lx", &Q.pattern_pid, &start) == 2, "pattern");
            Q.pattern_start = start;
        } else if (!strcmp(key, "user")) {
            CHECK(Q.nuser < MAX_USER, "too many user processes");
            user_process *u = &Q.user[Q.nuser++];
            CHECK(fscanf(f, "%u %u %c %16391s %16391s", &u->pid, &u->ppid, &u->state, a, b) == 5,
                  "user line");
            size_t n = unhex(a, (uint8_t *)u->name, sizeof u->name - 1);
            u->name[n] = 0;
            u->args_length = unhex(b, u->args, sizeof u->args);
        } else if (!strcmp(key, "module")) {
            CHECK(Q.nmodules < MAX_MODULES, "too many modules");
            guest_module *m = &Q.modules[Q.nmodules++];
            unsigned long size, base;
            CHECK(fscanf(f, "%63s %lu %lx %15s", m->name, &size, &base, m->state) == 4,
                  "module line");
            m->size = size;
            m->base = base;
        } else CHECK(0, "unknown parameter %s", key);
    }
    fclose(f);
}

static void collect_process(void *context, const leechio_process *p) {
    seen_list *s = context;
    CHECK(s->n < MAX_SEEN, "too many processes");
    size_t i = s->n++;
    s->p[i] = *p;
    snprintf(s->name[i], sizeof s->name[i], "%s", p->name);
    snprintf(s->cmdline[i], sizeof s->cmdline[i], "%s", p->cmdline);
    CHECK(p->args_length <= TEXT, "args of %zu bytes", p->args_length);
    memcpy(s->args[i], p->args, p->args_length);
    /* The copies are what the test reads: the pointers die with the call. */
    s->p[i].name = s->name[i];
    s->p[i].cmdline = s->cmdline[i];
    s->p[i].args = (const char *)s->args[i];
}

static const leechio_process *find(uint32_t pid) {
    for (size_t i = 0; i < seen.n; i++)
        if (seen.p[i].pid == pid) return &seen.p[i];
    return NULL;
}

static void test_processes(leechio_device *d) {
    leechio_kernel *k = find_kernel(d);
    CHECK(leechio_kernel_levels(k) == Q.levels, "the kernel's tables read in %u levels, not %u",
          leechio_kernel_levels(k), Q.levels);

    uint64_t before = scatter_calls(d, LEECHIO_CALL_READ_SCATTER);
    CHECK_STATUS(leechio_kernel_processes(k, collect_process, &seen), LEECHIO_OK);
    uint64_t calls = scatter_calls(d, LEECHIO_CALL_READ_SCATTER) - before;
    CHECK(calls == Q.calls, "the list took %lu read calls, not %lu", (unsigned long)calls,
          (unsigned long)Q.calls);

    /* Every user process as /proc said; the rest kernel threads. */
    size_t users = 0;
    for (size_t i = 0; i < seen.n; i++) {
        const leechio_process *p = &seen.p[i];
        CHECK(i == 0 || seen.p[i - 1].pid < p->pid, "not by pid at %u", p->pid);
        CHECK(p->tgid == p->pid && p->thread_count >= 1, "pid %u", p->pid);
        if (p->kernel_thread) {
            CHECK(p->dtb == 0 && p->mm == 0 && p->args_length == 0 && !p->cmdline[0],
                  "kernel thread %u", p->pid);
        } else users++;
    }
    CHECK(users == Q.nuser, "%zu user processes, /proc listed %zu", users, Q.nuser);
    for (size_t i = 0; i < Q.nuser; i++) {
        const user_process *u = &Q.user[i];
        const leechio_process *p = find(u->pid);
        CHECK(p != NULL, "pid %u not listed", u->pid);
        CHECK(!p->kernel_thread && p->ppid == u->ppid && p->state == u->state,
              "pid %u: ppid %u state %c", u->pid, p->ppid, p->state);
        CHECK(!strcmp(p->name, u->name), "pid %u: name %s, not %s", u->pid, p->name, u->name);
        CHECK(p->args_length == u->args_length && !memcmp(p->args, u->args, u->args_length),
              "pid %u: %zu bytes of arguments, /proc %zu", u->pid, p->args_length,
              u->args_length);
        CHECK((p->dtb != 0) == (u->state != 'Z'), "pid %u: dtb %#lx", u->pid,
              (unsigned long)p->dtb);
        /* The joined command line: the arguments with spaces for NULs. */
        size_t n = u->args_length ? u->args_length - 1 : 0;
        for (size_t j = 0; j < n; j++)
            CHECK(p->cmdline[j] == (u->args[j] ? (char)u->args[j] : ' '), "pid %u cmdline %s",
                  u->pid, p->cmdline);
        CHECK(p->cmdline[n] == 0, "pid %u cmdline %s", u->pid, p->cmdline);
    }
    const leechio_process *pattern = find(Q.pattern_pid);
    CHECK(pattern && pattern->thread_count == 3, "the pattern process's threads");

    /* Its address space by pid, read as the pattern. */
    leechio_space *space = NULL;
    CHECK_STATUS(leechio_space_new_for_pid(k, Q.pattern_pid, NULL, &space), LEECHIO_OK);
    CHECK(leechio_space_levels(space) == Q.levels, "the process's space has %u levels",
          leechio_space_levels(space));
    uint64_t words[16];
    leechio_read_op op = {Q.pattern_start, (uint8_t *)words, sizeof words};
    CHECK_STATUS(leechio_space_read(space, &op, 1, NULL, NULL), LEECHIO_OK);
    for (int i = 0; i < 16; i++)
        CHECK(words[i] == pattern_word(Q.pattern_start + 8 * (uint64_t)i), "word %d", i);
    leechio_space_free(space);

    /* No space for a kernel thread, nor for a pid nobody has. */
    space = (leechio_space *)&space;
    CHECK_STATUS(leechio_space_new_for_pid(k, 2, NULL, &space), LEECHIO_NOT_FOUND);
    CHECK(space == NULL && strstr(last_error(), "pid 2 (kthreadd) is a kernel thread"), "%s",
          last_error());
    CHECK_STATUS(leechio_space_new_for_pid(k, 4000000, NULL, &space), LEECHIO_NOT_FOUND);
    CHECK(strstr(last_error(), "no process has pid 4000000"), "%s", last_error());
    CHECK_STATUS(leechio_kernel_processes(k, NULL, NULL), LEECHIO_NULL_ARGUMENT);
    CHECK_STATUS(leechio_kernel_processes(NULL, collect_process, &seen), LEECHIO_NULL_ARGUMENT);
    CHECK(leechio_kernel_levels(NULL) == 0 && strstr(last_error(), "`kernel` is NULL"), "%s",
          last_error());
    leechio_kernel_free(k);
    leechio_kernel_free(NULL);
}

/* What the module callback saw, copied. */
static struct {
    size_t n;
    guest_module m[MAX_MODULES];
} modules_seen;

static void collect_module(void *context, const leechio_module *m) {
    (void)context;
    CHECK(modules_seen.n < MAX_MODULES, "too many modules");
    guest_module *g = &modules_seen.m[modules_seen.n++];
    snprintf(g->name, sizeof g->name, "%s", m->name);
    snprintf(g->state, sizeof g->state, "%s", m->state);
    g->size = m->size;
    g->base = m->base;
}

static void test_modules(leechio_device *d) {
    leechio_kernel *k = find_kernel(d);
    uint64_t before = scatter_calls(d, LEECHIO_CALL_READ_SCATTER);
    CHECK_STATUS(leechio_kernel_modules(k, collect_module, NULL), LEECHIO_OK);
    uint64_t calls = scatter_calls(d, LEECHIO_CALL_READ_SCATTER) - before;
    /* The list's head, a call per two modules, and at most a call per
       level of the module area's tables. */
    uint64_t most = 1 + (Q.nmodules + 1) / 2 + Q.levels;
    CHECK(calls <= most, "the module list took %lu read calls, more than %lu",
          (unsigned long)calls, (unsigned long)most);
    /* /proc/modules, in its order. */
    CHECK(modules_seen.n == Q.nmodules, "%zu modules, /proc/modules has %zu", modules_seen.n,
          Q.nmodules);
    for (size_t i = 0; i < Q.nmodules; i++) {
        const guest_module *g = &modules_seen.m[i], *q = &Q.modules[i];
        CHECK(!strcmp(g->name, q->name) && g->size == q->size && g->base == q->base &&
                  !strcmp(g->state, q->state),
              "module %zu: %s %lu %#lx %s, /proc/modules: %s %lu %#lx %s", i, g->name,
              (unsigned long)g->size, (unsigned long)g->base, g->state, q->name,
              (unsigned long)q->size, (unsigned long)q->base, q->state);
    }
    CHECK_STATUS(leechio_kernel_modules(k, NULL, NULL), LEECHIO_NULL_ARGUMENT);
    CHECK_STATUS(leechio_kernel_modules(NULL, collect_module, NULL), LEECHIO_NULL_ARGUMENT);
    leechio_kernel_free(k);
}

static void test_not_linux(void) {
    leechio_device *d = open_device("file://%s", Q.notlinux);
    leechio_kernel *k = (leechio_kernel *)&d;
    leechio_kernel_hints hints;
    memset(&hints, 0, sizeof hints);
    hints.no_cache = true;
    CHECK_STATUS(leechio_kernel_find(d, &hints, &k), LEECHIO_NOT_FOUND);
    CHECK(k == NULL, "a handle on failure");
    CHECK(strstr(last_error(), "leechio_kernel_find: no Linux kernel found: "), "%s",
          last_error());
    CHECK(!strcmp(leechio_status_message(LEECHIO_NOT_FOUND),
                  "not found (no Linux kernel, or no such process)"),
          "%s", leechio_status_message(LEECHIO_NOT_FOUND));
    CHECK_STATUS(leechio_kernel_find(d, NULL, NULL), LEECHIO_NULL_ARGUMENT);
    /* A paging mode hint must be one. */
    hints.levels = 3;
    CHECK_STATUS(leechio_kernel_find(d, &hints, &k), LEECHIO_INVALID_ARGUMENT);
    CHECK(k == NULL && strstr(last_error(), "`levels` is 3"), "%s", last_error());
    leechio_device_close(d);
}

int main(int argc, char **argv) {
    CHECK(argc == 2, "usage: %s PARAMS", argv[0]);
    read_parameters(argv[1]);
    leechio_device *d = open_device("file://%s", Q.image);
    test_processes(d);
    test_modules(d);
    leechio_device_close(d);
    test_not_linux();
    printf("%u checks passed\n", checks);
    return 0;
}
