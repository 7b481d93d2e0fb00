/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The test server of tests/vectors/README.md, written against the C API: the same
 * command line and procedures as examples/rust spec_server, so that the shared vectors
 * and the Python suite run against libucall unchanged.
 *
 *   spec_server --host 127.0.0.1 --port 0 --threads N --engine auto|poll
 *               [--max-body-bytes N] [--max-header-bytes N] [--max-batch N]
 *               [--max-connections N] [--header-timeout-ms N] [--idle-timeout-ms N]
 *               [--tls-cert PEM]... [--tls-key PEM] [--tls-port P] [--tls-client-ca PEM]
 *
 * TLS as in the Rust spec server: --tls-cert and --tls-key turn it on (use_ssl); each
 * --tls-cert adds a file to the chain, in order. With --tls-port, TLS listens there, and
 * the start-up line on stderr says ", TLS on port P".
 *
 * C99 + POSIX threads and signals. SIGINT/SIGTERM call ucall_stop(); the server drains,
 * every thread returns from ucall_take_calls(), and main frees the server.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ucall/ucall.h>

static ucall_server_t volatile the_server = NULL;

static void on_signal(int signal_number) {
    (void)signal_number;
    ucall_stop(the_server);
}

/* ------------------------------------------------------------------ replies */

static void reply_invalid_params(ucall_call_t call, char const* what, char const* name) {
    char message[256];
    snprintf(message, sizeof message, "Invalid params: %s '%s'", what, name);
    ucall_call_reply_error(call, -32602, message, 0);
}

static void reply_i64(ucall_call_t call, int64_t value) {
    char text[32];
    snprintf(text, sizeof text, "%" PRId64, value);
    ucall_call_reply_content(call, text, 0);
}

/* A double in the shortest form that reads back to the same value, always a float. */
static void reply_f64(ucall_call_t call, double value) {
    char text[40];
    int precision;
    for (precision = 1; precision <= 17; ++precision) {
        snprintf(text, sizeof text, "%.*g", precision, value);
        if (strtod(text, NULL) == value)
            break;
    }
    if (!strpbrk(text, ".eEn")) /* integral: keep it a float in JSON, as serde does */
        strcat(text, ".0");
    ucall_call_reply_content(call, text, 0);
}

/* ------------------------------------------------------------------ parameter helpers */

typedef struct number_t {
    bool is_integer;
    int64_t integer;
    double real;
} number_t;

typedef enum lookup_t { lookup_found, lookup_missing, lookup_wrong_type } lookup_t;

/* A number by name (object params) or position (array params). */
static lookup_t get_number(ucall_call_t call, size_t position, char const* name, size_t name_length, number_t* out) {
    ucall_str_t json;
    size_t json_length;
    bool present = ucall_param_named_json(call, name, name_length, &json, &json_length) ||
                   ucall_param_positional_json(call, position, &json, &json_length);
    if (!present)
        return lookup_missing;
    if (ucall_param_named_i64(call, name, name_length, &out->integer) ||
        ucall_param_positional_i64(call, position, &out->integer)) {
        out->is_integer = true;
        out->real = (double)out->integer;
        return lookup_found;
    }
    if (ucall_param_named_f64(call, name, name_length, &out->real) ||
        ucall_param_positional_f64(call, position, &out->real)) {
        out->is_integer = false;
        return lookup_found;
    }
    return lookup_wrong_type;
}

/* Whether params are an object: the first member has a name. */
static bool params_named(ucall_call_t call) {
    ucall_str_t name;
    size_t length;
    return ucall_param_name(call, 0, &name, &length);
}

