#include "console.hpp"

#include "console_auth.hpp"
#include "console_page.hpp"
#include "console_state.hpp"

#include <cjson/cJSON.h>
#include <httplib.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <memory>
#include <optional>
#include <pthread.h>
#include <sys/time.h>
#include <thread>

namespace outbox::cli {
namespace {

const char *const kCookie = "outbox_console_session";

// One line on stderr, as `outbox relay` logs: control characters escaped, so no aggregate id or
// reason can start a forged line of its own.
void log(const char *level, const std::string &text) {
    std::string line;
    for (const char c : text) {
        const auto u = static_cast<unsigned char>(c);
        if (u < 0x20 || u == 0x7F) {
            char esc[8];
            std::snprintf(esc, sizeof esc, "\\x%02x", u);
            line += esc;
        } else {
            line.push_back(c);
        }
    }
    std::fprintf(stderr, "%s %-5s console: %s\n", timestamp().c_str(), level, line.c_str());
    std::fflush(stderr);
}

// A JSON string literal: quoted, escaped; also how logs quote operator-supplied text.
std::string quote(const std::string &s) {
    cJSON *str = cJSON_CreateString(s.c_str());
    char *text = str != nullptr ? cJSON_PrintUnformatted(str) : nullptr;
    std::string out = text != nullptr ? text : "\"\"";
    cJSON_free(text);
    cJSON_Delete(str);
    return out;
}

std::string html_escape(const std::string &s) {
    std::string out;
    for (const char c : s) {
        switch (c) {
        case '&':
            out += "&amp;";
            break;
        case '<':
            out += "&lt;";
            break;
        case '>':
            out += "&gt;";
            break;
        case '"':
            out += "&quot;";
            break;
        case '\'':
            out += "&#39;";
            break;
        default:
            out.push_back(c);
        }
    }
    return out;
}

std::string substitute(std::string page, const std::string &key, const std::string &value) {
    for (size_t at = page.find(key); at != std::string::npos; at = page.find(key, at + value.size())) {
        page.replace(at, key.size(), value);
    }
    return page;
}

struct Listen {
    std::string host;
    int port = 0;
};

Listen parse_listen(const std::string &addr) {
    const size_t colon = addr.rfind(':');
    if (colon == std::string::npos || colon == 0) {
        usage("--listen: expected HOST:PORT, got '" + addr + "'");
    }
    Listen l;
    l.host = addr.substr(0, colon);
    if (l.host.size() > 2 && l.host.front() == '[' && l.host.back() == ']') {
        l.host = l.host.substr(1, l.host.size() - 2);
    }
    try {
        l.port = std::stoi(addr.substr(colon + 1));
    } catch (const std::exception &) {
        l.port = -1;
    }
    if (l.port <= 0 || l.port > 65535) {
        usage("--listen: bad port in '" + addr + "'");
    }
    return l;
}

bool loopback(const std::string &host) {
    return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

std::string cookie(const httplib::Request &req, const std::string &name) {
    const std::string all = req.get_header_value("Cookie");
    size_t at = 0;
    while (at < all.size()) {
        size_t end = all.find(';', at);
        end = end == std::string::npos ? all.size() : end;
        std::string part = all.substr(at, end - at);
        part.erase(0, part.find_first_not_of(' '));
        if (part.rfind(name + "=", 0) == 0) {
            return part.substr(name.size() + 1);
        }
        at = end + 1;
    }
    return "";
}

// A member of an action's JSON body that must be a string (`required`) or may be absent ("").
std::string field(const cJSON *body, const char *name, bool required) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, name);
    if (cJSON_IsString(v)) {
        return v->valuestring;
    }
    if (required || (v != nullptr && !cJSON_IsNull(v))) {
        throw Failure(OUTBOX_ERR_INVALID_ARGUMENT, std::string("\"") + name + "\" must be a string");
    }
    return "";
}

const char *or_null(const std::string &s) {
    return s.empty() ? nullptr : s.c_str();
}

std::string aggregate(const std::string &type, const std::string &id) {
    return "aggregate=" + quote(type) + "/" + quote(id);
}

// The database shown on the page and in the log: where pg.url came from, its password replaced
// (the library reads pg.url back as "***" only).
std::string database_shown(const ConsoleOptions &co) {
    std::string url = co.common.pg_url;
    for (const std::string &s : co.common.sets) {
        const size_t eq = s.find('=');
        if (eq != std::string::npos && s.substr(0, eq).find("pg.url") != std::string::npos) {
            url = s.substr(eq + 1);
        }
    }
    if (url.empty() && std::getenv("OUTBOX_PG_URL") != nullptr) {
        url = std::getenv("OUTBOX_PG_URL");
    }
    return url.empty() ? std::string("(pg.url of --config)") : redact_text(url, 300);
}

class Console {
  public:
    Console(const ConsoleOptions &co, const outbox_config *cfg, Auth &auth, Sampler &sampler)
        : cfg_(cfg), auth_(auth), sampler_(sampler), tls_(!co.tls_cert.empty()), database_(database_shown(co)) {}
    void routes(httplib::Server &s);

