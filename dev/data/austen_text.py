#!/usr/bin/env python3
"""Normalise the janeaustenr line vectors into chapter documents.

Usage: austen_text.py RAWDIR OUT_JSON

RAWDIR holds NAME.txt (one Gutenberg line per line, as written by
rdata_extract.py) for the six novels. OUT_JSON receives
  {"train": [chapter, ...], "val": [chapter, ...]}
with chapter = {"novel": NAME, "heading": "CHAPTER I", "text": "..."}.

Rules (each one is checked, so a changed source fails loudly):
  * everything before the first chapter heading (Gutenberg title lines, and
    for Northanger Abbey the "Advertisement by the Authoress") is dropped;
    a "VOLUME ..." heading directly before a chapter heading (Emma) is kept
    as the first paragraph of that chapter;
  * Northanger Abbey: the modern editorial "A NOTE ON THE TEXT" at the very
    end is dropped;
  * two bracketed editorial notes of the e-text ("[At this point in the first
    and second editions, ...]" in Sense and Sensibility, "[End volume one of
    this edition. ...]" in Mansfield Park) are dropped;
  * paragraphs are the blocks separated by blank lines; the lines of a block
    are stripped and joined with single spaces, and runs of spaces inside a
    paragraph are collapsed to one (Persuasion and Sense and Sensibility use
    two spaces after a full stop);
  * paragraphs are joined with "\n\n"; a chapter has no trailing newline;
    the chapter heading is its own first paragraph.
"""
import json
import re
import sys

# Publication order of the training novels; Persuasion is the validation set.
TRAIN = ["sensesensibility", "prideprejudice", "mansfieldpark", "emma", "northangerabbey"]
VAL = ["persuasion"]

# Known chapter counts of the six novels (sanity check of the heading regex).
EXPECTED_CHAPTERS = {
    "sensesensibility": 50,
    "prideprejudice": 61,
    "mansfieldpark": 48,
    "emma": 55,
    "northangerabbey": 31,
    "persuasion": 24,
}

CHAPTER_RE = re.compile(r"^(CHAPTER|Chapter) ([IVXLC]+|[0-9]+)$")
VOLUME_RE = re.compile(r"^VOLUME [IVX]+$")

# Editorial paragraphs to drop: (novel, paragraph prefix) -> expected count.
EDITORIAL_DROPS = {
    ("sensesensibility", "[At this point in the first and second editions,"): 2,
    ("mansfieldpark", "[End volume one of this edition."): 1,
}
# Trailing editorial matter: (novel, paragraph that starts it).
TRAILING_DROPS = {"northangerabbey": "A NOTE ON THE TEXT"}


def paragraphs(lines):
    """Split lines into paragraphs (lists of stripped lines)."""
    out, cur = [], []
    for line in lines:
        if "\t" in line or "\r" in line:
            raise SystemExit("unexpected tab/CR in source line: %r" % line)
        s = line.strip()
        if s:
            cur.append(s)
        elif cur:
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def unwrap(par):
    return re.sub(r" {2,}", " ", " ".join(par))


def chapters_of(name, lines):
    pars = [unwrap(p) for p in paragraphs(lines)]
    # A chapter heading must be a one-line paragraph.
    heads = [i for i, p in enumerate(pars) if CHAPTER_RE.match(p)]
    if len(heads) != EXPECTED_CHAPTERS[name]:
        raise SystemExit("%s: found %d chapter headings, expected %d"
                         % (name, len(heads), EXPECTED_CHAPTERS[name]))

    if name in TRAILING_DROPS:
        marker = TRAILING_DROPS[name]
        idx = [i for i, p in enumerate(pars) if p == marker]
        if len(idx) != 1 or idx[0] < heads[-1]:
            raise SystemExit("%s: trailing marker %r not found once after last chapter" % (name, marker))
        pars = pars[:idx[0]]

    dropped = {}
    keep = []
    for p in pars:
        hit = [k for k in EDITORIAL_DROPS if k[0] == name and p.startswith(k[1])]
        if hit:
            dropped[hit[0]] = dropped.get(hit[0], 0) + 1
            continue
        keep.append(p)
    for k, n in EDITORIAL_DROPS.items():
        if k[0] == name and dropped.get(k, 0) != n:
            raise SystemExit("%s: editorial note %r dropped %d times, expected %d"
                             % (name, k[1], dropped.get(k, 0), n))
    pars = keep

    heads = [i for i, p in enumerate(pars) if CHAPTER_RE.match(p)]
    # Chapter start: the heading, or a volume heading right before it.
    starts = [i - 1 if i > 0 and VOLUME_RE.match(pars[i - 1]) else i for i in heads]
    for i, p in enumerate(pars):
        if VOLUME_RE.match(p) and (i + 1) not in heads:
            raise SystemExit("%s: volume heading %r not followed by a chapter" % (name, p))
    out = []
    for k, (s, h) in enumerate(zip(starts, heads)):
        e = starts[k + 1] if k + 1 < len(starts) else len(pars)
        body = pars[s:e]
        if len(body) < 3:
            raise SystemExit("%s: chapter %r is suspiciously short" % (name, pars[h]))
        out.append({"novel": name, "heading": pars[h], "text": "\n\n".join(body)})
    return out


def main(argv):
    if len(argv) != 3:
        raise SystemExit(__doc__)
    rawdir, out_json = argv[1], argv[2]
    result = {}
    for split, names in (("train", TRAIN), ("val", VAL)):
        result[split] = []
        for name in names:
            with open("%s/%s.txt" % (rawdir, name), encoding="utf-8") as f:
                lines = f.read().split("\n")
            if lines[-1] == "":
                lines.pop()
            chs = chapters_of(name, lines)
            nchar = sum(len(c["text"]) for c in chs)
            print("%-17s %-5s %3d chapters %8d chars" % (name, split, len(chs), nchar))
            result[split].extend(chs)
    with open(out_json, "w", encoding="utf-8", newline="\n") as f:
        json.dump(result, f, ensure_ascii=True, indent=0)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv)
