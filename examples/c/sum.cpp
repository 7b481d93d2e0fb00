// SPDX-License-Identifier: Apache-2.0
// The sum server in C++17, against the same C header: std::thread per index,
// std::to_chars for the reply, a lambda-free callback with a typed tag.
//
//   make examples-c && target/c/examples/sum_cpp --port 8545 --threads 2
#include <charconv>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <ucall/ucall.h>

namespace {

ucall_server_t volatile running_server = nullptr;

struct counters_t {
    char const* name; // shows that the tag reaches the callback
};

void sum(ucall_call_t call, ucall_callback_tag_t tag) {
    auto const* counters = static_cast<counters_t const*>(tag);
    std::int64_t a{}, b{};
    if ((!ucall_param_named_i64(call, "a", 1, &a) && !ucall_param_positional_i64(call, 0, &a)) ||
        (!ucall_param_named_i64(call, "b", 1, &b) && !ucall_param_positional_i64(call, 1, &b)))
        return ucall_call_reply_error(call, -32602, counters->name, 0);
    char result[24];
    auto [end, error] = std::to_chars(result, result + sizeof result, a + b);
    (void)error;
    ucall_call_reply_content(call, result, static_cast<std::size_t>(end - result));
}

} // namespace

int main(int argc, char** argv) {
    ucall_config_t config{}; // zero means "the default"
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string flag = argv[i];
        if (flag == "--host")
            config.hostname = argv[i + 1];
        else if (flag == "--port") {
            config.port = static_cast<std::uint16_t>(std::stoi(argv[i + 1]));
            config.ephemeral_port = config.port == 0;
        } else if (flag == "--threads")
            config.max_threads = static_cast<std::uint16_t>(std::stoi(argv[i + 1]));
        else if (flag == "--engine")
            config.engine = argv[i + 1];
    }

    ucall_server_t server{};
    ucall_init(&config, &server);
    if (!server) {
        std::string reason(ucall_last_error(nullptr, 0) + 1, '\0');
        ucall_last_error(reason.data(), reason.size());
        std::fprintf(stderr, "cannot start: %s\n", reason.c_str());
        return 1;
    }
    static counters_t const tag{"Invalid params: sum(a, b) takes two integers"};
    ucall_add_procedure(server, "sum", &sum, const_cast<counters_t*>(&tag));

    running_server = server;
    std::signal(SIGINT, [](int) { ucall_stop(running_server); });
    std::signal(SIGTERM, [](int) { ucall_stop(running_server); });
    // The start-up line of every UCall server, on stderr (docs/operations.md).
    std::fprintf(stderr, "ucall: listening on http://%s:%u (engine %s, %u thread%s; C++)\n", config.hostname,
                 unsigned{config.port}, config.engine, unsigned{config.max_threads}, config.max_threads == 1 ? "" : "s");

    std::vector<std::thread> threads;
    for (std::uint16_t i = 1; i < config.max_threads; ++i)
        threads.emplace_back(ucall_take_calls, server, i);
    ucall_take_calls(server, 0);
    for (auto& thread : threads)
        thread.join();
    ucall_free(server);
    return 0;
}
