#include "amqp.hpp"

#include "util.hpp"

#include <amqp_tcp_socket.h>

#include <cstring>
#include <vector>

namespace bench {

amqp_bytes_t bytes_of(const std::string &s) {
    amqp_bytes_t b;
    b.len = s.size();
    b.bytes = const_cast<char *>(s.data());
    return b;
}

std::string str_of(amqp_bytes_t b) {
    return std::string(static_cast<const char *>(b.bytes), b.len);
}

Amqp::Amqp(const std::string &urls, int heartbeat_s) {
    const std::string url = urls.substr(0, urls.find(','));
    std::vector<char> buf(url.begin(), url.end());
    buf.push_back('\0');
    amqp_connection_info info{};
    amqp_default_connection_info(&info);
    if (amqp_parse_url(buf.data(), &info) != AMQP_STATUS_OK) {
        die("RabbitMQ: cannot parse the URL in OUTBOX_AMQP_URL");
    }
    c_ = amqp_new_connection();
    amqp_socket_t *sock = amqp_tcp_socket_new(c_);
    if (sock == nullptr) {
        die("RabbitMQ: cannot create a socket");
    }
    timeval tv{5, 0};
    int rc = amqp_socket_open_noblock(sock, info.host, info.port, &tv);
    if (rc != AMQP_STATUS_OK) {
        die(std::string("RabbitMQ: cannot connect: ") + amqp_error_string2(rc));
    }
    check(amqp_login(c_, info.vhost, 0, AMQP_DEFAULT_FRAME_SIZE, heartbeat_s, AMQP_SASL_METHOD_PLAIN, info.user,
                     info.password),
          "login");
    amqp_channel_open(c_, kChannel);
    check(amqp_get_rpc_reply(c_), "channel.open");
}
Amqp::~Amqp() {
    if (c_ != nullptr) {
        amqp_channel_close(c_, kChannel, AMQP_REPLY_SUCCESS);
        amqp_connection_close(c_, AMQP_REPLY_SUCCESS);
        amqp_destroy_connection(c_);
    }
}

void Amqp::check(amqp_rpc_reply_t r, const std::string &what) {
    switch (r.reply_type) {
    case AMQP_RESPONSE_NORMAL:
        return;
    case AMQP_RESPONSE_NONE:
        die("RabbitMQ " + what + ": missing reply");
    case AMQP_RESPONSE_LIBRARY_EXCEPTION:
        die("RabbitMQ " + what + ": " + amqp_error_string2(r.library_error));
    case AMQP_RESPONSE_SERVER_EXCEPTION:
        if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
            auto *m = static_cast<amqp_channel_close_t *>(r.reply.decoded);
            die("RabbitMQ " + what + ": channel closed: " + str_of(m->reply_text));
        }
        if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
            auto *m = static_cast<amqp_connection_close_t *>(r.reply.decoded);
            die("RabbitMQ " + what + ": connection closed: " + str_of(m->reply_text));
        }
        die("RabbitMQ " + what + ": server exception");
    }
}

void Amqp::declare_exchange(const std::string &name) {
    amqp_exchange_declare(c_, kChannel, bytes_of(name), amqp_cstring_bytes("fanout"), 0, 1, 0, 0, amqp_empty_table);
    check(amqp_get_rpc_reply(c_), "exchange.declare " + name);
}
void Amqp::declare_queue(const std::string &name, const std::string &type) {
    amqp_table_entry_t arg{};
    arg.key = amqp_cstring_bytes("x-queue-type");
    arg.value.kind = AMQP_FIELD_KIND_UTF8;
    arg.value.value.bytes = bytes_of(type);
    amqp_table_t args{1, &arg};
    amqp_queue_declare(c_, kChannel, bytes_of(name), 0, 1, 0, 0, args);
    check(amqp_get_rpc_reply(c_), "queue.declare " + name);
}
void Amqp::bind(const std::string &queue, const std::string &exchange) {
    amqp_queue_bind(c_, kChannel, bytes_of(queue), bytes_of(exchange), amqp_empty_bytes, amqp_empty_table);
    check(amqp_get_rpc_reply(c_), "queue.bind");
}
void Amqp::unbind(const std::string &queue, const std::string &exchange) {
    amqp_queue_unbind(c_, kChannel, bytes_of(queue), bytes_of(exchange), amqp_empty_bytes, amqp_empty_table);
    check(amqp_get_rpc_reply(c_), "queue.unbind");
}
uint32_t Amqp::count(const std::string &queue) {
    auto *ok = amqp_queue_declare(c_, kChannel, bytes_of(queue), 1, 0, 0, 0, amqp_empty_table);
    check(amqp_get_rpc_reply(c_), "queue.declare passive " + queue);
    return ok->message_count;
}
uint32_t Amqp::purge(const std::string &queue) {
    auto *ok = amqp_queue_purge(c_, kChannel, bytes_of(queue));
    check(amqp_get_rpc_reply(c_), "queue.purge " + queue);
    return ok->message_count;
}
void Amqp::delete_queue(const std::string &queue) {
    amqp_queue_delete(c_, kChannel, bytes_of(queue), 0, 0);
    check(amqp_get_rpc_reply(c_), "queue.delete " + queue);
}
void Amqp::delete_exchange(const std::string &exchange) {
    amqp_exchange_delete(c_, kChannel, bytes_of(exchange), 0);
    check(amqp_get_rpc_reply(c_), "exchange.delete " + exchange);
}
void Amqp::confirm_select() {
    amqp_confirm_select(c_, kChannel);
    check(amqp_get_rpc_reply(c_), "confirm.select");
}

