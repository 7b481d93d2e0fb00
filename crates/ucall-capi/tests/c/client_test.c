/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The C client against a C server in the same process, on 127.0.0.1: calls by position
 * and by name, error replies with their data, notifications, many calls, every
 * transport (HTTP, raw TCP, WebSocket), the failures (params that are not JSON, no
 * server, NULL and mixed-up handles) and their ucall_last_error() text; attachments
 * (docs/wire.md): a float32 array and bytes sent raw beside the JSON text and echoed
 * back as an attachment of a binary reply, read in place, and what is refused.
 *
 * Prints "N passed, N failed" and exits non-zero on any failure.
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ucall/ucall.h>

#include "harness.h"

static void sum(ucall_call_t call, ucall_callback_tag_t tag) {
    int64_t a, b;
    char text[24];
    (void)tag;
    if ((!ucall_param_named_i64(call, "a", 0, &a) && !ucall_param_positional_i64(call, 0, &a)) ||
        (!ucall_param_named_i64(call, "b", 0, &b) && !ucall_param_positional_i64(call, 1, &b))) {
        ucall_call_reply_error_invalid_params(call);
        return;
    }
    snprintf(text, sizeof text, "%lld", (long long)(a + b));
    ucall_call_reply_content(call, text, 0);
}

static void fail(ucall_call_t call, ucall_callback_tag_t tag) {
    (void)tag;
    ucall_call_reply_error_data(call, -32001, "asked to \"fail\"", 0, "{\"why\":[1,2]}", 0);
}

/* Echo the attachment `data` (by name or first by position) as the result: an attachment
 * of a binary reply. A base64 string is refused, so a reply shows one came raw. */
static void echo_attachment(ucall_call_t call, ucall_callback_tag_t tag) {
    uint8_t const *data;
    size_t length;
    (void)tag;
    if (!ucall_param_named_attachment(call, "data", 0, &data, &length) &&
        !ucall_param_positional_attachment(call, 0, &data, &length)) {
        ucall_call_reply_error(call, -32602, "data is not an attachment", 0);
        return;
    }
    ucall_call_reply_attachment(call, data, length, NULL, NULL);
}

/* The float32 attachment `x` doubled, answered as a float32 array (ucall_call_reply_array). */
static void scale(ucall_call_t call, ucall_callback_tag_t tag) {
    uint8_t const *data;
    size_t length, i, shape[1];
    float doubled[64];
    (void)tag;
    if (!ucall_param_positional_attachment(call, 0, &data, &length) || length % 4 != 0 || length > sizeof doubled) {
        ucall_call_reply_error_invalid_params(call);
        return;
    }
    for (i = 0; i < length / 4; ++i) {
        float value;
        memcpy(&value, data + 4 * i, 4);
        doubled[i] = 2 * value;
    }
    shape[0] = length / 4;
    ucall_call_reply_array(call, "float32", shape, 1, (uint8_t const *)doubled, length, NULL, NULL);
}

/* Arrays that do not add up: a shape of 5 floats over 24 bytes, and an unknown dtype. */
static void bad_array(ucall_call_t call, ucall_callback_tag_t tag) {
    static float const data[6] = {0};
    size_t shape[1] = {5};
    int64_t which = 0;
    (void)tag;
    ucall_param_positional_i64(call, 0, &which);
    ucall_call_reply_array(call, which ? "float99" : "float32", shape, 1, (uint8_t const *)data, sizeof data, NULL,
                           NULL);
}

/* The `n` param plus the length of the attachment `data` (by name), as JSON. */
static void measure(ucall_call_t call, ucall_callback_tag_t tag) {
    uint8_t const *data;
    size_t length;
    int64_t n;
    char text[48];
    (void)tag;
    if (!ucall_param_named_i64(call, "n", 0, &n) || !ucall_param_named_attachment(call, "data", 0, &data, &length)) {
        ucall_call_reply_error_invalid_params(call);
        return;
    }
    snprintf(text, sizeof text, "%lld", (long long)n + (long long)length);
    ucall_call_reply_content(call, text, 0);
}

static int has_text(ucall_str_t text, size_t length, char const *needle) {
    size_t i, n = strlen(needle);
    for (i = 0; i + n <= length; ++i)
        if (memcmp(text + i, needle, n) == 0)
            return 1;
    return 0;
}

static int equals(ucall_str_t text, size_t length, char const *expected) {
    return length == strlen(expected) && memcmp(text, expected, length) == 0;
}

