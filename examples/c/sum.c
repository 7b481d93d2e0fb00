/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The smallest UCall server in C99: sum(a, b), echo(data) and scale(x), on as many threads
 * as asked. scale reads a float32 array sent as an attachment (docs/wire.md) where it lies,
 * refusing another dtype, and answers the doubled array as one (or as base64 to a caller
 * that takes no attachments).
 *
 *   make examples-c && target/c/examples/sum --port 8545 --threads 2
 *   curl -s localhost:8545 -d '{"jsonrpc":"2.0","method":"sum","params":{"a":1,"b":2},"id":1}'
 *   curl -s 'localhost:8545/sum?a=1&b=2'
 *
 * Options: --host H, --port P (0: any free port), --threads N, --engine auto|poll|uring,
 * --tls-cert CHAIN.pem --tls-key KEY.pem (the port then speaks TLS: https://, wss://).
 * Says "ucall: listening on http://HOST:PORT (engine E, N threads)" on stderr once ready;
 * SIGINT or SIGTERM stops it.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ucall/ucall.h>

static ucall_server_t volatile server = NULL;

static const char USAGE[] =
    "usage: sum [--host H] [--port P] [--threads N] [--engine auto|poll|uring]\n"
    "           [--tls-cert CHAIN.pem --tls-key KEY.pem]\n"
    "Serves sum(a, b), echo(data) and scale(x) over HTTP, raw TCP and WebSocket; P 0 picks a free port.\n";

/* Write `value` in decimal at the end of `buffer`; returns where the text starts. The reply
 * is on the hot path, and snprintf costs more than everything else sum() does. */
static char* format_i64(int64_t value, char* buffer_end) {
    uint64_t magnitude = value < 0 ? 0u - (uint64_t)value : (uint64_t)value;
    char* at = buffer_end;
    do {
        *--at = (char)('0' + magnitude % 10u);
        magnitude /= 10u;
    } while (magnitude);
    if (value < 0)
        *--at = '-';
    return at;
}

/* Params may come by name ({"a":1,"b":2}) or by position ([1,2]). */
static void sum(ucall_call_t call, ucall_callback_tag_t tag) {
    int64_t a, b;
    char buffer[24];
    char* text;
    (void)tag;
    if (!ucall_param_named_i64(call, "a", 1, &a) && !ucall_param_positional_i64(call, 0, &a)) {
        ucall_call_reply_error(call, -32602, "Invalid params: parameter 'a' is missing or not a 64-bit integer", 0);
        return;
    }
    if (!ucall_param_named_i64(call, "b", 1, &b) && !ucall_param_positional_i64(call, 1, &b)) {
        ucall_call_reply_error(call, -32602, "Invalid params: parameter 'b' is missing or not a 64-bit integer", 0);
        return;
    }
    /* Wraps on overflow, like the Rust example in release builds (unsigned: no undefined behaviour). */
    text = format_i64((int64_t)((uint64_t)a + (uint64_t)b), buffer + sizeof buffer);
    ucall_call_reply_content(call, text, (size_t)(buffer + sizeof buffer - text));
}

/* The argument goes back as the raw JSON text the client sent, never decoded. */
static void echo(ucall_call_t call, ucall_callback_tag_t tag) {
    ucall_str_t data;
    size_t length;
    (void)tag;
    if (!ucall_param_named_json(call, "data", 4, &data, &length) &&
        !ucall_param_positional_json(call, 0, &data, &length)) {
        ucall_call_reply_error(call, -32602, "missing parameter 'data'", 0);
        return;
    }
    ucall_call_reply_content(call, data, length);
}

/* x: a float32 array as an attachment of a binary message, read in place as a pointer
 * and length (no base64, no copy) after its dtype and shape are checked. The doubled array,
 * of the same shape, is the result: an ndarray attachment for a caller that accepts binary
 * replies, sent from `doubled`, which `free` releases. */
static void scale(ucall_call_t call, ucall_callback_tag_t tag) {
    const uint8_t* data = NULL;
    ucall_str_t dtype;
    const size_t* shape;
    size_t length = 0, dimensions, count, i;
    float* doubled;
    char message[128];
    (void)tag;
    if (!ucall_param_named_array(call, "x", 1, &dtype, &shape, &dimensions) &&
        !ucall_param_positional_array(call, 0, &dtype, &shape, &dimensions)) {
        ucall_call_reply_error(call, -32602, "Invalid params: 'x' must be an array attachment (float32)", 0);
        return;
    }
    if (strcmp(dtype, "float32") != 0) {
        snprintf(message, sizeof message, "Invalid params: 'x' must be a float32 array, not %s", dtype);
        ucall_call_reply_error(call, -32602, message, 0);
        return;
    }
    if (!ucall_param_named_attachment(call, "x", 1, &data, &length))
        ucall_param_positional_attachment(call, 0, &data, &length);
    count = length / sizeof(float);
    doubled = malloc(count ? count * sizeof(float) : 1);
    if (!doubled) {
        ucall_call_reply_error(call, -32603, "out of memory", 0);
        return;
    }
    for (i = 0; i != count; ++i) {
        float value; /* an attachment is 64-byte aligned in the message, not always in memory */
        memcpy(&value, data + i * sizeof(float), sizeof value);
        doubled[i] = 2 * value;
    }
    ucall_call_reply_array(call, "float32", shape, dimensions, (const uint8_t*)doubled, length, free, doubled);
}

static void stop(int signal_number) {
    (void)signal_number;
    ucall_stop(server); /* safe in a signal handler */
}

static void* serve(void* thread_index) {
    ucall_take_calls(server, (uint16_t)(uintptr_t)thread_index);
    return NULL;
}

int main(int argc, char** argv) {
    ucall_config_t config;
    ucall_server_t made = NULL;
    pthread_t threads[64];
    const char* certificates[1] = {NULL};
    struct sigaction action;
    int i;

    memset(&config, 0, sizeof config); /* zero means "the default" */
    for (i = 1; i < argc; ++i) {
        const char* flag = argv[i];
        const char* value;
        if (!strcmp(flag, "--help") || !strcmp(flag, "-h")) {
            printf("%s", USAGE);
            return 0;
        }
        if (strncmp(flag, "--", 2) || i + 1 == argc) {
            fprintf(stderr, strncmp(flag, "--", 2) ? "unexpected argument %s\n%s" : "%s needs a value\n%s", flag, USAGE);
            return 2;
        }
        value = argv[++i];
        if (!strcmp(flag, "--host"))
            config.hostname = value;
        else if (!strcmp(flag, "--port")) {
            config.port = (uint16_t)atoi(value);
            config.ephemeral_port = config.port == 0;
        } else if (!strcmp(flag, "--threads"))
            config.max_threads = (uint16_t)atoi(value);
        else if (!strcmp(flag, "--engine"))
            config.engine = value;
        else if (!strcmp(flag, "--tls-cert")) {
            certificates[0] = value;
            config.ssl_certificates_paths = certificates;
            config.ssl_certificates_count = 1;
            config.use_ssl = true;
        } else if (!strcmp(flag, "--tls-key")) {
            config.ssl_private_key_path = value;
            config.use_ssl = true;
        } else {
            fprintf(stderr, "unknown option %s\n%s", flag, USAGE);
            return 2;
        }
    }
    if (config.max_threads > 64)
        config.max_threads = 64;

    ucall_init(&config, &made);
    if (!made) {
        char reason[256];
        ucall_last_error(reason, sizeof reason);
        fprintf(stderr, "cannot start: %s\n", reason);
        return 1;
    }
    server = made;
    ucall_add_procedure(made, "sum", sum, NULL);
    ucall_add_procedure(made, "echo", echo, NULL);
    ucall_add_procedure(made, "scale", scale, NULL);

    memset(&action, 0, sizeof action);
    action.sa_handler = stop;
    sigaction(SIGINT, &action, NULL);
    sigaction(SIGTERM, &action, NULL);

    /* config now holds the values in force: the real port, the engine, the thread count.
       The start-up line of every UCall server, on stderr (docs/operations.md). */
    fprintf(stderr, "ucall: listening on %s://%s:%u (engine %s, %u thread%s)\n", config.use_ssl ? "https" : "http",
            config.hostname, (unsigned)config.port, config.engine, (unsigned)config.max_threads,
            config.max_threads == 1 ? "" : "s");

    for (i = 1; i < config.max_threads; ++i)
        pthread_create(&threads[i], NULL, serve, (void*)(uintptr_t)i);
    ucall_take_calls(made, 0);
    for (i = 1; i < config.max_threads; ++i)
        pthread_join(threads[i], NULL);
    ucall_free(made);
    return 0;
}
