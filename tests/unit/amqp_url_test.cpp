// redact_url: the password never reaches a log line or an error message, whatever the URL looks like.
#include "amqp.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using outbox::amqp::redact_url;

TEST(AmqpRedactUrl, ReplacesThePassword) {
    EXPECT_EQ(redact_url("amqp://outbox:s3cret@127.0.0.1:56729/%2f"), "amqp://outbox:***@127.0.0.1:56729/%2f");
    EXPECT_EQ(redact_url("amqps://u:p@broker.example.com/vh"), "amqps://u:***@broker.example.com/vh");
}

TEST(AmqpRedactUrl, LeavesUrlsWithoutPasswordAlone) {
    EXPECT_EQ(redact_url("amqp://127.0.0.1:5672/%2f"), "amqp://127.0.0.1:5672/%2f");
    EXPECT_EQ(redact_url("amqp://guest@localhost"), "amqp://guest@localhost");
    EXPECT_EQ(redact_url("amqp://localhost"), "amqp://localhost");
    EXPECT_EQ(redact_url("amqp://guest@h1,amqp://guest@h2"), "amqp://guest@h1,amqp://guest@h2");
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

// A list of URLs, or any text a user can put in the field: every password is hidden, whatever the
// separators, schemes or stray characters (`--amqp-url 'amqp://u:p1@h1/%2f,amqp://u:p2@h2/%2f'`
// showed the second password).
TEST(AmqpRedactUrl, HidesEveryPasswordOfAList) {
    EXPECT_EQ(redact_url("amqp://u:p1@h1/%2f,amqp://u:p2@h2/%2f"), "amqp://u:***@h1/%2f,amqp://u:***@h2/%2f");
    EXPECT_EQ(redact_url("amqp://h1:5672,amqps://u:p2@h2"), "amqp://h1:5672,amqps://u:***@h2");
    EXPECT_EQ(redact_url("amqp://u:p1@h1 amqp://v:p2@h2"), "amqp://u:***@h1 amqp://v:***@h2");
}

TEST(AmqpRedactUrl, NeverShowsAPlantedPasswordInAnyText) {
    const std::string secret = "Zq9secret";
    const std::vector<std::string> shapes = {
        "amqp://u:@S@@h/v",
        "amqp://u:@S@@h1,amqp://u:@S@@h2",
        "amqp://h1,amqp://u:@S@@h2",
        "amqp://u:pa://@S@@h/v",
        "amqp://u:://@S@@h",
        "u:@S@@h1, u:@S@@h2",
        "amqp://u:@S@/x@h/v@y",
        "amqp://u:@S@?x@h",
        "amqp://u:@S@#@h,amqp://v:@S@@h",
        "amqp://u:@S@@h/v,garbage",
        "amqp:/u:@S@@h",
        "amqp://u:@S@@@h:notaport/%zz",
        ",,amqp://u:@S@@h,,",
        "amqp://u:@S@@[::1]:5672/%2f",
        "amqps://u:@S@@h/v?cacertfile=/x",
    };
    for (const auto &shape : shapes) {
        std::string url = shape;
        for (size_t p = url.find("@S@"); p != std::string::npos; p = url.find("@S@")) {
            url.replace(p, 3, secret);
        }
        const std::string r = redact_url(url);
        EXPECT_EQ(r.find(secret.substr(0, 4)), std::string::npos) << url << " -> " << r;
        EXPECT_EQ(r.find(secret.substr(4)), std::string::npos) << url << " -> " << r;
    }
}

TEST(AmqpUrlList, SplitsOnCommasDroppingSpacesAndEmptyEntries) {
    using outbox::amqp::split_url_list;
    EXPECT_EQ(split_url_list("amqp://a"), std::vector<std::string>{"amqp://a"});
    EXPECT_EQ(split_url_list(" amqp://a , amqps://u:p@b:5671/%2f,,amqp://c ,"),
              (std::vector<std::string>{"amqp://a", "amqps://u:p@b:5671/%2f", "amqp://c"}));
    EXPECT_TRUE(split_url_list("").empty());
    EXPECT_TRUE(split_url_list(" , ,").empty());
    // A comma inside a password is written %2C, so it never splits an address.
    EXPECT_EQ(split_url_list("amqp://u:p%2Cq@h/%2f"), std::vector<std::string>{"amqp://u:p%2Cq@h/%2f"});
}
