// The write of one event on a driver's own connection (outbox_write_plan_*) against a real
// PostgreSQL, driven the way the Python, asyncio and Node faces drive it: on a plain libpq PGconn
// the library never sees. Savepoints around a keyed write in a transaction, a reused key named
// with its owner (whether or not the driver names the constraint) and the transaction left usable,
// an aborted transaction, a missing schema, and a driver that cannot tell whether it is in a transaction.
#include "fixture.hpp"
#include "libpq_driver.hpp"

using namespace outbox_test;

namespace {

struct Ran {
    outbox_status status;
    std::vector<int> steps;
    std::string error;
};

// Runs the plan on `conn`; `name_constraint` false plays a driver that does not report it.
Ran run_plan(outbox_write_plan *plan, PGconn *conn, bool name_constraint = true) {
    Ran ran{};
    int step = 0;
    for (const outbox_statement *st = outbox_write_plan_next(plan, &step); st != nullptr;
         st = outbox_write_plan_next(plan, &step)) {
        ran.steps.push_back(step);
        const Outcome o = run_statement(conn, st);
        if (o.ok) {
            const auto row = o.row();
            EXPECT_EQ(outbox_write_plan_done(plan, row.data(), row.size()), OUTBOX_OK) << outbox_last_error();
        } else {
            // The primary message alone, as most drivers report it.
            const std::string primary = o.message.substr(0, o.message.find('\n'));
            EXPECT_EQ(outbox_write_plan_failed(plan, o.opt(o.sqlstate), name_constraint ? o.opt(o.constraint) : nullptr,
                                               primary.c_str(), o.closed ? 1 : 0),
                      OUTBOX_OK);
        }
    }
    ran.status = outbox_write_plan_result(plan);
    ran.error = outbox_last_error();
    return ran;
}

class WritePlanTest : public PgTest {
  protected:
    void SetUp() override {
        PgTest::SetUp();
        if (HasFatalFailure()) {
            return;
        }
        conn = PQconnectdb(pg_url().c_str());
        ASSERT_EQ(PQstatus(conn), CONNECTION_OK);
    }
    void TearDown() override {
        outbox_write_plan_free(plan);
        PQfinish(conn);
        PgTest::TearDown();
    }
    Ran write(outbox_event *ev, outbox_tx_state tx, bool name_constraint = true) {
        outbox_write_plan_free(plan);
        plan = nullptr;
        EXPECT_EQ(outbox_write_plan_new(&plan, cfg, ev, tx, nullptr), OUTBOX_OK) << outbox_last_error();
        return run_plan(plan, conn, name_constraint);
    }
    void exec(const char *sql) {
        PGresult *r = PQexec(conn, sql);
        EXPECT_EQ(PQresultStatus(r), PGRES_COMMAND_OK) << sql << ": " << PQerrorMessage(conn);
        PQclear(r);
    }
    outbox_event *keyed(const char *aggregate, const char *key) {
        outbox_event *ev = make_event(aggregate);
        EXPECT_EQ(outbox_event_set(ev, "idempotency_key", key), OUTBOX_OK);
        return ev;
    }
    PGconn *conn = nullptr;
    outbox_write_plan *plan = nullptr;
};

} // namespace

TEST_F(WritePlanTest, WithoutAKeyTheInsertAloneInTheCallersTransaction) {
    outbox_event *ev = make_event("a");
    exec("BEGIN");
    Ran r = write(ev, OUTBOX_TX_INTRANS);
    EXPECT_EQ(r.status, OUTBOX_OK) << r.error;
    EXPECT_EQ(r.steps, std::vector<int>{OUTBOX_WRITE_INSERT});
    EXPECT_EQ(outbox_event_seq(ev), 1);
    exec("ROLLBACK");
    EXPECT_EQ(count(), 0) << "the caller's rollback takes the event with it";
    exec("BEGIN");
    EXPECT_EQ(write(ev, OUTBOX_TX_INTRANS).status, OUTBOX_OK);
    exec("COMMIT");
    EXPECT_EQ(count(), 1);
    outbox_event_free(ev);
}

TEST_F(WritePlanTest, AReusedKeyIsNamedWithItsOwnerAndTheTransactionStaysUsable) {
    outbox_event *first = keyed("a", "order-1");
    outbox_event *again = keyed("b", "order-1");
    exec("BEGIN");
    Ran r = write(first, OUTBOX_TX_INTRANS);
    ASSERT_EQ(r.status, OUTBOX_OK) << r.error;
    EXPECT_EQ(r.steps, (std::vector<int>{OUTBOX_WRITE_SAVEPOINT, OUTBOX_WRITE_INSERT, OUTBOX_WRITE_RELEASE}));
    const std::string owner = outbox_event_id(first);
    for (bool named : {true, false}) {
        r = write(again, OUTBOX_TX_INTRANS, named);
        EXPECT_EQ(r.status, OUTBOX_ERR_DUPLICATE) << r.error;
        EXPECT_EQ(r.error, "idempotency_key is already used by event " + owner) << "constraint named: " << named;
        EXPECT_EQ(r.steps, (std::vector<int>{OUTBOX_WRITE_SAVEPOINT, OUTBOX_WRITE_INSERT, OUTBOX_WRITE_ROLLBACK_TO,
                                             OUTBOX_WRITE_RELEASE, OUTBOX_WRITE_LOOKUP}));
        EXPECT_EQ(PQtransactionStatus(conn), PQTRANS_INTRANS) << "the caller's transaction is usable";
    }
    exec("COMMIT");
    EXPECT_EQ(count(), 1);
    // Outside a transaction (autocommit): the failed INSERT was its own; the lookup names the owner.
    r = write(again, OUTBOX_TX_IDLE);
    EXPECT_EQ(r.status, OUTBOX_ERR_DUPLICATE);
    EXPECT_EQ(r.error, "idempotency_key is already used by event " + owner);
    EXPECT_EQ(r.steps, (std::vector<int>{OUTBOX_WRITE_INSERT, OUTBOX_WRITE_LOOKUP}));
    outbox_event_free(first);
    outbox_event_free(again);
}

