#!/usr/bin/env python3
"""Extract character vectors from an R lazy-load database (.rdb/.rdx pair).

No R installation is needed. An R lazy-load database consists of
  * NAME.rdx: a gzip-compressed R serialization stream of a named list with
    (at least) the element "variables": a named list mapping each object name
    to an integer vector c(offset, length) into NAME.rdb;
  * NAME.rdb: the concatenated payloads. Each payload is a 4-byte big-endian
    uncompressed length followed by a zlib stream (compression type 1) or,
    for types 2/3, a one-byte tag ('Z' or '1' zlib, '2' bzip2, 'X' xz,
    '0' stored) followed by the compressed data. The uncompressed bytes are
    again an R serialization stream. (janeaustenr uses type 1, zlib.)

The serialization reader below implements the XDR ("X\n") format, versions
2 and 3, for the subset of SEXP types that appears in data packages (atomic
vectors, lists, pairlists, symbols, attributes, references, and the
compact/wrapper ALTREP classes R writes for some vectors). Unknown types make
it fail loudly rather than guess.

Usage:
  rdata_extract.py RDATA_PREFIX OUTDIR NAME [NAME ...]
writes OUTDIR/NAME.txt for every requested object, which must be a character
vector without NA elements; elements are written one per line, UTF-8, each
terminated by "\n".
"""
import bz2
import gzip
import lzma
import os
import struct
import sys
import zlib

# SEXP type codes (Rinternals.h) and the pseudo types used only in streams
# (serialize.c).
NILSXP, SYMSXP, LISTSXP, CLOSXP, ENVSXP, PROMSXP, LANGSXP = 0, 1, 2, 3, 4, 5, 6
CHARSXP, LGLSXP, INTSXP, REALSXP, CPLXSXP, STRSXP = 9, 10, 13, 14, 15, 16
DOTSXP, VECSXP, EXPRSXP, RAWSXP, S4SXP = 17, 19, 20, 24, 25
REFSXP, NILVALUE_SXP, GLOBALENV_SXP, UNBOUNDVALUE_SXP = 255, 254, 253, 252
MISSINGARG_SXP, BASENAMESPACE_SXP, NAMESPACESXP, PACKAGESXP = 251, 250, 249, 248
PERSISTSXP, EMPTYENV_SXP, BASEENV_SXP = 247, 242, 241
ATTRLANGSXP, ATTRLISTSXP, ALTREP_SXP = 240, 239, 238

NA_INTEGER = -(2 ** 31)

# CHARSXP encoding flags stored in the "levels" bits of the header.
LATIN1_MASK = 1 << 2
UTF8_MASK = 1 << 3
BYTES_MASK = 1 << 1
ASCII_MASK = 1 << 6


class RError(Exception):
    pass


class RObj:
    """A decoded R object: its type code, value and attributes (dict)."""

    def __init__(self, sxptype, value, attrs=None):
        self.type = sxptype
        self.value = value
        self.attrs = attrs or {}

    def __repr__(self):
        return "RObj(type=%d, value=%r, attrs=%r)" % (self.type, self.value, self.attrs)


class Sym:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "Sym(%r)" % self.name


