#!/usr/bin/env python3
"""
Files for test/e2e_llmc_compat.sh, written here from llm.c's formats (its
dev/data/data_common.py), sharing no code with the trainer, and a comparison of
two checkpoints.

    llmc_files.py spike OUT T STEPS SPIKE      a token file of STEPS + 1 windows of T
        tokens, all token 5, except that window SPIKE holds random tokens after its
        first (so the step before it still ends on a 5): one step with a loss and
        gradient-norm spike
    llmc_files.py cycle OUT N                  N tokens of the cycle 11 12 ... 18 11 ...
    llmc_files.py head IN OUT N                the first N tokens of a token file
    llmc_files.py hellaswag OUT                the eval file of the -h 1 test (below)
    llmc_files.py maxdiff A B                  the largest |a - b| over the parameters
                                               of two llm.c fp32 checkpoints
    llmc_files.py shuffle_check TL_SH TL_IN B T DP STEPS FILE...
        checks llm.c's shuffled order: TL_SH, the -tl losses of STEPS steps of a
        shuffled run at dp DP over the token files FILE... (sorted, as the glob),
        and TL_IN, those of an in-order run at dp 1 over one epoch of the same
        files, both with -l 0 (so a row's losses depend on its tokens alone): every
        step's rows of every replica must be, bit for bit, the in-order rows of the
        span that llm.c's DataLoader (seed 42 + replica, its sequence of draws,
        computed here) reads at that step
    llmc_files.py tl_close A B TOL             two -tl files agree within TOL
    llmc_files.py small MODEL OUT DATA OUT_DATA V MAXT
        MODEL (an llm.c fp32 checkpoint) cut to its first V token rows and MAXT
        positions (no checksum: llm.c's header slots 8..10 zero), and DATA's tokens
        mapped to the V - 1 most frequent and one token for the rest: a model whose
        steps the CUDA emulation runs in seconds (the classifier over GPT-2's 50257
        tokens is most of a step)
    llmc_files.py bf16_models DIR              the model files of test/e2e_model_bf16.sh
        (below: BF16_MODEL), after checking this file's bf16 rounding against the
        hand-computed BF16_TABLE:
          exact_v3.bin, exact_v5.bin   the same weights, all bf16 values, as llm.c's
                                       fp32 (version 3) and bf16 (version 5) files,
                                       with gpt2cp's checksum in header[8..10]
          exact_v5_llmc.bin            the same without the checksum, as llm.c writes
          weights.f32                  raw fp32 weights of any bits: BF16_TABLE's
                                       inputs first (ties, NaN, infinities,
                                       overflow, subnormals), then random patterns
          weights_v3.bin, weights_v5.bin   weights.f32 as the two versions store them
          tokens.bin                   8192 random tokens of the model's vocabulary
"""
import math
import os
import random
import struct
import sys
from array import array


def write_tokens(path, tokens):
    header = [0] * 256
    header[0], header[1], header[2] = 20240520, 1, len(tokens)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(array("H", tokens).tobytes())


def read_tokens(path):
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        tokens = array("H")
        tokens.frombytes(f.read())
    assert header[0] == 20240520 and header[2] == len(tokens), path
    return list(tokens)


def write_eval(path, examples):
    """llm.c's write_evalfile: (label, context, [4 completions]) per example"""
    stream, longest = [], 0
    for index, (label, context, completions) in enumerate(examples):
        e = [65535, 0, index, label, len(completions), len(context)] + context
        for c in completions:
            e += [len(c)] + c
        e[1] = 2 * len(e)
        longest = max(longest, e[1])
        stream += e
    header = [0] * 256
    header[0], header[1], header[2], header[3] = 20240522, 1, len(examples), longest
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(array("H", stream).tobytes())


# The -h 1 test: a model trained on the cycle 11 .. 18 predicts each next token of
# it. In every example one completion continues the context along the cycle (its
# index in RIGHT) and the three others break it at their first token; the label
# is the continuation in 4 examples and another completion in 2. The expected
# accuracy is 4 / 6.
HELLASWAG = [
    # label, context, completions          right
    (0, [11, 12, 13], [[14, 15], [17, 12], [16, 16], [12, 11]]),          # 0
    (1, [15, 16], [[12, 13, 14], [17, 18, 11], [11, 11, 11], [14, 13, 12]]),  # 1
    (2, [18], [[13], [15], [11], [18]]),                                 # 2
    (3, [12, 13, 14, 15, 16], [[11], [12], [18], [17]]),                 # 3
    (2, [13, 14], [[15, 16], [16, 17], [12, 13], [18, 11]]),             # 0: the label is wrong
    (0, [16, 17], [[12], [18], [16], [17]]),                             # 1: the label is wrong
]


