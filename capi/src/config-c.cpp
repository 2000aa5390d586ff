#include "capi.hpp"

using outbox::capi::guard;

extern "C" {

outbox_status outbox_config_new(outbox_config **out) {
    OUTBOX_REQUIRE(out);
    *out = nullptr;
    return guard([&] { *out = new outbox_config(); });
}

void outbox_config_free(outbox_config *cfg) { delete cfg; }

outbox_status outbox_config_set(outbox_config *cfg, const char *key, const char *value) {
    OUTBOX_REQUIRE(cfg);
    OUTBOX_REQUIRE(key);
    OUTBOX_REQUIRE(value);
    return guard([&] {
        outbox::Config copy = cfg->cfg; // unchanged on error
        copy.set(key, value);
        cfg->cfg = std::move(copy);
    });
}

outbox_status outbox_config_get(char **out, const outbox_config *cfg, const char *key) {
    OUTBOX_REQUIRE(out);
    *out = nullptr;
    OUTBOX_REQUIRE(cfg);
    OUTBOX_REQUIRE(key);
    return guard([&] { *out = outbox::capi::dup_string(cfg->cfg.get(key)); });
}

outbox_status outbox_config_key(const char **key, const char **help, size_t index) {
    return guard([&] {
        const auto &keys = outbox::Config::keys();
        if (index >= keys.size()) {
            outbox::fail(outbox::Errc::not_found, "no configuration key at index " + std::to_string(index));
        }
        if (key != nullptr) {
            *key = keys[index].key;
        }
        if (help != nullptr) {
            *help = keys[index].help;
        }
    });
}

} // extern "C"
