/*
 * leechio for C++17: RAII handles over the C API of leechio.h, header-only.
 *
 * - leechio::device, leechio::address_space (in 4-level or 5-level
 *   paging, given or found from its tables: leechio::paging), leechio::kernel
 *   (a Linux kernel found with no profile) and leechio::queue own their C handle
 *   and release it when destroyed (device, address_space and kernel are
 *   movable; a queue is pinned in place because its pending reads point
 *   back at it).
 * - A call that fails throws leechio::error (the C status and the message
 *   of leechio_last_error_message).
 * - A read or write of which some bytes failed is a result, not an error:
 *   batches return a batch_result with every fragment, exactly as C gets
 *   them. Only read_value, which has no way to return a partial value,
 *   throws for it (status LEECHIO_INCOMPLETE).
 * - No exception ever unwinds through the C library: callbacks catch what
 *   user code throws and rethrow it once the C call has returned.
 *
 * Written by hand; leechio.h is generated (`make header`).
 */
#ifndef LEECHIO_HPP
#define LEECHIO_HPP

#include "leechio.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace leechio {

/// The library's own version, e.g. "0.1.0".
inline std::string version() { return leechio_version(); }

/// The message of the most recent failed call on this thread.
inline std::string last_error_message() {
    size_t len = 0;
    leechio_last_error_message(nullptr, 0, &len);
    std::string text(len + 1, '\0');
    leechio_last_error_message(&text[0], text.size(), &len);
    text.resize(len);
    return text;
}

/// A failed call: its status and message.
class error : public std::runtime_error {
public:
    /// An error with the given status and message.
    error(leechio_status code, const std::string &message)
        : std::runtime_error(message), code_(code) {}
    /// The C status.
    leechio_status code() const noexcept { return code_; }

private:
    leechio_status code_;
};

namespace detail {

/// Whether a status is the outcome of I/O (success, or bytes that failed)
/// rather than a failed call.
inline bool is_io_result(uint32_t s) {
    return s == LEECHIO_OK || s == LEECHIO_INCOMPLETE || s >= 100;
}

inline void check(leechio_status s) {
    if (s != LEECHIO_OK) {
        throw error(s, last_error_message());
    }
}

inline void check_io(leechio_status s) {
    if (!is_io_result(s)) {
        throw error(s, last_error_message());
    }
}

/// A paging mode's levels from a C call that gives 0 on failure.
inline unsigned check_levels(uint32_t levels) {
    if (levels == 0) {
        throw error(LEECHIO_NULL_ARGUMENT, last_error_message());
    }
    return levels;
}

/// Calls a C function that copies a string out, twice: once for the
/// length, once for the text.
template <class F> std::string text(F copy) {
    size_t len = 0;
    check(copy(nullptr, 0, &len));
    std::string out(len + 1, '\0');
    check(copy(&out[0], out.size(), &len));
    out.resize(len);
    return out;
}

/// Gathers the items a C callback hands over, each as an Out made from
/// it while it is valid; never lets an exception escape into C.
template <class T, class Out = T> struct collector {
    std::vector<Out> items;
    std::exception_ptr failure;

    static void add(void *context, const T *item) noexcept {
        auto *self = static_cast<collector *>(context);
        try {
            self->items.push_back(Out(*item));
        } catch (...) {
            if (!self->failure) {
                self->failure = std::current_exception();
            }
        }
    }

    void rethrow() const {
        if (failure) {
            std::rethrow_exception(failure);
        }
    }
};

struct device_deleter {
    void operator()(leechio_device *d) const noexcept { leechio_device_close(d); }
};
struct space_deleter {
    void operator()(leechio_space *s) const noexcept { leechio_space_free(s); }
};
struct kernel_deleter {
    void operator()(leechio_kernel *k) const noexcept { leechio_kernel_free(k); }
};

} // namespace detail

/// The paging mode of an address space's tables: 4 or 5 levels (what
/// CR4.LA57 says on the target), or detect: found from the tables
/// themselves, and an error (LEECHIO_PAGING_UNKNOWN) where they do not tell.
enum class paging : uint32_t {
    detect = LEECHIO_PAGING_DETECT,
    four_level = 4,
    five_level = 5,
};

