/*
Streams, events and the runtime API: work is deferred, as on a GPU.

Every call that puts work on a stream (a launch, a copy, a memset, an event record,
a wait on an event, cuBLAS, NCCL) appends an operation to the stream's queue and
returns. The device runs operations when the host gives it the chance: a few at
every runtime call (how many is drawn from the seed), all it must at a
synchronisation (cudaStreamSynchronize, cudaEventSynchronize, a copy into
pageable memory, cudaFree), and while the host waits in MPI (emu_mpi.cpp). Each
time, the next operation comes from a stream drawn at random among those whose
first operation may run; a wait on an event blocks its stream until the event's
operation has run. So the device may run far behind the host, and two streams'
work interleaves differently from seed to seed, within what stream order, events
and synchronisations allow.

Happens-before is tracked with vector clocks (component 0 is the host, then one
per stream): an operation's clock joins its stream's clock and the host's at the
time it was enqueued; a wait on an event joins the event's clock into the waiting
stream's; a synchronisation joins what the host waited for into the host's. The
memory checks (emu_memory.cpp) hold every access against these clocks, so a
missing event between two streams is reported whether or not this run's order
happened to expose it.
*/
#include <sched.h>
#include <time.h>
#include <unistd.h>
#include <deque>
#include <set>
#include <vector>
#include "emu_internal.h"

struct EmuStream {
    int index;                       // its vector clock component
    std::deque<emu::Operation *> queue;
    emu::VectorClock clock;          // what its next operation comes after
    uint32_t last;                   // sequence number of its last operation
};
struct EmuEvent {
    bool recorded;
    bool timing;                     // not cudaEventDisableTiming
    emu::OpId op;                    // the record's operation
    emu::VectorClock clock;
    double seconds;                  // when the device ran the record (timing events)
};

int emu_mutation;