/* -32602 naming the first parameter beyond `allowed`; returns whether one was found. */
static bool reject_unexpected(ucall_call_t call, char const* const* allowed, size_t allowed_count) {
    size_t count = ucall_param_count(call);
    size_t i, j;
    if (!params_named(call)) {
        if (count > allowed_count) {
            char message[128];
            snprintf(message, sizeof message, "Invalid params: expected at most %zu positional parameters, got %zu",
                     allowed_count, count);
            ucall_call_reply_error(call, -32602, message, 0);
            return true;
        }
        return false;
    }
    for (i = 0; i != count; ++i) {
        ucall_str_t name;
        size_t length;
        bool known = false;
        if (!ucall_param_name(call, i, &name, &length))
            continue;
        for (j = 0; j != allowed_count; ++j)
            known |= strlen(allowed[j]) == length && memcmp(allowed[j], name, length) == 0;
        if (!known) {
            char message[256];
            snprintf(message, sizeof message, "Invalid params: unexpected parameter \"%.*s\"", (int)length, name);
            ucall_call_reply_error(call, -32602, message, 0);
            return true;
        }
    }
    return false;
}

/* ------------------------------------------------------------------ procedures */

static void subtract(ucall_call_t call, ucall_callback_tag_t tag) {
    static char const* const names[] = {"minuend", "subtrahend"};
    number_t operands[2];
    size_t i;
    (void)tag;
    if (reject_unexpected(call, names, 2))
        return;
    for (i = 0; i != 2; ++i) {
        switch (get_number(call, i, names[i], 0, &operands[i])) {
        case lookup_found: break;
        case lookup_missing: reply_invalid_params(call, "missing parameter", names[i]); return;
        case lookup_wrong_type: reply_invalid_params(call, "expected a number for parameter", names[i]); return;
        }
    }
    if (operands[0].is_integer && operands[1].is_integer &&
        !(operands[1].integer < 0 && operands[0].integer > INT64_MAX + operands[1].integer) &&
        !(operands[1].integer > 0 && operands[0].integer < INT64_MIN + operands[1].integer)) {
        reply_i64(call, operands[0].integer - operands[1].integer);
        return;
    }
    {
        double difference = operands[0].real - operands[1].real;
        /* Integral results print as integers, as in the Rust spec server. */
        if (floor(difference) == difference && fabs(difference) < 9.0e15)
            reply_i64(call, (int64_t)difference);
        else
            reply_f64(call, difference);
    }
}

static void sum(ucall_call_t call, ucall_callback_tag_t tag) {
    size_t count = ucall_param_count(call), i;
    bool named = params_named(call), all_integers = true;
    int64_t integer_total = 0;
    double real_total = 0;
    (void)tag;
    for (i = 0; i != count; ++i) {
        ucall_str_t name = NULL;
        size_t name_length = 0;
        number_t value;
        char label[32];
        if (named && !ucall_param_name(call, i, &name, &name_length)) {
            ucall_call_reply_error_unknown(call);
            return;
        }
        /* An empty name comes back as "" with length 0, which reads as NUL-terminated. */
        if (get_number(call, i, named ? name : "\x01", named ? name_length : 0, &value) != lookup_found) {
            snprintf(label, sizeof label, "%zu", i);
            reply_invalid_params(call, "not a number: parameter", label);
            return;
        }
        real_total += value.real;
        if (all_integers && value.is_integer) {
            if ((value.integer > 0 && integer_total > INT64_MAX - value.integer) ||
                (value.integer < 0 && integer_total < INT64_MIN - value.integer))
                all_integers = false;
            else
                integer_total += value.integer;
        } else
            all_integers = false;
    }
    if (all_integers)
        reply_i64(call, integer_total);
    else if (!isfinite(real_total)) /* JSON has no infinity, as in the Rust spec server */
        ucall_call_reply_error(call, -32602, "Invalid params: the sum is too large for a double", 0);
    else
        reply_f64(call, real_total);
}

static void returns_null(ucall_call_t call, ucall_callback_tag_t tag) {
    (void)tag;
    ucall_call_reply_content(call, "null", 4);
}

static void get_data(ucall_call_t call, ucall_callback_tag_t tag) {
    (void)tag;
    if (reject_unexpected(call, NULL, 0))
        return;
    ucall_call_reply_content(call, "[\"hello\",5]", 0);
}