/// A translation: the C record, with its entries by level.
struct translation : leechio_translation {
    translation() : leechio_translation{} {}
    /// A copy of the C record.
    explicit translation(const leechio_translation &t) : leechio_translation(t) {}

    /// Whether the address translated.
    bool ok() const noexcept { return status == LEECHIO_OK; }

    /// The level the walk started at: LEECHIO_LEVEL_PML5E (5-level paging)
    /// or LEECHIO_LEVEL_PML4E (4-level).
    unsigned top_level() const noexcept {
        return paging_levels <= LEECHIO_LEVELS ? LEECHIO_LEVELS - paging_levels : LEECHIO_LEVELS;
    }

    /// The entry the walk read at level (LEECHIO_LEVEL_*), or nothing
    /// where it read none: above its top, below a large page or below
    /// where it stopped.
    std::optional<uint64_t> entry(unsigned level) const noexcept {
        if (level < top_level() || level - top_level() >= entry_count || level >= LEECHIO_LEVELS) {
            return std::nullopt;
        }
        return entries[level];
    }
};

/// Every fragment of a batch of reads or writes.
struct batch_result {
    /// LEECHIO_OK when every byte succeeded, else LEECHIO_INCOMPLETE.
    leechio_status status = LEECHIO_OK;
    /// Every fragment, by operation then offset; they cover each
    /// operation exactly.
    std::vector<leechio_fragment> fragments;

    /// Whether every byte succeeded.
    bool ok() const noexcept { return status == LEECHIO_OK; }

    /// The failed fragments only.
    std::vector<leechio_fragment> failures() const {
        std::vector<leechio_fragment> out;
        for (const auto &f : fragments) {
            if (f.status != LEECHIO_OK) {
                out.push_back(f);
            }
        }
        return out;
    }
};

class address_space;
class queue;

/// An open device (closed when destroyed). Thread-safe like the C handle.
class device {
public:
    /// Opens a LeechCore device; remote and library may be null.
    explicit device(const std::string &device_string, const char *remote = nullptr,
                    const char *library = nullptr) {
        leechio_device *raw = nullptr;
        detail::check(leechio_device_open(device_string.c_str(), remote, library, &raw));
        handle_.reset(raw);
    }

    /// The C handle, still owned by this object.
    leechio_device *get() const noexcept { return handle_.get(); }

    /// Max address, LeechCore version, flags.
    leechio_device_info info() const {
        leechio_device_info out{};
        detail::check(leechio_device_get_info(get(), &out));
        return out;
    }

    /// Device type name, e.g. "file".
    std::string name() const {
        return detail::text([this](char *b, size_t n, size_t *len) {
            return leechio_device_name(get(), b, n, len);
        });
    }

    /// LeechCore's version, e.g. "2.23.3".
    std::string leechcore_version() const {
        return detail::text([this](char *b, size_t n, size_t *len) {
            return leechio_device_leechcore_version(get(), b, n, len);
        });
    }

    /// Path of the leechcore.so in use.
    std::string library_path() const {
        return detail::text([this](char *b, size_t n, size_t *len) {
            return leechio_device_library_path(get(), b, n, len);
        });
    }

    /// The physical memory map.
    std::vector<leechio_memory_range> memory_map() const {
        size_t count = 0;
        detail::check(leechio_device_memory_map(get(), nullptr, 0, &count));
        std::vector<leechio_memory_range> ranges(count);
        detail::check(leechio_device_memory_map(get(), ranges.data(), ranges.size(), &count));
        ranges.resize(count);
        return ranges;
    }

    /// LeechCore's count of calls of one kind on this device.
    uint64_t call_count(leechio_call kind) const {
        uint64_t n = 0;
        detail::check(leechio_device_call_count(get(), static_cast<uint32_t>(kind), &n));
        return n;
    }

    /// Reads every op in one batch (one device call).
    batch_result read(const std::vector<leechio_read_op> &ops) const {
        detail::collector<leechio_fragment> c;
        batch_result r;
        r.status = leechio_read(get(), ops.data(), ops.size(),
                                &detail::collector<leechio_fragment>::add, &c);
        detail::check_io(r.status);
        c.rethrow();
        r.fragments = std::move(c.items);
        return r;
    }

