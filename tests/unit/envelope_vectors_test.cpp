// The shared vectors in tests/vectors/envelopes.json: rows in, exact wire messages out.
#include "envelope.hpp"
#include "json.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

using namespace outbox;

namespace {

std::string read_file(const std::string &path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::string str(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

} // namespace

TEST(EnvelopeVectors, BodiesRoutingKeysAndHeadersMatch) {
    std::string text = read_file(std::string(OUTBOX_TEST_VECTORS_DIR) + "/envelopes.json");
    ASSERT_FALSE(text.empty());
    json::Ptr doc = json::parse(text);
    ASSERT_TRUE(doc);
    const cJSON *vectors = cJSON_GetObjectItemCaseSensitive(doc.get(), "vectors");
    ASSERT_GE(cJSON_GetArraySize(vectors), 3);
    const cJSON *v = nullptr;
    cJSON_ArrayForEach(v, vectors) {
        SCOPED_TRACE(str(v, "name"));
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(v, "row");
        EventRow row;
        row.outbox_id = str(r, "outbox_id");
        row.event_type = str(r, "event_type");
        row.aggregate_type = str(r, "aggregate_type");
        row.aggregate_id = str(r, "aggregate_id");
        row.seq = static_cast<int64_t>(cJSON_GetObjectItemCaseSensitive(r, "seq")->valuedouble);
        row.operation = str(r, "operation");
        row.payload = str(r, "payload");
        if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(r, "previous_payload"))) {
            row.previous_payload = str(r, "previous_payload");
        }
        row.metadata = str(r, "metadata");
        if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(r, "user"))) {
            row.user = str(r, "user");
        }
        row.created_at = str(r, "created_at");
        row.created_epoch_s = static_cast<int64_t>(cJSON_GetObjectItemCaseSensitive(r, "created_epoch_s")->valuedouble);

        EXPECT_EQ(envelope_body(row), str(v, "body"));
        EXPECT_EQ(routing_key(row), str(v, "routing_key"));
        EXPECT_TRUE(json::parse(envelope_body(row))) << "the envelope is valid JSON";

        amqp::Properties p = envelope_properties(row);
        EXPECT_EQ(p.message_id, row.outbox_id);
        EXPECT_EQ(p.type, row.event_type);
        EXPECT_EQ(p.delivery_mode, 2);
        EXPECT_EQ(p.content_type, "application/json");
        EXPECT_EQ(p.timestamp, row.created_epoch_s);
        const cJSON *headers = cJSON_GetObjectItemCaseSensitive(v, "headers");
        EXPECT_EQ(static_cast<size_t>(cJSON_GetArraySize(headers)), p.headers.size());
        const cJSON *h = nullptr;
        cJSON_ArrayForEach(h, headers) {
            bool found = false;
            for (const auto &[k, val] : p.headers) {
                if (k != h->string) {
                    continue;
                }
                found = true;
                if (cJSON_IsString(h)) {
                    EXPECT_EQ(std::get<std::string>(val), h->valuestring) << k;
                } else {
                    EXPECT_EQ(std::get<int64_t>(val), static_cast<int64_t>(h->valuedouble)) << k;
                }
            }
            EXPECT_TRUE(found) << "missing header " << h->string;
        }
        amqp::Properties replay = envelope_properties(row, true);
        EXPECT_TRUE(std::get<bool>(replay.headers.back().second));
    }
}

// The instant as the relay selects it (date_part('epoch', created_at) as text) in the envelope's
// forms; tests/integration/core/relay_test.cpp checks them against PostgreSQL's own to_char.
TEST(EnvelopeCreated, EpochTextBecomesTheCompactUtcFormAndWholeSeconds) {
    struct Case {
        const char *text;
        const char *created_at;
        int64_t epoch_s;
    };
    const Case cases[] = {
        {"1795807083.089111", "20261127191803", 1795807083},
        {"0", "19700101000000", 0},
        {"-0.5", "19691231235959", -1},
        {"-1", "19691231235959", -1},
        {"-86400.000000", "19691231000000", -86400},
        {"951782400", "20000229000000", 951782400},
        {"253402300799.999999", "99991231235959", 253402300799},
        {"253402300800", "100000101000000", 253402300800},
        {"Infinity", "", 0},
        {"-Infinity", "", 0},
        {"NaN", "", 0},
        {"1e+16", "", 0},
        {"", "", 0},
        {"12x", "", 0},
        {"1.5.2", "", 0},
    };
    for (const Case &c : cases) {
        EventRow row;
        row.created_at = "stale";
        row.created_epoch_s = 7;
        set_created(row, c.text);
        EXPECT_EQ(row.created_at, c.created_at) << c.text;
        EXPECT_EQ(row.created_epoch_s, c.epoch_s) << c.text;
    }
}