namespace emu {

static VectorClock host_vc;
static EmuStream *streams[MAX_STREAMS];  // by index, null where free
static uint32_t next_seq[MAX_STREAMS];   // sequence numbers continue when an index is reused
static uint32_t done_seq[MAX_STREAMS];   // operations of each index done, in order
static EmuStream default_stream EMU_EARLY;
struct OpInfo { const char *what; const void *site; };
static std::vector<OpInfo> infos[MAX_STREAMS] EMU_EARLY; // [index][seq - 1]
static std::set<std::string> names EMU_EARLY;      // interned descriptions
static cudaError_t last_error = cudaSuccess;
static bool running;                     // an operation runs: nothing may re-enter the device

__attribute__((constructor(102))) static void emu_init() {
    const char *mutate = getenv("EMU_MUTATE");
    emu_mutation = mutate ? atoi(mutate) : 0;
    seed_init();
    memory_init();
    default_stream.index = 1;
    streams[1] = &default_stream;
    memset(&host_vc, 0, sizeof(host_vc));
    ctx.actor = ACTOR_HOST;
}

const VectorClock &host_clock() { return host_vc; }
OpId host_step() { return op_id(0, host_vc.c[0]); }

static void join(VectorClock &into, const VectorClock &from) {
    for (int i = 0; i < MAX_STREAMS; i++) { into.c[i] = into.c[i] > from.c[i] ? into.c[i] : from.c[i]; }
}

void host_synchronised_with(const VectorClock &vc) { join(host_vc, vc); }

static void host_advance() { host_vc.c[0]++; }

static EmuStream *stream_of(cudaStream_t s) { return s ? s : &default_stream; }
int stream_index(cudaStream_t s) { return stream_of(s)->index; }

static bool op_done(OpId id) { return done_seq[op_stream(id)] >= op_seq(id); }

std::string describe_op(OpId id) {
    int s = op_stream(id);
    uint32_t seq = op_seq(id);
    if (seq == 0 || seq > infos[s].size()) { return format("an operation of stream %d", s); }
    const OpInfo &info = infos[s][seq - 1];
    return format("%s (stream %d, operation %u, enqueued at %s)", info.what, s, seq, source_of(info.site).c_str());
}

void set_last_error(cudaError_t err) { last_error = err; }

Operation *enqueue(cudaStream_t stream, const std::string &what, const void *site, OperationRun run, void *state,
                   void (*free_state)(void *)) {
    EmuStream *s = stream_of(stream);
    Operation *op = new Operation;
    uint32_t seq = ++next_seq[s->index];
    op->id = op_id(s->index, seq);
    op->clock = s->clock;
    join(op->clock, host_vc);
    op->clock.c[s->index] = seq;
    s->clock = op->clock;
    // what the host does from here on does not happen before the operation
    host_advance();
    s->last = seq;
    op->what = what;
    op->site = site;
    op->run = run;
    op->state = state;
    op->free_state = free_state;
    op->started = false;
    const char *name = names.insert(what).first->c_str();
    infos[s->index].resize(seq);
    infos[s->index][seq - 1] = OpInfo{name, site};
    s->queue.push_back(op);
    return op;
}

// whether a stream's first operation may start: a wait on an event only once the
// event's operation has run
static bool may_start(const Operation *op);

static void finish(EmuStream *s, Operation *op) {
    s->queue.pop_front();
    done_seq[s->index] = op_seq(op->id);
    if (op->free_state) { op->free_state(op->state); }
    delete op;
}

bool device_progress(int budget) {
    if (running) { return false; }
    bool progressed = false;
    for (int n = 0; n < budget; n++) {
        int candidates[MAX_STREAMS], k = 0;
        for (int i = 1; i < MAX_STREAMS; i++) {
            if (streams[i] && !streams[i]->queue.empty() && may_start(streams[i]->queue.front())) { candidates[k++] = i; }
        }
        if (k == 0) { break; }
        EmuStream *s = streams[candidates[random_below(k)]];
        Operation *op = s->queue.front();
        Context saved = ctx;
        ctx.actor = ACTOR_OPERATION;
        ctx.op = op->id;
        ctx.clock = &op->clock;
        ctx.what = op->what.c_str();
        running = true;
        bool first = !op->started;
        op->started = true;
        bool done = op->run(op);
        running = false;
        ctx = saved;
        if (done) { finish(s, op); progressed = true; } else { progressed |= first; }
    }
    return progressed;
}

bool device_idle() {
    for (int i = 1; i < MAX_STREAMS; i++) {
        if (streams[i] && !streams[i]->queue.empty()) { return false; }
    }
    return true;
}

// the host gives the device a few steps at a runtime call
static void device_chance() { device_progress((int)random_below(3)); }

// Runs the device until `done` holds; while nothing can move (an NCCL exchange
// waits for a peer) it lets the other processes run.
template <typename F> static void device_until(F done) {
    int idle = 0;
    while (!done()) {
        if (device_progress(1)) { idle = 0; continue; }
        if (++idle > 100) { usleep(200); } else { sched_yield(); }
    }
}

// ---- operations

struct WaitState { OpId target; };
static bool run_nothing(Operation *) { return true; }
// a timing event's record notes when the device got to it (unless recorded again since)
struct RecordState { EmuEvent *event; };
static bool run_record(Operation *op) {
    EmuEvent *e = ((RecordState *)op->state)->event;
    if (e->op == op->id) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        e->seconds = (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
    }
    return true;
}
static bool may_start(const Operation *op) {
    if (op->run != run_nothing || op->state == nullptr) { return true; }
    return op_done(((const WaitState *)op->state)->target);
}
static void free_wait(void *p) { delete (WaitState *)p; }

struct CopyState {
    char *dst;
    const char *src;
    size_t dpitch, spitch, width, rows;
    std::vector<char> staged; // a pageable source, taken at the call as the GPU's runtime does
    int value;                // memset
    bool is_memset;
};
static void free_copy(void *p) { delete (CopyState *)p; }
static bool run_copy(Operation *op) {
    CopyState *c = (CopyState *)op->state;
    for (size_t r = 0; r < c->rows; r++) {
        char *d = c->dst + r * c->dpitch;
        if (c->is_memset) {
            access_range(d, c->width, true, op->what.c_str());
            raw_set(d, c->value, c->width);
            mark_initialised(d, c->width);
            continue;
        }
        const char *from = c->staged.empty() ? c->src + r * c->spitch : c->staged.data() + r * c->width;
        if (c->staged.empty()) { access_range(from, c->width, false, op->what.c_str()); }
        access_range(d, c->width, true, op->what.c_str());
        if (c->staged.empty()) { copy_initialised(d, from, c->width); } else { mark_initialised(d, c->width); }
        raw_copy(d, from, c->width);
    }
    return true;
}

struct KernelState { EmuLaunch launch; };
static void free_kernel(void *p) {
    KernelState *k = (KernelState *)p;
    k->launch.destroy(k->launch.params);
    delete k;
}
static bool run_kernel(Operation *op) {
    launch_run(((KernelState *)op->state)->launch, op->id, &op->clock);
    return true;
}

} // namespace emu

