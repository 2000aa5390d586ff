// Every exported C function called with bad input: NULL for each pointer argument, empty
// strings, huge strings (16 MiB), invalid UTF-8, and handles in the wrong state (a broken or
// closed connection, an aborted transaction, a stopped relay or consumer). Each must answer with
// a precise status and a message, never crash, never leak (this suite runs under ASan + LSan +
// UBSan in the test command).
//
// Self-policing: EverySymbolHasASweepCase reads tests/abi/symbols.txt (the exported list, itself
// checked against the library) and the public header, and fails when a function has no case here.
#include "fixture.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>

using namespace outbox_test;

namespace {

const std::string kHuge(16u * 1024 * 1024, 'x');
const char *const kBadUtf8[] = {"\xc3\x28", "\xff", "\xc0\xaf", "\xed\xa0\x80", "ok\xf4\x90\x80\x80"};

const std::set<outbox_status> kAllStatuses = {OUTBOX_OK,
                                              OUTBOX_ERR_INVALID_ARGUMENT,
                                              OUTBOX_ERR_INVALID_EVENT,
                                              OUTBOX_ERR_TOO_LARGE,
                                              OUTBOX_ERR_DUPLICATE,
                                              OUTBOX_ERR_DATABASE,
                                              OUTBOX_ERR_CONNECTION,
                                              OUTBOX_ERR_BROKER,
                                              OUTBOX_ERR_TIMEOUT,
                                              OUTBOX_ERR_SCHEMA,
                                              OUTBOX_ERR_TRANSACTION,
                                              OUTBOX_ERR_NO_MEMORY,
                                              OUTBOX_ERR_STOPPED,
                                              OUTBOX_ERR_INTERNAL,
                                              OUTBOX_ERR_UNKNOWN_KEY,
                                              OUTBOX_ERR_NOT_FOUND};

// Checks a status, that outbox_last_status() agrees, and that the message says something useful,
// is short (no 16 MiB echo) and is valid UTF-8 (bindings decode it).
#define EXPECT_STATUS(call, expected)                                                                                  \
    do {                                                                                                               \
        const outbox_status st_ = (call);                                                                              \
        record_status(#call, st_);                                                                                     \
        EXPECT_EQ(st_, (expected)) << #call << ": " << outbox_status_name(st_) << ": " << outbox_last_error();         \
        if (st_ != OUTBOX_OK) {                                                                                        \
            EXPECT_EQ(outbox_last_status(), st_) << #call;                                                             \
            const std::string msg_ = outbox_last_error();                                                              \
            EXPECT_FALSE(msg_.empty()) << #call << " failed without a message";                                        \
            EXPECT_LT(msg_.size(), 4096U) << #call << " echoed its input into the message";                            \
            EXPECT_TRUE(utf8_ok(msg_)) << #call << ": message is not UTF-8";                                           \
        }                                                                                                              \
    } while (0)

// Every (function, status) the sweep saw, checked against the function's @return in outbox.h when
// the program ends (DocumentedReturns below): a status a call returns must be documented.
std::set<std::pair<std::string, outbox_status>> &observed_statuses() {
    static std::set<std::pair<std::string, outbox_status>> seen;
    return seen;
}

void record_status(const std::string &call, outbox_status st) {
    const std::string fn = call.substr(0, call.find('('));
    if (st != OUTBOX_OK && fn.rfind("outbox_", 0) == 0) {
        observed_statuses().emplace(fn, st);
    }
}

bool utf8_ok(const std::string &s) {
    // Strict enough for the check: no stray continuation or invalid lead bytes.
    size_t i = 0;
    while (i < s.size()) {
        auto c = static_cast<unsigned char>(s[i]);
        size_t n = c < 0x80                   ? 1
                   : (c >= 0xC2 && c <= 0xDF) ? 2
                   : (c >= 0xE0 && c <= 0xEF) ? 3
                   : (c >= 0xF0 && c <= 0xF4) ? 4
                                              : 0;
        if (n == 0 || i + n > s.size()) {
            return false;
        }
        for (size_t k = 1; k < n; ++k) {
            if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) {
                return false;
            }
        }
        i += n;
    }
    return true;
}

std::vector<std::string> read_symbols() {
    std::ifstream in(std::string(OUTBOX_SOURCE_DIR) + "/tests/abi/symbols.txt");
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);) {
        if (!line.empty()) {
            out.push_back(line);
        }
    }
    return out;
}

std::set<std::string> header_functions() {
    std::ifstream in(std::string(OUTBOX_SOURCE_DIR) + "/capi/include/outbox.h");
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    std::set<std::string> out;
    std::regex fn(R"(OUTBOX_API[^;(]*?\b(outbox_[a-z0-9_]+)\s*\()");
    for (auto it = std::sregex_iterator(text.begin(), text.end(), fn); it != std::sregex_iterator(); ++it) {
        out.insert((*it)[1]);
    }
    return out;
}

class Sweep : public PgTest {
  public:
    // The cases are free functions over the fixture.
    using PgTest::admin;
    using PgTest::cfg;
    using PgTest::count;
    using PgTest::db;
    using PgTest::make_event;
    using PgTest::schema;

  protected:
    void SetUp() override {
        PgTest::SetUp();
        ASSERT_EQ(outbox_config_set(cfg, "pg.url", pg_url().c_str()), OUTBOX_OK);
        ASSERT_EQ(outbox_config_set(cfg, "amqp.url", amqp_url().c_str()), OUTBOX_OK);
        exchange = schema + ".fanout";
        ASSERT_EQ(outbox_config_set(cfg, "amqp.exchange", exchange.c_str()), OUTBOX_OK);
        ASSERT_EQ(outbox_config_set(cfg, "consumer.queue_type", "classic"), OUTBOX_OK);
    }
    void TearDown() override {
        outbox_message_free(msg);
        outbox_consumer_free(consumer);
        PgTest::TearDown();
    }

  public:
    // A real delivered message: one event written, relayed and received by a consumer.
    void deliver() {
        ASSERT_EQ(outbox_consumer_new(&consumer, cfg, (schema + "_sweep").c_str()), OUTBOX_OK) << outbox_last_error();
        ASSERT_EQ(outbox_consumer_connect(consumer), OUTBOX_OK) << outbox_last_error();
        outbox_event *ev = make_event("sweep-1");
        ASSERT_EQ(outbox_write(db, ev), OUTBOX_OK) << outbox_last_error();
        outbox_event_free(ev);
        outbox_relay *relay = nullptr;
        ASSERT_EQ(outbox_relay_new(&relay, cfg), OUTBOX_OK);
        outbox_relay_stats st;
        outbox_relay_stats_init(&st);
        ASSERT_EQ(outbox_relay_step(relay, &st), OUTBOX_OK) << outbox_last_error();
        ASSERT_EQ(st.published, 1);
        outbox_relay_free(relay);
        ASSERT_EQ(outbox_consumer_next(&msg, consumer, 10000), OUTBOX_OK) << outbox_last_error();
    }

    // A db handle whose server session was terminated.
    outbox_db *broken_db() {
        outbox_db *b = nullptr;
        EXPECT_EQ(outbox_db_open(&b, pg_url().c_str(), cfg), OUTBOX_OK);
        auto *pg = static_cast<PGconn *>(outbox_db_pgconn(b));
        admin.query("SELECT pg_terminate_backend($1::int)", {std::to_string(PQbackendPID(pg))});
        // The first call discovers the loss; later ones fail fast.
        outbox_db_exec(b, "SELECT 1");
        return b;
    }
    // A db handle inside an aborted transaction.
    outbox_db *aborted_db() {
        outbox_db *b = nullptr;
        EXPECT_EQ(outbox_db_open(&b, pg_url().c_str(), cfg), OUTBOX_OK);
        EXPECT_EQ(outbox_db_exec(b, "BEGIN"), OUTBOX_OK);
        EXPECT_EQ(outbox_db_exec(b, "SELECT 1/0"), OUTBOX_ERR_DATABASE);
        return b;
    }

    std::string exchange;
    outbox_consumer *consumer = nullptr;
    outbox_message *msg = nullptr;
};

using Case = std::function<void(Sweep &)>;

// The functions a case covers, and the case; each exported function belongs to one group.
struct Group {
    std::vector<std::string> names;
    Case fn;
};
std::vector<Group> &groups() {
    static std::vector<Group> g;
    return g;
}
struct Register {
    Register(std::initializer_list<const char *> names, Case c) {
        groups().push_back({std::vector<std::string>(names.begin(), names.end()), std::move(c)});
    }
};

const std::string kId = "0190f5c2-1c1e-7c2a-9d1b-2f4c5e6a7b8c";

