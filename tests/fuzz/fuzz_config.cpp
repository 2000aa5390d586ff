// Configuration setters and the redaction of connection strings.
//  - Config::set answers bad values with outbox::Error (INVALID_ARGUMENT / UNKNOWN_KEY), leaves
//    identifiers valid (the quoted names never hold a quote), and secrets read back as "***";
//  - a password inside an amqp:// URL, a PostgreSQL URL (percent-encoded) or a key=value
//    conninfo (quoted) never survives redaction, nor libpq's messages about the string.
#include "amqp.hpp"
#include "config.hpp"
#include "fuzz_common.hpp"
#include "pg.hpp"
#include "redact.hpp"

#include <fuzzer/FuzzedDataProvider.h>

namespace {

std::string pct(const std::string &s) {
    static const char hex[] = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : s) {
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
            c == '.' || c == '~') {
            out.push_back(static_cast<char>(c));
        } else {
            out += '%';
            out.push_back(hex[c >> 4]);
            out.push_back(hex[c & 15]);
        }
    }
    return out;
}

std::string libpq_quote(const std::string &s) {
    std::string out = "'";
    for (char c : s) {
        if (c == '\'' || c == '\\') {
            out.push_back('\\');
        }
        out.push_back(c);
    }
    return out + "'";
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FuzzedDataProvider in(data, size);
    outbox::Config cfg;
    const auto &keys = outbox::Config::keys();
    const int ops = in.ConsumeIntegralInRange<int>(1, 6);
    for (int i = 0; i < ops; ++i) {
        std::string key = in.ConsumeBool() ? keys[in.ConsumeIntegralInRange<size_t>(0, keys.size() - 1)].key
                                           : in.ConsumeRandomLengthString(32);
        std::string value = in.ConsumeRandomLengthString(256);
        fuzz::answered([&] { cfg.set(key, value); });
    }
    for (const std::string &q : {cfg.outbox_qualified(), cfg.aggregates_qualified(), cfg.inbox_qualified()}) {
        fuzz::require(q.size() >= 5 && q.find('"', 1) == q.find("\".\""), "qualified name holds a quote: " + q);
    }
    for (const char *secret : {"pg.url", "amqp.url"}) {
        const std::string v = cfg.get(secret);
        fuzz::require(v.empty() || v == "***", std::string(secret) + " read back");
    }

    // Passwords of 6+ bytes, so a match is never an accident of the surrounding text.
    std::string pw = in.ConsumeRandomLengthString(40);
    if (pw.size() < 6 || pw.find('\0') != std::string::npos) {
        return 0;
    }
    const std::string marker = "Zq9" + pw; // 'Z','q','9' appear nowhere else in the strings below
    const std::string amqp = "amqp://user:" + pct(marker) + "@host:5672/vh";
    fuzz::require(outbox::amqp::redact_url(amqp).find(pct(marker)) == std::string::npos, "amqp password shown");
    const std::string pg_url = "postgresql://user:" + pct(marker) + "@host:5432/db?sslmode=require";
    const std::string r1 = outbox::pg::redact_conninfo(pg_url);
    fuzz::require(r1.find(pct(marker)) == std::string::npos && r1.find(marker) == std::string::npos,
                  "pg URL password shown: " + r1);
    const std::string kw = "host=host port=5432 password=" + libpq_quote(marker) + " dbname=db";
    const std::string r2 = outbox::pg::redact_conninfo(kw);
    fuzz::require(r2.find(marker) == std::string::npos, "conninfo password shown: " + r2);
    // A libpq message that quotes any part of the string back.
    const std::string msg = "invalid something: \"" + marker + "\"";
    for (const std::string &conninfo : {pg_url, kw, "host=h password " + marker}) {
        const std::string m = outbox::redact::pg_message(conninfo, msg);
        fuzz::require(m.find(marker) == std::string::npos, "message shows the password: " + m);
    }
    return 0;
}
