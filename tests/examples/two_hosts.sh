# Two simulated hosts on one machine, for tests that run Open MPI jobs over
# TCP and cut the link mid-run. Source this file (bash), then:
#
#   two_hosts_available || { echo "SKIP: $TWO_HOSTS_WHY"; exit 0; }
#   two_hosts_up                       # teardown (two_hosts_down) is trapped
#   run_on_two_hosts ./prog args       # one rank per host; returns mpirun's status
#   run_on_two_hosts ./prog & sleep 2; cut_link; wait $!
#
# Each host is a network namespace (own UTS hostname too, set per process with
# unshare --uts) joined to the other by a veth pair on a random 10.x.y.0/24.
# Variables LOOM_* and those named in TWO_HOSTS_ENV reach the ranks; mpirun is
# killed after TWO_HOSTS_TIMEOUT seconds (default 300). Needs root, iproute2,
# util-linux and Open MPI 4.x.
#
# After cut_link Open MPI neither errors nor exits by itself for many minutes
# (TCP retransmits ~15 min), and MPI_Abort hangs too: mpirun waits for the
# unreachable daemon. So the hosts detect a dead peer in about
# TWO_HOSTS_DETECT_SECONDS (default 20): OOB keepalives for an idle link,
# fewer TCP retransmissions (tcp_retries2, per namespace) for a busy one.
# Keep an application watchdog meant to fire first well below that.

two_hosts_available() {
  TWO_HOSTS_WHY=
  local tool probe="t$BASHPID-chk"
  for tool in ip unshare mpirun timeout; do
    command -v "$tool" > /dev/null || { TWO_HOSTS_WHY="no $tool"; break; }
  done
  [ -n "$TWO_HOSTS_WHY" ] || [ "$(id -u)" = 0 ] || TWO_HOSTS_WHY="not root"
  if [ -z "$TWO_HOSTS_WHY" ]; then
    if ip netns add "$probe" 2> /dev/null && ip netns exec "$probe" unshare --uts true 2> /dev/null; then :
    else TWO_HOSTS_WHY="cannot create network/UTS namespaces (CAP_SYS_ADMIN?)"; fi
    ip netns del "$probe" 2> /dev/null || true
  fi
  [ -z "$TWO_HOSTS_WHY" ] || { echo "two_hosts: unavailable: $TWO_HOSTS_WHY" >&2; return 1; }
}

two_hosts_up() {
  _two_hosts_gc
  local sfx; sfx=$(printf %04x $((RANDOM)))   # names t<pid>-<rand>a/b: <= 14 chars
  TWO_HOSTS_NS=("t$BASHPID-${sfx}a" "t$BASHPID-${sfx}b")
  local net used
  used=$(ip -o -4 addr show)
  while net=10.$((RANDOM % 200 + 50)).$((RANDOM % 256)); grep -q " $net\." <<< "$used"; do :; done
  TWO_HOSTS_IP=("$net.1" "$net.2")
  TWO_HOSTS_NAME=("hosta$sfx" "hostb$sfx")
  TWO_HOSTS_CIDR="$net.0/24"
  TWO_HOSTS_DIR=$(mktemp -d /tmp/two_hosts.XXXXXX)
  trap two_hosts_down EXIT   # replaces the caller's traps; call two_hosts_down in yours
  trap 'two_hosts_down; exit 130' INT
  trap 'two_hosts_down; exit 143' TERM
  ip netns add "${TWO_HOSTS_NS[0]}" && ip netns add "${TWO_HOSTS_NS[1]}" || return 1
  # Both ends are created inside their namespaces, so "th0" never clashes.
  ip link add th0 netns "${TWO_HOSTS_NS[0]}" type veth peer name th0 netns "${TWO_HOSTS_NS[1]}" || return 1
  # TCP gives up after 0.2s * (2^(retries+1) - 1) of retransmissions (veth RTO is 200ms).
  local i retries=1
  while (( 2 ** (retries + 1) - 1 < ${TWO_HOSTS_DETECT_SECONDS:-20} * 5 )); do retries=$((retries + 1)); done
  for i in 0 1; do
    ip -n "${TWO_HOSTS_NS[i]}" addr add "${TWO_HOSTS_IP[i]}/24" dev th0 &&
      ip -n "${TWO_HOSTS_NS[i]}" link set th0 up && ip -n "${TWO_HOSTS_NS[i]}" link set lo up &&
      ip netns exec "${TWO_HOSTS_NS[i]}" sh -c "echo $retries > /proc/sys/net/ipv4/tcp_retries2" || return 1
  done
  # Open MPI's rsh launcher calls "agent <host> <orted command line>"; the
  # agent runs that command line on the host whose IP it was given.
  cat > "$TWO_HOSTS_DIR/agent" << EOF
#!/bin/sh
case "\$1" in
  ${TWO_HOSTS_IP[0]}) ns=${TWO_HOSTS_NS[0]} name=${TWO_HOSTS_NAME[0]} ;;
  ${TWO_HOSTS_IP[1]}) ns=${TWO_HOSTS_NS[1]} name=${TWO_HOSTS_NAME[1]} ;;
  *) echo "two_hosts agent: unknown host \$1" >&2; exit 1 ;;
