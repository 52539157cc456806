#!/usr/bin/env bash
# A real one-node SLURM on this machine, for the tests marked `slurm` (run as root, e.g. by CI).
#
#   bash scripts/slurm_local.sh start    # install, configure and start; prints SLURM_READY on success
#   bash scripts/slurm_local.sh stop     # stop the daemons, remove the namespace
#   bash scripts/slurm_local.sh status   # sinfo, from inside the namespace
#
# Debian's slurm-wlm (22.05) and munge, installed without recommends.  slurmctld and slurmd run in
# a network namespace of their own ($NS) whose only interface is loopback (SLURM listens on every
# interface it has: here that is 127.0.0.1 of the namespace alone; glibc also wants a second
# loopback address there, 127.0.0.2/8, to resolve the node's name).  munged talks over a unix
# socket only.  Jobs are submitted from inside the namespace (`nsenter --net=/run/netns/$NS ...`:
# the network namespace alone, so /sys and its cgroups stay as they are) by an
# ordinary user ($SLURM_USER, default nobody): the tests run them through `setpriv`.
#
# A Python for that user: a virtualenv made from the system Python ($VENV), with this checkout
# installed in it (not editable: the user cannot read a checkout under /root), readable by all.
set -euo pipefail
cd "$(dirname "$0")/.."

NS=${EAGLE_SLURM_NS:-eagle-slurm}
NODE=eagle-node
CONF=/etc/slurm/slurm.conf
VENV=${EAGLE_SLURM_VENV:-/opt/eagle-slurm/venv}
SLURM_USER=${SLURM_USER:-nobody}
RUN="nsenter --net=/run/netns/$NS"

install_packages() {
    if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
    fi
}

write_conf() {
    local cpus mem
    cpus=$(nproc)
    mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))
    mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/slurm
    cat > "$CONF" <<EOF
ClusterName=eagle
SlurmctldHost=$(hostname)(127.0.0.1)
MailProg=/bin/true
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
KillWait=5
FirstJobId=$(first_job_id)
InactiveLimit=0
MinJobAge=30
NodeName=$NODE NodeHostname=$(hostname) NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=60 State=UP OverSubscribe=NO
EOF
    chmod 0644 "$CONF"
}

first_job_id() {
    # Job ids that no earlier start of this bed used: its state is wiped at stop, and an MPI job
    # killed mid-run leaves /dev/shm/mpich_shm_<hash of its PMI name "jobid.step"> behind; a later
    # job given the same id attaches to that stale segment and hangs in MPI_Init.  (A real
    # cluster never reuses a job id.)
    echo $(( $(date +%s) % 40000000 + 1000 ))
}

clean_job_shm() {
    # what killed jobs of the bed's user left in /dev/shm
    find /dev/shm -maxdepth 1 -user "$SLURM_USER" -name 'mpich_shm_*' -delete 2>/dev/null || true
}

make_namespace() {
    ip netns list | grep -qw "$NS" && return 0
    ip netns add "$NS"
    ip -n "$NS" link set lo up
    ip -n "$NS" addr add 127.0.0.2/8 dev lo
}

start_munge() {
    pgrep -x munged >/dev/null && return 0
    mkdir -p /run/munge && chown munge:munge /run/munge && chmod 0755 /run/munge
    [ -s /etc/munge/munge.key ] || { dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 2>/dev/null; }
    chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
    setpriv --reuid munge --regid munge --clear-groups /usr/sbin/munged
}

make_venv() {
    # a Python the job's user can run: the system Python's venv, this checkout installed in it
    if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$VENV/.eagle-rev" 2>/dev/null)" != "$(tree_rev)" ]; then
        rm -rf "$VENV"
        mkdir -p "$(dirname "$VENV")"
        /usr/bin/python3 -m venv "$VENV"
        "$VENV/bin/pip" install -q --disable-pip-version-check "$PWD[mpi,dask,test]" dask-jobqueue >/dev/null 2>&1
        tree_rev > "$VENV/.eagle-rev"
    fi
    chmod -R a+rX "$(dirname "$VENV")"
}

tree_rev() {
    # what is installed in the venv: the checkout's commit and its uncommitted changes
    { git rev-parse HEAD 2>/dev/null; git diff HEAD 2>/dev/null; } | sha256sum | cut -c1-16
}

start() {
    install_packages
    clean_job_shm
    write_conf
    make_namespace
    start_munge
    make_venv
    if ! pgrep -x slurmctld >/dev/null; then
        $RUN /usr/sbin/slurmctld -i
    fi
    if ! pgrep -x slurmd >/dev/null; then
        $RUN /usr/sbin/slurmd -N "$NODE"
    fi
    for _ in $(seq 1 60); do
        if $RUN sinfo -h -o '%T' 2>/dev/null | grep -qE '^idle'; then
            echo "SLURM_READY ns=$NS venv=$VENV user=$SLURM_USER"
            return 0
        fi
        sleep 0.5
    done
    echo "SLURM did not come up within 30 s" >&2
    tail -n 20 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log >&2 || true
    return 1
}

stop() {
    pkill -x slurmd 2>/dev/null || true
    pkill -x slurmctld 2>/dev/null || true
    for _ in $(seq 1 20); do
        pgrep -x slurmd >/dev/null || pgrep -x slurmctld >/dev/null || break
        sleep 0.25
    done
    pkill -9 -x slurmstepd 2>/dev/null || true
    ip netns list | grep -qw "$NS" && ip netns del "$NS" || true
    rm -rf /var/spool/slurmctld/* /var/spool/slurmd/*
    clean_job_shm
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) $RUN sinfo ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
