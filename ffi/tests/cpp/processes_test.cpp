// The C++ wrapper's Linux process list (leechio::kernel,
// address_space by pid) against a memory image of the test guest; built
// and run by tests/c_processes.rs with the parameter file of
// tests/c/processes_test.c (see there). Exits 1 on the first mismatch.
#include "leechio.hpp"

#include "check.hpp"

#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace {

/// A user process as the guest's /proc said it.
struct user_process {
    uint32_t ppid = 0;
    char state = 0;
    std::string name, args;
};

/// A line of /proc/modules.
struct guest_module {
    std::string name, state;
    uint64_t size = 0, base = 0;
};

struct parameters {
    std::string image, notlinux;
    uint64_t calls = 0, pattern_start = 0;
    uint32_t pattern_pid = 0;
    unsigned levels = 0;
    std::map<uint32_t, user_process> users;
    std::vector<guest_module> modules;
};

std::string unhex(const std::string &hex) {
    std::string out;
    if (hex == "-") return out;
    for (size_t i = 0; i + 1 < hex.size(); i += 2) {
        out.push_back(static_cast<char>(std::stoul(hex.substr(i, 2), nullptr, 16)));
    }
    return out;
}

parameters read_parameters(const char *path) {
    std::ifstream in(path);
    CHECK(in.good(), "cannot open %s", path);
    parameters q;
    std::string key;
    while (in >> key) {
        if (key == "image") in >> q.image;
        else if (key == "notlinux") in >> q.notlinux;
        else if (key == "calls") in >> q.calls;
        else if (key == "levels") in >> q.levels;
        else if (key == "pattern") in >> q.pattern_pid >> std::hex >> q.pattern_start >> std::dec;
        else if (key == "user") {
            uint32_t pid = 0;
            user_process u;
            std::string name, args;
            in >> pid >> u.ppid >> u.state >> name >> args;
            u.name = unhex(name);
            u.args = unhex(args);
            q.users[pid] = u;
        } else if (key == "module") {
            guest_module m;
            in >> m.name >> m.size >> std::hex >> m.base >> std::dec >> m.state;
            q.modules.push_back(m);
        } else CHECK(false, "unknown parameter %s", key.c_str());
    }
    return q;
}

void test_processes(const parameters &q) {
    leechio::device dev("file://" + q.image);
    leechio_kernel_hints hints{};
    hints.no_cache = true;
    leechio::kernel k(dev, &hints);
    CHECK(k.levels() == q.levels, "the kernel's tables read in %u levels", k.levels());
    uint64_t before = dev.call_count(LEECHIO_CALL_READ_SCATTER);
    leechio::process_list list = k.processes();
    uint64_t calls = dev.call_count(LEECHIO_CALL_READ_SCATTER) - before;
    CHECK(list.ok(), "%s", leechio::last_error_message().c_str());
    CHECK(calls == q.calls, "the list took %lu read calls, not %lu", (unsigned long)calls,
          (unsigned long)q.calls);

    // Every user process as /proc said, strings copied out intact; the
    // rest kernel threads.
    size_t users = 0;
    for (const leechio::process &p : list.processes) {
        if (p.kernel_thread) {
            CHECK(p.dtb == 0 && p.args.empty() && p.cmdline.empty(), "kernel thread %u", p.pid);
            continue;
        }
        users++;
        auto u = q.users.find(p.pid);
        CHECK(u != q.users.end(), "pid %u not in /proc", p.pid);
        CHECK(p.ppid == u->second.ppid && p.state == u->second.state, "pid %u: ppid %u state %c",
              p.pid, p.ppid, p.state);
        CHECK(p.name == u->second.name, "pid %u: name %s", p.pid, p.name.c_str());
        CHECK(p.args == u->second.args, "pid %u: %zu bytes of arguments, /proc %zu", p.pid,
              p.args.size(), u->second.args.size());
        std::string joined = u->second.args.empty()
                                 ? std::string()
                                 : u->second.args.substr(0, u->second.args.size() - 1);
        for (char &c : joined) c = c ? c : ' ';
        CHECK(p.cmdline == joined, "pid %u: cmdline %s", p.pid, p.cmdline.c_str());
    }
    CHECK(users == q.users.size(), "%zu user processes, /proc listed %zu", users,
          q.users.size());

    // The pattern process's memory, by pid.
    leechio::address_space space(k, q.pattern_pid);
    CHECK(space.levels() == q.levels, "the process's space has %u levels", space.levels());
    for (uint64_t i = 0; i < 16; i++) {
        uint64_t va = q.pattern_start + 8 * i;
        CHECK(space.read_value<uint64_t>(va) == test::pattern_word(va), "word %lu",
              (unsigned long)i);
    }
    // No space for a kernel thread: an error with its status.
    try {
        leechio::address_space none(k, 2);
        CHECK(false, "a space for kthreadd");
    } catch (const leechio::error &e) {
        CHECK(e.code() == LEECHIO_NOT_FOUND && std::strstr(e.what(), "kernel thread"), "%s",
              e.what());
    }
}

void test_modules(const parameters &q) {
    leechio::device dev("file://" + q.image);
    leechio_kernel_hints hints{};
    hints.no_cache = true;
    leechio::kernel k(dev, &hints);
    leechio::module_list list = k.modules();
    CHECK(list.ok(), "%s", leechio::last_error_message().c_str());
    CHECK(list.modules.size() == q.modules.size(), "%zu modules, /proc/modules has %zu",
          list.modules.size(), q.modules.size());
    for (size_t i = 0; i < q.modules.size(); i++) {
        const leechio::module &m = list.modules[i];
        const guest_module &g = q.modules[i];
        CHECK(m.name == g.name && m.size == g.size && m.base == g.base && m.state == g.state,
              "module %zu: %s, /proc/modules: %s", i, m.name.c_str(), g.name.c_str());
    }
}

void test_not_linux(const parameters &q) {
    leechio::device dev("file://" + q.notlinux);
    leechio_kernel_hints hints{};
    hints.no_cache = true;
    try {
        leechio::kernel k(dev, &hints);
        CHECK(false, "a kernel in zeros");
    } catch (const leechio::error &e) {
        CHECK(e.code() == LEECHIO_NOT_FOUND && std::strstr(e.what(), "no Linux kernel found"),
              "%s", e.what());
    }
}

} // namespace

int main(int argc, char **argv) {
    CHECK(argc == 2, "usage: %s PARAMS", argv[0]);
    parameters q = read_parameters(argv[1]);
    test_processes(q);
    test_modules(q);
    test_not_linux(q);
    std::printf("leechio C++ process test: %u checks passed\n", test::checks);
    return 0;
}
