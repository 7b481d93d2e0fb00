/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The C API's defined outcomes, checked against a live server on 127.0.0.1: init
 * failures and their text, replies given twice / never / as invalid JSON, JSON, bytes
 * and JSON Pointer parameters, NULL and mixed-up handles, misuse of the serving calls,
 * stop and free, exchanges per connection, TLS, the Unix domain socket. A client in the main thread talks raw
 * TCP (one JSON text per line); the TLS clients are curl and openssl s_client, and the
 * certificates are made by openssl in a temporary directory, removed at the end.
 *
 * Prints "N passed, N failed" and exits non-zero on any failure.
 */
#define _POSIX_C_SOURCE 200809L

#include <arpa/inet.h>
#include <dirent.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ucall/ucall.h>

#include "harness.h"

/* ------------------------------------------------------------------ procedures */

static void reply_twice(ucall_call_t call, ucall_callback_tag_t tag) {
    (void)tag;
    ucall_call_reply_content(call, "1", 1);
    ucall_call_reply_content(call, "2", 1);
    ucall_call_reply_error(call, -32000, "too late", 0);
}

static void error_then_content(ucall_call_t call, ucall_callback_tag_t tag) {
    (void)tag;
    ucall_call_reply_error(call, -32000, "first", 0);
    ucall_call_reply_content(call, "\"second\"", 0);
}

static void no_reply(ucall_call_t call, ucall_callback_tag_t tag) {
    (void)call;
    (void)tag;
}

static void bad_json(ucall_call_t call, ucall_callback_tag_t tag) {
    (void)tag;
    ucall_call_reply_content(call, "{\"oops\":", 0);
}

/* A handed-out parameter replied with as it is goes back unchecked (it is part of the
 * request); any other range of it, here all but its last byte, is checked in full. */
static void echo_param(ucall_call_t call, ucall_callback_tag_t tag) {
    ucall_str_t data;
    size_t length;
    if (!ucall_param_named_json(call, "data", 0, &data, &length)) {
        ucall_call_reply_error_invalid_params(call);
        return;
    }
    ucall_call_reply_content(call, data, tag ? length - 1 : length);
}

static void null_json(ucall_call_t call, ucall_callback_tag_t tag) {
    (void)tag;
    ucall_call_reply_content(call, NULL, 0);
}

static void bad_error_data(ucall_call_t call, ucall_callback_tag_t tag) {
    (void)tag;
    ucall_call_reply_error_data(call, -32001, "boom", 0, "{not json", 0);
}

static void http_status(ucall_call_t call, ucall_callback_tag_t tag) {
    (void)tag;
    ucall_call_reply_error_status(call, 404, 0, "no such user", 0);
}

static void default_message(ucall_call_t call, ucall_callback_tag_t tag) {
    (void)tag;
    ucall_call_reply_error(call, -32602, NULL, 0);
}

/* Replies with the tag's text, to show the tag is passed back. */
static void tagged(ucall_call_t call, ucall_callback_tag_t tag) {
    ucall_call_reply_content(call, (char const*)tag, 0);
}

/* The subject of the client's TLS certificate, as a JSON string, or null. */
static void whoami(ucall_call_t call, ucall_callback_tag_t tag) {
    ucall_str_t subject = NULL;
    size_t length = 0;
    char reply[256];
    (void)tag;
    if (!ucall_call_tls_subject(call, &subject, &length)) {
        ucall_call_reply_content(call, "null", 0);
        return;
    }
    snprintf(reply, sizeof reply, "\"%.*s\"", (int)length, subject);
    ucall_call_reply_content(call, reply, 0);
}

/* [decoded length, first byte, last byte] of the base64 param "b" (or position 0). */
static void bytes(ucall_call_t call, ucall_callback_tag_t tag) {
    unsigned char buffer[64];
    unsigned char tiny[1];
    size_t length = 12345, tiny_length = 777;
    char text[64];
    (void)tag;
    if (!ucall_param_named_bytes(call, "b", 0, buffer, sizeof buffer, &length) &&
        !ucall_param_positional_bytes(call, 0, buffer, sizeof buffer, &length)) {
        ucall_call_reply_error_invalid_params(call);
        return;
    }
    /* Too small a buffer is refused and the length left untouched. */
    if (length > 1 && (ucall_param_named_bytes(call, "b", 0, tiny, sizeof tiny, &tiny_length) || tiny_length != 777)) {
        ucall_call_reply_error_unknown(call);
        return;
    }
    snprintf(text, sizeof text, "[%zu,%d,%d]", length, length ? buffer[0] : -1, length ? buffer[length - 1] : -1);
    ucall_call_reply_content(call, text, 0);
}

/* The string param "s", unescaped, echoed back with its length: ["...", n]. */
static void string_length(ucall_call_t call, ucall_callback_tag_t tag) {
    ucall_str_t text;
    size_t length;
    char reply[256];
    (void)tag;
    if (!ucall_param_named_str(call, "s", 0, &text, &length)) {
        ucall_call_reply_error_invalid_params(call);
        return;
    }
    snprintf(reply, sizeof reply, "%zu", length);
    ucall_call_reply_content(call, reply, 0);
}

/* JSON Pointer lookups: /point/x and /list/1, summed. */
static void pointer(ucall_call_t call, ucall_callback_tag_t tag) {
    int64_t x = 0, y = 0;
    char reply[64];
    (void)tag;
    if (!ucall_param_named_i64(call, "/point/x", 0, &x) || !ucall_param_named_i64(call, "/list/1", 0, &y)) {
        ucall_call_reply_error_invalid_params(call);
        return;
    }
    snprintf(reply, sizeof reply, "%lld", (long long)(x + y));
    ucall_call_reply_content(call, reply, 0);
}

/* Parameter names are UTF-8: "é" (given with its length and NUL-terminated) finds the
 * param, an invalid UTF-8 name finds nothing. Replies x + é. */
static void utf8_names(ucall_call_t call, ucall_callback_tag_t tag) {
    int64_t x = 0, accented = 0, untouched = 7;
    char reply[64];
    (void)tag;
    if (!ucall_param_named_i64(call, "x", 1, &x) || !ucall_param_named_i64(call, "\xc3\xa9", 2, &accented) ||
        !ucall_param_named_i64(call, "\xc3\xa9", 0, &untouched) || untouched != accented ||
        ucall_param_named_i64(call, "\xc3", 1, &untouched) || untouched != accented) {
        ucall_call_reply_error_invalid_params(call);
        return;
    }
    snprintf(reply, sizeof reply, "%lld", (long long)(x + accented));
    ucall_call_reply_content(call, reply, 0);
}

/* Misuse from inside a callback: wrong handles, NULL outputs, ucall_free. */
static void misuse(ucall_call_t call, ucall_callback_tag_t tag) {
    int64_t value = 42;
    ucall_str_t text = NULL;
    size_t length = 0;
    bool ok = true;
    (void)tag;
    ok &= !ucall_param_named_i64(the_server, "a", 0, &value) && value == 42; /* a server is not a call */
    ok &= !ucall_param_named_i64(NULL, "a", 0, &value) && value == 42;
    ok &= !ucall_param_named_i64(call, NULL, 0, &value) && value == 42;
    ok &= !ucall_param_named_i64(call, "a", 0, NULL);
    ok &= !ucall_param_named_str(call, "s", 0, &text, NULL) && text == NULL;
    ok &= !ucall_param_named_i64(call, "s", 0, &value) && value == 42; /* a string is not an integer */
    ok &= ucall_param_count(NULL) == 0 && ucall_param_count(call) == 2;
    ok &= ucall_param_name(call, 1, &text, &length) && length == 1 && text[0] == 'a';
    ok &= !ucall_param_name(call, 2, &text, &length);
    ucall_call_reply_content(NULL, "1", 0);
    ucall_call_reply_content(the_server, "1", 0);
    ucall_call_reply_error_unknown(NULL);
    ucall_take_calls(call, 0); /* a call is not a server: refused */
    ucall_take_call(the_server, 0); /* this thread already serves index 0: refused, no deadlock */
    ucall_free(call);               /* refused: not a server */
    ucall_call_reply_content(call, ok ? "true" : "false", 0);
}

/* A handle kept past its callback, or used from another thread, names no call: at the
 * same stack address another call's context lives meanwhile, and must not be answered. */
static ucall_call_t kept_call = NULL;

static void keep_handle(ucall_call_t call, ucall_callback_tag_t tag) {
    (void)tag;
    kept_call = call;
    ucall_call_reply_content(call, "\"kept\"", 0);
}

static void* use_from_another_thread(void* call) {
    int64_t value = 0;
    static bool refused;
    refused = !ucall_param_named_i64((ucall_call_t)call, "a", 0, &value) && ucall_param_count((ucall_call_t)call) == 0;
    ucall_call_reply_content((ucall_call_t)call, "\"from another thread\"", 0);
    return &refused;
}

static void use_kept_handle(ucall_call_t call, ucall_callback_tag_t tag) {
    pthread_t thread;
    void* refused_elsewhere = NULL;
    bool stale_refused;
    (void)tag;
    stale_refused = kept_call != NULL && kept_call != call && ucall_param_count(kept_call) == 0;
    ucall_call_reply_content(kept_call, "\"stale\"", 0); /* must not answer this call */
    pthread_create(&thread, NULL, use_from_another_thread, call);
    pthread_join(thread, &refused_elsewhere);
    ucall_call_reply_content(call,
                             stale_refused && refused_elsewhere && *(bool*)refused_elsewhere && ucall_param_count(call) == 1
                                 ? "true"
                                 : "false",
                             0);
}

/* ------------------------------------------------------------------ client */

static int connect_to(uint16_t port) {
    struct sockaddr_in address;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct timeval timeout = {5, 0};
    memset(&address, 0, sizeof address);
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr*)&address, sizeof address) != 0) {
        perror("connect");
        exit(1);
    }
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    return fd;
}

/* A client of the Unix domain socket `path`, or -1 (errno set) when it cannot connect. */
static int connect_unix(char const* path) {
    struct sockaddr_un address;
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct timeval timeout = {5, 0};
    memset(&address, 0, sizeof address);
    address.sun_family = AF_UNIX;
    strncpy(address.sun_path, path, sizeof address.sun_path - 1);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr*)&address, sizeof address) != 0) {
        int error = errno;
        close(fd);
        errno = error;
        return -1;
    }
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    return fd;
}

static void write_all(int fd, char const* text) {
    size_t left = strlen(text);
    while (left) {
        ssize_t sent = write(fd, text, left);
        if (sent < 0 && errno == EINTR)
            continue;
        if (sent <= 0) {
            perror("write");
            exit(1);
        }
        text += sent;
        left -= (size_t)sent;
    }
}