    /// Writes every op in one batch.
    batch_result write(const std::vector<leechio_write_op> &ops) const {
        detail::collector<leechio_fragment> c;
        batch_result r;
        r.status = leechio_write(get(), ops.data(), ops.size(),
                                 &detail::collector<leechio_fragment>::add, &c);
        detail::check_io(r.status);
        c.rethrow();
        r.fragments = std::move(c.items);
        return r;
    }

    /// Reads one value; throws leechio::error if any byte fails.
    template <class T> T read_value(uint64_t address) const {
        static_assert(std::is_trivially_copyable<T>::value, "read_value needs a plain type");
        T value{};
        leechio_read_op op{address, reinterpret_cast<uint8_t *>(&value), sizeof(T)};
        detail::check(leechio_read(get(), &op, 1, nullptr, nullptr));
        return value;
    }

private:
    std::unique_ptr<leechio_device, detail::device_deleter> handle_;
};

/// One process of a Linux target (a thread-group leader), its strings
/// copied out of the C record.
struct process {
    process() = default;
    /// A copy of the C record, whose strings live only during a callback.
    explicit process(const leechio_process &p)
        : pid(p.pid), ppid(p.ppid), tgid(p.tgid), thread_count(p.thread_count), dtb(p.dtb),
          task(p.task), mm(p.mm), name(p.name), cmdline(p.cmdline),
          args(p.args ? std::string(p.args, p.args_length) : std::string()), state(p.state), kernel_thread(p.kernel_thread) {}

    uint32_t pid = 0;
    /// Its parent's pid (0 for the tasks the kernel starts itself).
    uint32_t ppid = 0;
    uint32_t tgid = 0;
    /// Its threads, itself included.
    uint32_t thread_count = 0;
    /// Physical address of its top page table; 0 for kernel threads and
    /// processes without memory (zombies).
    uint64_t dtb = 0;
    /// Kernel addresses of its task_struct and mm_struct.
    uint64_t task = 0, mm = 0;
    /// Its name (comm).
    std::string name;
    /// Its arguments joined by spaces.
    std::string cmdline;
    /// Its arguments as /proc/PID/cmdline gives them: each ends in a NUL.
    std::string args;
    /// /proc's state letter.
    char state = 0;
    bool kernel_thread = false;
};

/// The processes of a Linux target, by pid.
struct process_list {
    /// LEECHIO_OK, or LEECHIO_INCOMPLETE when some structures could not be
    /// read (last_error_message() says which); the processes listed stand.
    leechio_status status = LEECHIO_OK;
    std::vector<process> processes;

    /// Whether every structure was read.
    bool ok() const noexcept { return status == LEECHIO_OK; }
};

/// One loaded kernel module, its strings copied out of the C record.
struct module {
    module() = default;
    /// A copy of the C record, whose strings live only during a callback.
    explicit module(const leechio_module &m)
        : address(m.address), base(m.base), size(m.size), name(m.name), state(m.state) {}

    /// Kernel address of its struct module.
    uint64_t address = 0;
    /// Where its code starts, and the bytes of its memory, as
    /// /proc/modules gives them.
    uint64_t base = 0, size = 0;
    std::string name;
    /// /proc/modules' word: Live, Loading, Unloading (or Unformed).
    std::string state;
};

/// The loaded modules of a Linux target, in the kernel's list order.
struct module_list {
    /// LEECHIO_OK, or LEECHIO_INCOMPLETE when the list could not be read
    /// whole (last_error_message() says why); the modules listed stand.
    leechio_status status = LEECHIO_OK;
    std::vector<module> modules;

    /// Whether the whole list was read.
    bool ok() const noexcept { return status == LEECHIO_OK; }
};

/// A Linux kernel found in a device's memory with no profile (from its
/// own BTF), freed when destroyed; it keeps the device open.
class kernel {
public:
    /// Finds the kernel; hints null: none. Throws leechio::error
    /// (LEECHIO_NOT_FOUND) when the target is not Linux or holds no BTF.
    explicit kernel(const device &dev, const leechio_kernel_hints *hints = nullptr) {
        leechio_kernel *raw = nullptr;
        detail::check(leechio_kernel_find(dev.get(), hints, &raw));
        handle_.reset(raw);
    }

