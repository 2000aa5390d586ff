// The outbox configurations the harness gives the library: the relay's (D, P, R-w1 in the drain
// child, and the migration) and the consumers' (C, H). Each is freed with outbox_config_free.
#pragma once

#include "run.hpp"

#include <outbox.h>

#include <string>
#include <utility>
#include <vector>

namespace bench {

using Settings = std::vector<std::pair<const char *, std::string>>;

// The relay's configuration for this run's schema, exchange and channel (relay.listen off).
outbox_config *relay_config(const Run &run, int batch_size, int window, const std::string &pg_url);

// A consumer's: this run's broker and exchange, a classic queue, and `more`.
outbox_config *consumer_config(const Run &run, const Settings &more);

} // namespace bench