/* Send one request line and read one reply line (without its newline). */
/* One reply line (without its newline), NUL-terminated, in a static buffer. */
static char const* read_line(int fd) {
    static char reply[4096];
    size_t used = 0;
    while (used + 1 < sizeof reply) {
        ssize_t got = read(fd, reply + used, 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        if (reply[used] == '\n')
            break;
        used += (size_t)got;
    }
    reply[used] = 0;
    return reply;
}

static char const* exchange(int fd, char const* request) {
    write_all(fd, request);
    write_all(fd, "\n");
    return read_line(fd);
}

/* Everything the server sends until it closes, NUL-terminated; -1 when it is still open
 * after the read time-out (or sends more than fits). */
static ssize_t read_until_closed(int fd, char* buffer, size_t capacity) {
    size_t used = 0;
    for (;;) {
        ssize_t got = read(fd, buffer + used, capacity - 1 - used);
        if (got < 0 && errno == EINTR)
            continue;
        if (got == 0 || (got < 0 && errno == ECONNRESET))
            break;
        if (got < 0 || (used += (size_t)got) + 1 == capacity)
            return -1;
    }
    buffer[used] = 0;
    return (ssize_t)used;
}

/* `request` on a connection of its own, closed after the reply: everything the server
 * sends until it closes, in `buffer`, NUL-terminated; its length, or -1 as
 * `read_until_closed` says. */
static ssize_t http_exchange(uint16_t port, char const* request, char* buffer, size_t capacity) {
    ssize_t length;
    int fd = connect_to(port);
    write_all(fd, request);
    length = read_until_closed(fd, buffer, capacity);
    close(fd);
    return length;
}

/* `GET path` with `Connection: close`, as `http_exchange`. */
static ssize_t http_get(uint16_t port, char const* path, char* buffer, size_t capacity) {
    char request[256];
    snprintf(request, sizeof request, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path);
    return http_exchange(port, request, buffer, capacity);
}

/* A pipe for the library's log lines: [0] read end (non-blocking), [1] the descriptor
 * given as logs_file_descriptor. */
static void open_log_pipe(int ends[2]) {
    if (pipe(ends) != 0 || fcntl(ends[0], F_SETFL, O_NONBLOCK) != 0) {
        perror("pipe");
        exit(1);
    }
}

/* What the log pipe holds now, NUL-terminated (the library writes each line before the
 * call that logs it returns). */
static char const* read_log(int read_end) {
    static char text[8192];
    size_t used = 0;
    ssize_t got;
    while (used + 1 < sizeof text && (got = read(read_end, text + used, sizeof text - 1 - used)) > 0)
        used += (size_t)got;
    text[used] = 0;
    return text;
}

static size_t count_of(char const* text, char const* needle) {
    size_t count = 0;
    for (; (text = strstr(text, needle)) != NULL; text += strlen(needle))
        ++count;
    return count;
}

/* ------------------------------------------------------------------ tests */

static void test_init_failures(void) {
    ucall_config_t config;
    ucall_server_t server = (ucall_server_t)&config; /* must be reset to NULL */
    char small[8];
    size_t full;

    ucall_init(NULL, &server);
    CHECK(server == NULL, "a NULL config gives no server");
    CHECK(last_error_contains("config is NULL"), "the reason names the NULL config");
    ucall_init(NULL, NULL); /* no crash */

    memset(&config, 0, sizeof config);
    config.use_ssl = true;
    server = (ucall_server_t)&config;
    ucall_init(&config, &server);
    CHECK(server == NULL, "TLS without certificates is refused");
    CHECK(last_error_contains("no certificate file"), "the reason says the certificates are missing");

    memset(&config, 0, sizeof config);
    config.logs_format = "xml";
    ucall_init(&config, &server);
    CHECK(server == NULL && last_error_contains("logs_format"), "an unknown logs_format is refused");

    memset(&config, 0, sizeof config);
    config.engine = "fastest";
    ucall_init(&config, &server);
    CHECK(server == NULL && last_error_contains("engine"), "an unknown engine is refused");

    memset(&config, 0, sizeof config);
    config.hostname = "192.0.2.1"; /* TEST-NET-1: no local interface has it, so bind fails */
    config.ephemeral_port = true;
    ucall_init(&config, &server);
    CHECK(server == NULL && last_error_contains("bind"), "an address that cannot be bound fails init");

    full = ucall_last_error(small, sizeof small);
    CHECK(full > sizeof small && strlen(small) == sizeof small - 1, "the text is cut, NUL-terminated, length told");
    CHECK(ucall_last_error(NULL, 0) == full, "NULL with capacity 0 gives the length");
}

/* Every init failure is logged when logs are on, whichever field or step failed. */
static void test_init_failures_are_logged(void) {
    static char const* missing_chain[1] = {"/nonexistent/ucall/missing.pem"};
    ucall_config_t config;
    ucall_server_t server = NULL;
    char const* log;
    int ends[2];
    open_log_pipe(ends);

    memset(&config, 0, sizeof config);
    config.logs_file_descriptor = ends[1];
    config.engine = "x";
    ucall_init(&config, &server);
    log = read_log(ends[0]);
    CHECK(server == NULL && strstr(log, "ucall: init failed error=config.engine") != NULL, "a bad engine is logged: %s",
          log);

    memset(&config, 0, sizeof config);
    config.logs_file_descriptor = ends[1];
    config.logs_format = "json";
    config.ephemeral_port = true;
    config.use_ssl = true;
    config.ssl_certificates_paths = missing_chain;
    config.ssl_certificates_count = 1;
    config.ssl_private_key_path = "/nonexistent/ucall/missing.key";
    ucall_init(&config, &server);
    log = read_log(ends[0]);
    CHECK(server == NULL && strstr(log, "{\"event\":\"init failed\",\"error\":") != NULL &&
              strstr(log, "missing.pem") != NULL,
          "a missing certificate is logged: %s", log);

    memset(&config, 0, sizeof config);
    config.logs_file_descriptor = ends[1];
    config.logs_format = "xml";
    ucall_init(&config, &server);
    log = read_log(ends[0]);
    CHECK(server == NULL && strstr(log, "ucall: init failed error=config.logs_format") != NULL,
          "a bad logs_format is logged, in the human format: %s", log);
    close(ends[0]);
    close(ends[1]);
}

static void test_version(void) {
    CHECK(strcmp(ucall_version(), UCALL_VERSION) == 0, "header %s, library %s", UCALL_VERSION, ucall_version());
}

static void test_serving(void) {
    ucall_config_t config;
    pthread_t thread;
    int fd;
    char const* reply;
    static char const tag_text[] = "\"tag passed back\"";

    memset(&config, 0, sizeof config);
    config.ephemeral_port = true;
    config.max_callbacks = 18;
    config.logs_file_descriptor = 2;
    config.logs_format = "json";
    ucall_init(&config, &the_server);
    CHECK(the_server != NULL, "init on an ephemeral port");
    if (!the_server)
        return;
    CHECK(ucall_last_error(NULL, 0) == 0, "a successful init clears the last error");
    CHECK(config.port != 0 && config.max_threads == 1 && strcmp(config.hostname, "127.0.0.1") == 0 &&
              (strcmp(config.engine, "poll") == 0 || strcmp(config.engine, "uring") == 0) && config.max_batch_size == 1024 &&
              config.max_lifetime_exchanges == UINT32_MAX && config.queue_depth == 4096,
          "the values in force are written back (port %u, engine %s)", (unsigned)config.port, config.engine);

    ucall_add_procedure(the_server, "reply_twice", reply_twice, NULL);
    ucall_add_procedure(the_server, "error_then_content", error_then_content, NULL);
    ucall_add_procedure(the_server, "no_reply", no_reply, NULL);
    ucall_add_procedure(the_server, "bad_json", bad_json, NULL);
    ucall_add_procedure(the_server, "null_json", null_json, NULL);
    ucall_add_procedure(the_server, "echo_param", echo_param, NULL);
    ucall_add_procedure(the_server, "echo_param_cut", echo_param, (ucall_callback_tag_t)1);
    ucall_add_procedure(the_server, "bad_error_data", bad_error_data, NULL);
    ucall_add_procedure(the_server, "default_message", default_message, NULL);
    ucall_add_procedure(the_server, "http_status", http_status, NULL);
    ucall_add_procedure(the_server, "tagged", tagged, (ucall_callback_tag_t)tag_text);
    ucall_add_procedure(the_server, "bytes", bytes, NULL);
    ucall_add_procedure(the_server, "string_length", string_length, NULL);
    ucall_add_procedure(the_server, "pointer", pointer, NULL);
    ucall_add_procedure(the_server, "misuse", misuse, NULL);
    ucall_add_procedure(the_server, "keep_handle", keep_handle, NULL);
    ucall_add_procedure(the_server, "use_kept_handle", use_kept_handle, NULL);
    ucall_add_procedure(the_server, "tagged", tagged, (ucall_callback_tag_t)tag_text); /* replaces: no new slot */
    ucall_add_procedure(the_server, "utf8_names", utf8_names, NULL); /* the last of max_callbacks */
    ucall_add_procedure(the_server, "one_too_many", no_reply, NULL);
    CHECK(last_error_contains("max_callbacks"), "a procedure beyond max_callbacks is refused");
    ucall_add_procedure(the_server, NULL, no_reply, NULL);
    CHECK(last_error_contains("name is NULL"), "a NULL name is refused");
    ucall_add_procedure(the_server, "x", NULL, NULL);
    CHECK(last_error_contains("callback"), "a NULL callback is refused");
    ucall_add_procedure(NULL, "x", no_reply, NULL);
    CHECK(last_error_contains("not a server"), "a NULL server is refused");
    ucall_add_procedure(the_server, "tagged", tagged, (ucall_callback_tag_t)tag_text);
    CHECK(ucall_last_error(NULL, 0) == 0, "a successful ucall_add_procedure clears the last error");

    ucall_take_calls(the_server, 1);
    CHECK(last_error_contains("out of range"), "a thread index out of range returns at once");
    ucall_add_procedure(the_server, "late", no_reply, NULL);
    CHECK(last_error_contains("after serving started"), "procedures cannot be added once serving started");

    pthread_create(&thread, NULL, serve, NULL);
    fd = connect_to(config.port);

    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"reply_twice\",\"id\":1}");
    CHECK(strcmp(reply, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":1}") == 0, "the first reply wins: %s", reply);
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"error_then_content\",\"id\":2}");
    CHECK(strstr(reply, "\"code\":-32000") && strstr(reply, "first"), "a first error wins: %s", reply);
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"no_reply\",\"id\":3}");
    CHECK(strstr(reply, "\"code\":-32603") && strstr(reply, "without a reply"), "no reply is -32603: %s", reply);
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"bad_json\",\"id\":4}");
    CHECK(strstr(reply, "\"code\":-32603") && strstr(reply, "invalid JSON"), "invalid JSON is -32603: %s", reply);
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"echo_param\",\"params\":{\"data\":{\"k\":[1,\"\\u00e9\"]}},\"id\":41}");
    CHECK(strstr(reply, "\"result\":{\"k\":[1,\"\\u00e9\"]}"), "a parameter echoed back as it came: %s", reply);
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"echo_param_cut\",\"params\":{\"data\":{\"k\":1}},\"id\":42}");
    CHECK(strstr(reply, "\"code\":-32603") && strstr(reply, "invalid JSON"), "part of a parameter is checked: %s", reply);
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"null_json\",\"id\":5}");
    CHECK(strstr(reply, "\"code\":-32603") && strstr(reply, "invalid JSON"), "NULL content is -32603: %s", reply);
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"bad_error_data\",\"id\":6}");
    CHECK(strstr(reply, "\"code\":-32603"), "invalid error data is -32603: %s", reply);
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"default_message\",\"id\":7}");
    CHECK(strstr(reply, "{\"code\":-32602,\"message\":\"Invalid params\"}"), "NULL message: the table's: %s", reply);
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"http_status\",\"id\":71}");
    CHECK(strstr(reply, "{\"code\":-32000,\"message\":\"no such user\"}"), "raw TCP: the error alone: %s", reply);
    {
        int http = connect_to(config.port);
        reply = exchange(http, "GET /http_status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        CHECK(strncmp(reply, "HTTP/1.1 404 Not Found", 22) == 0, "HTTP: the status named: %s", reply);
        close(http);
    }
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"tagged\",\"id\":8}");
    CHECK(strstr(reply, "\"result\":\"tag passed back\""), "the tag is passed back: %s", reply);

    /* A notification that never replies sends nothing: the next reply is the next call's. */
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"no_reply\"}\n"
                         "{\"jsonrpc\":\"2.0\",\"method\":\"tagged\",\"id\":9}");
    CHECK(strstr(reply, "\"id\":9"), "a notification gets no reply: %s", reply);

    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"bytes\",\"params\":{\"b\":\"AP8A/w==\"},\"id\":10}");
    CHECK(strstr(reply, "\"result\":[4,0,255]"), "bytes are base64-decoded: %s", reply);
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"bytes\",\"params\":[\"AP8A\\/w\"],\"id\":11}");
    CHECK(strstr(reply, "\"result\":[4,0,255]"), "escaped, unpadded base64 too: %s", reply);
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"bytes\",\"params\":[\"\"],\"id\":12}");
    CHECK(strstr(reply, "\"result\":[0,-1,-1]"), "empty bytes: %s", reply);
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"bytes\",\"params\":[\"not base64!\"],\"id\":13}");
    CHECK(strstr(reply, "\"code\":-32602"), "invalid base64 is refused: %s", reply);

    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"string_length\",\"params\":{\"s\":\"a\\\"b\\u00e9\\n\"},\"id\":14}");
    CHECK(strstr(reply, "\"result\":6"), "strings are unescaped (a\"b + 2-byte e-acute + newline): %s", reply);
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"pointer\",\"params\":{\"point\":{\"x\":40},\"list\":[0,2]},\"id\":15}");
    CHECK(strstr(reply, "\"result\":42"), "JSON Pointer names reach nested values: %s", reply);
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"utf8_names\",\"params\":{\"x\":1,\"\xc3\xa9\":41},\"id\":20}");
    CHECK(strstr(reply, "\"result\":42"), "a UTF-8 parameter name is found, an invalid one is not: %s", reply);
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"misuse\",\"params\":{\"s\":\"x\",\"a\":1},\"id\":16}");
    CHECK(strstr(reply, "\"result\":true"), "misuse inside a callback is refused safely: %s", reply);
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"keep_handle\",\"id\":18}");
    CHECK(strstr(reply, "\"result\":\"kept\""), "a callback that keeps its handle: %s", reply);
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"use_kept_handle\",\"params\":{\"a\":1},\"id\":19}");
    CHECK(strstr(reply, "\"result\":true"), "a kept handle, or one used on another thread, is refused: %s", reply);
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"tagged\",\"id\":17}");
    CHECK(strstr(reply, "\"id\":17"), "the server still serves after the misuse: %s", reply);

    close(fd);
    ucall_stop(the_server);
    ucall_stop(the_server); /* again: nothing more */
    pthread_join(thread, NULL);
    ucall_add_procedure(the_server, "late", no_reply, NULL);
    CHECK(last_error_contains("after the server was stopped"), "a procedure added after ucall_stop says so");
    ucall_free(the_server);
    the_server = NULL;
    ucall_stop(NULL);
    ucall_free(NULL);
    CHECK(1, "stop and free");
}