    /// The C handle, still owned by this object.
    leechio_kernel *get() const noexcept { return handle_.get(); }

    /// The paging mode of its tables, which every process's space shares:
    /// 4 or 5 levels.
    unsigned levels() const { return detail::check_levels(leechio_kernel_levels(get())); }

    /// Its processes, by pid, read level by level (a handful of device
    /// calls).
    process_list processes() const {
        detail::collector<leechio_process, process> c;
        process_list list;
        list.status = leechio_kernel_processes(
            get(), &detail::collector<leechio_process, process>::add, &c);
        detail::check_io(list.status);
        c.rethrow();
        list.processes = std::move(c.items);
        return list;
    }

    /// Its loaded modules, as /proc/modules lists them (a device call per
    /// two modules).
    module_list modules() const {
        detail::collector<leechio_module, module> c;
        module_list list;
        list.status =
            leechio_kernel_modules(get(), &detail::collector<leechio_module, module>::add, &c);
        detail::check_io(list.status);
        c.rethrow();
        list.modules = std::move(c.items);
        return list;
    }

private:
    std::unique_ptr<leechio_kernel, detail::kernel_deleter> handle_;
};

/// A virtual address space (freed when destroyed). It keeps the device
/// open even if the device object goes first.
class address_space {
public:
    /// The space whose top table is at dtb, in the paging mode given or
    /// (paging::detect) the one its tables show; options null: default
    /// caches. Throws leechio::error: LEECHIO_PAGING_UNKNOWN where the
    /// tables do not show their mode, the read's reason where the root
    /// cannot be read.
    address_space(const device &dev, uint64_t dtb, paging mode = paging::detect,
                  const leechio_cache_options *options = nullptr) {
        leechio_space *raw = nullptr;
        detail::check(
            leechio_space_new(dev.get(), dtb, static_cast<uint32_t>(mode), options, &raw));
        handle_.reset(raw);
    }

    /// The address space of process pid of a Linux target, in the
    /// kernel's paging mode; throws leechio::error (LEECHIO_NOT_FOUND) for
    /// a pid no process has, a kernel thread or a zombie.
    address_space(const kernel &k, uint32_t pid,
                  const leechio_cache_options *options = nullptr) {
        leechio_space *raw = nullptr;
        detail::check(leechio_space_new_for_pid(k.get(), pid, options, &raw));
        handle_.reset(raw);
    }

    /// The C handle, still owned by this object.
    leechio_space *get() const noexcept { return handle_.get(); }

    /// The paging mode of its tables: 4 or 5 levels.
    unsigned levels() const { return detail::check_levels(leechio_space_levels(get())); }

    /// Translates va; a failed walk is a result (see .status), not an error.
    translation translate(uint64_t va) const {
        leechio_translation t{};
        detail::check_io(leechio_space_translate(get(), va, &t));
        return translation(t);
    }

    /// Translates many addresses at once (one device call per level).
    std::vector<translation> translate(const std::vector<uint64_t> &vas) const {
        std::vector<leechio_translation> raw(vas.size());
        detail::check_io(leechio_space_translate_many(get(), vas.data(), vas.size(), raw.data()));
        return std::vector<translation>(raw.begin(), raw.end());
    }

    /// Reads every op (virtual addresses) in one batch.
    batch_result read(const std::vector<leechio_read_op> &ops) const {
        detail::collector<leechio_fragment> c;
        batch_result r;
        r.status = leechio_space_read(get(), ops.data(), ops.size(),
                                      &detail::collector<leechio_fragment>::add, &c);
        detail::check_io(r.status);
        c.rethrow();
        r.fragments = std::move(c.items);
        return r;
    }

    /// Writes every op (virtual addresses) in one batch.
    batch_result write(const std::vector<leechio_write_op> &ops) const {
        detail::collector<leechio_fragment> c;
        batch_result r;
        r.status = leechio_space_write(get(), ops.data(), ops.size(),
                                       &detail::collector<leechio_fragment>::add, &c);
        detail::check_io(r.status);
        c.rethrow();
        r.fragments = std::move(c.items);
        return r;
    }

