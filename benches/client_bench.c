/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The C client's side of benches/client_bench.py: echo calls, one after another (the C
 * API has no pipelining), with a base64 payload of BYTES bytes; the JSON result is
 * checked for its length, not decoded (the C API hands results over as JSON text).
 *
 *   client_bench PORT CALLS BYTES SAMPLES   prints {"calls":..,"seconds":..,"cpu_seconds":..}
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <ucall/ucall.h>

static double cpu_seconds(void) {
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    return (double)usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6 + (double)usage.ru_stime.tv_sec +
           usage.ru_stime.tv_usec / 1e6;
}

static double wall_seconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + now.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    char url[64], why[256];
    ucall_client_config_t config = {0};
    ucall_client_t client = NULL;
    ucall_client_response_t response;
    size_t calls, bytes, samples, text, i, s;
    char *params;
    double cpu = 0, wall = 0;

    if (argc != 5) {
        fprintf(stderr, "usage: client_bench PORT CALLS BYTES SAMPLES\n");
        return 2;
    }
    snprintf(url, sizeof url, "http://127.0.0.1:%s", argv[1]);
    calls = strtoul(argv[2], NULL, 10);
    bytes = strtoul(argv[3], NULL, 10);
    samples = strtoul(argv[4], NULL, 10);
    text = (bytes + 2) / 3 * 4; /* "AAAA" is base64 of three zero bytes */
    params = malloc(text + 16);
    if (!params)
        return 1;
    memcpy(params, "{\"data\":\"", 9);
    memset(params + 9, 'A', text);
    memcpy(params + 9 + text, "\"}", 3);
    config.url = url;
    if (!ucall_client_new(&config, &client))
        goto failed;
    for (s = 0; s <= samples; ++s) {
        if (s == 1) { /* the first round warms up */
            cpu = cpu_seconds();
            wall = wall_seconds();
        }
        for (i = 0; i < calls; ++i)
            if (!ucall_client_call(client, "echo", 4, params, 9 + text + 2, &response) || !response.ok ||
                response.result_length != text + 2)
                goto failed;
    }
    printf("{\"calls\":%zu,\"seconds\":%f,\"cpu_seconds\":%f}\n", calls * samples, wall_seconds() - wall,
           cpu_seconds() - cpu);
    ucall_client_free(client);
    free(params);
    return 0;
failed:
    ucall_last_error(why, sizeof why);
    fprintf(stderr, "client_bench: %s\n", why[0] ? why : "an unexpected reply");
    ucall_client_free(client);
    free(params);
    return 1;
}