/* ucall_free while a thread still serves: it stops the server and waits for the thread. */
static void test_free_waits_for_serving_threads(void) {
    ucall_config_t config;
    pthread_t thread;
    memset(&config, 0, sizeof config);
    config.ephemeral_port = true;
    ucall_init(&config, &the_server);
    CHECK(the_server != NULL, "init");
    if (!the_server)
        return;
    ucall_add_procedure(the_server, "error_then_content", error_then_content, NULL);
    pthread_create(&thread, NULL, serve, NULL);
    {
        /* A reply proves the thread is inside ucall_take_calls; the connection stays open. */
        int fd = connect_to(config.port);
        char const* reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"error_then_content\",\"id\":1}");
        CHECK(strstr(reply, "first") != NULL, "served: %s", reply);
        ucall_add_procedure(NULL, "x", no_reply, NULL); /* an error to clear */
        ucall_free(the_server);
        CHECK(ucall_last_error(NULL, 0) == 0, "a successful ucall_free clears the last error");
        close(fd);
    }
    pthread_join(thread, NULL);
    the_server = NULL;
    CHECK(1, "free while serving");
}

/* The request log: with log_requests, each call gets a line on logs_file_descriptor in
 * logs_format; without it (the default), no call is logged there. */
static void test_request_log(void) {
    static char const tag_text[] = "\"logged\"";
    static char const call[] = "{\"jsonrpc\":\"2.0\",\"method\":\"tagged\",\"id\":7}";
    static char const unknown[] = "{\"jsonrpc\":\"2.0\",\"method\":\"nope\",\"id\":8}";
    ucall_config_t config;
    pthread_t thread;
    struct sockaddr_in local;
    socklen_t local_length = sizeof local;
    char expected[256];
    char const* log;
    size_t call_reply, unknown_reply;
    int ends[2], fd, on;

    memset(&config, 0, sizeof config);
    config.ephemeral_port = true;
    config.log_requests = true;
    ucall_init(&config, &the_server);
    CHECK(the_server != NULL && !config.log_requests, "log_requests without a descriptor: written back as off");
    ucall_free(the_server);
    the_server = NULL;

    for (on = 0; on < 2; ++on) {
        open_log_pipe(ends);
        memset(&config, 0, sizeof config);
        config.ephemeral_port = true;
        config.logs_file_descriptor = ends[1];
        config.logs_format = "json";
        config.log_requests = on;
        ucall_init(&config, &the_server);
        CHECK(the_server != NULL && config.log_requests == on, "init with log_requests = %d", on);
        if (!the_server)
            return;
        ucall_add_procedure(the_server, "tagged", tagged, (ucall_callback_tag_t)tag_text);
        pthread_create(&thread, NULL, serve, NULL);
        fd = connect_to(config.port);
        call_reply = strlen(exchange(fd, call));
        unknown_reply = strlen(exchange(fd, unknown));
        getsockname(fd, (struct sockaddr*)&local, &local_length);
        ucall_free(the_server); /* the serving thread writes its last lines as it stops */
        pthread_join(thread, NULL);
        the_server = NULL;
        close(fd);
        log = read_log(ends[0]);
        if (!on) {
            CHECK(strstr(log, "\"method\"") == NULL, "off by default: no call is logged: %s", log);
        } else {
            snprintf(expected, sizeof expected,
                     "\"peer\":\"127.0.0.1:%u\",\"transport\":\"tcp\",\"method\":\"tagged\",\"id\":7,\"code\":0,",
                     (unsigned)ntohs(local.sin_port));
            CHECK(strstr(log, expected) != NULL, "the call's line: %s", log);
            snprintf(expected, sizeof expected, "\"bytes_in\":%zu,\"bytes_out\":%zu}\n", strlen(call), call_reply);
            CHECK(strstr(log, expected) != NULL, "its sizes (%s): %s", expected, log);
            CHECK(strstr(log, "\"method\":\"nope\",\"id\":8,\"code\":-32601,\"duration_us\":0,") != NULL,
                  "an unknown method's line: %s", log);
            snprintf(expected, sizeof expected, "\"bytes_in\":%zu,\"bytes_out\":%zu}\n", strlen(unknown), unknown_reply);
            CHECK(strstr(log, expected) != NULL, "its sizes (%s): %s", expected, log);
            CHECK(count_of(log, "{\"time\":\"") == 2, "two lines, one per call: %s", log);
        }
        close(ends[0]);
        close(ends[1]);
    }
}

/* The core's own records (here: a limit hit) go to logs_file_descriptor too, as the event
 * "log" with a level and a message, in logs_format; a server without logs gets none. */
static void test_core_records_go_to_the_log(void) {
    static char const batch[] = "[{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"id\":1},"
                                "{\"jsonrpc\":\"2.0\",\"method\":\"b\",\"id\":2},"
                                "{\"jsonrpc\":\"2.0\",\"method\":\"c\",\"id\":3}]";
    ucall_config_t config;
    pthread_t thread;
    char const* log;
    char const* reply;
    int ends[2], fd;

    open_log_pipe(ends);
    memset(&config, 0, sizeof config);
    config.ephemeral_port = true;
    config.logs_file_descriptor = ends[1];
    config.logs_format = "json";
    config.max_batch_size = 2;
    ucall_init(&config, &the_server);
    CHECK(the_server != NULL, "init with a log and max_batch_size 2");
    if (!the_server)
        return;
    pthread_create(&thread, NULL, serve, NULL);
    fd = connect_to(config.port);
    reply = exchange(fd, batch);
    CHECK(strstr(reply, "exceeds the limit of 2") != NULL, "a batch of 3 is refused: %s", reply);
    close(fd);
    ucall_free(the_server);
    pthread_join(thread, NULL);
    the_server = NULL;
    log = read_log(ends[0]);
    CHECK(strstr(log, "{\"event\":\"log\",\"level\":\"warn\",\"message\":\"batch refused: 3 requests, more than "
                      "max_batch = 2\"}\n") != NULL,
          "the core's record of the limit is in the log: %s", log);
    close(ends[0]);
    close(ends[1]);
}

/* max_lifetime_exchanges: the connection closes cleanly after that many exchanges. */
static void test_exchanges_per_connection(void) {
    static char const call[] = "{\"jsonrpc\":\"2.0\",\"method\":\"tagged\",\"id\":1}";
    static char const tag_text[] = "7";
    static char const tail[] = "\"id\":1,\"result\":7}";
    ucall_config_t config;
    pthread_t thread;
    char request[512], received[4096];
    char const *reply, *second, *close_header;
    ssize_t length;
    int fd;

    memset(&config, 0, sizeof config);
    config.ephemeral_port = true;
    config.max_lifetime_exchanges = 2;
    ucall_init(&config, &the_server);
    CHECK(the_server != NULL, "init with max_lifetime_exchanges");
    if (!the_server)
        return;
    CHECK(config.max_lifetime_exchanges == 2, "the limit in force is written back: %u",
          (unsigned)config.max_lifetime_exchanges);
    ucall_add_procedure(the_server, "tagged", tagged, (ucall_callback_tag_t)tag_text);
    pthread_create(&thread, NULL, serve, NULL);

    /* Raw TCP: two replies, then the server closes without a word more. */
    fd = connect_to(config.port);
    reply = exchange(fd, call);
    CHECK(strstr(reply, "\"result\":7") != NULL, "first exchange: %s", reply);
    reply = exchange(fd, call);
    CHECK(strstr(reply, "\"result\":7") != NULL, "second exchange: %s", reply);
    length = read_until_closed(fd, received, sizeof received);
    CHECK(length == 0, "raw TCP closes after the second exchange (%zd bytes more: %s)", length,
          length > 0 ? received : "");
    close(fd);

    /* HTTP, two requests in one write: the second reply says Connection: close, then EOF. */
    snprintf(request, sizeof request,
             "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %zu\r\n\r\n%s"
             "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %zu\r\n\r\n%s",
             strlen(call), call, strlen(call), call);
    length = http_exchange(config.port, request, received, sizeof received);
    CHECK(length > 0, "HTTP: the server closes after two replies");
    if (length > 0) {
        second = strstr(received + 1, "HTTP/1.1 200 OK");
        close_header = strstr(received, "Connection: close\r\n");
        CHECK(second != NULL && strstr(second + 1, "HTTP/1.1") == NULL, "exactly two replies: %s", received);
        CHECK(close_header != NULL && second != NULL && close_header > second,
              "only the last reply says Connection: close: %s", received);
        CHECK((size_t)length > strlen(tail) && strcmp(received + length - strlen(tail), tail) == 0,
              "the last reply is whole and nothing follows it: %s", received);
    }

    ucall_stop(the_server);
    pthread_join(thread, NULL);
    ucall_free(the_server);
    the_server = NULL;
}

