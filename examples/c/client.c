/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A UCall client in C: calls `sum` on a server and prints the result, then `scale` (of
 * examples/c/sum.c) with a float32 array sent as an attachment, and prints the array that
 * comes back as one (docs/wire.md), read where it lies in the reply.
 *
 *   client [URL]      URL defaults to http://127.0.0.1:8545 (https, ws, wss, tcp, tls too)
 *
 * Try it with `examples/c/sum` (make examples-c) or any UCall server with a sum procedure.
 */
#include <stdio.h>
#include <string.h>

#include <ucall/ucall.h>

int main(int argc, char **argv) {
    ucall_client_config_t config = {0}; /* zero means "the default" in every field */
    ucall_client_t client = NULL;
    ucall_client_response_t response;
    char why[256];

    config.url = argc > 1 ? argv[1] : "http://127.0.0.1:8545";
    if (!ucall_client_new(&config, &client) || !ucall_client_call(client, "sum", 0, "{\"a\":1,\"b\":2}", 0, &response)) {
        ucall_last_error(why, sizeof why);
        fprintf(stderr, "%s\n", why);
        ucall_client_free(client);
        return 1;
    }
    if (!response.ok) {
        printf("error %lld: %.*s\n", (long long)response.error_code, (int)response.error_message_length,
               response.error_message);
        ucall_client_free(client);
        return 1;
    }
    printf("sum(1, 2) = %.*s\n", (int)response.result_length, response.result);

    {
        const float x[3] = {1.5f, -2.0f, 0.25f};
        const size_t shape[1] = {3};
        ucall_client_attachment_t sent = {0}, got = {0};
        float doubled[3];
        size_t i;
        sent.name = "x";
        sent.data = x;
        sent.length = sizeof x;
        sent.dtype = "float32";
        sent.shape = shape;
        sent.dimensions = 1;
        if (!ucall_client_call_attached(client, "scale", 0, NULL, 0, &sent, 1, &response)) {
            ucall_last_error(why, sizeof why);
            fprintf(stderr, "%s\n", why);
            ucall_client_free(client);
            return 1;
        }
        if (!response.ok) { /* a server without scale(x) */
            printf("scale: error %lld\n", (long long)response.error_code);
        } else if (ucall_client_result_attachment(client, NULL, 0, &got) && got.dtype &&
                   !strcmp(got.dtype, "float32") && got.length == sizeof doubled) {
            memcpy(doubled, got.data, sizeof doubled);
            printf("scale([");
            for (i = 0; i != 3; ++i)
                printf(i ? ", %g" : "%g", (double)x[i]);
            printf("]) = [");
            for (i = 0; i != 3; ++i)
                printf(i ? ", %g" : "%g", (double)doubled[i]);
            printf("] (float32, an attachment)\n");
        } else {
            printf("scale: %.*s (no attachment)\n", (int)response.result_length, response.result);
        }
    }
    ucall_client_free(client);
    return 0;
}
