// A loopback TCP port bound and never listened on: connecting to it is refused at once. Stands for
// a server (or a cluster node) that is down.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace outbox_test {

struct ClosedPort {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    int port = 0; // 0 when no port could be bound

    ClosedPort() {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0) {
            socklen_t len = sizeof a;
            ::getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len);
            port = ntohs(a.sin_port);
        }
    }
    ~ClosedPort() {
        if (fd >= 0) {
            ::close(fd);
        }
    }
    ClosedPort(const ClosedPort &) = delete;
    ClosedPort &operator=(const ClosedPort &) = delete;

    // An AMQP URL of this port with the given password.
    [[nodiscard]] std::string amqp_url(const std::string &password) const {
        return "amqp://u:" + password + "@127.0.0.1:" + std::to_string(port) + "/%2f";
    }
};

} // namespace outbox_test
