// B: a plain librabbitmq-c publisher of the same messages the relay sends (same body bytes,
// properties, routing keys; persistent, mandatory), with confirm.select and at most --window
// unconfirmed. Timed from the first publish to the last ack: the baseline of D, P and X.
#include "../scenarios.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

namespace bench {

namespace {

struct ConfirmTracker {
    std::vector<uint8_t> done;
    uint64_t low = 1; // lowest tag not yet confirmed
    uint64_t confirmed = 0;
    uint64_t nacked = 0;
    explicit ConfirmTracker(size_t n) : done(n + 2, 0) {}
    void settle(uint64_t tag, bool multiple, bool ack) {
        auto one = [&](uint64_t t) {
            if (t < done.size() && done[t] == 0) {
                done[t] = 1;
                ++confirmed;
                if (!ack) {
                    ++nacked;
                }
            }
        };
        if (multiple) {
            for (uint64_t t = low; t <= tag; ++t) {
                one(t);
            }
        } else {
            one(tag);
        }
        while (low < done.size() && done[low] != 0) {
            ++low;
        }
    }
};

// Reads one frame (tv {0,0}: only if one is there); handles confirms, returns and closes.
// Returns false on timeout.
struct FrameReader {
    Amqp &mq;
    ConfirmTracker &confirms;
    uint64_t returned = 0;
    uint64_t skip_body = 0; // bytes of returned content still to skip
    bool skip_header = false;

