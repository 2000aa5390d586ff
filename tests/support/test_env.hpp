// Where the integration tests find their services: OUTBOX_PG_URL / OUTBOX_AMQP_URL, defaulting
// to the throwaway local services of scripts/services.sh. A test that cannot reach them fails.
#pragma once

#include <cstdlib>
#include <string>

namespace outbox_test {

inline std::string env_or(const char *name, const char *fallback) {
    const char *v = std::getenv(name);
    return (v != nullptr && *v != '\0') ? std::string(v) : std::string(fallback);
}

inline std::string pg_url() {
    return env_or("OUTBOX_PG_URL", "postgresql://outbox:outbox@127.0.0.1:54329/outbox");
}
inline std::string amqp_url() {
    return env_or("OUTBOX_AMQP_URL", "amqp://outbox:outbox@127.0.0.1:56729/%2f");
}

// The 3-node RabbitMQ cluster scripts/test.sh starts for the consumer tests that kill a node (a URL
// list; tests/support/cluster_node.sh kills and restarts). Empty when the tests run without it: those
// tests fail then, saying so.
inline std::string test_cluster_amqp_url() { return env_or("OUTBOX_TEST_CLUSTER_AMQP_URL", ""); }

// SQL that drops the range partitions of the outbox `table` in `schema` (its events and their
// receipts, which share bounds), the default partitions kept: for a test that has them made again at
// another width. Migrate makes them empty.
inline std::string drop_outbox_partitions_sql(const std::string &schema, const std::string &table) {
    const std::string q = "\"" + schema + "\".\"" + table;
    return "DO $drop$ DECLARE t regclass; BEGIN FOR t IN SELECT CAST(i.inhrelid AS regclass) FROM pg_inherits i"
           " JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent IN (CAST('" +
           q + "_events\"' AS regclass), CAST('" + q +
           "_receipts\"' AS regclass)) AND pg_get_expr(c.relpartbound, c.oid) <> 'DEFAULT' LOOP"
           " EXECUTE 'DROP TABLE ' || t; END LOOP; END $drop$";
}

} // namespace outbox_test
