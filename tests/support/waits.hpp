// Bounded waits and small file helpers the integration tests share.
#pragma once

#include "test_env.hpp"

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace outbox_test {

// Milliseconds since `t0`.
inline long long ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
}

// Polls `done` until it holds or `limit` passed; every wait in the tests is bounded.
template <typename F>
bool eventually(F &&done, std::chrono::milliseconds limit,
                std::chrono::milliseconds step = std::chrono::milliseconds(20)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (true) {
        if (done()) {
            return true;
        }
        if (std::chrono::steady_clock::now() >= deadline) {
            return false;
        }
        std::this_thread::sleep_for(step);
    }
}

// A file's whole content; "" when it cannot be read.
inline std::string read_file(const std::string &path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// The last `n` characters of `s`, for failure messages.
inline std::string tail(const std::string &s, size_t n = 3000) {
    return s.size() <= n ? s : "..." + s.substr(s.size() - n);
}

// The consumers' PostgreSQL URL: the test server, with synchronous_commit off for their sessions.
// The run loop commits once per message, so otherwise these tests mostly wait for WAL flushes.
// Commits stay atomic and become visible exactly as before; only durability across a crash of
// the database server itself differs, and no test crashes the server.
inline std::string consumer_pg_url() {
    std::string url = pg_url();
    if (url.rfind("postgres", 0) == 0) {
        return url + (url.find('?') == std::string::npos ? "?" : "&") + "options=-c%20synchronous_commit%3Doff";
    }
    return url + " options='-c synchronous_commit=off'";
}

} // namespace outbox_test