  private:
    // What an action does on the database; sets `what` (for the log) and returns its JSON result.
    using Action = std::function<std::string(outbox_db *, const Identity &, const cJSON *, std::string &)>;
    std::optional<Identity> viewer(const httplib::Request &req);
    std::optional<Identity> actor(const httplib::Request &req, httplib::Response &res);
    bool same_origin(const httplib::Request &req) const;
    void page(const httplib::Request &req, httplib::Response &res);
    void login(const httplib::Request &req, httplib::Response &res);
    void logout(const httplib::Request &req, httplib::Response &res);
    void state(const httplib::Request &req, httplib::Response &res);
    void act(const httplib::Request &req, httplib::Response &res, const Action &fn);
    std::string run(const Action &fn, const Identity &who, const cJSON *body, std::string &what);
    void action_routes(httplib::Server &s);

    const outbox_config *cfg_;
    Auth &auth_;
    Sampler &sampler_;
    bool tls_;
    std::string database_;
    std::mutex db_mu_; // one action at a time, on a connection of its own
    DbPtr db_;
};

void send_json(httplib::Response &res, int status, const std::string &body) {
    res.status = status;
    res.set_content(body, "application/json; charset=utf-8");
}

void send_error(httplib::Response &res, int status, const std::string &message) {
    send_json(res, status, "{\"error\":" + quote(message) + "}");
}

std::optional<Identity> Console::viewer(const httplib::Request &req) {
    const std::string authz = req.get_header_value("Authorization");
    if (authz.rfind("Bearer ", 0) == 0) {
        return auth_.token(authz.substr(7));
    }
    return auth_.session(cookie(req, kCookie));
}

// The browser's Origin must be this server's own (as the Host header names it).
bool Console::same_origin(const httplib::Request &req) const {
    const std::string origin = req.get_header_value("Origin");
    const std::string host = req.get_header_value("Host");
    return !origin.empty() && !host.empty() && origin == (tls_ ? "https://" : "http://") + host;
}

// Who may act: an operator's bearer token, or an operator's session whose request comes from the
// console's own page (its Origin) and carries the session's CSRF token in X-CSRF-Token.
std::optional<Identity> Console::actor(const httplib::Request &req, httplib::Response &res) {
    std::optional<Identity> who = viewer(req);
    if (!who) {
        log("warn", "refused " + req.path + " from " + req.remote_addr + ": no valid token or session");
        send_error(res, 401, "sign in: a token (Authorization: Bearer) or a session is needed");
        return std::nullopt;
    }
    const bool session = !who->csrf.empty();
    if (session && (!same_origin(req) || !same_secret(req.get_header_value("X-CSRF-Token"), who->csrf))) {
        log("warn", "refused " + req.path + " from " + req.remote_addr + " for " + who->name +
                        ": the CSRF token or the origin does not match");
        send_error(res, 403, "the request's CSRF token or origin does not match this session");
        return std::nullopt;
    }
    if (who->role != Role::operator_) {
        log("warn", "refused " + req.path + " from " + req.remote_addr + " for " + who->name +
                        " (read): only an operator token may act");
        send_error(res, 403, "a read token may only view; actions need an operator token");
        return std::nullopt;
    }
    if (req.get_header_value("Content-Type").rfind("application/json", 0) != 0) {
        send_error(res, 415, "an action's body is JSON (Content-Type: application/json)");
        return std::nullopt;
    }
    return who;
}

void Console::page(const httplib::Request &req, httplib::Response &res) {
    const std::optional<Identity> who = auth_.session(cookie(req, kCookie));
    if (!who) {
        res.set_content(substitute(kLoginHtml, "{{MESSAGE}}", ""), "text/html; charset=utf-8");
        return;
    }
    std::string html = substitute(kConsoleHtml, "{{CSRF}}", html_escape(who->csrf));
    html = substitute(html, "{{USER}}", html_escape(who->name));
    html = substitute(html, "{{ROLE}}", role_name(who->role));
    html = substitute(html, "{{DATABASE}}", html_escape(database_));
    res.set_content(html, "text/html; charset=utf-8");
}

void Console::login(const httplib::Request &req, httplib::Response &res) {
    if (!same_origin(req)) {
        log("warn", "refused a sign-in from " + req.remote_addr + ": not from the console's own page (Origin)");
        res.status = 403;
        res.set_content(substitute(kLoginHtml, "{{MESSAGE}}", "Sign in from the console's own page."),
                        "text/html; charset=utf-8");
        return;
    }
    std::optional<Identity> who = auth_.token(req.get_param_value("token"));
    if (!who) {
        log("warn", "refused a sign-in from " + req.remote_addr + ": unknown token");
        std::this_thread::sleep_for(std::chrono::milliseconds(300)); // slows guessing
        res.status = 401;
        res.set_content(substitute(kLoginHtml, "{{MESSAGE}}", "That token is not known."), "text/html; charset=utf-8");
        return;
    }
    const std::string id = auth_.open_session(*who);
    log("info", who->name + " (" + role_name(who->role) + ") signed in from " + req.remote_addr);
    res.set_header("Set-Cookie",
                   std::string(kCookie) + "=" + id + "; Path=/; HttpOnly; SameSite=Strict" + (tls_ ? "; Secure" : ""));
    res.set_redirect("/", 303);
}

void Console::logout(const httplib::Request &req, httplib::Response &res) {
    const std::string id = cookie(req, kCookie);
    const std::optional<Identity> who = auth_.session(id);
    if (who && same_origin(req) && same_secret(req.get_header_value("X-CSRF-Token"), who->csrf)) {
        auth_.close_session(id);
        log("info", who->name + " signed out from " + req.remote_addr);
    }
    res.set_header("Set-Cookie", std::string(kCookie) + "=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    send_json(res, 200, "{\"ok\":true}");
}

void Console::state(const httplib::Request &req, httplib::Response &res) {
    const std::optional<Identity> who = viewer(req);
    if (!who) {
        send_error(res, 401, "sign in: a token (Authorization: Bearer) or a session is needed");
        return;
    }
    const std::string user = "{\"user\":{\"name\":" + quote(who->name) + ",\"role\":\"" + role_name(who->role) + "\"},";
    send_json(res, 200, user + sampler_.state_json().substr(1));
}

std::string Console::run(const Action &fn, const Identity &who, const cJSON *body, std::string &what) {
    std::lock_guard<std::mutex> lock(db_mu_);
    try {
        if (!db_ || outbox_db_tx_state(db_.get()) != OUTBOX_TX_IDLE) {
            db_.reset();
            db_ = open_db(cfg_);
        }
        return fn(db_.get(), who, body, what);
    } catch (const Failure &e) {
        if (e.status() == OUTBOX_ERR_CONNECTION) {
            db_.reset();
        }
        throw;
    }
}

void Console::act(const httplib::Request &req, httplib::Response &res, const Action &fn) {
    const std::optional<Identity> who = actor(req, res);
    if (!who) {
        return;
    }
    const std::string by = who->name + " (operator) from " + req.remote_addr + ": ";
    std::unique_ptr<cJSON, void (*)(cJSON *)> body(cJSON_ParseWithLength(req.body.data(), req.body.size()),
                                                   cJSON_Delete);
    if (!cJSON_IsObject(body.get())) {
        send_error(res, 400, "the body must be a JSON object");
        return;
    }
    std::string what = req.path;
    try {
        const std::string result = run(fn, *who, body.get(), what);
        log("info", by + what + " -> " + result);
        sampler_.refresh(); // the page reloads its state next: show the action's effect
        send_json(res, 200, result);
    } catch (const Failure &e) {
        const std::string why = redact_text(e.what(), 500);
        log("warn", by + what + " failed: " + outbox_status_name(e.status()) + ": " + why);
        const int code = e.status() == OUTBOX_ERR_INVALID_ARGUMENT ? 400
                         : e.status() == OUTBOX_ERR_NOT_FOUND      ? 409
                                                                   : 500;
        send_error(res, code, std::string(outbox_status_name(e.status())) + ": " + why);
    }
}

void Console::action_routes(httplib::Server &s) {
    const std::vector<std::pair<std::string, Action>> actions = {
        {"/api/retry",
         [](outbox_db *db, const Identity &, const cJSON *b, std::string &what) {
             const std::string type = field(b, "aggregate_type", false), id = field(b, "aggregate_id", false);
             int64_t n = 0;
             if (id.empty()) {
                 what = "retry every FAILED event at the relay";
                 check(outbox_retry_failed(&n, db, nullptr, nullptr, 0));
                 return "{\"moved\":" + std::to_string(n) + "}";
             }
             what = "retry the relay's " + aggregate(type, id);
             check(outbox_parked_redrive(&n, db, nullptr, type.c_str(), id.c_str()));
             return "{\"redriven\":" + std::to_string(n) + "}";
         }},
        {"/api/redrive",
         [](outbox_db *db, const Identity &, const cJSON *b, std::string &what) {
             const std::string consumer = field(b, "consumer", true);
             const std::string type = field(b, "aggregate_type", true), id = field(b, "aggregate_id", true);
             what = "redrive consumer=" + quote(consumer) + " " + aggregate(type, id);
             if (consumer.empty()) {
                 throw Failure(OUTBOX_ERR_INVALID_ARGUMENT, "a redrive names its subscriber (the relay's: retry)");
             }
             int64_t n = 0;
             check(outbox_parked_redrive(&n, db, consumer.c_str(), type.c_str(), id.c_str()));
             return "{\"redriven\":" + std::to_string(n) + "}";
         }},
        {"/api/redrive-all",
         [](outbox_db *db, const Identity &, const cJSON *b, std::string &what) {
             const std::string consumer = field(b, "consumer", true);
             what = "redrive every parked aggregate of consumer=" + quote(consumer);
             int64_t n = 0;
             check(outbox_parked_redrive_all(&n, db, consumer.c_str()));
             return "{\"redriven\":" + std::to_string(n) + "}";
         }},
        {"/api/skip",
         [](outbox_db *db, const Identity &who, const cJSON *b, std::string &what) {
             // No consumer: the relay's parked aggregate (its FAILED head is never published).
             const std::string consumer = field(b, "consumer", false), event = field(b, "event_id", false);
             const std::string type = field(b, "aggregate_type", true), id = field(b, "aggregate_id", true);
             const std::string reason = field(b, "reason", true);
             what = "skip the head of " + (consumer.empty() ? std::string("the relay") : "consumer=" + quote(consumer)) +
                    " " + aggregate(type, id) +
                    " event=" + quote(event) + " reason=" + quote(reason);
             if (reason.find_first_not_of(" \t\r\n") == std::string::npos || reason.size() > 2000) {
                 throw Failure(OUTBOX_ERR_INVALID_ARGUMENT, "a skip needs a reason (at most 2000 bytes)");
             }
             char *skipped = nullptr;
             check(outbox_parked_skip(&skipped, db, or_null(consumer), type.c_str(), id.c_str(), or_null(event),
                                      who.name.c_str(), reason.c_str()));
             StringPtr owned(skipped);
             return "{\"skipped\":" + quote(skipped != nullptr ? skipped : "") + "}";
         }},
    };
    for (const auto &[path, fn] : actions) {
        s.Post(path, [this, fn = fn](const httplib::Request &req, httplib::Response &res) { act(req, res, fn); });
        // No state changes through GET: the action's path answers other methods with 405.
        s.Get(path, [](const httplib::Request &, httplib::Response &res) {
            res.set_header("Allow", "POST");
            send_error(res, 405, "actions are POST only");
        });
    }
}

void Console::routes(httplib::Server &s) {
    s.set_default_headers({
        {"Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                                    "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"},
        {"X-Content-Type-Options", "nosniff"},
        {"X-Frame-Options", "DENY"},
        // Not no-referrer: under it a browser sends "Origin: null" with a form, and the sign-in checks it.
        {"Referrer-Policy", "same-origin"},
        {"Cache-Control", "no-store"},
    });
    s.Get("/", [this](const httplib::Request &req, httplib::Response &res) { page(req, res); });
    s.Get("/console.js", [](const httplib::Request &, httplib::Response &res) {
        res.set_content(kConsoleJs, "text/javascript; charset=utf-8");
    });
    s.Get("/console.css", [](const httplib::Request &, httplib::Response &res) {
        res.set_content(kConsoleCss, "text/css; charset=utf-8");
    });
    s.Get("/favicon.ico", [](const httplib::Request &, httplib::Response &res) { res.status = 204; });
    s.Post("/login", [this](const httplib::Request &req, httplib::Response &res) { login(req, res); });
    s.Post("/logout", [this](const httplib::Request &req, httplib::Response &res) { logout(req, res); });
    s.Get("/api/state", [this](const httplib::Request &req, httplib::Response &res) { state(req, res); });
    action_routes(s);
}

std::unique_ptr<httplib::Server> make_server(const ConsoleOptions &co) {
    if (co.tls_cert.empty() != co.tls_key.empty()) {
        usage("--tls-cert and --tls-key go together");
    }
    if (co.tls_cert.empty()) {
        return std::make_unique<httplib::Server>();
    }
    auto s = std::make_unique<httplib::SSLServer>(co.tls_cert.c_str(), co.tls_key.c_str());
    if (!s->is_valid()) {
        usage("--tls-cert/--tls-key: cannot load the certificate and key");
    }
    return s;
}

} // namespace

CLI::App *define_console(CLI::App &app, ConsoleOptions &co) {
    CLI::App *cmd = app.add_subcommand(
        "console", "serve the operator console: the relay's pending, failed and parked events, each subscriber's "
                   "lag over the last hour, the parked aggregates; retry, redrive and skip (docs/console.md)");
    CommonOptions &c = co.common;
    cmd->add_option("--pg-url", c.pg_url, "PostgreSQL URL or conninfo (env OUTBOX_PG_URL)");
    cmd->add_option("--config", c.config_file, "file of 'key = value' lines using the configuration keys below")
        ->check(CLI::ExistingFile);
    cmd->add_option("--set", c.sets, "set a configuration key, KEY=VALUE (repeatable; see the keys below)");
    cmd->add_option("--schema", c.schema, "schema of the tables (default public)");
    cmd->add_option("--table", c.table, "outbox table (default outbox)");
    cmd->add_option("--inbox-table", c.inbox_table, "consumer inbox table (default outbox_inbox)");
    cmd->add_option("--listen", co.listen,
                    "HOST:PORT to serve on (default 127.0.0.1:8089, loopback only); another address exposes the "
                    "console to the network: use --tls-cert/--tls-key then");
    cmd->add_option("--token-file", co.token_file,
                    "file of 'name role token' lines, role read (view) or operator (view and act); tokens of at "
                    "least 16 characters; '#' starts a comment. Also OUTBOX_CONSOLE_TOKENS (the same lines, "
                    "separated by ';'). At least one token is required")
        ->envname("OUTBOX_CONSOLE_TOKEN_FILE");
    cmd->add_option("--subscriber", co.subscribers,
                    "a subscriber to show even while it holds nothing back (repeatable); those holding aggregates "
                    "are shown anyway");
    cmd->add_option("--sample-interval", co.sample_interval_s, "seconds between samples (default 5); an hour is kept")
        ->check(CLI::Range(1, 600));
    cmd->add_option("--max-rows", co.max_rows, "parked aggregates listed at most, oldest first (default 500)")
        ->check(CLI::Range(1, 100000));
    cmd->add_option("--tls-cert", co.tls_cert, "serve HTTPS with this certificate (PEM); with --tls-key")
        ->check(CLI::ExistingFile);
    cmd->add_option("--tls-key", co.tls_key, "the certificate's private key (PEM)")->check(CLI::ExistingFile);
    cmd->footer(keys_help());
    return cmd;
}

int run_console(const ConsoleOptions &co) {
    ConfigPtr cfg = build_config(co.common);
    if (config_get(cfg.get(), "pg.url").empty()) {
        usage("console: no PostgreSQL URL: give --pg-url or OUTBOX_PG_URL");
    }
    const Listen where = parse_listen(co.listen);
    Auth auth(co.token_file);
    // SIGINT and SIGTERM are taken by sigwait below: blocked here, before any thread starts.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    std::signal(SIGPIPE, SIG_IGN);

    Sampler sampler(cfg.get(), co.sample_interval_s, co.max_rows, co.subscribers);
    Console console(co, cfg.get(), auth, sampler);
    std::unique_ptr<httplib::Server> server = make_server(co);
    server->set_payload_max_length(64 * 1024);
    server->set_read_timeout(10);
    console.routes(*server);
    if (!server->bind_to_port(where.host, where.port)) {
        throw Failure(OUTBOX_ERR_CONNECTION, "console: cannot listen on " + co.listen);
    }
    sampler.start();
    std::thread http([&server] { server->listen_after_bind(); });
    const std::string scheme = co.tls_cert.empty() ? "http" : "https";
    log("info", "serving " + scheme + "://" + co.listen + "/ for " + std::to_string(auth.count(Role::operator_)) +
                    " operator and " + std::to_string(auth.count(Role::read)) + " read token(s); database " +
                    database_shown(co));
    if (!loopback(where.host) && co.tls_cert.empty()) {
        log("warn", "listening beyond loopback without TLS: tokens and session cookies cross the network in clear "
                    "text (give --tls-cert and --tls-key)");
    }
    int sig = 0;
    sigwait(&stop_signals, &sig);
    log("info", std::string("stopping on ") + (sig == SIGINT ? "SIGINT" : "SIGTERM"));
    server->stop();
    http.join();
    return 0;
}

} // namespace outbox::cli
