// outbox::amqp::Connection against a real RabbitMQ (OUTBOX_AMQP_URL). A broker that cannot be reached
// makes these tests fail, never skip.
//
// Some tests put a small TCP relay of their own between the client and the broker, to play a broker
// that stops reading (resource alarm) or goes silent (SIGSTOP, dead peer) without touching the shared one.
#include "amqp.hpp"
#include "closed_port.hpp"
#include "error.hpp"
#include "test_env.hpp"
#include "waits.hpp"

#include <amqp.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <set>
#include <thread>

namespace amqp = outbox::amqp;
using outbox::Errc;
using outbox::Error;
using Clock = std::chrono::steady_clock;

namespace {

using outbox_test::ms_since;

amqp::Options opts(const std::string &url = outbox_test::amqp_url()) {
    amqp::Options o;
    o.url = url;
    o.connection_name = "outbox amqp_test";
    o.connect_timeout_ms = 3000;
    o.io_timeout_ms = 5000;
    return o;
}

std::string unique(const std::string &what) {
    static int n = 0;
    return "outbox-it-" + what + "-" + std::to_string(::getpid()) + "-" + std::to_string(++n) + "-" +
           std::to_string(std::chrono::system_clock::now().time_since_epoch().count() % 1000000007);
}

std::string pct(const std::string &s) {
    std::string out;
    for (unsigned char c : s) {
        if (std::isalnum(c) != 0 || c == '-' || c == '_' || c == '.') {
            out += static_cast<char>(c);
        } else {
            char buf[4];
            std::snprintf(buf, sizeof buf, "%%%02X", c);
            out += buf;
        }
    }
    return out;
}

struct UrlParts {
    std::string user, password, host, vhost;
    int port = 0;
};

UrlParts parts_of(const std::string &url) {
    std::string copy = url;
    amqp_connection_info info{};
    amqp_default_connection_info(&info);
    if (amqp_parse_url(copy.data(), &info) != AMQP_STATUS_OK) {
        ADD_FAILURE() << "OUTBOX_AMQP_URL does not parse: " << amqp::redact_url(url);
        return {};
    }
    return {info.user, info.password, info.host, info.vhost, info.port};
}

std::string url_of(const UrlParts &p) {
    return "amqp://" + pct(p.user) + ":" + pct(p.password) + "@" + p.host + ":" + std::to_string(p.port) + "/" +
           pct(p.vhost);
}

// Collects confirms until every tag up to `last` has an answer. Returns false on timeout.
struct Confirms {
    std::set<uint64_t> acked, nacked;
    std::vector<amqp::Returned> returned;
    int ack_events = 0, multiple_acks = 0;
    uint64_t settled_up_to = 0; // every tag <= this is acked or nacked

    void settle(uint64_t tag, bool multiple, std::set<uint64_t> &into) {
        const uint64_t from = multiple ? settled_up_to + 1 : tag;
        for (uint64_t t = from; t <= tag; ++t) {
            if (acked.count(t) == 0 && nacked.count(t) == 0) {
                into.insert(t);
            } else if (!multiple) {
                ADD_FAILURE() << "tag " << t << " confirmed twice";
            }
        }
        while (acked.count(settled_up_to + 1) != 0 || nacked.count(settled_up_to + 1) != 0) {
            ++settled_up_to;
        }
    }

    void on(const amqp::Event &ev) {
        if (const auto *a = std::get_if<amqp::Ack>(&ev)) {
            ++ack_events;
            multiple_acks += a->multiple ? 1 : 0;
            settle(a->tag, a->multiple, acked);
        } else if (const auto *n = std::get_if<amqp::Nack>(&ev)) {
            settle(n->tag, n->multiple, nacked);
        } else if (const auto *r = std::get_if<amqp::Returned>(&ev)) {
            returned.push_back(*r);
        }
    }

