/*
Threads, blocks and launches.

Every thread of a block is a fiber with its own stack. The block's scheduler runs
one runnable fiber at a time, chosen at random from the seed, until it reaches a
synchronisation point or exits; so between synchronisation points the threads of a
block, lanes of one warp included (independent thread scheduling), run in an
order that changes with the seed. A launch runs its blocks one after another in a
random order, each with fresh shared memory (emu_memory.cpp).

Synchronisation points and what synccheck holds them to:

  __syncthreads   opens when every thread of the block that has not exited waits
                  at it, all at the same barrier (one source line); the block's
                  synchronisation count S then advances and orders memory
  __syncwarp, __shfl*_sync, __ballot_sync, mma, ldmatrix (collectives)
                  open when every lane named in the mask has arrived, each lane's
                  mask naming itself and the same lanes, all at the same
                  instruction (one source line; mma and ldmatrix take the whole
                  warp); a lane of the mask that has exited, or that waits
                  elsewhere, is a report. Only __syncwarp orders memory (S advances
                  for the warp): shuffles, mma and ldmatrix exchange registers, not
                  memory
  neither         when no thread can run and the waiting ones wait at different
                  points, the block can never finish: a report names each group

A call site is the return address of the synchronisation call in the kernel; two
addresses that addr2line maps to the same source lines (a call the compiler
duplicated) are the same site.
*/
#include <sys/mman.h>
#include <map>
#include <vector>
#include "emu_internal.h"

const dim3 *emu_thread_idx;
dim3 emu_block_idx, emu_block_dim, emu_grid_dim;

