# Writing little-endian integers into binary files from bash (sourced by tests).

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
