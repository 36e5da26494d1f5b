#!/usr/bin/env bash
# multihost-agent.sh: stands in for ssh when MPI "starts a daemon on another host", so that one
# machine plays several hosts (scripts/multihost.sh passes it to Open MPI as plm_rsh_agent and
# to MPICH's hydra as -launcher-exec). It skips ssh's options, takes the host name, and runs the
# command (the words after the host, joined as ssh joins them, through /bin/sh) on this machine
# in a UTS namespace of its own whose host name is that name: gethostname and
# MPI_Get_processor_name then differ per "host", and MPI, which started one daemon per host,
# splits the ranks by host (MPI_Comm_split_type SHARED). Memory, GPUs and /dev/shm stay shared;
# the ranks of different hosts talk over TCP (loopback).
#
# The namespace: `unshare -u` as root; else `unshare -r -u` (a user namespace, where the
# process is root of its own namespace only) where unprivileged user namespaces are allowed.
# Without either it fails, saying so.
#
# usage (by MPI): multihost-agent.sh [ssh options] HOST COMMAND...
set -u
while [[ $# -gt 0 ]]; do
    case $1 in
    -[bcDEeFIiJLlmOopQRSWw]) shift 2 ;; # ssh options that take an argument
    -[bcDEeFIiJLlmOopQRSWw]?*) shift ;; # ... given in the same word (-p22)
    --) shift; break ;;
    -*) shift ;;
    *) break ;;
    esac
done
if [[ $# -lt 2 ]]; then
    echo "multihost-agent.sh: usage: multihost-agent.sh [ssh options] HOST COMMAND..." >&2
    exit 255
fi
host=$1
shift
# The host's name, then the command, inside the new namespace ($0 is the name there).
inner='if command -v hostname > /dev/null 2>&1; then hostname "$0"; else printf %s "$0" > /proc/sys/kernel/hostname; fi || exit 255; shift; exec /bin/sh -c "$*"'
if unshare -u true 2> /dev/null; then
    exec unshare -u /bin/sh -c "$inner" "$host" -- "$*"
elif unshare -r -u true 2> /dev/null; then
    exec unshare -r -u /bin/sh -c "$inner" "$host" -- "$*"
fi
echo "multihost-agent.sh: cannot make a UTS namespace for host $host here: neither 'unshare -u' (needs root or CAP_SYS_ADMIN) nor 'unshare -r -u' (needs unprivileged user namespaces) is permitted" >&2
exit 255
