/*
The emulated memories and every check made on an access to them.

One arena, reserved at start-up (MAP_NORESERVE: only what is touched takes memory):

    [0, 1 MiB)        the running block's shared memory: static __shared__ arrays
                      from 0 (at most 48 KiB), the dynamic part from 48 KiB
    [1 MiB, 4 GiB)    pinned host memory (cudaMallocHost)
    [4 GiB, 12 GiB)   device memory (cudaMalloc)

Allocations are 256-byte aligned with a 256-byte gap after each, and fresh memory
(an allocation, a block's shared memory) holds the signalling NaN 0x7fa57fa5 in
every 4 bytes (0x7fa5 in every bf16 too), so that a value read before anything
wrote it is a NaN wherever it goes.

The code under test is compiled with clang's -fsanitize=thread instrumentation
(run.sh): every load and store calls __tsan_readN / __tsan_writeN, which this file
defines (no sanitizer runtime is linked), and copies of aggregates become calls of
memcpy, which this file defines too, for the whole process (glibc's __memcpy_chk
does the copying). An address outside the arena returns at once; inside it, the
access is checked against the shadow word of each 4 bytes it touches (the
runtime's own copies, made by operations, are not checks of the code under test):

  memcheck    the bytes lie in a live allocation (or the block's shared memory);
              the host never dereferences device memory
  initcheck   a kernel reads only bytes written since the allocation (or, in shared
              memory, since the block began)
  in flight   no access to shared memory that a cp.async will write and its
              thread has not waited for yet (emu_async_copy.cpp reports it)
  racecheck   within a launch (device memory) or a block (shared memory), each word
              keeps its last write (thread, the block's synchronisation count S,
              code address, bytes) and for each half word a summary of the reads
              since (the latest one's thread, S and address, and whether other
              threads, warps or blocks read it too). Two accesses of different threads, one of them a
              write, to a common byte are a race unless a __syncthreads came between
              them (S at the access < S at the last barrier), or a __syncwarp of a
              warp holding both. Threads of different blocks of one launch are
              never ordered.
              Across operations (kernels, copies, cuBLAS, NCCL, the host on pinned
              memory): the last operation that wrote each word and two that read it
              are kept; an access is a race unless the earlier operation happens
              before it in the vector clocks of emu_streams.cpp.
*/
#include <sys/mman.h>
#include <unistd.h>
#include <map>
#include <vector>
#include "emu_internal.h"

