#!/bin/sh
# tcp-launch.sh [--by-flags] [--skip R] [--twice R] -np N COMMAND [ARG...]
#
# Starts N copies of COMMAND on this machine for the tcp backend (or nccl
# with a rendezvous), meeting at 127.0.0.1 on a free port, and waits for all
# of them. Each copy learns its rank as srun would tell it (SLURM_PROCID,
# SLURM_NTASKS, SLURM_LOCALID; the port in MFRT_RENDEZVOUS), or, with
# --by-flags, from `--rank R --rendezvous 127.0.0.1:PORT` appended to its
# arguments. For tests: --skip R never starts rank R (a late rank), --twice R
# starts rank R twice (a misconfigured launch), 2 s before the ranks after it.
#
# Exit status: 0 when every copy exited 0, else the first non-zero status in
# start order.
set -u
usage() {
  echo "usage: $0 [--by-flags] [--skip R] [--twice R] -np N COMMAND [ARG...]" >&2
  exit 64
}
byflags=0
skip=-1
twice=-1
np=""
while [ $# -gt 0 ]; do
  case "$1" in
  --by-flags) byflags=1; shift ;;
  --skip) [ $# -ge 2 ] || usage; skip=$2; shift 2 ;;
  --twice) [ $# -ge 2 ] || usage; twice=$2; shift 2 ;;
  -np) [ $# -ge 2 ] || usage; np=$2; shift 2; break ;;
  *) usage ;;
  esac
done
[ -n "$np" ] && [ $# -ge 1 ] || usage
port=$(python3 -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
pids=""
start() {
  if [ "$byflags" = 1 ]; then
    "$@" --rank "$r" --rendezvous "127.0.0.1:$port" &
  else
    SLURM_PROCID=$r SLURM_NTASKS=$np SLURM_LOCALID=$r \
      MFRT_RENDEZVOUS=127.0.0.1:$port "$@" &
  fi
  pids="$pids $!"
}
r=0
while [ "$r" -lt "$np" ]; do
  [ "$r" = "$skip" ] || start "$@"
  if [ "$r" = "$twice" ]; then
    start "$@"
    # Both copies greet rank 0 before the ranks after them start, so that
    # rank 0 sees the second before its rendezvous can complete.
    sleep 2
  fi
  r=$((r + 1))
done
status=0
for pid in $pids; do
  wait "$pid"
  rc=$?
  if [ "$status" -eq 0 ] && [ "$rc" -ne 0 ]; then
    status=$rc
  fi
done
exit "$status"