/* `nap(micro_seconds)`: sleeps that long, then answers "rested". */
static void nap(ucall_call_t call, ucall_callback_tag_t tag) {
    int64_t micro_seconds = 0;
    struct timespec pause;
    (void)tag;
    ucall_param_positional_i64(call, 0, &micro_seconds);
    pause.tv_sec = (time_t)(micro_seconds / 1000000);
    pause.tv_nsec = (long)(micro_seconds % 1000000) * 1000;
    nanosleep(&pause, NULL);
    ucall_call_reply_content(call, "\"rested\"", 0);
}

/* A procedure's time limit (ucall_set_procedure_timeout, 0.2 s) and a caller's (the
 * "timeout" member): a callback that returns late (0.6 s) has its reply dropped; the caller gets -32000
 * "Deadline exceeded" (HTTP 504) in its place, and the next reply follows in order. */
static void test_deadlines(void) {
    ucall_config_t config;
    pthread_t thread;
    char request[1024], received[4096];
    char const *reply, *second;
    ssize_t length;
    int fd;

    memset(&config, 0, sizeof config);
    config.ephemeral_port = true;
    ucall_init(&config, &the_server);
    CHECK(the_server != NULL, "init for the deadline test");
    if (!the_server)
        return;
    ucall_set_procedure_timeout(the_server, "bounded", 200000); /* before the procedure: taken */
    CHECK(ucall_last_error(NULL, 0) == 0, "a time limit before its procedure is taken");
    ucall_add_procedure(the_server, "bounded", nap, NULL);
    ucall_add_procedure(the_server, "free", nap, NULL);
    ucall_set_procedure_timeout(the_server, NULL, 1000);
    CHECK(last_error_contains("NULL"), "a NULL name is refused");
    ucall_set_procedure_timeout(the_server, "free", 0);
    CHECK(last_error_contains("is 0"), "a limit of 0 is refused");
    ucall_set_procedure_timeout(NULL, "free", 1000); /* no server: nothing happens */
    pthread_create(&thread, NULL, serve, NULL);

    fd = connect_to(config.port);
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"bounded\",\"params\":[1000],\"id\":1}");
    CHECK(strstr(reply, "\"result\":\"rested\"") != NULL, "in time: answered: %s", reply);
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"bounded\",\"params\":[600000],\"id\":2}");
    CHECK(strstr(reply, "\"code\":-32000") != NULL && strstr(reply, "Deadline exceeded") != NULL &&
              strstr(reply, "\"id\":2") != NULL,
          "late: the reply is dropped for the error: %s", reply);
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"free\",\"params\":[600000],\"id\":3,\"timeout\":0.2}");
    CHECK(strstr(reply, "Deadline exceeded") != NULL && strstr(reply, "\"id\":3") != NULL,
          "the caller's own deadline applies too: %s", reply);
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"free\",\"params\":[1000],\"id\":4}");
    CHECK(strstr(reply, "\"result\":\"rested\"") != NULL && strstr(reply, "\"id\":4") != NULL,
          "without a deadline: answered: %s", reply);
    close(fd);

    /* HTTP, two requests in one write: 504 for the late one, then the next in order. */
    snprintf(request, sizeof request,
             "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %zu\r\n\r\n%s"
             "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n%s",
             strlen("{\"jsonrpc\":\"2.0\",\"method\":\"bounded\",\"params\":[600000],\"id\":5}"),
             "{\"jsonrpc\":\"2.0\",\"method\":\"bounded\",\"params\":[600000],\"id\":5}",
             strlen("{\"jsonrpc\":\"2.0\",\"method\":\"free\",\"params\":[1],\"id\":6}"),
             "{\"jsonrpc\":\"2.0\",\"method\":\"free\",\"params\":[1],\"id\":6}");
    length = http_exchange(config.port, request, received, sizeof received);
    second = length > 0 ? strstr(received, "HTTP/1.1 200 ") : NULL;
    CHECK(length > 0 && strncmp(received, "HTTP/1.1 504 ", 13) == 0 && strstr(received, "Deadline exceeded") != NULL,
          "HTTP: 504 for the late call: %s", length > 0 ? received : "");
    CHECK(second != NULL && strstr(second, "\"id\":6,\"result\":\"rested\"") != NULL,
          "HTTP: the next reply follows in order: %s", length > 0 ? received : "");

    ucall_stop(the_server);
    pthread_join(thread, NULL);
    ucall_set_procedure_timeout(the_server, "free", 1000);
    CHECK(last_error_contains("after serving started"), "a time limit once serving started is refused");
    ucall_free(the_server);
    the_server = NULL;
}


/* `count`: counts its runs in the int its tag points to, and answers the count. */
static void count_calls(ucall_call_t call, ucall_callback_tag_t tag) {
    char reply[32];
    snprintf(reply, sizeof reply, "%d", ++*(int*)tag);
    ucall_call_reply_content(call, reply, 0);
}

/* Rate limits: the server's (config.rate_limit, 3 a minute) and a procedure's
 * (ucall_set_procedure_rate_limit, 1 a minute): a call past either is refused before its
 * callback runs (-32029 with retry_after_ms and "executed":false over raw TCP; HTTP 429
 * with Retry-After), and a peer past config.max_connections_per_peer is closed at accept. */
static void test_rate_limits(void) {
    ucall_config_t config;
    pthread_t thread;
    char received[4096];
    char const* reply;
    ssize_t length;
    int fd, second, third;
    int runs = 0;
    static char const http_call[] = "POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 41\r\n\r\n"
                                    "{\"jsonrpc\":\"2.0\",\"method\":\"count\",\"id\":7}";

    memset(&config, 0, sizeof config);
    config.ephemeral_port = true;
    config.rate_limit = "1/fortnight";
    ucall_init(&config, &the_server);
    CHECK(the_server == NULL && last_error_contains("rate_limit"), "a rate that does not parse is refused");
    config.rate_limit = "3/min";
    config.rate_limit_key = "header:";
    ucall_init(&config, &the_server);
    CHECK(the_server == NULL && last_error_contains("rate_limit_key"), "a key without a header name is refused");
    config.rate_limit_key = "middleware";
    ucall_init(&config, &the_server);
    CHECK(the_server == NULL && last_error_contains("Python front end"), "a key only Python middleware gives is refused");
    config.rate_limit_key = NULL;
    config.max_connections_per_peer = 2;
    ucall_init(&config, &the_server);
    CHECK(the_server != NULL, "init for the rate limit test");
    if (!the_server)
        return;
    ucall_add_procedure(the_server, "count", count_calls, &runs);
    ucall_add_procedure(the_server, "once", count_calls, &runs);
    ucall_set_procedure_rate_limit(the_server, "once", "2/x");
    CHECK(last_error_contains("\"once\""), "a procedure's rate that does not parse is refused");
    ucall_set_procedure_rate_limit(the_server, "once", "1/min");
    CHECK(ucall_last_error(NULL, 0) == 0, "a procedure's rate is taken");
    pthread_create(&thread, NULL, serve, NULL);

    fd = connect_to(config.port);
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"once\",\"id\":1}");
    CHECK(strstr(reply, "\"result\":1") != NULL, "the first call runs: %s", reply);
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"once\",\"id\":2}");
    CHECK(strstr(reply, "\"code\":-32029") != NULL && strstr(reply, "\"executed\":false") != NULL &&
              strstr(reply, "\"retry_after_ms\":") != NULL && strstr(reply, "\"id\":2") != NULL,
          "past the procedure's limit: refused: %s", reply);
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"count\",\"id\":3}");
    CHECK(strstr(reply, "\"result\":2") != NULL, "another procedure still runs: %s", reply);
    /* A third connection from this address is one past the cap of two. */
    second = connect_to(config.port);
    third = connect_to(config.port);
    length = read_until_closed(third, received, sizeof received);
    CHECK(length == 0, "a connection past max_connections_per_peer is closed at once");
    close(third);
    close(second);
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"count\",\"id\":4}");
    CHECK(strstr(reply, "\"result\":3") != NULL, "the server's third call runs: %s", reply);
    close(fd);
    length = http_exchange(config.port, http_call, received, sizeof received);
    CHECK(length > 0 && strncmp(received, "HTTP/1.1 429 Too Many Requests\r\n", 32) == 0 &&
              strstr(received, "Retry-After: ") != NULL && strstr(received, "\"code\":-32029") != NULL,
          "HTTP: 429 with Retry-After past the server's limit: %s", length > 0 ? received : "");
    CHECK(runs == 3, "refused calls did not run: %d runs", runs);

    ucall_stop(the_server);
    pthread_join(thread, NULL);
    ucall_set_procedure_rate_limit(the_server, "count", "1/s");
    CHECK(last_error_contains("after serving started"), "a rate limit once serving started is refused");
    ucall_free(the_server);
    the_server = NULL;
}

/* The call view's context: the transport, the peer's address, a request header, the id
 * and the method, written back as a JSON array. */
static void context_view(ucall_call_t call, ucall_callback_tag_t tag) {
    char peer[64], reply[512];
    size_t peer_length = 0, token_length = 0, id_length = 0, method_length = 0;
    ucall_str_t token = NULL, id = NULL, method = NULL;
    bool has_peer = ucall_call_peer(call, peer, sizeof peer, &peer_length);
    bool has_token = ucall_call_header(call, "x-token", 0, &token, &token_length);
    bool small = ucall_call_peer(call, peer, 3, &peer_length); /* too small: refused */
    (void)tag;
    ucall_call_id(call, &id, &id_length);
    ucall_call_method(call, &method, &method_length);
    snprintf(reply, sizeof reply, "[\"%s\",%s,\"%s\",\"%.*s\",%.*s,\"%.*s\",%s,%s]", ucall_call_transport(call),
             ucall_call_is_tls(call) ? "true" : "false", has_peer ? peer : "", has_token ? (int)token_length : 0,
             has_token ? token : "", (int)id_length, id, (int)method_length, method, small ? "true" : "false",
             ucall_call_caller_gone(call) ? "true" : "false");
    ucall_call_reply_content(call, reply, 0);
}

/* The caller's trace context, as ["traceparent","tracestate"], or null without one. */
static void trace_view(ucall_call_t call, ucall_callback_tag_t tag) {
    char traceparent[56], reply[512];
    ucall_str_t tracestate = NULL;
    size_t tracestate_length = 0;
    (void)tag;
    if (ucall_call_trace_context(call, traceparent, 55, &tracestate, &tracestate_length)) {
        ucall_call_reply_content(call, "\"a 55-byte buffer was taken\"", 0);
        return;
    }
    if (!ucall_call_trace_context(call, traceparent, sizeof traceparent, &tracestate, &tracestate_length)) {
        ucall_call_reply_content(call, "null", 0);
        return;
    }
    snprintf(reply, sizeof reply, "[\"%s\",\"%.*s\"]", traceparent, (int)tracestate_length,
             tracestate != NULL ? tracestate : "");
    ucall_call_reply_content(call, reply, 0);
}

/* A hook: calls to "guarded" need the header X-Token: abc, else 401; the tag counts the
 * calls the hook saw. */
