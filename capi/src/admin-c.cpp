// The C face of core/admin: stats, retry-failed, purge and replay.
#include "capi.hpp"

#include "admin.hpp"

using outbox::capi::guard;

extern "C" {

outbox_status outbox_stats(char **json_out, outbox_db *db) {
    OUTBOX_REQUIRE(json_out);
    *json_out = nullptr;
    OUTBOX_REQUIRE(db);
    return guard([&] {
        outbox::admin::Stats s = outbox::admin::stats(db->conn, db->cfg);
        *json_out = outbox::capi::dup_string(outbox::admin::stats_json(s));
    });
}

outbox_status outbox_retry_failed(int64_t *moved, outbox_db *db, const char *aggregate_type, const char *event_id,
                                  int max_retries) {
    if (moved != nullptr) {
        *moved = 0;
    }
    OUTBOX_REQUIRE(db);
    return guard([&] {
        int64_t n = outbox::admin::retry_failed(db->conn, db->cfg, aggregate_type != nullptr ? aggregate_type : "",
                                                event_id != nullptr ? event_id : "", max_retries);
        if (moved != nullptr) {
            *moved = n;
        }
    });
}

outbox_status outbox_purge_published(int64_t *deleted, outbox_db *db, int64_t older_than_s, int batch) {
    if (deleted != nullptr) {
        *deleted = 0;
    }
    OUTBOX_REQUIRE(db);
    return guard([&] {
        int64_t n = outbox::admin::purge_published(db->conn, db->cfg, older_than_s, batch, [&](int64_t so_far) {
            if (deleted != nullptr) {
                *deleted = so_far;
            }
        });
        if (deleted != nullptr) {
            *deleted = n;
        }
    });
}

outbox_status outbox_replay(int64_t *published, outbox_db *db, const outbox_config *cfg, const char *aggregate_type,
                            const char *aggregate_id, int64_t from_seq) {
    if (published != nullptr) {
        *published = 0;
    }
    OUTBOX_REQUIRE(db);
    OUTBOX_REQUIRE(aggregate_type);
    OUTBOX_REQUIRE(aggregate_id);
    return guard([&] {
        const outbox::Config &c = cfg != nullptr ? cfg->cfg : db->cfg;
        int64_t n = outbox::admin::replay(db->conn, c, aggregate_type, aggregate_id, from_seq);
        if (published != nullptr) {
            *published = n;
        }
    });
}

outbox_status outbox_replay_from(int64_t *published, int64_t *from_seq, outbox_db *db, const outbox_config *cfg,
                                 const char *aggregate_type, const char *aggregate_id, const char *event_id,
                                 const char *since) {
    if (published != nullptr) {
        *published = 0;
    }
    if (from_seq != nullptr) {
        *from_seq = 0;
    }
    OUTBOX_REQUIRE(db);
    OUTBOX_REQUIRE(aggregate_type);
    OUTBOX_REQUIRE(aggregate_id);
    return guard([&] {
        const outbox::Config &c = cfg != nullptr ? cfg->cfg : db->cfg;
        auto r = outbox::admin::replay_from(db->conn, c, aggregate_type, aggregate_id,
                                            event_id != nullptr ? event_id : "", since != nullptr ? since : "");
        if (published != nullptr) {
            *published = r.published;
        }
        if (from_seq != nullptr) {
            *from_seq = r.from_seq;
        }
    });
}

outbox_status outbox_purge_published_progress(int64_t *deleted, outbox_db *db, int64_t older_than_s, int batch,
                                              outbox_progress_fn fn, void *user_data) {
    if (deleted != nullptr) {
        *deleted = 0;
    }
    OUTBOX_REQUIRE(db);
    return guard([&] {
        int64_t n = outbox::admin::purge_published(db->conn, db->cfg, older_than_s, batch, [&](int64_t so_far) {
            if (deleted != nullptr) {
                *deleted = so_far;
            }
            if (fn != nullptr) {
                fn(so_far, user_data);
            }
        });
        if (deleted != nullptr) {
            *deleted = n;
        }
    });
}

outbox_status outbox_purge_estimate(int64_t *estimate, outbox_db *db, int64_t older_than_s) {
    OUTBOX_REQUIRE(estimate);
    *estimate = 0;
    OUTBOX_REQUIRE(db);
    return guard([&] { *estimate = outbox::admin::purge_estimate(db->conn, db->cfg, older_than_s); });
}

outbox_status outbox_lag(double *lag_s, outbox_db *db) {
    OUTBOX_REQUIRE(lag_s);
    *lag_s = 0;
    OUTBOX_REQUIRE(db);
    return guard([&] { *lag_s = outbox::admin::lag_seconds(db->conn, db->cfg); });
}

} // extern "C"
