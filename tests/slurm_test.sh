#!/usr/bin/env bash
# The autoscaler's Slurm provider against a real Slurm: a one-host cluster (munged, slurmctld,
# slurmd from Debian's slurm-wlm and munge) started here in a temporary directory, then the
# autoscaler test's [.slurm] case. Skipped (77) without root or without Slurm.
# Usage: slurm_test.sh AUTOSCALER_TESTS
set -euo pipefail
tests_bin="$1"
for p in munged mungekey slurmctld slurmd sbatch squeue scancel; do
  command -v "$p" >/dev/null || { echo "SKIP: $p is not installed (slurm-wlm, munge)"; exit 77; }
done
[ "$(id -u)" -eq 0 ] || { echo "SKIP: a private Slurm cluster needs root here"; exit 77; }

D=$(mktemp -d /tmp/yard-slurm-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -f "$D/munge/pid" ] && kill "$(cat "$D/munge/pid")" 2>/dev/null || true
  wait 2>/dev/null || true
  [ -n "${YARD_TEST_KEEP:-}" ] || rm -rf "$D"
}
trap cleanup EXIT

mkdir -p "$D/munge" "$D/state" "$D/spool" "$D/log"
chmod 700 "$D/munge"
mungekey -c -k "$D/munge/munge.key"
chmod 600 "$D/munge/munge.key"
munged -f --key-file="$D/munge/munge.key" --socket="$D/munge/sock" --pid-file="$D/munge/pid" \
  --log-file="$D/munge/log" --seed-file="$D/munge/seed"

# Ports of this run's own (a Slurm already on the machine keeps its defaults).
port=$((20000 + RANDOM % 20000))
host=$(hostname)
cat > "$D/slurm.conf" <<CONF
ClusterName=yardtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
AuthInfo=socket=$D/munge/sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
SwitchType=switch/none
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
export SLURM_CONF="$D/slurm.conf"
slurmctld -D -f "$SLURM_CONF" > "$D/log/ctld.out" 2>&1 & pids+=($!)
slurmd -D -f "$SLURM_CONF" > "$D/log/slurmd.out" 2>&1 & pids+=($!)
for _ in $(seq 1 100); do
  sinfo --noheader -o %T 2>/dev/null | grep -q idle && break
  sleep 0.1
done
sinfo --noheader -o %T | grep -q idle || { echo "Slurm did not come up:"; tail -20 "$D"/log/*; exit 1; }
echo "Slurm up: $(sinfo --noheader -o '%P %D %T')"
"$tests_bin" "[.slurm]"
