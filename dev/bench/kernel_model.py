#!/usr/bin/env python3
"""A throughput model of the BF16 block attention kernels (cp/attention_block_flash.cuh),
run without a GPU, beside the same model applied to FlashAttention-2's published design.

Python 3, standard library only: the model is arithmetic plus a small list-scheduling
simulation of the blocks over the SMs, nothing that needs a build.

What it models, per kernel and shape (causal, head size 64, B*NH heads, T tokens):
  launch     the grid as attend_block_*_cuda launches it (forward: one block per 128
             queries; backward: attention_dq_splits blocks per head, each walking the
             key tiles split, split + splits, ...), blocks/SM from kernel_figures.sh's
             table (dev/bench/README.md: both BF16 HS 64 kernels 2, register-bound)
  a step     the unit of a block's loop: a 128-query x 64-key tile (our forward), a
             64-key x 64-query pair (our backward), 128 x 128 (FlashAttention-2). Per
             step: the tensor FLOPs its mma instructions execute (masked tiles in full),
             the shared-memory bytes (every ldmatrix operand a warp reads, the dS^T and
             cp.async stores), and the L2 bytes (the tiles copied in, our dQ slice's
             load + store of 16 rows x 64 fp32 per warp, FA2's dQ atomic adds)
  SM time    per step on an SM: the larger of tensor FLOPs / the SM's mma.sync rate and
             shared bytes / the SM's shared bandwidth; a block's slot on an SM with k
             resident blocks gets 1/k of it, unless one step's exposed latency (ours:
             the dQ slice's load before its add and store, a dependent round trip;
             FA2's atomics return nothing) is longer than what the other k-1 blocks
             keep the SM busy for
  waves      blocks / (SMs x blocks/SM); the blocks are placed in launch order
             (blockIdx.x fastest) on the first free slot (list scheduling), so the
             tail of unequal causal blocks is simulated; tail efficiency = busy slot
             time / (slots x the last block's end)
  chip time  a kernel takes the largest of its SM time, its L2 bytes / L2 bandwidth and
             its DRAM bytes / DRAM bandwidth (that one is its bound), plus 2 us per
             launch. DRAM bytes: every tensor read or written once, and the dQ
             read-modify-write (ours) or atomics (FA2) in full when the resident
             blocks' dQ rows exceed the L2, none otherwise (FA2: one write-back)
  backward   the passes around the kernel, run in turn and memory-bound, add their
             DRAM time: ours D = rowsum(dO * O), the dQ slices' memset, their sum
             (dq_parts_sum_kernel); FA2's D, its fp32 dQ accumulator's zeroing and
             conversion. The DRAM column counts them too
  FA2        its HS 64 launch as published: forward 128 x 128 tiles, 4 warps (32
             query rows each), 2 blocks/SM (assumed: 48 KiB of tiles); backward
             128 x 128, 8 warps, one block per key tile walking its query tiles, P and
             dS through shared memory, 1 block/SM (its launch asks about 144 KiB);
             dQ by atomic adds resolved in L2 (no exposed latency: nothing returns)
  TFLOP/s    counted as FlashAttention counts them (causal forward 2 B NH T^2 HS,
             backward 2.5x), over the modelled time

What it ignores: instruction issue (the softmax, exp2, masks, address arithmetic),
barrier stalls and the latency of the tiles' cp.async copies (assumed hidden by the
double buffering), bank conflicts (the padded tiles have none), clock throttling,
L2 partition effects, and the cost of FA2's atomics beyond their bytes. It is a
ceiling: a kernel that lands far below it is latency- or issue-bound, which this
model does not see.

Machine figures (assumptions, marked where not measured):
  H100 SXM  132 SMs; dense bf16 989.4 TFLOP/s (datasheet), of which mma.sync (the
            pre-Hopper instruction both designs use; wgmma is Hopper's) reaches 2/3
            (assumed, as commonly measured); shared memory 128 B/clock/SM at 1.98 GHz
            (the boost clock, read on the lent H200); L2 50 MB,
            7 TB/s (assumed from public microbenchmarks); DRAM 3.35 TB/s datasheet x 0.9
            (the H200's measured copy / datasheet ratio) = 3.0 TB/s
  H200      the H100's chip: the same SM figures; L2 60 MB (PyTorch's reading there);
            DRAM 4.3 TB/s (a device-to-device copy measured there)
  A100      for the check against FlashAttention-2's paper only: 108 SMs, 312 TFLOP/s
            bf16 dense, mma.sync at full rate (its native instruction), 128 B/clock/SM
            at 1.41 GHz, L2 40 MB, 5 TB/s (assumed), DRAM 2.04 TB/s x 0.9
  all       a dependent load's round trip under load: 0.3 us from L2, 0.6 us from DRAM
            (assumed); 2 us a launch

    python3 dev/bench/kernel_model.py            the tables, the checks, the last line:
                                                 model: forward F backward B of FlashAttention-2
    python3 dev/bench/kernel_model.py --case DESIGN KERNEL MACHINE BNH T
                                                 one row's figures, one per line (the test's)
"""
import heapq
import sys

