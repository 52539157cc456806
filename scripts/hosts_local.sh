#!/usr/bin/env bash
# A bed of several "hosts" on this machine, for the tests marked `hosts` (run as root, e.g. by CI).
#
#   bash scripts/hosts_local.sh up [N]          # N hosts (default 3, at most 5); prints HOSTS_READY
#   bash scripts/hosts_local.sh down            # removes everything (idempotent, whatever state it is in)
#   bash scripts/hosts_local.sh run HOST CMD... # runs CMD on HOST (eagle-h1, h1 or 1)
#   bash scripts/hosts_local.sh status          # the hosts, their addresses and links
#
# Host i is a set of namespaces of its own: a network namespace (/run/netns/eagle-h$i) whose only
# interfaces are loopback and a veth `eth0` with address $NET.$((10+i))/24, a UTS namespace with
# the host name eagle-h$i, and a mount namespace with a fresh tmpfs on /dev/shm and an /etc/hosts
# naming every host.  The UTS and mount namespaces are kept in files under $DIR (a private bind
# mount), entered with nsenter by `run`.  The other ends of the veths meet on a bridge inside a
# namespace of its own (the switch, /run/netns/eagle-sw): nothing in the root namespace has an
# address of $NET.0/24 or a route to it, and no host has a route out of it.  Each link is shaped
# in both directions: rate and delay with netem where the kernel has it, a rate (tbf) alone else.
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=/run/eagle-hosts
SW=eagle-sw
NET=${EAGLE_HOSTS_NET:-10.213.77}
RATE=${EAGLE_HOSTS_RATE:-1gbit}
DELAY=${EAGLE_HOSTS_DELAY:-200us}
MAX=5

host_index() {
    local h=${1#eagle-}
    h=${h#h}
    [[ "$h" =~ ^[0-9]+$ ]] && [ "$h" -lt "$MAX" ] || { echo "no such host: $1 (eagle-h0 .. eagle-h$((MAX - 1)))" >&2; exit 2; }
    echo "$h"
}

enter() {   # the nsenter arguments of host $1 (an index)
    echo "--net=/run/netns/eagle-h$1 --uts=$DIR/h$1.uts --mount=$DIR/h$1.mnt"
}

shape() {   # shape() NETNS DEV: rate and delay, or a rate alone without netem
    if ip netns exec "$1" tc qdisc replace dev "$2" root netem rate "$RATE" delay "$DELAY" 2>/dev/null; then
        echo "netem"
    else
        ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate "$RATE" burst 256kb latency 50ms
        echo "tbf"
    fi
}

up() {
    local n=${1:-3} i shaper=""
    [[ "$n" =~ ^[1-9]$ ]] && [ "$n" -le "$MAX" ] || { echo "up N: N is 1 to $MAX hosts, not $n" >&2; exit 2; }
    [ "$(id -u)" = 0 ] || { echo "hosts_local.sh: needs root (namespaces, veths)" >&2; exit 1; }
    down
    mkdir -p "$DIR"
    mount --bind "$DIR" "$DIR"
    mount --make-private "$DIR"
    : > "$DIR/hosts"
    echo "127.0.0.1 localhost" >> "$DIR/hosts"
    for i in $(seq 0 $((n - 1))); do echo "$NET.$((10 + i)) eagle-h$i" >> "$DIR/hosts"; done
    chmod 0644 "$DIR/hosts"
    ip netns add "$SW"
    ip netns exec "$SW" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
    ip -n "$SW" link add br0 type bridge
    ip -n "$SW" link set br0 up
    for i in $(seq 0 $((n - 1))); do
        ip netns add "eagle-h$i"
        ip netns exec "eagle-h$i" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
        ip -n "$SW" link add "sw$i" type veth peer name eth0 netns "eagle-h$i"
        ip -n "$SW" link set "sw$i" master br0 up
        ip -n "eagle-h$i" link set lo up
        ip -n "eagle-h$i" addr add "$NET.$((10 + i))/24" dev eth0
        ip -n "eagle-h$i" link set eth0 up
        shaper=$(shape "$SW" "sw$i")
        shape "eagle-h$i" eth0 >/dev/null
        touch "$DIR/h$i.uts" "$DIR/h$i.mnt"
        unshare --uts="$DIR/h$i.uts" --mount="$DIR/h$i.mnt" --propagation private sh -ec "
            hostname eagle-h$i
            mount -t tmpfs -o mode=1777,size=512m tmpfs /dev/shm
            mount --bind $DIR/hosts /etc/hosts"
    done
    check "$n"
    echo "HOSTS_READY n=$n net=$NET.0/24 shaper=$shaper rate=$RATE delay=$([ "$shaper" = netem ] && echo "$DELAY" || echo none)"
}

check() {   # every host reaches eagle-h0 over the bridge (a TCP connection, by name)
    local n=$1 i
    nsenter $(enter 0) python3 -c "
import socket, sys
s = socket.create_server(('$NET.10', 9999)); s.settimeout(10)
for _ in range($n - 1): s.accept()[0].close()" &
    local server=$!
    for i in $(seq 1 $((n - 1))); do
        nsenter $(enter "$i") python3 -c "
import socket, time
for _ in range(50):
    try: socket.create_connection(('eagle-h0', 9999), timeout=5).close(); break
    except OSError: time.sleep(0.1)
else: raise SystemExit('eagle-h$i cannot reach eagle-h0')"
    done
    wait "$server" || { echo "the hosts cannot reach each other" >&2; exit 1; }
}

down() {
    local ns pid f
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^(eagle-h[0-9]+|$SW)$" || true); do
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
        ip netns del "$ns" 2>/dev/null || true
    done
    if [ -d "$DIR" ]; then
        for f in "$DIR"/h*.uts "$DIR"/h*.mnt; do
            [ -e "$f" ] && { umount "$f" 2>/dev/null || true; }
        done
        while mountpoint -q "$DIR"; do umount "$DIR" 2>/dev/null || break; done
        rm -rf "$DIR"
    fi
}

status() {
    local i
    for i in $(seq 0 $((MAX - 1))); do
        [ -e "/run/netns/eagle-h$i" ] || continue
        echo "eagle-h$i: $(nsenter $(enter "$i") hostname) $(ip -n "eagle-h$i" -br addr show eth0)"
        ip -n "eagle-h$i" -s link show eth0 | sed -n '3,6p'
        ip netns exec "eagle-h$i" tc qdisc show dev eth0
    done
}

case "${1:-}" in
    up) up "${2:-3}" ;;
    down) down ;;
    status) status ;;
    run)
        [ $# -ge 3 ] || { echo "usage: $0 run HOST CMD..." >&2; exit 2; }
        i=$(host_index "$2"); shift 2
        [ -e "$DIR/h$i.mnt" ] || { echo "eagle-h$i is not up: bash $0 up" >&2; exit 1; }
        exec nsenter $(enter "$i") -- "$@" ;;
    *) echo "usage: $0 up [N]|down|run HOST CMD...|status" >&2; exit 2 ;;
esac
