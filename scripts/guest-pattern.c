/*
 * The test guest's pattern process, /bin/leechio-pattern in the initramfs
 * that scripts/guest.sh builds (statically linked, so the guest needs no
 * libraries). It gives the tests what busybox cannot:
 *
 *   - memory whose every byte is known: PAGES pages (64, 256 KiB) of private
 *     anonymous memory in which the 8 bytes at virtual address VA hold
 *     pattern_word(VA), little endian (the same hash as the tests'
 *     `common::pattern_word`, so a page read from the wrong place shows).
 *     The first half stays read-write, the second half is made read-only:
 *     two VMAs, `rw-p` and `r--p`. One inaccessible page on each side keeps
 *     the kernel from merging them with a neighbour (a thread's stack, say),
 *     so /proc/PID/maps shows exactly START-MID and MID-END;
 *   - two threads, named leechio-thr-1 and leechio-thr-2, so the process
 *     has three tasks (pid == tgid for the first only);
 *   - a comm with spaces and parentheses, "leech (pat) x";
 *   - two children that stay in known states: one stopped (state T, comm
 *     leechio-stopped) and one exited with status 42 but never reaped
 *     (state Z, comm leechio-zombie: no mm, yet not a kernel thread);
 *   - open files of every kind /proc names (open_files below), which the
 *     stopped child inherits: a file read up to a known position, a file
 *     unlinked while open, a folder, a file whose name does not fit in its
 *     dentry, a file opened O_APPEND | O_CLOEXEC, a pipe, a socket pair,
 *     an AF_INET socket, an eventfd, a memfd, a file with a tab in its
 *     name (which a terminal must be shown escaped), and a copy of the
 *     first file at fd 100, so the process's fd table outgrows the 64 fds
 *     its files_struct holds itself;
 *   - TCP and UDP sockets on the loopback device, IPv4 and IPv6
 *     (open_sockets below), which the stopped child holds too: a TCP
 *     listener on 127.0.0.1:7001 with a connection to it (both ends), a
 *     TCP listener on [::]:7002 with a connection to [::1]:7002 and one
 *     from an IPv6 socket to 127.0.0.1:7001 (an IPv4-mapped address), a
 *     UDP socket bound to 0.0.0.0:7003, and one bound to [::1]:7004 and
 *     connected to [::1]:7003.
 *
 * Once all of that is in place it writes one line "START END" (hex, no
 * 0x) to standard output, closes it, and then waits for ever. /init reads
 * that line from a FIFO, so nothing is printed about the process before it
 * is ready.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

enum { PAGE = 4096, PAGES = 64 };

/* splitmix64's finaliser of addr + golden ratio: tests/common/mod.rs
 * pattern_word. */
static uint64_t pattern_word(uint64_t addr)
{
    uint64_t z = addr + 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void fail(const char *what)
{
    perror(what);
    exit(1);
}

static void *idle(void *unused)
{
    (void)unused;
    for (;;)
        pause();
    return NULL;
}

/* The folder of the files below, and where the first is read up to. */
#define FILES "/leechio-files"
enum { DATA_POS = 1234, DATA_COPY = 100 };

static int open_or_fail(const char *path, int flags)
{
    int fd = open(path, flags, 0644);
    if (fd < 0)
        fail(path);
    return fd;
}

/* The open files (see the top of this file). */
static void open_files(void)
{
    static char block[4096];
    int pipe_fds[2], pair[2];
    if (mkdir(FILES, 0755) != 0)
        fail("mkdir " FILES);
    int data = open_or_fail(FILES "/data", O_RDWR | O_CREAT);
    if (write(data, block, sizeof block) != (ssize_t)sizeof block || lseek(data, DATA_POS, SEEK_SET) != DATA_POS)
        fail("data");
    open_or_fail(FILES "/gone", O_RDWR | O_CREAT);
    if (unlink(FILES "/gone") != 0)
        fail("unlink");
    open_or_fail(FILES, O_RDONLY | O_DIRECTORY);
    open_or_fail(FILES "/a-name-longer-than-a-dentry-keeps-inside-itself", O_WRONLY | O_CREAT);
    open_or_fail(FILES "/log", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC);
    if (pipe(pipe_fds) != 0)
        fail("pipe");
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0)
        fail("socketpair");
    if (socket(AF_INET, SOCK_DGRAM, 0) < 0)
        fail("socket");
    if (eventfd(0, EFD_CLOEXEC) < 0)
        fail("eventfd");
    if (memfd_create("leechio-memfd", 0) < 0)
        fail("memfd_create");
    open_or_fail(FILES "/tab\there", O_WRONLY | O_CREAT);
    if (dup2(data, DATA_COPY) != DATA_COPY)
        fail("dup2");
}

/* A socket of `family` and `type`, bound to `address`:`port` when
 * `address` is given, then connected to `peer`:`peer_port` when `peer`
 * is. */