namespace emu {

// ---- fibers: a context switch of callee-saved registers (x86-64), else ucontext

struct Fiber {
    enum State { RUNNABLE, AT_BARRIER, IN_COLLECTIVE, EXITED };
    void *sp;            // saved stack pointer while switched out
    char *stack;
    dim3 idx;
    uint32_t thread;     // linear index in the block
    State state;
    // while waiting
    const void *site;
    const char *what;
    unsigned mask;
    unsigned char payload[64];
    size_t bytes;
    void *result;        // the lanes' payloads go here, or (compute) this lane's result
    WarpCompute compute; // null, or what turns the 32 payloads into each lane's result
    size_t result_bytes;
};

static const size_t STACK_BYTES = 256 << 10, MAX_THREADS = 1024;
static std::vector<Fiber> fibers EMU_EARLY;
static void *scheduler_sp;
static Fiber *current;
static uint32_t block_threads;
static std::vector<uint32_t> runnable EMU_EARLY;
static void (*body)(void *);
static void *body_params;
static BlockSync block_sync;
static bool pair_used[32];

#if defined(__x86_64__)
extern "C" void emu_switch(void **save_sp, void *to_sp);
asm(".text\n"
    ".globl emu_switch\n"
    ".type emu_switch,@function\n"
    "emu_switch:\n"
    "    pushq %rbp\n    pushq %rbx\n    pushq %r12\n    pushq %r13\n    pushq %r14\n    pushq %r15\n"
    "    movq %rsp, (%rdi)\n"
    "    movq %rsi, %rsp\n"
    "    popq %r15\n    popq %r14\n    popq %r13\n    popq %r12\n    popq %rbx\n    popq %rbp\n"
    "    ret\n"
    ".size emu_switch, .-emu_switch\n");
#else
#include <ucontext.h>
static ucontext_t scheduler_context, fiber_contexts[MAX_THREADS];
#endif

static void on_exit(Fiber *f);

static void fiber_main() {
    body(body_params);
    async_copy_thread_exit();
    current->state = Fiber::EXITED;
    on_exit(current);
#if defined(__x86_64__)
    emu_switch(&current->sp, scheduler_sp);
#else
    swapcontext(&fiber_contexts[current->thread], &scheduler_context);
#endif
}

static void fiber_prepare(Fiber *f) {
#if defined(__x86_64__)
    // an emu_switch into it pops six registers and returns into fiber_main, with the
    // stack as after a call (16-byte aligned before the return address)
    uintptr_t top = ((uintptr_t)f->stack + STACK_BYTES) & ~(uintptr_t)15;
    void **sp = (void **)(top - 8 - 8 - 48);
    for (int i = 0; i < 6; i++) { sp[i] = nullptr; }
    sp[6] = (void *)&fiber_main;
    sp[7] = nullptr;
    f->sp = sp;
#else
    ucontext_t *c = &fiber_contexts[f->thread];
    getcontext(c);
    c->uc_stack.ss_sp = f->stack;
    c->uc_stack.ss_size = STACK_BYTES;
    c->uc_link = nullptr;
    makecontext(c, fiber_main, 0);
#endif
}

static void run_fiber(Fiber *f) {
    current = f;
    emu_thread_idx = &f->idx;
    ctx.thread = f->thread;
#if defined(__x86_64__)
    emu_switch(&scheduler_sp, f->sp);
#else
    swapcontext(&scheduler_context, &fiber_contexts[f->thread]);
#endif
}

// the running fiber gives the processor back to its block's scheduler
static void yield() {
#if defined(__x86_64__)
    emu_switch(&current->sp, scheduler_sp);
#else
    swapcontext(&fiber_contexts[current->thread], &scheduler_context);
#endif
    emu_thread_idx = &current->idx;
}

// ---- synccheck

static std::string thread_name(uint32_t t) {
    return format("thread %u (%u,%u,%u)", t, t % emu_block_dim.x, t / emu_block_dim.x % emu_block_dim.y,
                  t / (emu_block_dim.x * emu_block_dim.y));
}

static std::string here() {
    return format("kernel %s, block (%u,%u,%u)", kernel_name(ctx.kernel).c_str(), emu_block_idx.x, emu_block_idx.y,
                  emu_block_idx.z);
}

static bool same_site(const void *a, const void *b) { return a == b || source_of(a) == source_of(b); }

// Lists every thread that has not exited, grouped by where it waits.
static std::string waiting_groups() {
    std::string out;
    std::map<std::string, std::vector<uint32_t>> groups;
    for (uint32_t t = 0; t < block_threads; t++) {
        const Fiber &f = fibers[t];
        if (f.state == Fiber::EXITED) { continue; }
        std::string key = f.state == Fiber::RUNNABLE ? std::string("runnable")
                                                     : format("%s (mask 0x%08x) at %s", f.what, f.mask,
                                                              source_of(f.site).c_str());
        groups[key].push_back(t);
    }
    for (auto &g : groups) {
        out += format("\n    threads %u", g.second[0]);
        size_t n = g.second.size();
        if (n > 1) { out += format(" .. %u (%zu threads)", g.second[n - 1], n); }
        out += ": " + g.first;
    }
    return out;
}

// S advances: the shadow keeps 24 bits of it
static void advance_sync() {
    if (++block_sync.count >= 1u << 24) {
        report("internal", format("%s passes 2^24 synchronisations in one block, more than the shadow words count",
                                  here().c_str()));
    }
}

// ---- block barrier

static void syncthreads_at(const void *site) {
    current->state = Fiber::AT_BARRIER;
    current->site = site;
    current->what = "__syncthreads";
    current->mask = 0;
    yield();
}

// all live threads wait at the barrier: open it, after checking they wait at one
static bool open_barrier() {
    const Fiber *first = nullptr;
    for (uint32_t t = 0; t < block_threads; t++) {
        const Fiber &f = fibers[t];
        if (f.state == Fiber::EXITED) { continue; }
        if (f.state != Fiber::AT_BARRIER) { return false; }
        if (first == nullptr) { first = &f; }
        else if (!same_site(first->site, f.site)) {
            report("synccheck", format("divergent __syncthreads in %s: %s waits at %s, %s at %s; every thread of the "
                                       "block must reach the same barrier", here().c_str(),
                                       thread_name(first->thread).c_str(), source_of(first->site).c_str(),
                                       thread_name(f.thread).c_str(), source_of(f.site).c_str()));
        }
    }
    if (first == nullptr) { return false; }
    advance_sync();
    block_sync.barrier = block_sync.count;
    for (uint32_t t = 0; t < block_threads; t++) {
        if (fibers[t].state == Fiber::AT_BARRIER) {
            fibers[t].state = Fiber::RUNNABLE;
            runnable.push_back(t);
        }
    }
    return true;
}

// ---- warp collectives

// The warp of `f` completes a collective if every lane of the mask has arrived at it.
static bool try_complete(const Fiber *f) {
    uint32_t base = f->thread / 32 * 32;
    for (int l = 0; l < 32; l++) {
        if (!(f->mask >> l & 1u)) { continue; }
        if (base + l >= block_threads) {
            report("synccheck", format("%s at %s in %s: its mask 0x%08x names lane %d, which does not exist (the block "
                                       "has %u threads)", f->what, source_of(f->site).c_str(), here().c_str(), f->mask,
                                       l, block_threads));
        }
        const Fiber &g = fibers[base + l];
        if (g.state == Fiber::EXITED) {
            report("synccheck", format("%s at %s in %s: lane %d of its mask 0x%08x has exited (%s waits for it)",
                                       f->what, source_of(f->site).c_str(), here().c_str(), l, f->mask,
                                       thread_name(f->thread).c_str()));
        }
        if (g.state != Fiber::IN_COLLECTIVE) { return false; }
    }
    for (int l = 0; l < 32; l++) {
        if (!(f->mask >> l & 1u)) { continue; }
        const Fiber &g = fibers[base + l];
        if (g.mask != f->mask || strcmp(g.what, f->what) != 0 || !same_site(g.site, f->site)) {
            report("synccheck", format("lanes of one warp meet in different collectives in %s: %s in %s (mask "
                                       "0x%08x) at %s, %s in %s (mask 0x%08x) at %s", here().c_str(),
                                       thread_name(f->thread).c_str(), f->what, f->mask, source_of(f->site).c_str(),
                                       thread_name(g.thread).c_str(), g.what, g.mask, source_of(g.site).c_str()));
        }
    }
    if (f->compute) {
        // once for the warp (every lane of it: mma), each lane its own slice
        unsigned char payloads[32 * 64], results[32 * 64];
        for (int l = 0; l < 32; l++) { memcpy(payloads + l * f->bytes, fibers[base + l].payload, f->bytes); }
        f->compute(payloads, results);
        for (int l = 0; l < 32; l++) { memcpy(fibers[base + l].result, results + l * f->result_bytes, f->result_bytes); }
    }
    // else every lane gets every lane's payload; lanes outside the mask read as the fresh NaN
    for (int l = 0; l < 32; l++) {
        if (!(f->mask >> l & 1u)) { continue; }
        Fiber &g = fibers[base + l];
        unsigned char *all = (unsigned char *)g.result;
        for (int k = 0; k < 32 && f->bytes && !f->compute; k++) {
            if (f->mask >> k & 1u) { memcpy(all + k * f->bytes, fibers[base + k].payload, f->bytes); }
            else { memset(all + k * f->bytes, 0xff, f->bytes); }
        }
        g.state = Fiber::RUNNABLE;
        if (&g != current) { runnable.push_back(base + l); }
    }
    if (strcmp(f->what, "__syncwarp") == 0) {
        uint32_t w = f->thread / 32;
        advance_sync();
        if (f->mask == 0xffffffffu) {
            block_sync.warp[w] = block_sync.count;
        } else {
            pair_used[w] = true;
            for (int a = 0; a < 32; a++) {
                for (int b = 0; b < 32; b++) {
                    if ((f->mask >> a & 1u) && (f->mask >> b & 1u)) { block_sync.pair[w][a][b] = block_sync.count; }
                }
            }
        }
    }
    return true;
}

void warp_compute(const char *what, unsigned mask, const void *mine, size_t bytes, void *result, size_t result_bytes,
                  WarpCompute compute, const void *site) {
    int lane = (int)(current->thread % 32);
    if (!(mask >> lane & 1u)) {
        report("synccheck", format("%s at %s in %s: %s calls it with mask 0x%08x, which does not name its own lane %d",
                                   what, source_of(site).c_str(), here().c_str(), thread_name(current->thread).c_str(),
                                   mask, lane));
    }
    current->state = Fiber::IN_COLLECTIVE;
    current->what = what;
    current->mask = mask;
    current->site = site;
    current->bytes = bytes;
    if (bytes) { memcpy(current->payload, mine, bytes); }
    current->result = result;
    current->compute = compute;
    current->result_bytes = result_bytes;
    if (!try_complete(current)) { yield(); }
}

void warp_collective(const char *what, unsigned mask, const void *mine, size_t bytes, void *all, const void *site) {
    warp_compute(what, mask, mine, bytes, all, 0, nullptr, site);
}

static void on_exit(Fiber *f) {
    uint32_t base = f->thread / 32 * 32;
    for (uint32_t t = base; t < base + 32 && t < block_threads; t++) {
        const Fiber &g = fibers[t];
        if (g.state == Fiber::IN_COLLECTIVE && (g.mask >> (f->thread % 32) & 1u)) {
            report("synccheck", format("%s exits while %s waits for it in %s (mask 0x%08x) at %s, in %s",
                                       thread_name(f->thread).c_str(), thread_name(g.thread).c_str(), g.what, g.mask,
                                       source_of(g.site).c_str(), here().c_str()));
        }
    }
}

// ---- a block

static void run_block() {
    runnable.clear();
    for (uint32_t t = 0; t < block_threads; t++) {
        Fiber &f = fibers[t];
        f.thread = t;
        f.idx = dim3(t % emu_block_dim.x, t / emu_block_dim.x % emu_block_dim.y, t / (emu_block_dim.x * emu_block_dim.y));
        f.state = Fiber::RUNNABLE;
        fiber_prepare(&f);
        runnable.push_back(t);
    }
    block_sync.count = block_sync.barrier = 0;
    memset(block_sync.warp, 0, sizeof(block_sync.warp));
    for (int w = 0; w < 32; w++) {
        if (pair_used[w]) { memset(block_sync.pair[w], 0, sizeof(block_sync.pair[w])); pair_used[w] = false; }
    }
    ctx.sync = &block_sync;
    for (;;) {
        while (!runnable.empty()) {
            size_t i = random_below(runnable.size());
            uint32_t t = runnable[i];
            runnable[i] = runnable.back();
            runnable.pop_back();
            run_fiber(&fibers[t]);
        }
        bool any_live = false;
        for (uint32_t t = 0; t < block_threads && !any_live; t++) { any_live = fibers[t].state != Fiber::EXITED; }
        if (!any_live) { return; }
        if (!open_barrier()) {
            report("synccheck", format("%s can never finish: its threads wait at different points%s", here().c_str(),
                                       waiting_groups().c_str()));
        }
    }
}

// ---- launches

static std::map<const void *, int> max_dynamic_shared EMU_EARLY; // cudaFuncSetAttribute, per kernel
static const int DEFAULT_DYNAMIC_SHARED = 48 << 10, MAX_SHARED_PER_BLOCK = 227 << 10;
static uint32_t gen_counter;

void func_attribute(const void *kernel, int bytes) { max_dynamic_shared[kernel] = bytes; }

std::string launch_refusal(const EmuLaunch &l) {
    const dim3 &b = l.block, &g = l.grid;
    uint64_t threads = (uint64_t)b.x * b.y * b.z;
    if (b.x == 0 || b.y == 0 || b.z == 0 || b.x > 1024 || b.y > 1024 || b.z > 64 || threads > MAX_THREADS) {
        return format("a block of (%u,%u,%u) threads: sm_90 allows x, y <= 1024, z <= 64, at most 1024 in all", b.x,
                      b.y, b.z);
    }
    if (g.x == 0 || g.y == 0 || g.z == 0 || g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535) {
        return format("a grid of (%u,%u,%u) blocks: sm_90 allows x <= 2^31 - 1, y, z <= 65535, none 0", g.x, g.y, g.z);
    }
    auto attr = max_dynamic_shared.find(l.kernel);
    int allowed = attr == max_dynamic_shared.end() ? DEFAULT_DYNAMIC_SHARED : attr->second;
    if (l.shared > (size_t)MAX_SHARED_PER_BLOCK) {
        return format("%zu bytes of dynamic shared memory: a block may have at most 227 KiB (232448 bytes)", l.shared);
    }
    if (l.shared > (size_t)allowed) {
        return format("%zu bytes of dynamic shared memory, over the %d bytes this kernel may have: above 48 KiB, "
                      "cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) must "
                      "allow it first", l.shared, allowed);
    }
    return "";
}

void launch_run(const EmuLaunch &l, OpId op, const VectorClock *clock) {
    static std::map<const void *, std::string> names;
    auto named = names.find(l.kernel);
    if (named == names.end()) { named = names.emplace(l.kernel, "kernel " + kernel_name(l.kernel)).first; }
    block_threads = l.block.x * l.block.y * l.block.z;
    if (fibers.size() < block_threads) {
        size_t old = fibers.size();
        fibers.resize(MAX_THREADS);
        for (size_t i = old; i < MAX_THREADS; i++) {
            void *s = mmap(nullptr, STACK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                           -1, 0);
            if (s == MAP_FAILED) { report("internal", "cannot map a fiber's stack"); }
            fibers[i].stack = (char *)s;
        }
    }
    uint64_t blocks = (uint64_t)l.grid.x * l.grid.y * l.grid.z;
    std::vector<uint32_t> order(blocks);
    for (uint64_t i = 0; i < blocks; i++) { order[i] = (uint32_t)i; }
    for (uint64_t i = blocks - 1; i > 0; i--) { std::swap(order[i], order[random_below(i + 1)]); }
    Context saved = ctx;
    ctx.actor = ACTOR_KERNEL;
    ctx.op = op;
    ctx.clock = clock;
    ctx.what = named->second.c_str();
    ctx.kernel = l.kernel;
    ctx.launch_gen = ++gen_counter;
    ctx.block_order = order.data();
    ctx.block_threads = block_threads;
    emu_grid_dim = l.grid;
    emu_block_dim = l.block;
    body = l.invoke;
    body_params = l.params;
    for (uint64_t seq = 0; seq < blocks; seq++) {
        uint32_t b = order[seq];
        emu_block_idx = dim3(b % l.grid.x, b / l.grid.x % l.grid.y, (uint32_t)(b / ((uint64_t)l.grid.x * l.grid.y)));
        ctx.block_seq = (uint32_t)seq;
        ctx.block_gen = ++gen_counter;
        shared_begin_block(l.shared);
        run_block();
    }
    ctx = saved;
}

} // namespace emu

