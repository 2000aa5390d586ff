// Between amqp::Connection and librabbitmq-c's C types: byte views, field tables and message
// properties in both directions. Internal to core.
#pragma once

#include "amqp.hpp"

#include <amqp.h>

#include <string>
#include <string_view>
#include <vector>

namespace outbox::amqp {

// A view of `s` for librabbitmq, which takes non-const pointers but only reads what it sends.
amqp_bytes_t bytes_of(std::string_view s);
std::string str_of(const amqp_bytes_t &b);

// An amqp_table_t view of a Table; the entries point into the Table, which must outlive it.
class EncodedTable {
  public:
    explicit EncodedTable(const Table &t);
    [[nodiscard]] amqp_table_t get() const;

  private:
    std::vector<amqp_table_entry_t> entries_;
};

// Fields of kinds a Table cannot hold (float, decimal, void, nested tables and arrays such as
// x-death) are left out.
Table decode_table(const amqp_table_t &t);
Properties decode_properties(const amqp_basic_properties_t &p);

// One entry of a table built by hand (the client properties); `key` must be a literal.
amqp_table_entry_t bool_entry(const char *key, bool v);
amqp_table_entry_t string_entry(const char *key, const std::string &v);

} // namespace outbox::amqp