static void exercise_attachments(char const *url, ucall_client_config_t const *base) {
    ucall_client_config_t config = *base;
    ucall_client_t client = NULL, small = NULL;
    ucall_client_response_t response;
    ucall_client_attachment_t sent[2], got;
    float floats[6] = {-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f};
    size_t shape[2] = {2, 3}, wrong_shape[1] = {5};
    static uint8_t blob[100000];
    size_t i;

    for (i = 0; i < sizeof blob; ++i)
        blob[i] = (uint8_t)(i % 253);
    config.max_reply_size = 0;
    CHECK(ucall_client_new(&config, &client) && client != NULL, "%s: a client for attachments", url);
    if (!client)
        return;

    /* A float32 array by position: out raw, back as an attachment, read where it lies. */
    memset(sent, 0, sizeof sent);
    sent[0].data = floats;
    sent[0].length = sizeof floats;
    sent[0].dtype = "float32";
    sent[0].shape = shape;
    sent[0].dimensions = 2;
    CHECK(ucall_client_call_attached(client, "echo_attachment", 0, NULL, 0, sent, 1, &response) && response.ok &&
              response.result_length > 0 && response.result[0] == '{',
          "%s: an array sent as an attachment, the result a placeholder", url);
    memset(&got, 0, sizeof got);
    CHECK(ucall_client_result_attachment(client, NULL, 0, &got) && got.length == sizeof floats &&
              memcmp(got.data, floats, sizeof floats) == 0 && got.dtype == NULL && got.name == NULL &&
              got.dimensions == 0,
          "%s: the array's bytes come back, read in place", url);

    /* An array reply: its dtype and shape come with it. */
    CHECK(ucall_client_call_attached(client, "scale", 0, NULL, 0, sent, 1, &response) && response.ok &&
              ucall_client_result_attachment(client, NULL, 0, &got) && got.length == sizeof floats &&
              got.dtype != NULL && strcmp(got.dtype, "float32") == 0 && got.dimensions == 1 && got.shape[0] == 6 &&
              ((float const *)got.data)[5] == 3.0f && ((float const *)got.data)[0] == -2.0f,
          "%s: a float32 array reply read with its dtype and shape", url);
    CHECK(ucall_client_call(client, "bad_array", 0, "[0]", 0, &response) && !response.ok &&
              response.error_code == -32603,
          "%s: an array reply whose data does not fill its shape is -32603", url);
    CHECK(ucall_client_call(client, "bad_array", 0, "[1]", 0, &response) && !response.ok &&
              response.error_code == -32603 &&
              has_text(response.error_message, response.error_message_length, "unknown dtype"),
          "%s: an array reply of an unknown dtype is -32603", url);

    /* Bytes by name beside JSON params. */
    memset(sent, 0, sizeof sent);
    sent[0].name = "data";
    sent[0].data = blob;
    sent[0].length = sizeof blob;
    CHECK(ucall_client_call_attached(client, "measure", 0, "{\"n\":5}", 0, sent, 1, &response) && response.ok &&
              equals(response.result, response.result_length, "100005"),
          "%s: named bytes beside named params", url);
    CHECK(ucall_client_call_attached(client, "echo_attachment", 0, "{}", 0, sent, 1, &response) && response.ok &&
              ucall_client_result_attachment(client, "", 0, &got) && got.length == sizeof blob &&
              memcmp(got.data, blob, sizeof blob) == 0,
          "%s: 100 kB of bytes round trip", url);
    CHECK(!ucall_client_result_attachment(client, "/x", 0, &got) && last_error_contains("nothing at \"/x\""),
          "%s: a JSON Pointer to nothing", url);

    /* What is refused, before anything is sent. */
    CHECK(!ucall_client_call_attached(client, "echo_attachment", 0, "[1]", 0, sent, 1, &response) &&
              last_error_contains("has a name (params are an array)"),
          "%s: a named attachment in array params", url);
    memset(sent, 0, sizeof sent);
    sent[0].data = floats;
    sent[0].length = sizeof floats;
    sent[0].dtype = "float99";
    CHECK(!ucall_client_call_attached(client, "echo_attachment", 0, NULL, 0, sent, 1, &response) &&
              last_error_contains("\"float99\" is not a dtype"),
          "%s: an unknown dtype", url);
    sent[0].dtype = "float32";
    sent[0].shape = wrong_shape;
    sent[0].dimensions = 1;
    CHECK(!ucall_client_call_attached(client, "echo_attachment", 0, NULL, 0, sent, 1, &response) &&
              last_error_contains("an array of 24 bytes is not [5] float32 elements"),
          "%s: data that does not fill its shape", url);
    sent[0].data = NULL;
    CHECK(!ucall_client_call_attached(client, "echo_attachment", 0, NULL, 0, sent, 1, &response) &&
              last_error_contains("its data is NULL"),
          "%s: NULL data", url);
    CHECK(!ucall_client_call_attached(client, "echo_attachment", 0, NULL, 0, NULL, 1, &response) &&
              last_error_contains("attachments are NULL"),
          "%s: NULL attachments", url);

    /* A plain call's reply has no attachment; its result is JSON as ever. */
    CHECK(ucall_client_call(client, "sum", 0, "[1,2]", 0, &response) && response.ok &&
              !ucall_client_result_attachment(client, NULL, 0, &got) && last_error_contains("not an attachment"),
          "%s: a JSON reply holds no attachment", url);
    CHECK(!ucall_client_result_attachment(client, NULL, 0, NULL) && last_error_contains("NULL"),
          "%s: a NULL out-parameter", url);
    ucall_client_free(client);

    /* A binary reply over max_reply_size fails its call; the next one works. */
    config.max_reply_size = 200;
    CHECK(ucall_client_new(&config, &small) && small != NULL, "%s: a client with a small max_reply_size", url);
    if (small) {
        memset(sent, 0, sizeof sent);
        sent[0].data = blob;
        sent[0].length = 1000;
        CHECK(!ucall_client_call_attached(small, "echo_attachment", 0, NULL, 0, sent, 1, &response) &&
                  last_error_contains("over the client's max_reply_size of 200 bytes"),
              "%s: a binary reply over max_reply_size is refused", url);
        sent[0].length = 3;
        CHECK(ucall_client_call_attached(small, "echo_attachment", 0, NULL, 0, sent, 1, &response) && response.ok &&
                  ucall_client_result_attachment(small, NULL, 0, &got) && got.length == 3 &&
                  memcmp(got.data, blob, 3) == 0,
              "%s: the next call, under the limit, works", url);
        ucall_client_free(small);
    }
}

