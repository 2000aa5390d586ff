#include "connect.hpp"

namespace outbox {

amqp::Options amqp_options(const Config &cfg, std::string connection_name) {
    amqp::Options o;
    o.url = cfg.amqp_url;
    o.tls.enabled = cfg.amqp_tls;
    o.tls.ca_file = cfg.amqp_tls_ca;
    o.tls.cert_file = cfg.amqp_tls_cert;
    o.tls.key_file = cfg.amqp_tls_key;
    o.tls.verify_peer = cfg.amqp_tls_verify_peer;
    o.tls.verify_hostname = cfg.amqp_tls_verify_hostname;
    o.heartbeat_s = cfg.amqp_heartbeat_s;
    o.connect_timeout_ms = cfg.amqp_connect_timeout_ms;
    o.io_timeout_ms = cfg.amqp_io_timeout_ms;
    o.connection_name = std::move(connection_name);
    return o;
}

} // namespace outbox