// basic.get with no_ack: one message off the queue, for checking what was published.
Amqp::Got Amqp::get(const std::string &queue) {
    Got g;
    amqp_rpc_reply_t r = amqp_basic_get(c_, kChannel, bytes_of(queue), 1);
    check(r, "basic.get");
    if (r.reply.id != AMQP_BASIC_GET_OK_METHOD) {
        return g;
    }
    g.routing_key = str_of(static_cast<amqp_basic_get_ok_t *>(r.reply.decoded)->routing_key);
    amqp_message_t msg{};
    check(amqp_read_message(c_, kChannel, &msg, 0), "basic.get content");
    g.found = true;
    g.body = str_of(msg.body);
    const amqp_basic_properties_t &p = msg.properties;
    if ((p._flags & AMQP_BASIC_MESSAGE_ID_FLAG) != 0) {
        g.message_id = str_of(p.message_id);
    }
    if ((p._flags & AMQP_BASIC_TYPE_FLAG) != 0) {
        g.type = str_of(p.type);
    }
    if ((p._flags & AMQP_BASIC_APP_ID_FLAG) != 0) {
        g.app_id = str_of(p.app_id);
    }
    if ((p._flags & AMQP_BASIC_CONTENT_TYPE_FLAG) != 0) {
        g.content_type = str_of(p.content_type);
    }
    if ((p._flags & AMQP_BASIC_DELIVERY_MODE_FLAG) != 0) {
        g.delivery_mode = p.delivery_mode;
    }
    if ((p._flags & AMQP_BASIC_TIMESTAMP_FLAG) != 0) {
        g.timestamp = static_cast<int64_t>(p.timestamp);
    }
    if ((p._flags & AMQP_BASIC_HEADERS_FLAG) != 0) {
        // The publisher's headers; a quorum queue adds its own x-delivery-count.
        for (int k = 0; k < p.headers.num_entries; ++k) {
            const amqp_bytes_t &key = p.headers.entries[k].key;
            const bool broker = key.len >= 2 && std::memcmp(key.bytes, "x-", 2) == 0;
            g.headers += broker ? 0 : 1;
        }
    }
    amqp_destroy_message(&msg);
    return g;
}

// basic.consume with no_ack: the broker pushes everything; next() reads one delivery.
void Amqp::consume(const std::string &queue) {
    amqp_basic_consume(c_, kChannel, bytes_of(queue), amqp_empty_bytes, 0, 1, 0, amqp_empty_table);
    check(amqp_get_rpc_reply(c_), "basic.consume " + queue);
}
// False on timeout.
bool Amqp::next(Delivery &d, int timeout_ms) {
    amqp_maybe_release_buffers(c_);
    amqp_envelope_t env{};
    timeval tv{timeout_ms / 1000, static_cast<suseconds_t>(timeout_ms % 1000) * 1000};
    amqp_rpc_reply_t r = amqp_consume_message(c_, &env, &tv, 0);
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_TIMEOUT) {
        return false;
    }
    check(r, "consume");
    const amqp_basic_properties_t &p = env.message.properties;
    d.aggregate_id.clear();
    d.message_id.clear();
    d.seq = -1;
    if ((p._flags & AMQP_BASIC_MESSAGE_ID_FLAG) != 0) {
        d.message_id = str_of(p.message_id);
    }
    if ((p._flags & AMQP_BASIC_HEADERS_FLAG) != 0) {
        for (int k = 0; k < p.headers.num_entries; ++k) {
            const amqp_table_entry_t &e = p.headers.entries[k];
            const std::string key = str_of(e.key);
            if (key == "outbox-aggregate-id" && e.value.kind == AMQP_FIELD_KIND_UTF8) {
                d.aggregate_id = str_of(e.value.value.bytes);
            } else if (key == "outbox-seq") {
                switch (e.value.kind) {
                case AMQP_FIELD_KIND_I64:
                    d.seq = e.value.value.i64;
                    break;
                case AMQP_FIELD_KIND_U64:
                    d.seq = static_cast<int64_t>(e.value.value.u64);
                    break;
                case AMQP_FIELD_KIND_I32:
                    d.seq = e.value.value.i32;
                    break;
                case AMQP_FIELD_KIND_U32:
                    d.seq = e.value.value.u32;
                    break;
                default:
                    break;
                }
            }
        }
    }
    amqp_destroy_envelope(&env);
    return true;
}

} // namespace bench
