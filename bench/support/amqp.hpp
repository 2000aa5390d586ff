// RabbitMQ through plain librabbitmq-c calls, one connection and one channel: what a service
// without this library would write. The baseline publisher, the queue set-up and the checks use it.
#pragma once

#include <amqp.h>
#include <amqp_framing.h>

#include <cstdint>
#include <string>

namespace bench {

constexpr amqp_channel_t kChannel = 1;

amqp_bytes_t bytes_of(const std::string &s);
std::string str_of(amqp_bytes_t b);

class Amqp {
  public:
    // A list of brokers (a cluster): the first address, the one the relay tries first.
    Amqp(const std::string &urls, int heartbeat_s);
    ~Amqp();
    Amqp(const Amqp &) = delete;
    Amqp &operator=(const Amqp &) = delete;

    amqp_connection_state_t raw() { return c_; }

    void check(amqp_rpc_reply_t r, const std::string &what);

    void declare_exchange(const std::string &name);
    void declare_queue(const std::string &name, const std::string &type);
    void bind(const std::string &queue, const std::string &exchange);
    void unbind(const std::string &queue, const std::string &exchange);
    uint32_t count(const std::string &queue);
    uint32_t purge(const std::string &queue);
    void delete_queue(const std::string &queue);
    void delete_exchange(const std::string &exchange);
    void confirm_select();

    struct Got {
        bool found = false;
        std::string body, message_id, type, app_id, content_type, routing_key;
        int delivery_mode = 0;
        int64_t timestamp = 0;
        int headers = 0;
    };
    // basic.get with no_ack: one message off the queue, for checking what was published.
    Got get(const std::string &queue);

    // basic.consume with no_ack: the broker pushes everything; next() reads one delivery.
    void consume(const std::string &queue);
    struct Delivery {
        std::string aggregate_id, message_id;
        int64_t seq = -1;
    };
    // False on timeout.
    bool next(Delivery &d, int timeout_ms);

  private:
    amqp_connection_state_t c_ = nullptr;
};

} // namespace bench
