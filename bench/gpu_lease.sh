#!/usr/bin/env bash
# gpu_lease.sh — a whole GPU session in one call of the device tool: build zinc for the lent GPU,
# then run bench/gpu_session.sh's phases in order of need while time is left, and pack the logs
# into $OUT, which the tool brings back (at most 8 files: gpu_session.sh alone writes dozens).
#
#   bench/gpu_lease.sh [--budget SECONDS] [--build DIR] [--device cpu] [PHASE...]
#   bench/gpu_lease.sh --get-debs        (here, before the call: see "Libraries" below)
#   bench/gpu_lease.sh --get-wheels      (here, before a gpu_torch call: DeepSpeed's wheels)
#
# The device tool lends 15 minutes of device time per task, start-up included, and at most
# 10 minutes per command, so the checks that matter most go first:
#   env ctest python mpi2 gpu_torch offload train sanitize        (the default)
# ctest re-runs docs/cuda.md items 1-9 on the code as it is now, python and offload are items 11
# and 10, mpi2 is item 12 (two processes sharing the GPU under mpirun), gpu_torch item 13
# (transformers models through torch, zinc and DeepSpeed: it takes what is left, up to its
# budget, and needs .gpu-wheels), train repeats item 8 at 1, 2 and 4 ranks (not run since the
# first GPU session), and sanitize item 3 at length. A phase starts only while its estimate
# (below: the H200 session of 2026-11-27 where it ran, with room) fits in what is left of
# --budget (default 540 s, counted from the script's start, the build included); the ones
# skipped are listed. A phase that
# outruns what is left is stopped there (`timeout`), so the logs are always packed before the
# device tool's limit.
#
# --build DIR: use that build (nothing is built); otherwise build-cuda is configured and built
# for sm_90 (the H100 and H200) with every core. --device cpu: gpu_session.sh's cpu run of the
# offload and python phases (to check this script where there is no GPU).
#
# $OUT (or gpu-out/ when unset) gets: summary.txt (each step's rc and seconds, the phases
# skipped), meta.txt (device, date, commit, build), logs.tar.gz (every log and metrics file;
# not the checkpoints).
# Libraries: the lent machines' image has no json-c, zstd or xxhash development files and
# reaches no package archive (seen 2026-11-27 on an H200: cmake stopped at json-c). So
# `--get-debs` (run here, with apt) downloads this machine's Debian packages of the three, the
# -dev and the runtime ones, into .gpu-debs/ (git-ignored; the call carries it). On the device,
# when .gpu-debs/ holds packages, they are unpacked into a private prefix (never into /), their
# pkg-config files pointed at it, and PKG_CONFIG_PATH and LD_LIBRARY_PATH set for the build and
# every phase. Open MPI (for the mpi2 phase: mpirun, and MPI in the build) goes into
# .gpu-debs/mpi/ (about 7 MB: openmpi-bin, libopenmpi3, libopenmpi-dev, PMIx, hwloc, libevent
# and the fabric libraries libopenmpi3 loads); on the device it is used only where the machine has
# no mpirun of its own: unpacked into a prefix of its own, found by Open MPI through OPAL_PREFIX
# and by PMIx through PMIX_MCA_mca_base_component_path, mpirun/mpiexec/mpicc put first on PATH
# and cmake pointed at them (checked on a Debian machine with its own Open MPI hidden by
# bench/without_mpi.sh; not yet on a lent machine). libudev1 and libnuma1, which the machine may well have,
# are used only where it has not.
# The device tool's call, with a timeout that leaves room to rerun:
# gpu_torch (issue 38: transformers models through torch, zinc and DeepSpeed) also needs
# DeepSpeed, which the image lacks: `--get-wheels` (here) builds its wheel and fetches the
# dependencies the image lacks into .gpu-wheels/ (git-ignored), which the phase pip-installs
# from (no index) when `import deepspeed` fails there; carry both folders. The phase gets
# $ZINC_GPU_TORCH_BUDGET seconds (default 330), or what is left when less, and fits its cells
# into it (bench/gpu_torch.py all).
#   run  command="bench/gpu_lease.sh"  carry=[".gpu-debs", ".gpu-wheels"]  timeout_s=600
#   run  command="bench/gpu_lease.sh env gpu_torch adam"  carry=[".gpu-debs", ".gpu-wheels"]
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
t_start=$SECONDS
budget=540
# gpu_torch (bench/gpu_torch.py all) fits its cells into what it is given: this, or less when
# less is left (ZINC_PHASE_BUDGET, passed on to it).
gpu_torch_budget=${ZINC_GPU_TORCH_BUDGET:-330}
build=""
dev=()
phases=()
get=()
while [ $# -gt 0 ]; do
    case "$1" in
        --budget) budget="$2"; shift 2 ;;
        --build) build="$(cd "$2" && pwd)" || exit 2; shift 2 ;;
        --device) dev=(--device "$2"); shift 2 ;;
        --get-debs) get+=(debs); shift ;;
        --get-wheels) get+=(wheels); shift ;;
        -h|--help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
        env|ctest|sanitize|train|adam|profile|e2e|offload|python|pycuda|example|mpi2|gpu_torch)
            phases+=("$1"); shift ;;
        *) echo "gpu_lease: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
