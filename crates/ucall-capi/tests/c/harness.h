/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the C test programs share: the CHECK tally and its report, the server under test
 * and a thread that serves it, and a look at ucall_last_error(). Each program includes it
 * once, so its definitions are static.
 */
#ifndef UCALL_TESTS_HARNESS_H
#define UCALL_TESTS_HARNESS_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <ucall/ucall.h>

static int passed = 0, failed = 0;

/* Counts `condition`; when it is false, prints where, what and the printf-style message. */
#define CHECK(condition, ...)                                                                                          \
    do {                                                                                                               \
        if (condition)                                                                                                 \
            ++passed;                                                                                                  \
        else {                                                                                                         \
            ++failed;                                                                                                  \
            fprintf(stderr, "FAILED %s:%d: %s: ", __FILE__, __LINE__, #condition);                                     \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fputc('\n', stderr);                                                                                       \
        }                                                                                                              \
    } while (0)

static ucall_server_t the_server = NULL;

/* A thread's body: serve `the_server` as thread index 0 until it is stopped. */
static void* serve(void* argument) {
    (void)argument;
    ucall_take_calls(the_server, 0);
    return NULL;
}

static bool last_error_contains(char const* needle) {
    char text[512];
    ucall_last_error(text, sizeof text);
    return strstr(text, needle) != NULL;
}

/* Prints "N passed, N failed"; the exit status: non-zero on any failure. */
static int report(void) {
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

#endif
