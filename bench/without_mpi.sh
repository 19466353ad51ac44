#!/bin/bash
# without_mpi.sh CMD... — runs CMD where this machine's Open MPI cannot be seen, as on a lent GPU
# machine without one: to check gpu_lease.sh's use of the Open MPI it carries (.gpu-debs/mpi).
#
#   unshare -m --propagation private bench/without_mpi.sh \
#       env OUT=/tmp/lease-out bench/gpu_lease.sh --device cpu mpi2
#
# Needs root and unshare(1); everything happens in that private mount namespace and ends with
# it. Hidden (Debian's multiarch layout): the Open MPI, PMIx, hwloc, UCX and verbs plugin
# folders, the libraries Open MPI loads (an empty file mounted over each), the mpirun, mpiexec,
# mpicc, ... links (a copy of /etc/alternatives without them) and ssh (Open MPI 4's mpirun then
# needs its `isolated` launcher). libnuma and libudev stay: gpu_lease.sh uses its own only where
# the machine has none.
set -euo pipefail
[ $# -gt 0 ] || { sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 2; }
L=/usr/lib/x86_64-linux-gnu
for d in $L/openmpi $L/pmix2 $L/hwloc $L/ucx $L/libibverbs /usr/share/openmpi /usr/share/pmix \
         /etc/openmpi /usr/include/x86_64-linux-gnu/openmpi; do
    if [ -d "$d" ] && [ ! -L "$d" ]; then mount -t tmpfs none "$d"; fi
done
for f in $L/libmpi* $L/libopen-pal* $L/libopen-rte* $L/libpmix* $L/libhwloc* $L/libevent* \
         $L/libfabric* $L/libucx* $L/libuc[mpst]* $L/libibverbs* $L/librdmacm* $L/libpsm* \
         $L/libmunge* $L/libnl-* $L/liboshmem* $L/libompitrace*; do
    t=$(readlink -f "$f" || true)
    if [ -f "$t" ]; then mount --bind /dev/null "$t"; fi
done
alts=$(mktemp -d)
for a in /etc/alternatives/*; do
    case "${a##*/}" in *mpi*|orte*|opal*|osh*|shmem*) continue ;; esac
    cp -P "$a" "$alts/"
done
mount -t tmpfs none /etc/alternatives
cp -P "$alts"/* /etc/alternatives/
rm -rf "$alts"
if [ -f /usr/bin/ssh ]; then mount --bind /dev/null /usr/bin/ssh; fi
exec "$@"