# --get-debs / --get-wheels (here, with the network; both may be given): what the lease carries.
get_debs() {
    mkdir -p "$root/.gpu-debs/mpi" || return 2
    (cd "$root/.gpu-debs" &&
     apt-get download libjson-c-dev libjson-c5 libzstd-dev libzstd1 libxxhash-dev libxxhash0) ||
        { echo "gpu_lease: apt-get download failed" >&2; return 1; }
    (cd "$root/.gpu-debs/mpi" &&
     apt-get download openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev libpmix2 \
         libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7 libfabric1 libucx0 \
         libibverbs1 ibverbs-providers librdmacm1 libpsm2-2 libpsm-infinipath1 libnl-3-200 \
         libnl-route-3-200 libmunge2 libnuma1 libudev1) ||
        { echo "gpu_lease: apt-get download of Open MPI failed" >&2; return 1; }
    ls -l "$root/.gpu-debs" "$root/.gpu-debs/mpi"; du -sh "$root/.gpu-debs"
}
# DeepSpeed 0.19.8 for gpu_torch's rows: built here into a wheel (no ops: the device JIT-builds
# the one it needs), with the dependencies the lent image lacks, for its Python 3.12 (pydantic's
# core is compiled).
get_wheels() {
    local py why
    . "$root/bench/venv.sh"
    bench_python || { echo "gpu_lease: no Python with torch to build DeepSpeed's wheel: $why" >&2; return 1; }
    mkdir -p "$root/.gpu-wheels" || return 2
    DS_BUILD_OPS=0 "$py" -m pip wheel -q --no-deps --no-build-isolation \
        -w "$root/.gpu-wheels" deepspeed==0.19.8 &&
    "$py" -m pip download -q --only-binary=:all: --python-version 3.12 \
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
        --implementation cp -d "$root/.gpu-wheels" pydantic hjson ||
        { echo "gpu_lease: building or downloading the wheels failed" >&2; return 1; }
    ls -l "$root/.gpu-wheels"
}
if [ ${#get[@]} -gt 0 ]; then
    for g in "${get[@]}"; do "get_$g" || exit $?; done
    exit 0
fi
[ ${#phases[@]} -gt 0 ] || phases=(env ctest python mpi2 gpu_torch offload train sanitize)
out="${OUT:-$root/gpu-out}"
mkdir -p "$out"
logs="$(mktemp -d)"
summary="$out/summary.txt"
: >"$summary"
say() { echo "$*" >>"$summary"; }

# Seconds each phase needs, with room. Measured on the H200 (2026-11-27): build 16-21 s, env
# 1 s, ctest 95 s, python 62 s, offload 5 s, sanitize 53 s (150 since three 1-step runs of the
# fast kernels under racecheck, synccheck and memcheck were added, not yet timed). train, not run there: 96 runs of 40
# steps (offload's 20-step runs took 0.5-1.3 s each) and 6 resumes, about 2-3 minutes. mpi2
# (ran on the H200, 2026-11-28, within the 60 s given; its own time not recorded): 2 mpirun
# launches of the Python test (each ~2 trainings of 30 steps and a reference) and 4 short zinc
# train runs. e2e: 3 models x (zinc exact, zinc fast, torch) of 30 steps; the exact
# L24-D1024-H16-T1024 run alone is ~40 s (1.2 s a step on the H100), the fast kernels have not
# run anywhere yet: 420 s, a guess (140 s a model: ZINC_E2E_MODELS, gpu_session.sh, names fewer;
# ZINC_E2E_CKPT=1 adds a checkpointed fast run, ~50 s a model, a guess too). (The zinc runs'
# --gpu-timing records ~2 events per phase, by count ~2,000 a step for L24, a few ms against a
# step of ~1 s, not measured.)
estimate() {
    case "$1" in
        env) echo 15 ;; ctest) echo 110 ;; python) echo 80 ;; offload) echo 20 ;;
        sanitize) echo 150 ;; train) echo 240 ;; adam) echo 120 ;; profile) echo 150 ;;
        e2e) echo $(((140 + ${ZINC_E2E_CKPT:-0} * 50) * $(echo ${ZINC_E2E_MODELS:-a b c} | wc -w))) ;;
        example) echo 30 ;; mpi2) echo 60 ;; pycuda) echo 50 ;;
        gpu_torch) echo "$gpu_torch_budget" ;;
    esac
}

