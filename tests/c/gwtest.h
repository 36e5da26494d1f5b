/*
 * gwtest.h: a minimal check harness for gpuwire's C tests (C99, no dependencies but gpuwire.h).
 *
 * Every check counts; a failed check prints "FAILED rank R file:line: what" with the status's
 * description and the thread's last error, and the test goes on. gwt_failures() at the end says
 * whether this process saw a failure; the test program combines the ranks' counts itself.
 */
#ifndef GWTEST_H
#define GWTEST_H

#include <stdio.h>
#include <string.h>

#include "gpuwire.h"

static int gwt_rank = -1;    /* set by the test once known, for messages */
static long gwt_checks = 0;  /* checks run in this process */
static long gwt_failed = 0;  /* checks failed in this process */

static void gwt_fail(const char *file, int line, const char *what, const char *detail)
{
    gwt_failed++;
    fprintf(stderr, "FAILED rank %d %s:%d: %s%s%s\n", gwt_rank, file, line, what,
            detail && *detail ? ": " : "", detail ? detail : "");
    fflush(stderr);
}

static void gwt_status_detail(gpuwire_status st, char *out, size_t len)
{
    char msg[1024];
    if (gpuwire_last_error(msg, sizeof msg) != GPUWIRE_SUCCESS)
        msg[0] = '\0';
    snprintf(out, len, "status %d (%s), last error \"%s\"", (int)st,
             gpuwire_status_string((int32_t)st), msg);
}

/* A condition that must hold. */
#define EXPECT(cond)                                                                     \
    do {                                                                                 \
        gwt_checks++;                                                                    \
        if (!(cond))                                                                     \
            gwt_fail(__FILE__, __LINE__, "expected " #cond, NULL);                       \
    } while (0)

/* A call that must return `code` (a gpuwire_status). */
#define EXPECT_STATUS(call, code)                                                        \
    do {                                                                                 \
        gpuwire_status gwt_st_ = (call);                                                 \
        gwt_checks++;                                                                    \
        if (gwt_st_ != (code)) {                                                         \
            char gwt_d_[1400];                                                           \
            gwt_status_detail(gwt_st_, gwt_d_, sizeof gwt_d_);                           \
            gwt_fail(__FILE__, __LINE__, #call " should return " #code, gwt_d_);          \
        }                                                                                \
    } while (0)

/* A call that must succeed. */
#define EXPECT_OK(call) EXPECT_STATUS(call, GPUWIRE_SUCCESS)

/* This thread's last error must contain `needle`. */
#define EXPECT_LAST_ERROR_HAS(needle)                                                    \
    do {                                                                                 \
        char gwt_m_[1024];                                                               \
        gwt_checks++;                                                                    \
        if (gpuwire_last_error(gwt_m_, sizeof gwt_m_) != GPUWIRE_SUCCESS)                \
            gwt_m_[0] = '\0';                                                            \
        if (strstr(gwt_m_, (needle)) == NULL)                                            \
            gwt_fail(__FILE__, __LINE__, "last error should contain \"" needle "\"", gwt_m_); \
    } while (0)

/* A call that must fail with `code` and leave the out-parameter `var` (pre-filled with
 * `sentinel`) untouched: out-parameters are written only on success. */
#define EXPECT_UNTOUCHED(call, code, var, sentinel)                                      \
    do {                                                                                 \
        (var) = (sentinel);                                                              \
        EXPECT_STATUS(call, code);                                                       \
        gwt_checks++;                                                                    \
        if ((var) != (sentinel))                                                         \
            gwt_fail(__FILE__, __LINE__, #var " was written by a failing " #call, NULL); \
    } while (0)

/* A handle given as another kind (a compile error without the cast), to check that gpuwire
 * refuses it at run time: Fortran and Python hold every handle as a plain 64-bit integer. */
#define AS_COMM(x) ((gpuwire_comm){(x).h})
#define AS_BUFFER(x) ((gpuwire_buffer){(x).h})
#define AS_REQUEST(x) ((gpuwire_request){(x).h})
#define AS_DARRAY(x) ((gpuwire_darray){(x).h})

/* The same for a handle out-parameter (a struct of one uint64_t): its value `h` is pre-filled
 * with `sentinel`. */
#define EXPECT_UNTOUCHED_H(call, code, var, sentinel)                                    \
    do {                                                                                 \
        (var).h = (sentinel);                                                            \
        EXPECT_STATUS(call, code);                                                       \
        gwt_checks++;                                                                    \
        if ((var).h != (sentinel))                                                       \
            gwt_fail(__FILE__, __LINE__, #var " was written by a failing " #call, NULL); \
    } while (0)

static long gwt_failures(void) { return gwt_failed; }

#endif /* GWTEST_H */
