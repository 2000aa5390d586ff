// Keeping passwords out of every log line and error message. The connection strings users pass
// (amqp:// URLs, PostgreSQL URLs or key=value conninfo) carry passwords, and so can the messages
// libpq builds from them; everything shown to a person goes through here first.
#pragma once

#include <string>
#include <vector>

namespace outbox::redact {

// The password values a PostgreSQL connection string carries (password, sslpassword), as libpq
// reads them; empty when there are none or the string does not parse.
std::vector<std::string> pg_secrets(const std::string &conninfo);

// libpq's message about `conninfo` with every secret in it replaced by "***". When the string
// does not parse, libpq quotes the offending token, which may be (part of) a password: every
// quoted token is hidden then.
std::string pg_message(const std::string &conninfo, std::string message);

// Replaces every occurrence of each secret (at least 1 byte) in `text` with "***".
std::string scrub(std::string text, const std::vector<std::string> &secrets);

} // namespace outbox::redact