// ---- the runtime API

using namespace emu;

static const char *error_name(cudaError_t err) {
    switch (err) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorDevicesUnavailable: return "cudaErrorDevicesUnavailable";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    }
    return "cudaErrorUnknown";
}
const char *cudaGetErrorName(cudaError_t err) { return error_name(err); }
const char *cudaGetErrorString(cudaError_t err) {
    switch (err) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorDevicesUnavailable: return "CUDA-capable device(s) is/are busy or unavailable";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    }
    return "unknown error";
}

cudaError_t cudaGetLastError() {
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

// EMU_DEVICES: how many devices the emulation has (default 1; 0: cudaErrorNoDevice);
// EMU_DEVICE_ERROR: the error cudaGetDeviceCount returns instead (a number, e.g. 46:
// the devices are busy or unavailable)
cudaError_t cudaGetDeviceCount(int *count) {
    const char *err = getenv("EMU_DEVICE_ERROR");
    if (err != nullptr && atoi(err) != 0) {
        *count = 0;
        last_error = atoi(err);
        return atoi(err);
    }
    const char *n = getenv("EMU_DEVICES");
    *count = n ? atoi(n) : 1;
    return *count > 0 ? cudaSuccess : cudaErrorNoDevice;
}

cudaError_t cudaSetDevice(int device) {
    int count;
    cudaGetDeviceCount(&count);
    return device >= 0 && device < count ? cudaSuccess : cudaErrorInvalidValue;
}

// an H100's or H200's (SXM): 132 multiprocessors
cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int device) {
    int count;
    cudaGetDeviceCount(&count);
    if (attr != cudaDevAttrMultiProcessorCount || device < 0 || device >= count) { return cudaErrorInvalidValue; }
    *value = 132;
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned) {
    host_advance();
    for (int i = 2; i < MAX_STREAMS; i++) {
        if (streams[i] == nullptr) {
            EmuStream *s = new EmuStream;
            s->index = i;
            s->clock = host_vc;
            s->clock.c[i] = next_seq[i];
            s->last = next_seq[i];
            streams[i] = s;
            *stream = s;
            return cudaSuccess;
        }
    }
    report("api", format("cudaStreamCreateWithFlags: more than %d streams live at once", MAX_STREAMS - 2));
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    if (stream == nullptr || streams[stream->index] != stream) { return cudaErrorInvalidResourceHandle; }
    host_advance();
    // the GPU finishes the stream's work after the call returns; here it runs now
    device_until([&] { return stream->queue.empty(); });
    streams[stream->index] = nullptr;
    delete stream;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    EmuStream *s = stream_of(stream);
    host_advance();
    uint32_t target = s->last;
    VectorClock vc = s->clock;
    int index = s->index;
    device_until([&] { return done_seq[index] >= target; });
    host_synchronised_with(vc);
    return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
    EmuStream *s = stream_of(stream);
    host_advance();
    device_chance();
    if (done_seq[s->index] < s->last) { return cudaErrorNotReady; }
    host_synchronised_with(s->clock);
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
    host_advance();
    device_until(device_idle);
    for (int i = 1; i < MAX_STREAMS; i++) {
        if (streams[i]) { host_synchronised_with(streams[i]->clock); }
    }
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
    if (event == nullptr) { return cudaErrorInvalidResourceHandle; }
    if (!event->recorded) { return cudaSuccess; } // nothing to wait for, as CUDA has it
    EmuStream *s = stream_of(stream);
    join(s->clock, event->clock);
    enqueue(stream, "cudaStreamWaitEvent", __builtin_return_address(0), run_nothing, new WaitState{event->op}, free_wait);
    device_chance();
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned flags) {
    *event = new EmuEvent;
    (*event)->recorded = false;
    (*event)->timing = !(flags & cudaEventDisableTiming);
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event) { return cudaEventCreateWithFlags(event, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
    if (event == nullptr) { return cudaErrorInvalidResourceHandle; }
    // the GPU frees it once its record has run; here the record runs first
    if (event->recorded) {
        OpId target = event->op;
        device_until([&] { return op_done(target); });
    }
    delete event;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    if (event == nullptr) { return cudaErrorInvalidResourceHandle; }
    Operation *op = enqueue(stream, "cudaEventRecord", __builtin_return_address(0), run_record, new RecordState{event},
                            [](void *p) { delete (RecordState *)p; });
    event->recorded = true;
    event->op = op->id;
    event->clock = op->clock;
    device_chance();
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
    host_advance();
    if (!event->recorded) { return cudaSuccess; }
    device_chance();
    if (!op_done(event->op)) { return cudaErrorNotReady; }
    host_synchronised_with(event->clock);
    return cudaSuccess;
}

// the milliseconds between two timing events' records, once both have run
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    if (start == nullptr || end == nullptr || !start->timing || !end->timing) { return cudaErrorInvalidResourceHandle; }
    if (!start->recorded || !end->recorded) { return cudaErrorInvalidResourceHandle; }
    if (!op_done(start->op) || !op_done(end->op)) { return cudaErrorNotReady; }
    *ms = (float)((end->seconds - start->seconds) * 1e3);
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    host_advance();
    if (!event->recorded) { return cudaSuccess; }
    OpId target = event->op;
    device_until([&] { return op_done(target); });
    host_synchronised_with(event->clock);
    return cudaSuccess;
}

