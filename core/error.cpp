#include "error.hpp"

namespace outbox {

const char *errc_name(Errc code) noexcept {
    switch (code) {
    case Errc::ok: return "OK";
    case Errc::invalid_argument: return "INVALID_ARGUMENT";
    case Errc::invalid_event: return "INVALID_EVENT";
    case Errc::too_large: return "TOO_LARGE";
    case Errc::duplicate: return "DUPLICATE";
    case Errc::database: return "DATABASE";
    case Errc::connection: return "CONNECTION";
    case Errc::broker: return "BROKER";
    case Errc::timeout: return "TIMEOUT";
    case Errc::schema: return "SCHEMA";
    case Errc::transaction: return "TRANSACTION";
    case Errc::no_memory: return "NO_MEMORY";
    case Errc::stopped: return "STOPPED";
    case Errc::internal: return "INTERNAL";
    case Errc::unknown_key: return "UNKNOWN_KEY";
    case Errc::not_found: return "NOT_FOUND";
    }
    return "UNKNOWN";
}

} // namespace outbox
