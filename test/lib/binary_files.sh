# Writing little-endian integers and token files from bash (sourced by tests and
# dev/bench/memory_estimate.sh).

# put_i32 FILE OFFSET VALUE: a little-endian int32 at byte OFFSET (the file grows as needed)
put_i32() {
    local v=$(($3 & 0xFFFFFFFF))
    printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' $((v & 255)) $((v >> 8 & 255)) $((v >> 16 & 255)) $((v >> 24 & 255)))" |
        dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}

# put_u16 FILE OFFSET VALUE
put_u16() {
    printf "$(printf '\\x%02x\\x%02x' $(($3 & 255)) $(($3 >> 8 & 255)))" |
        dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}

# short_documents FILE SPAN: the validation text (dev/data/austen/austen_val.bin,
# from the repo root) with an EOT every 7 to 66 tokens over its first SPAN tokens,
# so that rows hold several documents of varied lengths
short_documents() {
    cp dev/data/austen/austen_val.bin "$1"
    local t
    for ((t = 3; t <= $2; t += 7 + (t * 37) % 60)); do put_u16 "$1" $((1024 + 2 * t)) 50256; done
}

# tiny_documents FILE: a token file (llm.c's format) of 40000 tokens in documents of
# 2 to 9 tokens, each opened by the EOT token, from a fixed seed: the packed layout's
# worst kind of data (its rows grow furthest past T)
tiny_documents() {
    python3 - "$1" <<'PY'
import random, struct, sys
random.seed(1)
tokens = []
while len(tokens) < 40000:
    tokens += [50256] + [random.randrange(50000) for _ in range(random.randint(1, 8))]
tokens = tokens[:40000]
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253)))
    f.write(struct.pack("<%dH" % len(tokens), *tokens))
PY
}

# fnv1a_file FILE COUNT: FNV-1a 64 (llmc/checksum.h) of the first COUNT bytes, as a
# signed 64-bit decimal (bash arithmetic wraps like the C code's uint64)
fnv1a_file() {
    local hash=1469598103934665603 b
    for b in $(head -c "$2" "$1" | od -An -v -tu1); do hash=$(((hash ^ b) * 1099511628211)); done
    echo "$hash"
}

# put_u64 FILE OFFSET VALUE (VALUE as a signed 64-bit decimal)
put_u64() {
    put_i32 "$1" "$2" $(($3 & 0xFFFFFFFF))
    put_i32 "$1" $(($2 + 4)) $((($3 >> 32) & 0xFFFFFFFF))
}

# state_reseal FILE: recomputes a state file's header checksum (train/checkpoint_files.h:
# 1024 bytes of int32, 32 uint64, the two outlier detectors of 132 x 8 bytes each,
# 4096 bytes of -e; the checksum is uint64 [31], computed with itself 0), so that a
# test can craft header fields the checksum would otherwise reject first
STATE_HEADER_BYTES=$((1024 + 32 * 8 + 2 * 132 * 8 + 4096))
state_reseal() {
    put_u64 "$1" $((1024 + 31 * 8)) 0
    put_u64 "$1" $((1024 + 31 * 8)) "$(fnv1a_file "$1" $STATE_HEADER_BYTES)"
}

# A checkpoint's files record the run id of the job that wrote them (and the model
# file its step): runs that train the same weights write files that differ there
# alone. model_untagged FILE: a model file without header slots 11..14 (run id,
# step); state_untagged FILE: a state file without its run id (uint64 [16]) and the
# header checksum that covers it ([31]).
model_untagged() { head -c 44 "$1"; tail -c +61 "$1"; }
state_untagged() { head -c $((1024 + 16 * 8)) "$1"; tail -c +$((1024 + 17 * 8 + 1)) "$1" | head -c $((14 * 8)); tail -c +$((1024 + 32 * 8 + 1)) "$1"; }
# same_model / same_state FILE1 FILE2: identical but for the tag
same_model() { cmp -s <(model_untagged "$1") <(model_untagged "$2"); }
same_state() { cmp -s <(state_untagged "$1") <(state_untagged "$2"); }