# The carried packages (see "Libraries" above), unpacked where nothing of the system is touched.
if compgen -G "$root/.gpu-debs/*.deb" >/dev/null; then
    deps="$(mktemp -d)/deps"
    for f in "$root"/.gpu-debs/*.deb; do dpkg-deb -x "$f" "$deps" || exit 1; done
    libdir="$deps/usr/lib/$(ls "$deps/usr/lib" | grep -- '-linux-gnu$' | head -1)"
    # (Debian's libzstd.pc says libdir=/usr/lib, where the system's linker path covered for it.)
    sed -i -E -e "s#^([a-z_]+)=/usr#\1=$deps/usr#" -e "s#^libdir=.*#libdir=$libdir#" \
        "$libdir"/pkgconfig/*.pc
    export PKG_CONFIG_PATH="$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
    export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    say "libraries from .gpu-debs: $(cd "$root/.gpu-debs" && ls *.deb | tr '\n' ' ')"
fi

# Open MPI where the machine has no mpirun (see "Libraries" above).
mpi=()
if [ -z "${ZINC_MPIRUN:-}" ] && ! command -v mpirun >/dev/null &&
   compgen -G "$root/.gpu-debs/mpi/*.deb" >/dev/null; then
    ompi="$(mktemp -d)/ompi"
    for f in "$root"/.gpu-debs/mpi/*.deb; do dpkg-deb -x "$f" "$ompi" || exit 1; done
    triplet="$(ls "$ompi/usr/lib" | grep -- '-linux-gnu$' | head -1)"
    olib="$ompi/usr/lib/$triplet"
    for l in libudev.so.1 libnuma.so.1; do
        if ldconfig -p 2>/dev/null | grep -q "$l ("; then rm -f "$olib/$l"* "$ompi/lib/$triplet/$l"*; fi
    done
    mkdir -p "$ompi/bin"
    # (libpsm_infinipath.so.1 is an alternatives link that dpkg's scripts would make.)
    ln -s "$ompi"/usr/lib/libpsm1/libpsm_infinipath.so.1.* "$olib/libpsm_infinipath.so.1"
    ln -s "$ompi/usr/bin/orterun" "$ompi/bin/mpirun"
    ln -s "$ompi/usr/bin/orterun" "$ompi/bin/mpiexec"
    ln -s "$ompi/usr/bin/opal_wrapper" "$ompi/bin/mpicc"    # reads share/openmpi/mpicc-wrapper-data.txt
    export OPAL_PREFIX="$ompi/usr" PMIX_MCA_mca_base_component_path="$olib/pmix2/lib/pmix"
    export PATH="$ompi/bin:$PATH"
    # (Some of Debian's libraries, libnl-3 for one, are still in /lib.)
    export LD_LIBRARY_PATH="$olib:$olib/openmpi/lib:$ompi/lib/$triplet${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    # Without ssh or rsh, Open MPI 4's mpirun stops at its remote launcher even for one node;
    # `isolated` launches on this node only, which is all the phases need.
    if ! [ -x "$(command -v ssh)" ] && ! [ -x "$(command -v rsh)" ]; then
        export OMPI_MCA_plm=isolated
    fi
    mpi=(-DMPI_C_COMPILER="$ompi/bin/mpicc" -DMPIEXEC_EXECUTABLE="$ompi/bin/mpiexec")
    say "open mpi from .gpu-debs/mpi (the machine has no mpirun): $(mpirun --version 2>&1 | head -1)"
elif command -v "${ZINC_MPIRUN:-mpirun}" >/dev/null; then
    say "mpirun: $(command -v "${ZINC_MPIRUN:-mpirun}") ($("${ZINC_MPIRUN:-mpirun}" --version 2>&1 | head -1))"
else
    say "no mpirun and no .gpu-debs/mpi (bench/gpu_lease.sh --get-debs): the mpi2 phase is skipped"
fi

# NCCL: CMake looks beside the CUDA toolkit. Where it is not there, the NCCL of the machine's
# PyTorch (the nvidia-nccl wheel: include/ and lib/libnccl.so.2, no unversioned link) is named.
nccl=()
if ! compgen -G "/usr/local/cuda/lib*/libnccl.so*" >/dev/null; then
    nd="$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)"
    nl="$(ls "$nd"/lib/libnccl.so* 2>/dev/null | head -1)"
    if [ -n "$nl" ] && [ -f "$nd/include/nccl.h" ]; then
        nccl=(-DNCCL_LIBRARY="$nl" -DNCCL_INCLUDE_DIR="$nd/include")
        export LD_LIBRARY_PATH="$nd/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        say "nccl from the python wheel: $nl"
    fi
