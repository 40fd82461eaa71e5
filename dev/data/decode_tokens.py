#!/usr/bin/env python3
"""Decodes an llm.c token file into one text file per document, with the tokenizer
file's byte table alone (no BPE): the text a document was encoded from, where the
encoder's output decodes back to its input (dev/data/austen_write.py checks that for
the shipped Austen files). Documents start at each EOT token.

    python3 dev/data/decode_tokens.py TOKENS.bin TOKENIZER.bin OUTDIR [PREFIX]

writes OUTDIR/PREFIX0000.txt, PREFIX0001.txt, ... and prints how many. read_tokenizer
and read_tokens also serve dev/bench/make_documents.sh."""
import os
import struct
import sys


def read_tokenizer(path):
    """The byte string of every token id, and the EOT id, of llm.c's tokenizer file."""
    blob = open(path, "rb").read()
    magic, version, vocab, eot = struct.unpack("<4i", blob[:16])
    if (magic, version) != (20240328, 2):
        sys.exit(f"{path}: not llm.c's tokenizer file (version 2)")
    table, at = [], 1024
    for _ in range(vocab):
        n = blob[at]
        table.append(blob[at + 1:at + 1 + n])
        at += 1 + n
    return table, eot


def read_tokens(path, eot):
    """The token ids of llm.c's token file, which must open with the EOT token."""
    data = open(path, "rb").read()
    magic, version, ntok = struct.unpack("<3i", data[:12])
    if (magic, version) != (20240520, 1) or len(data) != 1024 + 2 * ntok:
        sys.exit(f"{path}: not llm.c's token file")
    ids = struct.unpack(f"<{ntok}H", data[1024:])
    if not ids or ids[0] != eot:
        sys.exit(f"{path}: does not start with the EOT token {eot}")
    return ids


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    tokens_path, tokenizer_path, out = sys.argv[1:4]
    prefix = sys.argv[4] if len(sys.argv) == 5 else ""
    table, eot = read_tokenizer(tokenizer_path)
    ids = read_tokens(tokens_path, eot)
    os.makedirs(out, exist_ok=True)
    docs, doc = 0, []
    for t in list(ids[1:]) + [eot]:
        if t != eot:
            doc.append(t)
            continue
        with open(os.path.join(out, f"{prefix}{docs:04d}.txt"), "wb") as f:
            f.write(b"".join(table[i] for i in doc))
        docs, doc = docs + 1, []
    print(f"{tokens_path}: {docs} documents decoded into {out}")


if __name__ == "__main__":
    main()
