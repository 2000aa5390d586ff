// outbox_write_send / outbox_write_poll: outbox_write driven from the caller's event loop (here
// poll(2) on outbox_db_socket()), against a real PostgreSQL. The same write as outbox_write: the
// same rows, sequence numbers, transaction semantics, statuses and messages.
#include "fixture.hpp"

#include <poll.h>

using namespace outbox_test;

namespace {

struct Driven {
    outbox_status status = OUTBOX_OK;
    std::string message;
    int polls = 0; // outbox_write_poll() calls
};

// Sends the write, then waits on the socket as told and polls until it is done (or failed).
Driven drive(outbox_db *db, outbox_event *ev) {
    Driven d;
    outbox_write_wait wait = OUTBOX_WRITE_DONE;
    d.status = outbox_write_send(&wait, db, ev);
    EXPECT_NE(wait, OUTBOX_WRITE_BLOCKING);
    while (d.status == OUTBOX_OK && wait != OUTBOX_WRITE_DONE) {
        pollfd p{outbox_db_socket(db), static_cast<short>(POLLIN | (wait == OUTBOX_WRITE_WRITABLE ? POLLOUT : 0)), 0};
        EXPECT_EQ(poll(&p, 1, 10000), 1) << "the socket became ready";
        d.status = outbox_write_poll(&wait, db, ev);
        ++d.polls;
        EXPECT_LT(d.polls, 1000);
        if (d.polls >= 1000) {
            break;
        }
    }
    if (d.status != OUTBOX_OK) {
        d.message = outbox_last_error();
        EXPECT_EQ(wait, OUTBOX_WRITE_DONE);
    }
    return d;
}

class WriteNonblockingTest : public PgTest {};

TEST_F(WriteNonblockingTest, WritesInTheTransactionWithSeqAsOutboxWrite) {
    ASSERT_EQ(outbox_db_exec(db, "BEGIN"), OUTBOX_OK);
    for (int i = 1; i <= 3; ++i) {
        outbox_event *ev = make_event("7");
        Driven d = drive(db, ev);
        ASSERT_EQ(d.status, OUTBOX_OK) << d.message;
        EXPECT_EQ(outbox_event_seq(ev), i);
        EXPECT_EQ(std::string(outbox_event_type(ev)), "ProductCreated");
        // The first write prepares its statement: one more round trip, still without blocking.
        EXPECT_GE(d.polls, 1);
        EXPECT_EQ(outbox_db_tx_state(db), OUTBOX_TX_INTRANS);
        outbox_event_free(ev);
    }
    // outbox_write on the same connection goes on with the same statement and counter.
    outbox_event *ev = make_event("7");
    ASSERT_EQ(outbox_write(db, ev), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(outbox_event_seq(ev), 4);
    outbox_event_free(ev);
    EXPECT_EQ(count(), 0) << "visible before commit";
    ASSERT_EQ(outbox_db_exec(db, "COMMIT"), OUTBOX_OK);
    EXPECT_EQ(count(), 4);
    EXPECT_EQ(admin.scalar("SELECT string_agg(seq::text, ',' ORDER BY seq) FROM " + table), "1,2,3,4");
}

TEST_F(WriteNonblockingTest, OnAnIdleConnectionTheWriteIsItsOwnTransaction) {
    outbox_event *ev = make_event();
    Driven d = drive(db, ev);
    ASSERT_EQ(d.status, OUTBOX_OK) << d.message;
    EXPECT_EQ(outbox_db_tx_state(db), OUTBOX_TX_IDLE);
    EXPECT_EQ(count("outbox_id = '" + std::string(outbox_event_id(ev)) + "'"), 1);
    outbox_event_free(ev);
}

TEST_F(WriteNonblockingTest, BadInputIsRefusedBeforeSendingAndLosesNothing) {
    ASSERT_EQ(outbox_db_exec(db, "BEGIN"), OUTBOX_OK);
    outbox_event *a = make_event("1");
    ASSERT_EQ(drive(db, a).status, OUTBOX_OK);
    outbox_event *bad = make_event("2", "POST", R"({"PRD_ID":)");
    Driven d = drive(db, bad);
    EXPECT_EQ(d.status, OUTBOX_ERR_INVALID_EVENT);
    EXPECT_EQ(d.polls, 0);
    ASSERT_EQ(outbox_write(db, bad), OUTBOX_ERR_INVALID_EVENT);
    EXPECT_EQ(d.message, outbox_last_error()) << "the same message as outbox_write's";
    EXPECT_EQ(outbox_db_tx_state(db), OUTBOX_TX_INTRANS) << "the transaction stays usable";
    outbox_event *b = make_event("3");
    ASSERT_EQ(drive(db, b).status, OUTBOX_OK);
    ASSERT_EQ(outbox_db_exec(db, "COMMIT"), OUTBOX_OK);
    EXPECT_EQ(count(), 2);
    for (outbox_event *ev : {a, bad, b}) {
        outbox_event_free(ev);
    }
}

TEST_F(WriteNonblockingTest, ServerErrorsAreClassifiedAsOutboxWriteClassifiesThem) {
    // A statement timeout at execution (the aggregate's counter row locked by another transaction):
    // the status, message and SQLSTATE outbox_write gives for it, on a connection of each kind in
    // the same state.
    outbox_db *other = nullptr, *holder = nullptr;
    ASSERT_EQ(outbox_db_open(&other, pg_url().c_str(), cfg), OUTBOX_OK);
    ASSERT_EQ(outbox_db_open(&holder, pg_url().c_str(), cfg), OUTBOX_OK);
    outbox_event *first = make_event("1");
    ASSERT_EQ(drive(db, first).status, OUTBOX_OK);
    ASSERT_EQ(outbox_db_exec(holder, "BEGIN"), OUTBOX_OK);
    outbox_event *lock = make_event("9");
    ASSERT_EQ(outbox_write(holder, lock), OUTBOX_OK) << outbox_last_error();
    // Each connection on aggregates of its own besides: the transactions lock their counter rows.
    for (outbox_db *c : {db, other}) {
        ASSERT_EQ(outbox_db_exec(c, "BEGIN"), OUTBOX_OK);
        outbox_event *warm = make_event(c == db ? "2" : "3");
        ASSERT_EQ(outbox_write(c, warm), OUTBOX_OK) << "the statement is prepared on both";
        outbox_event_free(warm);
        ASSERT_EQ(outbox_db_exec(c, "SET LOCAL statement_timeout = '200ms'"), OUTBOX_OK);
    }
    outbox_event *blocked = make_event("9");
    Driven d = drive(db, blocked);
    const std::string sqlstate = outbox_last_sqlstate();
    EXPECT_EQ(d.status, OUTBOX_ERR_TIMEOUT) << d.message;
    EXPECT_EQ(outbox_write(other, blocked), d.status);
    EXPECT_EQ(d.message, outbox_last_error());
    EXPECT_EQ(sqlstate, "57014");
    EXPECT_STREQ(outbox_last_sqlstate(), "57014");
    EXPECT_EQ(outbox_db_tx_state(db), OUTBOX_TX_INERROR) << "the caller's transaction, as outbox_write leaves it";
    EXPECT_EQ(outbox_db_tx_state(other), OUTBOX_TX_INERROR);
    // An aborted transaction is refused before sending, as by outbox_write.
    outbox_event *later = make_event("4");
    Driven aborted = drive(db, later);
    EXPECT_EQ(aborted.status, OUTBOX_ERR_TRANSACTION);
    EXPECT_EQ(outbox_write(db, later), OUTBOX_ERR_TRANSACTION);
    EXPECT_EQ(aborted.message, outbox_last_error());
    // After the rollback the connection works as before, in blocking mode for everything else.
    ASSERT_EQ(outbox_db_exec(db, "ROLLBACK"), OUTBOX_OK);
    ASSERT_EQ(outbox_db_exec(other, "ROLLBACK"), OUTBOX_OK);
    ASSERT_EQ(outbox_db_exec(holder, "ROLLBACK"), OUTBOX_OK);
    ASSERT_EQ(drive(db, later).status, OUTBOX_OK);
    outbox_event *blocking = make_event("4");
    ASSERT_EQ(outbox_write(db, blocking), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(outbox_event_seq(blocking), 2);
    ASSERT_EQ(drive(db, blocked).status, OUTBOX_OK) << "the same event, written once the lock is gone";
    EXPECT_EQ(count(), 4);
    for (outbox_event *ev : {first, lock, blocked, later, blocking}) {
        outbox_event_free(ev);
    }
    outbox_db_close(other);
    outbox_db_close(holder);
}

TEST_F(WriteNonblockingTest, MissingTablesFailThePrepareAsOutboxWriteDoes) {
    outbox_db *fresh = nullptr;
    ASSERT_EQ(outbox_db_open(&fresh, pg_url().c_str(), cfg), OUTBOX_OK);
    admin.query("DROP SCHEMA \"" + schema + "\" CASCADE");
    outbox_event *ev = make_event();
    Driven d = drive(fresh, ev);
    EXPECT_EQ(d.status, OUTBOX_ERR_SCHEMA) << d.message;
    EXPECT_EQ(outbox_write(db, ev), OUTBOX_ERR_SCHEMA);
    EXPECT_EQ(d.message, outbox_last_error());
    EXPECT_EQ(outbox_db_tx_state(fresh), OUTBOX_TX_IDLE) << "usable again";
    outbox_event_free(ev);
    outbox_db_close(fresh);
}

TEST_F(WriteNonblockingTest, TheConnectionIsBusyUntilTheWriteIsDone) {
    ASSERT_EQ(outbox_db_exec(db, "BEGIN"), OUTBOX_OK);
    outbox_event *ev = make_event();
    outbox_write_wait wait = OUTBOX_WRITE_DONE;
    ASSERT_EQ(outbox_write_send(&wait, db, ev), OUTBOX_OK) << outbox_last_error();
    ASSERT_NE(wait, OUTBOX_WRITE_DONE);
    outbox_event *other = make_event();
    EXPECT_EQ(outbox_write(db, other), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_write_send(&wait, db, other), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_db_exec(db, "SELECT 1"), OUTBOX_ERR_INVALID_ARGUMENT);
    // Polling before the socket is ready only finds nothing new.
    int polls = 0;
    while (outbox_write_poll(&wait, db, ev) == OUTBOX_OK && wait != OUTBOX_WRITE_DONE && ++polls < 1000000) {
    }
    ASSERT_EQ(wait, OUTBOX_WRITE_DONE) << outbox_last_error();
    EXPECT_EQ(outbox_event_seq(ev), 1);
    EXPECT_EQ(outbox_write_poll(&wait, db, ev), OUTBOX_ERR_INVALID_ARGUMENT) << "nothing in progress";
    ASSERT_EQ(outbox_db_exec(db, "COMMIT"), OUTBOX_OK);
    EXPECT_EQ(count(), 1);
    outbox_event_free(ev);
    outbox_event_free(other);
}

TEST_F(WriteNonblockingTest, ALentConnectionIsLeftInItsOwnMode) {
    RawConn mine;
    ASSERT_TRUE(mine.ok());
    outbox_db *lent = nullptr;
    ASSERT_EQ(outbox_db_wrap(&lent, mine.get(), cfg), OUTBOX_OK);
    mine.query("BEGIN");
    outbox_event *ev = make_event();
    Driven d = drive(lent, ev);
    ASSERT_EQ(d.status, OUTBOX_OK) << d.message;
    EXPECT_EQ(outbox_event_seq(ev), 1);
    EXPECT_EQ(PQisnonblocking(mine.get()), 0);
    EXPECT_EQ(mine.scalar("SELECT count(*) FROM " + table), "1") << "in the caller's transaction";
    mine.query("ROLLBACK");
    EXPECT_EQ(count(), 0);
    outbox_event_free(ev);
    outbox_db_close(lent);
}

} // namespace