static void exercise(char const *url) {
    ucall_client_config_t config;
    ucall_client_t client = NULL, small = NULL;
    ucall_client_response_t response;
    char big[4096];
    int i, all = 1;

    memset(&config, 0, sizeof config);
    config.url = url;
    config.timeout_micro_seconds = 10u * 1000u * 1000u;
    CHECK(ucall_client_new(&config, &client) && client != NULL, "%s: a client", url);
    if (!client)
        return;

    CHECK(ucall_client_call(client, "sum", 0, "[1,2]", 0, &response) && response.ok &&
              equals(response.result, response.result_length, "3"),
          "%s: sum by position", url);
    CHECK(ucall_client_call(client, "sum", 3, "{\"a\":40,\"b\":2}xx", 14, &response) && response.ok &&
              equals(response.result, response.result_length, "42"),
          "%s: sum by name, lengths given", url);
    CHECK(ucall_client_call(client, "fail", 0, NULL, 0, &response) && !response.ok && response.error_code == -32001 &&
              equals(response.error_message, response.error_message_length, "asked to \"fail\"") &&
              equals(response.error_data, response.error_data_length, "{\"why\":[1,2]}"),
          "%s: an error reply with its message decoded and its data", url);
    CHECK(ucall_client_call(client, "nope", 0, "[]", 0, &response) && !response.ok && response.error_code == -32601 &&
              response.error_data_length == 0,
          "%s: an unknown method", url);
    CHECK(ucall_client_notify(client, "sum", 0, "[1,1]", 0), "%s: a notification", url);
    for (i = 0; i < 200; ++i) {
        char params[64], expected[32];
        snprintf(params, sizeof params, "[%d,1]", i);
        snprintf(expected, sizeof expected, "%d", i + 1);
        all &= ucall_client_call(client, "sum", 0, params, 0, &response) && response.ok &&
               equals(response.result, response.result_length, expected);
    }
    CHECK(all, "%s: 200 calls in a row", url);

    /* A reply over max_reply_size fails its call naming both sizes; the next call works. */
    config.max_reply_size = 60;
    CHECK(ucall_client_new(&config, &small) && small != NULL, "%s: a client with max_reply_size", url);
    if (small) {
        CHECK(!ucall_client_call(small, "fail", 0, NULL, 0, &response) &&
                  last_error_contains("over the client's max_reply_size of 60 bytes"),
              "%s: a reply over max_reply_size is refused", url);
        CHECK(ucall_client_call(small, "sum", 0, "[1,2]", 0, &response) && response.ok &&
                  equals(response.result, response.result_length, "3"),
              "%s: the next call, under the limit, works", url);
        ucall_client_free(small);
    }

    exercise_attachments(url, &config);

    response.result_length = 12345;
    response.error_code = 777;
    CHECK(!ucall_client_call(client, "sum", 0, "[1,", 0, &response) && last_error_contains("not JSON"),
          "%s: params that are not JSON fail before sending", url);
    CHECK(response.result_length == 12345 && response.error_code == 777, "%s: the response is untouched on failure", url);
    CHECK(!ucall_client_notify(client, "sum", 0, "[1] x", 0) && last_error_contains("not JSON"),
          "%s: a notification's params are checked as a call's are", url);
    memset(big, ' ', sizeof big - 1);
    big[0] = '[';
    big[sizeof big - 3] = '1';
    big[sizeof big - 2] = ']';
    big[sizeof big - 1] = 0;
    CHECK(ucall_client_call(client, "sum", 0, big, 0, &response) && !response.ok && response.error_code == -32602,
          "%s: whitespace in params is passed on as it is", url);
    CHECK(!ucall_client_call(client, NULL, 0, "[]", 0, &response) && last_error_contains("method"),
          "%s: a NULL method", url);
    CHECK(!ucall_client_call(client, "sum", 0, "[1,2]", 0, NULL) && last_error_contains("response"),
          "%s: a NULL response", url);
    ucall_client_free(client);
}