class Unserializer:
    def __init__(self, data):
        self.d = data
        self.p = 0
        self.refs = []
        self.native_encoding = None

    # -- primitive readers (XDR = big-endian) --
    def take(self, n):
        if self.p + n > len(self.d):
            raise RError("unexpected end of stream")
        b = self.d[self.p:self.p + n]
        self.p += n
        return b

    def int(self):
        return struct.unpack(">i", self.take(4))[0]

    def length(self):
        n = self.int()
        if n == -1:  # long vector: two more ints
            hi, lo = self.int(), self.int()
            n = (hi << 32) + lo
        if n < 0:
            raise RError("negative length %d" % n)
        return n

    # -- stream --
    def run(self):
        fmt = self.take(2)
        if fmt != b"X\n":
            raise RError("only XDR serialization is supported, got %r" % fmt)
        version = self.int()
        self.int()  # writer R version
        self.int()  # minimal reader R version
        if version == 3:
            n = self.int()
            self.native_encoding = self.take(n).decode("ascii")
        elif version != 2:
            raise RError("unsupported serialization version %d" % version)
        obj = self.item()
        if self.p != len(self.d):
            raise RError("%d trailing bytes after object" % (len(self.d) - self.p))
        return obj

    def persistent_strings(self):
        if self.int() != 0:
            raise RError("bad persistent name")
        n = self.int()
        return [self.item() for _ in range(n)]

    def attributes_of(self, pairlist):
        """Turn a decoded pairlist (list of (tag, value)) into a dict."""
        out = {}
        for tag, val in pairlist.value:
            out[tag.name if isinstance(tag, Sym) else tag] = val
        return out

    def item(self):
        flags = self.int()
        t = flags & 0xFF
        levels = flags >> 12
        has_attr = bool(flags & (1 << 9))
        has_tag = bool(flags & (1 << 10))

        if t == NILVALUE_SXP:
            return None
        if t in (EMPTYENV_SXP, BASEENV_SXP, GLOBALENV_SXP, UNBOUNDVALUE_SXP,
                 MISSINGARG_SXP, BASENAMESPACE_SXP):
            return RObj(t, None)
        if t == REFSXP:
            idx = flags >> 8
            if idx == 0:
                idx = self.int()
            return self.refs[idx - 1]
        if t == PERSISTSXP:
            return RObj(t, self.persistent_strings())
        if t == SYMSXP:
            name = self.item()  # a CHARSXP (decoded to str)
            s = Sym(name)
            self.refs.append(s)
            return s
        if t in (PACKAGESXP, NAMESPACESXP):
            o = RObj(t, self.persistent_strings())
            self.refs.append(o)
            return o
        if t == ENVSXP:
            o = RObj(t, None)
            self.refs.append(o)
            self.int()  # locked
            enclos = self.item()
            frame = self.item()
            hashtab = self.item()
            attrib = self.item()
            o.value = {"enclos": enclos, "frame": frame, "hashtab": hashtab}
            if attrib is not None:
                o.attrs = self.attributes_of(attrib)
            return o
        if t in (LISTSXP, LANGSXP, CLOSXP, PROMSXP, DOTSXP, ATTRLANGSXP, ATTRLISTSXP):
            # Pairlist: read iteratively along the CDR chain.
            cells = []
            attrs = {}
            first = True
            while True:
                attr = self.item() if has_attr else None
                tag = self.item() if has_tag else None
                car = self.item()
                cells.append((tag, car))
                if first and attr is not None:
                    attrs = self.attributes_of(attr)
                first = False
                # Peek at the CDR: continue the loop if it is another cell of
                # the same kind, otherwise decode it as a normal item.
                save = self.p
                nflags = self.int()
                nt = nflags & 0xFF
                if nt in (LISTSXP, ATTRLISTSXP) and t in (LISTSXP, ATTRLISTSXP):
                    has_attr = bool(nflags & (1 << 9))
                    has_tag = bool(nflags & (1 << 10))
                    continue
                self.p = save
                cdr = self.item()
                if cdr is not None:
                    cells.append(("<cdr>", cdr))
                break
            return RObj(LISTSXP if t == ATTRLISTSXP else t, cells, attrs)
        if t == CHARSXP:
            n = self.int()
            if n == -1:
                return None  # NA_STRING
            raw = self.take(n)
            if levels & LATIN1_MASK:
                return raw.decode("latin-1")
            if levels & BYTES_MASK:
                raise RError("CHARSXP marked as bytes")
            # UTF-8, ASCII, or native encoding (UTF-8 for these packages).
            enc = self.native_encoding or "UTF-8"
            if not (levels & (UTF8_MASK | ASCII_MASK)) and enc.upper().replace("-", "") not in ("UTF8",):
                raise RError("native encoding %s not supported" % enc)
            return raw.decode("utf-8")
        if t == ALTREP_SXP:
            info = self.item()
            state = self.item()
            attr = self.item()
            o = self.altrep(info, state)
            if attr is not None:
                o.attrs = self.attributes_of(attr)
            return o

        # Vector-like types
        if t in (LGLSXP, INTSXP):
            n = self.length()
            vals = list(struct.unpack(">%di" % n, self.take(4 * n)))
            vals = [None if v == NA_INTEGER else v for v in vals]
            o = RObj(t, vals)
        elif t == REALSXP:
            n = self.length()
            o = RObj(t, list(struct.unpack(">%dd" % n, self.take(8 * n))))
        elif t == CPLXSXP:
            n = self.length()
            v = struct.unpack(">%dd" % (2 * n), self.take(16 * n))
            o = RObj(t, [complex(v[2 * i], v[2 * i + 1]) for i in range(n)])
        elif t == STRSXP:
            n = self.length()
            o = RObj(t, [self.item() for _ in range(n)])
        elif t in (VECSXP, EXPRSXP):
            n = self.length()
            o = RObj(t, [self.item() for _ in range(n)])
        elif t == RAWSXP:
            n = self.length()
            o = RObj(t, self.take(n))
        elif t == S4SXP:
            o = RObj(t, None)
        else:
            raise RError("unsupported SEXP type %d at offset %d" % (t, self.p - 4))
        if has_attr:
            o.attrs = self.attributes_of(self.item())
        return o

    def altrep(self, info, state):
        # info is a pairlist (class symbol, package symbol, type int)
        cls = info.value[0][1].name if info is not None else "?"
        if cls == "compact_intseq":
            n, start, inc = state.value
            return RObj(INTSXP, [int(start + i * inc) for i in range(int(n))])
        if cls == "compact_realseq":
            n, start, inc = state.value
            return RObj(REALSXP, [start + i * inc for i in range(int(n))])
        if cls.startswith("wrap_"):
            return state.value[0]  # list(x, meta)
        if cls == "deferred_string":
            # state is a pairlist whose CAR is the original (int/real) vector
            arg = state.value[0][1]
            return RObj(STRSXP, [None if v is None else str(v) for v in arg.value])
        raise RError("unsupported ALTREP class %s" % cls)