// ---- what the kernels call (cuda_emu.h)

using namespace emu;

void emu_syncthreads() { syncthreads_at(__builtin_return_address(0)); }

void emu_syncwarp(unsigned mask) { warp_collective("__syncwarp", mask, nullptr, 0, nullptr, __builtin_return_address(0)); }

void emu_warp_collective(const char *what, unsigned mask, const void *mine, size_t bytes, void *all) {
    warp_collective(what, mask, mine, bytes, all, __builtin_return_address(0));
}

void emu_shuffle_source_check(unsigned mask, int src) {
    if (!(mask >> (src & 31) & 1u)) {
        report("synccheck", format("a shuffle in %s: %s reads lane %d, which its mask 0x%08x does not name (the value "
                                   "is undefined), at %s", here().c_str(), thread_name(current->thread).c_str(), src,
                                   mask, source_of(__builtin_return_address(0)).c_str()));
    }
}

int emu_lane() { return (int)(current->thread % 32); }

void *emu_dynamic_shared() { return shared_dynamic(); }

void *emu_static_shared_alloc(const char *file, int line, size_t bytes, size_t align) {
    return shared_static(file, line, bytes, align);
}

void emu_launch_bounds_check(unsigned max_threads) {
    if (block_threads > max_threads) {
        report("launch", format("%s is launched with %u threads per block, over its __launch_bounds__(%u): on the GPU "
                                "the launch fails (too many resources requested)", here().c_str(), block_threads,
                                max_threads));
    }
}