static int inet_socket(int family, int type, const char *address, int port, const char *peer,
                       int peer_port)
{
    int fd = socket(family, type, 0), one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0)
        fail("socket");
    struct sockaddr_storage at;
    socklen_t len;
    for (int i = 0; i < 2; i++) {
        const char *host = i == 0 ? address : peer;
        int to = i == 0 ? port : peer_port;
        if (!host)
            continue;
        memset(&at, 0, sizeof at);
        if (family == AF_INET) {
            struct sockaddr_in *v4 = (struct sockaddr_in *)&at;
            v4->sin_family = AF_INET;
            v4->sin_port = htons(to);
            len = sizeof *v4;
            if (inet_pton(AF_INET, host, &v4->sin_addr) != 1)
                fail(host);
        } else {
            struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&at;
            v6->sin6_family = AF_INET6;
            v6->sin6_port = htons(to);
            len = sizeof *v6;
            if (inet_pton(AF_INET6, host, &v6->sin6_addr) != 1)
                fail(host);
        }
        if ((i == 0 ? bind(fd, (struct sockaddr *)&at, len) : connect(fd, (struct sockaddr *)&at, len)) != 0)
            fail(i == 0 ? "bind" : "connect");
    }
    return fd;
}

/* The sockets (see the top of this file). */
static void open_sockets(void)
{
    int tcp4 = inet_socket(AF_INET, SOCK_STREAM, "127.0.0.1", 7001, NULL, 0);
    int tcp6 = inet_socket(AF_INET6, SOCK_STREAM, "::", 7002, NULL, 0);
    if (listen(tcp4, 8) != 0 || listen(tcp6, 8) != 0)
        fail("listen");
    inet_socket(AF_INET, SOCK_STREAM, NULL, 0, "127.0.0.1", 7001);
    inet_socket(AF_INET6, SOCK_STREAM, NULL, 0, "::1", 7002);
    inet_socket(AF_INET6, SOCK_STREAM, NULL, 0, "::ffff:127.0.0.1", 7001);
    if (accept(tcp4, NULL, NULL) < 0 || accept(tcp6, NULL, NULL) < 0 || accept(tcp4, NULL, NULL) < 0)
        fail("accept");
    inet_socket(AF_INET, SOCK_DGRAM, "0.0.0.0", 7003, NULL, 0);
    inet_socket(AF_INET6, SOCK_DGRAM, "::1", 7004, "::1", 7003);
}

/* A child that is stopped (state T) when this returns. */
static void stopped_child(void)
{
    int status;
    pid_t pid = fork();
    if (pid < 0)
        fail("fork");
    if (pid == 0) {
        prctl(PR_SET_NAME, "leechio-stopped");
        raise(SIGSTOP);
        for (;;)
            pause();
    }
    if (waitpid(pid, &status, WUNTRACED) != pid || !WIFSTOPPED(status))
        fail("waitpid (stopped child)");
}

/* A child that has exited and stays unreaped (state Z) when this returns:
 * WNOWAIT waits for its exit without reaping it. */
static void zombie_child(void)
{
    siginfo_t info;
    pid_t pid = fork();
    if (pid < 0)
        fail("fork");
    if (pid == 0) {
        prctl(PR_SET_NAME, "leechio-zombie");
        _exit(42);
    }
    if (waitid(P_PID, pid, &info, WEXITED | WNOWAIT) != 0)
        fail("waitid (zombie child)");
}

int main(void)
{
    size_t size = (size_t)PAGES * PAGE;
    /* Guard page, pattern, guard page; all inaccessible until mprotect. */
    char *area = mmap(NULL, size + 2 * PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (area == MAP_FAILED)
        fail("mmap");
    uint64_t *words = (uint64_t *)(area + PAGE);
    if (mprotect(words, size, PROT_READ | PROT_WRITE) != 0)
        fail("mprotect rw");
    for (size_t i = 0; i < size / 8; i++)
        words[i] = pattern_word((uint64_t)(uintptr_t)&words[i]);
    if (mprotect((char *)words + size / 2, size / 2, PROT_READ) != 0)
        fail("mprotect r");

    open_files();
    open_sockets();
    stopped_child();
    zombie_child();

    const char *names[] = {"leechio-thr-1", "leechio-thr-2"};
    for (int i = 0; i < 2; i++) {
        pthread_t thread;
        if (pthread_create(&thread, NULL, idle, NULL) != 0)
            fail("pthread_create");
        if (pthread_setname_np(thread, names[i]) != 0)
            fail("pthread_setname_np");
    }
    if (prctl(PR_SET_NAME, "leech (pat) x") != 0)
        fail("prctl");

    printf("%lx %lx\n", (unsigned long)(uintptr_t)words, (unsigned long)(uintptr_t)words + size);
    if (fclose(stdout) != 0)
        fail("stdout");
    for (;;)
        pause();
}