def unserialize(data):
    return Unserializer(data).run()


def decompress_payload(blob):
    """Decode one lazy-load DB payload (R's R_decompress1/2/3)."""
    (n,) = struct.unpack(">I", blob[:4])
    body = blob[4:]
    if body[:2] in (b"\x78\x9c", b"\x78\xda", b"\x78\x01", b"\x78\x5e"):
        out = zlib.decompress(body)
    else:
        tag = body[:1]
        if tag in (b"Z", b"1"):
            out = zlib.decompress(body[1:])
        elif tag == b"2":
            out = bz2.decompress(body[1:])
        elif tag == b"X":
            out = lzma.decompress(body[1:])
        elif tag == b"0":
            out = body[1:]
        else:
            raise RError("unknown lazy-load compression tag %r" % tag)
    if len(out) != n:
        raise RError("payload length mismatch: header %d, got %d" % (n, len(out)))
    return out


def named_list(obj):
    names = obj.attrs.get("names")
    if names is None:
        raise RError("expected a named list")
    return dict(zip(names.value, obj.value))


def load_index(prefix):
    with gzip.open(prefix + ".rdx", "rb") as f:
        idx = named_list(unserialize(f.read()))
    return named_list(idx["variables"])


def load_object(prefix, name, index):
    off, ln = index[name].value
    with open(prefix + ".rdb", "rb") as f:
        f.seek(off)
        blob = f.read(ln)
    if len(blob) != ln:
        raise RError("short read for %s" % name)
    return unserialize(decompress_payload(blob))


def main(argv):
    if len(argv) < 4:
        sys.exit(__doc__)
    prefix, outdir, names = argv[1], argv[2], argv[3:]
    index = load_index(prefix)
    os.makedirs(outdir, exist_ok=True)
    for name in names:
        if name not in index:
            raise RError("object %s not in database (have: %s)" % (name, sorted(index)))
        obj = load_object(prefix, name, index)
        if obj.type != STRSXP:
            raise RError("%s is SEXP type %d, expected a character vector" % (name, obj.type))
        if any(s is None for s in obj.value):
            raise RError("%s contains NA strings" % name)
        with open(os.path.join(outdir, name + ".txt"), "w", encoding="utf-8", newline="\n") as f:
            for line in obj.value:
                f.write(line + "\n")
        print("%s: %d lines" % (name, len(obj.value)))


if __name__ == "__main__":
    main(sys.argv)
