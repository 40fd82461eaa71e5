/*
The seed, and what the emulator says when it finds something.

Every order the emulator chooses (which thread of a block runs next, the order of
the blocks of a grid, which stream's next operation runs) is drawn from one seed:
EMU_SEED if set, else one drawn from the clock and printed at start-up. Each rank of
an MPI job draws from seed + its rank. Running again with EMU_SEED replays the same
choices (a multi-rank run also depends on when messages arrive, which the seed does
not fix).

A report is one finding of a check: "EMU <check>: <what>", with the source lines of
the accesses or calls involved (addr2line over the executable's debug
information, through inlined calls), then the seed, and the process ends with exit
status 66 (an MPI job ends with it).
*/
#include <dlfcn.h>
#include <mpi.h>
#include <unistd.h>
#include <cstdarg>
#include <ctime>
#include <map>
#include "emu_internal.h"

namespace emu {

// ---- code addresses and their source lines

uintptr_t code_base;

static uintptr_t exe_base() {
    if (code_base == 0) {
        Dl_info info;
        if (dladdr((void *)&exe_base, &info) == 0) { report("internal", "dladdr finds no executable"); }
        code_base = (uintptr_t)info.dli_fbase;
    }
    return code_base;
}


static uint64_t base_seed, state;
static int rank_in_job;

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void seed_init() {
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    rank_in_job = rank ? atoi(rank) : 0;
    const char *env = getenv("EMU_SEED");
    if (env != nullptr) {
        char *end;
        base_seed = strtoull(env, &end, 10);
        if (end == env || *end != '\0') {
            fprintf(stderr, "EMU_SEED='%s': expected a decimal number\n", env);
            _exit(2);
        }
    } else {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        uint64_t s = (uint64_t)t.tv_nsec ^ (uint64_t)t.tv_sec << 20 ^ (uint64_t)getppid() << 40;
        base_seed = splitmix64(&s) % 1000000007ull;
        // every rank of a job must draw the same base: take it from mpirun's pid and
        // start time where there is a job (the ranks' parent), else from the clock
        if (getenv("OMPI_COMM_WORLD_SIZE") != nullptr) {
            uint64_t job = (uint64_t)getppid();
            base_seed = splitmix64(&job) % 1000000007ull;
        }
    }
    state = base_seed + 1000003ull * (uint64_t)rank_in_job;
    exe_base();
    if (rank_in_job == 0) {
        fprintf(stderr, "EMU seed %llu (EMU_SEED=%llu replays this run's choices)\n", (unsigned long long)base_seed,
                (unsigned long long)base_seed);
    }
}

uint64_t seed() { return base_seed; }

uint64_t random_below(uint64_t n) { return n <= 1 ? 0 : splitmix64(&state) % n; }

std::string format(const char *fmt, ...) {
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return buf;
}

// the paths of the emulated sources are build/emu/src/...: keep what follows src/
static std::string short_path(const std::string &path) {
    size_t at = path.rfind("/src/");
    return at == std::string::npos ? path : path.substr(at + 5);
}

// addr2line's function and file:line pairs for one address, innermost first
static std::string symbolize(const void *pc, bool function_only) {
    static std::map<std::pair<const void *, bool>, std::string> cache;
    auto key = std::make_pair(pc, function_only);
    auto found = cache.find(key);
    if (found != cache.end()) { return found->second; }
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0) { return format("%p", pc); }
    exe[n] = '\0';
    // a return address points past its call: the call's line is one byte before
    uintptr_t at = (uintptr_t)pc - exe_base() - (function_only ? 0 : 1);
    std::string command = format("addr2line -f -i -C -e '%s' 0x%lx 2>/dev/null", exe, (unsigned long)at);
    FILE *p = popen(command.c_str(), "r");
    std::string out;
    if (p != nullptr) {
        char fn[4096], line[4096];
        while (fgets(fn, sizeof(fn), p) && fgets(line, sizeof(line), p)) {
            fn[strcspn(fn, "\n")] = '\0';
            line[strcspn(line, "\n")] = '\0';
            std::string l = short_path(line);
            size_t disc = l.find(" (discriminator");
            if (disc != std::string::npos) { l = l.substr(0, disc); }
            if (function_only) { out = fn; break; }
            if (!out.empty()) { out += " <- "; }
            out += l + " (" + fn + ")";
        }
        pclose(p);
    }
    if (out.empty()) { out = format("%p", pc); }
    cache[key] = out;
    return out;
}

std::string source_of(const void *pc) { return symbolize(pc, false); }

std::string kernel_name(const void *kernel) {
    std::string name = symbolize(kernel, true);
    // "void attend_forward_kernel<(MmaPrecision)1, 64>(AttnBlockArgs)" -> without the return type
    if (name.compare(0, 5, "void ") == 0) { name = name.substr(5); }
    return name;
}

void report(const char *check, const std::string &text) {
    fflush(stdout);
    fprintf(stderr, "EMU %s: %s\n    (rank %d, EMU_SEED=%llu replays this run's choices)\n", check, text.c_str(),
            rank_in_job, (unsigned long long)base_seed);
    fflush(stderr);
    int initialised = 0, finalised = 0;
    PMPI_Initialized(&initialised);
    PMPI_Finalized(&finalised);
    if (initialised && !finalised) { PMPI_Abort(MPI_COMM_WORLD, 66); }
    _exit(66);
}

} // namespace emu
