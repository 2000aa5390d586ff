// outbox_db_*, outbox_migrate: connections the library opens.
#include "common.h"

namespace outbox_node {
namespace {

// db_open(conninfo, cfg | null) -> Promise<outbox_db>
class OpenWorker : public Worker {
  public:
    OpenWorker(Napi::Env env, std::string conninfo, outbox_config *cfg)
        : Worker(env, "outbox_db_open"), conninfo_(std::move(conninfo)), cfg_(cfg) {}
    ~OpenWorker() override { outbox_db_close(db_); } // NULL unless result() did not take it

  protected:
    outbox_status run() override { return outbox_db_open(&db_, conninfo_.c_str(), cfg_); }
    Napi::Value result(Napi::Env env) override {
        outbox_db *db = db_;
        db_ = nullptr;
        return wrap(env, db);
    }

  private:
    std::string conninfo_;
    outbox_config *cfg_;
    outbox_db *db_ = nullptr;
};

Napi::Value DbOpen(const Napi::CallbackInfo &info) {
    std::string conninfo = str_arg(info, 0, "conninfo");
    auto *cfg = unwrap_opt<outbox_config>(info, 1);
    auto *w = new OpenWorker(info.Env(), std::move(conninfo), cfg != nullptr ? cfg->ptr : nullptr);
    if (cfg != nullptr) {
        w->hold(info[1], cfg, true);
    }
    return w->start();
}

Napi::Value DbClose(const Napi::CallbackInfo &info) {
    if (auto *h = unwrap<outbox_db>(info, 0, Use::release)) {
        h->release();
    }
    return info.Env().Undefined();
}

// db_exec(db, sql) -> Promise<void>
class ExecWorker : public Worker {
  public:
    ExecWorker(Napi::Env env, outbox_db *db, std::string sql)
        : Worker(env, "outbox_db_exec"), db_(db), sql_(std::move(sql)) {}

  protected:
    outbox_status run() override { return outbox_db_exec(db_, sql_.c_str()); }

  private:
    outbox_db *db_;
    std::string sql_;
};

Napi::Value exec_on(const Napi::CallbackInfo &info, std::string sql) {
    auto *h = unwrap<outbox_db>(info, 0);
    auto *w = new ExecWorker(info.Env(), h->ptr, std::move(sql));
    w->hold(info[0], h);
    return w->start(info.Env(), lane_of(info.Env(), h));
}

Napi::Value DbExec(const Napi::CallbackInfo &info) {
    unwrap<outbox_db>(info, 0); // a bad handle before a bad statement
    return exec_on(info, str_arg(info, 1, "sql"));
}

// db_begin(db), db_commit(db), db_rollback(db) -> Promise<void>: the transaction of Database#transaction.
Napi::Value DbBegin(const Napi::CallbackInfo &info) {
    return exec_on(info, outbox_loop_sql_text(OUTBOX_LOOP_SQL_BEGIN));
}

Napi::Value DbCommit(const Napi::CallbackInfo &info) {
    return exec_on(info, outbox_loop_sql_text(OUTBOX_LOOP_SQL_COMMIT));
}

Napi::Value DbRollback(const Napi::CallbackInfo &info) {
    return exec_on(info, outbox_loop_sql_text(OUTBOX_LOOP_SQL_ROLLBACK));
}

// db_tx_state(db) -> 'IDLE' | 'ACTIVE' | 'INTRANS' | 'INERROR' | 'UNKNOWN' (outbox_tx_state); no I/O.
Napi::Value DbTxState(const Napi::CallbackInfo &info) {
    auto *h = unwrap<outbox_db>(info, 0);
    return Napi::String::New(info.Env(), name_of(kTxStates, outbox_db_tx_state(h->ptr)));
}

// migrate(db, target: 0 all | 1 outbox | 2 inbox) -> Promise<version>
class MigrateWorker : public Worker {
  public:
    MigrateWorker(Napi::Env env, outbox_db *db, outbox_migrate_target target)
        : Worker(env, "outbox_migrate"), db_(db), target_(target) {}

  protected:
    outbox_status run() override { return outbox_migrate(&version_, db_, target_); }
    Napi::Value result(Napi::Env env) override { return Napi::Number::New(env, version_); }

  private:
    outbox_db *db_;
    outbox_migrate_target target_;
    int version_ = 0;
};

Napi::Value Migrate(const Napi::CallbackInfo &info) {
    auto *h = unwrap<outbox_db>(info, 0);
    int64_t target = info[1].IsUndefined() ? 0 : int64_arg(info, 1, "target");
    auto *w = new MigrateWorker(info.Env(), h->ptr, static_cast<outbox_migrate_target>(target));
    w->hold(info[0], h);
    return w->start(info.Env(), lane_of(info.Env(), h));
}

} // namespace

void register_db(Napi::Env env, Napi::Object exports) {
    def(env, exports, "db_open", DbOpen);
    def(env, exports, "db_close", DbClose);
    def(env, exports, "db_exec", DbExec);
    def(env, exports, "db_begin", DbBegin);
    def(env, exports, "db_commit", DbCommit);
    def(env, exports, "db_rollback", DbRollback);
    def(env, exports, "db_tx_state", DbTxState);
    def(env, exports, "migrate", Migrate);
}

} // namespace outbox_node
