// Where the integration tests find their services: OUTBOX_PG_URL / OUTBOX_AMQP_URL, defaulting
// to the throwaway local services of scripts/services.sh. A test that cannot reach them fails.
#pragma once

#include <cstdlib>
#include <string>

namespace outbox_test {

inline std::string env_or(const char *name, const char *fallback) {
    const char *v = std::getenv(name);
    return (v != nullptr && *v != '\0') ? std::string(v) : std::string(fallback);
}

inline std::string pg_url() { return env_or("OUTBOX_PG_URL", "postgresql://outbox:outbox@127.0.0.1:54329/outbox"); }
inline std::string amqp_url() { return env_or("OUTBOX_AMQP_URL", "amqp://outbox:outbox@127.0.0.1:56729/%2f"); }

} // namespace outbox_test
