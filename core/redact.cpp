#include "redact.hpp"

#include "amqp.hpp"
#include "pg.hpp"

#include <algorithm>
#include <cctype>
#include <memory>
#include <vector>

namespace outbox {
namespace {

using pg::parse_conninfo;

bool is_secret_key(const std::string &k) {
    return k.size() >= 8 && k.compare(k.size() - 8, 8, "password") == 0; // password, sslpassword
}

// URL form: the userinfo password (up to the last '@' of the authority) and every query
// parameter named *password.
std::string redact_pg_url(const std::string &url, size_t scheme_end) {
    std::string out = url;
    const size_t auth_start = scheme_end + 3;
    size_t auth_end = out.find_first_of("/?", auth_start);
    if (auth_end == std::string::npos) {
        auth_end = out.size();
    }
    size_t at = out.rfind('@', auth_end == 0 ? 0 : auth_end - 1);
    if (at == std::string::npos || at < auth_start) {
        at = out.find('@', auth_end); // an unencoded '/' or '?' in the password: look further
    }
    if (at != std::string::npos) {
        const size_t colon = out.find(':', auth_start);
        if (colon != std::string::npos && colon < at) {
            out.replace(colon + 1, at - colon - 1, "***");
        }
    }
    for (size_t q = out.find('?'); q != std::string::npos && q < out.size();) {
        const size_t key_start = q + 1;
        const size_t eq = out.find('=', key_start);
        size_t amp = out.find('&', key_start);
        if (eq == std::string::npos) {
            break;
        }
        if (amp != std::string::npos && amp < eq) {
            q = amp;
            continue;
        }
        const std::string key = out.substr(key_start, eq - key_start);
        if (key.size() >= 8 && key.compare(key.size() - 8, 8, "password") == 0) {
            out.replace(eq + 1, (amp == std::string::npos ? out.size() : amp) - eq - 1, "***");
            amp = out.find('&', eq + 1);
        }
        q = amp;
    }
    return out;
}

// key=value form, tokenised as libpq does (values unquoted up to whitespace, or quoted with
// backslash escapes), keeping everything but the values of *password keys verbatim.
std::string redact_pg_keywords(const std::string &in) {
    std::string out;
    size_t i = 0;
    const auto space = [&](size_t k) { return k < in.size() && std::isspace(static_cast<unsigned char>(in[k])) != 0; };
    while (i < in.size()) {
        while (space(i)) {
            out.push_back(in[i++]);
        }
        const size_t key_start = i;
        while (i < in.size() && in[i] != '=' && !space(i)) {
            ++i;
        }
        const std::string key = in.substr(key_start, i - key_start);
        out += key;
        while (space(i)) {
            out.push_back(in[i++]);
        }
        if (i >= in.size() || in[i] != '=') {
            continue;
        }
        out.push_back(in[i++]);
        while (space(i)) {
            out.push_back(in[i++]);
        }
        const size_t value_start = i;
        if (i < in.size() && in[i] == '\'') {
            ++i;
            while (i < in.size() && in[i] != '\'') {
                i += in[i] == '\\' ? 2 : 1;
            }
            i = std::min(i + 1, in.size());
        } else {
            while (i < in.size() && !space(i)) {
                i += in[i] == '\\' ? 2 : 1;
            }
            i = std::min(i, in.size());
        }
        out += key.size() >= 8 && key.compare(key.size() - 8, 8, "password") == 0
                   ? std::string("***")
                   : in.substr(value_start, i - value_start);
    }
    return out;
}

std::string quote_value(const std::string &v) {
    std::string out = "'";
    for (char c : v) {
        if (c == '\'' || c == '\\') {
            out.push_back('\\');
        }
        out.push_back(c);
    }
    return out + "'";
}

// The '@' that ends the userinfo of the URL piece url[start, end): the last one before the
// authority ends, or, when a password holds an unencoded '/', '?' or '#', the piece's last one.
size_t userinfo_end(const std::string &url, size_t start, size_t end) {
    size_t auth_end = url.find_first_of("/?#", start);
    auth_end = std::min(auth_end == std::string::npos ? url.size() : auth_end, end);
    for (size_t limit : {auth_end, end}) {
        const size_t at = limit == 0 ? std::string::npos : url.rfind('@', limit - 1);
        if (at != std::string::npos && at >= start) {
            return at;
        }
    }
    return std::string::npos;
}

// Whether the ':' at `c` ends a scheme ("amqp" of "amqp://"): followed by "//", after a run of
// scheme characters that starts the text or follows a separator (not a '/' or ':' of a URL).
bool is_scheme_colon(const std::string &url, size_t c) {
    if (url.compare(c, 3, "://") != 0 || c == 0) {
        return false;
    }
    size_t b = c;
    while (b > 0 && (std::isalnum(static_cast<unsigned char>(url[b - 1])) != 0 || url[b - 1] == '+' ||
                     url[b - 1] == '-' || url[b - 1] == '.')) {
        --b;
    }
    return b < c && (b == 0 || (url[b - 1] != '/' && url[b - 1] != ':' && url[b - 1] != '@'));
}

// The first ':' in url[from, at) that does not end a scheme: where a URL's password starts.
size_t password_colon(const std::string &url, size_t from, size_t at) {
    for (size_t c = url.find(':', from); c != std::string::npos && c < at; c = url.find(':', c + 1)) {
        if (!is_scheme_colon(url, c)) {
            return c;
        }
    }
    return std::string::npos;
}

} // namespace

namespace redact {

std::vector<std::string> pg_secrets(const std::string &conninfo) {
    std::vector<std::string> out;
    const auto opts = parse_conninfo(conninfo);
    if (!opts) {
        return out;
    }
    for (const auto &[key, val] : *opts) {
        if (val && !val->empty() && is_secret_key(key)) {
            out.push_back(*val);
        }
    }
    return out;
}

std::string scrub(std::string text, const std::vector<std::string> &secrets) {
    for (const auto &s : secrets) {
        if (s.empty()) {
            continue;
        }
        for (size_t pos = text.find(s); pos != std::string::npos; pos = text.find(s, pos + 3)) {
            text.replace(pos, s.size(), "***");
        }
    }
    return text;
}

std::string pg_message(const std::string &conninfo, std::string message) {
    if (!parse_conninfo(conninfo)) {
        // e.g. `invalid percent-encoded token: "s3cr%zz"`: hide every quoted token.
        std::string out;
        size_t i = 0;
        while (i < message.size()) {
            const size_t open = message.find('"', i);
            const size_t close = open == std::string::npos ? std::string::npos : message.find('"', open + 1);
            if (close == std::string::npos) {
                out += message.substr(i);
                break;
            }
            const std::string token = message.substr(open + 1, close - open - 1);
            out += message.substr(i, open - i) + "\"" + (token == "=" ? token : std::string("***")) + "\"";
            i = close + 1;
        }
        return out;
    }
    return scrub(std::move(message), pg_secrets(conninfo));
}

} // namespace redact

namespace pg {

std::string redact_conninfo(const std::string &conninfo) {
    if (conninfo.find('=') == std::string::npos && conninfo.find("://") == std::string::npos) {
        return conninfo; // a bare database name, as libpq reads one: nothing secret in it
    }
    const auto opts = parse_conninfo(conninfo);
    if (!opts) {
        return "(a connection string libpq cannot parse; not shown, it may hold a password)";
    }
    const size_t scheme = conninfo.find("://");
    {
        std::string out = scheme != std::string::npos ? redact_pg_url(conninfo, scheme) : redact_pg_keywords(conninfo);
        // Sound when libpq, reading the result, finds "***" (or nothing) wherever a password
        // goes; the password's text may still appear as a user or database name, which is fine.
        const auto check = parse_conninfo(out);
        bool sound = check.has_value();
        for (size_t i = 0; sound && i < check->size(); ++i) {
            const auto &[key, val] = (*check)[i];
            sound = !(is_secret_key(key) && val && *val != "***");
        }
        if (sound) {
            return out;
        }
        // A password spelled in a way the redaction above does not recognise: show the parsed
        // options instead.
    }
    std::string out;
    for (const auto &[key, val] : *opts) {
        if (!val) {
            continue;
        }
        if (!out.empty()) {
            out += ' ';
        }
        out += key + "=" + (is_secret_key(key) ? std::string("***") : quote_value(*val));
    }
    return out;
}

} // namespace pg

namespace amqp {

std::string redact_url(const std::string &url) {
    // Any text a user can put in a URL field, lists and malformed ones included: split it at each
    // "://"; in every piece that holds an '@', everything from the first ':' of the userinfo up to
    // its '@' is the password. A piece whose userinfo has no ':' (a password holding
    // "://", say) reaches back into the pieces before it for the ':'. Over-redacting a strange
    // text is the acceptable failure here; showing a password is not.
    std::vector<size_t> starts{0};
    for (size_t p = url.find("://"); p != std::string::npos; p = url.find("://", p + 3)) {
        starts.push_back(p + 3);
    }
    std::string out;
    size_t done = 0; // url[0, done) is already in `out`
    for (size_t k = 0; k < starts.size(); ++k) {
        const size_t piece_end = k + 1 < starts.size() ? starts[k + 1] - 3 : url.size();
        const size_t at = userinfo_end(url, starts[k], piece_end);
        if (at == std::string::npos) {
            continue;
        }
        const size_t from = std::max(starts[k], done);
        size_t colon = password_colon(url, from, at);
        if (colon == std::string::npos) {
            colon = password_colon(url, done, at); // reach back: a password holding "://"
        }
        if (colon == std::string::npos) {
            continue; // a user without a password
        }
        out += url.substr(done, colon + 1 - done) + "***";
        done = at;
    }
    return out + url.substr(done);
}

} // namespace amqp
} // namespace outbox
