#!/usr/bin/env bash
# Packs Open MPI for a GPU machine that has no package registry and may have no
# MPI (a bare CUDA image, Ubuntu 24.04-like), so that scripts/gpu_check.sh can run
# several ranks there. Run it HERE, on a Debian machine with apt:
#
#     bash scripts/gpu_bundle.sh [DIR]      -> DIR, default gpu_bundle/ (ignored by git;
#                                             make gpu_prep puts it in gpu_prep/bundle)
#
# It downloads Debian's Open MPI packages and every library package they need that
# such an image lacks (apt-get download; the dependencies resolved with
# apt-cache depends), unpacks them with dpkg-deb -x into gpu_bundle/root, removes
# what a single-node run over shared memory never loads (the network fabrics UCX,
# libfabric, PSM and verbs with their components, Fortran and Java bindings,
# documentation), checks with ldd that every remaining binary and component finds
# its libraries, and writes gpu_bundle/env.sh, which a shell sources to use it:
#
#     source DIR/env.sh           # PATH, LD_LIBRARY_PATH, OPAL_PREFIX, ...
#
# Debian's Open MPI is relocatable through OPAL_PREFIX: every directory it knows
# (libraries, components, help texts, mpicc's wrapper data) is derived from it.
# Its PMIx is found by the library path, its components by PMIX_MCA_mca_base_component_path.
# libudev and libmunge go to gpu_bundle/fallback, used only where the system has
# none, so that a newer system copy is never shadowed by Debian's older one.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/script_lib.sh
usage="usage: bash scripts/gpu_bundle.sh [DIR]   (DIR: default gpu_bundle/, from the repository root)
  -h    this help"
case ${1:-} in -h|--help) echo "$usage"; exit 0 ;; -*) usage_error "unknown flag '$1'" ;; esac
[ $# -le 1 ] || usage_error "one DIR at most, not $#"
BUNDLE=${1:-gpu_bundle}
MULTIARCH=x86_64-linux-gnu
MAX_MIB=40

# what the bundle is for
ROOTS=(openmpi-bin openmpi-common libopenmpi3)
# headers and the mpicc wrapper; its own -dev dependencies are not needed
EXTRA=(libopenmpi-dev)
# present on any glibc-based image (and theirs is newer: never replace it), or
# wanted only by what is removed below, or tools the image brings itself
STOP=(libc6 libgcc-s1 libstdc++6 zlib1g debconf dpkg perl-base
      libfabric1 libucx0 libibverbs1 librdmacm1 libpsm-infinipath1 libpsm2-2 libnl-3-200 libnl-route-3-200
      libnuma1 libhwloc-plugins libgfortran5 openssh-client ssh-client)
# libraries taken only where the system has none
FALLBACK=(libudev1 libmunge2)

contains() {
    local x=$1
    shift
    for y in "$@"; do [[ $x == "$y" ]] && return 0; done
    return 1
}

# The real packages a package depends on (first alternative of each Depends or
# PreDepends line; a virtual package resolves to its first provider).
depends_of() {
    apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces --no-enhances "$1" |
        awk '/^ *\|?(Pre)?Depends:/ { alt = ($1 ~ /^\|/); take = !skip; skip = alt; virt = 0;
                                      if (take && $2 ~ /^</) { virt = 1 } else if (take) { print $2 }
                                      next }
             /^    [^ ]/ { if (virt) { print $1; virt = 0 } }' | sort -u
}

if ! command -v apt-get > /dev/null; then
    echo "error: gpu_bundle.sh runs on a Debian machine with apt (it downloads Debian's packages)" >&2
    exit 1
fi
[[ -n $(apt-cache policy libopenmpi3 2>/dev/null | grep Candidate) ]] || {
    echo "error: apt knows no libopenmpi3: run 'apt-get update' first" >&2
    exit 1
}

