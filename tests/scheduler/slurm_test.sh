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

# Ports of this run's own (a Slurm already on the machine keeps its defaults): two free ones in a
# row, as the kernel gave them, so that a test beside this one does not hold them already.
port=$(python3 -c '
import socket
while True:
    a = socket.socket(); a.bind(("127.0.0.1", 0)); p = a.getsockname()[1]
    b = socket.socket()
    try:
        b.bind(("127.0.0.1", p + 1)); print(p); break
    except OSError:
        pass
    finally:
        a.close(); b.close()')
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
ctld=$!
slurmd -D -f "$SLURM_CONF" > "$D/log/slurmd.out" 2>&1 & pids+=($!)
# Up within 30 s, each question bounded (sinfo waits long for a controller that is not there).
end=$(( $(date +%s) + 30 ))
until timeout 3 sinfo --noheader -o %T 2>/dev/null | grep -q idle; do
  kill -0 "$ctld" 2>/dev/null || { echo "slurmctld exited:"; tail -20 "$D"/log/*; exit 1; }
  [ "$(date +%s)" -lt "$end" ] || { echo "Slurm did not come up in 30 s:"; tail -20 "$D"/log/*; exit 1; }
  sleep 0.1
done
echo "Slurm up: $(sinfo --noheader -o '%P %D %T')"
"$tests_bin" "[.slurm]"
