// SQL identifiers that come from configuration (schema, table names). They are validated
// against a strict pattern and then always double-quoted, so they can never carry SQL.
#pragma once

#include <string>
#include <string_view>

namespace outbox::ident {

// Longest suffix the library appends to a configured table name (see schema.cpp).
constexpr size_t max_suffix = 16;

// Throws Error(invalid_argument) unless `name` matches [a-z_][a-z0-9_]* and leaves room for
// the suffixes of derived names within PostgreSQL's 63-byte limit.
void validate(std::string_view name, const char *what, size_t reserve = max_suffix);

// "schema"."name", for identifiers already validated.
std::string qualified(const std::string &schema, const std::string &name);
std::string quoted(const std::string &name);

} // namespace outbox::ident
