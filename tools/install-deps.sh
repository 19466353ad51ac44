#!/usr/bin/env bash
# Installs the system packages zinc builds against, skipping what is present.
# Debian/Ubuntu (apt-get); uses sudo when not root. The CUDA toolkit is not installed here: when
# nvcc is present the CUDA backend is built too, otherwise the CPU build goes ahead without it.
#
#   install-deps.sh          what `make run` and `make test` need
#   install-deps.sh fuzz     also clang and its libFuzzer runtime (make fuzz), unless clang is there
set -euo pipefail

# python3-torch (Debian, CPU): the `import zinc` tests (label python) run with it; it installs
# for /usr/bin/python3. python3-pyflakes: python_lint, which reads the CUDA-only branches of the
# front-end that no CPU test executes (a missing import there stops only a GPU run).
# liburing-dev: the NVMe store's asynchronous I/O (engine/nvme_store.c; optional to the build).
pkgs=(build-essential cmake pkg-config libjson-c-dev libzstd-dev libxxhash-dev libopenmpi-dev openmpi-bin
      python3-torch python3-pyflakes liburing-dev)
optional=()   # installed when the distribution has them (checked after apt-get update)
if [ "${1:-}" = fuzz ] && ! command -v clang >/dev/null; then
  pkgs+=(clang)
  # Debian 12 ships libFuzzer in libclang-rt-dev (only recommended by clang); older releases
  # have it in clang's own packages.
  optional+=(libclang-rt-dev)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "install-deps: missing packages (${missing[*]}) and no apt-get here; install them by hand" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
for p in "${optional[@]}"; do
  apt-cache show "$p" >/dev/null 2>&1 && missing+=("$p")
done
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
