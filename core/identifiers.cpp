#include "identifiers.hpp"

#include "error.hpp"

namespace outbox::ident {

void validate(std::string_view name, const char *what, size_t reserve) {
    constexpr size_t pg_max = 63;
    if (name.empty()) {
        fail(Errc::invalid_argument, std::string(what) + " must not be empty");
    }
    if (name.size() + reserve > pg_max) {
        fail(Errc::invalid_argument, std::string(what) + " is too long (at most " + std::to_string(pg_max - reserve) +
                                         " characters)");
    }
    bool first = true;
    for (char c : name) {
        bool ok = (c >= 'a' && c <= 'z') || c == '_' || (!first && c >= '0' && c <= '9');
        if (!ok) {
            fail(Errc::invalid_argument, std::string(what) +
                                             " must be a lower-case SQL identifier ([a-z_][a-z0-9_]*), got an "
                                             "invalid character");
        }
        first = false;
    }
}

std::string quoted(const std::string &name) { return "\"" + name + "\""; }

std::string qualified(const std::string &schema, const std::string &name) { return quoted(schema) + "." + quoted(name); }

} // namespace outbox::ident
