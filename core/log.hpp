// The one log-level type of the relay and the consumer (their loggers and the C API's
// outbox_log_level, whose values capi/ checks equal these).
#pragma once

#include <functional>
#include <string>

namespace outbox {

enum class LogLevel { debug = 0, info = 1, warn = 2, error = 3 };
using LogFn = std::function<void(LogLevel, const std::string &)>;

} // namespace outbox
