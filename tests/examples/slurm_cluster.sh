# A one-node Slurm cluster in a temporary folder, for tests that submit
# real sbatch jobs. Source this file (bash), then:
#
#   slurm_available || skip_test "$SLURM_WHY"
#   slurm_up || { echo "FAIL: $SLURM_WHY"; exit 1; }   # exports SLURM_CONF; slurm_down is trapped
#   job=$(sbatch --parsable script.sbatch ...)
#   slurm_wait_done "$job" 300                           # until it has finished
#   [ "$(slurm_job_state "$job")" = COMPLETED ]
#
# Nothing of the machine's own setup is read or changed: the cluster's
# slurm.conf, munge key and socket, state, spool, pid and log files all live
# in SLURM_DIR (mktemp under /tmp: a socket path must fit in 108 bytes), its
# ports are chosen free at random, and the daemons run in the foreground as
# this shell's children: munged (its own key and socket), slurmctld -D and
# slurmd -D, all as root (SlurmUser=root), with SLURM_CONF pointing at the
# generated file. slurm_down stops them by their pids and removes the folder
# (SLURM_KEEP=1 keeps it, to read the logs).
#
# No cgroups and no accounting: proctrack/linuxproc finds a job's processes
# through /proc, task/none binds nothing, and without slurmdbd sacct knows
# nothing: a job's state is scontrol's (slurm_job_state). Needs root and
# Debian's slurmctld, slurmd, slurm-client and munge (Slurm 22.05, munge 0.5.15).

slurm_available() {
  SLURM_WHY=
  local tool
  for tool in slurmctld slurmd sbatch squeue sinfo scontrol scancel munged mungekey; do
    command -v "$tool" > /dev/null || { SLURM_WHY="no $tool (Debian packages slurmctld slurmd slurm-client munge)"; break; }
  done
  [ -n "$SLURM_WHY" ] || [ "$(id -u)" = 0 ] || SLURM_WHY="not root (slurmd must start jobs as their user)"
  [ -z "$SLURM_WHY" ] || { SLURM_WHY="cannot run a Slurm cluster here: $SLURM_WHY"; return 1; }
}

# A free TCP port on 127.0.0.1 (one nobody listens on now), below Linux's
# ephemeral range (32768-60999), where any client's connection may take it.
_slurm_free_port() {
  local port
  while port=$((RANDOM % 12000 + 20000)); (exec 3<> "/dev/tcp/127.0.0.1/$port") 2> /dev/null; do :; done
  echo "$port"
}

