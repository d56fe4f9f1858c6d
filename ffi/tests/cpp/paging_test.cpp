// The paging mode through the C++ wrapper (leechio.hpp) on a live guest:
// built and run by tests/c_paging.rs with the parameter file of
// tests/c/paging_test.c (see there), the guest paused. Exits 1 on the
// first mismatch.
#include "leechio.hpp"

#include "check.hpp"

#include <cinttypes>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace {

/// The monitor's walk of an address: its end, and the entry it read at
/// each level.
struct walk {
    uint64_t va = 0, pa = 0;
    std::string kind;
    std::optional<uint64_t> entries[LEECHIO_LEVELS];
};

struct parameters {
    std::string device;
    unsigned levels = 0;
    uint64_t dtb = 0, pattern_start = 0;
    uint32_t pattern_pid = 0;
    std::vector<walk> walks;
};

parameters read_parameters(const char *path) {
    std::ifstream in(path);
    CHECK(in.good(), "cannot open %s", path);
    parameters q;
    std::string key, word;
    while (in >> key) {
        if (key == "device") in >> q.device;
        else if (key == "levels") in >> q.levels;
        else if (key == "dtb") in >> std::hex >> q.dtb >> std::dec;
        else if (key == "pattern") in >> q.pattern_pid >> std::hex >> q.pattern_start >> std::dec;
        else if (key == "user") in >> word >> word; // the C program checks the list
        else if (key == "walk") {
            walk w;
            in >> std::hex >> w.va >> w.kind >> w.pa >> std::dec;
            for (auto &entry : w.entries) {
                in >> word;
                if (word != "-") entry = std::stoull(word, nullptr, 16);
            }
            q.walks.push_back(w);
        } else CHECK(false, "unknown parameter %s", key.c_str());
    }
    CHECK(!in.bad() && q.levels != 0 && !q.walks.empty(), "parameters");
    return q;
}

} // namespace

int main(int argc, char **argv) {
    CHECK(argc == 2, "usage: %s PARAMS", argv[0]);
    parameters q = read_parameters(argv[1]);
    leechio::device dev(q.device);

    // The kernel's tables, their mode found (the default), walked as the
    // monitor walks them: entry by entry, each at its level.
    leechio::address_space kernel_space(dev, q.dtb);
    CHECK(kernel_space.levels() == q.levels, "the kernel's tables found in %u levels",
          kernel_space.levels());
    std::vector<uint64_t> vas;
    for (const walk &w : q.walks) vas.push_back(w.va);
    std::vector<leechio::translation> got = kernel_space.translate(vas);
    for (size_t i = 0; i < vas.size(); i++) {
        const walk &w = q.walks[i];
        const leechio::translation &t = got[i];
        CHECK(t.ok() == (w.kind == "ok") && t.pa == w.pa &&
                  t.top_level() == LEECHIO_LEVELS - q.levels,
              "%#" PRIx64 ": status %u pa %#" PRIx64, w.va, static_cast<unsigned>(t.status), t.pa);
        for (unsigned level = 0; level < LEECHIO_LEVELS; level++)
            CHECK(t.entry(level) == w.entries[level], "%#" PRIx64 ": entry at level %u", w.va,
                  level);
    }
    // Named, the mode is taken as given.
    auto other = q.levels == 5 ? leechio::paging::four_level : leechio::paging::five_level;
    CHECK(leechio::address_space(dev, q.dtb, other).levels() == 9 - q.levels, "a mode given");

    // The kernel, and the pattern process's space in its mode.
    leechio_kernel_hints hints{};
    hints.no_cache = true;
    leechio::kernel k(dev, &hints);
    CHECK(k.levels() == q.levels, "the kernel's mode: %u levels", k.levels());
    leechio::address_space pattern(k, q.pattern_pid);
    CHECK(pattern.levels() == q.levels, "the pattern process's space: %u levels",
          pattern.levels());
    for (uint64_t i = 0; i < 16; i++) {
        uint64_t va = q.pattern_start + 8 * i;
        CHECK(pattern.read_value<uint64_t>(va) == test::pattern_word(va), "word %" PRIu64, i);
    }
    leechio::translation t = pattern.translate(q.pattern_start);
    CHECK(t.ok() && t.top_level() == LEECHIO_LEVELS - q.levels && t.entry(t.top_level()),
          "the pattern's first page: status %u", static_cast<unsigned>(t.status));
    std::printf("leechio C++ paging test: %u checks passed\n", test::checks);
    return 0;
}