static bool token_hook(ucall_call_t call, ucall_callback_tag_t tag) {
    ucall_str_t method = NULL, token = NULL;
    size_t method_length = 0, token_length = 0;
    ++*(int*)tag;
    ucall_call_method(call, &method, &method_length);
    if (method_length != 7 || strncmp(method, "guarded", 7) != 0)
        return true;
    if (ucall_call_header(call, "X-Token", 0, &token, &token_length) && token_length == 3 &&
        memcmp(token, "abc", 3) == 0)
        return true;
    ucall_call_reply_error_status(call, 401, 0, "a token is required", 0);
    return false;
}

static void test_context(void) {
    static char const call[] = "{\"jsonrpc\":\"2.0\",\"method\":\"context_view\",\"id\":\"c1\"}";
    static char const guarded[] = "{\"jsonrpc\":\"2.0\",\"method\":\"guarded\",\"id\":3}";
    static int hook_calls = 0;
    ucall_config_t config;
    pthread_t thread;
    char request[512], received[4096], expected[256];
    struct sockaddr_in local;
    socklen_t local_length = sizeof local;
    char const* reply;
    ssize_t length;
    int fd;

    memset(&config, 0, sizeof config);
    config.ephemeral_port = true;
    ucall_init(&config, &the_server);
    CHECK(the_server != NULL, "init for the context test");
    if (!the_server)
        return;
    ucall_keep_context(the_server);
    CHECK(ucall_last_error(NULL, 0) == 0, "ucall_keep_context before serving is taken");
    ucall_add_procedure(the_server, "context_view", context_view, NULL);
    ucall_add_procedure(the_server, "guarded", context_view, NULL);
    ucall_add_procedure(the_server, "trace_view", trace_view, NULL);
    ucall_set_hook(the_server, NULL, NULL);
    CHECK(last_error_contains("NULL"), "a NULL hook is refused");
    ucall_set_hook(the_server, token_hook, &hook_calls);
    CHECK(ucall_call_transport(NULL) == NULL && !ucall_call_is_tls(NULL) && !ucall_call_caller_gone(NULL),
          "no call, no context");
    pthread_create(&thread, NULL, serve, NULL);

    fd = connect_to(config.port);
    getsockname(fd, (struct sockaddr*)&local, &local_length);
    snprintf(expected, sizeof expected, "[\"tcp\",false,\"127.0.0.1:%u\",\"\",\"c1\",\"context_view\",false,false]",
             (unsigned)ntohs(local.sin_port));
    reply = exchange(fd, call);
    CHECK(strstr(reply, expected) != NULL, "raw TCP: transport, peer, id, method, no header: %s (want %s)", reply,
          expected);
    close(fd);

    fd = connect_to(config.port);
    local_length = sizeof local;
    getsockname(fd, (struct sockaddr*)&local, &local_length);
    snprintf(request, sizeof request,
             "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Token: abc\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n%s",
             strlen(call), call);
    snprintf(expected, sizeof expected,
             "[\"http\",false,\"127.0.0.1:%u\",\"abc\",\"c1\",\"context_view\",false,false]", (unsigned)ntohs(local.sin_port));
    write_all(fd, request);
    length = read_until_closed(fd, received, sizeof received);
    CHECK(length > 0 && strstr(received, expected) != NULL, "HTTP: the header too: %s (want %s)",
          length > 0 ? received : "", expected);
    close(fd);

    /* The hook refuses a guarded call without the token (401 over HTTP, the error over
     * raw TCP), and lets one with it through. */
    fd = connect_to(config.port);
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"guarded\",\"id\":2}");
    CHECK(strstr(reply, "\"message\":\"a token is required\"") != NULL, "raw TCP: refused: %s", reply);
    close(fd);
    snprintf(request, sizeof request,
             "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n%s",
             strlen(guarded), guarded);
    length = http_exchange(config.port, request, received, sizeof received);
    CHECK(length > 0 && strncmp(received, "HTTP/1.1 401 ", 13) == 0 && strstr(received, "a token is required"),
          "HTTP: 401 with the JSON-RPC error in the body: %s", length > 0 ? received : "");
    snprintf(request, sizeof request,
             "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Token: abc\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n%s",
             strlen(guarded), guarded);
    length = http_exchange(config.port, request, received, sizeof received);
    CHECK(length > 0 && strncmp(received, "HTTP/1.1 200 ", 13) == 0 && strstr(received, "\"guarded\""),
          "HTTP: the token lets the call through: %s", length > 0 ? received : "");
    CHECK(hook_calls == 5, "the hook ran around every call: %d", hook_calls);

    /* Trace context: the header fields over HTTP (two tracestate fields are one list), a
     * request's "_meta" member over raw TCP; a malformed traceparent is no context. */
    {
        static char const traced[] = "{\"jsonrpc\":\"2.0\",\"method\":\"trace_view\",\"id\":7}";
        static char const parent[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        snprintf(request, sizeof request,
                 "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Token: abc\r\ntraceparent: %s\r\ntracestate: a=1\r\n"
                 "tracestate: b=2\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n%s",
                 parent, strlen(traced), traced);
        length = http_exchange(config.port, request, received, sizeof received);
        snprintf(expected, sizeof expected, "\"result\":[\"%s\",\"a=1,b=2\"]", parent);
        CHECK(length > 0 && strstr(received, expected) != NULL, "HTTP: the trace context: %s (want %s)",
              length > 0 ? received : "", expected);
        fd = connect_to(config.port);
        reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"trace_view\",\"id\":8,\"_meta\":{\"traceparent\":"
                             "\"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00\"}}");
        CHECK(strstr(reply, "\"result\":[\"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00\",\"\"]") != NULL,
              "raw TCP: the _meta member's trace context: %s", reply);
        reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"trace_view\",\"id\":9,\"_meta\":{\"traceparent\":"
                             "\"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-00\"}}");
        CHECK(strstr(reply, "\"id\":9,\"result\":null") != NULL, "raw TCP: an invalid one is ignored: %s", reply);
        close(fd);
    }

    ucall_stop(the_server);
    pthread_join(thread, NULL);
    ucall_keep_context(the_server);
    CHECK(last_error_contains("after serving started"), "ucall_keep_context once serving started is refused");
    ucall_free(the_server);
    the_server = NULL;
}

/* io_uring: an index is served only from the thread that first served it. Another
 * thread is refused with a reason (last error, and the log once), and the worker stays
 * whole for its own thread. */
static char other_thread_error[512];

static void* serve_from_other_thread(void* argument) {
    (void)argument;
    ucall_take_calls(the_server, 0); /* refused at once */
    ucall_take_call(the_server, 0);  /* again: logged only once */
    ucall_last_error(other_thread_error, sizeof other_thread_error);
    return NULL;
}

static void test_uring_index_keeps_its_thread(void) {
    static char const tag_text[] = "\"still served\"";
    ucall_config_t config;
    pthread_t thread;
    char reply[512];
    size_t used = 0;
    char const* log;
    int ends[2], fd, round;

    memset(&config, 0, sizeof config);
    config.ephemeral_port = true;
    open_log_pipe(ends);
    config.logs_file_descriptor = ends[1];
    ucall_init(&config, &the_server);
    CHECK(the_server != NULL, "init");
    if (!the_server)
        return;
    if (strcmp(config.engine, "uring") != 0) {
        printf("io_uring's one-thread-per-index rule not tested: the engine is %s\n", config.engine);
        ucall_free(the_server);
        the_server = NULL;
        close(ends[0]);
        close(ends[1]);
        return;
    }
    ucall_add_procedure(the_server, "tagged", tagged, (ucall_callback_tag_t)tag_text);
    ucall_add_procedure(NULL, "x", no_reply, NULL); /* an error to clear */
    ucall_take_call(the_server, 0);                 /* this thread now serves index 0 */
    CHECK(ucall_last_error(NULL, 0) == 0, "a successful ucall_take_call clears the last error");

    pthread_create(&thread, NULL, serve_from_other_thread, NULL);
    pthread_join(thread, NULL);
    CHECK(strstr(other_thread_error, "ucall_take_call") && strstr(other_thread_error, "one and the same thread"),
          "another thread is refused with the reason: %s", other_thread_error);
    log = read_log(ends[0]);
    CHECK(count_of(log, "ucall: serving refused thread_idx=0") == 1, "the refusal is logged once: %s", log);

    /* The first thread still serves the index. */
    fd = connect_to(config.port);
    write_all(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"tagged\",\"id\":1}\n");
    for (round = 0; round < 500 && !memchr(reply, '\n', used); ++round) {
        ssize_t got;
        ucall_take_call(the_server, 0);
        got = recv(fd, reply + used, sizeof reply - 1 - used, MSG_DONTWAIT);
        if (got > 0)
            used += (size_t)got;
    }
    reply[used] = 0;
    CHECK(strstr(reply, "\"result\":\"still served\"") != NULL, "the first thread still serves: %s", reply);
    close(fd);
    ucall_free(the_server);
    the_server = NULL;
    close(ends[0]);
    close(ends[1]);
}

/* Out of descriptors, accepts fail: the library says so in its log, once a second at
 * most, and writes nothing to stderr. Run in a child process, whose descriptor table
 * the test fills. The poll engine: io_uring accepts into its own table instead. */
static void test_accept_failures_go_to_the_log(void) {
    char captured[] = "/tmp/ucall-api-test-stderr-XXXXXX";
    char text[4096];
    char const* log;
    int ends[2], status, stderr_file;
    ssize_t got;
    pid_t child;

    stderr_file = mkstemp(captured);
    if (stderr_file < 0) {
        perror("mkstemp");
        exit(1);
    }
    unlink(captured);
    open_log_pipe(ends);
    fflush(NULL);
    child = fork();
    if (child == 0) {
        struct rlimit limit = {256, 256};
        ucall_config_t config;
        pthread_t thread;
        struct sockaddr_in address;
        int clients[20], filler, last = -1, index;
        dup2(stderr_file, 2);
        unsetenv("UCALL_ENGINE");
        setrlimit(RLIMIT_NOFILE, &limit);
        memset(&config, 0, sizeof config);
        config.ephemeral_port = true;
        config.engine = "poll";
        config.logs_file_descriptor = ends[1];
        ucall_init(&config, &the_server);
        if (!the_server)
            _exit(2);
        pthread_create(&thread, NULL, serve, NULL);
        /* 20 client sockets, then a full table: the server cannot accept them. */
        memset(&address, 0, sizeof address);
        address.sin_family = AF_INET;
        address.sin_port = htons(config.port);
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        for (index = 0; index < 20; ++index)
            clients[index] = socket(AF_INET, SOCK_STREAM, 0);
        while ((filler = open("/dev/null", O_RDONLY)) >= 0)
            last = filler;
        if (last < 0)
            _exit(3);
        for (index = 0; index < 20; ++index)
            if (connect(clients[index], (struct sockaddr*)&address, sizeof address) != 0)
                _exit(4);
        {
            struct timespec pause = {0, 300 * 1000 * 1000};
            nanosleep(&pause, NULL);
        }
        for (index = 0; index < 20; ++index)
            close(clients[index]);
        ucall_stop(the_server);
        pthread_join(thread, NULL);
        ucall_free(the_server);
        _exit(0);
    }
    close(ends[1]);
    waitpid(child, &status, 0);
    log = read_log(ends[0]);
    lseek(stderr_file, 0, SEEK_SET);
    got = read(stderr_file, text, sizeof text - 1);
    text[got > 0 ? got : 0] = 0;
    close(stderr_file);
    close(ends[0]);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child served and stopped (status %d)", status);
    CHECK(count_of(log, "ucall: accept failed error=Too many open files") == 1,
          "one 'accept failed' line in the log for 20 failed accepts: %s", log);
    CHECK(got == 0, "nothing on stderr: %s", text);
}