fi

if [ -z "$build" ]; then
    build="$root/build-cuda"
    t0=$SECONDS
    configure_build() {
        cmake -S "$root" -B "$build" -DZINC_CUDA=ON -DZINC_CUDA_ARCHS=90 "${nccl[@]}" "$@" \
            >>"$logs/build.log" 2>&1 && cmake --build "$build" -j "$(nproc)" >>"$logs/build.log" 2>&1
    }
    if configure_build "${mpi[@]}"; then
        say "build                              rc=0   $((SECONDS - t0)) s"
    elif [ ${#mpi[@]} -gt 0 ] && rm -rf "$build" && configure_build -DZINC_MPI=OFF; then
        # The carried Open MPI never ran on a lent image: a build it breaks must not cost the
        # lease's other phases (mpi2 then says the build has no MPI and is skipped).
        say "build                              rc=0   $((SECONDS - t0)) s, WITHOUT MPI: the build with .gpu-debs/mpi failed (build.log)"
    else
        say "build                              FAILED after $((SECONDS - t0)) s"
        tail -n 40 "$logs/build.log" >>"$summary"
        tar -czf "$out/logs.tar.gz" -C "$logs" .
        cat "$summary"
        exit 1
    fi
fi

status=0
skipped=()
for p in "${phases[@]}"; do
    left=$((budget - (SECONDS - t_start)))
    need=$(estimate "$p")
    # gpu_torch takes what is left, up to its budget, when that still runs its first cells.
    if [ "$p" = gpu_torch ] && [ "$need" -gt $((left - 15)) ] && [ $((left - 15)) -ge 90 ]; then
        need=$((left - 15))
    fi
    if [ "$need" -gt "$left" ]; then
        skipped+=("$p")
        continue
    fi
    say "== $p (about ${need} s, ${left} s left)"
    OUT="$logs/$p" ZINC_PHASE_BUDGET=$need ZINC_PYTHON="${ZINC_PYTHON:-python3}" timeout -k 5 "$left" \
        "$root/bench/gpu_session.sh" "$p" --build "$build" --out "$logs/$p" "${dev[@]}" \
        >"$logs/$p.console" 2>&1
    rc=$?
    # (A step's own `timeout` is a process group of its own, which the stop does not reach: it
    # may run on while the logs are packed; the device tool ends it when the command returns.)
    cat "$logs/$p/summary.txt" >>"$summary" 2>/dev/null
    if [ $rc -eq 124 ]; then
        say "   $p stopped at the budget after $((SECONDS - t_start)) s (its steps so far above)"
        status=1
    fi
    # A step's rc is its column in the summary; a phase with any non-zero one counts as failed.
    if grep -q 'rc=[1-9]' "$logs/$p/summary.txt" 2>/dev/null; then
        status=1
    fi
    [ -f "$logs/$p/meta.txt" ] && cp "$logs/$p/meta.txt" "$out/meta.txt"
done
[ ${#skipped[@]} -eq 0 ] || say "skipped (over the ${budget} s budget): ${skipped[*]}"
say "total $((SECONDS - t_start)) s; $([ $status = 0 ] && echo 'every step rc=0' || echo 'some step failed: see above')"
# Checkpoints and exported weights stay behind (megabytes; the logs and metrics say what they held).
tar -czf "$out/logs.tar.gz" --exclude='ck-*' --exclude='*.safetensors' -C "$logs" .
rm -rf "$logs"
cat "$summary"
exit $status