// ---- memory

// cudaMalloc (device memory) and cudaMallocHost (pinned host memory), called at site
static cudaError_t emu_alloc(void **ptr, size_t bytes, bool pinned, const void *site) {
    host_advance();
    *ptr = pinned ? pinned_alloc(bytes, site) : device_alloc(bytes, site);
    return *ptr ? cudaSuccess : cudaErrorMemoryAllocation;
}

// cudaFree and cudaFreeHost, called at site. cudaFree waits for the device, as on the
// GPU; cudaFreeHost is not a synchronisation: CUDA promises none (emu_memory.cpp
// checks that what used the memory happened before).
static cudaError_t emu_free(void *ptr, bool pinned, const void *site) {
    if (ptr == nullptr) { return cudaSuccess; }
    if (pinned) {
        host_advance();
    } else {
        cudaDeviceSynchronize();
    }
    if (!(pinned ? pinned_free(ptr, site) : device_free(ptr))) {
        report("memcheck", format("%s(%p) at %s: not a live %s allocation", pinned ? "cudaFreeHost" : "cudaFree", ptr,
                                  source_of(site).c_str(), pinned ? "cudaMallocHost" : "cudaMalloc"));
    }
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **ptr, size_t bytes) { return emu_alloc(ptr, bytes, false, __builtin_return_address(0)); }
cudaError_t cudaFree(void *ptr) { return emu_free(ptr, false, __builtin_return_address(0)); }
cudaError_t cudaMallocHost(void **ptr, size_t bytes) { return emu_alloc(ptr, bytes, true, __builtin_return_address(0)); }
cudaError_t cudaFreeHost(void *ptr) { return emu_free(ptr, true, __builtin_return_address(0)); }

// the emulated device's memory is the host's: the less of its free pages and the arena's room
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t host_free = (size_t)sysconf(_SC_AVPHYS_PAGES) * page, host_total = (size_t)sysconf(_SC_PHYS_PAGES) * page;
    size_t room = device_free_bytes();
    *free_bytes = host_free < room ? host_free : room;
    *total_bytes = host_total;
    return cudaSuccess;
}

