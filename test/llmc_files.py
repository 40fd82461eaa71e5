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
"""
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
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        params = array("f")
        params.frombytes(f.read())
    assert header[0] == 20240326, path
    return params


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
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
