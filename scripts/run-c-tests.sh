#!/usr/bin/env bash
# run-c-tests.sh: builds gpuwire's tests and examples in C, C++ and Fortran against one MPI and
# runs them on 1, 2 and 3 ranks, with the Python example where an mpi4py for that MPI exists.
# Prints one PASS/FAIL/SKIP line per test, then "c-FLAVOUR: N passed, N failed, N skipped".
#
# usage: scripts/run-c-tests.sh openmpi|mpich [--sanitize]
#   openmpi     mpicc, mpicxx, mpifort, mpirun; links TARGET/debug/libgpuwire.so (from
#               `cargo build`)
#   mpich       mpicc.mpich, mpicxx.mpich, mpifort.mpich, mpiexec.mpich; links
#               TARGET/mpich/debug/libgpuwire.so (from `MPICC=mpicc.mpich
#               CARGO_TARGET_DIR=TARGET/mpich cargo build`)
#   TARGET is $CARGO_TARGET_DIR (relative to the current directory, as for cargo) when set, else
#   the checkout's target/.
#   --sanitize  builds every C, C++ and Fortran program with -fsanitize=address,undefined
#               (Open MPI only; no Python run)
#
# Several hosts: as 2 hosts x 2 ranks and 3 hosts with 1, 2, 1 ranks on this machine
# (scripts/multihost.sh), tests/c/test_multihost.c, test_comm, test_p2p and test_darray (not with
# --sanitize).
# C: tests/c, examples-c. C++: tests/c/test_header.cpp, tests/cpp (gpuwire.hpp), examples-cpp.
# Fortran: include/gpuwire.f90 and gpuwire_f08.f90 compiled with the MPI's Fortran wrapper, then
# tests/fortran (including two programs that must not compile) and examples-fortran, whose
# output must be the C examples' output; then (without --sanitize) a --coverage build of the
# modules and tests, which must run every Fortran procedure (check-bindings.py
# --fortran-coverage). Python: examples-python/allreduce.py and darray.py,
# tests/python/test_bindings.py and (pytest) tests/python/test_package.py, under the MPI launcher,
# with the python3 that scripts/find-python.sh finds for this MPI, on the checkout's package
# python/gpuwire.
#
# Steps run two at a time (GPUWIRE_TEST_JOBS=N: N at a time; 1: one after another); their
# output is printed in the order they were started. The library must be built first (the
# Makefile does it). Exits 1 if a test failed, or if one
# was skipped while CI is set (on CI everything here must run). Logs: build/c/FLAVOUR/logs/.
set -uo pipefail