def llmc_order(spans, seed, steps):
    """(shard, span) read at each step by llm.c's shuffled DataLoader: spans[f] is
    the number of spans of shard f; draws as llm.c's random_permutation"""
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from random_init_reference import Twister
    tw = Twister(seed)

    def permute(a):
        for i in range(len(a) - 1, 0, -1):
            j = tw.u32() % (i + 1)
            a[i], a[j] = a[j], a[i]

    shards = list(range(len(spans)))
    state = {}

    def start_shard(k):
        state["k"], state["i"] = k, 0
        state["order"] = list(range(spans[shards[k]]))
        permute(state["order"])

    def new_epoch():
        permute(shards)
        start_shard(0)

    new_epoch()
    out = []
    for _ in range(steps):
        if state["i"] >= len(state["order"]):
            if state["k"] + 1 == len(shards):
                new_epoch()
            else:
                start_shard(state["k"] + 1)
        out.append((shards[state["k"]], state["order"][state["i"]]))
        state["i"] += 1
    return out


def read_floats(path):
    values = array("f")
    with open(path, "rb") as f:
        values.frombytes(f.read())
    return values


def shuffle_check(tl_sh, tl_in, B, T, dp, steps, files):
    ntok = [len(read_tokens(f)) for f in files]
    spans1 = [(n - 1) // (B * T) for n in ntok]        # spans of one replica's window, in order
    first = [sum(spans1[:f]) for f in range(len(files))]
    spans = [(n - 1) // (dp * B * T) for n in ntok]     # spans of the shuffled run
    got, ref = read_floats(tl_sh), read_floats(tl_in)
    row = B * T
    assert len(got) == steps * dp * row, f"{tl_sh}: {len(got)} floats, expected {steps} steps of {dp * row}"
    assert len(ref) == sum(spans1) * row, f"{tl_in}: {len(ref)} floats, expected one epoch of {sum(spans1)} steps"
    epoch = sum(spans)
    for k in range(dp):
        for s, (f, j) in enumerate(llmc_order(spans, 42 + k, steps)):
            i = first[f] + j * dp + k
            a = got[(s * dp + k) * row:(s * dp + k + 1) * row]
            b = ref[i * row:(i + 1) * row]
            if a.tobytes() != b.tobytes():
                sys.exit(f"FAIL: step {s}, replica {k}: the rows are not those of shard {f} span {j} "
                         f"(llm.c's order, seed {42 + k})")
    print(f"ok   {steps} shuffled steps ({steps / epoch:.1f} epochs of {epoch}) x {dp} replica(s): every batch is the "
          f"span llm.c's loader reads, bit for bit")


def read_params(path):
    """the parameters of an llm.c model file, version 3 or 5 (widened to fp32)"""
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        data = f.read()
    assert header[0] == 20240326 and header[1] in (3, 5), path
    if header[1] == 3:
        params = array("f")
        params.frombytes(data)
        return params
    bits = array("H")
    bits.frombytes(data)
    return array("f", struct.unpack(f"<{len(bits)}f", struct.pack(f"<{len(bits)}I", *(b << 16 for b in bits))))


# ---------------------------------------------------------------------------
# bf16 model files (llm.c's version 5)

# fp32 pattern -> bf16 pattern by round to nearest, ties to even (NaN -> 0x7fff),
# worked out by hand: bf16 keeps the upper 16 bits; the lower 16 decide.
BF16_TABLE = [
    (0x3F800000, 0x3F80, "1.0, exact"),
    (0x3F807FFF, 0x3F80, "just under half a step above 1.0: down"),
    (0x3F808000, 0x3F80, "half a step above 1.0 (even): tie, stays even"),
    (0x3F808001, 0x3F81, "just over half a step: up"),
    (0x3F818000, 0x3F82, "half a step above 0x3f81 (odd): tie, up to even"),
    (0xBF808000, 0xBF80, "-(1 + 2^-8): tie, to even"),
    (0xBF818000, 0xBF82, "negative tie above an odd pattern: away to even"),
    (0x3FFFFFFF, 0x4000, "just under 2.0: the carry steps the exponent"),
    (0x7F7F7FFF, 0x7F7F, "just under half a step above the largest bf16: stays"),
    (0x7F7F8000, 0x7F80, "half a step above the largest bf16 (odd): tie, to infinity"),
    (0x7F7FFFFF, 0x7F80, "largest fp32: overflows to infinity"),
    (0xFF7FFFFF, 0xFF80, "most negative fp32: to -infinity"),
    (0x7F800000, 0x7F80, "+infinity"),
    (0xFF800000, 0xFF80, "-infinity"),
    (0x7FC00000, 0x7FFF, "quiet NaN: canonical"),
    (0xFFC00000, 0x7FFF, "negative quiet NaN: canonical, sign dropped"),
    (0x7F800001, 0x7FFF, "signalling NaN whose upper half reads as infinity"),
    (0x7FBF0000, 0x7FFF, "NaN with a payload in the upper half"),
    (0x00000000, 0x0000, "+0"),
    (0x80000000, 0x8000, "-0"),
    (0x00000001, 0x0000, "smallest subnormal: under half of bf16's smallest (2^-133)"),
    (0x00008000, 0x0000, "2^-134, half of bf16's smallest subnormal: tie, to even 0"),
    (0x00018000, 0x0002, "tie above the odd subnormal 0x0001: up"),
    (0x007FFFFF, 0x0080, "largest subnormal: up to the smallest normal"),
    (0x80008001, 0x8001, "negative subnormal just over half a step: away from zero"),
]


# Values are Python floats (doubles): every fp32 and bf16 value, 2^128 and the
# difference of any two of them are exact in a double, so the comparisons below
# are exact.
def bf16_value(b):
    """the value of a bf16 pattern that is no NaN; the exponent 255 with mantissa 0
    reads as 2^128 (infinity's place in the order)"""
    sign = -1.0 if b & 0x8000 else 1.0
    e, m = (b >> 7) & 0xFF, b & 0x7F
    if e == 0:
        return sign * math.ldexp(m, -133)
    return sign * math.ldexp(128 + m, e - 134)


def f32_value(u):
    """the value of an fp32 pattern that is no NaN or infinity"""
    sign = -1.0 if u & 0x80000000 else 1.0
    e, m = (u >> 23) & 0xFF, u & 0x7FFFFF
    if e == 0:
        return sign * math.ldexp(m, -149)
    return sign * math.ldexp((1 << 23) + m, e - 150)


def bf16_round(u):
    """fp32 pattern -> bf16 pattern, by the definition of rounding: of the two bf16
    values around x (its upper half, and one step further from zero), the nearer,
    on a tie the even one; NaN -> 0x7fff"""
    if (u >> 23) & 0xFF == 0xFF:
        return 0x7FFF if u & 0x7FFFFF else u >> 16
    low, high = u >> 16, (u >> 16) + 1
    if u & 0xFFFF == 0:
        return low
    x = f32_value(u)
    below, above = abs(x - bf16_value(low)), abs(bf16_value(high) - x)
    if below != above:
        return low if below < above else high
    return low if low % 2 == 0 else high


def check_bf16_table():
    for u, want, what in BF16_TABLE:
        got = bf16_round(u)
        if got != want:
            sys.exit(f"FAIL: bf16 of {u:#010x} ({what}): this script gives {got:#06x}, the table {want:#06x}")


# the model of the bf16 tests: maxT 64 (the trainer's default -g must fit), a
# vocabulary of 64 (its token file: tokens.bin), 1 layer, 1 head of 32 channels (the
# GPU attention's smallest head size); llm.c's order of tensors
BF16_MODEL = dict(maxT=64, V=64, Vp=64, L=1, NH=1, C=32)


def num_parameters(maxT, V, Vp, L, NH, C):
    return Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C


def fnv1a(data, h=1469598103934665603):
    """llmc/checksum.h's FNV-1a 64, written again"""
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def write_model(path, config, version, data, checksum=True):
    """an llm.c model file: header, then data (the parameters' bytes as version
    stores them); checksum: gpt2cp's mark and FNV-1a of data in header[8..10]"""
    header = [0] * 256
    header[:8] = [20240326, version, config["maxT"], config["V"], config["L"], config["NH"], config["C"],
                  config["Vp"]]
    if checksum:
        h = fnv1a(data)
        header[8:11] = [0x43534B31, h & 0xFFFFFFFF, h >> 32]
    with open(path, "wb") as f:
        f.write(struct.pack("<8i3I245i", *header))
        f.write(data)


def bf16_models(out):
    check_bf16_table()
    n = num_parameters(**BF16_MODEL)
    rng = random.Random(5)
    # weights that bf16 holds exactly: N(0, 0.02)-like patterns with the lower half zero
    exact = [struct.unpack("<I", struct.pack("<f", rng.gauss(0.0, 0.02)))[0] & 0xFFFF0000 for _ in range(n)]
    v3 = struct.pack(f"<{n}I", *exact)
    v5 = struct.pack(f"<{n}H", *(u >> 16 for u in exact))
    write_model(os.path.join(out, "exact_v3.bin"), BF16_MODEL, 3, v3)
    write_model(os.path.join(out, "exact_v5.bin"), BF16_MODEL, 5, v5)
    write_model(os.path.join(out, "exact_v5_llmc.bin"), BF16_MODEL, 5, v5, checksum=False)
    # weights of any bits: the table's inputs, then ordinary values with random lower halves
    table = [u for u, _, _ in BF16_TABLE]
    arbitrary = table + [struct.unpack("<I", struct.pack("<f", rng.gauss(0.0, 0.02)))[0] ^ rng.getrandbits(16)
                         for _ in range(n - len(table))]
    raw = struct.pack(f"<{n}I", *arbitrary)
    with open(os.path.join(out, "weights.f32"), "wb") as f:
        f.write(raw)
    write_model(os.path.join(out, "weights_v3.bin"), BF16_MODEL, 3, raw)
    write_model(os.path.join(out, "weights_v5.bin"), BF16_MODEL, 5, struct.pack(f"<{n}H", *map(bf16_round, arbitrary)))
    write_tokens(os.path.join(out, "tokens.bin"), [rng.randrange(BF16_MODEL["V"]) for _ in range(8192)])
    c = BF16_MODEL
    print(f"{c['maxT']} {c['V']} {c['Vp']} {c['L']} {c['NH']} {c['C']}")


def small_model(model_in, model_out, data_in, data_out, V, maxT):
    from collections import Counter
    with open(model_in, "rb") as f:
        h = list(struct.unpack("<256i", f.read(1024)))
        p = array("f")
        p.frombytes(f.read())
    C, Vp, rows = h[6], h[7], h[2]
    # wte's first V rows, wpe's first maxT rows, the layers as they are
    cut = p[:V * C] + p[Vp * C:Vp * C + maxT * C] + p[(Vp + rows) * C:]
    h[2], h[3], h[7], h[8], h[9], h[10] = maxT, V, V, 0, 0, 0
    with open(model_out, "wb") as f:
        f.write(struct.pack("<256i", *h))
        f.write(cut.tobytes())
    tokens = read_tokens(data_in)
    rank = {t: i for i, (t, _) in enumerate(Counter(tokens).most_common(V - 1))}
    write_tokens(data_out, [rank.get(t, V - 1) for t in tokens])


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "spike":
        out, T, steps, spike = args[0], int(args[1]), int(args[2]), int(args[3])
        rng = random.Random(1)
        tokens = []
        for s in range(steps + 1):
            tokens += [5] + ([rng.randrange(50000) for _ in range(T - 1)] if s == spike else [5] * (T - 1))
        write_tokens(out, tokens + [5])
    elif cmd == "cycle":
        write_tokens(args[0], [11 + i % 8 for i in range(int(args[1]))])
    elif cmd == "head":
        write_tokens(args[1], read_tokens(args[0])[:int(args[2])])
    elif cmd == "hellaswag":
        write_eval(args[0], HELLASWAG)
    elif cmd == "maxdiff":
        a, b = read_params(args[0]), read_params(args[1])
        assert len(a) == len(b), "the checkpoints differ in size"
        print(f"{max(abs(x - y) for x, y in zip(a, b)):.3e}")
    elif cmd == "shuffle_check":
        shuffle_check(args[0], args[1], int(args[2]), int(args[3]), int(args[4]), int(args[5]), sorted(args[6:]))
    elif cmd == "tl_close":
        a, b = read_floats(args[0]), read_floats(args[1])
        assert len(a) == len(b), "the -tl files differ in size"
        d = max(abs(x - y) for x, y in zip(a, b))
        if not d <= float(args[2]):
            sys.exit(f"FAIL: {args[0]} and {args[1]} differ by {d:.2e} (limit {args[2]})")
        print(f"ok   {args[0]} and {args[1]}: per-token losses within {d:.1e} (limit {args[2]})")
    elif cmd == "bf16_models":
        bf16_models(args[0])
    elif cmd == "small":
        small_model(args[0], args[1], args[2], args[3], int(args[4]), int(args[5]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