TEST_F(WritePlanTest, AbortedTransactionMissingSchemaAndADriverThatCannotTell) {
    outbox_event *ev = make_event("a");
    exec("BEGIN");
    PQclear(PQexec(conn, "SELECT 1/0"));
    Ran r = write(ev, OUTBOX_TX_INERROR);
    EXPECT_EQ(r.status, OUTBOX_ERR_TRANSACTION);
    EXPECT_TRUE(r.steps.empty()) << "nothing runs in an aborted transaction";
    exec("ROLLBACK");

    outbox_config *other = nullptr;
    ASSERT_EQ(outbox_config_new(&other), OUTBOX_OK);
    ASSERT_EQ(outbox_config_set(other, "outbox.schema", "no_such_schema_here"), OUTBOX_OK);
    outbox_write_plan_free(plan);
    plan = nullptr;
    ASSERT_EQ(outbox_write_plan_new(&plan, other, ev, OUTBOX_TX_IDLE, nullptr), OUTBOX_OK);
    r = run_plan(plan, conn);
    EXPECT_EQ(r.status, OUTBOX_ERR_SCHEMA) << r.error;
    EXPECT_NE(r.error.find("(SQLSTATE 42P01)"), std::string::npos) << r.error;
    outbox_write_plan_free(plan);
    plan = nullptr;
    outbox_config_free(other);

    // A driver that cannot tell says "in a transaction": with a key the SAVEPOINT fails (25P01,
    // no transaction) and the INSERT goes alone.
    outbox_event *k = keyed("c", "k-1");
    r = write(k, OUTBOX_TX_INTRANS);
    EXPECT_EQ(r.status, OUTBOX_OK) << r.error;
    EXPECT_EQ(r.steps, (std::vector<int>{OUTBOX_WRITE_SAVEPOINT, OUTBOX_WRITE_INSERT}));
    EXPECT_EQ(count(), 1);
    outbox_event_free(k);
    outbox_event_free(ev);
}

TEST_F(WritePlanTest, EntryPointsRefuseBadArguments) {
    outbox_write_plan *p = reinterpret_cast<outbox_write_plan *>(this);
    EXPECT_EQ(outbox_write_plan_new(&p, cfg, nullptr, OUTBOX_TX_IDLE, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(p, nullptr);
    EXPECT_EQ(outbox_write_plan_new(nullptr, cfg, nullptr, OUTBOX_TX_IDLE, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    outbox_event *ev = make_event("a");
    EXPECT_EQ(outbox_write_plan_new(&p, cfg, ev, OUTBOX_TX_UNKNOWN, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_write_plan_new(&p, cfg, ev, OUTBOX_TX_IDLE, "curly"), OUTBOX_ERR_INVALID_ARGUMENT);
    outbox_event *bad = nullptr;
    ASSERT_EQ(outbox_event_new(&bad), OUTBOX_OK);
    EXPECT_EQ(outbox_write_plan_new(&p, cfg, bad, OUTBOX_TX_IDLE, nullptr), OUTBOX_ERR_INVALID_EVENT);
    outbox_event_free(bad);
    EXPECT_EQ(outbox_write_plan_next(nullptr, nullptr), nullptr);
    EXPECT_EQ(outbox_write_plan_done(nullptr, nullptr, 0), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_write_plan_failed(nullptr, nullptr, nullptr, nullptr, 0), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_write_plan_result(nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    outbox_write_plan_free(nullptr);
    ASSERT_EQ(outbox_write_plan_new(&p, cfg, ev, OUTBOX_TX_IDLE, "qmark"), OUTBOX_OK);
    EXPECT_EQ(outbox_write_plan_result(p), OUTBOX_ERR_INVALID_ARGUMENT) << "not done yet";
    EXPECT_EQ(outbox_write_plan_done(p, nullptr, 0), OUTBOX_OK) << "an INSERT row without a seq ends the plan";
    EXPECT_EQ(outbox_write_plan_next(p, nullptr), nullptr);
    EXPECT_EQ(outbox_write_plan_done(p, nullptr, 0), OUTBOX_ERR_INVALID_ARGUMENT) << "done";
    EXPECT_EQ(outbox_write_plan_result(p), OUTBOX_ERR_INTERNAL);
    outbox_write_plan_free(p);
    outbox_event_free(ev);
}
