// The C face of core/tail: watching an exchange (`outbox tail`).
#include "capi.hpp"

#include "tail.hpp"

using outbox::capi::guard;

struct outbox_tail {
    outbox_tail(const outbox::Config &cfg, const std::string &exchange) : tail(cfg, exchange) {}
    outbox::Tail tail;
};

extern "C" {

outbox_status outbox_tail_open(outbox_tail **out, const outbox_config *cfg, const char *exchange) {
    OUTBOX_REQUIRE(out);
    *out = nullptr;
    OUTBOX_REQUIRE(cfg);
    return guard([&] { *out = new outbox_tail(cfg->cfg, exchange != nullptr ? exchange : ""); });
}

void outbox_tail_close(outbox_tail *tail) {
    delete tail;
}

outbox_status outbox_tail_next(outbox_message **out, outbox_tail *tail, int timeout_ms) {
    OUTBOX_REQUIRE(out);
    *out = nullptr;
    OUTBOX_REQUIRE(tail);
    return guard([&] {
        auto d = tail->tail.next(timeout_ms < 0 ? 0 : timeout_ms);
        if (!d) {
            outbox::fail(outbox::Errc::timeout, "no message within " + std::to_string(timeout_ms) + " ms");
        }
        *out = new outbox_message{std::move(*d), {}};
    });
}

const char *outbox_tail_name(const outbox_tail *tail, int queue) {
    if (tail == nullptr) {
        return nullptr;
    }
    return queue != 0 ? tail->tail.queue().c_str() : tail->tail.exchange().c_str();
}

} // extern "C"
