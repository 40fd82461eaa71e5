#!/usr/bin/env python3
"""A throughput model of the BF16 block attention kernels (cp/attention_block_flash.cuh),
run without a GPU, beside the same model applied to FlashAttention-2's published design.

Python 3, standard library only: the model is arithmetic plus a small list-scheduling
simulation of the blocks over the SMs, nothing that needs a build.

What it models, per kernel and shape (causal, head size 64, B*NH heads, T tokens):
  launch     the grid as attend_block_*_cuda launches it (forward and dQ: one block per
             128 queries, the longest rows first; dK dV: one block per 64-key tile,
             the most-seen first), blocks/SM from kernel_figures.sh's table
             (dev/bench/README.md: forward 2 and dQ 2, register-bound; dK dV 3,
             shared-memory-bound)
  a step     the unit of a block's loop: a 128-query x 64-key tile (our forward and
             dQ), a 64-key x 64-query pair (our dK dV), 128 x 128 (FlashAttention-2).
             Per step: the tensor FLOPs its mma instructions execute (masked tiles in
             full), the shared-memory bytes (every ldmatrix operand a warp reads, the
             cp.async stores, FA2's P and dS stores), and the L2 bytes (the tiles
             copied in, FA2's dQ atomic adds); per block: its own rows in and out
  SM time    per step on an SM: the larger of tensor FLOPs / the SM's mma.sync rate and
             shared bytes / the SM's shared bandwidth; a block's slot on an SM with k
             resident blocks gets 1/k of it (no step of either design waits on a
             dependent global load: our dQ is written once per block, FA2's atomics
             return nothing)
  waves      blocks / (SMs x blocks/SM); the blocks are placed in launch order
             (blockIdx.x fastest) on the first free slot (list scheduling), so the
             tail of unequal causal blocks is simulated; tail efficiency = busy slot
             time / (slots x the last block's end)
  chip time  a kernel takes the largest of its SM time, its L2 bytes / L2 bandwidth and
             its DRAM bytes / DRAM bandwidth (that one is its bound), plus 2 us per
             launch. DRAM bytes: every tensor read or written once by each kernel;
             FA2's dQ atomics in full when the resident blocks' dQ rows exceed the
             L2, one write-back otherwise
  backward   ours: the dQ kernel, then the dK dV kernel, in turn (times add), and
             before them the pass D = rowsum(dO * O), memory-bound; FA2: its kernel,
             its D, its fp32 dQ accumulator's zeroing and conversion. The DRAM column
             counts the passes too
  FA2        its HS 64 launch as published: forward 128 x 128 tiles, 4 warps (32
             query rows each), 2 blocks/SM (assumed: 48 KiB of tiles); backward
             128 x 128, 8 warps, one block per key tile walking its query tiles, P and
             dS through shared memory, 1 block/SM (its launch asks about 144 KiB);
             dQ by atomic adds resolved in L2
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
  all       2 us a launch

    python3 dev/bench/kernel_model.py            the tables, the checks, the last line:
                                                 model: forward F backward B of FlashAttention-2
    python3 dev/bench/kernel_model.py --case DESIGN KERNEL MACHINE BNH T
                                                 one row's figures, one per line (the test's);
                                                 KERNEL: forward, backward, and ours' parts
                                                 backward_dq, backward_dkv
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


def cdiv(a, b):
    return (a + b - 1) // b


def kernel(design, name, m, bnh, T):
    """The kernel's launch and costs: a dict of
    steps   per block, in launch order (blockIdx.x fastest, then the heads)
    per_sm  blocks resident per SM
    flops, smem, l2   per step;  l2_block: per block (once)
    dram    the kernel's DRAM bytes;  aux: those of the passes around it
    launches;  useful: FlashAttention's FLOP count
    ws      bytes of dQ rows the resident blocks add into (whether FA2's atomics stay in L2)"""
    tiles = cdiv(T, 64)
    rows = bnh * T * HS          # elements of one (B, NH, T, HS) tensor
    fwd_useful = 2 * bnh * T * T * HS
    # a query block of 128 walks key tiles 0 .. 2 qb + 1; launched the longest first
    query_block_steps = [min(2 * qb + 2, tiles) for qb in reversed(range(cdiv(T, 128)))] * bnh
    if design == "ours" and name == "forward":
        return dict(steps=query_block_steps, per_sm=2, launches=1, useful=fwd_useful,
                    flops=4 * 128 * 64 * HS,
                    smem=4 * 2 * 64 * HS * 2 + 2 * 64 * HS * 2,     # 4 warps of 32 rows read K and V; K, V copied in
                    l2=2 * 64 * HS * 2 + 2 * 64 * 4,                 # K, V and the keys' coordinates
                    l2_block=128 * HS * 2 + 2 * 128 * HS * 4,        # Q; the fp32 output merged (read, write)
                    dram=3 * rows * 2 + 2 * rows * 4 + 2 * bnh * T * 4, ws=0)
    if design == "ours" and name == "backward_dq":
        # Q K^T, dO V^T, dS K: 4 warps of 32 rows each read K, V and K again (once for
        # both of their 16-row tiles); K, V copied in
        return dict(steps=query_block_steps, per_sm=2, launches=2, useful=0,
                    aux=2 * rows * 2 + bnh * T * 4,                  # the pass D = rowsum(dO * O) before it
                    flops=3 * 2 * 128 * 64 * HS,
                    smem=4 * 3 * 64 * HS * 2 + 2 * 64 * HS * 2,
                    l2=2 * 64 * HS * 2 + 2 * 64 * 4,                 # K, V and the keys' coordinates
                    l2_block=2 * 128 * HS * 2 + 2 * 128 * 4 + 2 * 128 * HS * 4,  # Q, dO, lse, D; dQ fp32 (read, write)
                    dram=4 * rows * 2 + 2 * rows * 4 + 2 * bnh * T * 4, ws=0)
    if design == "ours" and name == "backward_dkv":
        # K Q^T, V dO^T, P^T dO, dS^T Q: 2 warps of 32 keys each read Q, dO, dO, Q (once
        # for both of their 16-row tiles) and their V fragments (K's stay in registers);
        # Q, dO copied in. Key tile kt is seen by query tiles kt .. tiles - 1, launched
        # kt = 0 first
        return dict(steps=[tiles - kt for kt in range(tiles)] * bnh, per_sm=3, launches=1, useful=0,
                    flops=4 * 2 * 64 * 64 * HS,
                    smem=2 * (4 * 64 * HS * 2 + 32 * HS * 2 * 4) + 2 * 64 * HS * 2,
                    l2=2 * 64 * HS * 2 + 4 * 64 * 4,                 # Q, dO; their coordinates, lse, D
                    l2_block=2 * 64 * HS * 2 + 2 * 64 * HS * 4,      # K, V; dK, dV fp32 written
                    dram=4 * rows * 2 + 2 * rows * 2 + 2 * bnh * T * 4, ws=0)
    if design == "fa2" and name == "forward":
        # FlashAttention-2's HS 64 forward: 128 x 128 tiles, 4 warps of 32 query rows
        nb = cdiv(T, 128)
        steps = [m_ + 1 for m_ in range(nb)] * bnh
        return dict(steps=steps, per_sm=2, launches=1, useful=fwd_useful,
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
        return dict(steps=steps, per_sm=1, launches=4, aux=aux, useful=2.5 * fwd_useful,
                    flops=5 * 2 * 128 * 128 * HS,
                    smem=8 * per_warp + 2 * 128 * 128 * 2 + 2 * 128 * HS * 2,
                    l2=2 * 128 * HS * 2 + 2 * 128 * 4 + atom,
                    l2_block=2 * 128 * HS * 2 * 2, dram=dram, ws=ws)
    raise ValueError(f"no kernel {design} {name}")


# the kernels one operation runs in turn
PARTS = {("ours", "backward"): ("backward_dq", "backward_dkv")}


def model_kernel(design, name, mach, bnh, T):
    """One kernel's modelled figures."""
    m = MACHINES[mach]
    k = kernel(design, name, m, bnh, T)
    per_sm, steps = k["per_sm"], k["steps"]
    t_tensor = k["flops"] / (m["mma"] / m["sms"])
    t_smem = k["smem"] / m["smem"]
    t_slot = per_sm * max(t_tensor, t_smem)  # a slot's step: its 1/per_sm of the SM
    sm_bound = "tensor" if t_tensor >= t_smem else "shared"
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
    times = {sm_bound: span, "L2": l2 / m["l2"], "DRAM": k["dram"] / m["dram"]}
    bound = max(times, key=times.get)
    aux = k.get("aux", 0)  # the passes around the kernel, memory-bound, in turn
    t = times[bound] + aux / m["dram"] + k["launches"] * LAUNCH
    return dict(blocks=len(steps), slots=slots, waves=len(steps) / slots, tail=busy / (slots * span),
                flops=total_steps * k["flops"], smem=total_steps * k["smem"], l2=l2, dram=k["dram"] + aux,
                bound=bound, time=t, tflops=k["useful"] / t / 1e12 if k["useful"] else 0.0, steps=total_steps,
                dq_in_l2=k["ws"] <= m["l2_size"], useful=k["useful"])


def model(design, name, mach, bnh, T):
    """An operation's figures: its kernels' in turn (times, bytes and FLOPs add; the
    launch figures of each joined with '+', their bounds with '/')."""
    parts = PARTS.get((design, name))
    if parts is None:
        return model_kernel(design, name, mach, bnh, T)
    rs = [model_kernel(design, p, mach, bnh, T) for p in parts]
    r = {key: sum(x[key] for x in rs) for key in ("blocks", "steps", "flops", "smem", "l2", "dram", "time")}
    r["useful"] = 2.5 * 2 * bnh * T * T * HS
    r["tflops"] = r["useful"] / r["time"] / 1e12
    r["slots"] = "+".join(str(x["slots"]) for x in rs)
    r["waves_text"] = "+".join(f"{x['waves']:.2f}" for x in rs)
    r["tail_text"] = "/".join(f"{x['tail']:.2f}" for x in rs)
    r["bound"] = "/".join(x["bound"] for x in rs)
    r["dq_in_l2"] = True
    return r


# today's measured H200 table (dev/bench/README.md, "GPU: block attention ..."): B 1,
# NH 12, bf16, ms: ours forward, ours backward, SDPA forward, SDPA backward
MEASURED = {1024: (0.049, 0.126, 0.057, 0.180), 4096: (0.237, 0.680, 0.114, 0.303),
            16384: (2.216, 7.006, 0.977, 2.372)}


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
            sys.exit(f"kernel_model: {e} (designs ours, fa2; kernels forward, backward; ours also "
                     "backward_dq, backward_dkv)")
        for key in ("blocks", "slots", "waves", "tail", "steps", "flops", "smem", "l2", "dram",
                    "bound", "time", "tflops", "dq_in_l2"):
            if key in r:
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
    worst_long = {"forward": None, "backward": None}  # T 4K and longer
    for mach in ("H100", "H200"):
        for bnh in (12, 48, 96):
            for T in (1024, 4096, 16384, 131072):
                for name in ("forward", "backward"):
                    o, f = model("ours", name, mach, bnh, T), model("fa2", name, mach, bnh, T)
                    ratio = f["time"] / o["time"]
                    worst[name] = ratio if worst[name] is None else min(worst[name], ratio)
                    if T >= 4096:
                        worst_long[name] = ratio if worst_long[name] is None else min(worst_long[name], ratio)
                    waves = o.get("waves_text", f"{o.get('waves', 0):.2f}")
                    tail = o.get("tail_text", f"{o.get('tail', 0):.2f}")
                    print(f"| {mach} | {bnh} | {T} | {name} | {o['blocks']} | {waves} | {tail} "
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
    print(f"at T 4K to 128K: forward {worst_long['forward']:.2f} backward {worst_long['backward']:.2f}")
    print(f"model: forward {worst['forward']:.2f} backward {worst['backward']:.2f} of FlashAttention-2")


if __name__ == "__main__":
    main(sys.argv[1:])
