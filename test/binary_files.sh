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