/* Refuse io_uring_setup with EPERM, as a container runtime's seccomp profile does; allow
 * every other system call. For this process and its threads, for good. */
static bool forbid_io_uring(void) {
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0), /* the system call's number */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 425 /* io_uring_setup, on every architecture */, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog program = {(unsigned short)(sizeof filter / sizeof filter[0]), filter};
    return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) == 0;
}

static void test_engine_fallback_is_logged(void) {
    char const* log;
    int ends[2], status;
    pid_t child;

    open_log_pipe(ends);
    fflush(NULL);
    child = fork();
    if (child == 0) {
        ucall_config_t config;
        unsetenv("UCALL_ENGINE");
        if (!forbid_io_uring())
            _exit(2);
        memset(&config, 0, sizeof config);
        config.ephemeral_port = true;
        config.logs_file_descriptor = ends[1];
        ucall_init(&config, &the_server);
        if (!the_server)
            _exit(3);
        if (strcmp(config.engine, "poll") != 0)
            _exit(4);
        ucall_free(the_server);
        the_server = NULL;
        /* Forcing uring here fails, naming the cause. */
        memset(&config, 0, sizeof config);
        config.ephemeral_port = true;
        config.engine = "uring";
        ucall_init(&config, &the_server);
        if (the_server || !last_error_contains("the uring engine cannot run here") || !last_error_contains("EPERM"))
            _exit(5);
        _exit(0);
    }
    close(ends[1]);
    waitpid(child, &status, 0);
    log = read_log(ends[0]);
    close(ends[0]);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "auto served with poll where io_uring is forbidden, and uring was refused (status %d)", status);
    CHECK(strstr(log, "engine=poll") && strstr(log, " fallback=io_uring unavailable: ") && strstr(log, "EPERM"),
          "the listening line says why auto took poll: %s", log);
}

/* ------------------------------------------------------------------ TLS */

static char tls_dir[] = "/tmp/ucall-api-test-XXXXXX";

/* The path of `name` in the test's directory, valid until the program ends. */
static char const* in_tls_dir(char const* name) {
    static char paths[64][128];
    static size_t used = 0;
    if (used == sizeof paths / sizeof paths[0]) {
        fprintf(stderr, "in_tls_dir: more than %zu paths\n", used);
        exit(1);
    }
    snprintf(paths[used], sizeof paths[0], "%s/%s", tls_dir, name);
    return paths[used++];
}

static void write_text_file(char const* name, char const* text) {
    FILE* file = fopen(in_tls_dir(name), "w");
    if (!file || fputs(text, file) < 0 || fclose(file) != 0) {
        perror(name);
        exit(1);
    }
}

/* The output of `command` (run by /bin/sh), NUL-terminated, and its exit status. */
static int run_command(char const* command, char* output, size_t capacity) {
    FILE* pipe = popen(command, "r");
    size_t used = 0, got;
    int status;
    if (!pipe)
        return -1;
    while (used + 1 < capacity && (got = fread(output + used, 1, capacity - 1 - used, pipe)) > 0)
        used += got;
    output[used] = 0;
    while (fgetc(pipe) != EOF) {
    }
    status = pclose(pipe);
    return status;
}

/* A CA, a server certificate for localhost / 127.0.0.1 signed by it, and a client
 * certificate, made by openssl (throwaway keys, never stored anywhere else). */
static bool make_tls_material(void) {
    char command[2048], output[4096];
    int status;
    snprintf(command, sizeof command,
             "(cd %s && ec='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes' && "
             "openssl req -x509 $ec -days 1 -subj '/CN=UCall test CA' -keyout ca.key -out ca.pem "
             "-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign && "
             "openssl req $ec -subj /CN=localhost -keyout server.key -out server.csr && "
             "echo subjectAltName=DNS:localhost,IP:127.0.0.1 >server.ext && "
             "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 "
             "-extfile server.ext -out server.pem && "
             "openssl req $ec -subj /CN=client -keyout client.key -out client.csr && "
             "echo extendedKeyUsage=clientAuth >client.ext && "
             "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 "
             "-extfile client.ext -out client.pem) 2>&1",
             tls_dir);
    status = run_command(command, output, sizeof output);
    if (status != 0)
        fprintf(stderr, "openssl failed (status %d): %s\n", status, output);
    return status == 0;
}

/* Whether a chain joined by this process is still in the temporary directory. */
static bool joined_chain_left_behind(void) {
    char const* directory = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char prefix[64];
    struct dirent* entry;
    bool found = false;
    DIR* listing = opendir(directory);
    snprintf(prefix, sizeof prefix, "libucall-chain-%ld-", (long)getpid());
    if (!listing)
        return false;
    while ((entry = readdir(listing)) != NULL)
        found |= strncmp(entry->d_name, prefix, strlen(prefix)) == 0;
    closedir(listing);
    return found;
}

/* ucall_init with TLS from `chain` (NULL-terminated), `key` and `client_ca`; whether it
 * failed with a message holding `needle` (and, when non-NULL, `also`). */
static bool tls_init_fails_with(char const** chain, char const* key, char const* client_ca, char const* needle,
                                char const* also) {
    ucall_config_t config;
    ucall_server_t server = (ucall_server_t)&config;
    memset(&config, 0, sizeof config);
    config.ephemeral_port = true;
    config.use_ssl = true;
    config.ssl_certificates_paths = chain;
    while (chain[config.ssl_certificates_count])
        ++config.ssl_certificates_count;
    config.ssl_private_key_path = key;
    config.ssl_client_ca_path = client_ca;
    ucall_init(&config, &server);
    if (server) {
        ucall_free(server);
        return false;
    }
    if (last_error_contains(needle) && (!also || last_error_contains(also)))
        return true;
    {
        char text[512];
        ucall_last_error(text, sizeof text);
        fprintf(stderr, "  (the message was: %s)\n", text);
    }
    return false;
}

/* A missing or bad file fails ucall_init with a message naming it. */
static void test_tls_failures(void) {
    char const* chain[3] = {NULL, NULL, NULL};
    char const *fake, *missing;
    /* Syntactically a certificate (the DER of an empty SEQUENCE): it gets as far as the key. */
    write_text_file("fake.pem", "-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----\n");
    write_text_file("garbage.pem", "this is no certificate\n");
    write_text_file("bad-base64.pem", "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n");
    write_text_file("cut.pem", "-----BEGIN CERTIFICATE-----\nMAA=\n");
    fake = in_tls_dir("fake.pem");

    chain[0] = missing = in_tls_dir("missing.pem");
    CHECK(tls_init_fails_with(chain, fake, NULL, missing, "ssl_certificates_paths[0]"), "a missing certificate file");
    chain[0] = in_tls_dir("garbage.pem");
    CHECK(tls_init_fails_with(chain, fake, NULL, chain[0], "no PEM certificate"), "a file with no certificate");
    chain[0] = in_tls_dir("bad-base64.pem");
    CHECK(tls_init_fails_with(chain, fake, NULL, chain[0], "not base64"), "a certificate that is not base64");
    chain[0] = in_tls_dir("cut.pem");
    CHECK(tls_init_fails_with(chain, fake, NULL, chain[0], "END CERTIFICATE"), "a certificate cut short");
    chain[0] = fake;
    chain[1] = in_tls_dir("missing-intermediate.pem");
    CHECK(tls_init_fails_with(chain, fake, NULL, chain[1], "ssl_certificates_paths[1]"), "the second file is named");
    chain[1] = NULL;
    missing = in_tls_dir("missing.key");
    CHECK(tls_init_fails_with(chain, missing, NULL, missing, "private key"), "a missing private key file");
    CHECK(tls_init_fails_with(chain, NULL, NULL, "ssl_private_key_path is NULL", NULL), "no private key");
    CHECK(tls_init_fails_with(chain, in_tls_dir("garbage.pem"), NULL, "garbage.pem", "private key"),
          "a key file with no key");
    CHECK(!joined_chain_left_behind(), "no joined chain is left behind");
}

/* TLS on a port of its own beside plaintext, a chain of two files, client certificates. */
static void test_tls_serving(void) {
    static char const tag_text[] = "\"over TLS\"";
    static char const call[] = "{\"jsonrpc\":\"2.0\",\"method\":\"tagged\",\"id\":1}";
    char const* chain[3] = {NULL, NULL, NULL};
    char const *server_line, *ca_line;
    ucall_config_t config;
    pthread_t thread;
    char command[1024], output[16384];
    char const* reply;
    int fd, status;

    chain[0] = in_tls_dir("server.pem");
    chain[1] = in_tls_dir("ca.pem");
    CHECK(tls_init_fails_with(chain, in_tls_dir("ca.key"), NULL, "do not make a usable pair", "server.pem"),
          "a key that does not belong to the certificate");
    CHECK(tls_init_fails_with(chain, in_tls_dir("server.key"), in_tls_dir("missing-ca.pem"), "missing-ca.pem",
                              "client CA"),
          "a missing client CA bundle");

    memset(&config, 0, sizeof config);
    config.ephemeral_port = true;
    config.use_ssl = true;
    config.ssl_certificates_paths = chain;
    config.ssl_certificates_count = 2;
    config.ssl_private_key_path = in_tls_dir("server.key");
    config.ssl_client_ca_path = in_tls_dir("ca.pem");
    config.ssl_ephemeral_port = true;
    config.hsts_max_age_seconds = 31536000;
    ucall_init(&config, &the_server);
    if (!the_server) {
        char text[512];
        ucall_last_error(text, sizeof text);
        CHECK(the_server != NULL, "init with TLS: %s", text);
        return;
    }
    CHECK(config.ssl_port != 0 && config.ssl_port != config.port, "the TLS port in force is written back: %u",
          (unsigned)config.ssl_port);
    CHECK(!joined_chain_left_behind(), "the chain joined from two files is removed once bound");
    ucall_add_procedure(the_server, "tagged", tagged, (ucall_callback_tag_t)tag_text);
    ucall_add_procedure(the_server, "whoami", whoami, NULL);
    pthread_create(&thread, NULL, serve, NULL);

    /* The plain port stays plaintext. */
    fd = connect_to(config.port);
    reply = exchange(fd, call);
    CHECK(strstr(reply, "\"result\":\"over TLS\"") != NULL, "plaintext beside TLS: %s", reply);
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"whoami\",\"id\":2}");
    CHECK(strstr(reply, "\"result\":null") != NULL, "no certificate in plaintext: %s", reply);
    close(fd);

    snprintf(command, sizeof command,
             "timeout 30 curl -s --max-time 20 --cacert %s --cert %s --key %s https://localhost:%u/ -d '%s' 2>&1",
             in_tls_dir("ca.pem"), in_tls_dir("client.pem"), in_tls_dir("client.key"), (unsigned)config.ssl_port,
             "{\"jsonrpc\":\"2.0\",\"method\":\"whoami\",\"id\":3}");
    status = run_command(command, output, sizeof output);
    CHECK(status == 0 && strstr(output, "\"result\":\"CN=client\"") != NULL,
          "the callback reads the client certificate's subject: %s", output);

    snprintf(command, sizeof command,
             "timeout 30 curl -s -i --max-time 20 --cacert %s --cert %s --key %s https://localhost:%u/ -d '%s' 2>&1",
             in_tls_dir("ca.pem"), in_tls_dir("client.pem"), in_tls_dir("client.key"), (unsigned)config.ssl_port,
             call);
    status = run_command(command, output, sizeof output);
    CHECK(status == 0 && strstr(output, "\"result\":\"over TLS\"") != NULL, "HTTPS with a client certificate: %s",
          output);
    CHECK(strstr(output, "Strict-Transport-Security: max-age=31536000\r\n") != NULL,
          "HSTS over TLS (config.hsts_max_age_seconds): %s", output);

    /* Never over plaintext (RFC 6797 section 7.2), though the same server says it over TLS. */
    snprintf(command, sizeof command, "timeout 30 curl -s -i --max-time 20 http://127.0.0.1:%u/ -d '%s' 2>&1",
             (unsigned)config.port, call);
    status = run_command(command, output, sizeof output);
    CHECK(status == 0 && strstr(output, "over TLS") != NULL && strstr(output, "Strict-Transport-Security") == NULL,
          "no HSTS over plaintext: %s", output);

    snprintf(command, sizeof command,
             "timeout 30 curl -s --max-time 20 --cacert %s https://localhost:%u/ -d '%s' 2>&1", in_tls_dir("ca.pem"),
             (unsigned)config.ssl_port, call);
    status = run_command(command, output, sizeof output);
    CHECK(status != 0 && strstr(output, "result") == NULL, "no client certificate, no reply: %s", output);

    /* The chain sent: the server's certificate, then the CA's from the second file. */
    snprintf(command, sizeof command,
             "timeout 30 openssl s_client -connect 127.0.0.1:%u -servername localhost -showcerts "
             "-cert %s -key %s </dev/null 2>/dev/null",
             (unsigned)config.ssl_port, in_tls_dir("client.pem"), in_tls_dir("client.key"));
    run_command(command, output, sizeof output);
    server_line = strstr(output, "s:CN = localhost");
    ca_line = strstr(output, "s:CN = UCall test CA");
    CHECK(server_line && ca_line && server_line < ca_line, "the chain is leaf, then CA: %s", output);

    ucall_stop(the_server);
    pthread_join(thread, NULL);
    ucall_free(the_server);
    the_server = NULL;
}