// ---- versions, errors, strings -----------------------------------------------------------------
Register r_version({"outbox_version", "outbox_version_number"}, [](Sweep &) {
    EXPECT_STREQ(outbox_version(), OUTBOX_VERSION_STRING);
    EXPECT_EQ(outbox_version_number(), OUTBOX_VERSION_NUMBER);
});
Register r_errors({"outbox_last_error", "outbox_last_status", "outbox_status_name"}, [](Sweep &) {
    EXPECT_EQ(outbox_config_new(nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_last_status(), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STRNE(outbox_last_error(), "");
    for (outbox_status s : kAllStatuses) {
        ASSERT_NE(outbox_status_name(s), nullptr);
        EXPECT_STRNE(outbox_status_name(s), "UNKNOWN") << s;
    }
    // Values no version defines get a name too, never NULL.
    for (int v : {1, 12345, -16, -999, INT32_MIN, INT32_MAX}) {
        ASSERT_NE(outbox_status_name(static_cast<outbox_status>(v)), nullptr);
        EXPECT_STREQ(outbox_status_name(static_cast<outbox_status>(v)), "UNKNOWN");
    }
    // A success clears the record.
    outbox_config *c = nullptr;
    ASSERT_EQ(outbox_config_new(&c), OUTBOX_OK);
    EXPECT_EQ(outbox_last_status(), OUTBOX_OK);
    EXPECT_STREQ(outbox_last_error(), "");
    outbox_config_free(c);
});
Register r_string_free({"outbox_string_free"}, [](Sweep &s) {
    outbox_string_free(nullptr);
    char *v = nullptr;
    ASSERT_EQ(outbox_config_get(&v, s.cfg, "outbox.table"), OUTBOX_OK);
    outbox_string_free(v); // LSan checks it is the right allocator
});

// ---- configuration ------------------------------------------------------------------------------
Register r_config_new({"outbox_config_new", "outbox_config_free"}, [](Sweep &) {
    EXPECT_STATUS(outbox_config_new(nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    outbox_config_free(nullptr);
});
Register r_config_set({"outbox_config_set"}, [](Sweep &s) {
    EXPECT_STATUS(outbox_config_set(nullptr, "outbox.table", "x"), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_config_set(s.cfg, nullptr, "x"), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_config_set(s.cfg, "outbox.table", nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_config_set(s.cfg, "", "x"), OUTBOX_ERR_UNKNOWN_KEY);
    EXPECT_STATUS(outbox_config_set(s.cfg, kHuge.c_str(), "x"), OUTBOX_ERR_UNKNOWN_KEY);
    for (const char *bad : kBadUtf8) {
        EXPECT_STATUS(outbox_config_set(s.cfg, bad, "x"), OUTBOX_ERR_UNKNOWN_KEY);
    }
    // Every key: empty, huge and invalid UTF-8 values are refused (empty only where it means
    // nothing), and the configuration is unchanged afterwards.
    const char *key = nullptr;
    for (size_t i = 0; outbox_config_key(&key, nullptr, i) == OUTBOX_OK; ++i) {
        char *before = nullptr;
        ASSERT_EQ(outbox_config_get(&before, s.cfg, key), OUTBOX_OK);
        EXPECT_STATUS(outbox_config_set(s.cfg, key, kHuge.c_str()), OUTBOX_ERR_INVALID_ARGUMENT);
        for (const char *bad : kBadUtf8) {
            EXPECT_STATUS(outbox_config_set(s.cfg, key, bad), OUTBOX_ERR_INVALID_ARGUMENT);
        }
        const outbox_status empty = outbox_config_set(s.cfg, key, "");
        const std::set<std::string> empty_ok = {
            "event.type_map", "pg.url",       "amqp.url",       "amqp.tls.ca",
            "amqp.tls.cert",  "amqp.tls.key", "consumer.queue", "consumer.dead_letter_queue"};
        EXPECT_EQ(empty, empty_ok.count(key) != 0 ? OUTBOX_OK : OUTBOX_ERR_INVALID_ARGUMENT)
            << key << ": " << outbox_last_error();
        if (empty == OUTBOX_OK) { // put it back
            ASSERT_EQ(outbox_config_set(s.cfg, key,
                                        std::string(key) == "pg.url"           ? pg_url().c_str()
                                        : std::string(key) == "amqp.url"       ? amqp_url().c_str()
                                        : std::string(key) == "event.type_map" ? "PRD=Product,ORD=Order"
                                                                               : before),
                      OUTBOX_OK);
        }
        char *after = nullptr;
        ASSERT_EQ(outbox_config_get(&after, s.cfg, key), OUTBOX_OK);
        EXPECT_STREQ(before, after) << key << " changed by rejected values";
        outbox_string_free(before);
        outbox_string_free(after);
    }
});
Register r_config_get({"outbox_config_get"}, [](Sweep &s) {
    char *v = reinterpret_cast<char *>(0x1);
    EXPECT_STATUS(outbox_config_get(nullptr, s.cfg, "outbox.table"), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_config_get(&v, nullptr, "outbox.table"), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(v, nullptr) << "out is cleared on failure";
    EXPECT_STATUS(outbox_config_get(&v, s.cfg, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_config_get(&v, s.cfg, ""), OUTBOX_ERR_UNKNOWN_KEY);
    EXPECT_STATUS(outbox_config_get(&v, s.cfg, kHuge.c_str()), OUTBOX_ERR_UNKNOWN_KEY);
    EXPECT_STATUS(outbox_config_get(&v, s.cfg, "\xff"), OUTBOX_ERR_UNKNOWN_KEY);
    EXPECT_EQ(v, nullptr);
    ASSERT_EQ(outbox_config_get(&v, s.cfg, "pg.url"), OUTBOX_OK);
    EXPECT_STREQ(v, "***") << "secrets never read back";
    outbox_string_free(v);
});
Register r_config_key({"outbox_config_key"}, [](Sweep &) {
    EXPECT_EQ(outbox_config_key(nullptr, nullptr, 0), OUTBOX_OK) << "both outputs may be NULL";
    EXPECT_STATUS(outbox_config_key(nullptr, nullptr, SIZE_MAX), OUTBOX_ERR_NOT_FOUND);
    const char *k = nullptr;
    EXPECT_STATUS(outbox_config_key(&k, nullptr, 100000), OUTBOX_ERR_NOT_FOUND);
});

// ---- database handles ---------------------------------------------------------------------------
Register r_db_open({"outbox_db_open", "outbox_db_close"}, [](Sweep &s) {
    outbox_db *d = reinterpret_cast<outbox_db *>(0x1);
    EXPECT_STATUS(outbox_db_open(nullptr, pg_url().c_str(), nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_db_open(&d, nullptr, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(d, nullptr);
    EXPECT_STATUS(outbox_db_open(&d, kHuge.c_str(), s.cfg), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_db_open(&d, "postgresql://outbox@127.0.0.1:1/x?connect_timeout=2", s.cfg),
                  OUTBOX_ERR_CONNECTION);
    EXPECT_STATUS(outbox_db_open(&d, "host=127.0.0.1 port=1 bogus_option=1", s.cfg), OUTBOX_ERR_CONNECTION);
    // Invalid UTF-8 is the server's to refuse (a password may be any bytes): a precise status.
    const std::string bad_db = pg_url().substr(0, pg_url().rfind('/') + 1) + "\xff\xfe";
    EXPECT_STATUS(outbox_db_open(&d, bad_db.c_str(), s.cfg), OUTBOX_ERR_CONNECTION);
    EXPECT_EQ(d, nullptr);
    outbox_db_close(nullptr);
});
Register r_db_wrap({"outbox_db_wrap", "outbox_db_pgconn"}, [](Sweep &s) {
    outbox_db *d = reinterpret_cast<outbox_db *>(0x1);
    EXPECT_STATUS(outbox_db_wrap(nullptr, outbox_db_pgconn(s.db), nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_db_wrap(&d, nullptr, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(d, nullptr);
    EXPECT_EQ(outbox_db_pgconn(nullptr), nullptr);
    // A lent connection that never opened: every call is a connection error.
    PGconn *dead = PQconnectdb("host=127.0.0.1 port=1 connect_timeout=1");
    ASSERT_EQ(outbox_db_wrap(&d, dead, s.cfg), OUTBOX_OK);
    EXPECT_STATUS(outbox_db_exec(d, "SELECT 1"), OUTBOX_ERR_CONNECTION);
    EXPECT_STATUS(outbox_migrate(nullptr, d, OUTBOX_MIGRATE_ALL), OUTBOX_ERR_CONNECTION);
    char *json = nullptr;
    EXPECT_STATUS(outbox_stats(&json, d), OUTBOX_ERR_CONNECTION);
    outbox_db_close(d);                        // never closes the lent connection...
    EXPECT_EQ(PQstatus(dead), CONNECTION_BAD); // ...which is still ours to finish
    PQfinish(dead);
});
Register r_db_exec({"outbox_db_exec"}, [](Sweep &s) {
    EXPECT_STATUS(outbox_db_exec(nullptr, "SELECT 1"), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_db_exec(s.db, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_db_exec(s.db, ""), OUTBOX_OK);
    EXPECT_STATUS(outbox_db_exec(s.db, kHuge.c_str()), OUTBOX_ERR_DATABASE);
    EXPECT_STATUS(outbox_db_exec(s.db, "SELECT '\xff'"), OUTBOX_ERR_DATABASE);
    outbox_db *b = s.broken_db();
    EXPECT_STATUS(outbox_db_exec(b, "SELECT 1"), OUTBOX_ERR_CONNECTION);
    outbox_db_close(b);
});
// One statement of the caller's; its rows, and what the accessors say about each.
struct Queried {
    outbox_rows *r = nullptr;
    outbox_status st;
    Queried(outbox_db *db, const char *sql, std::vector<const char *> params = {})
        : st(outbox_db_query(&r, db, sql, params.data(), params.size())) {}
    ~Queried() { outbox_rows_free(r); }
    Queried(const Queried &) = delete;
    Queried &operator=(const Queried &) = delete;
    [[nodiscard]] std::string value(size_t row, size_t col) const {
        size_t len = 0;
        const char *v = outbox_rows_value(r, row, col, &len);
        return v != nullptr ? std::string(v, len) : "<NULL>";
    }
};
// NULL arguments and handles; the accessors of a NULL handle.
Register r_rows_free({"outbox_rows_free", "outbox_rows_count", "outbox_rows_columns"}, [](Sweep &s) {
    outbox_rows *r = reinterpret_cast<outbox_rows *>(0x1);
    EXPECT_STATUS(outbox_db_query(nullptr, s.db, "SELECT 1", nullptr, 0), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_db_query(&r, nullptr, "SELECT 1", nullptr, 0), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(r, nullptr);
    EXPECT_STATUS(outbox_db_query(&r, s.db, nullptr, nullptr, 0), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_db_query(&r, s.db, "SELECT $1", nullptr, 1), OUTBOX_ERR_INVALID_ARGUMENT);
    const std::vector<const char *> many(65536, "1");
    EXPECT_STATUS(outbox_db_query(&r, s.db, "SELECT 1", many.data(), many.size()), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(r, nullptr);
    // A NULL handle answers every accessor.
    size_t len = 7;
    EXPECT_EQ(outbox_rows_count(nullptr), 0U);
    EXPECT_EQ(outbox_rows_columns(nullptr), 0U);
    EXPECT_EQ(outbox_rows_value(nullptr, 0, 0, &len), nullptr);
    EXPECT_EQ(len, 0U);
    EXPECT_EQ(outbox_rows_affected(nullptr), -1);
    EXPECT_EQ(outbox_rows_command(nullptr), nullptr);
    outbox_rows_free(nullptr);
});
Register r_rows_value({"outbox_rows_value"}, [](Sweep &s) {
    size_t len = 7;
    // Rows with parameters and NULLs, and indexes out of range.
    Queried q(s.db, "SELECT $1::text, $2::text, $3::int + 1 UNION ALL SELECT 'y', NULL, 0", {"x", nullptr, "41"});
    ASSERT_EQ(q.st, OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(outbox_rows_count(q.r), 2U);
    EXPECT_EQ(outbox_rows_columns(q.r), 3U);
    EXPECT_EQ(q.value(0, 0) + q.value(0, 1) + q.value(0, 2), "x<NULL>42");
    EXPECT_EQ(q.value(1, 0) + q.value(1, 1) + q.value(1, 2), "y<NULL>0");
    EXPECT_STREQ(outbox_rows_value(q.r, 0, 0, nullptr), "x");
    for (const auto &[row, col] : std::vector<std::pair<size_t, size_t>>{{2, 0}, {0, 3}, {SIZE_MAX, SIZE_MAX}}) {
        EXPECT_EQ(outbox_rows_value(q.r, row, col, &len), nullptr);
        EXPECT_EQ(len, 0U);
    }
    EXPECT_EQ(outbox_rows_affected(q.r), 2);
    EXPECT_STREQ(outbox_rows_command(q.r), "SELECT 2");
});
Register r_rows_command({"outbox_rows_command", "outbox_rows_affected"}, [](Sweep &s) {
    for (const char *sql : {"CREATE TEMP TABLE sweep_q (v text UNIQUE)", "", "SET application_name = 'sweep'"}) {
        Queried q(s.db, sql);
        ASSERT_EQ(q.st, OUTBOX_OK) << sql << ": " << outbox_last_error();
        EXPECT_EQ(outbox_rows_count(q.r), 0U) << sql;
        EXPECT_EQ(outbox_rows_affected(q.r), -1) << sql;
    }
    Queried ins(s.db, "INSERT INTO sweep_q VALUES ($1), ($2)", {"a", nullptr});
    ASSERT_EQ(ins.st, OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(outbox_rows_affected(ins.r), 2);
    EXPECT_STREQ(outbox_rows_command(ins.r), "INSERT 0 2");
    Queried empty(s.db, "  ");
    EXPECT_STREQ(outbox_rows_command(empty.r), "");
    // COPY is refused and ended: the connection goes on.
    for (const char *copy : {"COPY (SELECT 1) TO STDOUT", "COPY sweep_q FROM STDIN"}) {
        outbox_rows *r = nullptr;
        EXPECT_STATUS(outbox_db_query(&r, s.db, copy, nullptr, 0), OUTBOX_ERR_DATABASE);
        EXPECT_EQ(r, nullptr);
        EXPECT_EQ(Queried(s.db, "SELECT 1").st, OUTBOX_OK) << copy << ": " << outbox_last_error();
    }
});
// The caller's statement failing: DATABASE whatever the SQLSTATE, which outbox_last_sqlstate() gives.
Register r_last_sqlstate({"outbox_last_sqlstate"}, [](Sweep &s) {
    const std::vector<std::pair<std::string, const char *>> failing = {
        {"SELECT 1/0", "22012"},      {"SELECT * FROM no_such_table_sweep", "42P01"},
        {"SELEC 1", "42601"},         {"SELECT 'abc'::int", "22P02"},
        {"SELECT $1::text", "22021"}, {kHuge, ""},
        {"SELECT '\xff'", "22021"}};
    const char *const param[] = {"\xff"};
    for (const auto &[sql, state] : failing) {
        outbox_rows *r = nullptr;
        EXPECT_STATUS(outbox_db_query(&r, s.db, sql.c_str(), sql.find('$') != std::string::npos ? param : nullptr,
                                      sql.find('$') != std::string::npos ? 1 : 0),
                      OUTBOX_ERR_DATABASE);
        EXPECT_EQ(r, nullptr);
        if (*state != '\0') {
            EXPECT_STREQ(outbox_last_sqlstate(), state) << sql.substr(0, 40) << ": " << outbox_last_error();
        }
    }
    EXPECT_STATUS(outbox_db_exec(s.db, "SELECT 1/0"), OUTBOX_ERR_DATABASE); // the library's calls set it too
    EXPECT_STREQ(outbox_last_sqlstate(), "22012");
    EXPECT_STATUS(outbox_config_new(nullptr), OUTBOX_ERR_INVALID_ARGUMENT); // not the server's: none
    EXPECT_STREQ(outbox_last_sqlstate(), "");
    ASSERT_EQ(Queried(s.db, "CREATE TEMP TABLE sweep_u (v text UNIQUE)").st, OUTBOX_OK);
    ASSERT_EQ(Queried(s.db, "INSERT INTO sweep_u VALUES ('k')").st, OUTBOX_OK);
    outbox_rows *r = nullptr;
    EXPECT_STATUS(outbox_db_query(&r, s.db, "INSERT INTO sweep_u VALUES ('k')", nullptr, 0), OUTBOX_ERR_DATABASE);
    EXPECT_STREQ(outbox_last_sqlstate(), "23505"); // the caller's unique violation, no reused key
    EXPECT_EQ(Queried(s.db, "SELECT 1").st, OUTBOX_OK);
    EXPECT_STREQ(outbox_last_sqlstate(), ""); // a success clears it
});
// Connections in the wrong state: aborted, lost, never opened.
Register r_db_query({"outbox_db_query"}, [](Sweep &s) {
    outbox_rows *r = nullptr;
    outbox_db *a = s.aborted_db();
    EXPECT_STATUS(outbox_db_query(&r, a, "SELECT 1", nullptr, 0), OUTBOX_ERR_DATABASE);
    EXPECT_STREQ(outbox_last_sqlstate(), "25P02");
    outbox_db_close(a);
    outbox_db *b = nullptr;
    ASSERT_EQ(outbox_db_open(&b, pg_url().c_str(), s.cfg), OUTBOX_OK);
    Queried pid(b, "SELECT pg_backend_pid()");
    s.admin.query("SELECT pg_terminate_backend($1::int)", {pid.value(0, 0)});
    EXPECT_STATUS(outbox_db_query(&r, b, "SELECT 1", nullptr, 0), OUTBOX_ERR_CONNECTION); // found lost here
    EXPECT_STATUS(outbox_db_query(&r, b, "SELECT 1", nullptr, 0), OUTBOX_ERR_CONNECTION); // and known lost
    EXPECT_EQ(r, nullptr);
    outbox_db_close(b);
    PGconn *dead = PQconnectdb("host=127.0.0.1 port=1 connect_timeout=1");
    outbox_db *d = nullptr;
    ASSERT_EQ(outbox_db_wrap(&d, dead, s.cfg), OUTBOX_OK);
    EXPECT_STATUS(outbox_db_query(&r, d, "SELECT 1", nullptr, 0), OUTBOX_ERR_CONNECTION);
    outbox_db_close(d);
    PQfinish(dead);
});
Register r_libpq_version({"outbox_libpq_version"}, [](Sweep &) {
    EXPECT_EQ(outbox_libpq_version(), PQlibVersion());
    EXPECT_GE(outbox_libpq_version(), 100000);
});
Register r_db_tx_state({"outbox_db_tx_state"}, [](Sweep &s) {
    EXPECT_EQ(outbox_db_tx_state(nullptr), OUTBOX_TX_UNKNOWN);
    outbox_db *a = s.aborted_db();
    EXPECT_EQ(outbox_db_tx_state(a), OUTBOX_TX_INERROR);
    outbox_db_close(a);
    outbox_db *b = s.broken_db();
    EXPECT_EQ(outbox_db_tx_state(b), OUTBOX_TX_UNKNOWN);
    outbox_db_close(b);
});
Register r_migrate({"outbox_migrate"}, [](Sweep &s) {
    EXPECT_STATUS(outbox_migrate(nullptr, nullptr, OUTBOX_MIGRATE_ALL), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_migrate(nullptr, s.db, static_cast<outbox_migrate_target>(99)), OUTBOX_ERR_INVALID_ARGUMENT);
    outbox_db *a = s.aborted_db();
    EXPECT_STATUS(outbox_migrate(nullptr, a, OUTBOX_MIGRATE_ALL), OUTBOX_ERR_TRANSACTION);
    outbox_db_close(a);
    outbox_db *b = s.broken_db();
    EXPECT_STATUS(outbox_migrate(nullptr, b, OUTBOX_MIGRATE_ALL), OUTBOX_ERR_CONNECTION);
    outbox_db_close(b);
});

// ---- events, writes, rendered statements --------------------------------------------------------
const char *const kEventFields[] = {"aggregate_type",   "aggregate_id", "operation",   "payload",
                                    "previous_payload", "metadata",     "user",        "event_type",
                                    "idempotency_key",  "event_id",     "force_delete"};

Register r_event_new({"outbox_event_new", "outbox_event_free"}, [](Sweep &) {
    EXPECT_STATUS(outbox_event_new(nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    outbox_event_free(nullptr);
});
Register r_event_set({"outbox_event_set", "outbox_event_set_n"}, [](Sweep &s) {
    outbox_event *ev = s.make_event();
    EXPECT_STATUS(outbox_event_set(nullptr, "user", "x"), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_event_set(ev, nullptr, "x"), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_event_set(ev, "user", nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_event_set(ev, "", "x"), OUTBOX_ERR_UNKNOWN_KEY);
    EXPECT_STATUS(outbox_event_set(ev, kHuge.c_str(), "x"), OUTBOX_ERR_UNKNOWN_KEY);
    EXPECT_STATUS(outbox_event_set(ev, "\xc3\x28", "x"), OUTBOX_ERR_UNKNOWN_KEY);
    EXPECT_STATUS(outbox_event_set_n(nullptr, "user", "x", 1), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_event_set_n(ev, nullptr, "x", 1), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_event_set_n(ev, "user", nullptr, 5), OUTBOX_ERR_INVALID_ARGUMENT);
    for (const char *f : kEventFields) {
        for (const char *bad : kBadUtf8) {
            EXPECT_STATUS(outbox_event_set(ev, f, bad), OUTBOX_ERR_INVALID_EVENT);
            EXPECT_STATUS(outbox_event_set_n(ev, f, bad, std::strlen(bad)), OUTBOX_ERR_INVALID_EVENT);
        }
        EXPECT_STATUS(outbox_event_set_n(ev, f, "a\0b", 3), OUTBOX_ERR_INVALID_EVENT);
    }
    // The builder still holds its good values: the rejected sets changed nothing.
    EXPECT_STATUS(outbox_write(s.db, ev), OUTBOX_OK);
    // Empty and huge values pass the setter (they are text) and are refused by the write, with
    // nothing sent to the database.
    struct Want {
        const char *field;
        outbox_status empty;
        outbox_status huge;
    };
    for (const Want &w : {Want{"aggregate_type", OUTBOX_ERR_INVALID_EVENT, OUTBOX_ERR_INVALID_EVENT},
                          Want{"aggregate_id", OUTBOX_ERR_INVALID_EVENT, OUTBOX_ERR_INVALID_EVENT},
                          Want{"operation", OUTBOX_ERR_INVALID_EVENT, OUTBOX_ERR_INVALID_EVENT},
                          Want{"payload", OUTBOX_ERR_INVALID_EVENT, OUTBOX_ERR_TOO_LARGE},
                          Want{"previous_payload", OUTBOX_ERR_INVALID_EVENT, OUTBOX_ERR_TOO_LARGE},
                          Want{"metadata", OUTBOX_ERR_INVALID_EVENT, OUTBOX_ERR_TOO_LARGE},
                          Want{"user", OUTBOX_OK, OUTBOX_ERR_INVALID_EVENT},
                          Want{"event_type", OUTBOX_ERR_INVALID_EVENT, OUTBOX_ERR_INVALID_EVENT},
                          Want{"idempotency_key", OUTBOX_ERR_INVALID_EVENT, OUTBOX_ERR_INVALID_EVENT},
                          Want{"event_id", OUTBOX_ERR_INVALID_EVENT, OUTBOX_ERR_INVALID_EVENT},
                          Want{"force_delete", OUTBOX_ERR_INVALID_EVENT, OUTBOX_ERR_INVALID_EVENT}}) {
        for (int huge = 0; huge < 2; ++huge) {
            outbox_event *e = s.make_event("sweep-" + std::string(w.field));
            const outbox_status set = outbox_event_set(e, w.field, huge ? kHuge.c_str() : "");
            const outbox_status want = huge ? w.huge : w.empty;
            if (set == OUTBOX_OK) {
                EXPECT_STATUS(outbox_write(s.db, e), want);
            } else {
                EXPECT_EQ(set, want) << w.field << (huge ? " huge" : " empty") << ": " << outbox_last_error();
            }
            outbox_event_free(e);
        }
    }
    EXPECT_EQ(s.count("aggregate_id LIKE 'sweep-%'"), 1) << "only the 'user' = '' event was written";
    outbox_event_free(ev);
});
Register r_event_unset({"outbox_event_unset"}, [](Sweep &s) {
    outbox_event *ev = s.make_event();
    EXPECT_STATUS(outbox_event_unset(nullptr, "user"), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_event_unset(ev, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_event_unset(ev, ""), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_event_unset(ev, kHuge.c_str()), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_event_unset(ev, "\xff"), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_event_unset(ev, "payload"), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_event_unset(ev, "user"), OUTBOX_OK);
    outbox_event_free(ev);
});
Register r_event_getters({"outbox_event_id", "outbox_event_type", "outbox_event_seq"}, [](Sweep &s) {
    EXPECT_EQ(outbox_event_id(nullptr), nullptr);
    EXPECT_EQ(outbox_event_type(nullptr), nullptr);
    EXPECT_EQ(outbox_event_seq(nullptr), 0);
    outbox_event *ev = s.make_event();
    EXPECT_EQ(outbox_event_id(ev), nullptr) << "no id before a write";
    EXPECT_EQ(outbox_event_seq(ev), 0);
    outbox_event_free(ev);
});
Register r_write({"outbox_write"}, [](Sweep &s) {
    outbox_event *ev = s.make_event();
    EXPECT_STATUS(outbox_write(nullptr, ev), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_write(s.db, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    outbox_db *a = s.aborted_db();
    EXPECT_STATUS(outbox_write(a, ev), OUTBOX_ERR_TRANSACTION);
    outbox_db_close(a);
    outbox_db *b = s.broken_db();
    EXPECT_STATUS(outbox_write(b, ev), OUTBOX_ERR_CONNECTION);
    outbox_db_close(b);
    outbox_event *empty = nullptr;
    ASSERT_EQ(outbox_event_new(&empty), OUTBOX_OK);
    EXPECT_STATUS(outbox_write(s.db, empty), OUTBOX_ERR_INVALID_EVENT);
    outbox_event_free(empty);
    outbox_event_free(ev);
    EXPECT_EQ(s.count(), 0);
});
Register r_write_nonblocking({"outbox_db_socket", "outbox_write_send", "outbox_write_poll"}, [](Sweep &s) {
    EXPECT_EQ(outbox_db_socket(nullptr), -1);
    EXPECT_GE(outbox_db_socket(s.db), 0);
    outbox_event *ev = s.make_event();
    outbox_write_wait wait = OUTBOX_WRITE_READABLE;
    EXPECT_STATUS(outbox_write_send(nullptr, s.db, ev), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_write_send(&wait, nullptr, ev), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(wait, OUTBOX_WRITE_DONE) << "*wait is set before the other arguments are checked";
    EXPECT_STATUS(outbox_write_send(&wait, s.db, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_write_poll(nullptr, s.db, ev), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_write_poll(&wait, nullptr, ev), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_write_poll(&wait, s.db, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_write_poll(&wait, s.db, ev), OUTBOX_ERR_INVALID_ARGUMENT); // nothing sent
    EXPECT_EQ(wait, OUTBOX_WRITE_DONE);
    outbox_db *a = s.aborted_db();
    EXPECT_STATUS(outbox_write_send(&wait, a, ev), OUTBOX_ERR_TRANSACTION);
    outbox_db_close(a);
    outbox_db *b = s.broken_db();
    EXPECT_STATUS(outbox_write_send(&wait, b, ev), OUTBOX_ERR_CONNECTION);
    EXPECT_EQ(outbox_db_socket(b), -1) << "a lost connection has no socket";
    outbox_db_close(b);
    outbox_event *empty = nullptr;
    ASSERT_EQ(outbox_event_new(&empty), OUTBOX_OK);
    EXPECT_STATUS(outbox_write_send(&wait, s.db, empty), OUTBOX_ERR_INVALID_EVENT);
    EXPECT_EQ(wait, OUTBOX_WRITE_DONE);
    outbox_event_free(empty);
    outbox_event_free(ev);
    ev = s.make_event();
    ASSERT_EQ(outbox_event_set(ev, "idempotency_key", "k"), OUTBOX_OK);
    EXPECT_STATUS(outbox_write_send(&wait, s.db, ev), OUTBOX_OK);
    EXPECT_EQ(wait, OUTBOX_WRITE_BLOCKING);
    EXPECT_EQ(outbox_event_id(ev), nullptr) << "nothing done";
    outbox_event_free(ev);
    EXPECT_EQ(s.count(), 0);
});
Register r_render({"outbox_render_write", "outbox_statement_free", "outbox_statement_sql",
                   "outbox_statement_param_count", "outbox_statement_param", "outbox_statement_json"},
                  [](Sweep &s) {
                      outbox_statement *st = reinterpret_cast<outbox_statement *>(0x1);
                      outbox_event *ev = s.make_event();
                      EXPECT_STATUS(outbox_render_write(nullptr, s.cfg, ev), OUTBOX_ERR_INVALID_ARGUMENT);
                      EXPECT_STATUS(outbox_render_write(&st, s.cfg, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
                      EXPECT_EQ(st, nullptr);
                      outbox_event *empty = nullptr;
                      ASSERT_EQ(outbox_event_new(&empty), OUTBOX_OK);
                      EXPECT_STATUS(outbox_render_write(&st, nullptr, empty), OUTBOX_ERR_INVALID_EVENT);
                      outbox_event_free(empty);
                      EXPECT_EQ(outbox_statement_sql(nullptr), nullptr);
                      EXPECT_EQ(outbox_statement_param_count(nullptr), 0U);
                      EXPECT_EQ(outbox_statement_param(nullptr, 0), nullptr);
                      outbox_statement_free(nullptr);
                      char *json = reinterpret_cast<char *>(0x1);
                      EXPECT_STATUS(outbox_statement_json(nullptr, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
                      EXPECT_STATUS(outbox_statement_json(&json, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
                      EXPECT_EQ(json, nullptr);
                      ASSERT_EQ(outbox_render_write(&st, nullptr, ev), OUTBOX_OK);
                      EXPECT_EQ(outbox_statement_param(st, outbox_statement_param_count(st)), nullptr);
                      EXPECT_EQ(outbox_statement_param(st, SIZE_MAX), nullptr);
                      outbox_statement_free(st);
                      outbox_event_free(ev);
                  });

// ---- shared rules (rules-c.cpp) -------------------------------------------------------------------
Register r_event_field({"outbox_event_field"}, [](Sweep &) {
    EXPECT_EQ(outbox_event_field(nullptr, nullptr, 0), OUTBOX_OK) << "both outputs may be NULL";
    EXPECT_STATUS(outbox_event_field(nullptr, nullptr, SIZE_MAX), OUTBOX_ERR_NOT_FOUND);
    const char *name = reinterpret_cast<const char *>(0x1);
    outbox_field_kind kind = OUTBOX_FIELD_FLAG;
    EXPECT_STATUS(outbox_event_field(&name, &kind, 100000), OUTBOX_ERR_NOT_FOUND);
});
Register r_envelope_field({"outbox_envelope_field"}, [](Sweep &) {
    EXPECT_EQ(outbox_envelope_field(nullptr, nullptr, 0), OUTBOX_OK) << "both outputs may be NULL";
    EXPECT_STATUS(outbox_envelope_field(nullptr, nullptr, SIZE_MAX), OUTBOX_ERR_NOT_FOUND);
    std::vector<std::string> names;
    const char *name = nullptr;
    outbox_field_kind kind = OUTBOX_FIELD_FLAG;
    for (size_t i = 0; outbox_envelope_field(&name, &kind, i) == OUTBOX_OK; ++i) {
        names.emplace_back(name);
        EXPECT_EQ(kind, names.back() == "PAYLOAD" || names.back() == "PREVIOUS_PAYLOAD" || names.back() == "METADATA"
                            ? OUTBOX_FIELD_JSON
                            : OUTBOX_FIELD_TEXT)
            << name;
    }
    EXPECT_EQ(names, (std::vector<std::string>{"OUTBOX_ID", "EVENT_TYPE", "AGGREGATE_ID", "AGGREGATE_TYPE", "OPERATION",
                                               "PAYLOAD", "PREVIOUS_PAYLOAD", "METADATA", "USER", "CREATED_AT"}));
});
Register r_loop_sql_text({"outbox_loop_sql_text"}, [](Sweep &) {
    EXPECT_STREQ(outbox_loop_sql_text(OUTBOX_LOOP_SQL_BEGIN), "BEGIN");
    EXPECT_STREQ(outbox_loop_sql_text(OUTBOX_LOOP_SQL_COMMIT), "COMMIT");
    EXPECT_STREQ(outbox_loop_sql_text(OUTBOX_LOOP_SQL_ROLLBACK), "ROLLBACK");
    EXPECT_EQ(outbox_loop_sql_text(OUTBOX_LOOP_SQL_DEDUPE), nullptr);
    EXPECT_EQ(outbox_loop_sql_text(static_cast<outbox_loop_sql>(99)), nullptr);
});
Register r_param_name({"outbox_statement_param_name"}, [](Sweep &s) {
    EXPECT_EQ(outbox_statement_param_name(nullptr, 0), nullptr);
    outbox_statement *st = nullptr;
    outbox_event *ev = s.make_event();
    ASSERT_EQ(outbox_render_write(&st, nullptr, ev), OUTBOX_OK);
    EXPECT_EQ(outbox_statement_param_name(st, 0), nullptr) << "dollar is positional";
    outbox_statement_free(st);
    outbox_config *named = nullptr;
    ASSERT_EQ(outbox_config_new(&named), OUTBOX_OK);
    ASSERT_EQ(outbox_config_set(named, "render.placeholders", "named"), OUTBOX_OK);
    ASSERT_EQ(outbox_render_write(&st, named, ev), OUTBOX_OK);
    EXPECT_STREQ(outbox_statement_param_name(st, 0), "p1");
    EXPECT_EQ(outbox_statement_param_name(st, outbox_statement_param_count(st)), nullptr);
    EXPECT_EQ(outbox_statement_param_name(st, SIZE_MAX), nullptr);
    outbox_statement_free(st);
    outbox_config_free(named);
    outbox_event_free(ev);
});
Register r_sqlstate({"outbox_status_for_sqlstate"}, [](Sweep &) {
    EXPECT_EQ(outbox_status_for_sqlstate(nullptr), OUTBOX_ERR_DATABASE);
    EXPECT_EQ(outbox_status_for_sqlstate(""), OUTBOX_ERR_DATABASE);
    EXPECT_EQ(outbox_status_for_sqlstate(kHuge.c_str()), OUTBOX_ERR_DATABASE);
    for (const char *bad : kBadUtf8) {
        EXPECT_EQ(outbox_status_for_sqlstate(bad), OUTBOX_ERR_DATABASE) << bad;
    }
    EXPECT_EQ(outbox_status_for_sqlstate("23505"), OUTBOX_ERR_DUPLICATE);
});
Register r_driver_error({"outbox_driver_error"}, [](Sweep &) {
    EXPECT_STATUS(outbox_driver_error(nullptr, nullptr, nullptr, 0), OUTBOX_ERR_DATABASE);
    EXPECT_STREQ(outbox_last_error(), "outbox: ");
    EXPECT_STATUS(outbox_driver_error("", "", "gone", 1), OUTBOX_ERR_CONNECTION);
    EXPECT_STATUS(outbox_driver_error("x", kHuge.c_str(), kHuge.c_str(), 0), OUTBOX_ERR_DATABASE);
    for (const char *bad : kBadUtf8) {
        EXPECT_STATUS(outbox_driver_error(bad, bad, bad, 0), OUTBOX_ERR_DATABASE);
    }
    EXPECT_STATUS(outbox_driver_error("outbox dedupe", "25P02", "aborted", 1), OUTBOX_ERR_TRANSACTION);
    EXPECT_STREQ(outbox_last_error(),
                 "outbox dedupe: aborted (SQLSTATE 25P02); the caller's transaction is aborted: roll it back first");
});
Register r_idempotency_index({"outbox_idempotency_index"}, [](Sweep &s) {
    char *name = reinterpret_cast<char *>(0x1);
    EXPECT_STATUS(outbox_idempotency_index(nullptr, s.cfg), OUTBOX_ERR_INVALID_ARGUMENT);
    ASSERT_EQ(outbox_idempotency_index(&name, nullptr), OUTBOX_OK);
    EXPECT_STREQ(name, "outbox_idempotency_key_idx");
    outbox_string_free(name);
});
Register r_db_open_config({"outbox_db_open_config"}, [](Sweep &s) {
    outbox_db *d = reinterpret_cast<outbox_db *>(0x1);
    EXPECT_STATUS(outbox_db_open_config(nullptr, s.cfg), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_db_open_config(&d, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(d, nullptr);
    outbox_config *c = nullptr;
    ASSERT_EQ(outbox_config_new(&c), OUTBOX_OK);
    d = reinterpret_cast<outbox_db *>(0x1);
    EXPECT_STATUS(outbox_db_open_config(&d, c), OUTBOX_ERR_INVALID_ARGUMENT); // no pg.url
    EXPECT_EQ(d, nullptr);
    ASSERT_EQ(outbox_config_set(c, "pg.url", "postgresql://u:pw@127.0.0.1:1/x?connect_timeout=1"), OUTBOX_OK);
    EXPECT_STATUS(outbox_db_open_config(&d, c), OUTBOX_ERR_CONNECTION);
    EXPECT_EQ(std::string(outbox_last_error()).find("pw@"), std::string::npos) << outbox_last_error();
    ASSERT_EQ(outbox_config_set(c, "pg.url", pg_url().c_str()), OUTBOX_OK);
    ASSERT_EQ(outbox_db_open_config(&d, c), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(outbox_db_exec(d, "SELECT 1"), OUTBOX_OK);
    outbox_db_close(d);
    outbox_config_free(c);
});
Register r_config_from_env({"outbox_config_from_env"}, [](Sweep &) {
    EXPECT_STATUS(outbox_config_from_env(nullptr, 0), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_config_from_env(nullptr, 1), OUTBOX_ERR_INVALID_ARGUMENT);
});

// ---- relay --------------------------------------------------------------------------------------
Register r_relay_new({"outbox_relay_new", "outbox_relay_free"}, [](Sweep &s) {
    outbox_relay *r = reinterpret_cast<outbox_relay *>(0x1);
    EXPECT_STATUS(outbox_relay_new(nullptr, s.cfg), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_relay_new(&r, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(r, nullptr);
    outbox_config *no_pg = nullptr;
    ASSERT_EQ(outbox_config_new(&no_pg), OUTBOX_OK);
    EXPECT_STATUS(outbox_relay_new(&r, no_pg), OUTBOX_ERR_INVALID_ARGUMENT);
    outbox_config_free(no_pg);
    outbox_relay_free(nullptr);
});
Register
    r_relay_calls({"outbox_relay_set_logger", "outbox_relay_step", "outbox_relay_run", "outbox_relay_stop",
                   "outbox_relay_reset", "outbox_relay_settle"},
                  [](Sweep &s) {
                      EXPECT_STATUS(outbox_relay_settle(nullptr, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
                      EXPECT_STATUS(outbox_relay_set_logger(nullptr, nullptr, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
                      EXPECT_STATUS(outbox_relay_step(nullptr, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
                      EXPECT_STATUS(outbox_relay_run(nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
                      EXPECT_STATUS(outbox_relay_reset(nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
                      outbox_relay_stop(nullptr);
                      outbox_relay *r = nullptr;
                      ASSERT_EQ(outbox_relay_new(&r, s.cfg), OUTBOX_OK);
                      EXPECT_STATUS(outbox_relay_set_logger(r, nullptr, nullptr), OUTBOX_OK);
                      outbox_relay_stats st{};
                      st.size = 0; // not initialised
                      EXPECT_STATUS(outbox_relay_step(r, &st), OUTBOX_ERR_INVALID_ARGUMENT);
                      EXPECT_STATUS(outbox_relay_settle(r, &st), OUTBOX_ERR_INVALID_ARGUMENT);
                      EXPECT_STATUS(outbox_relay_settle(r, nullptr), OUTBOX_OK); // nothing in flight
                      // Stopped: a step reads and publishes nothing; run returns at once.
                      outbox_event *ev = s.make_event("relay-stopped");
                      ASSERT_EQ(outbox_write(s.db, ev), OUTBOX_OK);
                      outbox_relay_stop(r);
                      outbox_relay_stats_init(&st);
                      EXPECT_STATUS(outbox_relay_step(r, &st), OUTBOX_OK);
                      EXPECT_EQ(st.published, 0);
                      EXPECT_STATUS(outbox_relay_run(r), OUTBOX_OK);
                      EXPECT_EQ(s.count("status = 'PENDING'"), 1);
                      EXPECT_STATUS(outbox_relay_reset(r), OUTBOX_OK);
                      outbox_relay_free(r);
                      // A relay whose servers are unreachable: precise errors, step after step.
                      outbox_config *bad = nullptr;
                      ASSERT_EQ(outbox_config_new(&bad), OUTBOX_OK);
                      ASSERT_EQ(outbox_config_set(bad, "pg.url", "postgresql://u:pw@127.0.0.1:1/x?connect_timeout=1"),
                                OUTBOX_OK);
                      EXPECT_STATUS(outbox_relay_new(&r, bad), OUTBOX_ERR_INVALID_ARGUMENT); // no amqp.url
                      ASSERT_EQ(outbox_config_set(bad, "amqp.url", amqp_url().c_str()), OUTBOX_OK);
                      ASSERT_EQ(outbox_relay_new(&r, bad), OUTBOX_OK);
                      EXPECT_STATUS(outbox_relay_step(r, nullptr), OUTBOX_ERR_CONNECTION);
                      EXPECT_STATUS(outbox_relay_step(r, nullptr), OUTBOX_ERR_CONNECTION);
                      outbox_relay_free(r);
                      ASSERT_EQ(outbox_config_set(bad, "pg.url", pg_url().c_str()), OUTBOX_OK);
                      ASSERT_EQ(outbox_config_set(bad, "outbox.schema", s.schema.c_str()), OUTBOX_OK);
                      ASSERT_EQ(outbox_config_set(bad, "amqp.url", "amqp://u:pw@127.0.0.1:1/%2f"), OUTBOX_OK);
                      ASSERT_EQ(outbox_config_set(bad, "amqp.connect_timeout_ms", "1000"), OUTBOX_OK);
                      ASSERT_EQ(outbox_relay_new(&r, bad), OUTBOX_OK);
                      EXPECT_STATUS(outbox_relay_step(r, nullptr), OUTBOX_ERR_CONNECTION);
                      outbox_relay_free(r);
                      ASSERT_EQ(outbox_config_set(bad, "amqp.url", "notaurl://\xff"), OUTBOX_ERR_INVALID_ARGUMENT);
                      ASSERT_EQ(outbox_config_set(bad, "amqp.url", "notaurl://x"), OUTBOX_OK);
                      ASSERT_EQ(outbox_relay_new(&r, bad), OUTBOX_OK);
                      EXPECT_STATUS(outbox_relay_step(r, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
                      outbox_relay_free(r);
                      outbox_config_free(bad);
                      outbox_event_free(ev);
                  });

// ---- dedupe and the inbox -----------------------------------------------------------------------
Register r_dedupe_interpret_row({"outbox_dedupe_interpret_row"}, [](Sweep &s) {
    outbox_dedupe_result r;
    outbox_dedupe_result_init(&r);
    EXPECT_STATUS(outbox_dedupe_interpret_row(nullptr, s.cfg, "PRD", "1", 2, "t", "1"), OUTBOX_ERR_INVALID_ARGUMENT);
    outbox_dedupe_result zero{};
    EXPECT_STATUS(outbox_dedupe_interpret_row(&zero, s.cfg, "PRD", "1", 2, "t", "1"), OUTBOX_ERR_INVALID_ARGUMENT);
    for (const char *yes : {"t", "TRUE", "True", "1"}) {
        ASSERT_EQ(outbox_dedupe_interpret_row(&r, nullptr, "PRD", "1", 2, yes, "1"), OUTBOX_OK) << yes;
        EXPECT_EQ(r.first_time, 1) << yes;
        EXPECT_EQ(r.order, OUTBOX_ORDER_IN_ORDER) << yes;
    }
    for (const char *no : {"f", "false", "0"}) {
        ASSERT_EQ(outbox_dedupe_interpret_row(&r, nullptr, "PRD", "1", 2, no, "1"), OUTBOX_OK) << no;
        EXPECT_EQ(r.first_time, 0) << no;
    }
    ASSERT_EQ(outbox_dedupe_interpret_row(&r, nullptr, "PRD", "1", 5, "t", "1"), OUTBOX_OK);
    EXPECT_EQ(r.order, OUTBOX_ORDER_GAP);
    ASSERT_EQ(outbox_dedupe_interpret_row(&r, nullptr, "PRD", "1", 1, "t", nullptr), OUTBOX_OK); // NULL: the first
    EXPECT_EQ(r.previous_seq, 0);
    EXPECT_STATUS(outbox_dedupe_interpret_row(&r, nullptr, "PRD", "1", 2, "yes please", "1"),
                  OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_dedupe_interpret_row(&r, nullptr, "PRD", "1", 2, nullptr, "1"), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_dedupe_interpret_row(&r, nullptr, "PRD", "1", 2, "t", "12x"), OUTBOX_ERR_INVALID_ARGUMENT);
});
Register r_dedupe_interpret({"outbox_dedupe_interpret"}, [](Sweep &s) {
    outbox_dedupe_result r;
    outbox_dedupe_result_init(&r);
    EXPECT_STATUS(outbox_dedupe_interpret(nullptr, s.cfg, "PRD", "1", 2, 1, 1), OUTBOX_ERR_INVALID_ARGUMENT);
    outbox_dedupe_result zero{};
    EXPECT_STATUS(outbox_dedupe_interpret(&zero, s.cfg, "PRD", "1", 2, 1, 1), OUTBOX_ERR_INVALID_ARGUMENT);
    ASSERT_EQ(outbox_dedupe_interpret(&r, nullptr, "PRD", "1", 2, 1, 1), OUTBOX_OK);
    EXPECT_EQ(r.first_time, 1);
    EXPECT_EQ(r.order, OUTBOX_ORDER_IN_ORDER);
    EXPECT_EQ(r.previous_seq, 1);
    ASSERT_EQ(outbox_dedupe_interpret(&r, nullptr, "PRD", "1", 5, 1, 1), OUTBOX_OK);
    EXPECT_EQ(r.order, OUTBOX_ORDER_GAP);
    ASSERT_EQ(outbox_dedupe_interpret(&r, nullptr, "PRD", "1", 1, 1, 1), OUTBOX_OK);
    EXPECT_EQ(r.order, OUTBOX_ORDER_STALE);
    ASSERT_EQ(outbox_dedupe_interpret(&r, nullptr, "PRD", "1", 1, 1, -1),
              OUTBOX_OK); // NULL: the first of its aggregate
    EXPECT_EQ(r.order, OUTBOX_ORDER_IN_ORDER);
    EXPECT_EQ(r.previous_seq, 0);
    ASSERT_EQ(outbox_dedupe_interpret(&r, nullptr, "PRD", "1", 2, 0, 1), OUTBOX_OK); // a duplicate: unchecked
    EXPECT_EQ(r.first_time, 0);
    EXPECT_EQ(r.order, OUTBOX_ORDER_UNCHECKED);
    ASSERT_EQ(outbox_dedupe_interpret(&r, nullptr, nullptr, nullptr, 2, 1, -1), OUTBOX_OK); // no aggregate: unchecked
    EXPECT_EQ(r.order, OUTBOX_ORDER_UNCHECKED);
});

Register r_dedupe({"outbox_consumer_dedupe", "outbox_render_dedupe"}, [](Sweep &s) {
    outbox_dedupe_result r;
    outbox_dedupe_result_init(&r);
    EXPECT_STATUS(outbox_consumer_dedupe(&r, nullptr, "c", kId.c_str(), "PRD", "1", 1), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_consumer_dedupe(&r, s.db, nullptr, kId.c_str(), "PRD", "1", 1), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_consumer_dedupe(&r, s.db, "c", nullptr, "PRD", "1", 1), OUTBOX_ERR_INVALID_ARGUMENT);
    outbox_statement *st = reinterpret_cast<outbox_statement *>(0x1);
    EXPECT_STATUS(outbox_render_dedupe(nullptr, s.cfg, "c", kId.c_str(), "PRD", "1", 1), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_render_dedupe(&st, s.cfg, nullptr, kId.c_str(), "PRD", "1", 1), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_render_dedupe(&st, s.cfg, "c", nullptr, "PRD", "1", 1), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(st, nullptr);
    const std::string long_name(256, 'c');
    struct Bad {
        const char *consumer, *id, *type, *agg;
        int64_t seq;
    };
    for (const Bad &b :
         {Bad{"", kId.c_str(), "PRD", "1", 1}, Bad{long_name.c_str(), kId.c_str(), "PRD", "1", 1},
          Bad{kHuge.c_str(), kId.c_str(), "PRD", "1", 1}, Bad{"\xc3\x28", kId.c_str(), "PRD", "1", 1},
          Bad{"c", "", "PRD", "1", 1}, Bad{"c", kHuge.c_str(), "PRD", "1", 1}, Bad{"c", "\xff", "PRD", "1", 1},
          Bad{"c", "not-a-uuid", "PRD", "1", 1}, Bad{"c", kId.c_str(), "\xff", "1", 1},
          Bad{"c", kId.c_str(), "PRD", "\xed\xa0\x80", 1}, Bad{"c", kId.c_str(), "PRD", "1", -1}}) {
        EXPECT_STATUS(outbox_consumer_dedupe(&r, s.db, b.consumer, b.id, b.type, b.agg, b.seq),
                      OUTBOX_ERR_INVALID_ARGUMENT);
        EXPECT_STATUS(outbox_render_dedupe(&st, s.cfg, b.consumer, b.id, b.type, b.agg, b.seq),
                      OUTBOX_ERR_INVALID_ARGUMENT);
        EXPECT_EQ(st, nullptr);
    }
    outbox_dedupe_result zero{};
    EXPECT_STATUS(outbox_consumer_dedupe(&zero, s.db, "c", kId.c_str(), "PRD", "1", 1), OUTBOX_ERR_INVALID_ARGUMENT);
    outbox_db *a = s.aborted_db();
    EXPECT_STATUS(outbox_consumer_dedupe(&r, a, "c", kId.c_str(), "PRD", "1", 1), OUTBOX_ERR_TRANSACTION);
    outbox_db_close(a);
    outbox_db *b = s.broken_db();
    EXPECT_STATUS(outbox_consumer_dedupe(&r, b, "c", kId.c_str(), "PRD", "1", 1), OUTBOX_ERR_CONNECTION);
    outbox_db_close(b);
    // NULL type and id are allowed: no order check.
    EXPECT_STATUS(outbox_consumer_dedupe(&r, s.db, "c", kId.c_str(), nullptr, nullptr, 0), OUTBOX_OK);
    // Outside a transaction the row commits at once (documented: it then gives up exactly-once).
    EXPECT_EQ(s.admin.scalar("SELECT count(*) FROM \"" + s.schema + "\".outbox_inbox"), "1");
    EXPECT_STATUS(outbox_consumer_dedupe(&r, s.db, "c", kId.c_str(), nullptr, nullptr, 0), OUTBOX_OK);
    EXPECT_EQ(r.first_time, 0);
    // Not migrated: a schema error.
    outbox_config *other = nullptr;
    ASSERT_EQ(outbox_config_new(&other), OUTBOX_OK);
    ASSERT_EQ(outbox_config_set(other, "outbox.schema", s.schema.c_str()), OUTBOX_OK);
    ASSERT_EQ(outbox_config_set(other, "inbox.table", "never_migrated"), OUTBOX_OK);
    outbox_db *d2 = nullptr;
    ASSERT_EQ(outbox_db_open(&d2, pg_url().c_str(), other), OUTBOX_OK);
    EXPECT_STATUS(outbox_consumer_dedupe(&r, d2, "c", kId.c_str(), nullptr, nullptr, 0), OUTBOX_ERR_SCHEMA);
    outbox_db_close(d2);
    outbox_config_free(other);
});
Register r_inbox_purge({"outbox_inbox_purge"}, [](Sweep &s) {
    int64_t n = -1;
    EXPECT_STATUS(outbox_inbox_purge(&n, nullptr, 99999999, 10), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_inbox_purge(&n, s.db, 10, 10), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_inbox_purge(&n, s.db, -1, 10), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_inbox_purge(&n, s.db, 99999999, 0), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_inbox_purge(&n, s.db, INT64_MAX, -5), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_inbox_purge(nullptr, s.db, INT64_MAX, 10), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_inbox_purge(nullptr, s.db, 99999999, 10), OUTBOX_OK);
    outbox_db *b = s.broken_db();
    EXPECT_STATUS(outbox_inbox_purge(&n, b, 99999999, 10), OUTBOX_ERR_CONNECTION);
    outbox_db_close(b);
});

// ---- the consumer -------------------------------------------------------------------------------
Register r_consumer_new({"outbox_consumer_new", "outbox_consumer_free", "outbox_consumer_connect"}, [](Sweep &s) {
    outbox_consumer *c = reinterpret_cast<outbox_consumer *>(0x1);
    EXPECT_STATUS(outbox_consumer_new(nullptr, s.cfg, "c"), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_consumer_new(&c, nullptr, "c"), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_consumer_new(&c, s.cfg, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(c, nullptr);
    for (const char *bad : {"", kHuge.c_str(), "\xc3\x28", "\xed\xa0\x80", "line\nbreak", "amq.reserved"}) {
        EXPECT_STATUS(outbox_consumer_new(&c, s.cfg, bad), OUTBOX_ERR_INVALID_ARGUMENT);
        EXPECT_EQ(c, nullptr);
    }
    outbox_consumer_free(nullptr);
    EXPECT_STATUS(outbox_consumer_connect(nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    outbox_config *bad = nullptr;
    ASSERT_EQ(outbox_config_new(&bad), OUTBOX_OK);
    ASSERT_EQ(outbox_config_set(bad, "amqp.url", "amqp://u:pw@127.0.0.1:1/%2f"), OUTBOX_OK);
    ASSERT_EQ(outbox_config_set(bad, "amqp.connect_timeout_ms", "1000"), OUTBOX_OK);
    ASSERT_EQ(outbox_consumer_new(&c, bad, "sweep-unreachable"), OUTBOX_OK);
    EXPECT_STATUS(outbox_consumer_connect(c), OUTBOX_ERR_CONNECTION);
    outbox_message *m = reinterpret_cast<outbox_message *>(0x1);
    EXPECT_STATUS(outbox_consumer_next(&m, c, 100), OUTBOX_ERR_CONNECTION);
    EXPECT_EQ(m, nullptr);
    outbox_consumer_free(c);
    outbox_config_free(bad);
});
Register r_consumer_msgs(
    {"outbox_consumer_next", "outbox_consumer_ack", "outbox_consumer_nack", "outbox_consumer_dead_letter",
     "outbox_consumer_dedupe_message", "outbox_consumer_begin", "outbox_consumer_stop", "outbox_consumer_reset",
     "outbox_consumer_set_logger"},
    [](Sweep &s) {
        outbox_message *m = reinterpret_cast<outbox_message *>(0x1);
        EXPECT_STATUS(outbox_consumer_next(nullptr, nullptr, 0), OUTBOX_ERR_INVALID_ARGUMENT);
        EXPECT_STATUS(outbox_consumer_next(&m, nullptr, 0), OUTBOX_ERR_INVALID_ARGUMENT);
        EXPECT_EQ(m, nullptr);
        EXPECT_STATUS(outbox_consumer_reset(nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
        EXPECT_STATUS(outbox_consumer_set_logger(nullptr, nullptr, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
        outbox_consumer_stop(nullptr);
        ASSERT_NO_FATAL_FAILURE(s.deliver());
        outbox_consumer *c = s.consumer;
        EXPECT_STATUS(outbox_consumer_set_logger(c, nullptr, nullptr), OUTBOX_OK);
        EXPECT_STATUS(outbox_consumer_ack(nullptr, s.msg), OUTBOX_ERR_INVALID_ARGUMENT);
        EXPECT_STATUS(outbox_consumer_ack(c, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
        EXPECT_STATUS(outbox_consumer_nack(nullptr, s.msg, 1), OUTBOX_ERR_INVALID_ARGUMENT);
        EXPECT_STATUS(outbox_consumer_nack(c, nullptr, 1), OUTBOX_ERR_INVALID_ARGUMENT);
        EXPECT_STATUS(outbox_consumer_dead_letter(nullptr, s.msg, "r"), OUTBOX_ERR_INVALID_ARGUMENT);
        EXPECT_STATUS(outbox_consumer_dead_letter(c, nullptr, "r"), OUTBOX_ERR_INVALID_ARGUMENT);
        EXPECT_STATUS(outbox_consumer_dead_letter(c, s.msg, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
        outbox_dedupe_result r;
        outbox_dedupe_result_init(&r);
        EXPECT_STATUS(outbox_consumer_dedupe_message(&r, nullptr, c, s.msg), OUTBOX_ERR_INVALID_ARGUMENT);
        EXPECT_STATUS(outbox_consumer_dedupe_message(&r, s.db, nullptr, s.msg), OUTBOX_ERR_INVALID_ARGUMENT);
        EXPECT_STATUS(outbox_consumer_dedupe_message(&r, s.db, c, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
        outbox_dedupe_result zero{};
        EXPECT_STATUS(outbox_consumer_dedupe_message(&zero, s.db, c, s.msg), OUTBOX_ERR_INVALID_ARGUMENT);
        EXPECT_STATUS(outbox_consumer_begin(&r, nullptr, c, s.msg), OUTBOX_ERR_INVALID_ARGUMENT);
        EXPECT_STATUS(outbox_consumer_begin(&r, s.db, nullptr, s.msg), OUTBOX_ERR_INVALID_ARGUMENT);
        EXPECT_STATUS(outbox_consumer_begin(&r, s.db, c, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
        EXPECT_STATUS(outbox_consumer_begin(&zero, s.db, c, s.msg), OUTBOX_ERR_INVALID_ARGUMENT);
        outbox_db *a = s.aborted_db();
        EXPECT_STATUS(outbox_consumer_dedupe_message(&r, a, c, s.msg), OUTBOX_ERR_TRANSACTION);
        // begin opens the transaction itself: an aborted one is refused, untouched.
        EXPECT_STATUS(outbox_consumer_begin(&r, a, c, s.msg), OUTBOX_ERR_TRANSACTION);
        EXPECT_EQ(PQtransactionStatus(static_cast<PGconn *>(outbox_db_pgconn(a))), PQTRANS_INERROR);
        outbox_db_close(a);
        // A message acked through a consumer that never connected: a
        // connection error, the message is redelivered to its own consumer.
        outbox_consumer *other = nullptr;
        ASSERT_EQ(outbox_consumer_new(&other, s.cfg, "sweep-other"), OUTBOX_OK);
        EXPECT_STATUS(outbox_consumer_ack(other, s.msg), OUTBOX_ERR_CONNECTION);
        EXPECT_STATUS(outbox_consumer_nack(other, s.msg, 1), OUTBOX_ERR_CONNECTION);
        EXPECT_STATUS(outbox_consumer_dead_letter(other, s.msg, "r"), OUTBOX_ERR_CONNECTION);
        outbox_consumer_free(other);
        // A 16 MiB reason with invalid UTF-8 in it: shortened to printable
        // text so it fits the header frame; the message is dead-lettered.
        std::string reason = kHuge;
        reason[3] = '\xff';
        EXPECT_STATUS(outbox_consumer_dead_letter(c, s.msg, reason.c_str()), OUTBOX_OK);
        // Stopped: next returns STOPPED until reset.
        outbox_consumer_stop(c);
        outbox_message *none = nullptr;
        EXPECT_STATUS(outbox_consumer_next(&none, c, 1000), OUTBOX_ERR_STOPPED);
        EXPECT_EQ(none, nullptr);
        EXPECT_STATUS(outbox_consumer_reset(c), OUTBOX_OK);
        EXPECT_STATUS(outbox_consumer_next(&none, c, -5), OUTBOX_ERR_TIMEOUT);
    });
// ---- a consumer loop of your own: settle and retry delay ----
Register r_consumer_settle({"outbox_consumer_settle", "outbox_consumer_retry_delay"}, [](Sweep &s) {
    outbox_settled out;
    outbox_settled_init(&out);
    int delay = -1;
    EXPECT_STATUS(outbox_consumer_retry_delay(nullptr, nullptr, 1, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_consumer_retry_delay(&delay, nullptr, 1, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(delay, 0);
    EXPECT_STATUS(outbox_consumer_settle(&out, nullptr, nullptr, nullptr, OUTBOX_OUTCOME_HANDLED, nullptr),
                  OUTBOX_ERR_INVALID_ARGUMENT);
    ASSERT_NO_FATAL_FAILURE(s.deliver());
    outbox_consumer *c = s.consumer;
    EXPECT_STATUS(outbox_consumer_retry_delay(&delay, c, 0, "x"), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_consumer_retry_delay(&delay, c, -3, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    const std::pair<int, int> delays[] = {{1, 100}, {2, 200}, {3, 400}, {9, 25600}, {10, 30000}, {2147483647, 30000}};
    for (auto [failures, want] : delays) {
        EXPECT_STATUS(outbox_consumer_retry_delay(&delay, c, failures, nullptr), OUTBOX_OK);
        EXPECT_EQ(delay, want) << failures << " failures";
    }
    std::string why = kHuge;
    why[5] = '\xff';
    EXPECT_STATUS(outbox_consumer_retry_delay(&delay, c, 1, why.c_str()), OUTBOX_OK);

    EXPECT_STATUS(outbox_consumer_settle(&out, nullptr, s.msg, nullptr, OUTBOX_OUTCOME_HANDLED, nullptr),
                  OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_consumer_settle(&out, c, nullptr, nullptr, OUTBOX_OUTCOME_HANDLED, nullptr),
                  OUTBOX_ERR_INVALID_ARGUMENT);
    for (int bad : {-1, 5, 1000}) {
        EXPECT_STATUS(outbox_consumer_settle(&out, c, s.msg, nullptr, static_cast<outbox_outcome>(bad), nullptr),
                      OUTBOX_ERR_INVALID_ARGUMENT);
    }
    outbox_settled zero{};
    EXPECT_STATUS(outbox_consumer_settle(&zero, c, s.msg, nullptr, OUTBOX_OUTCOME_HANDLED, nullptr),
                  OUTBOX_ERR_INVALID_ARGUMENT);
    // Through a consumer that never connected: a connection error, the message stays with its own.
    outbox_consumer *other = nullptr;
    ASSERT_EQ(outbox_consumer_new(&other, s.cfg, "sweep-other"), OUTBOX_OK);
    EXPECT_STATUS(outbox_consumer_settle(&out, other, s.msg, nullptr, OUTBOX_OUTCOME_HANDLED, nullptr),
                  OUTBOX_ERR_CONNECTION);
    outbox_consumer_free(other);
    // A handler failure on a lost database (with a 16 MiB reason that is not UTF-8): not counted, requeued.
    outbox_db *b = s.broken_db();
    EXPECT_STATUS(outbox_consumer_settle(&out, c, s.msg, b, OUTBOX_OUTCOME_HANDLER_FAILED, why.c_str()), OUTBOX_OK);
    EXPECT_EQ(out.action, OUTBOX_SETTLED_REQUEUED);
    EXPECT_EQ(out.db_lost, 1);
    EXPECT_EQ(out.attempt, 0);
    outbox_db_close(b);
    // Redelivered: a handler failure without a reason is attempt 1; then handled, acked.
    outbox_message *m = nullptr;
    ASSERT_EQ(outbox_consumer_next(&m, c, 10000), OUTBOX_OK) << outbox_last_error();
    outbox_settled_init(&out);
    EXPECT_STATUS(outbox_consumer_settle(&out, c, m, s.db, OUTBOX_OUTCOME_HANDLER_FAILED, nullptr), OUTBOX_OK);
    EXPECT_EQ(out.action, OUTBOX_SETTLED_REQUEUED);
    EXPECT_EQ(out.db_lost, 0);
    EXPECT_EQ(out.attempt, 1);
    outbox_message_free(m);
    ASSERT_EQ(outbox_consumer_next(&m, c, 10000), OUTBOX_OK) << outbox_last_error();
    EXPECT_STATUS(outbox_consumer_settle(nullptr, c, m, nullptr, OUTBOX_OUTCOME_HANDLED, nullptr), OUTBOX_OK);
    outbox_message_free(m);
});
Register r_status_retriable({"outbox_status_retriable", "outbox_message_copy"}, [](Sweep &s) {
    for (outbox_status st : kAllStatuses) {
        const int want = st == OUTBOX_ERR_CONNECTION || st == OUTBOX_ERR_BROKER || st == OUTBOX_ERR_TIMEOUT;
        EXPECT_EQ(outbox_status_retriable(st), want) << outbox_status_name(st);
    }
    for (int v : {1, 12345, -999, INT32_MIN, INT32_MAX}) {
        EXPECT_EQ(outbox_status_retriable(static_cast<outbox_status>(v)), 0);
    }
    outbox_message *copy = reinterpret_cast<outbox_message *>(&s);
    EXPECT_STATUS(outbox_message_copy(&copy, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(copy, nullptr);
    EXPECT_STATUS(outbox_message_copy(nullptr, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    ASSERT_NO_FATAL_FAILURE(s.deliver());
    EXPECT_STATUS(outbox_message_copy(&copy, s.msg), OUTBOX_OK);
    EXPECT_STREQ(outbox_message_field(copy, "OUTBOX_ID"), outbox_message_field(s.msg, "OUTBOX_ID"));
    outbox_message_free(s.msg);
    s.msg = nullptr;
    EXPECT_STATUS(outbox_consumer_ack(s.consumer, copy), OUTBOX_OK); // the copy settles the delivery
    outbox_message_free(copy);
});
Register r_loop({"outbox_loop_new", "outbox_loop_free", "outbox_loop_next", "outbox_loop_block",
                 "outbox_loop_statement", "outbox_loop_exec_done", "outbox_loop_exec_failed", "outbox_loop_message",
                 "outbox_loop_db", "outbox_loop_handler_done", "outbox_loop_wait_ms", "outbox_loop_waited",
                 "outbox_loop_opened", "outbox_loop_abort", "outbox_loop_result"},
                [](Sweep &s) {
                    outbox_loop *l = reinterpret_cast<outbox_loop *>(&s);
                    EXPECT_STATUS(outbox_loop_new(&l, nullptr, nullptr, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
                    EXPECT_EQ(l, nullptr);
                    EXPECT_STATUS(outbox_loop_new(nullptr, nullptr, nullptr, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
                    EXPECT_EQ(outbox_loop_next(nullptr), OUTBOX_LOOP_DONE);
                    EXPECT_STATUS(outbox_loop_block(nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
                    EXPECT_EQ(outbox_loop_statement(nullptr, nullptr), nullptr);
                    EXPECT_STATUS(outbox_loop_exec_done(nullptr, nullptr, 0), OUTBOX_ERR_INVALID_ARGUMENT);
                    EXPECT_STATUS(outbox_loop_exec_failed(nullptr, nullptr, nullptr, 0), OUTBOX_ERR_INVALID_ARGUMENT);
                    EXPECT_EQ(outbox_loop_message(nullptr), nullptr);
                    EXPECT_EQ(outbox_loop_db(nullptr), nullptr);
                    EXPECT_STATUS(outbox_loop_handler_done(nullptr, 0, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
                    EXPECT_EQ(outbox_loop_wait_ms(nullptr), 0);
                    EXPECT_STATUS(outbox_loop_waited(nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
                    EXPECT_STATUS(outbox_loop_opened(nullptr, 1, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
                    EXPECT_STATUS(outbox_loop_abort(nullptr, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
                    EXPECT_STATUS(outbox_loop_result(nullptr, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
                    outbox_loop_free(nullptr);
                    outbox_consumer *c = nullptr;
                    ASSERT_EQ(outbox_consumer_new(&c, s.cfg, (s.schema + "_loop").c_str()), OUTBOX_OK)
                        << outbox_last_error();
                    outbox_loop_options o;
                    outbox_loop_options_init(&o);
                    for (int32_t bad : {-1, 1, 4, 99}) {
                        o.connection = bad;
                        EXPECT_STATUS(outbox_loop_new(&l, c, nullptr, &o), OUTBOX_ERR_INVALID_ARGUMENT);
                    }
                    o.connection = OUTBOX_LOOP_DRIVER_OWNED;
                    EXPECT_STATUS(outbox_loop_new(&l, c, s.db, &o), OUTBOX_ERR_INVALID_ARGUMENT);
                    const std::string style = kHuge;
                    o.placeholders = style.c_str();
                    EXPECT_STATUS(outbox_loop_new(&l, c, nullptr, &o), OUTBOX_ERR_INVALID_ARGUMENT);
                    o.placeholders = nullptr;
                    outbox_loop_options zero{};
                    EXPECT_STATUS(outbox_loop_new(&l, c, nullptr, &zero), OUTBOX_ERR_INVALID_ARGUMENT);
                    // A driver-owned loop asks for its connection first; every other report is refused until then.
                    EXPECT_STATUS(outbox_loop_new(&l, c, nullptr, &o), OUTBOX_OK);
                    EXPECT_EQ(outbox_loop_next(l), OUTBOX_LOOP_OPEN);
                    std::string why = kHuge;
                    why[5] = '\xff';
                    EXPECT_STATUS(outbox_loop_block(l), OUTBOX_ERR_INVALID_ARGUMENT);
                    EXPECT_STATUS(outbox_loop_exec_done(l, nullptr, 3), OUTBOX_ERR_INVALID_ARGUMENT);
                    EXPECT_STATUS(outbox_loop_exec_failed(l, "08006", why.c_str(), 1), OUTBOX_ERR_INVALID_ARGUMENT);
                    EXPECT_STATUS(outbox_loop_handler_done(l, OUTBOX_HANDLER_OK, why.c_str()),
                                  OUTBOX_ERR_INVALID_ARGUMENT);
                    EXPECT_STATUS(outbox_loop_handler_done(l, 3, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
                    EXPECT_EQ(outbox_loop_statement(l, nullptr), nullptr);
                    EXPECT_EQ(outbox_loop_message(l), nullptr);
                    EXPECT_EQ(outbox_loop_db(l), nullptr);
                    // A failed open (with a reason that is not UTF-8) is waited out, then asked again.
                    EXPECT_STATUS(outbox_loop_opened(l, 0, why.c_str()), OUTBOX_OK);
                    EXPECT_EQ(outbox_loop_next(l), OUTBOX_LOOP_WAIT);
                    EXPECT_GT(outbox_loop_wait_ms(l), 0);
                    EXPECT_STATUS(outbox_loop_waited(l), OUTBOX_OK);
                    EXPECT_EQ(outbox_loop_next(l), OUTBOX_LOOP_OPEN);
                    EXPECT_STATUS(outbox_loop_abort(l, why.c_str()), OUTBOX_OK);
                    EXPECT_EQ(outbox_loop_next(l), OUTBOX_LOOP_DONE);
                    int64_t handled = -1;
                    EXPECT_STATUS(outbox_loop_result(l, &handled), OUTBOX_OK);
                    EXPECT_EQ(handled, 0);
                    outbox_loop_free(l);
                    outbox_consumer_free(c);
                });
Register r_write_plan(
    {"outbox_write_plan_new", "outbox_write_plan_free", "outbox_write_plan_next", "outbox_write_plan_done",
     "outbox_write_plan_failed", "outbox_write_plan_result"},
    [](Sweep &s) {
        outbox_write_plan *p = reinterpret_cast<outbox_write_plan *>(&s);
        EXPECT_STATUS(outbox_write_plan_new(&p, s.cfg, nullptr, OUTBOX_TX_IDLE, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
        EXPECT_EQ(p, nullptr);
        EXPECT_STATUS(outbox_write_plan_new(nullptr, s.cfg, nullptr, OUTBOX_TX_IDLE, nullptr),
                      OUTBOX_ERR_INVALID_ARGUMENT);
        EXPECT_EQ(outbox_write_plan_next(nullptr, nullptr), nullptr);
        EXPECT_STATUS(outbox_write_plan_done(nullptr, nullptr, 0), OUTBOX_ERR_INVALID_ARGUMENT);
        EXPECT_STATUS(outbox_write_plan_failed(nullptr, nullptr, nullptr, nullptr, 0), OUTBOX_ERR_INVALID_ARGUMENT);
        EXPECT_STATUS(outbox_write_plan_result(nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
        outbox_write_plan_free(nullptr);
        outbox_event *ev = s.make_event("sweep-plan");
        for (int bad : {-1, 1, 4, 99}) {
            EXPECT_STATUS(outbox_write_plan_new(&p, s.cfg, ev, static_cast<outbox_tx_state>(bad), nullptr),
                          OUTBOX_ERR_INVALID_ARGUMENT);
        }
        const std::string style = kHuge;
        EXPECT_STATUS(outbox_write_plan_new(&p, s.cfg, ev, OUTBOX_TX_IDLE, style.c_str()), OUTBOX_ERR_INVALID_ARGUMENT);
        outbox_event *empty = nullptr;
        ASSERT_EQ(outbox_event_new(&empty), OUTBOX_OK);
        EXPECT_STATUS(outbox_write_plan_new(&p, s.cfg, empty, OUTBOX_TX_IDLE, nullptr), OUTBOX_ERR_INVALID_EVENT);
        outbox_event_free(empty);
        EXPECT_STATUS(outbox_write_plan_new(&p, s.cfg, ev, OUTBOX_TX_INERROR, nullptr), OUTBOX_OK);
        EXPECT_EQ(outbox_write_plan_next(p, nullptr), nullptr);
        EXPECT_STATUS(outbox_write_plan_result(p), OUTBOX_ERR_TRANSACTION);
        outbox_write_plan_free(p);
        // A driver's failure with a 16 MiB message that is not UTF-8: the error is short and valid.
        EXPECT_STATUS(outbox_write_plan_new(&p, s.cfg, ev, OUTBOX_TX_IDLE, "qmark"), OUTBOX_OK);
        EXPECT_STATUS(outbox_write_plan_result(p), OUTBOX_ERR_INVALID_ARGUMENT);
        std::string why = kHuge;
        why[5] = '\xff';
        EXPECT_STATUS(outbox_write_plan_failed(p, "08006", kHuge.c_str(), why.c_str(), 1), OUTBOX_OK);
        EXPECT_STATUS(outbox_write_plan_result(p), OUTBOX_ERR_CONNECTION);
        EXPECT_STATUS(outbox_write_plan_done(p, nullptr, 3), OUTBOX_ERR_INVALID_ARGUMENT);
        EXPECT_STATUS(outbox_write_plan_done(p, nullptr, 0), OUTBOX_ERR_INVALID_ARGUMENT);
        outbox_write_plan_free(p);
        outbox_event_free(ev);
    });
Register r_consumer_run({"outbox_consumer_run", "outbox_handler_error"}, [](Sweep &s) {
    auto handler = [](outbox_db *, const outbox_message *, void *) { return 0; };
    EXPECT_STATUS(outbox_consumer_run(nullptr, nullptr, handler, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    outbox_consumer *c = nullptr;
    outbox_config *no_pg = nullptr;
    ASSERT_EQ(outbox_config_new(&no_pg), OUTBOX_OK);
    ASSERT_EQ(outbox_config_set(no_pg, "amqp.url", amqp_url().c_str()), OUTBOX_OK);
    ASSERT_EQ(outbox_consumer_new(&c, no_pg, "sweep-run"), OUTBOX_OK);
    EXPECT_STATUS(outbox_consumer_run(c, nullptr, nullptr, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    // No database at all: an argument error, not an endless retry.
    EXPECT_STATUS(outbox_consumer_run(c, nullptr, handler, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    outbox_consumer_free(c);
    outbox_config_free(no_pg);
    // Outside a handler it only sets this thread's reason; NULL and huge are fine.
    outbox_handler_error(nullptr);
    outbox_handler_error(kHuge.c_str());
    outbox_handler_error("\xff");
    (void)s;
});
Register r_message({"outbox_message_free", "outbox_message_field", "outbox_message_body", "outbox_message_property",
                    "outbox_message_seq", "outbox_message_redelivered", "outbox_message_delivery_count",
                    "outbox_message_order", "outbox_message_previous_seq"},
                   [](Sweep &s) {
                       outbox_message_free(nullptr);
                       size_t len = 99;
                       EXPECT_EQ(outbox_message_body(nullptr, &len), nullptr);
                       EXPECT_EQ(len, 0U);
                       EXPECT_EQ(outbox_message_body(nullptr, nullptr), nullptr);
                       EXPECT_EQ(outbox_message_field(nullptr, "OUTBOX_ID"), nullptr);
                       EXPECT_EQ(outbox_message_property(nullptr, "type"), nullptr);
                       EXPECT_EQ(outbox_message_seq(nullptr), 0);
                       EXPECT_EQ(outbox_message_redelivered(nullptr), 0);
                       EXPECT_EQ(outbox_message_delivery_count(nullptr), -1);
                       EXPECT_EQ(outbox_message_order(nullptr), OUTBOX_ORDER_UNCHECKED);
                       EXPECT_EQ(outbox_message_previous_seq(nullptr), 0);
                       ASSERT_NO_FATAL_FAILURE(s.deliver());
                       EXPECT_EQ(outbox_message_field(s.msg, nullptr), nullptr);
                       EXPECT_EQ(outbox_message_property(s.msg, nullptr), nullptr);
                       for (const char *name : {"", "\xff", "NO_SUCH_FIELD", kHuge.c_str()}) {
                           EXPECT_EQ(outbox_message_field(s.msg, name), nullptr);
                           EXPECT_EQ(outbox_message_property(s.msg, name), nullptr);
                       }
                       EXPECT_STREQ(outbox_message_field(s.msg, "AGGREGATE_ID"), "sweep-1");
                       EXPECT_NE(outbox_message_body(s.msg, &len), nullptr);
                       EXPECT_GT(len, 0U);
                       EXPECT_EQ(outbox_message_seq(s.msg), 1);
                       EXPECT_EQ(outbox_consumer_ack(s.consumer, s.msg), OUTBOX_OK);
                   });

// ---- operations ---------------------------------------------------------------------------------
Register r_stats({"outbox_stats"}, [](Sweep &s) {
    char *json = reinterpret_cast<char *>(0x1);
    EXPECT_STATUS(outbox_stats(nullptr, s.db), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_stats(&json, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(json, nullptr);
    outbox_db *a = s.aborted_db();
    EXPECT_STATUS(outbox_stats(&json, a), OUTBOX_ERR_TRANSACTION);
    outbox_db_close(a);
    outbox_db *b = s.broken_db();
    EXPECT_STATUS(outbox_stats(&json, b), OUTBOX_ERR_CONNECTION);
    outbox_db_close(b);
    EXPECT_EQ(json, nullptr);
});
Register r_retry({"outbox_retry_failed"}, [](Sweep &s) {
    int64_t n = -1;
    EXPECT_STATUS(outbox_retry_failed(&n, nullptr, nullptr, nullptr, 0), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(n, 0);
    EXPECT_STATUS(outbox_retry_failed(&n, s.db, nullptr, "not-a-uuid", 0), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_retry_failed(&n, s.db, nullptr, kHuge.c_str(), 0), OUTBOX_ERR_INVALID_ARGUMENT);
    for (const char *bad : kBadUtf8) {
        EXPECT_STATUS(outbox_retry_failed(&n, s.db, bad, nullptr, 0), OUTBOX_ERR_INVALID_ARGUMENT);
    }
    EXPECT_STATUS(outbox_retry_failed(&n, s.db, kHuge.c_str(), nullptr, 0), OUTBOX_ERR_INVALID_ARGUMENT);
    // Empty filters mean "any"; text that looks like SQL is only a filter value.
    EXPECT_STATUS(outbox_retry_failed(&n, s.db, "", "", -1), OUTBOX_OK);
    EXPECT_STATUS(outbox_retry_failed(nullptr, s.db, "'; DROP TABLE x; --", nullptr, INT32_MAX), OUTBOX_OK);
    outbox_db *a = s.aborted_db();
    EXPECT_STATUS(outbox_retry_failed(&n, a, nullptr, nullptr, 0), OUTBOX_ERR_TRANSACTION);
    outbox_db_close(a);
});
Register r_parked({"outbox_parked_list", "outbox_parked_redrive", "outbox_parked_redrive_all", "outbox_parked_skip",
                   "outbox_parked_summary", "outbox_metrics_text"},
                  [](Sweep &s) {
                      char *json = reinterpret_cast<char *>(0x1);
                      int64_t n = -1;
                      EXPECT_STATUS(outbox_parked_list(nullptr, s.db, nullptr, 1, 10), OUTBOX_ERR_INVALID_ARGUMENT);
                      EXPECT_STATUS(outbox_parked_list(&json, nullptr, nullptr, 1, 10), OUTBOX_ERR_INVALID_ARGUMENT);
                      EXPECT_EQ(json, nullptr);
                      EXPECT_STATUS(outbox_parked_list(&json, s.db, nullptr, 1, 0), OUTBOX_ERR_INVALID_ARGUMENT);
                      EXPECT_STATUS(outbox_parked_list(&json, s.db, kHuge.c_str(), 1, 10), OUTBOX_ERR_INVALID_ARGUMENT);
                      for (const char *bad : kBadUtf8) {
                          EXPECT_STATUS(outbox_parked_list(&json, s.db, bad, 0, 10), OUTBOX_ERR_INVALID_ARGUMENT);
                          EXPECT_STATUS(outbox_parked_redrive(&n, s.db, bad, "T", "1"), OUTBOX_ERR_INVALID_ARGUMENT);
                          EXPECT_STATUS(outbox_parked_skip(nullptr, s.db, "c", "T", bad, nullptr, "op", ""),
                                        OUTBOX_ERR_INVALID_ARGUMENT);
                      }
                      // Text that looks like SQL is only a value.
                      EXPECT_STATUS(outbox_parked_list(&json, s.db, "'; DROP TABLE x; --", 1, 10), OUTBOX_OK);
                      EXPECT_STREQ(json, "[]");
                      outbox_string_free(json);
                      EXPECT_STATUS(outbox_parked_redrive(&n, nullptr, "c", "T", "1"), OUTBOX_ERR_INVALID_ARGUMENT);
                      EXPECT_STATUS(outbox_parked_redrive(&n, s.db, "c", "T", nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
                      EXPECT_STATUS(outbox_parked_redrive(&n, s.db, "c", "T", "1"), OUTBOX_OK);
                      EXPECT_EQ(n, 0);
                      EXPECT_STATUS(outbox_parked_redrive(&n, s.db, nullptr, "T", "1"), OUTBOX_OK);
                      EXPECT_STATUS(outbox_parked_redrive_all(&n, s.db, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
                      EXPECT_STATUS(outbox_parked_redrive_all(&n, s.db, "c"), OUTBOX_OK);
                      char *id = reinterpret_cast<char *>(0x1);
                      EXPECT_STATUS(outbox_parked_skip(&id, s.db, "c", "T", "1", nullptr, "op", "why"), OUTBOX_ERR_NOT_FOUND);
                      EXPECT_EQ(id, nullptr);
                      EXPECT_STATUS(outbox_parked_skip(&id, s.db, "c", "T", "1", "not-a-uuid", "op", ""),
                                    OUTBOX_ERR_INVALID_ARGUMENT);
                      EXPECT_STATUS(outbox_parked_skip(&id, s.db, "c", "T", "1", nullptr, "", ""),
                                    OUTBOX_ERR_INVALID_ARGUMENT);
                      EXPECT_STATUS(outbox_parked_skip(&id, s.db, nullptr, "T", "1", nullptr, "op", ""),
                                    OUTBOX_ERR_NOT_FOUND); // no consumer: the relay's, which parks nothing here
                      EXPECT_STATUS(outbox_parked_summary(nullptr, s.db), OUTBOX_ERR_INVALID_ARGUMENT);
                      EXPECT_STATUS(outbox_parked_summary(&json, s.db), OUTBOX_OK);
                      EXPECT_NE(std::string(json).find("\"consumer\":null"), std::string::npos) << json;
                      outbox_string_free(json);
                      EXPECT_STATUS(outbox_metrics_text(nullptr, s.db), OUTBOX_ERR_INVALID_ARGUMENT);
                      EXPECT_STATUS(outbox_metrics_text(&json, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
                      EXPECT_STATUS(outbox_metrics_text(&json, s.db), OUTBOX_OK);
                      EXPECT_NE(std::string(json).find("# TYPE outbox_relay_parked_aggregates gauge"), std::string::npos)
                          << json;
                      outbox_string_free(json);
                      outbox_db *b = s.broken_db();
                      EXPECT_STATUS(outbox_metrics_text(&json, b), OUTBOX_ERR_CONNECTION);
                      EXPECT_STATUS(outbox_parked_list(&json, b, nullptr, 1, 10), OUTBOX_ERR_CONNECTION);
                      EXPECT_STATUS(outbox_parked_redrive_all(&n, b, "c"), OUTBOX_ERR_CONNECTION);
                      outbox_db_close(b);
                  });
Register r_purge({"outbox_purge_published"}, [](Sweep &s) {
    int64_t n = -1;
    EXPECT_STATUS(outbox_purge_published(&n, nullptr, 10, 10), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(n, 0);
    EXPECT_STATUS(outbox_purge_published(&n, s.db, -1, 10), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_purge_published(&n, s.db, 10, 0), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_purge_published(&n, s.db, INT64_MAX, 10), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_purge_published(&n, s.db, 3153600000, 10), OUTBOX_OK);
    ASSERT_EQ(outbox_db_exec(s.db, "BEGIN"), OUTBOX_OK);
    EXPECT_STATUS(outbox_purge_published(&n, s.db, 10, 10), OUTBOX_ERR_TRANSACTION);
    ASSERT_EQ(outbox_db_exec(s.db, "ROLLBACK"), OUTBOX_OK);
});
// ---- the operator commands' calls (the CLI is built on these) ----------------------------------
Register r_replay_from({"outbox_replay_from"}, [](Sweep &s) {
    int64_t n = -1, from = -1;
    EXPECT_STATUS(outbox_replay_from(&n, &from, nullptr, nullptr, "PRD", "1", nullptr, nullptr),
                  OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(n, 0);
    EXPECT_EQ(from, 0);
    EXPECT_STATUS(outbox_replay_from(&n, &from, s.db, nullptr, nullptr, "1", nullptr, nullptr),
                  OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_replay_from(&n, &from, s.db, nullptr, "PRD", nullptr, nullptr, nullptr),
                  OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_replay_from(&n, &from, s.db, s.cfg, "", "1", nullptr, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_replay_from(&n, &from, s.db, s.cfg, "PRD", "1", "not-a-uuid", nullptr),
                  OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_replay_from(&n, &from, s.db, s.cfg, "PRD", "1", kHuge.c_str(), nullptr),
                  OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_replay_from(&n, &from, s.db, s.cfg, "PRD", "1", kId.c_str(), nullptr), OUTBOX_ERR_NOT_FOUND);
    EXPECT_STATUS(outbox_replay_from(&n, &from, s.db, s.cfg, "PRD", "1", nullptr, "not a time"), OUTBOX_ERR_DATABASE);
    for (const char *bad : kBadUtf8) {
        EXPECT_NE(outbox_replay_from(&n, &from, s.db, s.cfg, "PRD", "1", nullptr, bad), OUTBOX_OK) << bad;
    }
    // Nothing since then: nothing published, no broker needed.
    EXPECT_STATUS(outbox_replay_from(nullptr, nullptr, s.db, s.cfg, "PRD", "1", "", "2999-01-01T00:00:00Z"), OUTBOX_OK);
    outbox_db *b = s.broken_db();
    EXPECT_STATUS(outbox_replay_from(&n, &from, b, s.cfg, "PRD", "1", nullptr, "2000-01-01"), OUTBOX_ERR_CONNECTION);
    outbox_db_close(b);
});
Register r_purge_progress({"outbox_purge_published_progress", "outbox_purge_estimate"}, [](Sweep &s) {
    int64_t n = -1;
    EXPECT_STATUS(outbox_purge_published_progress(&n, nullptr, 10, 10, nullptr, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(n, 0);
    EXPECT_STATUS(outbox_purge_published_progress(&n, s.db, -1, 10, nullptr, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_purge_published_progress(&n, s.db, 10, 0, nullptr, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_purge_published_progress(&n, s.db, INT64_MAX, 10, nullptr, nullptr),
                  OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_purge_published_progress(nullptr, s.db, 3153600000, 10, nullptr, nullptr), OUTBOX_OK);
    ASSERT_EQ(outbox_db_exec(s.db, "BEGIN"), OUTBOX_OK);
    EXPECT_STATUS(outbox_purge_published_progress(&n, s.db, 10, 10, nullptr, nullptr), OUTBOX_ERR_TRANSACTION);
    ASSERT_EQ(outbox_db_exec(s.db, "ROLLBACK"), OUTBOX_OK);
    int64_t e = -1;
    EXPECT_STATUS(outbox_purge_estimate(nullptr, s.db, 10), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_purge_estimate(&e, nullptr, 10), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(e, 0);
    EXPECT_STATUS(outbox_purge_estimate(&e, s.db, -1), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_purge_estimate(&e, s.db, INT64_MAX), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_purge_estimate(&e, s.db, 10), OUTBOX_OK);
    outbox_db *a = s.aborted_db();
    EXPECT_STATUS(outbox_purge_estimate(&e, a, 10), OUTBOX_ERR_TRANSACTION);
    outbox_db_close(a);
});
Register r_lag({"outbox_lag"}, [](Sweep &s) {
    double lag = -1;
    EXPECT_STATUS(outbox_lag(nullptr, s.db), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_lag(&lag, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(lag, 0);
    EXPECT_STATUS(outbox_lag(&lag, s.db), OUTBOX_OK);
    outbox_db *a = s.aborted_db();
    EXPECT_STATUS(outbox_lag(&lag, a), OUTBOX_ERR_TRANSACTION);
    outbox_db_close(a);
    outbox_db *b = s.broken_db();
    EXPECT_STATUS(outbox_lag(&lag, b), OUTBOX_ERR_CONNECTION);
    outbox_db_close(b);
});
Register r_migrate_versions({"outbox_migrate_versions"}, [](Sweep &s) {
    int a = -1, b = -1, c = -1, d = -1;
    EXPECT_STATUS(outbox_migrate_versions(&a, &b, &c, &d, nullptr, OUTBOX_MIGRATE_ALL), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(a + b + c + d, 0);
    EXPECT_STATUS(outbox_migrate_versions(&a, &b, &c, &d, s.db, static_cast<outbox_migrate_target>(99)),
                  OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_migrate_versions(nullptr, nullptr, nullptr, nullptr, s.db, OUTBOX_MIGRATE_ALL), OUTBOX_OK);
    outbox_db *x = s.aborted_db();
    EXPECT_STATUS(outbox_migrate_versions(&a, &b, &c, &d, x, OUTBOX_MIGRATE_ALL), OUTBOX_ERR_TRANSACTION);
    outbox_db_close(x);
    outbox_db *y = s.broken_db();
    EXPECT_STATUS(outbox_migrate_versions(&a, &b, &c, &d, y, OUTBOX_MIGRATE_OUTBOX), OUTBOX_ERR_CONNECTION);
    outbox_db_close(y);
});
Register r_tail({"outbox_tail_open", "outbox_tail_close", "outbox_tail_next", "outbox_tail_name"}, [](Sweep &s) {
    outbox_tail *t = reinterpret_cast<outbox_tail *>(0x1);
    EXPECT_STATUS(outbox_tail_open(nullptr, s.cfg, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_tail_open(&t, nullptr, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(t, nullptr);
    outbox_config *none = nullptr;
    ASSERT_EQ(outbox_config_new(&none), OUTBOX_OK);
    EXPECT_STATUS(outbox_tail_open(&t, none, nullptr), OUTBOX_ERR_INVALID_ARGUMENT); // no amqp.url
    ASSERT_EQ(outbox_config_set(none, "amqp.url", "amqp://u:pw@127.0.0.1:1/"), OUTBOX_OK);
    EXPECT_STATUS(outbox_tail_open(&t, none, nullptr), OUTBOX_ERR_CONNECTION);
    outbox_config_free(none);
    EXPECT_STATUS(outbox_tail_open(&t, s.cfg, kHuge.c_str()), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_tail_open(&t, s.cfg, "bad\nname"), OUTBOX_ERR_INVALID_ARGUMENT);
    outbox_tail_close(nullptr);
    EXPECT_EQ(outbox_tail_name(nullptr, 0), nullptr);
    outbox_message *m = reinterpret_cast<outbox_message *>(0x1);
    EXPECT_STATUS(outbox_tail_next(nullptr, nullptr, 0), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_tail_next(&m, nullptr, 0), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(m, nullptr);
    ASSERT_EQ(outbox_tail_open(&t, s.cfg, nullptr), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(std::string(outbox_tail_name(t, 0)), s.exchange);
    EXPECT_STATUS(outbox_tail_next(&m, t, -5), OUTBOX_ERR_TIMEOUT);
    EXPECT_STATUS(outbox_tail_next(&m, t, 10), OUTBOX_ERR_TIMEOUT);
    EXPECT_EQ(m, nullptr);
    outbox_tail_close(t);
});
Register r_step_callback({"outbox_relay_set_step_callback"}, [](Sweep &s) {
    auto fn = [](const outbox_relay_step_info *, void *) {};
    EXPECT_STATUS(outbox_relay_set_step_callback(nullptr, fn, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_relay_set_step_callback(nullptr, nullptr, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    outbox_relay *r = nullptr;
    ASSERT_EQ(outbox_relay_new(&r, s.cfg), OUTBOX_OK);
    EXPECT_STATUS(outbox_relay_set_step_callback(r, fn, nullptr), OUTBOX_OK);
    EXPECT_STATUS(outbox_relay_set_step_callback(r, nullptr, nullptr), OUTBOX_OK);
    outbox_relay_free(r);
});
Register r_replay({"outbox_replay"}, [](Sweep &s) {
    int64_t n = -1;
    EXPECT_STATUS(outbox_replay(&n, nullptr, nullptr, "PRD", "1", 0), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(n, 0);
    EXPECT_STATUS(outbox_replay(&n, s.db, nullptr, nullptr, "1", 0), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_replay(&n, s.db, nullptr, "PRD", nullptr, 0), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_replay(&n, s.db, s.cfg, "", "1", 0), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_replay(&n, s.db, s.cfg, "PRD", "", 0), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_replay(&n, s.db, s.cfg, "\xff", "1", 0), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(outbox_replay(&n, s.db, s.cfg, "PRD", kHuge.c_str(), 0), OUTBOX_ERR_INVALID_ARGUMENT);
    // Nothing to replay: OK with 0, whatever from_seq says.
    EXPECT_STATUS(outbox_replay(&n, s.db, s.cfg, "PRD", "none", INT64_MIN), OUTBOX_OK);
    EXPECT_EQ(n, 0);
    outbox_config *bad = nullptr;
    ASSERT_EQ(outbox_config_new(&bad), OUTBOX_OK);
    ASSERT_EQ(outbox_config_set(bad, "amqp.url", "amqp://u:pw@127.0.0.1:1/%2f"), OUTBOX_OK);
    ASSERT_EQ(outbox_config_set(bad, "amqp.connect_timeout_ms", "1000"), OUTBOX_OK);
    EXPECT_STATUS(outbox_replay(&n, s.db, bad, "PRD", "1", 0), OUTBOX_ERR_CONNECTION);
    outbox_config_free(bad);
});

} // namespace

TEST(AbiSweep, EverySymbolHasASweepCase) {
    const auto symbols = read_symbols();
    ASSERT_GT(symbols.size(), 50U) << "tests/abi/symbols.txt not found or empty";
    std::map<std::string, int> covered;
    for (const auto &g : groups()) {
        for (const auto &n : g.names) {
            ++covered[n];
        }
    }
    for (const auto &sym : symbols) {
        EXPECT_EQ(covered[sym], 1) << sym << " is exported but has no bad-input case in abi_sweep_test.cpp";
    }
    for (const auto &fn : header_functions()) {
        EXPECT_NE(std::find(symbols.begin(), symbols.end(), fn), symbols.end())
            << fn << " is declared in outbox.h but not listed in symbols.txt";
    }
    for (const auto &[name, n] : covered) {
        EXPECT_NE(std::find(symbols.begin(), symbols.end(), name), symbols.end()) << name << " is not exported";
    }
}

// The doc comment right before each function's declaration in outbox.h.
std::map<std::string, std::string> header_doc_comments() {
    std::ifstream in(std::string(OUTBOX_SOURCE_DIR) + "/capi/include/outbox.h");
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    std::map<std::string, std::string> out;
    std::regex fn(R"(OUTBOX_API[^;(]*?\b(outbox_[a-z0-9_]+)\s*\()");
    for (auto it = std::sregex_iterator(text.begin(), text.end(), fn); it != std::sregex_iterator(); ++it) {
        const size_t decl = static_cast<size_t>(it->position(0));
        const size_t end = text.rfind("*/", decl);
        const size_t begin = end == std::string::npos ? std::string::npos : text.rfind("/**", end);
        if (begin != std::string::npos) {
            out[(*it)[1]] = text.substr(begin, end - begin);
        }
    }
    return out;
}

// Whether `fn`'s comment names `status`, itself or through "as outbox_other()".
bool documents(const std::map<std::string, std::string> &docs, const std::string &fn, const std::string &status,
               int depth = 0) {
    auto it = docs.find(fn);
    if (it == docs.end() || depth > 4) {
        return false;
    }
    if (it->second.find(status) != std::string::npos) {
        return true;
    }
    static const std::regex as(R"(as (outbox_[a-z0-9_]+)\(\))");
    for (auto m = std::sregex_iterator(it->second.begin(), it->second.end(), as); m != std::sregex_iterator(); ++m) {
        if (documents(docs, (*m)[1], status, depth + 1)) {
            return true;
        }
    }
    return false;
}

class DocumentedReturns : public ::testing::Environment {
  public:
    void TearDown() override {
        const auto docs = header_doc_comments();
        for (const auto &[fn, st] : observed_statuses()) {
            const std::string name =
                std::string("OUTBOX_") + (st == OUTBOX_OK ? "OK" : "ERR_") + outbox_status_name(st);
            EXPECT_TRUE(documents(docs, fn, name)) << fn << " returned " << name << " but its @return in outbox.h "
                                                   << "does not name it";
        }
    }
};
const auto *const documented_returns = ::testing::AddGlobalTestEnvironment(new DocumentedReturns);

// One test per group of functions, named after its first function, so a failure names it.
class AbiSweepCase : public Sweep, public ::testing::WithParamInterface<size_t> {};

TEST_P(AbiSweepCase, BadInputGetsAPreciseStatus) {
    groups().at(GetParam()).fn(*this);
}

INSTANTIATE_TEST_SUITE_P(Every, AbiSweepCase, ::testing::Range<size_t>(0, groups().size()),
                         [](const ::testing::TestParamInfo<size_t> &p) { return groups().at(p.param).names[0]; });
