// Creating and upgrading the tables, idempotently, with a recorded version per table.
#pragma once

#include "config.hpp"
#include "pg.hpp"

namespace outbox::schema {

constexpr int outbox_version = 2;
constexpr int inbox_version = 3;

struct Result {
    int outbox_from = 0, outbox_to = 0;
    int inbox_from = 0, inbox_to = 0;
};

enum class What { all, outbox, inbox };

// The advisory lock every change of the tables' shape takes (migrations, making and dropping inbox
// partitions), so that concurrent ones serialise; one fixed key for the whole database.
constexpr const char *ddl_lock_sql = "SELECT pg_advisory_xact_lock(7306288117516400641)";

// Runs under an advisory lock so concurrent migrations serialise. On an idle connection it
// runs in its own transaction; inside the caller's transaction it joins it (caller commits).
// `up_to` stops at an older version (tests of the upgrades); 0 means the latest.
Result migrate(pg::Conn &conn, const Config &cfg, What what = What::all, int up_to = 0);

// Installed version of the outbox table (0 when absent).
int installed_version(pg::Conn &conn, const Config &cfg, What what);

// The name of the unique index on the outbox's idempotency_key (unqualified, in the outbox's
// schema): a unique violation naming it is a reused idempotency key.
std::string idempotency_index(const Config &cfg);

} // namespace outbox::schema