slurm_up() {
  SLURM_WHY=
  SLURM_DIR=$(mktemp -d /tmp/slurm.XXXXXX)
  SLURM_PIDS=()
  trap slurm_down EXIT   # replaces the caller's traps; call slurm_down in yours
  trap 'slurm_down; exit 130' INT
  trap 'slurm_down; exit 143' TERM
  local d=$SLURM_DIR node cpus
  node=$(hostname -s)
  cpus=$(nproc)
  mkdir -p "$d/munge" "$d/state" "$d/spool" "$d/tmp" && chmod 700 "$d/munge" || return 1
  # munged checks that its key and socket folders are private; mungekey makes a 1024-byte key.
  mungekey --create --keyfile="$d/munge/munge.key" 2> "$d/mungekey.log" \
    || { SLURM_WHY="mungekey failed: $(cat "$d/mungekey.log")"; return 1; }
  export MUNGE_SOCKET=$d/munge/socket   # munge's own clients (munge, unmunge) read it
  munged --foreground --force --socket="$MUNGE_SOCKET" --key-file="$d/munge/munge.key" \
    --log-file="$d/munged.log" --pid-file="$d/munged.pid" --seed-file="$d/munge/seed" > /dev/null 2>&1 &
  SLURM_PIDS+=($!)
  cat > "$d/slurm.conf" <<EOF
ClusterName=loomtest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$(_slurm_free_port)
SlurmdPort=$(_slurm_free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# A requeued job may start again only once its old credentials expire
# (cred_expire + 1 s; 120 s by default): starting it sooner, slurmd refuses
# its launch ("Job credential revoked"). 20 s still leaves a loaded machine
# time to launch a step on a fresh credential.
AuthInfo=socket=$MUNGE_SOCKET,cred_expire=20
StateSaveLocation=$d/state
# Other clusters like this one may run at once (tests in parallel): job ids
# of their own, and the PMIx plugin's folders (/tmp/spmix_appdir_<uid>_<job>.<step>
# by default) in this cluster's folder.
FirstJobId=$((RANDOM * 1000 + 1000))
TmpFS=$d/tmp
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.pid
SlurmctldLogFile=$d/slurmctld.log
SlurmdLogFile=$d/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
# A cancelled or requeued job's steps get this long after SIGTERM before SIGKILL.
KillWait=30
# A finished job stays known this long, so scontrol requeue can still start it again.
MinJobAge=300
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
  export SLURM_CONF=$d/slurm.conf
  slurmctld -D -i -f "$SLURM_CONF" > "$d/slurmctld.out" 2>&1 &
  SLURM_PIDS+=($!)
  slurmd -D -N "$node" -f "$SLURM_CONF" > "$d/slurmd.out" 2>&1 &
  SLURM_PIDS+=($!)
  local i state=
  for i in $(seq 120); do
    state=$(sinfo -h -N -o %T 2> /dev/null) || state=
    [ "$state" = idle ] && return 0
    local pid
    for pid in "${SLURM_PIDS[@]}"; do
      kill -0 "$pid" 2> /dev/null || { SLURM_WHY="a daemon exited at start"; break 2; }
    done
    sleep 0.5
  done
  SLURM_WHY="${SLURM_WHY:-the node is not idle after 60 s (sinfo: '$state')}; logs:"
  local log
  for log in munged.log slurmctld.log slurmctld.out slurmd.log slurmd.out; do
    [ -s "$d/$log" ] && SLURM_WHY+=$'\n'"--- $log"$'\n'"$(tail -n 15 "$d/$log")"
  done
  return 1
}

# JOB's state as the controller has it (RUNNING, PENDING, COMPLETED, FAILED,
# ...; scontrol knows a finished job for MinJobAge), or nothing when it
# cannot be asked: squeue -j leaves out finished jobs, and a client that
# times out prints nothing either, so neither may mean "done".
slurm_job_state() {
  scontrol show job "$1" 2> /dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2
}

# Waits until JOB's state is one of STATES ("A|B"; at most SECONDS, default 120).
slurm_wait_state() {
  local job=$1 states=$2 i state
  for i in $(seq $((${3:-120} * 10))); do
    state=$(slurm_job_state "$job")
    [[ "|$states|" == *"|$state|"* ]] && [ -n "$state" ] && return 0
    sleep 0.1
  done
  echo "slurm: job $job not $states after ${3:-120} s: $(scontrol show job "$job" 2>&1)" >&2
  return 1
}

# Waits until JOB has finished, however (at most SECONDS, default 300).
slurm_wait_done() {
  slurm_wait_state "$1" "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED" \
    "${2:-300}"
}

slurm_down() {
  local pid i
  [ -n "${SLURM_CONF:-}" ] && scancel --quiet --user="$(id -un)" 2> /dev/null
  # slurmd first (it ends its jobs' steps), then the controller, then munged.
  for ((i = ${#SLURM_PIDS[@]} - 1; i >= 0; i--)); do
    pid=${SLURM_PIDS[i]}
    kill "$pid" 2> /dev/null && { timeout 10 tail --pid="$pid" -f /dev/null || kill -9 "$pid" 2> /dev/null; }
  done
  SLURM_PIDS=()
  if [ -n "${SLURM_DIR:-}" ] && [ -z "${SLURM_KEEP:-}" ]; then rm -rf "$SLURM_DIR"; fi
}
