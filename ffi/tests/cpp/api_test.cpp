// The C++ wrapper (leechio.hpp) against real LeechCore file images; built
// and run by ffi/tests/c_api.rs with -Wall -Wextra -Werror against the
// installed headers and library. Takes the same parameter file as
// tests/c/api_test.c (see there). Exits 1 on the first mismatch.
#include "leechio.hpp"

#include "check.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

using test::checks;
using test::pattern_byte;
using test::pattern_word;

std::vector<uint8_t> read_file(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    CHECK(in.good(), "cannot open %s", path.c_str());
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

struct params {
    std::string version, phys, virt;
    uint64_t dtb = 0, dtb5 = 0, vbase = 0, vsize = 0, vseed = 0;
    std::map<uint64_t, uint64_t> mapped; // memflow's translations
    std::vector<uint64_t> unmapped;
};

params read_params(const char *path) {
    std::ifstream in(path);
    CHECK(in.good(), "cannot open %s", path);
    params p;
    std::string key, value;
    while (in >> key >> value) {
        auto num = [&](const std::string &s) { return std::strtoull(s.c_str(), nullptr, 0); };
        if (key == "version") p.version = value;
        else if (key == "phys") p.phys = value;
        else if (key == "virt") p.virt = value;
        else if (key == "dtb") p.dtb = num(value);
        else if (key == "dtb5") p.dtb5 = num(value);
        else if (key == "vbase") p.vbase = num(value);
        else if (key == "vsize") p.vsize = num(value);
        else if (key == "vseed") p.vseed = num(value);
        else if (key == "vtop") {
            std::string pa;
            in >> pa;
            if (pa == "none") p.unmapped.push_back(num(value));
            else p.mapped[num(value)] = num(pa);
        } else CHECK(false, "unknown parameter %s", key.c_str());
    }
    return p;
}

uint64_t reads(const leechio::device &d) { return d.call_count(LEECHIO_CALL_READ_SCATTER); }

void test_device(const params &p, const std::vector<uint8_t> &image) {
    CHECK(leechio::version() == p.version, "version %s", leechio::version().c_str());
    leechio::device opened("file://" + p.phys);
    leechio::device d = std::move(opened); // handles move; the moved-from one owns nothing
    CHECK(opened.get() == nullptr && d.get() != nullptr, "move of a device");
    CHECK(d.name() == "file", "name %s", d.name().c_str());
    // Texts and the map are fetched length first; that query is no
    // failure, so the last error stays.
    try {
        leechio::device missing("file://" + p.phys + ".missing");
        CHECK(false, "a missing image opened");
    } catch (const leechio::error &) {
    }
    const std::string open_error = leechio::last_error_message();
    CHECK(!open_error.empty(), "no error recorded for a missing image");
    CHECK(d.name() == "file" && !d.library_path().empty() && d.memory_map().size() == 1,
          "texts and map");
    CHECK(leechio::last_error_message() == open_error, "the last error became: %s",
          leechio::last_error_message().c_str());
    auto info = d.info();
    CHECK(info.read_only && info.max_address == image.size(), "info");
    char expect[64];
    std::snprintf(expect, sizeof expect, "%" PRIu64 ".%" PRIu64 ".%" PRIu64,
                  info.leechcore_major, info.leechcore_minor, info.leechcore_revision);
    CHECK(d.leechcore_version() == expect, "LeechCore %s", d.leechcore_version().c_str());
    CHECK(d.library_path().find("leechcore.so") != std::string::npos, "library %s",
          d.library_path().c_str());
    auto map = d.memory_map();
    CHECK(map.size() == 1 && map[0].start == 0 && map[0].size == image.size(), "memory map");

    try {
        leechio::device missing("file:///nonexistent/leechio-cpp.raw");
        CHECK(false, "opening a missing image did not throw");
    } catch (const leechio::error &e) {
        CHECK(e.code() == LEECHIO_OPEN_FAILED, "code %u", static_cast<unsigned>(e.code()));
        CHECK(std::string(e.what()).find("/nonexistent/leechio-cpp.raw") != std::string::npos,
              "message %s", e.what());
    }

    // One batch, one device call; the read past the end fails exactly.
    const uint64_t size = image.size();
    std::vector<std::vector<uint8_t>> bufs = {std::vector<uint8_t>(100),
                                              std::vector<uint8_t>(0x2345),
                                              std::vector<uint8_t>(0x1000, 0xa5)};
    std::vector<leechio_read_op> ops = {{0x1003, bufs[0].data(), bufs[0].size()},
                                        {0x7ff0, bufs[1].data(), bufs[1].size()},
                                        {size - 0x100, bufs[2].data(), bufs[2].size()}};
    uint64_t before = reads(d);
    auto r = d.read(ops);
    CHECK(reads(d) - before == 1, "%" PRIu64 " calls", reads(d) - before);
    CHECK(!r.ok() && r.fragments.size() == 4, "%zu fragments", r.fragments.size());
    for (size_t i = 0; i < 2; i++)
        CHECK(std::equal(bufs[i].begin(), bufs[i].end(), image.begin() + ops[i].address),
              "op %zu bytes", i);
    auto failed = r.failures();
    CHECK(failed.size() == 1 && failed[0].op == 2 && failed[0].offset == 0x100 &&
              failed[0].length == 0xf00 && failed[0].status == LEECHIO_OUT_OF_RANGE,
          "failed range");
    CHECK(std::equal(bufs[2].begin(), bufs[2].begin() + 0x100, image.end() - 0x100) &&
              bufs[2][0x100] == 0xa5 && bufs[2][0xfff] == 0xa5,
          "bytes around the end");

    CHECK(d.read_value<uint64_t>(0x2008) == pattern_word(0x2008), "read_value");
    try {
        (void)d.read_value<uint64_t>(size - 4);
        CHECK(false, "a value past the end did not throw");
    } catch (const leechio::error &e) {
        CHECK(e.code() == LEECHIO_INCOMPLETE, "code %u", static_cast<unsigned>(e.code()));
    }
}

void test_queue(const params &p, const std::vector<uint8_t> &image) {
    leechio::device d("file://" + p.phys);
    const uint64_t size = image.size();
    // Five chains of three hops through the image's own words: each word
    // read names the next address, so every hop waits for the one before.
    auto next = [&](uint64_t word) { return (word % (size - 8)) & ~7ull; };
    struct chain {
        uint64_t at, value;
        int hops;
    };
    std::vector<chain> chains;
    for (uint64_t i = 0; i < 5; i++) chains.push_back({0x10000 * (i + 1), 0, 0});
    leechio::queue q(d);
    std::function<void(chain &)> hop = [&](chain &c) {
        q.read(c.at, &c.value, 8, [&](const leechio_completion &done) {
            CHECK(done.status == LEECHIO_OK && done.address == c.at, "hop status");
            CHECK(c.value == pattern_word(c.at), "hop at %#" PRIx64, c.at);
            if (++c.hops < 3) {
                c.at = next(c.value);
                hop(c);
            }
        });
    };
    for (auto &c : chains) hop(c);
    CHECK(q.pending() == 5, "pending %zu", q.pending());
    uint64_t before = reads(d);
    size_t flushes = q.run();
    CHECK(flushes == 3 && reads(d) - before == 3, "%zu flushes, %" PRIu64 " calls", flushes,
          reads(d) - before);
    for (auto &c : chains) CHECK(c.hops == 3, "chain stopped after %d hops", c.hops);

    // An exception thrown by a callback comes out of flush(), not through C.
    uint64_t word = 0;
    q.read(0x3000, &word, 8, [](const leechio_completion &) { throw std::runtime_error("hop"); });
    try {
        q.flush();
        CHECK(false, "the callback's exception was lost");
    } catch (const std::runtime_error &e) {
        CHECK(std::string(e.what()) == "hop", "exception %s", e.what());
    }
    CHECK(word == pattern_word(0x3000) && q.pending() == 0, "the read still completed");
    // A read left queued is dropped with the queue; its callback never runs.
    q.read(0x4000, &word, 8, [](const leechio_completion &) { std::exit(3); });
}

void test_virtual(const params &p) {
    leechio::device d("file://" + p.virt);
    leechio::address_space s(d, p.dtb, leechio::paging::four_level);
    CHECK(s.levels() == 4, "levels %u", s.levels());
    std::vector<uint64_t> vas;
    for (auto &kv : p.mapped) vas.push_back(kv.first);
    vas.insert(vas.end(), p.unmapped.begin(), p.unmapped.end());
    auto t = s.translate(vas);
    for (size_t i = 0; i < vas.size(); i++) {
        auto it = p.mapped.find(vas[i]);
        CHECK(t[i].top_level() == LEECHIO_LEVEL_PML4E && !t[i].entry(LEECHIO_LEVEL_PML5E),
              "%#" PRIx64 ": a 4-level walk", vas[i]);
        if (it != p.mapped.end()) {
            CHECK(t[i].ok() && t[i].pa == it->second, "%#" PRIx64, vas[i]);
            auto pte = t[i].entry(LEECHIO_LEVEL_PTE);
            CHECK(pte && (*pte & 0x000ffffffffff000ull) == (it->second & ~0xfffull),
                  "the PTE of %#" PRIx64, vas[i]);
        } else {
            CHECK(t[i].status == LEECHIO_NOT_MAPPED, "%#" PRIx64 " should be unmapped", vas[i]);
            // The entry it stopped at was read; none below it.
            auto stop = t[i].entry(static_cast<unsigned>(t[i].failed_level));
            CHECK(stop && !(*stop & 1) && !t[i].entry(t[i].failed_level + 1),
                  "%#" PRIx64 " stopped at level %d", vas[i], t[i].failed_level);
        }
    }
    CHECK(s.translate(0x0000800000000000ull).status == LEECHIO_NON_CANONICAL, "non-canonical");

    // The 5-level root over the same tables, its mode found from them: a
    // walk there has the PML5E on top of the 4-level walk's entries.
    leechio::address_space s5(d, p.dtb5);
    CHECK(s5.levels() == 5, "dtb5 found as %u levels", s5.levels());
    for (size_t i = 0; i < vas.size(); i++) {
        leechio::translation high = s5.translate(vas[i] + (1ull << 48));
        CHECK(high.status == t[i].status && high.pa == t[i].pa && high.paging_levels == 5 &&
                  high.top_level() == LEECHIO_LEVEL_PML5E && high.entry(LEECHIO_LEVEL_PML5E),
              "%#" PRIx64 " through PML5 entry 1", vas[i]);
        for (unsigned level = LEECHIO_LEVEL_PML4E; level < LEECHIO_LEVELS; level++)
            CHECK(high.entry(level) == t[i].entry(level), "%#" PRIx64 ": entry %u", vas[i], level);
    }
    // The 4-level root does not show its mode: asked to find it, the
    // space is refused, with the reason.
    try {
        leechio::address_space unknown(d, p.dtb);
        CHECK(false, "a mode found for DummyOs's tables");
    } catch (const leechio::error &e) {
        CHECK(e.code() == LEECHIO_PAGING_UNKNOWN &&
                  std::string(e.what()).find("read as well in 4-level as in 5-level") !=
                      std::string::npos,
              "%s", e.what());
    }

    uint64_t expect = 0;
    for (int k = 7; k >= 0; k--) expect = expect << 8 | pattern_byte(p.vseed + 0x40 + k);
    CHECK(s.read_value<uint64_t>(p.vbase + 0x40) == expect, "virtual read_value");

    std::vector<uint8_t> buf(0x3000, 0xa5);
    std::vector<leechio_read_op> ops = {{p.vbase + p.vsize - 0x2000, buf.data(), buf.size()}};
    auto r = s.read(ops);
    CHECK(r.fragments.size() == 2 && r.fragments[0].length == 0x2000 &&
              r.fragments[1].status == LEECHIO_NOT_MAPPED,
          "virtual read across the end of the mapping");
    for (size_t k = 0; k < 0x2000; k++)
        CHECK(buf[k] == pattern_byte(p.vseed + p.vsize - 0x2000 + k), "virtual byte %zu", k);

    uint64_t total = 0;
    for (const auto &m : s.mappings(p.vbase, p.vbase + p.vsize - 1)) total += m.size;
    CHECK(total == p.vsize, "mappings cover %#" PRIx64 " bytes", total);

    s.invalidate();
    leechio::queue q(d);
    uint64_t value = 0;
    bool done = false;
    q.read_virtual(s, p.vbase + 0x48, &value, 8, [&](const leechio_completion &c) {
        CHECK(c.status == LEECHIO_OK, "queued virtual read");
        done = true;
    });
    CHECK(q.run() == 5 && done, "a cold queued virtual read takes five flushes");
    uint64_t at48 = 0;
    for (int k = 7; k >= 0; k--) at48 = at48 << 8 | pattern_byte(p.vseed + 0x48 + k);
    CHECK(value == at48, "queued virtual value");
}

} // namespace

int main(int argc, char **argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s PARAMS_FILE\n", argv[0]);
        return 2;
    }
    params p = read_params(argv[1]);
    std::vector<uint8_t> image = read_file(p.phys);
    CHECK(image.size() >= (16u << 20), "image of %zu bytes", image.size());
    CHECK(pattern_word(0x1000) == [&] {
        uint64_t w = 0;
        for (int k = 7; k >= 0; k--) w = w << 8 | image[0x1000 + k];
        return w;
    }(), "the image does not hold the pattern");
    test_device(p, image);
    test_queue(p, image);
    test_virtual(p);
    std::printf("leechio C++ API test: %u checks passed\n", checks);
    return 0;
}
