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

outbox_status outbox_migrate(int *version, outbox_db *db, outbox_migrate_target target) {
    OUTBOX_REQUIRE(db);
    // Read as an int: any value may come across the C ABI, and loading one outside the enum's
    // range is undefined in C++.
    static_assert(sizeof(outbox_migrate_target) == sizeof(int), "C enums are int-sized here");
    int t = 0;
    std::memcpy(&t, &target, sizeof t);
    return guard([&] {
        outbox::schema::What what = outbox::schema::What::all;
        if (t == OUTBOX_MIGRATE_OUTBOX) {
            what = outbox::schema::What::outbox;
        } else if (t == OUTBOX_MIGRATE_INBOX) {
            what = outbox::schema::What::inbox;
        } else if (t != OUTBOX_MIGRATE_ALL) {
            outbox::fail(outbox::Errc::invalid_argument, "unknown migrate target");
        }
        auto res = outbox::schema::migrate(db->conn, db->cfg, what);
        if (version != nullptr) {
            *version = what == outbox::schema::What::inbox ? res.inbox_to : res.outbox_to;
        }
    });
}

} // extern "C"
