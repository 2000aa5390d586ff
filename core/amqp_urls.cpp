// URL-list parsing: amqp.url as a comma-separated list of addresses, each parsed and checked
// (with the connection options) before any node is tried.
#include "amqp_impl.hpp"

#include <string>
#include <vector>

namespace outbox::amqp {

ParsedUrl parse_url(const std::string &url, const std::string &redacted) {
    if (url.empty()) {
        fail(Errc::invalid_argument, "AMQP URL is empty");
    }
    // amqp_parse_url decodes in place and points into the buffer it is given.
    std::vector<char> buf(url.begin(), url.end());
    buf.push_back('\0');
    amqp_connection_info info{};
    amqp_default_connection_info(&info);
    const int rc = amqp_parse_url(buf.data(), &info);
    if (rc != AMQP_STATUS_OK) {
        fail(Errc::invalid_argument,
             "invalid AMQP URL '" + redacted + "': " + amqp_error_string2(rc) +
                 " (expected amqp[s]://user:password@host[:port][/vhost], vhost '/' written %2f)");
    }
    ParsedUrl p;
    p.user = info.user != nullptr ? info.user : "";
    p.password = info.password != nullptr ? info.password : "";
    p.host = info.host != nullptr ? info.host : "";
    p.vhost = info.vhost != nullptr ? info.vhost : "/";
    p.port = info.port;
    p.ssl = info.ssl != 0;
    if (p.host.empty()) {
        fail(Errc::invalid_argument, "invalid AMQP URL '" + redacted + "': no host");
    }
    return p;
}

void validate(const Options &o, const std::string &redacted) {
    if (o.connect_timeout_ms <= 0 || o.io_timeout_ms <= 0) {
        fail(Errc::invalid_argument, "AMQP " + redacted + ": connect_timeout_ms and io_timeout_ms must be > 0");
    }
    if (o.heartbeat_s < 0 || o.heartbeat_s > 65535) {
        fail(Errc::invalid_argument, "AMQP " + redacted + ": heartbeat_s must be within 0..65535");
    }
    if (o.tls.cert_file.empty() != o.tls.key_file.empty()) {
        fail(Errc::invalid_argument, "AMQP " + redacted + ": tls cert_file and key_file go together");
    }
}

std::vector<std::string> split_url_list(const std::string &urls) {
    std::vector<std::string> out;
    size_t start = 0;
    while (start <= urls.size()) {
        size_t end = urls.find(',', start);
        if (end == std::string::npos) {
            end = urls.size();
        }
        size_t b = start, e = end;
        while (b < e && (urls[b] == ' ' || urls[b] == '\t')) {
            ++b;
        }
        while (e > b && (urls[e - 1] == ' ' || urls[e - 1] == '\t')) {
            --e;
        }
        if (e > b) {
            out.push_back(urls.substr(b, e - b));
        }
        start = end + 1;
    }
    return out;
}

} // namespace outbox::amqp