namespace emu {

Context ctx;

static const size_t SHARED_BYTES = 1ull << 20, STATIC_SHARED_MAX = 48 << 10, SHARED_TOTAL_MAX = 227 << 10;
static const size_t PINNED_START = 1ull << 20, DEVICE_START = 4ull << 30, ARENA_BYTES = 12ull << 30;
static const uint32_t FRESH = 0x7fa57fa5u; // a signalling NaN as fp32, and as each bf16 half
static const uint32_t NO_THREAD = 0xffffffffu;
// before memory_init no address is in it: p - arena wraps past the arena for every p
static char *arena = (char *)(1ull << 63);

// ---- shadow words

enum { MIXED_THREADS = 1, MIXED_WARPS = 2, MIXED_BLOCKS = 4 };
// A kernel thread's access to a half word, or a summary of several reads: the
// latest one's thread, S and code offset, and MIXED_* where other threads, warps
// or blocks read it too. Device memory names a thread across the launch (block
// seq * threads per block + thread); a block's shared memory needs ten bits, so its
// records are half as large and a block's tiles keep their shadow in cache.
struct DeviceAccess {
    uint32_t who;        // NO_THREAD: none
    uint32_t code;
    uint32_t at : 24, touched : 4, mix : 4;
    bool none() const { return who == NO_THREAD; }
    uint32_t thread() const { return who; }
    uint32_t sync() const { return at; }
    uint32_t pc() const { return code; }
    uint8_t bytes() const { return (uint8_t)touched; }
    uint8_t mixed() const { return (uint8_t)mix; }
    void clear() { who = NO_THREAD; }
    void set(uint32_t thread, uint32_t sync, uint32_t pc, uint8_t bytes) {
        who = thread; at = sync; code = pc; touched = bytes; mix = 0;
    }
    void latest(uint32_t thread, uint32_t sync, uint32_t pc) { who = thread; at = sync; code = pc; }
    void add(uint8_t bytes, uint8_t mixed) { touched |= bytes; mix |= mixed; }
};
struct SharedAccess {
    uint32_t who : 10, at : 22;
    uint32_t code : 24, touched : 4, mix : 3, valid : 1;
    bool none() const { return !valid; }
    uint32_t thread() const { return who; }
    uint32_t sync() const { return at; }
    uint32_t pc() const { return code; }
    uint8_t bytes() const { return (uint8_t)touched; }
    uint8_t mixed() const { return (uint8_t)mix; }
    void clear() { valid = 0; }
    void set(uint32_t thread, uint32_t sync, uint32_t pc, uint8_t bytes) {
        who = thread; at = sync; code = pc; touched = bytes; mix = 0; valid = 1;
    }
    void latest(uint32_t thread, uint32_t sync, uint32_t pc) { who = thread; at = sync; code = pc; }
    void add(uint8_t bytes, uint8_t mixed) { touched |= bytes; mix |= mixed; }
};
static const uint32_t SHARED_SYNC_LIMIT = 1u << 22, SHARED_CODE_LIMIT = 1u << 24;

// The shadow of 4 bytes of device (or pinned) memory: one cache line. Of a launch it
// keeps the last write, with the bytes it wrote, and a summary of the reads since
// for each half word, so that the two bf16 of a word are told apart. (Two threads
// that each write one half keep only the second: a race with the first is not seen.)
struct alignas(64) Shadow {
    // for the life of an allocation (alloc_gen names which)
    uint32_t alloc_gen;
    uint8_t init;        // bytes written
    uint8_t unused[3];
    OpId op_write, op_read[2];
    // for one launch (gen names which)
    uint32_t gen;
    DeviceAccess write, read[2];
};
static_assert(sizeof(Shadow) == 64, "a shadow word is one cache line");
// The same for 4 bytes of a block's shared memory (gen: the block)
struct alignas(32) SharedShadow {
    uint32_t gen;
    uint8_t init;
    uint8_t in_flight;   // bytes a cp.async will write, not yet waited for (emu_async_copy.cpp)
    uint8_t unused[2];
    SharedAccess write, read[2];
};
static_assert(sizeof(SharedShadow) == 32, "a shared shadow word is half a cache line");
static Shadow *shadow;              // [arena offset / 4], the pinned and device parts
static SharedShadow *shared_shadow; // [shared offset / 4]

static Shadow &shadow_of(uintptr_t off) { return shadow[off >> 2]; }

// ---- allocations

struct Allocation {
    uintptr_t start;     // arena offset
    size_t bytes;
    const void *site;
    uint32_t gen;        // its index in `allocations`, never reused
    bool device;
};
static std::vector<Allocation> allocations EMU_EARLY(1);            // [gen]; 0 is no allocation
static std::map<uintptr_t, uint32_t> live EMU_EARLY;                // start -> gen of the live ones
static std::map<uintptr_t, size_t> free_device EMU_EARLY, free_pinned EMU_EARLY; // freed spans by start
static uintptr_t device_frontier, pinned_frontier; // where each region's never-used space begins
// the allocation that owns each 256 bytes of the arena (allocations are 256-aligned
// with a gap after each, so no two share a granule): an access finds its own in O(1)
static uint32_t *granule_owner;
static const int GRANULE_SHIFT = 8;

void memory_init() {
    void *a = mmap(nullptr, ARENA_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    size_t shadow_bytes = ARENA_BYTES / 4 * sizeof(Shadow);
    void *s = mmap(nullptr, shadow_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (a == MAP_FAILED || s == MAP_FAILED) {
        fprintf(stderr, "EMU: cannot reserve the emulated memory (%zu GiB, and %zu GiB of shadow): %s\n",
                ARENA_BYTES >> 30, shadow_bytes >> 30, strerror(errno));
        _exit(2);
    }
    void *g = mmap(nullptr, (ARENA_BYTES >> GRANULE_SHIFT) * sizeof(uint32_t), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    void *ss = mmap(nullptr, SHARED_BYTES / 4 * sizeof(SharedShadow), PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (g == MAP_FAILED || ss == MAP_FAILED) {
        fprintf(stderr, "EMU: cannot reserve the emulated memory's allocation map: %s\n", strerror(errno));
        _exit(2);
    }
    arena = (char *)a;
    shadow = (Shadow *)s;
    granule_owner = (uint32_t *)g;
    shared_shadow = (SharedShadow *)ss;
    pinned_frontier = PINNED_START;
    device_frontier = DEVICE_START;
}

static void fill_fresh(void *p, size_t bytes) {
    uint32_t *w = (uint32_t *)p;
    for (size_t i = 0; i < bytes / 4; i++) { w[i] = FRESH; }
    raw_copy((char *)p + bytes / 4 * 4, &FRESH, bytes % 4);
}

// Allocations take fresh address space from the region's frontier while it lasts,
// and only then reuse freed spans: an access through a stale pointer finds no live
// allocation (memcheck) instead of someone else's memory.

static void *allocate(std::map<uintptr_t, size_t> &spans, uintptr_t &frontier, uintptr_t end, size_t bytes,
                      const void *site, bool device) {
    size_t need = (bytes + 255) / 256 * 256 + 256; // the allocation, then a gap that no allocation owns
    uintptr_t start = 0;
    if (need <= end - frontier) {
        start = frontier;
        frontier += need;
    } else {
        auto it = spans.begin();
        while (it != spans.end() && it->second < need) { ++it; }
        if (it == spans.end()) { return nullptr; }
        start = it->first;
        size_t rest = it->second - need;
        spans.erase(it);
        if (rest) { spans[start + need] = rest; }
    }
    uint32_t gen = (uint32_t)allocations.size();
    allocations.push_back(Allocation{start, bytes, site, gen, device});
    live[start] = gen;
    for (uintptr_t g = start >> GRANULE_SHIFT; g < (start + need) >> GRANULE_SHIFT; g++) { granule_owner[g] = gen; }
    fill_fresh(arena + start, bytes);
    return arena + start;
}

static bool release(std::map<uintptr_t, size_t> &spans, void *p, bool device) {
    uintptr_t off = (uintptr_t)p - (uintptr_t)arena;
    auto it = live.find(off);
    if (it == live.end() || allocations[it->second].device != device) { return false; }
    size_t span = (allocations[it->second].bytes + 255) / 256 * 256 + 256;
    live.erase(it);
    for (uintptr_t g = off >> GRANULE_SHIFT; g < (off + span) >> GRANULE_SHIFT; g++) { granule_owner[g] = 0; }
    madvise(arena + off, span / 4096 * 4096, MADV_DONTNEED); // give back what it held (refilled on reuse)
    // merge with the free neighbours
    auto next = spans.lower_bound(off);
    if (next != spans.end() && next->first == off + span) { span += next->second; spans.erase(next); }
    auto prev = spans.lower_bound(off);
    if (prev != spans.begin()) {
        --prev;
        if (prev->first + prev->second == off) { prev->second += span; return true; }
    }
    spans[off] = span;
    return true;
}

void *device_alloc(size_t bytes, const void *site) {
    return allocate(free_device, device_frontier, ARENA_BYTES, bytes, site, true);
}
bool device_free(void *p) { return release(free_device, p, true); }
void *pinned_alloc(size_t bytes, const void *site) {
    return allocate(free_pinned, pinned_frontier, DEVICE_START, bytes, site, false);
}

// Freeing pinned memory does not wait for the device (CUDA promises no more), so
// every operation that used it must happen before the host's free; and one that has
// not run yet will find no live allocation.
bool pinned_free(void *p, const void *site) {
    uintptr_t off = (uintptr_t)p - (uintptr_t)arena;
    auto it = live.find(off);
    if (it == live.end() || allocations[it->second].device) { return false; }
    std::string what = "cudaFreeHost at " + source_of(site);
    host_range(p, allocations[it->second].bytes, true, what.c_str());
    return release(free_pinned, p, false);
}

size_t device_free_bytes() {
    size_t n = ARENA_BYTES - device_frontier;
    for (auto &span : free_device) { n += span.second; }
    return n;
}

static uintptr_t offset_of(const void *p) { return (uintptr_t)p - (uintptr_t)arena; }

bool is_device(const void *p, size_t bytes) {
    uintptr_t off = offset_of(p);
    return off >= DEVICE_START && off < ARENA_BYTES && bytes <= ARENA_BYTES - off;
}
bool is_pinned(const void *p, size_t bytes) {
    uintptr_t off = offset_of(p);
    return off >= PINNED_START && off < DEVICE_START && bytes <= DEVICE_START - off;
}

// the live allocation holding the arena offset, or null
static const Allocation *allocation_at(uintptr_t off) {
    uint32_t gen = granule_owner[off >> GRANULE_SHIFT];
    if (gen == 0) { return nullptr; }
    const Allocation *a = &allocations[gen];
    return off - a->start < a->bytes ? a : nullptr;
}

static std::string describe_allocation(const Allocation &a) {
    return format("an allocation of %zu bytes (%s at %s)", a.bytes, a.device ? "cudaMalloc" : "cudaMallocHost",
                  source_of(a.site).c_str());
}

// "byte 40 of an allocation of 1024 bytes (cudaMalloc at ...)", or what lies near
static std::string describe_address(uintptr_t off) {
    const Allocation *a = allocation_at(off);
    if (a) { return format("byte %zu of %s", (size_t)(off - a->start), describe_allocation(*a).c_str()); }
    auto it = live.upper_bound(off);
    std::string near;
    if (it != live.begin()) {
        const Allocation &before = allocations[(--it)->second];
        near = format(", %zu bytes past the end of %s", (size_t)(off - before.start - before.bytes),
                      describe_allocation(before).c_str());
    }
    return format("0x%lx, in no live allocation%s", (unsigned long)(uintptr_t)(arena + off), near.c_str());
}

// ---- shared memory of the running block

static size_t static_used, dynamic_bytes;
struct StaticShared { const char *file; int line; size_t offset; };
static StaticShared statics[64];
static int num_statics;

void shared_begin_block(size_t bytes) {
    static_used = 0;
    num_statics = 0;
    dynamic_bytes = bytes;
    fill_fresh(arena + STATIC_SHARED_MAX, bytes);
}

void *shared_dynamic() { return arena + STATIC_SHARED_MAX; }

void *shared_static(const char *file, int line, size_t bytes, size_t align) {
    for (int i = 0; i < num_statics; i++) {
        if (statics[i].file == file && statics[i].line == line) { return arena + statics[i].offset; }
    }
    size_t offset = (static_used + align - 1) / align * align;
    if (offset + bytes > STATIC_SHARED_MAX || offset + bytes + dynamic_bytes > SHARED_TOTAL_MAX || num_statics == 64) {
        report("launch", format("kernel %s: static shared memory at %s:%d takes it to %zu bytes (with %zu dynamic), "
                                "over the 48 KiB of static shared memory or the 227 KiB a block may have",
                                kernel_name(ctx.kernel).c_str(), file, line, offset + bytes, dynamic_bytes));
    }
    statics[num_statics++] = StaticShared{file, line, offset};
    static_used = offset + bytes;
    fill_fresh(arena + offset, bytes);
    return arena + offset;
}

// ---- the checks

// the thread's coordinates "(x,y,z)" from its linear index in a block of blockDim
std::string thread_coords(uint32_t t) {
    return format("(%u,%u,%u)", t % emu_block_dim.x, t / emu_block_dim.x % emu_block_dim.y,
                  t / (emu_block_dim.x * emu_block_dim.y));
}
static std::string block_coords(uint32_t seq) {
    uint32_t b = ctx.block_order[seq];
    return format("(%u,%u,%u)", b % emu_grid_dim.x, b / emu_grid_dim.x % emu_grid_dim.y,
                  b / (emu_grid_dim.x * emu_grid_dim.y));
}

// "thread (1,0,0)" in the running block, or "thread (1,0,0) of block (2,0,0)"
template <typename A> static std::string who(const A &a, bool device) {
    uint32_t t = device ? a.thread() % ctx.block_threads : a.thread();
    std::string s = "thread " + thread_coords(t);
    if (device && a.thread() / ctx.block_threads != ctx.block_seq) {
        s += " of block " + block_coords(a.thread() / ctx.block_threads);
    }
    return s;
}

static std::string me() {
    return format("kernel %s, thread %s of block %s", kernel_name(ctx.kernel).c_str(), thread_coords(ctx.thread).c_str(),
                  block_coords(ctx.block_seq).c_str());
}
std::string running_thread() { return me(); }

// whether everything `a` records comes before the running thread's access now
template <typename A> __attribute__((always_inline)) static inline bool ordered_after(const A &a, bool device) {
    if (a.mixed() & MIXED_BLOCKS) { return false; }
    if (device && a.thread() / ctx.block_threads != ctx.block_seq) { return false; } // blocks are never ordered
    const BlockSync &bs = *ctx.sync;
    if (a.sync() < bs.barrier) { return true; }
    if (a.mixed() & MIXED_WARPS) { return false; }
    uint32_t t = device ? a.thread() % ctx.block_threads : a.thread(), w = t / 32;
    if (w != ctx.thread / 32) { return false; }
    if (a.sync() < bs.warp[w]) { return true; }
    return !(a.mixed() & MIXED_THREADS) && a.sync() < bs.pair[w][t % 32][ctx.thread % 32];
}

// whether `a` is another thread's access of one of `bytes` that nothing orders before now
template <typename A>
__attribute__((always_inline)) static inline bool conflicts(const A &a, uint32_t me, uint8_t bytes, bool device) {
    if (a.none() || !(a.bytes() & bytes)) { return false; }
    if (a.thread() == me && !(a.mixed() & MIXED_THREADS)) { return false; }
    return !ordered_after(a, device);
}

// what a word of the arena is, for a report
static std::string place_of(uintptr_t word, bool device) {
    if (!device) { return format("shared memory at offset %zu", (size_t)word); }
    const Allocation *a = allocation_at(word);
    return (a && !a->device ? "pinned host memory, " : "device memory, ") + describe_address(word);
}

template <typename A>
[[noreturn]] static void race(const char *kind, bool device, uintptr_t word, uint32_t pc, const A &before,
                              const char *before_verb) {
    std::string other = before.mixed() & MIXED_THREADS ? "threads (the last of them " + who(before, device) + ")"
                                                       : who(before, device);
    report("racecheck",
           format("%s hazard on %s, in %s:\n    it %s at %s%s\n    %s %s it at %s\n    and %s",
                  kind, place_of(word, device).c_str(), me().c_str(), kind[0] == 'r' ? "reads" : "writes",
                  source_of(code_address(pc)).c_str(),
                  ctx.copy_read_until ? ("\n    (a cp.async's read of its source, which lasts until the "
                                         "cp.async.wait_group at " + source_of(ctx.copy_read_until) + ")").c_str()
                                      : "",
                  other.c_str(), before_verb,
                  source_of(code_address(before.pc())).c_str(),
                  device && before.thread() / ctx.block_threads != ctx.block_seq
                      ? "the blocks of one launch are never ordered"
                      : "no __syncthreads, or __syncwarp of both, comes between them"));
}

// the launch-level (device) or block-level (shared) race check of one word
template <typename W>
__attribute__((always_inline)) static inline void check_threads(W &s, uint32_t gen, bool device, bool write,
                                                                uint8_t bytes, const void *pc, uintptr_t word) {
    if (s.gen != gen) {
        s.gen = gen;
        s.write.clear();
        s.read[0].clear();
        s.read[1].clear();
    }
    uint32_t me = device ? ctx.block_seq * ctx.block_threads + ctx.thread : ctx.thread;
    uint32_t sync = ctx.sync->count, code = code_offset(pc);
    if (conflicts(s.write, me, bytes, device)) {
        race(write ? "write-after-write" : "read-after-write", device, word, code, s.write, "wrote");
    }
    for (int h = 0; h < 2; h++) {
        uint8_t half = bytes & (3u << (2 * h));
        if (!half) { continue; }
        auto &r = s.read[h];
        if (write) {
            if (conflicts(r, me, half, device)) { race("write-after-read", device, word, code, r, "read"); }
            r.clear();
            continue;
        }
        // Nothing new: this thread read it last, at this S; or a summary of several
        // threads of this S holds this warp (of this block) already.
        if (!r.none() && r.sync() == sync && !(r.mixed() & MIXED_BLOCKS) &&
            (r.thread() == me || ((r.mixed() & MIXED_THREADS) &&
                                  (!device || r.thread() / ctx.block_threads == ctx.block_seq) &&
                                  ((r.mixed() & MIXED_WARPS) ||
                                   (device ? r.thread() % ctx.block_threads : r.thread()) / 32 == ctx.thread / 32)))) {
            r.add(half, 0);
            continue;
        }
        // reads ordered before this one are covered by it; else they are summed up
        if (r.none() || ordered_after(r, device)) {
            r.set(me, sync, code, half);
            continue;
        }
        uint8_t mixed = 0;
        if (r.thread() != me) {
            mixed |= MIXED_THREADS;
            uint32_t rt = device ? r.thread() % ctx.block_threads : r.thread();
            if (rt / 32 != ctx.thread / 32) { mixed |= MIXED_WARPS; }
            if (device && r.thread() / ctx.block_threads != ctx.block_seq) { mixed |= MIXED_BLOCKS; }
        }
        r.latest(me, sync, code);
        r.add(half, mixed);
    }
    if (write) { s.write.set(me, sync, code, bytes); }
}

// what an operation id is, for a report; the host's own steps are host code
static std::string op_words(OpId id) { return op_stream(id) == 0 ? "host code" : describe_op(id); }

// the operation-level check of one word, for the running operation (or the host)
// at: the source line of a host access (null for an operation's)
static void check_operations(Shadow &s, bool write, uintptr_t word, const void *at) {
    OpId now = ctx.op;
    const VectorClock &vc = *ctx.clock;
    OpId earlier = 0;
    const char *verb = nullptr;
    if (s.op_write && s.op_write != now && !happens_before(s.op_write, vc)) { earlier = s.op_write; verb = "wrote"; }
    if (write && !earlier) {
        for (int i = 0; i < 2; i++) {
            OpId r = s.op_read[i];
            if (r && r != now && !happens_before(r, vc)) { earlier = r; verb = "read"; }
        }
    }
    if (earlier) {
        std::string actor = ctx.actor == ACTOR_HOST ? "host code" : ctx.what;
        std::string line = at ? " at " + source_of(at) : ctx.actor == ACTOR_HOST ? format(" (%s)", ctx.what) : "";
        report("racecheck", format("%s %s %s%s,\n    which %s %s,\n    and no stream order, event or synchronisation "
                                   "makes the one happen before the other",
                                   actor.c_str(), write ? "writes" : "reads", place_of(word, true).c_str(), line.c_str(),
                                   op_words(earlier).c_str(), verb));
    }
    if (write) {
        s.op_write = now;
        s.op_read[0] = s.op_read[1] = 0;
        return;
    }
    if (s.op_read[0] == now || s.op_read[1] == now) { return; }
    for (int i = 0; i < 2; i++) {
        if (s.op_read[i] == 0 || happens_before(s.op_read[i], vc)) { s.op_read[i] = now; return; }
    }
    s.op_read[0] = s.op_read[1];
    s.op_read[1] = now;
}

// the bytes of the word at `word` that [off, off + n) touches, as a mask
static inline uint8_t bytes_in_word(uintptr_t word, uintptr_t off, size_t n) {
    uintptr_t first = off > word ? off - word : 0, end = off + n - word < 4 ? off + n - word : 4;
    return (uint8_t)(((1u << end) - 1u) & ~((1u << first) - 1u));
}

// the persistent part of a word of allocation a, reset when the allocation is new
static Shadow &allocation_word(uintptr_t word, const Allocation &a) {
    Shadow &s = shadow_of(word);
    if (s.alloc_gen != a.gen) {
        s.alloc_gen = a.gen;
        s.init = 0;
        s.op_write = s.op_read[0] = s.op_read[1] = 0;
        s.gen = 0;
    }
    return s;
}

bool is_shared(const void *p, size_t bytes) {
    uintptr_t off = offset_of(p);
    return off < SHARED_BYTES && bytes <= SHARED_BYTES - off;
}

void shared_in_flight(const void *p, size_t n, bool in_flight) {
    uintptr_t off = offset_of(p);
    for (uintptr_t word = off & ~(uintptr_t)3; word < off + n; word += 4) {
        SharedShadow &s = shared_shadow[word >> 2];
        uint8_t bytes = bytes_in_word(word, off, n);
        s.in_flight = in_flight ? s.in_flight | bytes : s.in_flight & (uint8_t)~bytes;
    }
}

static void kernel_access_shared(uintptr_t off, size_t n, bool write, const void *pc) {
    bool in_static = off + n <= static_used;
    bool in_dynamic = off >= STATIC_SHARED_MAX && off + n <= STATIC_SHARED_MAX + dynamic_bytes;
    if (!in_static && !in_dynamic) {
        report("memcheck", format("%s %s %zu bytes of shared memory at offset %zu, outside the block's %zu bytes of "
                                  "static shared memory [0, %zu) and %zu of dynamic [%zu, %zu), at %s",
                                  me().c_str(), write ? "writes" : "reads", n, (size_t)off, static_used, static_used,
                                  dynamic_bytes, STATIC_SHARED_MAX, STATIC_SHARED_MAX + dynamic_bytes,
                                  source_of(pc).c_str()));
    }
    if (ctx.sync->count >= SHARED_SYNC_LIMIT || code_offset(pc) >= SHARED_CODE_LIMIT) {
        report("internal", format("%s: past the 2^22 synchronisations of a block or the 2^24 bytes of code that "
                                  "shared memory's shadow words hold", me().c_str()));
    }
    for (uintptr_t word = off & ~(uintptr_t)3; word < off + n; word += 4) {
        uint8_t bytes = bytes_in_word(word, off, n);
        SharedShadow &s = shared_shadow[word >> 2];
        if (s.gen != ctx.block_gen) { s.init = 0; s.in_flight = 0; }
        if (s.in_flight & bytes) {
            uintptr_t byte = word + (uintptr_t)__builtin_ctz(s.in_flight & bytes);
            async_copy_hazard(arena + byte, byte, write, pc);
        }
        if (!write && (s.init & bytes) != bytes) {
            report("initcheck", format("%s reads shared memory at offset %zu (%s) that no thread of the block wrote, "
                                       "at %s", me().c_str(), (size_t)word,
                                       in_static ? "static" : "dynamic", source_of(pc).c_str()));
        }
        check_threads(s, ctx.block_gen, false, write, bytes, pc, word);
        if (write) { s.init |= bytes; }
    }
}

static void kernel_access_global(uintptr_t off, size_t n, bool write, const void *pc) {
    const Allocation *a = allocation_at(off);
    if (a == nullptr || off + n > a->start + a->bytes) {
        report("memcheck", format("%s %s %zu bytes at %s, at %s", me().c_str(), write ? "writes" : "reads", n,
                                  describe_address(a ? a->start + a->bytes : off).c_str(), source_of(pc).c_str()));
    }
    for (uintptr_t word = off & ~(uintptr_t)3; word < off + n; word += 4) {
        uint8_t bytes = bytes_in_word(word, off, n);
        Shadow &s = allocation_word(word, *a);
        if (a->device && !write && (s.init & bytes) != bytes) {
            report("initcheck", format("%s reads %s, which nothing wrote since it was allocated, at %s", me().c_str(),
                                       describe_address(word).c_str(), source_of(pc).c_str()));
        }
        check_operations(s, write, word, nullptr);
        check_threads(s, ctx.launch_gen, true, write, bytes, pc, word);
        if (write) { s.init |= bytes; }
    }
}

void kernel_access(const void *p, size_t n, bool write, const void *pc) {
    uintptr_t off = offset_of(p);
    if (off < SHARED_BYTES) { kernel_access_shared(off, n, write, pc); } else { kernel_access_global(off, n, write, pc); }
}

// the host code (instrumented) touches the arena
static void host_access(uintptr_t off, size_t n, bool write, const void *pc) {
    const Allocation *a = allocation_at(off);
    if (off < PINNED_START || (a && a->device) || (a == nullptr && off >= DEVICE_START)) {
        report("memcheck", format("host code %s %s %s at %s: the host reaches device memory only through the runtime's "
                                  "copies", write ? "writes" : "reads",
                                  off < PINNED_START ? "shared memory" : "device memory,",
                                  off < PINNED_START ? "" : describe_address(off).c_str(), source_of(pc).c_str()));
    }
    if (a == nullptr || off + n > a->start + a->bytes) {
        report("memcheck", format("host code %s %zu bytes of pinned memory at %s, at %s", write ? "writes" : "reads", n,
                                  describe_address(off).c_str(), source_of(pc).c_str()));
    }
    for (uintptr_t word = off & ~(uintptr_t)3; word < off + n; word += 4) {
        check_operations(allocation_word(word, *a), write, word, pc);
    }
}

static void hooked_access(const void *p, size_t n, bool write, const void *pc) {
    uintptr_t off = offset_of(p);
    if (ctx.actor == ACTOR_KERNEL) { kernel_access(p, n, write, pc); return; }
    Context saved = ctx;
    ctx.actor = ACTOR_HOST;
    ctx.op = host_step();
    ctx.clock = &host_clock();
    host_access(off, n, write, pc);
    ctx = saved;
}

void host_range(const void *p, size_t bytes, bool write, const char *what) {
    if (bytes == 0 || !is_pinned(p, bytes)) { return; }
    Context saved = ctx;
    ctx.actor = ACTOR_HOST;
    ctx.op = host_step();
    ctx.clock = &host_clock();
    ctx.what = what;
    uintptr_t off = offset_of(p);
    const Allocation *a = allocation_at(off);
    if (a == nullptr || off + bytes > a->start + a->bytes) {
        report("memcheck", format("%s: %zu bytes at %s", what, bytes, describe_address(off).c_str()));
    }
    for (uintptr_t word = off & ~(uintptr_t)3; word < off + bytes; word += 4) {
        check_operations(allocation_word(word, *a), write, word, nullptr);
    }
    ctx = saved;
}

void access_range(const void *p, size_t bytes, bool write, const char *what) {
    if (bytes == 0) { return; }
    uintptr_t off = offset_of(p);
    if (!is_device(p, bytes) && !is_pinned(p, bytes)) { return; } // pageable host memory: the host's own
    const Allocation *a = allocation_at(off);
    if (a == nullptr || off + bytes > a->start + a->bytes) {
        report("memcheck", format("%s %s %zu bytes from %s", what, write ? "writes" : "reads", bytes,
                                  describe_address(a ? a->start + a->bytes : off).c_str()));
    }
    for (uintptr_t word = off & ~(uintptr_t)3; word < off + bytes; word += 4) {
        check_operations(allocation_word(word, *a), write, word, nullptr);
    }
}

void copy_initialised(void *dst, const void *src, size_t bytes) {
    if (!is_device(dst, bytes)) { return; }
    const Allocation *d = allocation_at(offset_of(dst));
    const Allocation *s = is_device(src, bytes) ? allocation_at(offset_of(src)) : nullptr;
    for (size_t i = 0; i < bytes; i++) {
        uintptr_t doff = offset_of(dst) + i;
        Shadow &dw = allocation_word(doff & ~(uintptr_t)3, *d);
        bool written = true;
        if (s) {
            uintptr_t soff = offset_of(src) + i;
            written = allocation_word(soff & ~(uintptr_t)3, *s).init >> (soff & 3) & 1;
        }
        if (written) { dw.init |= (uint8_t)(1u << (doff & 3)); } else { dw.init &= (uint8_t)~(1u << (doff & 3)); }
    }
}

void mark_initialised(void *dst, size_t bytes) {
    if (!is_device(dst, bytes) || bytes == 0) { return; }
    const Allocation *d = allocation_at(offset_of(dst));
    uintptr_t off = offset_of(dst);
    for (uintptr_t word = off & ~(uintptr_t)3; word < off + bytes; word += 4) {
        allocation_word(word, *d).init |= bytes_in_word(word, off, bytes);
    }
}

} // namespace emu

// ---- the instrumentation's entry points (clang -fsanitize=thread, without its runtime)

#define EMU_HOOK(p, n, write)                                                                  \
    do {                                                                                       \
        if ((uintptr_t)(p) - (uintptr_t)emu::arena < emu::ARENA_BYTES) {                       \
            emu::hooked_access((p), (n), (write), __builtin_return_address(0));                \
        }                                                                                      \
    } while (0)

extern "C" {
void __tsan_init() {}
void __tsan_func_entry(void *) {}
void __tsan_func_exit() {}
void __tsan_vptr_update(void **, void *) {}
void __tsan_vptr_read(void **) {}
#define EMU_HOOKS(n)                                                          \
    void __tsan_read##n(void *p) { EMU_HOOK(p, n, false); }                   \
    void __tsan_write##n(void *p) { EMU_HOOK(p, n, true); }                   \
    void __tsan_unaligned_read##n(void *p) { EMU_HOOK(p, n, false); }         \
    void __tsan_unaligned_write##n(void *p) { EMU_HOOK(p, n, true); }
EMU_HOOKS(1)
EMU_HOOKS(2)
EMU_HOOKS(4)
EMU_HOOKS(8)
EMU_HOOKS(16)
void __tsan_read_range(void *p, unsigned long n) { EMU_HOOK(p, n, false); }
void __tsan_write_range(void *p, unsigned long n) { EMU_HOOK(p, n, true); }

// the process's memcpy, memmove and memset: the code under test's copies are its
// accesses (an operation's own copies are the runtime's)
void *__memcpy_chk(void *dst, const void *src, size_t n, size_t dst_len);
void *__memmove_chk(void *dst, const void *src, size_t n, size_t dst_len);
void *__memset_chk(void *dst, int c, size_t n, size_t dst_len);
#define EMU_COPY_HOOK(p, n, write)                                                                     \
    do {                                                                                               \
        if (n && (emu::ctx.actor == emu::ACTOR_HOST || emu::ctx.actor == emu::ACTOR_KERNEL)) {         \
            EMU_HOOK(p, n, write);                                                                     \
        }                                                                                              \
    } while (0)
void *memcpy(void *dst, const void *src, size_t n) {
    EMU_COPY_HOOK(src, n, false);
    EMU_COPY_HOOK(dst, n, true);
    return __memcpy_chk(dst, src, n, (size_t)-1);
}
void *memmove(void *dst, const void *src, size_t n) {
    EMU_COPY_HOOK(src, n, false);
    EMU_COPY_HOOK(dst, n, true);
    return __memmove_chk(dst, src, n, (size_t)-1);
}
void *memset(void *dst, int c, size_t n) {
    EMU_COPY_HOOK(dst, n, true);
    return __memset_chk(dst, c, n, (size_t)-1);
}
}

namespace emu {
void raw_copy(void *dst, const void *src, size_t n) { __memmove_chk(dst, src, n, (size_t)-1); }
void raw_set(void *dst, int c, size_t n) { __memset_chk(dst, c, n, (size_t)-1); }
}
