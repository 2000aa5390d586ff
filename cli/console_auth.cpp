#include "console_auth.hpp"

#include "capi.hpp"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <sys/random.h>
#include <sys/stat.h>

namespace outbox::cli {

const char *role_name(Role r) {
    return r == Role::operator_ ? "operator" : "read";
}

std::string random_hex(size_t n) {
    std::string raw(n, '\0');
    size_t got = 0;
    while (got < n) {
        const ssize_t r = getrandom(raw.data() + got, n - got, 0);
        if (r <= 0) {
            throw Failure(OUTBOX_ERR_INTERNAL, "console: no random bytes from the kernel");
        }
        got += static_cast<size_t>(r);
    }
    static const char digits[] = "0123456789abcdef";
    std::string out;
    for (const char c : raw) {
        const auto b = static_cast<unsigned char>(c);
        out += digits[b >> 4];
        out += digits[b & 15];
    }
    return out;
}

bool same_secret(const std::string &a, const std::string &b) {
    unsigned char diff = a.size() == b.size() ? 0 : 1;
    const std::string &longer = a.size() >= b.size() ? a : b;
    for (size_t i = 0; i < longer.size(); ++i) {
        const char x = i < a.size() ? a[i] : '\0';
        const char y = i < b.size() ? b[i] : '\0';
        diff |= static_cast<unsigned char>(x ^ y);
    }
    return diff == 0;
}

namespace {

bool valid_name(const std::string &s) {
    if (s.empty() || s.size() > 64) {
        return false;
    }
    for (const char c : s) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                        c == '_' || c == '-' || c == '@';
        if (!ok) {
            return false;
        }
    }
    return true;
}

bool valid_token(const std::string &s) {
    for (const char c : s) {
        if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7F) {
            return false;
        }
    }
    return s.size() >= 16 && s.size() <= 512;
}

} // namespace

void Auth::add(const std::string &line, const std::string &where) {
    std::istringstream in(line);
    std::string name, role, token, extra;
    in >> name >> role >> token >> extra;
    if (name.empty() || name[0] == '#') {
        return;
    }
    // The line is never quoted back: it holds a token.
    if (token.empty() || !extra.empty()) {
        usage(where + ": expected 'name role token' (the line is not shown: it holds a token)");
    }
    if (!valid_name(name)) {
        usage(where + ": a name is 1 to 64 of A-Z a-z 0-9 . _ - @");
    }
    if (role != "read" && role != "operator") {
        usage(where + ": the role of " + name + " must be read or operator");
    }
    if (!valid_token(token)) {
        usage(where + ": the token of " + name + " must be 16 to 512 printable characters without spaces");
    }
    for (const Entry &e : tokens_) {
        if (same_secret(e.token, token)) {
            usage(where + ": the token of " + name + " is also " + e.who.name + "'s");
        }
    }
    tokens_.push_back({{name, role == "operator" ? Role::operator_ : Role::read, {}}, token});
}

Auth::Auth(const std::string &token_file) {
    if (!token_file.empty()) {
        std::ifstream in(token_file);
        if (!in) {
            usage("--token-file: cannot read " + token_file);
        }
        struct stat st {};
        if (stat(token_file.c_str(), &st) == 0 && (st.st_mode & S_IROTH) != 0) {
            std::fprintf(stderr, "outbox console: warning: %s is readable by every user (chmod 600 it)\n",
                         token_file.c_str());
        }
        std::string line;
        int n = 0;
        while (std::getline(in, line)) {
            add(line, token_file + ":" + std::to_string(++n));
        }
    }
    if (const char *env = std::getenv("OUTBOX_CONSOLE_TOKENS")) {
        std::string text = env;
        for (char &c : text) {
            c = c == ';' ? '\n' : c;
        }
        std::istringstream in(text);
        std::string line;
        int n = 0;
        while (std::getline(in, line)) {
            add(line, "OUTBOX_CONSOLE_TOKENS entry " + std::to_string(++n));
        }
    }
    if (tokens_.empty()) {
        usage("console: no token configured: give --token-file (lines 'name role token') or OUTBOX_CONSOLE_TOKENS");
    }
}

std::optional<Identity> Auth::token(const std::string &presented) const {
    std::optional<Identity> found;
    for (const Entry &e : tokens_) { // every entry is compared, found or not
        if (same_secret(e.token, presented)) {
            found = e.who;
        }
    }
    return found;
}

std::string Auth::open_session(Identity &who) {
    who.csrf = random_hex(32);
    std::string id = random_hex(32);
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = sessions_.begin(); it != sessions_.end();) {
        it = it->second.expires < now ? sessions_.erase(it) : std::next(it);
    }
    sessions_[id] = {who, now + kSessionLifetime};
    return id;
}

std::optional<Identity> Auth::session(const std::string &id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sessions_.find(id);
    if (id.empty() || it == sessions_.end()) {
        return std::nullopt;
    }
    if (it->second.expires < std::chrono::steady_clock::now()) {
        sessions_.erase(it);
        return std::nullopt;
    }
    return it->second.who;
}

void Auth::close_session(const std::string &id) {
    std::lock_guard<std::mutex> lock(mu_);
    sessions_.erase(id);
}

size_t Auth::count(Role r) const {
    size_t n = 0;
    for (const Entry &e : tokens_) {
        n += e.who.role == r ? 1 : 0;
    }
    return n;
}

} // namespace outbox::cli