    bool drain(amqp::Connection &c, uint64_t last, int timeout_ms = 10000) {
        const auto t0 = Clock::now();
        while (settled_up_to < last) {
            if (ms_since(t0) > timeout_ms) {
                return false;
            }
            if (auto ev = c.wait(200)) {
                on(*ev);
            }
        }
        return true;
    }
};

// A TCP relay between the client and the real broker, able to stop reading from the client (a broker
// under a memory alarm) or to stop forwarding altogether (a stopped broker).
class Relay {
  public:
    explicit Relay(const UrlParts &broker) : broker_(broker) {
        listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
        // A small receive buffer makes the client's send buffer fill after a few megabytes.
        int small = 64 * 1024;
        ::setsockopt(listen_fd_, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = 0;
        if (::bind(listen_fd_, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0 || ::listen(listen_fd_, 1) != 0) {
            ADD_FAILURE() << "relay: cannot listen";
        }
        socklen_t len = sizeof a;
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr *>(&a), &len);
        port_ = ntohs(a.sin_port);
        thread_ = std::thread([this] { run(); });
    }
    Relay(const Relay &) = delete;
    Relay &operator=(const Relay &) = delete;
    ~Relay() {
        stop_ = true;
        thread_.join();
        ::close(listen_fd_);
    }

    std::string url() const {
        UrlParts p = broker_;
        p.host = "127.0.0.1";
        p.port = port_;
        return url_of(p);
    }
    void stop_reading_client() { upstream_paused_ = true; }
    void freeze() { upstream_paused_ = downstream_paused_ = true; }

  private:
    static int connect_to(const std::string &host, int port) {
        addrinfo hints{};
        hints.ai_socktype = SOCK_STREAM;
        addrinfo *res = nullptr;
        if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) {
            return -1;
        }
        int fd = -1;
        for (addrinfo *r = res; r != nullptr && fd < 0; r = r->ai_next) {
            fd = ::socket(r->ai_family, r->ai_socktype, r->ai_protocol);
            if (fd >= 0 && ::connect(fd, r->ai_addr, r->ai_addrlen) != 0) {
                ::close(fd);
                fd = -1;
            }
        }
        ::freeaddrinfo(res);
        return fd;
    }

    static bool pump(int from, int to) {
        char buf[16384];
        const ssize_t n = ::recv(from, buf, sizeof buf, 0);
        if (n <= 0) {
            return false;
        }
        for (ssize_t off = 0; off < n;) {
            const ssize_t w = ::send(to, buf + off, static_cast<size_t>(n - off), MSG_NOSIGNAL);
            if (w <= 0) {
                return false;
            }
            off += w;
        }
        return true;
    }