# ---- resolve
declare -a queue=("${ROOTS[@]}") packages=()
while [[ ${#queue[@]} -gt 0 ]]; do
    p=${queue[0]}
    queue=("${queue[@]:1}")
    contains "$p" "${packages[@]+"${packages[@]}"}" && continue
    contains "$p" "${STOP[@]}" && continue
    packages+=("$p")
    for d in $(depends_of "$p"); do
        contains "$d" "${STOP[@]}" || contains "$d" "${packages[@]}" || queue+=("$d")
    done
done
packages+=("${EXTRA[@]}")
echo "packages: ${packages[*]}"

# ---- download and unpack
rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/debs" "$BUNDLE/root" "$BUNDLE/fallback"
(cd "$BUNDLE/debs" && apt-get download "${packages[@]}" > /dev/null 2>&1) || {
    echo "error: apt-get download failed for: ${packages[*]}" >&2
    exit 1
}
for deb in "$BUNDLE"/debs/*.deb; do
    name=$(dpkg-deb -f "$deb" Package)
    if contains "$name" "${FALLBACK[@]}"; then
        dpkg-deb -x "$deb" "$BUNDLE/fallback-root"
    else
        dpkg-deb -x "$deb" "$BUNDLE/root"
    fi
done
# fallback libraries: the shared objects alone, in one folder
find "$BUNDLE/fallback-root" \( -type f -o -type l \) -name '*.so.*' -exec cp -a {} "$BUNDLE/fallback/" \;
rm -rf "$BUNDLE/fallback-root" "$BUNDLE/debs"

# ---- prune what a single-node shared-memory run never loads
R=$BUNDLE/root
LIB=$R/usr/lib/$MULTIARCH
MCA=$LIB/openmpi/lib/openmpi3
rm -rf "$R/usr/share/doc" "$R/usr/share/man" "$R/usr/share/lintian" "$LIB/fortran" "$R/usr/share/java" \
       "$LIB/openmpi/lib/"*.mod
rm -f "$LIB"/libmpi_mpifh* "$LIB"/libmpi_usempi* "$LIB"/libmpi_java* "$LIB"/libmca_common_ofi* \
      "$LIB"/libmca_common_ucx* "$LIB"/libmca_common_verbs* "$LIB"/openmpi/lib/libmpi_mpifh* \
      "$LIB"/openmpi/lib/libmpi_usempi* "$LIB"/openmpi/lib/libmpi_java* "$LIB"/openmpi/lib/mpi.jar
rm -f "$MCA"/mca_*ofi*.so "$MCA"/mca_*ucx*.so "$MCA"/mca_*psm*.so "$MCA"/mca_btl_openib.so \
      "$MCA"/mca_reachable_netlink.so
# dangling links left by the removals
find "$R" -xtype l -delete
# the plain names Debian's update-alternatives would have linked
for tool in mpicc mpicxx mpirun mpiexec; do ln -sf "$tool.openmpi" "$R/usr/bin/$tool"; done

# ---- every ELF finds its libraries (bundle first, then the system's glibc family)
libpath="$LIB:$LIB/openmpi/lib:$LIB/pmix2/lib:$BUNDLE/fallback"
missing=$(find "$R" "$BUNDLE/fallback" -type f | while read -r f; do
    head -c 4 "$f" | grep -q 'ELF' || continue
    LD_LIBRARY_PATH=$libpath ldd "$f" 2>/dev/null | awk -v f="$f" '/not found/ { print f ": " $1 }'
done)
if [[ -n $missing ]]; then
    echo "error: libraries not found after pruning:" >&2
    echo "$missing" >&2
    exit 1
fi

# ---- the environment
cat > "$BUNDLE/env.sh" <<'ENV'
# Open MPI from gpu_bundle (scripts/gpu_bundle.sh): source this file.
GPU_BUNDLE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
_lib=$GPU_BUNDLE/root/usr/lib/x86_64-linux-gnu
export OPAL_PREFIX=$GPU_BUNDLE/root/usr          # Open MPI derives every path from it
export PMIX_PREFIX=$_lib/pmix2                    # PMIx's own prefix (help texts)
# ... which the ranks' PMIx does not derive its component folder from: name it
export PMIX_MCA_mca_base_component_path=$_lib/pmix2/lib/pmix
export PATH=$GPU_BUNDLE/root/usr/bin:$PATH
export LD_LIBRARY_PATH=$_lib:$_lib/openmpi/lib:$_lib/pmix2/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# libudev / libmunge only where the system has none (or none that is readable)
for _so in libudev.so.1 libmunge.so.2; do
    _path=$(/sbin/ldconfig -p 2>/dev/null | awk -v so="$_so" '$1 == so { print $NF; exit }')
    if [[ -z $_path || ! -s $_path ]]; then _need_fallback=1; fi
done
if [[ -n ${_need_fallback:-} ]]; then export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$GPU_BUNDLE/fallback; fi
# Debian's configuration file is not in the bundle; only shared memory is needed
export OMPI_MCA_mca_base_param_files=$GPU_BUNDLE/openmpi-mca-params.conf
export OMPI_MCA_btl=self,vader
export OMPI_MCA_pml=ob1
export OMPI_MCA_plm_rsh_agent=false               # one node: never look for ssh
unset _lib _so _path _need_fallback
ENV
# the mca params file Debian keeps in /etc/openmpi, without its comments
grep -v '^#' "$R/etc/openmpi/openmpi-mca-params.conf" 2>/dev/null | grep -v '^$' > "$BUNDLE/openmpi-mca-params.conf" || true

size=$(du -sm "$BUNDLE" | cut -f1)
echo "gpu_bundle: ${size} MiB ($(find "$BUNDLE" -type f | wc -l) files); use: source $BUNDLE/env.sh"
if [[ $size -ge $MAX_MIB ]]; then
    echo "error: the bundle is ${size} MiB, over the ${MAX_MIB} MiB it must stay under" >&2
    exit 1
fi
