// redact_url: the password never reaches a log line or an error message, whatever the URL looks like.
#include "amqp.hpp"

#include <gtest/gtest.h>

using outbox::amqp::redact_url;

TEST(AmqpRedactUrl, ReplacesThePassword) {
    EXPECT_EQ(redact_url("amqp://outbox:s3cret@127.0.0.1:56729/%2f"), "amqp://outbox:***@127.0.0.1:56729/%2f");
    EXPECT_EQ(redact_url("amqps://u:p@broker.example.com/vh"), "amqps://u:***@broker.example.com/vh");
}

TEST(AmqpRedactUrl, LeavesUrlsWithoutPasswordAlone) {
    EXPECT_EQ(redact_url("amqp://127.0.0.1:5672/%2f"), "amqp://127.0.0.1:5672/%2f");
    EXPECT_EQ(redact_url("amqp://guest@localhost"), "amqp://guest@localhost");
    EXPECT_EQ(redact_url("amqp://localhost"), "amqp://localhost");
    EXPECT_EQ(redact_url(""), "");
}

TEST(AmqpRedactUrl, HandlesEncodedAndAwkwardPasswords) {
    EXPECT_EQ(redact_url("amqp://u:p%40ss%2Fw@h:1/v"), "amqp://u:***@h:1/v");
    EXPECT_EQ(redact_url("amqp://u:a:b:c@h/v"), "amqp://u:***@h/v");
    EXPECT_EQ(redact_url("amqp://u:@h/v"), "amqp://u:***@h/v");
    // Unencoded '@', '/', '?', '#' in a password make the URL invalid, but must still not leak.
    for (const char *url : {"amqp://u:pa@ss@h/v", "amqp://u:pa/ss@h/v", "amqp://u:pa?ss@h/v", "amqp://u:pa#ss@h/v"}) {
        const std::string r = redact_url(url);
        EXPECT_EQ(r.find("pa"), std::string::npos) << url << " -> " << r;
        EXPECT_EQ(r.find("ss@"), std::string::npos) << url << " -> " << r;
        EXPECT_NE(r.find("***"), std::string::npos) << url << " -> " << r;
    }
}

TEST(AmqpRedactUrl, KeepsAnAtSignInTheVhost) {
    EXPECT_EQ(redact_url("amqp://u:p@h/v@x"), "amqp://u:***@h/v@x");
}

TEST(AmqpRedactUrl, WorksWithoutScheme) {
    EXPECT_EQ(redact_url("u:secret@host:5672/v"), "u:***@host:5672/v");
}