static void test_tls(void) {
    char command[128], output[256];
    if (!mkdtemp(tls_dir)) {
        perror("mkdtemp");
        exit(1);
    }
    test_tls_failures();
    CHECK(make_tls_material(), "openssl makes the test certificates");
    test_tls_serving();
    snprintf(command, sizeof command, "rm -rf '%s'", tls_dir);
    run_command(command, output, sizeof output);
}

/* A procedure registered with its description appears in rpc.discover and the documents;
 * malformed descriptions are refused; config.discovery moves or turns off the parts. */
static void test_described(void) {
    static char const described[] =
        "{\"summary\":\"Reply with the tag\",\"params\":[],\"result\":{\"schema\":{\"type\":\"integer\"}},"
        "\"examples\":[{\"params\":{},\"result\":7}]}";
    static char const tag_text[] = "7";
    ucall_config_t config;
    pthread_t thread;
    static char received[1 << 17];
    char const* reply;
    int fd;

    memset(&config, 0, sizeof config);
    config.ephemeral_port = true;
    config.discovery = "{\"title\":\"C server\",\"openapi_path\":null}";
    ucall_init(&config, &the_server);
    CHECK(the_server != NULL, "init with config.discovery");
    if (!the_server)
        return;
    ucall_add_procedure_described(the_server, "tagged", tagged, (ucall_callback_tag_t)tag_text, described);
    CHECK(ucall_last_error(NULL, 0) == 0, "a valid description is taken");
    ucall_add_procedure_described(the_server, "typo", no_reply, NULL, "{\"parms\":[]}");
    CHECK(last_error_contains("unknown field `parms`"), "a misspelt member is refused");
    ucall_add_procedure_described(the_server, "other", no_reply, NULL, "{\"name\":\"else\"}");
    CHECK(last_error_contains("the description names \"else\""), "a description of another name is refused");
    ucall_add_procedure_described(the_server, "null", no_reply, NULL, NULL);
    CHECK(last_error_contains("the description is NULL"), "a NULL description is refused");
    ucall_add_procedure(the_server, "plain", no_reply, NULL);
    pthread_create(&thread, NULL, serve, NULL);

    fd = connect_to(config.port);
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"rpc.discover\",\"id\":1}");
    CHECK(strstr(reply, "\"title\":\"C server\"") && strstr(reply, "\"summary\":\"Reply with the tag\"") &&
              strstr(reply, "\"name\":\"plain\"") && !strstr(reply, "\"name\":\"typo\""),
          "rpc.discover lists the described and the plain procedure, not the refused: %.300s", reply);
    close(fd);

    CHECK(http_get(config.port, "/openapi.json", received, sizeof received) > 0 && strstr(received, " 404 "),
          "openapi_path null: no document");
    CHECK(http_get(config.port, "/docs", received, sizeof received) > 0 && strstr(received, "text/html") &&
              strstr(received, "<title>C server</title>"),
          "the /docs page");
    ucall_free(the_server);
    pthread_join(thread, NULL);
    the_server = NULL;

    memset(&config, 0, sizeof config);
    config.ephemeral_port = true;
    config.discovery = "{\"docs_path\":\"docs\"}";
    ucall_init(&config, &the_server);
    CHECK(the_server == NULL && last_error_contains("config.discovery"), "a relative path is refused");
}

/* The latency histogram's buckets come from the config, checked by ucall_init; the
 * readiness probe follows ucall_set_draining. */
static void test_operations(void) {
    static double const buckets[] = {0.003, 0.2};
    static double const backwards[] = {0.2, 0.003};
    static char received[1 << 16];
    ucall_config_t config;
    pthread_t thread;

    memset(&config, 0, sizeof config);
    config.ephemeral_port = true;
    config.metrics_buckets = backwards;
    config.metrics_buckets_count = 2;
    ucall_init(&config, &the_server);
    CHECK(the_server == NULL && last_error_contains("config.metrics_buckets") && last_error_contains("ascend"),
          "buckets out of order are refused");

    config.metrics_buckets = buckets;
    ucall_init(&config, &the_server);
    CHECK(the_server != NULL, "init with config.metrics_buckets");
    if (!the_server)
        return;
    ucall_add_procedure(the_server, "plain", no_reply, NULL);
    pthread_create(&thread, NULL, serve, NULL);

    /* Draining: still serving, but the readiness probe says to send no new calls. */
    CHECK(http_get(config.port, "/readyz", received, sizeof received) > 0 && strstr(received, " 200 ") &&
              strstr(received, "{\"status\":\"serving\"}"),
          "ready while serving: %.200s", received);
    ucall_set_draining(the_server, true);
    CHECK(http_get(config.port, "/readyz", received, sizeof received) > 0 && strstr(received, " 503 ") &&
              strstr(received, "{\"status\":\"draining\"}"),
          "not ready while draining: %.200s", received);
    CHECK(http_get(config.port, "/healthz", received, sizeof received) > 0 && strstr(received, " 200 "),
          "alive while draining: %.200s", received);
    ucall_set_draining(the_server, false);
    CHECK(http_get(config.port, "/readyz", received, sizeof received) > 0 && strstr(received, " 200 "),
          "ready again: %.200s", received);
    ucall_set_draining(NULL, true); /* does nothing */

    CHECK(http_get(config.port, "/metrics", received, sizeof received) > 0 &&
              strstr(received, "ucall_call_duration_seconds_bucket{method=\"plain\",le=\"0.003\"} 0") &&
              strstr(received, "ucall_call_duration_seconds_bucket{method=\"plain\",le=\"0.2\"} 0") &&
              !strstr(received, "le=\"0.005\""),
          "the page has the buckets given, and not the default ones: %.400s", received);
    ucall_free(the_server);
    pthread_join(thread, NULL);
    the_server = NULL;
}

/* The Unix domain socket beside the port: raw TCP and HTTP over it, the file's mode, a
 * stale file replaced, a live one and a plain file refused, the file removed at free. */
static void test_unix_socket(void) {
    static char received[1 << 12];
    char dir[] = "/tmp/ucall-api-unix-XXXXXX";
    char path[128];
    ucall_config_t config;
    pthread_t thread;
    struct stat info;
    ucall_server_t second = NULL;
    int fd;

    memset(&info, 0, sizeof info);
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp: %s", strerror(errno));
        return;
    }
    snprintf(path, sizeof path, "%s/api.sock", dir);
    /* What a killed server leaves: a socket file nobody listens on. */
    fd = connect_unix(path);
    CHECK(fd < 0 && errno == ENOENT, "nothing at the path yet");
    {
        struct sockaddr_un address;
        int stale = socket(AF_UNIX, SOCK_STREAM, 0);
        memset(&address, 0, sizeof address);
        address.sun_family = AF_UNIX;
        strncpy(address.sun_path, path, sizeof address.sun_path - 1);
        CHECK(bind(stale, (struct sockaddr*)&address, sizeof address) == 0, "a stale file: %s", strerror(errno));
        close(stale);
    }

    memset(&config, 0, sizeof config);
    config.ephemeral_port = true;
    config.unix_socket_mode = 0600;
    ucall_init(&config, &the_server);
    CHECK(the_server == NULL && last_error_contains("config.unix_socket_mode needs unix_socket_path"),
          "a mode without a path is refused");
    config.unix_socket_path = path;
    ucall_init(&config, &the_server);
    CHECK(the_server != NULL, "init with unix_socket_path replaces the stale file");
    if (!the_server)
        return;
    CHECK(stat(path, &info) == 0 && S_ISSOCK(info.st_mode) && (info.st_mode & 0777) == 0600,
          "a socket file of mode 0600: %o", (unsigned)info.st_mode);
    ucall_add_procedure(the_server, "tagged", tagged, (ucall_callback_tag_t) "\"over unix\"");
    pthread_create(&thread, NULL, serve, NULL);

    fd = connect_unix(path);
    CHECK(fd >= 0, "connect to the Unix socket: %s", strerror(errno));
    if (fd >= 0) {
        char const* reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"tagged\",\"id\":1}");
        CHECK(strstr(reply, "\"result\":\"over unix\"") != NULL, "raw TCP over the Unix socket: %s", reply);
        close(fd);
    }
    fd = connect_unix(path);
    if (fd >= 0) {
        write_all(fd, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        CHECK(read_until_closed(fd, received, sizeof received) > 0 && strstr(received, " 200 ") &&
                  strstr(received, "alive"),
              "HTTP over the Unix socket: %.200s", received);
        close(fd);
    }
    /* The port serves beside it. */
    CHECK(http_get(config.port, "/healthz", received, sizeof received) > 0 && strstr(received, " 200 "),
          "the port still serves: %.200s", received);

    ucall_init(&config, &second);
    CHECK(second == NULL && last_error_contains("another server listens on it"),
          "a second server on a live socket is refused");
    ucall_free(the_server);
    pthread_join(thread, NULL);
    the_server = NULL;
    CHECK(stat(path, &info) != 0 && errno == ENOENT, "the socket file is removed at free");

    {
        FILE* plain = fopen(path, "w");
        if (plain) {
            fputs("data", plain);
            fclose(plain);
        }
    }
    ucall_init(&config, &second);
    CHECK(second == NULL && last_error_contains("is not a socket"), "a plain file at the path is refused");
    CHECK(stat(path, &info) == 0 && S_ISREG(info.st_mode), "and kept");
    unlink(path);
    rmdir(dir);
}

/* ------------------------------------------------------------------ attachments */

