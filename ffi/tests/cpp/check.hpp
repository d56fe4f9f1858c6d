// What the C++ test programs share: checks that stop at the first
// mismatch, and the pattern the test images hold (the same function as
// tests/c/common.c and the Rust tests' pattern_word).
#ifndef LEECHIO_TEST_CHECK_HPP
#define LEECHIO_TEST_CHECK_HPP

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace test {

/// Checks made so far (a program prints it when all passed).
inline unsigned checks = 0;

inline uint64_t pattern_word(uint64_t addr) {
    uint64_t z = addr + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

inline uint8_t pattern_byte(uint64_t addr) {
    return static_cast<uint8_t>(pattern_word(addr & ~7ull) >> (8 * (addr & 7)));
}

} // namespace test

#define CHECK(cond, ...)                                                            \
    do {                                                                            \
        test::checks++;                                                             \
        if (!(cond)) {                                                              \
            std::fprintf(stderr, "%s:%d: check failed: %s\n  ", __FILE__, __LINE__, \
                         #cond);                                                    \
            std::fprintf(stderr, __VA_ARGS__);                                      \
            std::fprintf(stderr, "\n");                                             \
            std::exit(1);                                                           \
        }                                                                           \
    } while (0)

#endif