static void echo(ucall_call_t call, ucall_callback_tag_t tag) {
    ucall_str_t json;
    size_t length;
    (void)tag;
    if (!ucall_param_named_json(call, "data", 0, &json, &length) &&
        !ucall_param_positional_json(call, 0, &json, &length)) {
        reply_invalid_params(call, "missing parameter", "data");
        return;
    }
    ucall_call_reply_content(call, json, length);
}

/* Answer the bytes `bytes` of `length` as a JSON string of lowercase hex. */
static void reply_hex(ucall_call_t call, const unsigned char* bytes, size_t length) {
    size_t i;
    char* reply = malloc(2 * length + 3);
    if (!reply) {
        ucall_call_reply_error_out_of_memory(call);
        return;
    }
    reply[0] = '"';
    for (i = 0; i != length; ++i)
        snprintf(reply + 1 + 2 * i, 3, "%02x", bytes[i]);
    reply[1 + 2 * length] = '"';
    ucall_call_reply_content(call, reply, 2 + 2 * length);
    free(reply);
}

/* `hex` of a parameter that is no string: bytes of an attachment, or an error. */
static void hex_attachment(ucall_call_t call) {
    size_t capacity, length;
    for (capacity = 64; capacity <= ((size_t)1 << 20); capacity *= 4) {
        unsigned char* bytes = malloc(capacity);
        if (!bytes) {
            ucall_call_reply_error_out_of_memory(call);
            return;
        }
        if (ucall_param_named_bytes(call, "data", 0, bytes, capacity, &length) ||
            ucall_param_positional_bytes(call, 0, bytes, capacity, &length)) {
            reply_hex(call, bytes, length);
            free(bytes);
            return;
        }
        free(bytes);
    }
    reply_invalid_params(call, "expected a base64 string or an attachment for parameter", "data");
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The bytes a hex text spells, as the result: an attachment of a binary reply for a caller
   that accepts one (docs/wire.md), else base64. */
static void unhex(ucall_call_t call, ucall_callback_tag_t tag) {
    ucall_str_t text;
    size_t length, i;
    unsigned char* bytes;
    (void)tag;
    if (!ucall_param_named_str(call, "text", 0, &text, &length) &&
        !ucall_param_positional_str(call, 0, &text, &length)) {
        reply_invalid_params(call, "missing parameter", "text");
        return;
    }
    bytes = malloc(length / 2 + 1);
    if (!bytes) {
        ucall_call_reply_error_out_of_memory(call);
        return;
    }
    for (i = 0; i + 1 < length; i += 2) {
        int high = hex_digit(text[i]), low = hex_digit(text[i + 1]);
        if (high < 0 || low < 0)
            break;
        bytes[i / 2] = (unsigned char)(high * 16 + low);
    }
    if (length % 2 != 0 || i < length)
        ucall_call_reply_error(call, -32602, "Invalid params: 'text' is not an even number of hex digits", 0);
    else
        ucall_call_reply_attachment(call, bytes, length / 2, NULL, NULL); /* copied */
    free(bytes);
}

/* The float32 array 0, 1, ... n-1: an ndarray attachment, or a .npy in base64. The data is
   the host's floats, little-endian on the hosts this test runs on. */
static void floats(ucall_call_t call, ucall_callback_tag_t tag) {
    int64_t n, i;
    size_t shape[1];
    float* data;
    (void)tag;
    if (!ucall_param_named_i64(call, "n", 0, &n) && !ucall_param_positional_i64(call, 0, &n)) {
        reply_invalid_params(call, "expected an integer for parameter", "n");
        return;
    }
    if (n < 0 || n > (1 << 24)) {
        reply_invalid_params(call, "expected 0 to 2^24 for parameter", "n");
        return;
    }
    data = malloc((size_t)n * sizeof *data + 1);
    if (!data) {
        ucall_call_reply_error_out_of_memory(call);
        return;
    }
    for (i = 0; i < n; ++i)
        data[i] = (float)i;
    shape[0] = (size_t)n;
    ucall_call_reply_array(call, "float32", shape, 1, (uint8_t const*)data, (size_t)n * sizeof *data, NULL, NULL);
    free(data);
}

/* Bytes by position or name (base64, padded or not), answered as lowercase hex. */
static void hex(ucall_call_t call, ucall_callback_tag_t tag) {
    ucall_str_t text;
    size_t text_length, length;
    unsigned char* bytes;
    (void)tag;
    if (!ucall_param_named_str(call, "data", 0, &text, &text_length) &&
        !ucall_param_positional_str(call, 0, &text, &text_length)) {
        /* Not a string: an attachment of a binary message (docs/wire.md), read into a
           buffer grown until it fits (up to 1 MiB: this server's vectors are small). */
        hex_attachment(call);
        return;
    }
    bytes = malloc(UCALL_BASE64_DECODED_CAPACITY(text_length) + 1);
    if (!bytes) {
        ucall_call_reply_error_out_of_memory(call);
        return;
    }
    if (!ucall_param_named_bytes(call, "data", 0, bytes, UCALL_BASE64_DECODED_CAPACITY(text_length), &length) &&
        !ucall_param_positional_bytes(call, 0, bytes, UCALL_BASE64_DECODED_CAPACITY(text_length), &length))
        reply_invalid_params(call, "expected a base64 string for parameter", "data");
    else
        reply_hex(call, bytes, length);
    free(bytes);
}

static void fail(ucall_call_t call, ucall_callback_tag_t tag) {
    (void)tag;
    ucall_call_reply_error_data(call, -32001, "boom", 0, "{\"why\":\"asked to fail\"}", 0);
}

/* A C procedure cannot panic; its abnormal failure is reported as "unknown" (-32603). */
static void panic_procedure(ucall_call_t call, ucall_callback_tag_t tag) {
    (void)tag;
    ucall_call_reply_error_unknown(call);
}

/* ------------------------------------------------------------------ main */

static void* serve(void* argument) {
    uint16_t index = (uint16_t)(uintptr_t)argument;
    ucall_take_calls(the_server, index);
    return NULL;
}

static unsigned long parse_number(char const* flag, char const* text, unsigned long limit) {
    char* end = NULL;
    unsigned long value;
    errno = 0;
    value = strtoul(text, &end, 10);
    if (errno || !end || *end || end == text || value > limit) {
        fprintf(stderr, "error: %s: %s is not a number up to %lu\n", flag, text, limit);
        exit(2);
    }
    return value;
}

int main(int argc, char** argv) {
    ucall_config_t config;
    ucall_server_t server = NULL;
    pthread_t threads[256];
    struct sigaction action;
    char const* host_shown;
    char separate_tls[32];
    char const* certificates[8];
    int i;

    memset(&config, 0, sizeof config);
    config.hostname = "127.0.0.1";
    config.max_threads = 1;
    /* The server's events (a certificate warning, a failed accept) on stderr, where the
       Rust and Python spec servers write theirs. */
    config.logs_file_descriptor = 2;
    config.ssl_certificates_paths = certificates;
    for (i = 1; i < argc; i += 2) {
        char const* flag = argv[i];
        char const* value = i + 1 < argc ? argv[i + 1] : NULL;
        if (!value) {
            fprintf(stderr, "error: %s needs a value\n", flag);
            return 2;
        }
        if (!strcmp(flag, "--host"))
            config.hostname = value;
        else if (!strcmp(flag, "--port")) {
            config.port = (uint16_t)parse_number(flag, value, 65535);
            config.ephemeral_port = config.port == 0;
        } else if (!strcmp(flag, "--threads"))
            config.max_threads = (uint16_t)parse_number(flag, value, 256);
        else if (!strcmp(flag, "--engine"))
            config.engine = value;
        else if (!strcmp(flag, "--max-body-bytes"))
            config.max_body_bytes = parse_number(flag, value, ULONG_MAX);
        else if (!strcmp(flag, "--max-header-bytes"))
            config.max_header_bytes = parse_number(flag, value, ULONG_MAX);
        else if (!strcmp(flag, "--max-batch"))
            config.max_batch_size = (uint16_t)parse_number(flag, value, 65535);
        else if (!strcmp(flag, "--max-connections"))
            config.max_concurrent_connections = (uint32_t)parse_number(flag, value, UINT32_MAX);
        else if (!strcmp(flag, "--header-timeout-ms"))
            config.header_timeout_micro_seconds = (uint32_t)parse_number(flag, value, UINT32_MAX / 1000) * 1000u;
        else if (!strcmp(flag, "--idle-timeout-ms"))
            config.max_lifetime_micro_seconds = (uint32_t)parse_number(flag, value, UINT32_MAX / 1000) * 1000u;
        else if (!strcmp(flag, "--tls-cert")) {
            if (config.ssl_certificates_count == sizeof certificates / sizeof certificates[0]) {
                fprintf(stderr, "error: --tls-cert: at most %zu files\n", config.ssl_certificates_count);
                return 2;
            }
            certificates[config.ssl_certificates_count++] = value;
            config.use_ssl = true;
        } else if (!strcmp(flag, "--tls-key")) {
            config.ssl_private_key_path = value;
            config.use_ssl = true;
        } else if (!strcmp(flag, "--tls-client-ca"))
            config.ssl_client_ca_path = value;
        else if (!strcmp(flag, "--tls-port")) {
            config.ssl_port = (uint16_t)parse_number(flag, value, 65535);
            config.ssl_ephemeral_port = config.ssl_port == 0;
        } else {
            fprintf(stderr, "error: unknown option %s\n", flag);
            return 2;
        }
    }
    if (config.max_threads == 0)
        config.max_threads = 1;

    ucall_init(&config, &server);
    if (!server) {
        char reason[512];
        ucall_last_error(reason, sizeof reason);
        fprintf(stderr, "error: %s\n", reason);
        return 1;
    }
    ucall_add_procedure(server, "subtract", subtract, NULL);
    ucall_add_procedure(server, "sum", sum, NULL);
    ucall_add_procedure(server, "update", returns_null, NULL);
    ucall_add_procedure(server, "notify_hello", returns_null, NULL);
    ucall_add_procedure(server, "notify_sum", returns_null, NULL);
    ucall_add_procedure(server, "get_data", get_data, NULL);
    ucall_add_procedure(server, "echo", echo, NULL);
    ucall_add_procedure(server, "hex", hex, NULL);
    ucall_add_procedure(server, "unhex", unhex, NULL);
    ucall_add_procedure(server, "floats", floats, NULL);
    ucall_add_procedure(server, "fail", fail, NULL);
    ucall_add_procedure(server, "panic", panic_procedure, NULL);

    the_server = server;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, NULL);
    sigaction(SIGTERM, &action, NULL);

    /* The start-up line of every UCall server (docs/operations.md), on stderr. */
    host_shown = config.hostname;
    separate_tls[0] = '\0';
    if (config.use_ssl && config.ssl_port != 0)
        snprintf(separate_tls, sizeof separate_tls, ", TLS on port %u", (unsigned)config.ssl_port);
    fprintf(stderr, strchr(host_shown, ':') ? "ucall: listening on %s://[%s]:%u (engine %s, %u thread%s%s; C API %s)\n"
                                            : "ucall: listening on %s://%s:%u (engine %s, %u thread%s%s; C API %s)\n",
            config.use_ssl && config.ssl_port == 0 ? "https" : "http", host_shown, (unsigned)config.port,
            config.engine, (unsigned)config.max_threads, config.max_threads == 1 ? "" : "s", separate_tls,
            ucall_version());
    fflush(stderr);

    for (i = 1; i < config.max_threads; ++i)
        if (pthread_create(&threads[i], NULL, serve, (void*)(uintptr_t)i) != 0) {
            fprintf(stderr, "error: cannot start thread %d\n", i);
            ucall_stop(server);
            config.max_threads = (uint16_t)i;
            break;
        }
    ucall_take_calls(server, 0);
    for (i = 1; i < config.max_threads; ++i)
        pthread_join(threads[i], NULL);
    ucall_free(server);
    return 0;
}