static int released = 0;
static uint8_t reversed[256];

static void count_release(void* userdata) {
    CHECK(userdata == reversed, "release gets its userdata back");
    released++;
}

/* reverse(data): reads its attachment in place, answers the bytes reversed from a static
 * buffer (lent, released once sent); reverse_copy answers them copied. */
static void reverse(ucall_call_t call, ucall_callback_tag_t tag) {
    uint8_t const* data = NULL;
    size_t length = 0, i;
    if (!ucall_param_positional_attachment(call, 0, &data, &length) || length > sizeof reversed) {
        ucall_call_reply_error_invalid_params(call);
        return;
    }
    for (i = 0; i < length; i++)
        reversed[i] = data[length - 1 - i];
    if (tag)
        ucall_call_reply_attachment(call, reversed, length, NULL, NULL);
    else
        ucall_call_reply_attachment(call, reversed, length, count_release, reversed);
}

static void read_exactly(int fd, uint8_t* buffer, size_t length) {
    size_t used = 0;
    while (used < length) {
        ssize_t got = read(fd, buffer + used, length - used);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        used += (size_t)got;
    }
    CHECK(used == length, "read %zu of %zu bytes", used, length);
}

/* A raw TCP binary message (docs/wire.md §3.2) of `text` with one attachment `data`. */
static void send_binary(int fd, char const* text, uint8_t const* data, size_t length) {
    uint8_t message[512];
    size_t json = strlen(text), padded = (json + 63) / 64 * 64, body = padded + length;
    uint32_t json32 = (uint32_t)json;
    uint64_t body64 = body;
    memset(message, 0, sizeof message);
    message[0] = 0xC1;
    message[1] = 1;
    memcpy(message + 4, &json32, 4); /* little-endian hosts only, as the server */
    memcpy(message + 8, &body64, 8);
    memcpy(message + 16, text, json);
    memcpy(message + 16 + padded, data, length);
    CHECK(write(fd, message, 16 + body) == (ssize_t)(16 + body), "send a binary message");
}

static void test_attachments(void) {
    ucall_config_t config;
    pthread_t thread;
    int fd;
    uint8_t prefix[16], body[256];
    uint32_t json_length;
    uint64_t body_length;
    static uint8_t const data[] = {1, 2, 3, 4, 5};
    char const* reply;
    char received[2048];

    memset(&config, 0, sizeof config);
    config.ephemeral_port = true;
    ucall_init(&config, &the_server);
    CHECK(the_server != NULL, "init for attachments");
    if (!the_server)
        return;
    ucall_add_procedure(the_server, "reverse", reverse, NULL);
    ucall_add_procedure(the_server, "reverse_copy", reverse, (ucall_callback_tag_t)1);
    pthread_create(&thread, NULL, serve, NULL);

    /* A binary message: the reply is one, its attachment the bytes reversed. */
    fd = connect_to(config.port);
    send_binary(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"reverse\",\"params\":[{\"$ucall\":\"bytes\",\"offset\":0,\"length\":5}],\"id\":1}",
                data, sizeof data);
    read_exactly(fd, prefix, sizeof prefix);
    memcpy(&json_length, prefix + 4, 4);
    memcpy(&body_length, prefix + 8, 8);
    CHECK(prefix[0] == 0xC1 && prefix[1] == 1 && body_length <= sizeof body, "a binary reply (%u, %u)",
          (unsigned)prefix[0], (unsigned)body_length);
    if (prefix[0] == 0xC1 && body_length <= sizeof body) {
        size_t padded = (json_length + 63) / 64 * 64;
        read_exactly(fd, body, (size_t)body_length);
        body[json_length < sizeof body ? json_length : 0] = 0;
        CHECK(strstr((char const*)body, "{\"$ucall\":\"bytes\",\"offset\":0,\"length\":5}") != NULL,
              "the result is a placeholder: %s", (char const*)body);
        CHECK(body_length == padded + 5 && memcmp(body + padded, "\5\4\3\2\1", 5) == 0,
              "the attachment holds the bytes reversed");
    }
    /* The copying form, on the same connection. */
    send_binary(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"reverse_copy\",\"params\":[{\"$ucall\":\"bytes\",\"offset\":0,\"length\":5}],\"id\":2}",
                data, sizeof data);
    read_exactly(fd, prefix, sizeof prefix);
    memcpy(&body_length, prefix + 8, 8);
    CHECK(prefix[0] == 0xC1 && body_length == 128 + 5, "the copied bytes are an attachment too");
    if (body_length <= sizeof body)
        read_exactly(fd, body, (size_t)body_length);
    /* A plain JSON text: no attachment to read. */
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"reverse\",\"params\":[\"AQID\"],\"id\":3}");
    CHECK(strstr(reply, "-32602") != NULL, "a base64 string is no attachment: %s", reply);
    close(fd);

    /* HTTP without Accept: base64 (the bytes reversed). */
    {
        char request[512];
        static char const text[] =
            "{\"jsonrpc\":\"2.0\",\"method\":\"reverse\",\"params\":[{\"$ucall\":\"bytes\",\"offset\":0,\"length\":5}],\"id\":4}";
        size_t json = strlen(text), padded = (json + 63) / 64 * 64;
        int length = snprintf(request, sizeof request,
                              "POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/vnd.ucall.binary\r\n"
                              "UCall-JSON-Length: %zu\r\nContent-Length: %zu\r\n\r\n%s",
                              json, padded + 5, text);
        fd = connect_to(config.port);
        write_all(fd, request);
        memset(request, 0, sizeof request);
        CHECK(write(fd, request, padded - json) == (ssize_t)(padded - json) && write(fd, data, 5) == 5,
              "send the section (%d)", length);
        CHECK(read_until_closed(fd, received, sizeof received) > 0 && strstr(received, "\"result\":\"BQQDAgE=\"") &&
                  strstr(received, "application/json"),
              "a plain JSON caller gets base64: %.300s", received);
        close(fd);
    }
    ucall_stop(the_server);
    pthread_join(thread, NULL);
    ucall_free(the_server);
    the_server = NULL;
    CHECK(released == 2, "each lent reply released once it was sent (%d)", released);
}

/* describe(x): what ucall_param_*_array says of x, as {"dtype":...,"shape":[...]}; tag
 * non-NULL reads it by name. */
static void describe(ucall_call_t call, ucall_callback_tag_t tag) {
    ucall_str_t dtype = NULL;
    size_t const* shape = NULL;
    size_t dimensions = 99, i;
    char text[256];
    int used;
    bool found = tag ? ucall_param_named_array(call, "x", 0, &dtype, &shape, &dimensions)
                     : ucall_param_positional_array(call, 0, &dtype, &shape, &dimensions);
    if (!found) {
        CHECK(dtype == NULL && shape == NULL && dimensions == 99, "outputs untouched on false");
        ucall_call_reply_error(call, -32602, "not an array", 0);
        return;
    }
    CHECK(dimensions == 0 ? shape == NULL : shape != NULL, "a shape for %zu dimensions", dimensions);
    used = snprintf(text, sizeof text, "{\"dtype\":\"%s\",\"shape\":[", dtype);
    for (i = 0; i < dimensions; i++)
        used += snprintf(text + used, sizeof text - (size_t)used, "%s%zu", i ? "," : "", shape[i]);
    snprintf(text + used, sizeof text - (size_t)used, "]}");
    CHECK(!ucall_param_positional_array(call, 0, NULL, &shape, &dimensions) &&
              !ucall_param_positional_array(call, 0, &dtype, NULL, &dimensions) &&
              !ucall_param_positional_array(call, 0, &dtype, &shape, NULL) &&
              !ucall_param_positional_array(NULL, 0, &dtype, &shape, &dimensions),
          "a NULL output or call is refused");
    ucall_call_reply_content(call, text, 0);
}

static void test_array_params(void) {
    ucall_config_t config;
    pthread_t thread;
    int fd;
    size_t i;
    char const* reply;
    static uint8_t const data[24] = {0};
    /* Arrays sent as attachments, and what describe must answer of each. */
    static struct {
        char const* what;
        bool named;
        char const* dtype;
        char const* shape; /* its dimensions, comma-separated */
        size_t length;
    } const arrays[] = {
        {"dtype and shape", false, "float32", "2,3", 24},
        {"by name", true, "int64", "3", 24},
        {"a scalar", false, "uint8", "", 1},
    };

    memset(&config, 0, sizeof config);
    config.ephemeral_port = true;
    ucall_init(&config, &the_server);
    CHECK(the_server != NULL, "init for array params");
    if (!the_server)
        return;
    ucall_add_procedure(the_server, "describe", describe, NULL);
    ucall_add_procedure(the_server, "describe_named", describe, (ucall_callback_tag_t)1);
    pthread_create(&thread, NULL, serve, NULL);
    fd = connect_to(config.port);

    for (i = 0; i < sizeof arrays / sizeof arrays[0]; i++) {
        char placeholder[160], request[256], result[96];
        snprintf(placeholder, sizeof placeholder,
                 "{\"$ucall\":\"ndarray\",\"offset\":0,\"length\":%zu,\"dtype\":\"%s\",\"shape\":[%s]}",
                 arrays[i].length, arrays[i].dtype, arrays[i].shape);
        snprintf(request, sizeof request,
                 arrays[i].named ? "{\"jsonrpc\":\"2.0\",\"method\":\"describe_named\",\"params\":{\"x\":%s},\"id\":%zu}"
                                 : "{\"jsonrpc\":\"2.0\",\"method\":\"describe\",\"params\":[%s],\"id\":%zu}",
                 placeholder, i + 1);
        send_binary(fd, request, data, arrays[i].length);
        reply = read_line(fd);
        snprintf(result, sizeof result, "\"result\":{\"dtype\":\"%s\",\"shape\":[%s]}", arrays[i].dtype,
                 arrays[i].shape);
        CHECK(strstr(reply, result) != NULL, "%s: %s", arrays[i].what, reply);
    }

    /* A bytes attachment, a base64 string and an absent name are no array. */
    send_binary(fd,
                "{\"jsonrpc\":\"2.0\",\"method\":\"describe\",\"params\":[{\"$ucall\":\"bytes\",\"offset\":0,"
                "\"length\":24}],\"id\":4}",
                data, 24);
    reply = read_line(fd);
    CHECK(strstr(reply, "-32602") != NULL, "a bytes attachment is no array: %s", reply);
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"describe\",\"params\":[\"AQID\"],\"id\":5}");
    CHECK(strstr(reply, "-32602") != NULL, "a base64 string is no array: %s", reply);
    reply = exchange(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"describe_named\",\"params\":{\"y\":1},\"id\":6}");
    CHECK(strstr(reply, "-32602") != NULL, "an absent parameter is no array: %s", reply);
    close(fd);

    ucall_stop(the_server);
    pthread_join(thread, NULL);
    ucall_free(the_server);
    the_server = NULL;
}

int main(void) {
    /* First: a process probes io_uring once, and the forked child must not inherit a
     * probe made before its filter. */
    test_engine_fallback_is_logged();
    test_version();
    test_init_failures();
    test_init_failures_are_logged();
    test_serving();
    test_free_waits_for_serving_threads();
    test_exchanges_per_connection();
    test_request_log();
    test_core_records_go_to_the_log();
    test_context();
    test_deadlines();
    test_rate_limits();
    test_uring_index_keeps_its_thread();
    test_accept_failures_go_to_the_log();
    test_tls();
    test_described();
    test_operations();
    test_unix_socket();
    test_attachments();
    test_array_params();
    return report();
}
