#!/usr/bin/env bash
# multihost.sh: runs an MPI program as several hosts on this one machine: host h (h = 0, 1, ...)
# is named 127.0.0.(h+2) and gets the h-th count of SLOTS ranks, placed in order (ranks 0..n0-1
# on the first host, and so on). MPI starts one daemon per host through
# scripts/multihost-agent.sh in place of ssh (Open MPI: plm_rsh_agent; MPICH hydra:
# -launcher ssh -launcher-exec), which gives each its own host name (a UTS namespace): to MPI
# and to gpuwire the hosts are separate nodes (MPI_Get_processor_name, MPI_Comm_split_type
# SHARED), and ranks of different hosts talk over TCP on the loopback interface. Needs no sshd
# and changes nothing on the machine.
#
# usage: scripts/multihost.sh openmpi|mpich SLOTS PROGRAM [ARGS...]
#   SLOTS   ranks per host, comma-separated: 2,2 (2 hosts x 2 ranks), 1,2,1, 1,1
#   openmpi uses mpirun (MULTIHOST_MPIRUN overrides it: another Open MPI's mpirun); OMPI_MCA_plm
#           is set to rsh (machines that set it to isolated launch on the local host only), and
#           the TCP transports to the loopback interface unless OMPI_MCA_btl_tcp_if_include /
#           _exclude (oob_tcp_...) are set. As root, OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM) are set.
#   mpich   uses mpiexec.mpich (MULTIHOST_MPIEXEC overrides it).
#   MULTIHOST_LAUNCHER_ARGS: extra launcher arguments (split on spaces), before PROGRAM.
# The environment reaches every rank (the daemons are started from this process). The exit
# status is the launcher's.
set -u
usage() { echo "usage: $0 openmpi|mpich SLOTS PROGRAM [ARGS...]  (SLOTS: ranks per host, e.g. 2,2 or 1,2,1)" >&2; exit 2; }
[[ $# -ge 3 ]] || usage
mpi=$1 slots=$2
shift 2
[[ $slots =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || usage
agent=$(cd "$(dirname "$0")" && pwd)/multihost-agent.sh
IFS=, read -r -a counts <<< "$slots"
(( ${#counts[@]} <= 250 )) || usage
n=0 hosts=() spec=()
for i in "${!counts[@]}"; do
    hosts+=("127.0.0.$((i + 2))")
    spec+=("127.0.0.$((i + 2)):${counts[$i]}")
    n=$((n + counts[i]))
done
# shellcheck disable=SC2206 # extra arguments split on spaces, on purpose
extra=(${MULTIHOST_LAUNCHER_ARGS:-})
case $mpi in
openmpi)
    if [[ $(id -u) -eq 0 ]]; then
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    fi
    export OMPI_MCA_plm=rsh
    if [[ -z ${OMPI_MCA_btl_tcp_if_include:-}${OMPI_MCA_btl_tcp_if_exclude:-} ]]; then
        export OMPI_MCA_btl_tcp_if_include=lo
    fi
    if [[ -z ${OMPI_MCA_oob_tcp_if_include:-}${OMPI_MCA_oob_tcp_if_exclude:-} ]]; then
        export OMPI_MCA_oob_tcp_if_include=lo
    fi
    hostfile=$(mktemp "${TMPDIR:-/tmp}/multihost.XXXXXX")
    trap 'rm -f "$hostfile"' EXIT
    for i in "${!counts[@]}"; do
        echo "${hosts[$i]} slots=${counts[$i]}"
    done > "$hostfile"
    # No tree spawn: mpirun starts every daemon itself (each through the agent).
    ${MULTIHOST_MPIRUN:-mpirun} --bind-to none --mca plm rsh --mca plm_rsh_agent "$agent" \
        --mca plm_rsh_no_tree_spawn 1 --hostfile "$hostfile" --map-by slot -n "$n" "${extra[@]}" "$@"
    ;;
mpich)
    hostlist=$(IFS=,; echo "${spec[*]}")
    ${MULTIHOST_MPIEXEC:-mpiexec.mpich} -launcher ssh -launcher-exec "$agent" -hosts "$hostlist" \
        -n "$n" "${extra[@]}" "$@"
    ;;
*) usage ;;
esac
