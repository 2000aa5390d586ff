#include "capi.hpp"

#include "inbox.hpp"

#include <algorithm>
#include <cstring>
#include <optional>

using outbox::capi::guard;

namespace {

thread_local std::string handler_reason;

void fill(outbox_dedupe_result *out, const outbox::inbox::Result &r) {
    if (out == nullptr) {
        return;
    }
    outbox_dedupe_result full{};
    full.size = out->size;
    full.first_time = r.first_time ? 1 : 0;
    full.order = static_cast<int32_t>(r.order);
    full.previous_seq = r.last_seq;
    std::memcpy(out, &full, std::min(out->size, sizeof full));
}

outbox::inbox::Key make_key(const char *consumer, const char *event_id, const char *aggregate_type,
                            const char *aggregate_id, int64_t seq) {
    return {consumer, event_id, aggregate_type != nullptr ? aggregate_type : "",
            aggregate_id != nullptr ? aggregate_id : "", seq};
}

bool bad_size(const outbox_dedupe_result *out) {
    if (out != nullptr && out->size < sizeof(size_t)) {
        outbox::capi::set_error(OUTBOX_ERR_INVALID_ARGUMENT, "out->size must be set (outbox_dedupe_result_init)");
        return true;
    }
    return false;
}

// The dedupe row's meaning into `out`: `interpret(key, order_check)` gives the result.
template <typename Fn>
outbox_status interpret_into(outbox_dedupe_result *out, const outbox_config *cfg, const char *aggregate_type,
                             const char *aggregate_id, int64_t seq, Fn &&interpret) {
    OUTBOX_REQUIRE(out);
    if (bad_size(out)) {
        return OUTBOX_ERR_INVALID_ARGUMENT;
    }
    return guard([&] {
        static const outbox::Config defaults;
        const outbox::Config &c = cfg != nullptr ? cfg->cfg : defaults;
        fill(out, interpret(make_key("", "", aggregate_type, aggregate_id, seq), c.inbox_order_check));
    });
}

} // namespace