usage() { echo "usage: $0 openmpi|mpich [--sanitize]" >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 ]] || usage
mpi=$1
sanitize=0
if [[ $# -eq 2 ]]; then
    [[ $2 == --sanitize ]] || usage
    sanitize=1
fi

root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
[[ $target == /* ]] || target=$PWD/$target
case $mpi in
openmpi)
    CC=mpicc CXX=mpicxx FC=mpifort libdir=$target/debug mpi_vendor="Open MPI"
    launcher=(mpirun --oversubscribe --bind-to none -n)
    other_launcher=(mpiexec.mpich -n)
    if [[ $(id -u) -eq 0 ]]; then
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    fi
    ;;
mpich)
    [[ $sanitize -eq 0 ]] || { echo "$0: --sanitize runs with Open MPI only" >&2; exit 2; }
    CC=mpicc.mpich CXX=mpicxx.mpich FC=mpifort.mpich libdir=$target/mpich/debug mpi_vendor=MPICH
    launcher=(mpiexec.mpich -n)
    other_launcher=(mpirun --oversubscribe --bind-to none -n)
    if [[ $(id -u) -eq 0 ]]; then # for the wrong-launcher check, which uses Open MPI's mpirun
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    fi
    ;;
*) usage ;;
esac

flavour=$mpi
cflags=(-std=c99 -Wall -Wextra -Werror -pedantic -pthread -g -O2)
cxxflags=(-std=c++17 -Wall -Wextra -Werror -pedantic -g)
fflags=(-std=f2018 -Wall -Wextra -Werror -g -O2)
cg_n=96 # grid for the cg_poisson runs (a fraction of a second with a debug library)
if [[ $sanitize -eq 1 ]]; then
    flavour=$mpi-asan
    san=(-fsanitize=address,undefined -fno-omit-frame-pointer)
    cflags=(-std=c99 -Wall -Wextra -Werror -pedantic -pthread -g -O1 "${san[@]}")
    cxxflags+=("${san[@]}")
    fflags=(-std=f2018 -Wall -Wextra -Werror -g -O1 "${san[@]}")
    cg_n=48
    # Leak checking is off: at exit LeakSanitizer reports what MPI itself never frees (Open MPI's
    # MCA components, its op tables, argv copies: no gpuwire frame in any of them), which would
    # fail every run. Address errors (overflows, use after free, double free) and undefined
    # behaviour are still checked, and stop the program at the first report.
    export ASAN_OPTIONS=detect_leaks=0
    export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
fi

build=$root/build/c/$flavour
logs=$build/logs
results=$root/build/results
mkdir -p "$build" "$logs" "$results"
rm -f "$logs"/*.log
timeout_s=${GPUWIRE_TEST_TIMEOUT:-300}

passed=0 failed=0 skipped=0
record() { # STATUS ID [DETAIL]
    local status=$1 id=$2 detail=${3:-}
    drain
    case $status in
    PASS) passed=$((passed + 1)) ;;
    FAIL) failed=$((failed + 1)) ;;
    SKIP) skipped=$((skipped + 1)) ;;
    esac
    printf '%s %s%s\n' "$status" "[$flavour] $id" "${detail:+ ($detail)}"
}
show_log() { # LOG: the end of a failed step's output
    sed -e 's/^/    | /' "$1" | tail -n 40
}

# Two steps at a time (GPUWIRE_TEST_JOBS, default 2; 1: one after another): compile and check
# run each step in the background through run_job, which keeps its output and its counts in a
# slot of its own; the slots are printed, and counted, in the order the steps were started (as
# if they had run one after another). A step run in this shell (record, or code that reads a
# step's log) first waits for every step started before it (drain).
jobs_max=${GPUWIRE_TEST_JOBS:-2}
[[ $jobs_max =~ ^[1-9][0-9]*$ ]] || jobs_max=2
slotdir=$build/slots
rm -rf "$slotdir"
mkdir -p "$slotdir"
in_job=0 nslots=0 pending=()
declare -A job_slot
drain_ready() { # prints and counts the finished slots at the head of the queue
    local slot p f s
    while [[ ${#pending[@]} -gt 0 && -f ${pending[0]}.done ]]; do
        slot=${pending[0]}
        pending=("${pending[@]:1}")
        cat "$slot.out"
        read -r p f s < "$slot.done"
        passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
    done
}
drain() { # waits for every step started, then prints their slots
    [[ $in_job -eq 1 || ${#pending[@]} -eq 0 ]] && return 0
    wait
    drain_ready
    local slot
    for slot in "${pending[@]}"; do # a step that ended without its counts (killed)
        cat "$slot.out" 2> /dev/null
        failed=$((failed + 1))
        printf 'FAIL [%s] a step ended without its result (%s)\n' "$flavour" "$slot"
    done
    pending=()
}
run_job() { # FUNCTION ARGS...: runs FUNCTION ARGS... as a step in the background
    while [[ $(jobs -rp | wc -l) -ge $jobs_max ]]; do
        wait -n
    done
    drain_ready
    nslots=$((nslots + 1))
    local slot
    printf -v slot '%s/%05d' "$slotdir" "$nslots"
    (
        in_job=1 passed=0 failed=0 skipped=0
        "$@" > "$slot.out" 2>&1
        echo "$passed $failed $skipped" > "$slot.tmp" && mv "$slot.tmp" "$slot.done"
    ) &
    pending+=("$slot")
    job_slot[$1]=$slot
}
wait_for() { # FUNCTION: waits until the step run_job FUNCTION (the last one started) has ended
    local slot=${job_slot[$1]}
    while [[ ! -f $slot.done && $(jobs -rp | wc -l) -gt 0 ]]; do
        wait -n
    done
}

echo "== C tests and examples: $flavour ($CC, ${launcher[0]}, $libdir)"
if [[ ! -f $libdir/libgpuwire.so ]]; then
    record FAIL "library" "$libdir/libgpuwire.so is missing: build the library first"
    echo "c-$flavour: $passed passed, $failed failed, $skipped skipped"
    echo "$passed $failed $skipped" > "$results/c-$flavour.txt"
    exit 1
fi
# Programs record the soname (libgpuwire.so.0.1) as NEEDED: it must sit beside libgpuwire.so.
if ! bash "$root/scripts/soname-link.sh" "$libdir"; then
    record FAIL "library" "could not link the soname in $libdir"
    echo "c-$flavour: $passed passed, $failed failed, $skipped skipped"
    echo "$passed $failed $skipped" > "$results/c-$flavour.txt"
    exit 1
fi

# ---- build ------------------------------------------------------------------------------------

compile() { run_job compile_now "$@"; }
compile_now() { # ID OUTPUT COMPILER FLAGS... -- SOURCE
    local id=$1 out=$2 compiler=$3 log=$logs/build-$1.log
    shift 3
    if "$compiler" "$@" -I"$root/include" -L"$libdir" -lgpuwire -Wl,-rpath,"$libdir" -lm \
        -o "$out" > "$log" 2>&1; then
        record PASS "build $id"
    else
        rm -f "$out"
        record FAIL "build $id" "$compiler ${*}"
        show_log "$log"
    fi
}

# Fortran: the modules (gpuwire_types, gpuwire_c, gpuwire; gpuwire_f08), the programs below.
fdir=$build/fortran
rm -rf "$fdir"
mkdir -p "$fdir"
fortran_modules() {
    local log=$logs/build-fortran-modules.log
    if (cd "$fdir" && "$FC" "${fflags[@]}" -c "$root/include/gpuwire.f90" "$root/include/gpuwire_f08.f90") \
        > "$log" 2>&1; then
        record PASS "build Fortran modules gpuwire, gpuwire_f08 ($FC ${fflags[*]})"
    else
        record FAIL "build Fortran modules gpuwire, gpuwire_f08" "log $log"
        show_log "$log"
    fi
}
run_job fortran_modules

for t in test_api test_comm test_darray test_p2p test_threads test_nbc test_finalize; do
    compile "$t" "$build/$t" "$CC" "${cflags[@]}" "$root/tests/c/$t.c"
done
# Distributed arrays against the program around them (own communicator, checking mode, sizes
# that overflow), and the fuzzer of the whole C API (fixed seed, bounded number of calls).
for t in test_darray_wire fuzz_api; do
    compile "$t" "$build/$t" "$CC" "${cflags[@]}" "$root/tests/c/$t.c"
done
# Ranks on several (simulated) hosts.
compile test_multihost "$build/test_multihost" "$CC" "${cflags[@]}" "$root/tests/c/test_multihost.c"
for e in isend_irecv vstack_matvec cg_poisson darray_cg_poisson darray_blockrow; do
    compile "$e" "$build/$e" "$CC" "${cflags[@]}" "$root/examples-c/$e.c"
done
compile "test_header (C++17)" "$build/test_header" "$CXX" "${cxxflags[@]}" "$root/tests/c/test_header.cpp"

# C++: the header-only gpuwire.hpp.
compile "test_hpp (C++17)" "$build/test_hpp" "$CXX" "${cxxflags[@]}" "$root/tests/cpp/test_hpp.cpp"
compile "test_hpp_unwind (C++17)" "$build/test_hpp_unwind" "$CXX" "${cxxflags[@]}" \
    "$root/tests/cpp/test_hpp_unwind.cpp"
compile "test_hpp_nbc (C++17)" "$build/test_hpp_nbc" "$CXX" "${cxxflags[@]}" "$root/tests/cpp/test_hpp_nbc.cpp"
# C++20's std::span temporaries in the container overloads (the rest of the header is C++17's).
compile "test_hpp_span (C++20)" "$build/test_hpp_span" "$CXX" "${cxxflags[@]/-std=c++17/-std=c++20}" \
    "$root/tests/cpp/test_hpp_span.cpp"
compile "ring (C++17 example)" "$build/ring" "$CXX" "${cxxflags[@]}" "$root/examples-cpp/ring.cpp"

# Fortran: the modules (built first, beside the C programs: the longest build), then the
# programs.
wait_for fortran_modules
ftests=(-Wno-compare-reals) # the tests compare reals for exact equality on purpose
compile "test_fortran (Fortran)" "$build/test_fortran" "$FC" "${fflags[@]}" "${ftests[@]}" -I"$fdir" \
    "$root/tests/fortran/test_fortran.f90" "$fdir/gpuwire.o"
compile "test_f08 (Fortran, mpi_f08)" "$build/test_f08" "$FC" "${fflags[@]}" -I"$fdir" \
    "$root/tests/fortran/test_f08.f90" "$fdir/gpuwire.o" "$fdir/gpuwire_f08.o"
compile "error_stop (Fortran)" "$build/error_stop" "$FC" "${fflags[@]}" -I"$fdir" \
    "$root/tests/fortran/error_stop.f90" "$fdir/gpuwire.o"
compile "isend_irecv (Fortran example)" "$build/isend_irecv_f" "$FC" "${fflags[@]}" -I"$fdir" \
    "$root/examples-fortran/isend_irecv.f90" "$fdir/gpuwire.o" "$fdir/gpuwire_f08.o"
compile "cg_poisson (Fortran example)" "$build/cg_poisson_f" "$FC" "${fflags[@]}" -I"$fdir" \
    "$root/examples-fortran/cg_poisson.f90" "$fdir/gpuwire.o"
for e in darray_cg_poisson darray_blockrow; do
    compile "$e (Fortran example)" "$build/${e}_f" "$FC" "${fflags[@]}" -I"$fdir" \
        "$root/examples-fortran/$e.f90" "$fdir/gpuwire.o"
done

# Arrays that cannot be buffers are compile-time errors: a non-contiguous section of rank 8 or
# more, an array without TARGET. Each file must fail to compile at its gpuwire_buffer_wrap call, and compile
# with -DCONTROL (the same call on an acceptable array).
fortran_reject() { # NAME
    local r=$1 log=$logs/build-$1.log
    if (cd "$fdir" && "$FC" -cpp "${fflags[@]}" -c "$root/tests/fortran/$r.f90" -o "$r.o") > "$log" 2>&1; then
        record FAIL "Fortran: $r.f90 is rejected at compile time" "it compiled"
    elif ! grep -q "gpuwire_buffer_wrap" "$log"; then
        record FAIL "Fortran: $r.f90 is rejected at compile time" "the error is not about gpuwire_buffer_wrap"
        show_log "$log"
    elif ! (cd "$fdir" && "$FC" -cpp -DCONTROL "${fflags[@]}" -c "$root/tests/fortran/$r.f90" -o "$r.o") \
        >> "$log" 2>&1; then
        record FAIL "Fortran: $r.f90 is rejected at compile time" "the -DCONTROL variant does not compile either"
        show_log "$log"
    else
        record PASS "Fortran: $r.f90 is rejected at compile time (-DCONTROL compiles)"
    fi
}
for r in reject_section reject_no_target; do
    run_job fortran_reject "$r"
done

# The header alone, with the plain C compiler and no MPI include path, as C99, C11 and C17.
header_alone() { # STD
    local std=$1 log=$logs/header-$1.log
    if cc -std=$std -Wall -Wextra -Werror -pedantic -I"$root/include" -c \
        "$root/tests/c/header_only.c" -o "$build/header_only-$std.o" > "$log" 2>&1; then
        record PASS "header alone as $std, without mpi.h"
    else
        record FAIL "header alone as $std, without mpi.h"
        show_log "$log"
    fi
}
for std in c99 c11 c17; do
    run_job header_alone "$std"
done

# Handles of two kinds swapped do not compile, as C and as C++ (tests/c/reject_handles.c): each
# case must fail with an error on its own line, and the file without CASE must compile cleanly.
# Cases 1-6 pass handles by value: errors without -Werror; 7-8 pass an out-parameter's address,
# which C reports as an error under -pedantic-errors (GCC < 14 only warns by default).
rh=$root/tests/c/reject_handles.c
reject_handles() { # LANG
    local lang=$1 rcc ctrl log bad n extra line
    if [[ $lang == c ]]; then
        rcc=(cc -x c -std=c99) ctrl=(-Wall -Wextra -Werror -pedantic)
    else
        rcc=(c++ -x c++ -std=c++11) ctrl=(-Wall -Wextra -Werror -pedantic)
    fi
    log=$logs/reject-handles-$lang.log
    : > "$log"
    bad=()
    if ! "${rcc[@]}" "${ctrl[@]}" -I"$root/include" -c "$rh" -o "$build/reject_handles-$lang.o" >> "$log" 2>&1; then
        bad+=("the correct calls do not compile")
    fi
    for n in 1 2 3 4 5 6 7 8; do
        extra=()
        [[ $lang == c && $n -ge 7 ]] && extra=(-pedantic-errors)
        line=$(awk -v n="$n" '$0 ~ "^#(el)?if CASE == " n " " { print NR + 1; exit }' "$rh")
        echo "-- CASE=$n (error expected at line $line)" >> "$log"
        if "${rcc[@]}" "${extra[@]}" -DCASE=$n -I"$root/include" -c "$rh" -o "$build/reject_handles-$lang.o" >> "$log" 2>&1; then
            bad+=("case $n compiled")
        elif [[ -z $line ]] || ! grep -qE "reject_handles\\.c:$line:[0-9]+: error" "$log"; then
            bad+=("case $n: no error at line ${line:-?}")
        fi
    done
    if [[ ${#bad[@]} -eq 0 ]]; then
        record PASS "$lang: 8 calls with handles of the wrong kind do not compile (the right ones do)"
    else
        record FAIL "$lang: calls with handles of the wrong kind do not compile" "${bad[*]}; log $log"
        show_log "$log"
    fi
}
for lang in c c++; do
    run_job reject_handles "$lang"
done

# Every function the header declares is called by a C test.
missing=()
while read -r f; do
    grep -qE "\\b$f\\(" "$root"/tests/c/*.c "$root"/tests/c/*.cpp || missing+=("$f")
done < <(sed -nE 's/^(gpuwire_status|const char) \*?(gpuwire_[a-z0-9_]+)\(.*/\2/p' "$root/include/gpuwire.h")
nfuncs=$(grep -cE '^(gpuwire_status|const char) \*?gpuwire_[a-z0-9_]+\(' "$root/include/gpuwire.h")
if [[ ${#missing[@]} -eq 0 && $nfuncs -gt 0 ]]; then
    record PASS "every header function ($nfuncs) is called from C"
else
    record FAIL "every header function is called from C" "not called: ${missing[*]:-<none found>}"
fi

# ---- run --------------------------------------------------------------------------------------

drain # every program is built

# check ID WANT N PATTERNS PROGRAM ARGS...: runs PROGRAM on N ranks (N = hosts:SLOTS: on
# simulated hosts, SLOTS ranks per host, by scripts/multihost.sh); passes when the exit status
# is WANT ("0" or "nonzero") and the output matches every extended regex in PATTERNS (one per
# line). A step of its own (run_job).
check() { run_job check_now "$@"; }
check_now() {
    local id=$1 want=$2 n=$3 patterns=$4 log=$logs/$1.log rc
    shift 4
    if [[ ! -x $1 ]]; then
        record FAIL "$id" "not built"
        return
    fi
    local run=("${launcher[@]}" "$n")
    if [[ $n == hosts:* ]]; then
        run=(bash "$root/scripts/multihost.sh" "$mpi" "${n#hosts:}")
    fi
    timeout -k 10 "$timeout_s" "${run[@]}" "$@" > "$log" 2>&1
    rc=$?
    local ok=1 why=""
    if [[ $rc -eq 124 || $rc -eq 137 ]]; then
        ok=0 why="timed out after ${timeout_s}s"
    elif [[ $want == 0 && $rc -ne 0 ]]; then
        ok=0 why="exit status $rc"
    elif [[ $want == nonzero && $rc -eq 0 ]]; then
        ok=0 why="exit status 0, expected a failure"
    fi
    if [[ $ok -eq 1 ]]; then
        while IFS= read -r p; do
            [[ -z $p ]] && continue
            if ! grep -qE -- "$p" "$log"; then
                ok=0 why="output lacks /$p/"
                break
            fi
        done <<< "$patterns"
    fi
    if [[ $ok -eq 1 ]]; then
        record PASS "$id"
    else
        record FAIL "$id" "$why; log $log"
        show_log "$log"
    fi
}

for n in 1 2 3; do
    check "test_api -n $n" 0 "$n" "^test_api: PASS" "$build/test_api" "$n"
    check "test_comm -n $n" 0 "$n" "^test_comm: PASS" "$build/test_comm" "$n"
    check "test_darray -n $n" 0 "$n" "^test_darray: PASS" "$build/test_darray" "$n"
    check "test_p2p -n $n" 0 "$n" "^test_p2p: PASS \\($n ranks" "$build/test_p2p"
done
# Receive status and wildcards: ANY_SOURCE receives from three other ranks (issue 13).
check "test_p2p status -n 4" 0 4 "^test_p2p: PASS \\(4 ranks" "$build/test_p2p" status
# 4 ranks: MPICH's alltoall takes another algorithm there (one rank in place hung it).
check "test_comm -n 4" 0 4 "^test_comm: PASS" "$build/test_comm" 4
# GPUWIRE_TRACE=1: a blocking receive with status is one line (named recv_status, its whole time),
# and probes are traced. The PASS line is not anchored: mpirun forwards the ranks' stdout and
# stderr apart, and a trace line of stderr may be cut around it in the log (CI: "gtest_p2p:
# PASS (2 ranks, ...)" then "puwire-trace[...]").
check "test_p2p status -n 2 (GPUWIRE_TRACE=1)" 0 2 $'test_p2p: PASS \\(2 ranks
: recv_status [0-9]+ B; HOST \\(host memory\\): run now on the calling thread; [0-9.]+ us; ok
: probe 0 B; MPI \\(the communicator.s MPI messages\\): found a message from rank [0-9]+ with tag [0-9]+; [0-9.]+ us; ok
: iprobe 0 B; MPI \\(the communicator.s MPI messages\\): ' /usr/bin/env GPUWIRE_TRACE=1 "$build/test_p2p" status
# GPUWIRE_TRACE=1 set by the program after creating its communicator, before its first
# operation: that operation is traced (the lean path of gpuwire_allreduce read the variable at
# the communicator's creation, and no line came).
check "test_p2p tracelate -n 2" 0 2 $'test_p2p: PASS \\(2 ranks
: allreduce 8 B; [A-Z_]+ \\(host memory\\): run now on the calling thread; [0-9.]+ us; ok' "$build/test_p2p" tracelate
# Nonblocking collectives and groups (4 ranks oversubscribe the machine: fine), and below
# MPI_THREAD_MULTIPLE, where each operation completes inside its call.
for n in 1 2 3 4; do
    check "test_nbc -n $n" 0 "$n" "^test_nbc: PASS \\($n ranks, MPI_THREAD_MULTIPLE" "$build/test_nbc" "$n"
done
check "test_nbc funneled -n 2" 0 2 "^test_nbc: PASS \\(2 ranks, below MPI_THREAD_MULTIPLE" "$build/test_nbc" 2 funneled
# gpuwire_comm_free while a nonblocking collective on the communicator is pending (a hang is a
# failure within 120 s).
saved_timeout=$timeout_s
timeout_s=120
for n in 2 3; do
    check "test_nbc free -n $n" 0 "$n" "^test_nbc: PASS \\($n ranks" "$build/test_nbc" "$n" free
done
timeout_s=$saved_timeout
# The end of a program with operations in flight: gpuwire_finalize with an isend (its buffer's
# handle freed) and an irecv never waited for, with an irecv whose sender comes later, and
# inside a group never ended; the program's MPI_Finalize with nonblocking collectives queued on
# the progress engine
# (tests/c/test_finalize.c; a hang is a failure within 120 s). irecvlate with Open MPI only:
# MPICH's MPI_Finalize hangs the same way in the plain MPI program (MPI_Irecv left pending, the
# peer's MPI_Send of 64 KiB: 3 of 3 runs, 2026-12-07), which gpuwire's plain receive then is.
saved_timeout=$timeout_s
timeout_s=120
finalize_modes="inflight opengroup mpifinalize"
[[ $mpi == openmpi ]] && finalize_modes="inflight irecvlate opengroup mpifinalize"
# With MPICH, mpifinalize runs again (twice at most) when what failed is MPICH's own assertion
# "pthread_mutex_destroy: Device or resource busy" in MPI_Finalize: gpuwire's engine thread runs
# the queued operations while MPI_Finalize runs its callbacks, and MPICH 4.0.2 then asserts in
# some runs, as a plain MPI program does (bench/probe_finalize.c). Each such run is printed.
check_finalize_now() {
    local id=$1 log=$logs/$1.log attempt out
    for attempt in 1 2 3; do
        out=$(check_now "$@")
        if [[ $out == PASS* || $mpi != mpich || $id != *mpifinalize* || $attempt == 3 ]] || ! grep -q "pthread_mutex_destroy: Device or resource busy" "$log"; then
            break
        fi
        echo "NOTE [$flavour] $id: run $attempt met MPICH's MPI_Finalize assertion (bench/probe_finalize.c); run again"
    done
    if [[ $out == PASS* ]]; then
        record PASS "$id"
    else
        local first=${out%%$'\n'*}
        local detail=${first#*"$id" (}
        record FAIL "$id" "${detail%)}"
        show_log "$log"
    fi
}
for m in $finalize_modes; do
    run_job check_finalize_now "test_finalize $m -n 2" 0 2 "^test_finalize: PASS \\(rank 0, $m\\)
^test_finalize: PASS \\(rank 1, $m\\)" "$build/test_finalize" "$m"
done
timeout_s=$saved_timeout
# Requests for more memory than there is must come back as errors: under ASan too (whose
# allocator otherwise aborts the program on an allocation above its maximum).
for n in 1 2 3; do
    ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1 \
        check "test_darray_wire -n $n" 0 "$n" "^test_darray_wire: PASS" "$build/test_darray_wire" "$n"
done
for n in 1 2; do
    ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1 \
        check "fuzz_api -n $n" 0 "$n" "^fuzz_api: PASS" "$build/fuzz_api" "$n"
done

# Timeouts (a late rank, a receive with no sender), two threads on one communicator, and the
# thread levels FUNNELED and SERIALIZED (the program initializes MPI itself), and MPI's matching
# order between a receive blocked in one thread and a later one of another thread: 2 ranks.
for m in "late" "late check" "concurrent" "concurrent check" "funneled" "serialized" "order"; do
    # shellcheck disable=SC2086 # the mode is one or two words
    check "test_threads $m -n 2" 0 2 "^test_threads $m: PASS" "$build/test_threads" $m
done
# The progress thread starts for a pending host receive, and not where disabled by the old
# variable name with the new one set empty (unset, as every variable; the empty one hid it).
check "test_threads progress on -n 2" 0 2 "^test_threads progress on: PASS" "$build/test_threads" progress on
GPUWIRE_PROGRESS_THREAD= GPUWIRE_IPC_PROGRESS_THREAD=0 \
    check "test_threads progress off -n 2" 0 2 "^test_threads progress off: PASS" "$build/test_threads" progress off

# Several hosts on this one machine (scripts/multihost.sh: each host its own host name, so MPI
# and gpuwire see separate nodes; TCP between them): 2 hosts x 2 ranks, and 3 hosts with 1, 2
# and 1 ranks. test_multihost checks every node-dependent answer against the layout (node-local
# ranks, describe's host and node count, splits and dups across hosts, distributed arrays split
# across hosts, checking mode and a timeout with the odd rank on another host); test_comm,
# test_p2p and test_darray run every operation there. Not under --sanitize (no code of its own
# to check, and the time).
if [[ $sanitize -eq 0 ]]; then
    if bash "$root/scripts/multihost-agent.sh" 127.0.0.2 true > "$logs/multihost-probe.log" 2>&1; then
        for slots in 2,2 1,2,1; do
            IFS=, read -r -a per_host <<< "$slots"
            n=0
            for k in "${per_host[@]}"; do n=$((n + k)); done
            if [[ $slots == 2,2 ]]; then
                # With GPUWIRE_TRACE=1: HIER's collectives on host memory are traced as HIER's
                # (the trace named plain MPI, HOST, for every host-memory call). Not anchored: a
                # trace line may be cut around the PASS line (see test_p2p's traced run).
                check "test_multihost on hosts $slots (GPUWIRE_TRACE=1)" 0 "hosts:$slots" \
                    "test_multihost: PASS \\($n ranks on ${#per_host[@]} hosts
allreduce [0-9]+ B; HIER \\(host memory\\): run now" /usr/bin/env GPUWIRE_TRACE=1 "$build/test_multihost" "$slots"
            else
                check "test_multihost on hosts $slots" 0 "hosts:$slots" \
                    "^test_multihost: PASS \\($n ranks on ${#per_host[@]} hosts" "$build/test_multihost" "$slots"
            fi
            check "test_comm on hosts $slots" 0 "hosts:$slots" "^test_comm: PASS" "$build/test_comm" "$n"
            check "test_p2p on hosts $slots" 0 "hosts:$slots" "^test_p2p: PASS \\($n ranks" "$build/test_p2p"
            check "test_darray on hosts $slots" 0 "hosts:$slots" "^test_darray: PASS" "$build/test_darray" "$n"
        done
    else
        record SKIP "tests on simulated hosts" "$(tail -n 1 "$logs/multihost-probe.log")"
    fi
fi

test_header_runs() {
    if [[ ! -x $build/test_header ]]; then
        record FAIL "test_header (C++17) runs" "not built"
    elif "$build/test_header" > "$logs/test_header.log" 2>&1 && grep -q "^test_header_cxx: PASS" "$logs/test_header.log"; then
        record PASS "test_header (C++17) runs"
    else
        record FAIL "test_header (C++17) runs" "log $logs/test_header.log"
        show_log "$logs/test_header.log"
    fi
}
run_job test_header_runs

isend_ok='^rank 1 after: 100 110 120 130 140 150 160 170 180 190$
^rank 0 after: 100 110 120 130 140 150 160 170 180 190$
^isend_irecv: PASS'
check "isend_irecv -n 2" 0 2 "$isend_ok" "$build/isend_irecv" 2
check "isend_irecv -n 3" 0 3 "$isend_ok
^rank 2 after: 0 0 0 0 0 0 0 0 0 0$" "$build/isend_irecv" 3
check "isend_irecv -n 1 refuses to run" nonzero 1 "needs at least 2 ranks" "$build/isend_irecv" 1
for n in 1 2 3; do
    check "vstack_matvec -n $n" 0 "$n" "^vstack_matvec: PASS \\($n ranks: y = H d has $((400 * n)) entries, all equal to 20\\)" \
        "$build/vstack_matvec" "$n"
done
for n in 1 2 3; do
    check "cg_poisson $cg_n -n $n" 0 "$n" "^cg_poisson: PASS$
^ranks: $n
^backend: gpuwire " "$build/cg_poisson" "$cg_n" "$n"
done

# The same answer on 1, 2 and 3 ranks: the same iteration count, errors within 1e-10.
drain # the runs above, whose logs are read here
cg_results=()
for n in 1 2 3; do
    log=$logs/cg_poisson\ $cg_n\ -n\ $n.log
    it=$(sed -n 's/^iterations: //p' "$log" 2> /dev/null)
    err=$(sed -n 's/^max error: //p' "$log" 2> /dev/null)
    cg_results+=("$n:${it:-?}:${err:-?}")
done
if awk -v r="${cg_results[*]}" 'BEGIN {
        n = split(r, a, " "); split(a[1], b, ":");
        if (b[2] == "?" || b[3] == "?") exit 1;
        for (i = 2; i <= n; i++) {
            split(a[i], c, ":");
            if (c[2] != b[2] || c[3] == "?") exit 1;
            d = c[3] - b[3]; if (d < 0) d = -d;
            if (d > 1e-10) exit 1;
        }
    }'; then
    record PASS "cg_poisson agrees on 1, 2, 3 ranks" "ranks:iterations:error ${cg_results[*]}"
else
    record FAIL "cg_poisson agrees on 1, 2, 3 ranks" "ranks:iterations:error ${cg_results[*]}"
fi

for n in 1 2 3; do
    check "darray_blockrow -n $n" 0 "$n" \
        "^darray_blockrow: PASS \\($n ranks, host memory: y = H x has $((10 * n + 3)) entries" \
        "$build/darray_blockrow" "$n"
    check "darray_cg_poisson $cg_n -n $n" 0 "$n" "^darray_cg_poisson: PASS$
^ranks: $n
^backend: gpuwire " "$build/darray_cg_poisson" "$cg_n" "$n"
done

# cg_poisson on distributed arrays computes what the hand-written version computes: the same
# iteration count and error on each rank count (bit for bit where the C compiler contracts no
# multiply-add; within 1e-12 in any case).
drain # the runs above, whose logs are read here
for n in 1 2 3; do
    a=$logs/cg_poisson\ $cg_n\ -n\ $n.log
    b=$logs/darray_cg_poisson\ $cg_n\ -n\ $n.log
    ia=$(sed -n 's/^iterations: //p' "$a" 2> /dev/null)
    ib=$(sed -n 's/^iterations: //p' "$b" 2> /dev/null)
    ea=$(sed -n 's/^max error: //p' "$a" 2> /dev/null)
    eb=$(sed -n 's/^max error: //p' "$b" 2> /dev/null)
    if [[ -n $ia && $ia == "$ib" ]] && awk -v a="$ea" -v b="$eb" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && b != "" && d <= 1e-12) }'; then
        record PASS "darray_cg_poisson agrees with cg_poisson on $n ranks" "iterations $ib, error $eb"
    else
        record FAIL "darray_cg_poisson agrees with cg_poisson on $n ranks" "iterations ${ia:-?} vs ${ib:-?}, error ${ea:-?} vs ${eb:-?}"
    fi
done

# C++: gpuwire.hpp.
for n in 1 2 3; do
    check "test_hpp (C++) -n $n" 0 "$n" "^test_hpp: PASS \\($n ranks" "$build/test_hpp" "$n"
done
# Destructors that must not block: a hang is a failure within 90 s, not the general limit.
saved_timeout=$timeout_s
timeout_s=90
for n in 1 2 3; do
    check "test_hpp_unwind (C++: destructors never block) -n $n" 0 "$n" \
        "^test_hpp_unwind: PASS \\($n ranks" "$build/test_hpp_unwind" "$n"
done
timeout_s=$saved_timeout
for n in 1 2 3 4; do
    check "test_hpp_nbc (C++: nonblocking collectives, group guard) -n $n" 0 "$n" \
        "^test_hpp_nbc: PASS \\($n ranks" "$build/test_hpp_nbc" "$n"
done
for n in 1 2; do
    check "test_hpp_span (C++20: temporary std::span) -n $n" 0 "$n" "^test_hpp_span: PASS \\($n ranks" \
        "$build/test_hpp_span" "$n"
done
for n in 2 3; do
    check "ring (C++) -n $n" 0 "$n" "^ring: PASS \\($n ranks" "$build/ring" "$n"
done

# Fortran: the module, then the examples, whose output must be the C examples' output.
for n in 1 2 3; do
    check "test_fortran -n $n" 0 "$n" "^test_fortran: PASS \\($n ranks" "$build/test_fortran" "$n"
done
for n in 1 3; do
    check "test_f08 (mpi_f08) -n $n" 0 "$n" "^test_f08: PASS \\($n ranks" "$build/test_f08"
done
check "Fortran: an error without ierror stops the program" nonzero 1 \
    "^gpuwire: gpuwire_comm_rank failed: invalid handle" "$build/error_stop"
check "isend_irecv (Fortran) -n 2" 0 2 "$isend_ok" "$build/isend_irecv_f" 2
check "isend_irecv (Fortran) -n 3" 0 3 "$isend_ok
^rank 2 after: 0 0 0 0 0 0 0 0 0 0$" "$build/isend_irecv_f" 3
check "isend_irecv (Fortran) -n 1 refuses to run" nonzero 1 "needs at least 2 ranks" "$build/isend_irecv_f" 1
for n in 1 2 3; do
    check "cg_poisson (Fortran) $cg_n -n $n" 0 "$n" "^cg_poisson: PASS$
^ranks: $n
^backend: gpuwire " "$build/cg_poisson_f" "$cg_n" "$n"
done
# Same answers: the Fortran examples print exactly what the C ones print (but the wall time).
same_output() { # ID C_LOG FORTRAN_LOG
    local id=$1 clog=$logs/$2.log flog=$logs/$3.log
    drain # the runs that wrote the logs
    if [[ -s $clog && -s $flog ]] && diff <(grep -v '^wall time:' "$clog") <(grep -v '^wall time:' "$flog") \
        > "$logs/$1.diff" 2>&1; then
        record PASS "$id"
    else
        record FAIL "$id" "diff in $logs/$1.diff"
        sed -e 's/^/    | /' "$logs/$1.diff" 2> /dev/null | head -n 20
    fi
}
same_output "isend_irecv: Fortran output = C output (3 ranks)" "isend_irecv -n 3" "isend_irecv (Fortran) -n 3"
for n in 1 2 3; do
    check "darray_blockrow (Fortran) -n $n" 0 "$n" \
        "^darray_blockrow: PASS \\($n ranks, host memory: y = H x has $((10 * n + 3)) entries" \
        "$build/darray_blockrow_f" "$n"
    check "darray_cg_poisson (Fortran) $cg_n -n $n" 0 "$n" "^darray_cg_poisson: PASS$
^ranks: $n
^backend: gpuwire " "$build/darray_cg_poisson_f" "$cg_n" "$n"
done
for n in 1 2 3; do
    same_output "cg_poisson: Fortran output = C output ($n ranks)" "cg_poisson $cg_n -n $n" \
        "cg_poisson (Fortran) $cg_n -n $n"
done
for n in 1 2 3; do
    same_output "darray_cg_poisson: Fortran output = C output ($n ranks)" \
        "darray_cg_poisson $cg_n -n $n" "darray_cg_poisson (Fortran) $cg_n -n $n"
    same_output "darray_blockrow: Fortran output = C output ($n ranks)" "darray_blockrow -n $n" \
        "darray_blockrow (Fortran) -n $n"
done

# Every procedure of the Fortran modules (each wrapper, each per-type specific of the generated
# gpuwire_kinds.inc) is run by a Fortran test: the modules and tests again with --coverage, the
# tests run, gcov's function summary checked by check-bindings.py (not under the sanitizers).
fortran_coverage() {
    local cdir=$fdir/coverage log=$logs/fortran-coverage.log cov link
    mkdir -p "$cdir"
    rm -f "$cdir"/*.gcda
    cov=(-std=f2018 -Wall -Wextra -Werror -g -O0 --coverage)
    link=(-L"$libdir" -lgpuwire -Wl,-rpath,"$libdir")
    if (cd "$cdir" && "$FC" "${cov[@]}" -c "$root/include/gpuwire.f90" "$root/include/gpuwire_f08.f90" \
        && "$FC" "${cov[@]}" "${ftests[@]}" -I. "$root/tests/fortran/test_fortran.f90" gpuwire.o "${link[@]}" -o test_fortran \
        && "$FC" "${cov[@]}" -I. "$root/tests/fortran/test_f08.f90" gpuwire.o gpuwire_f08.o "${link[@]}" -o test_f08 \
        && "$FC" "${cov[@]}" -I. "$root/tests/fortran/error_stop.f90" gpuwire.o "${link[@]}" -o error_stop) > "$log" 2>&1 \
        && timeout -k 10 "$timeout_s" "${launcher[@]}" 2 "$cdir/test_fortran" 2 >> "$log" 2>&1 \
        && timeout -k 10 "$timeout_s" "${launcher[@]}" 2 "$cdir/test_f08" >> "$log" 2>&1; then
        timeout -k 10 60 "${launcher[@]}" 1 "$cdir/error_stop" >> "$log" 2>&1 # fails on purpose
        if (cd "$cdir" && gcov -f -n gpuwire.gcda gpuwire_f08.gcda > gcov-summary.txt 2>> "$log") \
            && python3 "$root/scripts/check-bindings.py" --root "$root" --fortran-coverage "$cdir/gcov-summary.txt" >> "$log" 2>&1; then
            record PASS "Fortran: every procedure of gpuwire_types, gpuwire, gpuwire_f08 is run by a test" \
                "$(sed -n 's/^PASS the Fortran tests run all \([0-9]*\) .*/\1 procedures/p' "$log")"
        else
            record FAIL "Fortran: every procedure of gpuwire_types, gpuwire, gpuwire_f08 is run by a test" "log $log"
            grep '^FAIL' "$log" | sed -e 's/^/    | /' | head -n 40
        fi
    else
        record FAIL "Fortran: the coverage build and run of test_fortran, test_f08" "log $log"
        show_log "$log"
    fi
}
if [[ $sanitize -eq 0 ]]; then
    run_job fortran_coverage
fi

# Python: the ctypes module with mpi4py and NumPy, where an mpi4py for this MPI exists.
if [[ $sanitize -eq 0 ]]; then
    if py=$(bash "$root/scripts/find-python.sh" "$mpi_vendor"); then
        export GPUWIRE_LIBRARY=$libdir/libgpuwire.so
        drain # the steps above print first
        echo "== Python: $py ($("$py" --version 2>&1)), GPUWIRE_LIBRARY=$GPUWIRE_LIBRARY"
        for n in 2 3; do
            # Rank 1's line is anchored at neither end: mpirun forwards each rank's output as it
            # comes, and has put rank 0's line between rank 1's text and its newline (CI, stop 36).
            check "allreduce.py (Python) -n $n" 0 "$n" "^allreduce.py: PASS \\(numpy[^;]*; $n ranks
rank 1 received \\(numpy\\): 100 110 120 130 140 150 160 170 180 190([^0-9.]|$)" "$py" \
                "$root/examples-python/allreduce.py" "$n"
        done
        for n in 1 2 3; do
            check "darray.py (Python) -n $n" 0 "$n" "^darray.py: PASS \\($n ranks" "$py" \
                "$root/examples-python/darray.py" "$n"
        done
        for n in 1 2; do
            check "test_bindings.py (Python: byte order, freeing) -n $n" 0 "$n" \
                "^test_bindings.py: PASS \\(numpy; $n ranks" "$py" "$root/tests/python/test_bindings.py" "$n"
        done
        # pytest: the package's array paths, datatype rules, mpi4py, context managers.
        if "$py" -c "import pytest" > /dev/null 2>&1; then
            for n in 1 2; do
                check "pytest test_package.py (Python package) -n $n" 0 "$n" "^[0-9]+ passed(, [0-9]+ skipped)? in " \
                    "$py" -m pytest -q -p no:cacheprovider --color=no "$root/tests/python/test_package.py"
            done
        else
            record FAIL "pytest test_package.py (Python package)" "no pytest for $py: apt-get install python3-pytest"
        fi
        unset GPUWIRE_LIBRARY
    elif [[ $mpi == openmpi ]]; then
        record SKIP "allreduce.py, darray.py, test_bindings.py, test_package.py (Python)" "no python3 with mpi4py (for $mpi_vendor) and NumPy: apt-get install python3-mpi4py python3-numpy"
    else
        drain # the steps above print first
        echo "NOTE [$flavour] allreduce.py, darray.py, test_bindings.py, test_package.py (Python): no mpi4py built for $mpi_vendor here; the Python examples run in the Open MPI pass"
    fi
fi

# A binary started by the other MPI's launcher runs as N singletons: the rank-count check must
# catch it (this is why every program takes the expected count).
wrong_launcher() {
    local log=$logs/wrong-launcher.log rc
    timeout -k 10 60 "${other_launcher[@]}" 2 "$build/vstack_matvec" 2 > "$log" 2>&1
    rc=$?
    if [[ $rc -ne 0 && $rc -ne 124 ]] && grep -q "launched on 1 ranks, expected 2" "$log"; then
        record PASS "wrong launcher (${other_launcher[0]}) is detected"
    else
        record FAIL "wrong launcher (${other_launcher[0]}) is detected" "exit status $rc; log $log"
        show_log "$log"
    fi
}
if command -v "${other_launcher[0]}" > /dev/null 2>&1; then
    run_job wrong_launcher
else
    record SKIP "wrong launcher is detected" "${other_launcher[0]} is not installed"
fi

# A program built with the other MPI's compiler wrapper against this library: gpuwire_init must
# say so (GPUWIRE_ERROR_MPI) instead of crashing inside MPI.
if [[ $sanitize -eq 0 ]]; then
    if [[ $mpi == openmpi ]]; then other_cc=mpicc.mpich; built="Open MPI"; else other_cc=mpicc; built=MPICH; fi
    if command -v "$other_cc" > /dev/null 2>&1; then
        cat > "$build/wrong_mpi.c" <<'EOC'
#include <stdio.h>
#include "gpuwire.h"
int main(void)
{
    char msg[1024];
    gpuwire_status st = gpuwire_init();
    gpuwire_last_error(msg, sizeof msg);
    printf("gpuwire_init: %d %s\n", (int)st, msg);
    return st == GPUWIRE_ERROR_MPI ? 0 : 1;
}
EOC
        wrong_mpi() {
        local log=$logs/wrong-mpi.log
        if "$other_cc" "${cflags[@]}" -I"$root/include" "$build/wrong_mpi.c" -L"$libdir" -lgpuwire -Wl,-rpath,"$libdir" \
            -o "$build/wrong_mpi" > "$log" 2>&1 && timeout -k 10 60 "$build/wrong_mpi" >> "$log" 2>&1 \
            && grep -q "built against $built" "$log"; then
            record PASS "a program built with another MPI ($other_cc) gets a clear error from gpuwire_init"
        else
            record FAIL "a program built with another MPI ($other_cc) gets a clear error from gpuwire_init" "log $log"
            show_log "$log"
        fi
        }
        run_job wrong_mpi
    else
        record SKIP "a program built with another MPI gets a clear error" "$other_cc is not installed"
    fi
fi

drain
echo "c-$flavour: $passed passed, $failed failed, $skipped skipped"
echo "$passed $failed $skipped" > "$results/c-$flavour.txt"
if [[ $failed -gt 0 ]]; then
    exit 1
fi
if [[ $skipped -gt 0 && -n ${CI:-} ]]; then
    echo "c-$flavour: $skipped test(s) skipped on CI, where every test must run" >&2
    exit 1
fi
exit 0
