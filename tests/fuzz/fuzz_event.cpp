// The write path's validation and the envelope: any sequence of event_set() calls, then the
// rendered INSERT and the message body the relay would send for it.
//  - only outbox::Error ever escapes (never INTERNAL), and messages are UTF-8;
//  - an accepted event has clean text in every parameter and a JSON object payload;
//  - its envelope body is one JSON object whose string fields decode back to exactly the
//    values written (no injection through quotes, backslashes or control characters).
#include "envelope.hpp"
#include "event.hpp"
#include "fuzz_common.hpp"
#include "store.hpp"

#include <fuzzer/FuzzedDataProvider.h>

#include <vector>

namespace {

const char *const kFields[] = {"aggregate_type", "aggregate_id", "operation", "payload", "previous_payload",
                               "metadata", "user", "event_type", "idempotency_key", "event_id", "force_delete",
                               "bogus"};

std::string member(const std::vector<outbox::json::Member> &ms, const char *key) {
    for (const auto &m : ms) {
        if (m.key == key) {
            std::string out;
            fuzz::require(outbox::json::decode_string(m.value, out), std::string("undecodable ") + key);
            return out;
        }
    }
    fuzz::broken(std::string("envelope lacks ") + key);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FuzzedDataProvider in(data, size);
    outbox::Config cfg;
    cfg.max_payload_bytes = 4096;
    if (in.ConsumeBool()) {
        fuzz::answered([&] { cfg.set("event.type_map", in.ConsumeRandomLengthString(64)); });
    }
    outbox::Event ev;
    // A valid base, so the fuzzer spends its time past the "required" checks.
    if (in.ConsumeBool()) {
        ev.set("aggregate_type", "PRD");
        ev.set("aggregate_id", "1");
        ev.set("operation", "POST");
        ev.set("payload", "{}");
    }
    const int ops = in.ConsumeIntegralInRange<int>(0, 8);
    for (int i = 0; i < ops; ++i) {
        const char *field = kFields[in.ConsumeIntegralInRange<size_t>(0, std::size(kFields) - 1)];
        std::string value = in.ConsumeRandomLengthString(512);
        fuzz::answered([&] { ev.set(field, value); });
    }
    if (in.ConsumeBool()) {
        fuzz::answered([&] { ev.set("payload", in.ConsumeRemainingBytesAsString()); });
    }
    outbox::store::Statement st;
    if (!fuzz::answered([&] { st = outbox::store::render_write(cfg, ev); })) {
        return 0;
    }
    fuzz::require(st.params.size() == 11, "parameter count");
    for (const auto &p : st.params) {
        fuzz::require(!p || fuzz::clean_text(*p), "a parameter is not clean text");
    }
    fuzz::require(outbox::json::parse(ev.payload) && cJSON_IsObject(outbox::json::parse(ev.payload).get()),
                  "accepted payload is not a JSON object");

    outbox::EventRow row;
    row.outbox_id = ev.resolved_id;
    row.event_type = ev.resolved_type;
    row.aggregate_type = ev.aggregate_type;
    row.aggregate_id = ev.aggregate_id;
    row.seq = 1;
    row.operation = outbox::operation_name(ev.operation);
    row.payload = ev.payload;
    row.previous_payload = ev.previous_payload;
    row.metadata = ev.metadata.value_or("{}");
    row.user = ev.user;
    row.created_at = "20250101000000";
    const std::string body = outbox::envelope_body(row);
    fuzz::require(outbox::valid_utf8(body), "body is not UTF-8");
    outbox::json::Ptr doc = outbox::json::parse(body);
    fuzz::require(doc && cJSON_IsObject(doc.get()), "body is not one JSON object: " + body.substr(0, 200));
    std::vector<outbox::json::Member> ms;
    fuzz::require(outbox::json::object_members(body, ms), "object_members failed on the body");
    fuzz::require(member(ms, "OUTBOX_ID") == row.outbox_id, "OUTBOX_ID round trip");
    fuzz::require(member(ms, "EVENT_TYPE") == row.event_type, "EVENT_TYPE round trip");
    fuzz::require(member(ms, "AGGREGATE_ID") == row.aggregate_id, "AGGREGATE_ID round trip");
    fuzz::require(member(ms, "AGGREGATE_TYPE") == row.aggregate_type, "AGGREGATE_TYPE round trip");
    if (row.user) {
        fuzz::require(member(ms, "USER") == *row.user, "USER round trip");
    }
    const std::string rk = outbox::routing_key(row);
    fuzz::require(rk.find_first_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ") == std::string::npos, "routing key not lower-case");
    outbox::amqp::Properties props = outbox::envelope_properties(row);
    for (const auto &[k, v] : props.headers) {
        if (const auto *s = std::get_if<std::string>(&v)) {
            fuzz::require(outbox::valid_utf8(*s), "header " + k + " is not UTF-8");
        }
    }
    return 0;
}