    /// Reads one value at a virtual address; throws if any byte fails.
    template <class T> T read_value(uint64_t va) const {
        static_assert(std::is_trivially_copyable<T>::value, "read_value needs a plain type");
        T value{};
        leechio_read_op op{va, reinterpret_cast<uint8_t *>(&value), sizeof(T)};
        detail::check(leechio_space_read(get(), &op, 1, nullptr, nullptr));
        return value;
    }

    /// Mapped ranges of [start, last], then unreadable ranges (status != OK).
    std::vector<leechio_mapping> mappings(uint64_t start, uint64_t last) const {
        detail::collector<leechio_mapping> c;
        detail::check_io(leechio_space_mappings(get(), start, last,
                                                &detail::collector<leechio_mapping>::add, &c));
        c.rethrow();
        return std::move(c.items);
    }

    /// Forgets cached translations and page tables.
    void invalidate() const { detail::check(leechio_space_invalidate(get())); }

private:
    std::unique_ptr<leechio_space, detail::space_deleter> handle_;
};

/// Queued reads with a callback each; flush() sends all in one device
/// call, and callbacks may queue follow-ups for the next flush. Use from
/// one thread at a time. Reads still queued when the queue is destroyed
/// are dropped without calling their callbacks.
class queue {
public:
    /// What a completed read's callback receives.
    using callback = std::function<void(const leechio_completion &)>;

    /// An empty queue on dev.
    explicit queue(const device &dev) { detail::check(leechio_queue_new(dev.get(), &handle_)); }

    queue(const queue &) = delete;
    queue &operator=(const queue &) = delete;

    ~queue() { leechio_queue_free(handle_); }

    /// The C handle, still owned by this object.
    leechio_queue *get() const noexcept { return handle_; }

    /// Queues a physical read into buffer (valid until the callback).
    void read(uint64_t address, void *buffer, size_t length, callback done) {
        auto ctx = std::make_unique<context>(context{this, std::move(done)});
        detail::check(leechio_queue_read(handle_, address, static_cast<uint8_t *>(buffer), length,
                                         &queue::trampoline, ctx.get()));
        ctx.release(); // owned by the C queue until the callback
    }

    /// Queues a virtual read in space (which must come from the same device).
    void read_virtual(const address_space &space, uint64_t va, void *buffer, size_t length,
                      callback done) {
        auto ctx = std::make_unique<context>(context{this, std::move(done)});
        detail::check(leechio_queue_read_virtual(handle_, space.get(), va,
                                                 static_cast<uint8_t *>(buffer), length,
                                                 &queue::trampoline, ctx.get()));
        ctx.release();
    }

    /// One flush; returns how many callbacks ran. Rethrows the first
    /// exception a callback threw.
    size_t flush() {
        size_t n = 0;
        detail::check(leechio_queue_flush(handle_, &n));
        rethrow();
        return n;
    }

    /// Flushes until nothing is left; returns the number of flushes.
    size_t run() {
        size_t n = 0;
        detail::check(leechio_queue_run(handle_, &n));
        rethrow();
        return n;
    }

    /// Reads whose callbacks have not run yet.
    size_t pending() const { return leechio_queue_pending(handle_); }

private:
    struct context {
        queue *owner;
        callback fn;
    };

    static void trampoline(void *ctx, leechio_queue *q, const leechio_completion *c) noexcept {
        std::unique_ptr<context> owned(static_cast<context *>(ctx));
        if (q == nullptr) {
            return; // cancelled: the queue is being destroyed
        }
        try {
            owned->fn(*c);
        } catch (...) {
            if (!owned->owner->failure_) {
                owned->owner->failure_ = std::current_exception();
            }
        }
    }

    void rethrow() {
        if (failure_) {
            std::exception_ptr e = std::move(failure_);
            failure_ = nullptr;
            std::rethrow_exception(e);
        }
    }

    leechio_queue *handle_ = nullptr;
    std::exception_ptr failure_;
};

} // namespace leechio

#endif /* LEECHIO_HPP */