int main(void) {
    ucall_config_t config;
    pthread_t thread;
    char url[128];
    ucall_client_t client = NULL;
    ucall_client_response_t response;
    ucall_client_config_t client_config;

    memset(&config, 0, sizeof config);
    config.ephemeral_port = true;
    ucall_init(&config, &the_server);
    if (!the_server) {
        fprintf(stderr, "cannot start the server\n");
        return 1;
    }
    ucall_add_procedure(the_server, "sum", sum, NULL);
    ucall_add_procedure(the_server, "fail", fail, NULL);
    ucall_add_procedure(the_server, "echo_attachment", echo_attachment, NULL);
    ucall_add_procedure(the_server, "measure", measure, NULL);
    ucall_add_procedure(the_server, "scale", scale, NULL);
    ucall_add_procedure(the_server, "bad_array", bad_array, NULL);
    pthread_create(&thread, NULL, serve, NULL);

    snprintf(url, sizeof url, "http://127.0.0.1:%u/", (unsigned)config.port);
    exercise(url);
    snprintf(url, sizeof url, "tcp://127.0.0.1:%u", (unsigned)config.port);
    exercise(url);
    snprintf(url, sizeof url, "ws://127.0.0.1:%u/", (unsigned)config.port);
    exercise(url);

    /* Failures that name their cause. */
    memset(&client_config, 0, sizeof client_config);
    client_config.url = "gopher://127.0.0.1:1";
    CHECK(!ucall_client_new(&client_config, &client) && client == NULL && last_error_contains("scheme"),
          "an unknown scheme");
    client_config.url = "http://127.0.0.1:1/";
    client_config.ssl_ca_path = "ca.pem";
    CHECK(!ucall_client_new(&client_config, &client) && last_error_contains("plaintext"), "TLS options on http://");
    client_config.url = "https://127.0.0.1:1/";
    client_config.ssl_ca_path = "/nonexistent/ca.pem";
    CHECK(!ucall_client_new(&client_config, &client) && last_error_contains("/nonexistent/ca.pem"),
          "a missing CA file is named");
    CHECK(!ucall_client_new(NULL, NULL) && last_error_contains("NULL"), "a NULL out-parameter");
    CHECK(ucall_client_new(NULL, &client) && client != NULL, "a client with every default");
    ucall_client_free(client);
    client_config.url = "http://127.0.0.1:1/";
    client_config.ssl_ca_path = NULL;
    client = NULL;
    CHECK(ucall_client_new(&client_config, &client), "a client of a port nobody listens on");
    CHECK(!ucall_client_call(client, "sum", 0, "[1,2]", 0, &response) && last_error_contains("cannot connect"),
          "no server: cannot connect");
    ucall_client_free(client);
    CHECK(!ucall_client_call(the_server, "sum", 0, "[1,2]", 0, &response) && last_error_contains("not a client"),
          "a server handle passed as a client is refused");
    CHECK(!ucall_client_notify(NULL, "sum", 0, NULL, 0) && last_error_contains("not a client"), "a NULL client");
    ucall_client_free(NULL);
    ucall_client_free(the_server); /* not a client: nothing happens */

    ucall_stop(the_server);
    pthread_join(thread, NULL);
    ucall_free(the_server);
    return report();
}
