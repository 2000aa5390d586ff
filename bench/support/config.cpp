#include "config.hpp"

#include <cstdlib>

#include "util.hpp"

namespace bench {

namespace {

// A new configuration with every setting, or die() naming the one refused.
outbox_config *config_of(const Settings &settings) {
    outbox_config *cfg = nullptr;
    if (outbox_config_new(&cfg) != OUTBOX_OK) {
        die(std::string("outbox_config_new: ") + outbox_last_error());
    }
    for (const auto &[k, v] : settings) {
        if (outbox_config_set(cfg, k, v.c_str()) != OUTBOX_OK) {
            std::string msg = outbox_last_error();
            outbox_config_free(cfg);
            die(std::string("outbox_config_set ") + k + ": " + msg);
        }
    }
    return cfg;
}

} // namespace

outbox_config *relay_config(const Run &run, int batch_size, int window, const std::string &pg_url) {
    return config_of({
        {"pg.url", pg_url},
        {"amqp.url", run.amqp_url},
        {"outbox.schema", run.schema},
        {"amqp.exchange", run.exchange},
        {"relay.batch_size", std::to_string(batch_size)},
        {"relay.window", std::to_string(window)},
        {"relay.listen", "false"},
        {"relay.notify_channel", run.channel},
        {"relay.name", "relay_bench"},
        // Steps the way outbox_relay_run() does: the next batch goes out while a batch is confirmed.
        // OUTBOX_BENCH_RELAY_OVERLAP=false measures steps that each wait for their last confirm.
        {"relay.overlap",
         std::getenv("OUTBOX_BENCH_RELAY_OVERLAP") != nullptr ? std::getenv("OUTBOX_BENCH_RELAY_OVERLAP") : "true"},
    });
}

outbox_config *consumer_config(const Run &run, const Settings &more) {
    Settings all = {{"amqp.url", run.amqp_url}, {"amqp.exchange", run.exchange}, {"consumer.queue_type", "classic"}};
    all.insert(all.end(), more.begin(), more.end());
    return config_of(all);
}

} // namespace bench