esac
shift
exec ip netns exec "\$ns" unshare --uts sh -c 'hostname "\$1"; shift; exec sh -c "\$*"' sh "\$name" "\$@"
EOF
  chmod +x "$TWO_HOSTS_DIR/agent"
}

# run_on_two_hosts PROGRAM [ARGS...]: rank 0 on host a, rank 1 on host b.
run_on_two_hosts() {
  local var env=()
  for var in $(compgen -e LOOM_) ${TWO_HOSTS_ENV:-}; do env+=(-x "$var"); done
  local status=0 pid
  # In the background: a trapped TERM/INT interrupts "wait" but not a foreground
  # child, and timeout moves mpirun out of our process group.
  timeout -k 5 "${TWO_HOSTS_TIMEOUT:-300}" \
    ip netns exec "${TWO_HOSTS_NS[0]}" unshare --uts sh -c 'hostname "$1"; shift; exec "$@"' sh "${TWO_HOSTS_NAME[0]}" \
    mpirun --allow-run-as-root -np 2 --host "${TWO_HOSTS_IP[0]}:1,${TWO_HOSTS_IP[1]}:1" --bind-to none \
    --mca plm_rsh_agent "$TWO_HOSTS_DIR/agent" `# start host b's orted inside its namespace` \
    --mca pml ob1 --mca osc ^ucx `# Debian builds UCX, which would bypass the btl choice` \
    --mca btl tcp,self `# no shared memory (vader) between the "hosts"` \
    --mca btl_tcp_if_include "$TWO_HOSTS_CIDR" --mca oob_tcp_if_include "$TWO_HOSTS_CIDR" `# only the veth` \
    --mca oob_tcp_keepalive_time 1 --mca oob_tcp_keepalive_intvl 1 \
    --mca oob_tcp_keepalive_probes "${TWO_HOSTS_DETECT_SECONDS:-20}" `# mpirun notices a dead idle link` \
    "${env[@]}" "$@" &
  pid=$!
  wait "$pid" || status=$?
  _two_hosts_kill   # a cut link leaves host b's orted and rank behind
  return "$status"
}

# cut_link: take host b's end of the veth down; packets between the hosts are
# silently lost from then on (no RST, no ICMP), like a pulled cable.
cut_link() { ip -n "${TWO_HOSTS_NS[1]}" link set th0 down; }

two_hosts_down() {
  [ -n "${TWO_HOSTS_DIR:-}" ] || return 0
  _two_hosts_kill
  ip netns del "${TWO_HOSTS_NS[0]}" 2> /dev/null || true
  ip netns del "${TWO_HOSTS_NS[1]}" 2> /dev/null || true
  rm -rf "$TWO_HOSTS_DIR"; TWO_HOSTS_DIR=
}

_two_hosts_kill() {  # SIGKILL everything left in our namespaces, and wait for it
  local ns pids n
  for n in 1 2 3 4 5 6 7 8 9 10; do
    pids=$(for ns in "${TWO_HOSTS_NS[@]}"; do ip netns pids "$ns" 2> /dev/null; done)
    [ -n "$pids" ] || return 0
    kill -9 $pids 2> /dev/null || true
    sleep 0.2
  done
}

_two_hosts_gc() {  # namespaces of earlier runs whose shell died without teardown
  local ns pid
  for ns in $(ip netns list | grep -o '^t[0-9]*-[0-9a-f]\{4\}[ab]'); do
    pid=${ns#t}; pid=${pid%%-*}
    kill -0 "$pid" 2> /dev/null && continue
    kill -9 $(ip netns pids "$ns" 2> /dev/null) 2> /dev/null || true
    ip netns del "$ns" 2> /dev/null || true
  done
}
