/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A UCall client in C: calls `sum` on a server and prints the result.
 *
 *   client [URL]      URL defaults to http://127.0.0.1:8545 (https, ws, wss, tcp, tls too)
 *
 * Try it with `examples/c/sum` (make examples-c) or any UCall server with a sum procedure.
 */
#include <stdio.h>

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
    if (response.ok)
        printf("sum(1, 2) = %.*s\n", (int)response.result_length, response.result);
    else
        printf("error %lld: %.*s\n", (long long)response.error_code, (int)response.error_message_length,
               response.error_message);
    ucall_client_free(client);
    return response.ok ? 0 : 1;
}
