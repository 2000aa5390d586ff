// What a consumer makes of an AMQP delivery from the wire (body, content type, headers).
//  - parse_delivery never crashes and only ever answers "event" or a reason;
//  - an accepted event has a UUID id, non-empty identity fields and every decoded string field
//    is clean text (UTF-8, no NUL): what reaches the inbox's SQL parameters and the C API's
//    NUL-terminated strings is exactly what was sent;
//  - the reason is printable UTF-8 (it becomes a header and a log line).
#include "consumer.hpp"
#include "fuzz_common.hpp"
#include "uuid.hpp"

#include <fuzzer/FuzzedDataProvider.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FuzzedDataProvider in(data, size);
    outbox::amqp::Message m;
    switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0: m.props.content_type = "application/json"; break;
    case 1: m.props.content_type = in.ConsumeRandomLengthString(64); break;
    default: break;
    }
    if (in.ConsumeBool()) {
        m.props.headers.emplace_back("outbox-seq", in.ConsumeIntegral<int64_t>());
    }
    if (in.ConsumeBool()) {
        m.props.headers.emplace_back("x-delivery-count", in.ConsumeIntegral<int64_t>());
    }
    m.redelivered = in.ConsumeBool();
    const size_t max_body = in.ConsumeIntegralInRange<size_t>(16, 1 << 16);
    m.body = in.ConsumeRemainingBytesAsString();
    const std::string body = m.body;

    // The JSON helpers on arbitrary text, alone.
    std::string decoded;
    if (outbox::json::decode_string(body, decoded)) {
        fuzz::require(decoded.size() <= body.size() * 2, "decode_string grew the text");
    }

    outbox::Delivery d;
    const std::string why = outbox::parse_delivery(std::move(m), max_body, d);
    if (!why.empty()) {
        fuzz::require(outbox::valid_utf8(why), "reason is not UTF-8: " + why.substr(0, 100));
        return 0;
    }
    fuzz::require(body.size() <= max_body, "accepted a body over the limit");
    fuzz::require(outbox::uuid::valid(d.event_id), "accepted a non-UUID OUTBOX_ID");
    for (const std::string *s : {&d.event_id, &d.event_type, &d.aggregate_type, &d.aggregate_id}) {
        fuzz::require(!s->empty() && fuzz::clean_text(*s), "identity field not clean text");
    }
    for (const auto &[k, v] : d.fields) {
        fuzz::require(outbox::valid_utf8(v), "field " + k + " is not UTF-8");
        if (!v.empty() && v.front() != '{' && v.front() != '[') {
            fuzz::require(v.find('\0') == std::string::npos, "field " + k + " holds a NUL");
        }
    }
    const std::string *payload = d.field("PAYLOAD");
    fuzz::require(payload != nullptr && !payload->empty() && payload->front() == '{', "PAYLOAD not an object");
    fuzz::require(d.seq >= 0, "negative seq");
    fuzz::require(d.delivery_count >= -1, "delivery count below -1");
    return 0;
}
