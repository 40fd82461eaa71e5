/*
cp.async (llmc/async_copy.cuh): copies from global to shared memory that a thread
issues and that land when the same thread waits for their group, as the PTX ISA
describes them ("Data Movement and Conversion Instructions: cp.async").

  issue         cp.async of `bytes` (4, 8 or 16): the first src_bytes come from src,
                the rest of the destination is zeros; src_bytes 0 reads nothing (no
                check of src but its alignment: a row past a sequence's end may
                point anywhere). Checked: the destination in shared memory, the
                source in device memory, both aligned to `bytes` (memcheck),
                0 <= src_bytes <= bytes (the PTX ISA leaves more undefined); the
                source's bytes read and kept (memcheck, initcheck, racecheck); the
                destination checked as written now (racecheck against the accesses
                before the issue that nothing orders), then marked in flight
  in flight     until the issuing thread's wait lands it, any access to the
                destination, of any thread, the issuer's own and another cp.async's
                included, is a racecheck report naming the access's line and the
                cp.async's
  commit_group  the thread's copies since its last commit form a group (an empty
                group too, as in the PTX ISA)
  wait_group N  every committed group but the N most recent lands, oldest first;
                copies not yet committed stay in flight (wait_group waits for
                committed groups only). Landing, the source is read again, the kept
                bytes written to the destination as the issuing thread's write at
                this point of the block: the issuer reads them at once, the other
                threads after a __syncthreads that follows (racecheck)
  exit          a thread that exits with a copy in flight, committed or not, is a
                synccheck report. The PTX ISA says nothing of such a copy; no thread
                could ever read its data in order (that takes the issuer's wait),
                so it is a missing wait, or a copy for nothing.

The source is read at both ends of the copy, as the hardware may read it at any time
between. Read at the issue alone, a write to it after a __syncthreads that comes
between issue and wait would pass, though the copy may still be reading; read at the
wait alone, an uninitialised or out-of-bounds source would be reported at the wait,
far from the line at fault, and the issuer's own write to it in between (one thread:
no race) would go unseen. So the issue checks the read and keeps the bytes; the wait
checks it again (another thread's write in between that nothing orders before the
wait is a race) and compares the bytes (a change by the issuer is a report).
*/
#include <deque>
#include <vector>
#include "emu_internal.h"

using namespace emu;

namespace {

struct Copy {
    char *dst;
    const char *src;
    int bytes, src_bytes;
    const void *pc;            // where it was issued
    unsigned char data[16];    // what it writes: the source's bytes at the issue, then zeros
};

// the copies of one thread of the running block: issued since its last commit, and
// the committed groups not yet waited for, oldest first
struct ThreadCopies {
    std::vector<Copy> open;
    std::deque<std::vector<Copy>> groups;
};

// [thread of the running block]; every thread's are empty when it exits (or the
// process has ended with a report), so a new block finds them empty
std::vector<ThreadCopies> copies EMU_EARLY;

ThreadCopies &mine() {
    if (copies.empty()) { copies.resize(1024); } // the most threads a block has
    return copies[ctx.thread];
}

// a memcheck report on the cp.async the running thread issues at pc
[[noreturn]] void refuse(const void *pc, const std::string &why) {
    report("memcheck", format("%s, cp.async at %s: %s", running_thread().c_str(), source_of(pc).c_str(), why.c_str()));
}

// a copy of thread t in flight whose destination holds p, or null
const Copy *in_flight_at(uint32_t t, const char *p) {
    if (t >= copies.size()) { return nullptr; }
    auto holds = [p](const Copy &c) { return p >= c.dst && p < c.dst + c.bytes; };
    for (const Copy &c : copies[t].open) {
        if (holds(c)) { return &c; }
    }
    for (const auto &group : copies[t].groups) {
        for (const Copy &c : group) {
            if (holds(c)) { return &c; }
        }
    }
    return nullptr;
}

// the copy's data lands in shared memory, written by the running (issuing) thread
void land(const Copy &c, const void *wait_pc) {
    if (c.src_bytes) {
        ctx.copy_read_until = wait_pc;
        kernel_access(c.src, (size_t)c.src_bytes, false, c.pc);
        ctx.copy_read_until = nullptr;
        if (memcmp(c.src, c.data, (size_t)c.src_bytes) != 0) {
            report("racecheck", format("%s: the source of its cp.async issued at %s changed before the "
                                       "cp.async.wait_group at %s that lands it (the copy may read its source at "
                                       "any time until then)", running_thread().c_str(), source_of(c.pc).c_str(),
                                       source_of(wait_pc).c_str()));
        }
    }
    shared_in_flight(c.dst, (size_t)c.bytes, false);
    raw_copy(c.dst, c.data, (size_t)c.bytes);
    kernel_access(c.dst, (size_t)c.bytes, true, c.pc);
}

} // namespace

