// `outbox console`: who may look and who may act. Tokens come from a file of `name role token`
// lines (--token-file) or the environment (OUTBOX_CONSOLE_TOKENS, the same lines separated by
// newlines or ';'); roles are `read` (view) and `operator` (view and act). A browser signs in once
// with its token and then holds a session: an opaque cookie (HttpOnly, SameSite=Strict) and a
// CSRF token the page sends back in a header on every POST. Nothing here logs a token.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace outbox::cli {

enum class Role { read, operator_ };

struct Identity {
    std::string name;
    Role role = Role::read;
    std::string csrf; // the session's CSRF token; empty for a bearer token
};

const char *role_name(Role r);

// Hex of n random bytes from the kernel (getrandom); throws when none can be had.
std::string random_hex(size_t n);

// Compares in time that depends on the lengths only, not on where the texts differ.
bool same_secret(const std::string &a, const std::string &b);

class Auth {
  public:
    // Reads the token file (may be empty) and OUTBOX_CONSOLE_TOKENS; a usage error when a line is
    // malformed, a token is shorter than 16 characters or used twice, or no token is configured.
    explicit Auth(const std::string &token_file);

    // The identity of a bearer token, or nullopt.
    [[nodiscard]] std::optional<Identity> token(const std::string &presented) const;

    // Starts a session for `who` (sets who.csrf); returns the session id for the cookie.
    std::string open_session(Identity &who);
    // The session's identity (with its CSRF token), or nullopt when unknown or expired.
    [[nodiscard]] std::optional<Identity> session(const std::string &id);
    void close_session(const std::string &id);

    [[nodiscard]] size_t count(Role r) const;

    static constexpr std::chrono::hours kSessionLifetime{12};

  private:
    struct Entry {
        Identity who;
        std::string token;
    };
    struct Session {
        Identity who;
        std::chrono::steady_clock::time_point expires;
    };
    void add(const std::string &line, const std::string &where);
    std::vector<Entry> tokens_;
    std::mutex mu_;
    std::map<std::string, Session> sessions_;
};

} // namespace outbox::cli
