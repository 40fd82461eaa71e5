/*
What the emulator's runtime files share; the code under test never sees it (it
sees cuda_emu.h). The runtime is compiled without the thread sanitizer's
instrumentation, so nothing here is checked by the hooks it implements.

    emu_report.cpp    the seed and its random draws, reports, source lines of a pc
    emu_memory.cpp    the arena (shared, pinned, device), allocations, the shadow
                      words and every check made on an access
    emu_threads.cpp   fibers, blocks, barriers, warp collectives, launches
    emu_streams.cpp   streams, events, deferred operations, vector clocks, the
                      runtime API
    emu_mma.cpp       the tensor-core instructions and ldmatrix
    emu_async_copy.cpp  cp.async: copies in flight per thread until their wait_group
    emu_blas.cpp      cuBLAS and cuBLASLt
    emu_nccl.cpp      NCCL over MPI
    emu_mpi.cpp       MPI calls that wait also move the device along
*/
#pragma once
#include <string>
#include "cuda_emu.h"

// The runtime's global objects are built before its start-up (emu_streams.cpp, at
// priority 102), which runs before any of the program's own constructors.
#define EMU_EARLY __attribute__((init_priority(101)))

namespace emu {

// ---- emu_report.cpp
// The seed of this process (EMU_SEED, else drawn and printed) and draws from it.
void seed_init();
uint64_t seed();
uint64_t random_below(uint64_t n); // uniform in [0, n)
std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// "file:line (function)", innermost first, joined with " <- " through inlined calls
std::string source_of(const void *pc);
// the pc as a 32-bit offset into the executable, and back (shadow words keep these)
extern uintptr_t code_base;
inline uint32_t code_offset(const void *pc) { return (uint32_t)((uintptr_t)pc - code_base); }
inline const void *code_address(uint32_t offset) { return (const void *)(code_base + offset); }
// One finding: prints "EMU <check>: <text>" and the seed, then ends the process
// (exit 66), which ends an MPI job.
[[noreturn]] void report(const char *check, const std::string &text);
// the name of a kernel from its function pointer
std::string kernel_name(const void *kernel);

// ---- what is running: the host, an operation of a stream (the runtime's own
// code), a kernel's thread, or MPI called by the host (its copies are its own)
enum Actor { ACTOR_HOST, ACTOR_OPERATION, ACTOR_KERNEL, ACTOR_MPI };
const int MAX_STREAMS = 32;            // vector clock components; 0 is the host
typedef uint32_t OpId;                 // stream << 27 | sequence number in it
inline int op_stream(OpId id) { return (int)(id >> 27); }
inline uint32_t op_seq(OpId id) { return id & ((1u << 27) - 1); }
inline OpId op_id(int stream, uint32_t seq) { return (uint32_t)stream << 27 | seq; }
struct VectorClock { uint32_t c[MAX_STREAMS]; };
// whether the operation (or host step) `id` happens before whatever has clock `vc`
inline bool happens_before(OpId id, const VectorClock &vc) { return vc.c[op_stream(id)] >= op_seq(id); }

// A kernel thread's ordering state: the block's count of completed barriers and
// warp synchronisations (S), and when each last ordered memory.
struct BlockSync {
    uint32_t count;              // S: completions so far in the block
    uint32_t barrier;            // S at the last __syncthreads; accesses before it are ordered
    uint32_t warp[32];           // S at each warp's last full __syncwarp
    uint32_t pair[32][32][32];   // [warp][lane a][lane b]: S at their last partial __syncwarp together
};

struct Context {
    Actor actor;
    OpId op;                     // the operation running (ACTOR_OPERATION, ACTOR_KERNEL) or the host's step
    const VectorClock *clock;    // its vector clock
    const char *what;            // what the operation is, for reports
    // ACTOR_KERNEL
    const void *kernel;
    uint32_t launch_gen, block_gen; // of the launch and of the running block (shadow generations)
    uint32_t block_seq;          // the block's place in the launch's order
    uint32_t block_threads;
    const uint32_t *block_order; // block seq -> linear block index
    uint32_t thread;             // the thread's linear index in its block
    const BlockSync *sync;
    // non-null while the access checked is a cp.async's read of its source, which
    // lasts until the cp.async.wait_group at this address (a race's report says so)
    const void *copy_read_until;
};
extern Context ctx;

// ---- emu_memory.cpp
void memory_init();
// copies that no check sees (memcpy and memset of the process are checked)
void raw_copy(void *dst, const void *src, size_t n);
void raw_set(void *dst, int c, size_t n);
void *device_alloc(size_t bytes, const void *site);
bool device_free(void *p);       // false: not a live device allocation
void *pinned_alloc(size_t bytes, const void *site);
bool pinned_free(void *p, const void *site); // checks that every use happened before
bool is_device(const void *p, size_t bytes);  // inside the device part of the arena
bool is_pinned(const void *p, size_t bytes);
size_t device_free_bytes();
// the running block's shared memory: fresh (NaN, unwritten) for each block
void shared_begin_block(size_t dynamic_bytes);
void *shared_dynamic();
void *shared_static(const char *file, int line, size_t bytes, size_t align);
// An operation's access to [p, p + bytes) (copies, cuBLAS, NCCL), checked and
// recorded word by word against the other operations and the host.
void access_range(const void *p, size_t bytes, bool write, const char *what);
// the host's access to pinned memory through a library (MPI), checked as the host's
void host_range(const void *p, size_t bytes, bool write, const char *what);
// a copy carries what was initialised along with the bytes
void copy_initialised(void *dst, const void *src, size_t bytes);
void mark_initialised(void *dst, size_t bytes);
// One access of the running kernel thread (the instrumentation's hooks, and the
// emulated instructions that read shared memory), at code address pc.
void kernel_access(const void *p, size_t bytes, bool write, const void *pc);
// whether [p, p + bytes) lies in the shared-memory part of the arena
bool is_shared(const void *p, size_t bytes);
// Marks (or clears) [p, p + bytes) of shared memory as the destination of a cp.async
// in flight: any access to it is a hazard (async_copy_hazard). The words must have been
// accessed (kernel_access) by the running block first.
void shared_in_flight(const void *p, size_t bytes, bool in_flight);
// "kernel K, thread (x,y,z) of block (x,y,z)": the running kernel thread, for reports
std::string running_thread();
// "(x,y,z)": thread t of the running block
std::string thread_coords(uint32_t t);

// ---- emu_async_copy.cpp
// The running thread accessed byte p, at shared offset `offset`, of a cp.async
// destination in flight: reports it, with the copy's thread and line.
[[noreturn]] void async_copy_hazard(const void *p, uintptr_t offset, bool write, const void *pc);
// The running thread exits: a copy of its own still in flight is a report.
void async_copy_thread_exit();

// ---- emu_threads.cpp
void launch_run(const EmuLaunch &launch, OpId op, const VectorClock *clock); // every block of the grid
// the launch's checks against the chip's limits: "" when it may run, else why not
std::string launch_refusal(const EmuLaunch &launch);
void func_attribute(const void *kernel, int max_dynamic_shared);
// A warp collective of the running thread, called at `site` in the kernel: every lane
// of `mask` hands in `bytes` (<= 64); `all` gets lane l's at all + l * bytes.
void warp_collective(const char *what, unsigned mask, const void *mine, size_t bytes, void *all, const void *site);
// The same, but once every lane has arrived, compute (called once) turns the 32
// payloads (all + l * bytes) into the 32 results (results + l * result_bytes, at
// most 64 bytes each), and each lane gets its own in `result`.
typedef void (*WarpCompute)(const unsigned char *all, unsigned char *results);
void warp_compute(const char *what, unsigned mask, const void *mine, size_t bytes, void *result, size_t result_bytes,
                  WarpCompute compute, const void *site);

// ---- emu_streams.cpp
// The device moves on: up to `budget` operations that may run now, drawn from the
// streams in the seed's order (0: none). Returns whether any ran or progressed.
bool device_progress(int budget);
bool device_idle();
// the host's vector clock and step, for checks of host accesses
const VectorClock &host_clock();
OpId host_step();
void host_synchronised_with(const VectorClock &vc);
// enqueue an operation: `run` executes it on the device (it may return false while
// it has not finished: an NCCL exchange in flight; it is called again later)
struct Operation;
typedef bool (*OperationRun)(Operation *op);
struct Operation {
    OpId id;
    VectorClock clock;       // what happens before it
    std::string what;        // for reports: "kernel foo", "cudaMemcpyAsync", ...
    const void *site;        // host code that enqueued it
    OperationRun run;
    void (*free_state)(void *state);
    void *state;
    bool started;
};
Operation *enqueue(cudaStream_t stream, const std::string &what, const void *site, OperationRun run, void *state,
                   void (*free_state)(void *));
int stream_index(cudaStream_t stream);
std::string describe_op(OpId id); // "kernel foo (stream 2, enqueued at file:line)"
void set_last_error(cudaError_t err);

} // namespace emu
