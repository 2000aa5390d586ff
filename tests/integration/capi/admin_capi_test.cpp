// The operations group of the public C ABI (outbox_stats, outbox_retry_failed,
// outbox_purge_published, outbox_replay) against the real PostgreSQL and RabbitMQ.
#include "fixture.hpp"

using namespace outbox_test;

namespace {

class AdminCapiTest : public PgTest {
  protected:
    std::string write_one(const std::string &agg) {
        outbox_event *ev = make_event(agg);
        EXPECT_EQ(outbox_write(db, ev), OUTBOX_OK) << outbox_last_error();
        const char *id = outbox_event_id(ev);
        std::string out = id != nullptr ? id : "";
        outbox_event_free(ev);
        return out;
    }
};

TEST_F(AdminCapiTest, StatsRetryAndPurge) {
    const std::string a = write_one("1");
    const std::string b = write_one("2");
    write_one("3");
    // Storage version 2: a and b failed for good (parked, as the relay parks them), and one old
    // published row left in the version-1 table by an upgrade.
    admin.query("INSERT INTO \"" + schema +
                    "\".outbox_parked (position, outbox_id, event_type, aggregate_type,"
                    " aggregate_id, seq, operation, payload, metadata, created_at, status, retry_count, error_message)"
                    " SELECT position, outbox_id, event_type, aggregate_type, aggregate_id, seq, operation, payload,"
                    " metadata, created_at, 'FAILED', 10, 'boom' FROM \"" +
                    schema +
                    "\".outbox_events"
                    " WHERE outbox_id IN ($1, $2)",
                {a, b});
    admin.query("INSERT INTO \"" + schema + "\".outbox_v1" +
                " (outbox_id, event_type, aggregate_type, aggregate_id, seq, operation,"
                " payload, status, published_at) VALUES (gen_random_uuid(), 'X', 'OLD', 'o', 1, 'POST', '{}',"
                " 'PUBLISHED', now() - interval '40 days')");

    char *json = nullptr;
    ASSERT_EQ(outbox_stats(&json, db), OUTBOX_OK) << outbox_last_error();
    ASSERT_NE(json, nullptr);
    EXPECT_NE(std::string(json).find("\"pending\":1,\"pending_due\":1,\"failed\":2,"), std::string::npos) << json;
    EXPECT_NE(std::string(json).find("{\"aggregate_type\":\"PRD\",\"pending\":1,\"failed\":2}"), std::string::npos)
        << json;
    outbox_string_free(json);

    int64_t moved = -1;
    EXPECT_EQ(outbox_retry_failed(&moved, db, nullptr, a.c_str(), 0), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(moved, 1);
    EXPECT_EQ(outbox_retry_failed(&moved, db, "ORD", nullptr, 0), OUTBOX_OK);
    EXPECT_EQ(moved, 0);
    EXPECT_EQ(outbox_retry_failed(&moved, db, "PRD", nullptr, 5), OUTBOX_OK);
    EXPECT_EQ(moved, 0); // b has retry_count 10
    EXPECT_EQ(outbox_retry_failed(&moved, db, "PRD", nullptr, 0), OUTBOX_OK);
    EXPECT_EQ(moved, 1);
    EXPECT_EQ(count("status = 'FAILED'"), 0);
    EXPECT_EQ(count("retry_count = 10 AND error_message = 'boom'"), 2);
    EXPECT_EQ(outbox_retry_failed(&moved, db, nullptr, "nope", 0), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_retry_failed(&moved, nullptr, nullptr, nullptr, 0), OUTBOX_ERR_INVALID_ARGUMENT);

    int64_t deleted = -1;
    EXPECT_EQ(outbox_purge_published(&deleted, db, 30 * 86400, 100), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(deleted, 1);
    EXPECT_EQ(count(), 3);
    EXPECT_EQ(outbox_purge_published(&deleted, db, 30 * 86400, 0), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_stats(nullptr, db), OUTBOX_ERR_INVALID_ARGUMENT);
}

TEST_F(AdminCapiTest, ReplayReportsBrokerErrorsAndNothingToDo) {
    write_one("9");
    outbox_config *c = nullptr;
    ASSERT_EQ(outbox_config_new(&c), OUTBOX_OK);
    ASSERT_EQ(outbox_config_set(c, "outbox.schema", schema.c_str()), OUTBOX_OK);
    ASSERT_EQ(outbox_config_set(c, "amqp.url", amqp_url().c_str()), OUTBOX_OK);
    const std::string missing = unique_name("test.capi.admin.missing.");
    ASSERT_EQ(outbox_config_set(c, "amqp.exchange", missing.c_str()), OUTBOX_OK);
    ASSERT_EQ(outbox_config_set(c, "amqp.exchange_declare", "false"), OUTBOX_OK);
    int64_t published = -1;
    EXPECT_EQ(outbox_replay(&published, db, c, "PRD", "nothing-here", 0), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(published, 0);
    EXPECT_EQ(outbox_replay(&published, db, c, "PRD", "9", 0), OUTBOX_ERR_BROKER);
    EXPECT_NE(std::string(outbox_last_error()).find("NOT_FOUND"), std::string::npos) << outbox_last_error();
    EXPECT_EQ(outbox_replay(&published, db, c, nullptr, "9", 0), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(count("status = 'PENDING'"), 1);
    outbox_config_free(c);
}

} // namespace