    void run() {
        pollfd lp{listen_fd_, POLLIN, 0};
        while (!stop_ && ::poll(&lp, 1, 50) == 0) {
        }
        if (stop_) {
            return;
        }
        const int client = ::accept(listen_fd_, nullptr, nullptr);
        const int broker = connect_to(broker_.host, broker_.port);
        bool open = client >= 0 && broker >= 0;
        while (!stop_ && open) {
            pollfd p[2] = {{client, static_cast<short>(upstream_paused_ ? 0 : POLLIN), 0},
                           {broker, static_cast<short>(downstream_paused_ ? 0 : POLLIN), 0}};
            if (::poll(p, 2, 50) <= 0) {
                continue;
            }
            if ((p[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0 && !upstream_paused_) {
                open = pump(client, broker);
            }
            if (open && (p[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0 && !downstream_paused_) {
                open = pump(broker, client);
            }
        }
        if (client >= 0) {
            ::close(client);
        }
        if (broker >= 0) {
            ::close(broker);
        }
    }

    UrlParts broker_;
    int listen_fd_ = -1;
    int port_ = 0;
    std::atomic<bool> stop_{false}, upstream_paused_{false}, downstream_paused_{false};
    std::thread thread_;
};

// Deletes what a test declared, on a connection of its own (the test's may be dead by then).
struct Cleanup {
    std::vector<std::string> queues, exchanges;
    ~Cleanup() {
        try {
            amqp::Connection c(opts());
            for (const auto &q : queues) {
                c.delete_queue(q);
            }
            for (const auto &e : exchanges) {
                c.delete_exchange(e);
            }
        } catch (const std::exception &e) {
            ADD_FAILURE() << "cleanup failed: " << e.what();
        }
    }
};

template <class T> T expect_event(amqp::Connection &c, int timeout_ms = 5000) {
    const auto t0 = Clock::now();
    while (ms_since(t0) < timeout_ms) {
        if (auto ev = c.wait(100)) {
            if (auto *t = std::get_if<T>(&*ev)) {
                return std::move(*t);
            }
            ADD_FAILURE() << "unexpected event index " << ev->index();
            return T{};
        }
    }
    ADD_FAILURE() << "no event within " << timeout_ms << " ms";
    return T{};
}

} // namespace

TEST(AmqpConnection, ConnectsAndReportsItsState) {
    amqp::Connection c(opts());
    EXPECT_TRUE(c.alive());
    EXPECT_GE(c.fd(), 0);
    EXPECT_FALSE(c.blocked());
    EXPECT_FALSE(c.confirm_mode());
    EXPECT_EQ(c.redacted_url(), amqp::redact_url(outbox_test::amqp_url()));
    EXPECT_EQ(c.wait(0), std::nullopt);
}

TEST(AmqpConnection, WrongPasswordIsAConnectionErrorThatDoesNotShowThePassword) {
    UrlParts p = parts_of(outbox_test::amqp_url());
    p.password = "not-the-password-Zq8";
    try {
        amqp::Connection c(opts(url_of(p)));
        FAIL() << "login with a wrong password succeeded";
    } catch (const Error &e) {
        EXPECT_EQ(e.code(), Errc::connection) << e.what();
        const std::string m = e.what();
        EXPECT_NE(m.find("ACCESS_REFUSED"), std::string::npos) << m;
        EXPECT_EQ(m.find("not-the-password-Zq8"), std::string::npos) << m;
        EXPECT_NE(m.find(p.user + ":***@"), std::string::npos) << m;
    }
}

TEST(AmqpConnection, UnknownVhostIsAConnectionError) {
    UrlParts p = parts_of(outbox_test::amqp_url());
    p.vhost = unique("no-such-vhost");
    try {
        amqp::Connection c(opts(url_of(p)));
        FAIL() << "login to an unknown vhost succeeded";
    } catch (const Error &e) {
        EXPECT_EQ(e.code(), Errc::connection) << e.what();
        EXPECT_NE(std::string(e.what()).find("NOT_ALLOWED"), std::string::npos) << e.what();
        EXPECT_EQ(std::string(e.what()).find(":" + pct(p.password) + "@"), std::string::npos) << e.what();
    }
}

TEST(AmqpConnection, NothingListeningIsAConnectionError) {
    const outbox_test::ClosedPort closed;
    ASSERT_GT(closed.port, 0);
    const auto t0 = Clock::now();
    try {
        amqp::Connection c(opts(closed.amqp_url("secret-pw")));
        ADD_FAILURE() << "connected to a closed port";
    } catch (const Error &e) {
        EXPECT_EQ(e.code(), Errc::connection) << e.what();
        EXPECT_EQ(std::string(e.what()).find("secret-pw"), std::string::npos) << e.what();
    }
    EXPECT_LT(ms_since(t0), 3000);
}

TEST(AmqpConnection, MalformedUrlIsAnInvalidArgumentThatDoesNotShowThePassword) {
    for (const char *url : {"http://u:secret-pw@host/", "amqp://u:secret-pw@host:notaport/v", ""}) {
        try {
            amqp::Connection c(opts(url));
            ADD_FAILURE() << "accepted " << url;
        } catch (const Error &e) {
            EXPECT_EQ(e.code(), Errc::invalid_argument) << e.what();
            EXPECT_EQ(std::string(e.what()).find("secret-pw"), std::string::npos) << e.what();
        }
    }
}

TEST(AmqpConnection, TlsToAPlainPortFailsCleanlyAndInTime) {
    // No TLS listener in the test broker: this exercises the TLS set-up and its failure path.
    UrlParts p = parts_of(outbox_test::amqp_url());
    const std::string url = "amqps://" + pct(p.user) + ":" + pct(p.password) + "@" + p.host + ":" +
                            std::to_string(p.port) + "/" + pct(p.vhost);
    auto o = opts(url);
    o.tls.verify_peer = false;
    o.tls.verify_hostname = false;
    const auto t0 = Clock::now();
    try {
        amqp::Connection c(o);
        ADD_FAILURE() << "TLS handshake with a plain AMQP port succeeded";
    } catch (const Error &e) {
        EXPECT_EQ(e.code(), Errc::connection) << e.what();
        EXPECT_NE(std::string(e.what()).find("TLS"), std::string::npos) << e.what();
        EXPECT_EQ(std::string(e.what()).find(":" + pct(p.password) + "@"), std::string::npos) << e.what();
    }
    EXPECT_LT(ms_since(t0), o.connect_timeout_ms + 1000);
}

TEST(AmqpConnection, MissingTlsFilesAreInvalidArguments) {
    auto o = opts();
    o.tls.enabled = true;
    o.tls.ca_file = "/nonexistent/ca.pem";
    try {
        amqp::Connection c(o);
        ADD_FAILURE() << "accepted a missing CA file";
    } catch (const Error &e) {
        EXPECT_EQ(e.code(), Errc::invalid_argument) << e.what();
    }
    o.tls.ca_file.clear();
    o.tls.cert_file = "/nonexistent/cert.pem"; // without key_file
    try {
        amqp::Connection c(o);
        ADD_FAILURE() << "accepted a certificate without a key";
    } catch (const Error &e) {
        EXPECT_EQ(e.code(), Errc::invalid_argument) << e.what();
    }
}

TEST(AmqpConnection, DeclaresBindsPublishesAndConsumesWithPropertiesIntact) {
    Cleanup cleanup;
    amqp::Connection c(opts());
    const std::string ex = unique("ex"), q = unique("q");
    cleanup.exchanges.push_back(ex);
    cleanup.queues.push_back(q);
    c.declare_exchange(ex, "topic", true, false);
    c.declare_exchange(ex, "topic", true, false); // idempotent
    EXPECT_EQ(c.declare_queue(q, true, false, false, {}), q);
    c.bind_queue(q, ex, "product.*");

    amqp::Properties props;
    props.content_type = "application/json";
    props.message_id = "0b6f6f2e-6a0e-4d8e-9a8f-3c1f1c2d4e5f";
    props.type = "ProductCreated";
    props.correlation_id = "corr-1";
    props.app_id = "outbox-test";
    props.delivery_mode = 2;
    props.timestamp = 1700000000;
    props.headers = {{"aggregate_type", std::string("PRD")},
                     {"aggregate_id", std::string("42")},
                     {"seq", int64_t{9007199254740993}},
                     {"negative", int64_t{-5}},
                     {"flag", true},
                     {"off", false},
                     {"empty", std::string()},
                     {"utf8", std::string("caf\xc3\xa9")}};
    const std::string body = R"({"OUTBOX_ID":"0b6f6f2e","PAYLOAD":{"a":1}})" + std::string(1, '\0') + "tail";
    EXPECT_EQ(c.publish(ex, "product.post", false, props, body), 0U); // not in confirm mode

    c.qos(10);
    const std::string tag = c.consume(q);
    EXPECT_FALSE(tag.empty());
    const auto m = expect_event<amqp::Message>(c);
    EXPECT_EQ(m.consumer_tag, tag);
    EXPECT_EQ(m.exchange, ex);
    EXPECT_EQ(m.routing_key, "product.post");
    EXPECT_FALSE(m.redelivered);
    EXPECT_GT(m.delivery_tag, 0U);
    EXPECT_EQ(m.body, body);
    EXPECT_EQ(m.props.content_type, props.content_type);
    EXPECT_EQ(m.props.message_id, props.message_id);
    EXPECT_EQ(m.props.type, props.type);
    EXPECT_EQ(m.props.correlation_id, props.correlation_id);
    EXPECT_EQ(m.props.app_id, props.app_id);
    EXPECT_EQ(m.props.delivery_mode, 2);
    EXPECT_EQ(m.props.timestamp, props.timestamp);
    EXPECT_EQ(m.props.headers, props.headers);
    c.ack(m.delivery_tag);

    // Acked: nothing comes back, and the queue is empty.
    EXPECT_EQ(c.wait(300), std::nullopt);
    EXPECT_EQ(c.purge_queue(q), 0U);
}

TEST(AmqpConnection, EmptyBodyAndNoPropertiesRoundTrip) {
    amqp::Connection c(opts());
    const std::string q = c.declare_queue("", false, true, true, {});
    EXPECT_EQ(q.rfind("amq.gen-", 0), 0U) << q;
    c.publish("", q, false, {}, "");
    c.consume(q, true);
    const auto m = expect_event<amqp::Message>(c);
    EXPECT_EQ(m.body, "");
    EXPECT_EQ(m.props.message_id, "");
    EXPECT_EQ(m.props.delivery_mode, 0);
    EXPECT_TRUE(m.props.headers.empty());
}

TEST(AmqpConnection, LargeBodySpanningManyFramesRoundTrips) {
    amqp::Connection c(opts());
    const std::string q = c.declare_queue("", false, true, true, {});
    std::string body(size_t{3} * 1024 * 1024 + 17, '\0');
    for (size_t i = 0; i < body.size(); ++i) {
        body[i] = static_cast<char>(i * 7 + i / 251);
    }
    c.publish("", q, false, {}, body);
    c.consume(q, true);
    const auto m = expect_event<amqp::Message>(c);
    EXPECT_EQ(m.body.size(), body.size());
    EXPECT_TRUE(m.body == body);
}

TEST(AmqpConnection, RejectAndNackRequeueRedeliver) {
    amqp::Connection c(opts());
    const std::string q = c.declare_queue("", false, true, true, {});
    amqp::Properties p;
    p.message_id = "one";
    c.publish("", q, false, p, "1");
    p.message_id = "two";
    c.publish("", q, false, p, "2");
    c.qos(2);
    c.consume(q);
    const auto m1 = expect_event<amqp::Message>(c);
    const auto m2 = expect_event<amqp::Message>(c);
    EXPECT_EQ(m1.props.message_id, "one");
    EXPECT_EQ(m2.props.message_id, "two");
    c.reject(m1.delivery_tag, false);     // dropped
    c.nack(m2.delivery_tag, false, true); // back to the queue, and so to us
    const auto again = expect_event<amqp::Message>(c);
    EXPECT_EQ(again.props.message_id, "two");
    EXPECT_TRUE(again.redelivered);
    c.ack(again.delivery_tag);
    EXPECT_EQ(c.wait(300), std::nullopt);
}

TEST(AmqpConnection, ConfirmsAThousandPipelinedPublishes) {
    amqp::Connection c(opts());
    const std::string q = c.declare_queue("", false, true, true, {});
    c.confirm_select();
    EXPECT_TRUE(c.confirm_mode());
    EXPECT_EQ(c.next_publish_tag(), 1U);

    constexpr uint64_t kTotal = 1000;
    constexpr uint64_t kWindow = 200;
    Confirms confirms;
    amqp::Properties props;
    props.delivery_mode = 2;
    // RabbitMQ coalesces confirms of a pipelined burst (multiple=true) when they pile up; on a
    // busy machine it may keep up and ack one by one, so bursts are repeated (a few at most)
    // until one coalesced, each fully accounted for.
    uint64_t sent = 0;
    for (int round = 1; round <= 5 && confirms.multiple_acks == 0; ++round) {
        const auto t0 = Clock::now();
        for (uint64_t i = sent + 1; i <= sent + kTotal; ++i) {
            while (i - confirms.settled_up_to > kWindow) {
                ASSERT_LT(ms_since(t0), 30000) << "confirms stalled at " << confirms.settled_up_to;
                if (auto ev = c.wait(1000)) {
                    confirms.on(*ev);
                }
            }
            props.message_id = "m-" + std::to_string(i);
            ASSERT_EQ(c.publish("", q, true, props, "payload " + std::to_string(i)), i);
        }
        sent += kTotal;
        EXPECT_EQ(c.next_publish_tag(), sent + 1);
        ASSERT_TRUE(confirms.drain(c, sent));
        EXPECT_EQ(confirms.acked.size(), sent);
        EXPECT_TRUE(confirms.nacked.empty());
        EXPECT_TRUE(confirms.returned.empty());
        EXPECT_EQ(*confirms.acked.begin(), 1U);
        EXPECT_EQ(*confirms.acked.rbegin(), sent);
        std::printf("[ info ] %llu publishes confirmed by %d basic.ack frames, %d of them multiple=true\n",
                    static_cast<unsigned long long>(sent), confirms.ack_events, confirms.multiple_acks);
    }
    // A client that ignored `multiple` would have missed tags above and not settled.
    EXPECT_GT(confirms.multiple_acks, 0);
    EXPECT_EQ(c.purge_queue(q), sent);
}

TEST(AmqpConnection, UnroutableMandatoryPublishIsReturnedBeforeItsAck) {
    Cleanup cleanup;
    amqp::Connection c(opts());
    const std::string ex = unique("nobody-bound");
    cleanup.exchanges.push_back(ex);
    c.declare_exchange(ex, "fanout", false, false);
    c.confirm_select();
    amqp::Properties p;
    p.message_id = "returned-1";
    p.content_type = "application/json";
    p.headers = {{"seq", int64_t{7}}};
    const uint64_t tag = c.publish(ex, "product.post", true, p, R"({"x":1})");
    EXPECT_EQ(tag, 1U);

    const auto r = expect_event<amqp::Returned>(c);
    EXPECT_EQ(r.reply_code, 312);
    EXPECT_EQ(r.reply_text, "NO_ROUTE");
    EXPECT_EQ(r.exchange, ex);
    EXPECT_EQ(r.routing_key, "product.post");
    EXPECT_EQ(r.props.message_id, "returned-1");
    EXPECT_EQ(r.props.content_type, "application/json");
    EXPECT_EQ(r.props.headers, p.headers);
    EXPECT_EQ(r.body, R"({"x":1})");
    const auto a = expect_event<amqp::Ack>(c);
    EXPECT_EQ(a.tag, tag);
}

TEST(AmqpConnection, RpcKeepsConfirmsAndReturnsThatArriveMeanwhile) {
    Cleanup cleanup;
    amqp::Connection c(opts());
    const std::string ex = unique("nobody-bound");
    cleanup.exchanges.push_back(ex);
    c.declare_exchange(ex, "fanout", false, false);
    c.confirm_select();
    amqp::Properties p;
    p.message_id = "during-rpc";
    const uint64_t t1 = c.publish(ex, "", true, p, "a");
    const uint64_t t2 = c.publish("", "no-such-queue-either", true, p, "b");
    // The return and the acks arrive while librabbitmq waits for these replies; they must not be lost.
    const std::string q = c.declare_queue("", false, true, true, {});
    c.bind_queue(q, "amq.fanout", "");
    c.qos(5);
    // librabbitmq read them while waiting for the replies above and queued them; nothing is lost.
    EXPECT_TRUE(c.has_buffered_input());
    Confirms confirms;
    ASSERT_TRUE(confirms.drain(c, t2));
    EXPECT_EQ(confirms.acked, (std::set<uint64_t>{t1, t2}));
    ASSERT_EQ(confirms.returned.size(), 2U);
    EXPECT_EQ(confirms.returned[0].props.message_id, "during-rpc");
    EXPECT_EQ(confirms.returned[0].body, "a");
    EXPECT_EQ(confirms.returned[1].body, "b");
}

TEST(AmqpConnection, RejectPublishOverflowIsNacked) {
    Cleanup cleanup;
    amqp::Connection c(opts());
    const std::string q = unique("max1");
    cleanup.queues.push_back(q);
    c.declare_queue(q, false, false, false,
                    {{"x-max-length", int64_t{1}}, {"x-overflow", std::string("reject-publish")}});
    c.confirm_select();
    for (int i = 0; i < 3; ++i) {
        c.publish("", q, true, {}, "m" + std::to_string(i));
    }
    Confirms confirms;
    ASSERT_TRUE(confirms.drain(c, 3));
    EXPECT_GE(confirms.nacked.size(), 1U);
    EXPECT_EQ(confirms.acked.size() + confirms.nacked.size(), 3U);
    EXPECT_EQ(confirms.acked.count(1), 1U); // the first fits
}

TEST(AmqpConnection, PublishToAMissingExchangeIsABrokerErrorAndKillsTheConnection) {
    amqp::Connection c(opts());
    c.confirm_select();
    const std::string ex = unique("missing");
    c.publish(ex, "rk", true, {}, "x");
    try {
        while (c.wait(5000)) {
        }
        FAIL() << "no channel error";
    } catch (const Error &e) {
        EXPECT_EQ(e.code(), Errc::broker) << e.what();
        EXPECT_NE(std::string(e.what()).find("404 NOT_FOUND"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(ex), std::string::npos) << e.what();
    }
    EXPECT_FALSE(c.alive());
    try {
        c.publish("", "q", false, {}, "x");
        FAIL() << "a dead connection published";
    } catch (const Error &e) {
        EXPECT_EQ(e.code(), Errc::connection) << e.what();
        EXPECT_NE(std::string(e.what()).find("NOT_FOUND"), std::string::npos) << e.what();
    }
} // destruction after a channel error: a polite connection.close, no crash, no hang

TEST(AmqpConnection, InequivalentRedeclarationIsABrokerError) {
    Cleanup cleanup;
    const std::string q = unique("durable");
    cleanup.queues.push_back(q);
    amqp::Connection c(opts());
    c.declare_queue(q, true, false, false, {});
    try {
        c.declare_queue(q, false, false, false, {});
        FAIL() << "inequivalent redeclaration accepted";
    } catch (const Error &e) {
        EXPECT_EQ(e.code(), Errc::broker) << e.what();
        EXPECT_NE(std::string(e.what()).find("406 PRECONDITION_FAILED"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(c.alive());
}

TEST(AmqpConnection, IdleWaitReturnsNothingInTime) {
    amqp::Connection c(opts());
    auto t0 = Clock::now();
    EXPECT_EQ(c.wait(200), std::nullopt);
    const auto took = ms_since(t0);
    EXPECT_GE(took, 190);
    EXPECT_LE(took, 400);
    t0 = Clock::now();
    EXPECT_EQ(c.wait(0), std::nullopt);
    EXPECT_LT(ms_since(t0), 50);
}

TEST(AmqpConnection, WaitingKeepsAnIdleConnectionAliveAcrossHeartbeats) {
    auto o = opts();
    o.heartbeat_s = 1;
    amqp::Connection c(o);
    const auto t0 = Clock::now();
    while (ms_since(t0) < 3500) {
        EXPECT_EQ(c.wait(100), std::nullopt);
    }
    // Still alive at both ends: an RPC and a confirmed publish go through.
    const std::string q = c.declare_queue("", false, true, true, {});
    c.confirm_select();
    c.publish("", q, false, {}, "still here");
    EXPECT_EQ(expect_event<amqp::Ack>(c).tag, 1U);
}

TEST(AmqpConnection, AClientThatStopsWaitingIsDroppedByTheBroker) {
    // The counterpart of the test above: without wait() no heartbeats go out, and the broker closes
    // the connection after two missed ones. Proves the heartbeat test measures something.
    auto o = opts();
    o.heartbeat_s = 1;
    amqp::Connection c(o);
    std::this_thread::sleep_for(std::chrono::milliseconds(4000));
    try {
        for (int i = 0; i < 30; ++i) {
            (void)c.wait(100);
        }
        FAIL() << "the broker kept a silent client";
    } catch (const Error &e) {
        EXPECT_EQ(e.code(), Errc::connection) << e.what();
    }
    EXPECT_FALSE(c.alive());
}

TEST(AmqpConnection, ASilentBrokerIsDetectedByHeartbeat) {
    Relay relay(parts_of(outbox_test::amqp_url()));
    auto o = opts(relay.url());
    o.heartbeat_s = 1;
    amqp::Connection c(o);
    EXPECT_EQ(c.wait(100), std::nullopt);
    relay.freeze(); // like SIGSTOP on the broker
    const auto t0 = Clock::now();
    try {
        while (ms_since(t0) < 10000) {
            (void)c.wait(100);
        }
        FAIL() << "a frozen broker went unnoticed";
    } catch (const Error &e) {
        EXPECT_EQ(e.code(), Errc::connection) << e.what();
        EXPECT_NE(std::string(e.what()).find("heartbeat"), std::string::npos) << e.what();
    }
    EXPECT_LT(ms_since(t0), 4000);
}

TEST(AmqpConnection, APublishAfterTheBrokerWentSilentFailsAtOnce) {
    // librabbitmq 0.11, asked to publish after its heartbeat deadline passed, polls for the broker's
    // next frame with no time limit; only the watchdog ended that, io_timeout_ms later. A relay
    // between steps publishes without a wait() first, so a paused broker went unnoticed that long.
    Relay relay(parts_of(outbox_test::amqp_url()));
    auto o = opts(relay.url());
    o.heartbeat_s = 1;
    o.io_timeout_ms = 8000;
    amqp::Connection c(o);
    EXPECT_EQ(c.wait(100), std::nullopt);
    relay.freeze(); // like SIGSTOP on the broker
    // Past 2 x heartbeat, without a wait() that would notice.
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    const auto t0 = Clock::now();
    try {
        c.publish("", "nowhere", false, {}, "x");
        FAIL() << "a publish to a broker silent for 2.5 heartbeats succeeded";
    } catch (const Error &e) {
        EXPECT_EQ(e.code(), Errc::connection) << e.what();
        EXPECT_NE(std::string(e.what()).find("heartbeat"), std::string::npos) << e.what();
    }
    EXPECT_LT(ms_since(t0), 1000);
    EXPECT_FALSE(c.alive());
}

TEST(AmqpConnection, PublishIntoABrokerThatStoppedReadingIsBounded) {
    // Heartbeats off: librabbitmq 0.11 would then wait for the socket forever inside
    // amqp_basic_publish; the watchdog must cut it at io_timeout_ms.
    Relay relay(parts_of(outbox_test::amqp_url()));
    auto o = opts(relay.url());
    o.heartbeat_s = 0;
    o.io_timeout_ms = 1000;
    amqp::Connection c(o);
    const std::string q = c.declare_queue("", false, true, true, {});
    // A long wait() that returns early (here after 1.6 s, once the watchdog went back to sleep towards
    // the wait's far deadline) must not stretch the bound of the publishes that follow.
    c.consume(q, true);
    std::thread late_sender([q] {
        std::this_thread::sleep_for(std::chrono::milliseconds(1600));
        amqp::Connection other(opts());
        other.publish("", q, false, {}, "wake up");
    });
    const auto t_wait = Clock::now();
    const bool woke = c.wait(10000).has_value();
    late_sender.join();
    ASSERT_TRUE(woke);
    ASSERT_LT(ms_since(t_wait), 5000);
    relay.stop_reading_client(); // like a broker under a memory alarm
    const std::string body(size_t{1024} * 1024, 'x');
    long long slowest = 0;
    try {
        for (int i = 0; i < 200; ++i) {
            const auto t0 = Clock::now();
            try {
                c.publish("", q, false, {}, body);
            } catch (...) {
                slowest = std::max(slowest, ms_since(t0));
                throw;
            }
            slowest = std::max(slowest, ms_since(t0));
        }
        FAIL() << "200 MB went into a broker that reads nothing";
    } catch (const Error &e) {
        EXPECT_EQ(e.code(), Errc::timeout) << e.what();
    }
    EXPECT_LT(slowest, 3000);
    EXPECT_FALSE(c.alive());
} // and the destructor must not hang either

TEST(AmqpConnection, BrokerCancelsTheConsumerOfADeletedQueue) {
    // basic.cancel only reaches clients that announced consumer_cancel_notify at login, so this also
    // checks that the client-properties capabilities table got through.
    amqp::Connection c(opts());
    const std::string q = unique("cancel");
    c.declare_queue(q, false, false, false, {});
    const std::string tag = c.consume(q, true);
    {
        amqp::Connection other(opts());
        other.delete_queue(q);
    }
    const auto cancelled = expect_event<amqp::Cancelled>(c);
    EXPECT_EQ(cancelled.consumer_tag, tag);
    EXPECT_TRUE(c.alive());
}

TEST(AmqpConnection, MovesOwnership) {
    amqp::Connection a(opts());
    amqp::Connection b(std::move(a));
    EXPECT_TRUE(b.alive());
    EXPECT_FALSE(a.alive()); // NOLINT(bugprone-use-after-move): the moved-from state is under test
    EXPECT_EQ(a.fd(), -1);   // NOLINT(bugprone-use-after-move)
    try {
        a.wait(0); // NOLINT(bugprone-use-after-move)
        FAIL() << "a moved-from connection waited";
    } catch (const Error &e) {
        EXPECT_EQ(e.code(), Errc::connection);
    }
    amqp::Connection d(opts());
    d = std::move(b);
    EXPECT_TRUE(d.alive());
    EXPECT_EQ(d.wait(0), std::nullopt);
}

TEST(AmqpConnection, AListOfAddressesReachesTheFirstNodeThatAnswers) {
    outbox_test::ClosedPort dead;
    ASSERT_GT(dead.port, 0);
    const UrlParts p = parts_of(outbox_test::amqp_url());
    amqp::Connection c(opts(dead.amqp_url("pw-of-a-dead-node") + " , " + outbox_test::amqp_url()));
    EXPECT_TRUE(c.alive());
    EXPECT_EQ(c.address_index(), 1U);
    EXPECT_EQ(c.node(), p.host + ":" + std::to_string(p.port));
    EXPECT_EQ(c.redacted_url(), amqp::redact_url(outbox_test::amqp_url()));

    // Told to start at the second address, it goes there first; past the end it wraps around.
    auto o = opts(outbox_test::amqp_url() + "," + dead.amqp_url("x"));
    o.first = 2;
    amqp::Connection wrapped(o);
    EXPECT_EQ(wrapped.address_index(), 0U);
}

TEST(AmqpConnection, NoNodeOfAListReachableIsAConnectionErrorNamingEachWithoutPasswords) {
    outbox_test::ClosedPort a, b;
    ASSERT_GT(a.port, 0);
    ASSERT_GT(b.port, 0);
    try {
        amqp::Connection c(opts(a.amqp_url("first-secret-pw") + "," + b.amqp_url("second-secret-pw")));
        ADD_FAILURE() << "connected to closed ports";
    } catch (const Error &e) {
        const std::string m = e.what();
        EXPECT_EQ(e.code(), Errc::connection) << m;
        EXPECT_NE(m.find("no RabbitMQ node of the 2 addresses"), std::string::npos) << m;
        EXPECT_NE(m.find(":" + std::to_string(a.port)), std::string::npos) << m;
        EXPECT_NE(m.find(":" + std::to_string(b.port)), std::string::npos) << m;
        EXPECT_EQ(m.find("first-secret-pw"), std::string::npos) << m;
        EXPECT_EQ(m.find("second-secret-pw"), std::string::npos) << m;
    }
}

TEST(AmqpConnection, AMalformedAddressInAListIsRefusedEvenWhenAnotherWorks) {
    try {
        amqp::Connection c(opts(outbox_test::amqp_url() + ",amqp://u:secret-pw@host:notaport/v"));
        ADD_FAILURE() << "accepted a list with a malformed address";
    } catch (const Error &e) {
        EXPECT_EQ(e.code(), Errc::invalid_argument) << e.what();
        EXPECT_EQ(std::string(e.what()).find("secret-pw"), std::string::npos) << e.what();
    }
}
