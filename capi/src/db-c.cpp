#include "capi.hpp"

#include "schema.hpp"

#include <cstring>

using outbox::capi::guard;

extern "C" {

outbox_status outbox_db_open(outbox_db **out, const char *conninfo, const outbox_config *cfg) {
    OUTBOX_REQUIRE(out);
    *out = nullptr;
    OUTBOX_REQUIRE(conninfo);
    return guard([&] {
        outbox::Config c = cfg != nullptr ? cfg->cfg : outbox::Config();
        auto conn = outbox::pg::Conn::open(conninfo, c.pg_connect_timeout_s);
        *out = new outbox_db{std::move(conn), std::move(c)};
    });
}

outbox_status outbox_db_wrap(outbox_db **out, void *pgconn, const outbox_config *cfg) {
    OUTBOX_REQUIRE(out);
    *out = nullptr;
    OUTBOX_REQUIRE(pgconn);
    return guard([&] {
        outbox::Config c = cfg != nullptr ? cfg->cfg : outbox::Config();
        *out = new outbox_db{outbox::pg::Conn::wrap(static_cast<PGconn *>(pgconn)), std::move(c)};
    });
}

void outbox_db_close(outbox_db *db) { delete db; }

void *outbox_db_pgconn(outbox_db *db) { return db != nullptr ? db->conn.raw() : nullptr; }

int outbox_db_socket(const outbox_db *db) {
    return db != nullptr && db->conn.raw() != nullptr ? db->conn.socket() : -1;
}

outbox_status outbox_db_exec(outbox_db *db, const char *sql) {
    OUTBOX_REQUIRE(db);
    OUTBOX_REQUIRE(sql);
    return guard([&] { db->conn.exec_simple(sql); });
}

outbox_tx_state outbox_db_tx_state(outbox_db *db) {
    if (db == nullptr || db->conn.raw() == nullptr) {
        return OUTBOX_TX_UNKNOWN;
    }
    switch (db->conn.tx_status()) {
    case PQTRANS_IDLE: return OUTBOX_TX_IDLE;
    case PQTRANS_ACTIVE: return OUTBOX_TX_ACTIVE;
    case PQTRANS_INTRANS: return OUTBOX_TX_INTRANS;
    case PQTRANS_INERROR: return OUTBOX_TX_INERROR;
    default: return OUTBOX_TX_UNKNOWN;
    }
}

namespace {
// Reads the target as an int: any value may come across the C ABI, and loading one outside the
// enum's range is undefined in C++.
outbox::schema::What migrate_what(const outbox_migrate_target *target) {
    static_assert(sizeof(outbox_migrate_target) == sizeof(int), "C enums are int-sized here");
    int t = 0;
    std::memcpy(&t, target, sizeof t);
    if (t != OUTBOX_MIGRATE_ALL && t != OUTBOX_MIGRATE_OUTBOX && t != OUTBOX_MIGRATE_INBOX) {
        outbox::fail(outbox::Errc::invalid_argument, "unknown migrate target");
    }
    return static_cast<outbox::schema::What>(t);
}
} // namespace

outbox_status outbox_migrate(int *version, outbox_db *db, outbox_migrate_target target) {
    OUTBOX_REQUIRE(db);
    return guard([&] {
        const outbox::schema::What what = migrate_what(&target);
        auto res = outbox::schema::migrate(db->conn, db->cfg, what);
        if (version != nullptr) {
            *version = what == outbox::schema::What::inbox ? res.inbox_to : res.outbox_to;
        }
    });
}

outbox_status outbox_migrate_versions(int *outbox_from, int *outbox_to, int *inbox_from, int *inbox_to, outbox_db *db,
                                      outbox_migrate_target target) {
    for (int *p : {outbox_from, outbox_to, inbox_from, inbox_to}) {
        if (p != nullptr) {
            *p = 0;
        }
    }
    OUTBOX_REQUIRE(db);
    return guard([&] {
        auto res = outbox::schema::migrate(db->conn, db->cfg, migrate_what(&target));
        const std::pair<int *, int> outs[] = {
            {outbox_from, res.outbox_from}, {outbox_to, res.outbox_to}, {inbox_from, res.inbox_from}, {inbox_to, res.inbox_to}};
        for (const auto &[p, v] : outs) {
            if (p != nullptr) {
                *p = v;
            }
        }
    });
}

} // extern "C"
