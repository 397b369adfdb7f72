#!/usr/bin/env bash
# A real Slurm on this one machine, for agentforge's launch tests: Debian's slurmctld + two slurmd daemons playing
# the nodes n1 and n2 (both at 127.0.0.1, distinct ports), munge for auth, no systemd, no accounting database.
#
#   bash scripts/slurm_local.sh start    # install (apt, once, ~20 s) and start; prints `export SLURM_CONF=...`
#   bash scripts/slurm_local.sh status   # sinfo
#   bash scripts/slurm_local.sh stop     # stop the daemons this script started (by their pid files)
#
# Everything lives under $AGENTFORGE_SLURM_DIR (default /tmp/agentforge-slurm): config, state, spool, logs, pids.
# Client commands need SLURM_CONF=$AGENTFORGE_SLURM_DIR/slurm.conf (the tests set it). Exit status 3: Slurm cannot
# run here (no root, no apt, a daemon that does not start), with the reason on stderr.
set -euo pipefail
DIR=${AGENTFORGE_SLURM_DIR:-/tmp/agentforge-slurm}
CPUS_PER_NODE=${AGENTFORGE_SLURM_CPUS:-2}
HOST=$(hostname)
CONF=$DIR/slurm.conf

cannot() { echo "slurm_local: cannot run Slurm here: $*" >&2; exit 3; }

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

install_packages() {
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null && \
    command -v sbatch >/dev/null && return 0
  [ "$(id -u)" = 0 ] || { command -v sudo >/dev/null && sudo -n true 2>/dev/null; } || \
    cannot "the Slurm packages are missing and installing them needs root (apt-get install slurmctld slurmd slurm-client munge)"
  local SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo -n"
  command -v apt-get >/dev/null || cannot "no apt-get to install slurmctld slurmd slurm-client munge"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q slurmctld slurmd slurm-client munge >/dev/null 2>&1 || \
    { $SUDO apt-get update -q >/dev/null 2>&1 && \
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q slurmctld slurmd slurm-client munge >/dev/null 2>&1; } || \
    cannot "apt-get install slurmctld slurmd slurm-client munge failed"
}

write_conf() {
  mkdir -p "$DIR/state" "$DIR/spool/n1" "$DIR/spool/n2" "$DIR/log"
  cat > "$CONF" <<EOF
# written by scripts/slurm_local.sh: two emulated nodes on one machine
ClusterName=agentforge
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=16817
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobRequeue=1
KillWait=20
MinJobAge=600
SlurmdTimeout=60
InactiveLimit=0
NodeName=n[1-2] NodeHostname=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS_PER_NODE Port=17001-17002 State=UNKNOWN
PartitionName=debug Nodes=n[1-2] Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
}

start() {
  install_packages
  write_conf
  export SLURM_CONF=$CONF
  if ! pgrep -u munge -x munged >/dev/null; then
    mkdir -p /run/munge && chown munge:munge /run/munge 2>/dev/null || true
    runuser -u munge -- /usr/sbin/munged 2>/dev/null || /usr/sbin/munged --force 2>/dev/null || \
      cannot "munged does not start (see /var/log/munge/munged.log)"
  fi
  pid_alive "$DIR/slurmctld.pid" || slurmctld -f "$CONF" || cannot "slurmctld does not start ($DIR/log/slurmctld.log)"
  for node in n1 n2; do
    pid_alive "$DIR/slurmd.$node.pid" || slurmd -f "$CONF" -N "$node" || \
      cannot "slurmd -N $node does not start ($DIR/log/slurmd.$node.log)"
  done
  for _ in $(seq 1 30); do  # both nodes idle (or allocated by a previous job) within ~15 s
    if [ "$(sinfo -h -N -o '%T' 2>/dev/null | grep -cE 'idle|mixed|allocated')" = 2 ]; then
      echo "export SLURM_CONF=$CONF"
      return 0
    fi
    sleep 0.5
  done
  sinfo -N >&2 || true
  cannot "the nodes n1, n2 did not become idle within 15 s ($DIR/log/)"
}

stop() {
  for f in "$DIR"/slurmd.n1.pid "$DIR"/slurmd.n2.pid "$DIR"/slurmctld.pid; do
    pid_alive "$f" && kill "$(cat "$f")"
  done
  return 0
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  status) SLURM_CONF=$CONF sinfo -N ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