// Checks that the pointers lie where the copy's kind says, and enqueues it; a copy
// into pageable host memory returns once it is done, as on the GPU.
static cudaError_t copy(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t rows,
                        cudaMemcpyKind kind, cudaStream_t stream, const char *name, const void *site) {
    size_t dspan = rows ? (rows - 1) * dpitch + width : 0, sspan = rows ? (rows - 1) * spitch + width : 0;
    bool dst_device = is_device(dst, dspan), src_device = is_device(src, sspan);
    bool want_dst = kind != cudaMemcpyDeviceToHost, want_src = kind != cudaMemcpyHostToDevice;
    if (dst_device != want_dst || src_device != want_src) {
        report("api", format("%s at %s: a %s copy from %s to %s memory", name, source_of(site).c_str(),
                             kind == cudaMemcpyHostToDevice   ? "cudaMemcpyHostToDevice"
                             : kind == cudaMemcpyDeviceToHost ? "cudaMemcpyDeviceToHost"
                                                              : "cudaMemcpyDeviceToDevice",
                             src_device ? "device" : "host", dst_device ? "device" : "host"));
    }
    CopyState *c = new CopyState;
    c->dst = (char *)dst;
    c->src = (const char *)src;
    c->dpitch = dpitch; c->spitch = spitch; c->width = width; c->rows = rows;
    c->value = 0;
    c->is_memset = false;
    if (kind == cudaMemcpyHostToDevice && !is_pinned(src, sspan)) {
        c->staged.resize(width * rows);
        for (size_t r = 0; r < rows; r++) { memcpy(c->staged.data() + r * width, (const char *)src + r * spitch, width); }
    }
    Operation *op = enqueue(stream, name, site, run_copy, c, free_copy);
    if (kind == cudaMemcpyDeviceToHost && !is_pinned(dst, dspan)) {
        OpId id = op->id;
        VectorClock vc = op->clock;
        device_until([&] { return op_done(id); });
        host_synchronised_with(vc);
    } else {
        device_chance();
    }
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
    return copy(dst, bytes, src, bytes, bytes, 1, kind, stream, "cudaMemcpyAsync", __builtin_return_address(0));
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t stream) {
    if (width > dpitch || width > spitch) { return cudaErrorInvalidValue; }
    return copy(dst, dpitch, src, spitch, width, height, kind, stream, "cudaMemcpy2DAsync",
                __builtin_return_address(0));
}

cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t stream) {
    if (!is_device(dst, bytes)) {
        report("api", format("cudaMemsetAsync at %s: %p is not device memory",
                             source_of(__builtin_return_address(0)).c_str(), dst));
    }
    CopyState *c = new CopyState;
    c->dst = (char *)dst;
    c->src = nullptr;
    c->dpitch = c->spitch = c->width = bytes;
    c->rows = 1;
    c->value = value;
    c->is_memset = true;
    enqueue(stream, "cudaMemsetAsync", __builtin_return_address(0), run_copy, c, free_copy);
    device_chance();
    return cudaSuccess;
}

// ---- launches

void emu_launch(const EmuLaunch &l) {
    std::string refusal = launch_refusal(l);
    if (!refusal.empty()) {
        fprintf(stderr, "EMU launch: kernel %s at %s: %s\n", kernel_name(l.kernel).c_str(), source_of(l.site).c_str(),
                refusal.c_str());
        l.destroy(l.params);
        last_error = refusal.find("shared memory") != std::string::npos ? cudaErrorInvalidValue
                                                                        : cudaErrorInvalidConfiguration;
        return;
    }
    KernelState *k = new KernelState{l};
    enqueue(l.stream, "kernel " + kernel_name(l.kernel), l.site, run_kernel, k, free_kernel);
    device_chance();
}

cudaError_t emu_func_set_attribute(const void *kernel, cudaFuncAttribute attr, int value) {
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || value > (227 << 10)) {
        fprintf(stderr, "EMU launch: cudaFuncSetAttribute(%s, %d, %d): sm_90 allows at most 227 KiB (232448 bytes) of "
                        "dynamic shared memory\n", kernel_name(kernel).c_str(), (int)attr, value);
        return cudaErrorInvalidValue;
    }
    func_attribute(kernel, value);
    return cudaSuccess;
}