    bool read(timeval *tv) {
        amqp_frame_t f{};
        const int st = amqp_simple_wait_frame_noblock(mq.raw(), &f, tv);
        if (st == AMQP_STATUS_TIMEOUT) {
            return false;
        }
        if (st != AMQP_STATUS_OK) {
            die(std::string("RabbitMQ: waiting for confirms: ") + amqp_error_string2(st));
        }
        if (f.frame_type == AMQP_FRAME_METHOD) {
            switch (f.payload.method.id) {
            case AMQP_BASIC_ACK_METHOD: {
                auto *a = static_cast<amqp_basic_ack_t *>(f.payload.method.decoded);
                confirms.settle(a->delivery_tag, a->multiple != 0, true);
                break;
            }
            case AMQP_BASIC_NACK_METHOD: {
                auto *n = static_cast<amqp_basic_nack_t *>(f.payload.method.decoded);
                confirms.settle(n->delivery_tag, n->multiple != 0, false);
                break;
            }
            case AMQP_BASIC_RETURN_METHOD:
                ++returned;
                skip_header = true;
                break;
            case AMQP_CHANNEL_CLOSE_METHOD: {
                auto *m = static_cast<amqp_channel_close_t *>(f.payload.method.decoded);
                die("RabbitMQ closed the channel: " + str_of(m->reply_text));
            }
            case AMQP_CONNECTION_CLOSE_METHOD: {
                auto *m = static_cast<amqp_connection_close_t *>(f.payload.method.decoded);
                die("RabbitMQ closed the connection: " + str_of(m->reply_text));
            }
            default:
                break;
            }
        } else if (f.frame_type == AMQP_FRAME_HEADER && skip_header) {
            skip_header = false;
            skip_body = f.payload.properties.body_size;
        } else if (f.frame_type == AMQP_FRAME_BODY && skip_body > 0) {
            skip_body -= std::min<uint64_t>(skip_body, f.payload.body_fragment.len);
        }
        amqp_maybe_release_buffers(mq.raw());
        return true;
    }
};

} // namespace

Row publish_baseline(Run &run, const Options &o, const Generator &g) {
    progress("B: plain librabbitmq-c publisher, " + std::to_string(g.count) + " messages, window " +
             std::to_string(o.window));
    Amqp mq(run.amqp_url, 30);
    mq.confirm_select();
    ConfirmTracker confirms(static_cast<size_t>(g.count));
    FrameReader reader{mq, confirms};
    Message m;
    // The relay's headers, outbox-partition-key included (`<type length>:<type>:<id>`), so B
    // publishes the same messages as the relay.
    amqp_table_entry_t headers[4];
    std::string partition_key;
    headers[0].key = amqp_cstring_bytes("outbox-aggregate-type");
    headers[0].value.kind = AMQP_FIELD_KIND_UTF8;
    headers[1].key = amqp_cstring_bytes("outbox-aggregate-id");
    headers[1].value.kind = AMQP_FIELD_KIND_UTF8;
    headers[2].key = amqp_cstring_bytes("outbox-seq");
    headers[2].value.kind = AMQP_FIELD_KIND_I64;
    headers[3].key = amqp_cstring_bytes("outbox-partition-key");
    headers[3].value.kind = AMQP_FIELD_KIND_UTF8;
    const std::string exchange = run.exchange;
    const auto window = static_cast<uint64_t>(o.window);
    const auto total = static_cast<uint64_t>(g.count);
    uint64_t published = 0;
    timeval zero{0, 0};

    const double cpu0 = cpu_seconds();
    const CpuTimes machine0 = cpu_times();
    const ServerCpu servers0 = server_cpu();
    const auto t0 = Clock::now();
    while (confirms.confirmed < total) {
        while (published < total && published - confirms.confirmed < window) {
            const long i = static_cast<long>(published);
            m.build(g, i);
            amqp_basic_properties_t p{};
            p._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG |
                       AMQP_BASIC_TYPE_FLAG | AMQP_BASIC_TIMESTAMP_FLAG | AMQP_BASIC_APP_ID_FLAG |
                       AMQP_BASIC_HEADERS_FLAG;
            p.content_type = amqp_cstring_bytes("application/json");
            p.delivery_mode = 2;
            p.message_id = bytes_of(m.id);
            p.type = amqp_cstring_bytes(g.event_type(i));
            p.timestamp = static_cast<uint64_t>(g.created_epoch_s(i));
            p.app_id = amqp_cstring_bytes("outbox");
            headers[0].value.value.bytes = amqp_cstring_bytes(Generator::aggregate_type());
            headers[1].value.value.bytes = bytes_of(m.aggregate_id);
            headers[2].value.value.i64 = g.seq_of(i);
            partition_key = std::to_string(std::strlen(Generator::aggregate_type())) + ":" +
                            Generator::aggregate_type() + ":" + m.aggregate_id;
            headers[3].value.value.bytes = bytes_of(partition_key);
            p.headers.num_entries = 4;
            p.headers.entries = headers;
            const int rc = amqp_basic_publish(mq.raw(), kChannel, bytes_of(exchange),
                                              amqp_cstring_bytes(g.routing_key(i)), 1, 0, &p, bytes_of(m.body));
            if (rc != AMQP_STATUS_OK) {
                die(std::string("RabbitMQ: publish: ") + amqp_error_string2(rc));
            }
            ++published;
            // Take in whatever confirms have already arrived, without blocking.
            zero = {0, 0};
            while (reader.read(&zero)) {
                zero = {0, 0};
            }
        }
        if (confirms.confirmed >= total) {
            break;
        }
        // Window full (or everything sent): block for the next frame.
        timeval tv{15, 0};
        if (!reader.read(&tv)) {
            die("B: no confirm within 15 s");
        }
        check_interrupt();
    }
    const double secs = seconds_between(t0, Clock::now());

    Row r;
    const CpuTimes machine1 = cpu_times();
    r.steal = steal_share(machine0, machine1);
    r.idle = idle_share(machine0, machine1);
    r.client_cpu_s = cpu_seconds() - cpu0;
    const ServerCpu servers1 = server_cpu();
    r.broker_cpu_s = servers1.broker_s - servers0.broker_s;
    r.pg_cpu_s = servers1.pg_s - servers0.pg_s;
    r.key = "B";
    r.what = "plain librabbitmq-c publisher (confirms, window " + std::to_string(o.window) + ")";
    r.events = g.count;
    r.seconds = secs;
    r.extra = Json::object().integer("nacked", static_cast<long long>(confirms.nacked));
    r.extra.integer("returned", static_cast<long long>(reader.returned));
    expect(run, confirms.nacked == 0 && reader.returned == 0, "B: no nacks and no returns");
    return r;
}

void scenario_baseline(Bench &b) {
    Run &run = b.run;
    b.pg.exec("CHECKPOINT");
    Row r = publish_baseline(run, b.o, b.base);
    expect_queue_holds(run, b.admin, b.base.count, "B");
    check_sample(run, b.admin, b.base, "B");
    progress("B: " + rate_str(r.rate()) + " (the baseline of D, P, X)");
    run.rows.push_back(r);
    b.admin.purge(run.queue);
    std::this_thread::sleep_for(std::chrono::seconds(1)); // let the broker settle after the purge
    b.phase("B");
}

} // namespace bench