extern "C" {

outbox_status outbox_consumer_dedupe(outbox_dedupe_result *out, outbox_db *db, const char *consumer,
                                     const char *event_id, const char *aggregate_type, const char *aggregate_id,
                                     int64_t seq) {
    OUTBOX_REQUIRE(db);
    OUTBOX_REQUIRE(consumer);
    OUTBOX_REQUIRE(event_id);
    if (bad_size(out)) {
        return OUTBOX_ERR_INVALID_ARGUMENT;
    }
    return guard([&] {
        auto key = make_key(consumer, event_id, aggregate_type, aggregate_id, seq);
        fill(out, outbox::inbox::dedupe(db->conn, db->cfg, key, db->cfg.inbox_order_check));
    });
}

outbox_status outbox_render_dedupe(outbox_statement **out, const outbox_config *cfg, const char *consumer,
                                   const char *event_id, const char *aggregate_type, const char *aggregate_id,
                                   int64_t seq) {
    OUTBOX_REQUIRE(out);
    *out = nullptr;
    OUTBOX_REQUIRE(consumer);
    OUTBOX_REQUIRE(event_id);
    return guard([&] {
        static const outbox::Config defaults;
        const outbox::Config &c = cfg != nullptr ? cfg->cfg : defaults;
        auto st = outbox::inbox::render(c, make_key(consumer, event_id, aggregate_type, aggregate_id, seq),
                                        c.inbox_order_check);
        *out = new outbox_statement{outbox::store::with_placeholders(
            outbox::store::Statement{std::move(st.sql), std::move(st.params), {}}, c.placeholders)};
    });
}

outbox_status outbox_dedupe_interpret(outbox_dedupe_result *out, const outbox_config *cfg, const char *aggregate_type,
                                      const char *aggregate_id, int64_t seq, int first_time, int64_t previous_seq) {
    return interpret_into(out, cfg, aggregate_type, aggregate_id, seq, [&](const auto &key, bool check) {
        std::optional<int64_t> previous;
        if (previous_seq >= 0) {
            previous = previous_seq;
        }
        return outbox::inbox::interpret(key, first_time != 0, previous, check);
    });
}

outbox_status outbox_dedupe_interpret_row(outbox_dedupe_result *out, const outbox_config *cfg,
                                          const char *aggregate_type, const char *aggregate_id, int64_t seq,
                                          const char *first_time, const char *previous_seq) {
    return interpret_into(out, cfg, aggregate_type, aggregate_id, seq, [&](const auto &key, bool check) {
        return outbox::inbox::interpret_text(key, first_time, previous_seq, check);
    });
}

outbox_status outbox_inbox_purge(int64_t *deleted, outbox_db *db, int64_t older_than_s, int batch) {
    OUTBOX_REQUIRE(db);
    return guard([&] {
        int64_t n = outbox::inbox::purge(db->conn, db->cfg, older_than_s, batch);
        if (deleted != nullptr) {
            *deleted = n;
        }
    });
}

outbox_status outbox_consumer_new(outbox_consumer **out, const outbox_config *cfg, const char *name) {
    OUTBOX_REQUIRE(out);
    *out = nullptr;
    OUTBOX_REQUIRE(cfg);
    OUTBOX_REQUIRE(name);
    return guard([&] { *out = new outbox_consumer(cfg->cfg, name); });
}

void outbox_consumer_free(outbox_consumer *consumer) {
    delete consumer;
}

outbox_status outbox_consumer_connect(outbox_consumer *consumer) {
    OUTBOX_REQUIRE(consumer);
    return guard([&] { consumer->consumer.connect(); });
}

outbox_status outbox_consumer_next(outbox_message **out, outbox_consumer *consumer, int timeout_ms) {
    OUTBOX_REQUIRE(out);
    *out = nullptr;
    OUTBOX_REQUIRE(consumer);
    return guard([&] {
        auto d = consumer->consumer.next(timeout_ms < 0 ? 0 : timeout_ms);
        if (!d) {
            if (consumer->consumer.stopping()) {
                outbox::fail(outbox::Errc::stopped, "the consumer was stopped");
            }
            outbox::fail(outbox::Errc::timeout, "no message within " + std::to_string(timeout_ms) + " ms");
        }
        *out = new outbox_message{std::move(*d), {}};
    });
}

outbox_status outbox_consumer_ack(outbox_consumer *consumer, const outbox_message *msg) {
    OUTBOX_REQUIRE(consumer);
    OUTBOX_REQUIRE(msg);
    return guard([&] { consumer->consumer.ack(msg->d); });
}

outbox_status outbox_consumer_nack(outbox_consumer *consumer, const outbox_message *msg, int requeue) {
    OUTBOX_REQUIRE(consumer);
    OUTBOX_REQUIRE(msg);
    return guard([&] { consumer->consumer.nack(msg->d, requeue != 0); });
}

outbox_status outbox_consumer_dead_letter(outbox_consumer *consumer, const outbox_message *msg, const char *reason) {
    OUTBOX_REQUIRE(consumer);
    OUTBOX_REQUIRE(msg);
    OUTBOX_REQUIRE(reason);
    return guard([&] { consumer->consumer.dead_letter(msg->d, reason); });
}

namespace {
// The dedupe of a delivered message, in the caller's transaction or (`begin`) in one it opens.
outbox_status dedupe_delivery(outbox_dedupe_result *out, outbox_db *db, const outbox_consumer *consumer,
                              const outbox_message *msg, bool begin) {
    OUTBOX_REQUIRE(db);
    OUTBOX_REQUIRE(consumer);
    OUTBOX_REQUIRE(msg);
    if (bad_size(out)) {
        return OUTBOX_ERR_INVALID_ARGUMENT;
    }
    return guard([&] {
        const auto &d = msg->d;
        outbox::inbox::Key key{consumer->consumer.name(), d.event_id, d.aggregate_type, d.aggregate_id, d.seq};
        const bool order = db->cfg.inbox_order_check;
        fill(out, begin ? outbox::inbox::begin_and_dedupe(db->conn, db->cfg, key, order)
                        : outbox::inbox::dedupe(db->conn, db->cfg, key, order));
    });
}
} // namespace

outbox_status outbox_consumer_dedupe_message(outbox_dedupe_result *out, outbox_db *db, const outbox_consumer *consumer,
                                             const outbox_message *msg) {
    return dedupe_delivery(out, db, consumer, msg, false);
}

outbox_status outbox_consumer_begin(outbox_dedupe_result *out, outbox_db *db, const outbox_consumer *consumer,
                                    const outbox_message *msg) {
    return dedupe_delivery(out, db, consumer, msg, true);
}

void outbox_handler_error(const char *reason) {
    try {
        handler_reason = reason != nullptr ? reason : "";
    } catch (...) {
    }
}

outbox_status outbox_consumer_run(outbox_consumer *consumer, outbox_db *db, outbox_handler_fn fn, void *user_data) {
    OUTBOX_REQUIRE(consumer);
    OUTBOX_REQUIRE(fn);
    return guard([&] {
        consumer->consumer.run(
            db != nullptr ? &db->conn : nullptr, [&](outbox::pg::Conn &tx, const outbox::Delivery &d) {
                // The handler sees the transaction's connection as a lent outbox_db.
                outbox_db view{outbox::pg::Conn::wrap(tx.raw()), consumer->consumer.config()};
                outbox_message msg{d, {}};
                handler_reason.clear();
                int rc = fn(&view, &msg, user_data);
                if (rc == OUTBOX_HANDLER_PERMANENT) {
                    throw outbox::PermanentFailure(handler_reason.empty() ? "handler returned OUTBOX_HANDLER_PERMANENT"
                                                                          : handler_reason);
                }
                if (rc != 0) {
                    throw std::runtime_error(handler_reason.empty() ? "handler returned " + std::to_string(rc)
                                                                    : handler_reason);
                }
            });
    });
}

// ---- A consumer loop of your own: settle and retry (the Python and Node loops) ----

outbox_status outbox_consumer_settle(outbox_settled *out, outbox_consumer *consumer, const outbox_message *msg,
                                     outbox_db *db, outbox_outcome outcome, const char *reason) {
    OUTBOX_REQUIRE(consumer);
    OUTBOX_REQUIRE(msg);
    if (out != nullptr && out->size < sizeof(size_t)) {
        outbox::capi::set_error(OUTBOX_ERR_INVALID_ARGUMENT, "out->size must be set (outbox_settled_init)");
        return OUTBOX_ERR_INVALID_ARGUMENT;
    }
    const int o = static_cast<int>(outcome);
    if (o < OUTBOX_OUTCOME_HANDLED || o > OUTBOX_OUTCOME_HELD) {
        outbox::capi::set_error(OUTBOX_ERR_INVALID_ARGUMENT,
                                ("unknown outcome " + std::to_string(o) + " (OUTBOX_OUTCOME_*)").c_str());
        return OUTBOX_ERR_INVALID_ARGUMENT;
    }
    return guard([&] {
        auto s = consumer->consumer.settle(msg->d, static_cast<outbox::Outcome>(o),
                                           reason != nullptr ? reason : "handler failed",
                                           db != nullptr ? &db->conn : nullptr);
        if (out != nullptr) {
            outbox_settled full{};
            full.size = out->size;
            full.action = static_cast<int32_t>(s.action);
            full.db_lost = s.db_lost ? 1 : 0;
            full.attempt = s.attempt;
            std::memcpy(out, &full, std::min(out->size, sizeof full));
        }
    });
}

outbox_status outbox_consumer_retry_delay(int *delay_ms, outbox_consumer *consumer, int failures, const char *why) {
    OUTBOX_REQUIRE(delay_ms);
    *delay_ms = 0;
    OUTBOX_REQUIRE(consumer);
    if (failures < 1) {
        outbox::capi::set_error(OUTBOX_ERR_INVALID_ARGUMENT, "failures must be at least 1");
        return OUTBOX_ERR_INVALID_ARGUMENT;
    }
    return guard([&] { *delay_ms = consumer->consumer.retry_delay_ms(failures, why != nullptr ? why : ""); });
}

// ---- end of: a consumer loop of your own ----

void outbox_consumer_stop(outbox_consumer *consumer) {
    if (consumer != nullptr) {
        consumer->consumer.stop();
    }
}

outbox_status outbox_consumer_reset(outbox_consumer *consumer) {
    OUTBOX_REQUIRE(consumer);
    return guard([&] { consumer->consumer.reset_stop(); });
}

outbox_status outbox_consumer_set_logger(outbox_consumer *consumer, outbox_log_fn fn, void *user_data) {
    OUTBOX_REQUIRE(consumer);
    return guard([&] {
        if (fn == nullptr) {
            consumer->consumer.set_logger({});
            return;
        }
        consumer->consumer.set_logger([fn, user_data](outbox::LogLevel level, const std::string &m) {
            fn(static_cast<outbox_log_level>(level), m.c_str(), user_data);
        });
    });
}

void outbox_message_free(outbox_message *msg) {
    delete msg;
}

outbox_status outbox_message_copy(outbox_message **out, const outbox_message *msg) {
    OUTBOX_REQUIRE(out);
    *out = nullptr;
    OUTBOX_REQUIRE(msg);
    return guard([&] { *out = new outbox_message{msg->d, {}}; });
}

const char *outbox_message_field(const outbox_message *msg, const char *name) {
    if (msg == nullptr || name == nullptr) {
        return nullptr;
    }
    const std::string *v = msg->d.field(name);
    return v != nullptr ? v->c_str() : nullptr;
}

const char *outbox_message_body(const outbox_message *msg, size_t *len) {
    if (msg == nullptr) {
        if (len != nullptr) {
            *len = 0;
        }
        return nullptr;
    }
    if (len != nullptr) {
        *len = msg->d.raw.body.size();
    }
    return msg->d.raw.body.c_str();
}

const char *outbox_message_property(const outbox_message *msg, const char *name) {
    if (msg == nullptr || name == nullptr) {
        return nullptr;
    }
    for (const auto &[k, v] : msg->texts) {
        if (k == name) {
            return v.c_str();
        }
    }
    try {
        std::optional<std::string> value = msg->d.property(name);
        if (!value) {
            return nullptr;
        }
        msg->texts.emplace_back(name, std::move(*value));
    } catch (...) {
        return nullptr;
    }
    return msg->texts.back().second.c_str();
}

int64_t outbox_message_seq(const outbox_message *msg) {
    return msg != nullptr ? msg->d.seq : 0;
}

int outbox_message_redelivered(const outbox_message *msg) {
    return msg != nullptr && msg->d.raw.redelivered ? 1 : 0;
}

int64_t outbox_message_delivery_count(const outbox_message *msg) {
    return msg != nullptr ? msg->d.delivery_count : -1;
}

outbox_order outbox_message_order(const outbox_message *msg) {
    return msg != nullptr ? static_cast<outbox_order>(static_cast<int>(msg->d.dedupe.order)) : OUTBOX_ORDER_UNCHECKED;
}

int64_t outbox_message_previous_seq(const outbox_message *msg) {
    return msg != nullptr ? msg->d.dedupe.last_seq : 0;
}

} // extern "C"