MACHINES = {
    "H100": dict(sms=132, mma=989.4e12 * 2 / 3, smem=128 * 1.98e9, l2=7.0e12, l2_size=50e6, dram=3.35e12 * 0.9),
    "H200": dict(sms=132, mma=989.4e12 * 2 / 3, smem=128 * 1.98e9, l2=7.0e12, l2_size=60e6, dram=4.3e12),
    "A100": dict(sms=108, mma=312e12, smem=128 * 1.41e9, l2=5.0e12, l2_size=40e6, dram=2.04e12 * 0.9),
}
HS = 64
LAUNCH = 2e-6          # seconds per kernel launch, both designs
LAT_L2, LAT_DRAM = 0.3e-6, 0.6e-6   # a dependent load's round trip under load (assumed)


def cdiv(a, b):
    return (a + b - 1) // b


def dq_splits(bnh, T, sms):
    """attention_dq_splits (cp/attention_queries.cuh) at HS 64 (tile rows 64)."""
    tiles = cdiv(T, 64)
    want = cdiv(2 * sms, bnh)
    most = min((tiles + 1) // 2, 16)
    return max(want, 1) if want < most else most


def kernel(design, name, m, bnh, T):
    """The kernel's launch and costs: a dict of
    steps   per block, in launch order (blockIdx.x fastest, then the heads)
    per_sm  blocks resident per SM
    flops, smem, l2   per step;  l2_block: per block (once);  lat: exposed per step
    dram    the kernel's DRAM bytes;  aux: those of the backward's passes around it
    launches;  useful: FlashAttention's FLOP count
    ws      bytes of dQ rows the resident blocks touch (whether the RMW stays in L2)"""
    tiles = cdiv(T, 64)
    rows = bnh * T * HS          # elements of one (B, NH, T, HS) tensor
    fwd_useful = 2 * bnh * T * T * HS
    if design == "ours" and name == "forward":
        qblocks = cdiv(T, 128)
        steps = [min(2 * qb + 2, tiles) for qb in range(qblocks)] * bnh
        return dict(steps=steps, per_sm=2, launches=1, useful=fwd_useful, lat=0.0,
                    flops=4 * 128 * 64 * HS,
                    smem=8 * 2 * 64 * HS * 2 + 2 * 64 * HS * 2,     # 8 warps read K and V; K, V copied in
                    l2=2 * 64 * HS * 2 + 2 * 64 * 4,                 # K, V and the keys' coordinates
                    l2_block=128 * HS * 2 + 2 * 128 * HS * 4,        # Q; the fp32 output merged (read, write)
                    dram=3 * rows * 2 + 2 * rows * 4 + 2 * bnh * T * 4, ws=0)
    if design == "ours" and name == "backward":
        splits = dq_splits(bnh, T, m["sms"])
        steps = [sum(tiles - kt for kt in range(s, tiles, splits)) for s in range(splits)] * bnh
        # blocks resident at once, each with its own (split, head) slice of T x HS fp32 rows
        ws = min(len(steps), m["sms"] * 2) * T * HS * 4
        in_l2 = ws <= m["l2_size"]
        rmw = 4 * 2 * 16 * HS * 4                                    # 4 warps load + store 16 fp32 rows
        pairs = bnh * tiles * (tiles + 1) // 2
        dram = (4 * rows * 2 + 2 * rows * 2                          # Q, K, V, dO read; dK, dV written
                + 2 * bnh * T * 4                                    # lse, D
                + (0 if in_l2 else pairs * rmw))
        aux = (splits * rows * 4                                     # the slices' memset
               + splits * rows * 4 + rows * 4                        # summed into dq
               + 2 * rows * 2 + bnh * T * 4)                         # D = rowsum(dO * O)
        return dict(steps=steps, per_sm=2, launches=4, aux=aux, useful=2.5 * fwd_useful,
                    lat=LAT_L2 if in_l2 else LAT_DRAM,
                    flops=5 * 2 * 64 * 64 * HS,
                    # per warp: Q, dO (S^T, dP^T), dO, Q (dV, dK), dS^T and K (dQ), dS^T stored;
                    # Q and dO copied in
                    smem=4 * (4 * 64 * HS * 2 + 16 * 64 * 2 + 64 * HS * 2 + 16 * 64 * 2) + 2 * 64 * HS * 2,
                    l2=2 * 64 * HS * 2 + 4 * 64 * 4 + rmw,
                    l2_block=0, l2_tile=2 * 64 * HS * 2 + 2 * 64 * HS * 4, splits=splits,
                    dram=dram, ws=ws)
    if design == "fa2" and name == "forward":
        # FlashAttention-2's HS 64 forward: 128 x 128 tiles, 4 warps of 32 query rows
        nb = cdiv(T, 128)
        steps = [m_ + 1 for m_ in range(nb)] * bnh
        return dict(steps=steps, per_sm=2, launches=1, useful=fwd_useful, lat=0.0,
                    flops=4 * 128 * 128 * HS,
                    smem=4 * 2 * 128 * HS * 2 + 2 * 128 * HS * 2,
                    l2=2 * 128 * HS * 2,
                    l2_block=2 * 128 * HS * 2,                       # Q read, O written (bf16)
                    dram=4 * rows * 2 + bnh * T * 4, ws=0)
    if design == "fa2" and name == "backward":
        # FlashAttention-2's HS 64 backward: 128 x 128, 8 warps, one block per key tile
        # walking the query tiles; P and dS through shared memory; dQ by atomic adds
        # into an fp32 accumulator (zeroed, then converted), resolved in L2
        nb = cdiv(T, 128)
        steps = [nb - n for n in range(nb)] * bnh
        slots = m["sms"] * 1
        ws = (cdiv(slots, nb) + 1) * T * HS * 4                      # the heads resident blocks add into
        in_l2 = ws <= m["l2_size"]
        atom = 128 * HS * 4
        pairs = bnh * nb * (nb + 1) // 2
        dram = (4 * rows * 2 + 2 * rows * 2 + 2 * bnh * T * 4
                + (rows * 4 if in_l2 else pairs * 2 * atom))
        aux = (rows * 4 + rows * 4 + rows * 2                        # accumulator zeroed, converted
               + 2 * rows * 2 + bnh * T * 4)                         # D
        # per warp (2 x 4 and 4 x 2 warp layouts): S and dP 64 x 32 tiles (Q or dO, K or V
        # slices), dV and dK 32 x 32 (P^T or dS^T, dO or Q), dQ 64 x 16 (dS, K); P, dS stored
        per_warp = 2 * (64 + 32) * HS * 2 + 2 * (32 * 128 + 128 * 32) * 2 + (64 * 128 + 128 * 16) * 2
        return dict(steps=steps, per_sm=1, launches=4, aux=aux, useful=2.5 * fwd_useful, lat=0.0,
                    flops=5 * 2 * 128 * 128 * HS,
                    smem=8 * per_warp + 2 * 128 * 128 * 2 + 2 * 128 * HS * 2,
                    l2=2 * 128 * HS * 2 + 2 * 128 * 4 + atom,
                    l2_block=2 * 128 * HS * 2 * 2, dram=dram, ws=ws)
    raise ValueError(f"no kernel {design} {name}")


def model(design, name, mach, bnh, T):
    m = MACHINES[mach]
    k = kernel(design, name, m, bnh, T)
    per_sm, steps = k["per_sm"], k["steps"]
    t_tensor = k["flops"] / (m["mma"] / m["sms"])
    t_smem = k["smem"] / m["smem"]
    t_sm = max(t_tensor, t_smem)
    # a slot's step: its 1/per_sm of the SM, or the step plus its exposed latency
    t_slot = max(per_sm * t_sm, t_sm + k["lat"])
    sm_bound = "latency" if t_sm + k["lat"] > per_sm * t_sm else ("tensor" if t_tensor >= t_smem else "shared")
    slots = m["sms"] * per_sm
    free = [0.0] * slots
    heapq.heapify(free)
    busy = 0.0
    for s in steps:  # list scheduling in launch order
        start = heapq.heappop(free)
        heapq.heappush(free, start + s * t_slot)
        busy += s * t_slot
    span = max(free)
    total_steps = sum(steps)
    l2 = total_steps * k["l2"] + len(steps) * k["l2_block"]
    if "l2_tile" in k:  # ours backward: K, V in and dK, dV out per key tile
        l2 += bnh * cdiv(T, 64) * k["l2_tile"]
    times = {sm_bound: span, "L2": l2 / m["l2"], "DRAM": k["dram"] / m["dram"]}
    bound = max(times, key=times.get)
    aux = k.get("aux", 0)  # the backward's passes before and after the kernel, memory-bound, in turn
    t = times[bound] + aux / m["dram"] + k["launches"] * LAUNCH
    return dict(blocks=len(steps), slots=slots, waves=len(steps) / slots, tail=busy / (slots * span),
                flops=total_steps * k["flops"], smem=total_steps * k["smem"], l2=l2, dram=k["dram"] + aux,
                bound=bound, time=t, tflops=k["useful"] / t / 1e12, steps=total_steps,
                dq_in_l2=k["ws"] <= m["l2_size"], splits=k.get("splits", 0))


# today's measured H200 table (dev/bench/README.md, "GPU: block attention ..."): B 1,
# NH 12, bf16, ms: ours forward, ours backward, SDPA forward, SDPA backward
MEASURED = {1024: (0.043, 0.124, 0.032, 0.392), 4096: (0.241, 0.898, 0.122, 0.409),
            16384: (2.411, 10.657, 0.967, 2.375)}


def fmt_ms(x):
    return f"{x * 1e3:.3f}"


def main(argv):
    if argv[:1] == ["--case"]:
        if len(argv) != 6:
            sys.exit("kernel_model: --case DESIGN KERNEL MACHINE BNH T (e.g. --case ours forward H200 12 1024)")
        design, name, mach = argv[1:4]
        if mach not in MACHINES:
            sys.exit(f"kernel_model: machine {mach}: one of {', '.join(MACHINES)}")
        try:
            bnh, T = int(argv[4]), int(argv[5])
        except ValueError:
            sys.exit(f"kernel_model: BNH {argv[4]} and T {argv[5]} must be integers")
        if bnh < 1 or T < 1:
            sys.exit(f"kernel_model: BNH {bnh} and T {T} must be positive")
        try:
            r = model(design, name, mach, bnh, T)
        except ValueError as e:
            sys.exit(f"kernel_model: {e} (designs ours, fa2; kernels forward, backward)")
        for key in ("blocks", "slots", "waves", "tail", "steps", "flops", "smem", "l2", "dram",
                    "bound", "time", "tflops", "splits", "dq_in_l2"):
            print(key, r[key])
        return
    if argv:
        sys.exit("kernel_model: usage: kernel_model.py [--case DESIGN KERNEL MACHINE BNH T]")
    print("Model, causal, HS 64: per kernel ours | FlashAttention-2's design; time ms, TFLOP/s as FA counts")
    print()
    print("| machine | B·NH | T | kernel | blocks | waves | tail | FLOPs (G) | shared (GB) | L2 (GB) | DRAM (GB) "
          "| bound | ms | TFLOP/s | FA2 bound | FA2 ms | FA2 TFLOP/s | FA2 / ours |")
    print("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- "
          "| ---: | ---: | ---: |")
    worst = {"forward": None, "backward": None}
    for mach in ("H100", "H200"):
        for bnh in (12, 48, 96):
            for T in (1024, 4096, 16384, 131072):
                for name in ("forward", "backward"):
                    o, f = model("ours", name, mach, bnh, T), model("fa2", name, mach, bnh, T)
                    ratio = f["time"] / o["time"]
                    worst[name] = ratio if worst[name] is None else min(worst[name], ratio)
                    print(f"| {mach} | {bnh} | {T} | {name} | {o['blocks']} | {o['waves']:.2f} | {o['tail']:.2f} "
                          f"| {o['flops'] / 1e9:.0f} | {o['smem'] / 1e9:.1f} | {o['l2'] / 1e9:.2f} "
                          f"| {o['dram'] / 1e9:.2f} | {o['bound']} | {fmt_ms(o['time'])} | {o['tflops']:.0f} "
                          f"| {f['bound']} | {fmt_ms(f['time'])} | {f['tflops']:.0f} | {ratio:.2f} |")
    print()
    print("Against today's H200 measurement (B 1, NH 12, bf16; SDPA beside FA2's modelled design): ms")
    print()
    print("| T | kernel | ours model | ours measured | measured / model | FA2 model | SDPA measured "
          "| measured / model |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for T, meas in MEASURED.items():
        for i, name in enumerate(("forward", "backward")):
            o, f = model("ours", name, "H200", 12, T), model("fa2", name, "H200", 12, T)
            print(f"| {T} | {name} | {fmt_ms(o['time'])} | {meas[i]:.3f} | {meas[i] / (o['time'] * 1e3):.1f} "
                  f"| {fmt_ms(f['time'])} | {meas[2 + i]:.3f} | {meas[2 + i] / (f['time'] * 1e3):.1f} |")
    print()
    fa = model("fa2", "forward", "A100", 16, 16384), model("fa2", "backward", "A100", 16, 16384)
    print("Against FlashAttention-2's paper (A100, bf16; its stated peaks: forward up to 73% and backward up "
          "to 63% of 312 TFLOP/s, i.e. 228 and 197, at its best head size):")
    print(f"FA2's design modelled on an A100 at B·NH 16, T 16K, HS 64: forward {fa[0]['tflops']:.0f} TFLOP/s "
          f"({fa[0]['bound']}-bound), backward {fa[1]['tflops']:.0f} ({fa[1]['bound']}-bound)")
    print()
    print(f"model: forward {worst['forward']:.2f} backward {worst['backward']:.2f} of FlashAttention-2")


if __name__ == "__main__":
    main(sys.argv[1:])