namespace emu {

void async_copy_hazard(const void *p, uintptr_t offset, bool write, const void *pc) {
    const Copy *c = nullptr;
    uint32_t issuer = 0;
    for (uint32_t t = 0; t < ctx.block_threads && c == nullptr; t++) {
        c = in_flight_at(t, (const char *)p);
        issuer = t;
    }
    if (c == nullptr) { report("internal", "shared memory marked as a cp.async destination that no copy holds"); }
    report("racecheck",
           format("%s %s shared memory at offset %zu at %s,\n    the destination of a cp.async that thread %s issued "
                  "at %s\n    and has not waited for: it lands at that thread's cp.async.wait_group covering its "
                  "committed group, and other threads see it after a __syncthreads that follows",
                  running_thread().c_str(), write ? "writes" : "reads", (size_t)offset, source_of(pc).c_str(),
                  thread_coords(issuer).c_str(), source_of(c->pc).c_str()));
}

void async_copy_thread_exit() {
    if (copies.empty()) { return; }
    ThreadCopies &tc = copies[ctx.thread];
    size_t committed = 0;
    const Copy *first = nullptr;
    for (const auto &group : tc.groups) {
        committed += group.size();
        if (!first && !group.empty()) { first = &group.front(); }
    }
    if (!first && !tc.open.empty()) { first = &tc.open.front(); }
    if (first) {
        report("synccheck", format("%s exits with cp.async copies in flight, %zu committed and %zu not (the first "
                                   "issued at %s): a copy lands only at its thread's cp.async.wait_group (after a "
                                   "commit_group), so no thread could read its data",
                                   running_thread().c_str(), committed, tc.open.size(), source_of(first->pc).c_str()));
    }
    tc.groups.clear(); // empty groups only
}

} // namespace emu

// ---- what the wrappers call (cuda_emu.h)

void emu_cp_async(void *dst, const void *src, int bytes, int src_bytes) {
    const void *pc = __builtin_return_address(0);
    if (bytes != 4 && bytes != 8 && bytes != 16) {
        refuse(pc, format("a copy of %d bytes (cp.async copies 4, 8 or 16)", bytes));
    }
    if (src_bytes < 0 || src_bytes > bytes) {
        refuse(pc, format("src_bytes %d of a %d-byte copy (the PTX ISA leaves src-size outside [0, cp-size] "
                          "undefined)", src_bytes, bytes));
    }
    if (!is_shared(dst, (size_t)bytes)) {
        refuse(pc, format("the destination %p is not shared memory (cp.async writes shared memory only)", dst));
    }
    if ((uintptr_t)dst % (uintptr_t)bytes || (uintptr_t)src % (uintptr_t)bytes) {
        refuse(pc, format("destination %p or source %p not aligned to the copy's %d bytes", dst, src, bytes));
    }
    Copy c;
    c.dst = (char *)dst;
    c.src = (const char *)src;
    c.bytes = bytes;
    c.src_bytes = src_bytes;
    c.pc = pc;
    memset(c.data, 0, sizeof(c.data));
    if (src_bytes) {
        if (!is_device(src, (size_t)src_bytes)) {
            refuse(pc, format("the source %p is not device memory (cp.async reads global memory only)", src));
        }
        kernel_access(src, (size_t)src_bytes, false, pc);
        raw_copy(c.data, src, (size_t)src_bytes);
    }
    kernel_access(dst, (size_t)bytes, true, pc);
    shared_in_flight(dst, (size_t)bytes, true);
    mine().open.push_back(c);
}

void emu_cp_async_commit() {
    ThreadCopies &tc = mine();
    tc.groups.push_back(std::move(tc.open));
    tc.open.clear();
}

void emu_cp_async_wait(int pending) {
    const void *pc = __builtin_return_address(0);
    ThreadCopies &tc = mine();
    while (tc.groups.size() > (size_t)pending) {
        for (const Copy &c : tc.groups.front()) { land(c, pc); }
        tc.groups.pop_front();
    }
}
