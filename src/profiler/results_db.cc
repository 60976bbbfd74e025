// Copyright kvserve authors. The results database: SQLite, one row per
// (model, workload, spec, sample set, evaluator).
#include <sqlite3.h>

#include <cmath>

#include "kvserve/profiler.h"

namespace kvserve {

struct ResultsDb::Impl {
  sqlite3* db = nullptr;
  ~Impl() {
    if (db != nullptr) sqlite3_close(db);
  }
  Status Error(const char* what) const {
    return Status::IOError(std::string("results db: ") + what + ": " + sqlite3_errmsg(db));
  }
  Status Exec(const char* sql) {
    char* message = nullptr;
    if (sqlite3_exec(db, sql, nullptr, nullptr, &message) != SQLITE_OK) {
      Status s = Status::IOError(std::string("results db: ") + (message ? message : "error"));
      sqlite3_free(message);
      return s;
    }
    return Status::Ok();
  }
};

namespace {

constexpr const char* kSchema =
    "CREATE TABLE IF NOT EXISTS evaluations ("
    " model TEXT NOT NULL, workload TEXT NOT NULL, spec TEXT NOT NULL,"
    " sample_set TEXT NOT NULL, evaluator TEXT NOT NULL,"
    " quality REAL, quality_ci REAL, samples INTEGER,"
    " quality_low REAL, quality_high REAL,"
    " compression_ratio REAL, encode_bytes_per_second REAL,"
    " decode_bytes_per_second REAL, overhead_seconds REAL,"
    " seq INTEGER NOT NULL,"
    " recorded_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP,"
    " PRIMARY KEY (model, workload, spec, sample_set, evaluator));"
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);"
    "INSERT OR IGNORE INTO meta VALUES ('format', 'kvserve-results-db-1');";

// RAII statement.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) {
    if (sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr) != SQLITE_OK) stmt_ = nullptr;
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  sqlite3_stmt* get() const { return stmt_; }
  void Text(int i, const std::string& s) {
    sqlite3_bind_text(stmt_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
  }
  void BindKey(const EvaluationKey& k) {
    Text(1, k.model);
    Text(2, k.workload);
    Text(3, k.spec);
    Text(4, k.sample_set);
    Text(5, k.evaluator);
  }

 private:
  sqlite3_stmt* stmt_ = nullptr;
};

EvaluationRecord ReadRow(sqlite3_stmt* s) {
  auto text = [&](int i) {
    const unsigned char* t = sqlite3_column_text(s, i);
    return t ? std::string(reinterpret_cast<const char*>(t)) : std::string();
  };
  EvaluationRecord r;
  r.key = {text(0), text(1), text(2), text(3), text(4)};
  if (sqlite3_column_type(s, 5) != SQLITE_NULL) {
    QualityEstimate q;
    q.quality = sqlite3_column_double(s, 5);
    q.ci_half_width = sqlite3_column_double(s, 6);
    q.samples = sqlite3_column_int(s, 7);
    if (sqlite3_column_type(s, 12) != SQLITE_NULL) q.low = sqlite3_column_double(s, 12);
    if (sqlite3_column_type(s, 13) != SQLITE_NULL) q.high = sqlite3_column_double(s, 13);
    r.quality = q;
  }
  if (sqlite3_column_type(s, 8) != SQLITE_NULL) {
    r.codec = CodecMetrics{sqlite3_column_double(s, 8), sqlite3_column_double(s, 9),
                           sqlite3_column_double(s, 10), sqlite3_column_double(s, 11)};
  }
  return r;
}

constexpr const char* kColumns =
    "SELECT model, workload, spec, sample_set, evaluator, quality, quality_ci, samples,"
    " compression_ratio, encode_bytes_per_second, decode_bytes_per_second, overhead_seconds,"
    " quality_low, quality_high FROM evaluations ";

// Databases written before the interval ends were stored lack their
// columns: add them (NULL for the old rows).
Status AddIntervalColumns(sqlite3* db) {
  bool have = false;
  {
    Statement info(db, "PRAGMA table_info(evaluations)");
    if (info.get() == nullptr) return Status::IOError("results db: table_info");
    while (sqlite3_step(info.get()) == SQLITE_ROW) {
      const unsigned char* name = sqlite3_column_text(info.get(), 1);
      if (name != nullptr && std::string(reinterpret_cast<const char*>(name)) == "quality_low") have = true;
    }
  }
  if (have) return Status::Ok();
  char* message = nullptr;
  if (sqlite3_exec(db,
                   "ALTER TABLE evaluations ADD COLUMN quality_low REAL;"
                   "ALTER TABLE evaluations ADD COLUMN quality_high REAL;",
                   nullptr, nullptr, &message) != SQLITE_OK) {
    Status st = Status::IOError(std::string("results db: adding the interval columns: ") +
                                (message ? message : "error"));
    sqlite3_free(message);
    return st;
  }
  return Status::Ok();
}

}  // namespace

ResultsDb::ResultsDb(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ResultsDb::~ResultsDb() = default;

Result<std::unique_ptr<ResultsDb>> ResultsDb::Open(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  if (sqlite3_open_v2(path.c_str(), &impl->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                      nullptr) != SQLITE_OK) {
    return Status::IOError("results db: cannot open " + path);
  }
  sqlite3_busy_timeout(impl->db, 5000);
  if (Status s = impl->Exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"); !s.ok()) {
    // WAL is unavailable on some file systems; the default journal works too.
  }
  if (Status s = impl->Exec(kSchema); !s.ok()) {
    return Status::Corruption("results db " + path + ": " + s.message());
  }
  Statement check(impl->db, "SELECT value FROM meta WHERE key = 'format'");
  if (check.get() == nullptr || sqlite3_step(check.get()) != SQLITE_ROW ||
      std::string(reinterpret_cast<const char*>(sqlite3_column_text(check.get(), 0))) !=
          "kvserve-results-db-1") {
    return Status::Corruption("results db " + path + ": not a kvserve results database");
  }
  KVSERVE_RETURN_IF_ERROR(AddIntervalColumns(impl->db));
  return std::unique_ptr<ResultsDb>(new ResultsDb(std::move(impl)));
}

Status ResultsDb::PutQuality(const EvaluationKey& key, const QualityEstimate& quality) {
  Statement s(impl_->db,
              "INSERT INTO evaluations (model, workload, spec, sample_set, evaluator, quality,"
              " quality_ci, samples, quality_low, quality_high, seq)"
              " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10,"
              " (SELECT IFNULL(MAX(seq), 0) + 1 FROM evaluations))"
              " ON CONFLICT DO UPDATE SET quality = excluded.quality,"
              " quality_ci = excluded.quality_ci, samples = excluded.samples,"
              " quality_low = excluded.quality_low, quality_high = excluded.quality_high");
  if (s.get() == nullptr) return impl_->Error("prepare");
  s.BindKey(key);
  sqlite3_bind_double(s.get(), 6, quality.quality);
  sqlite3_bind_double(s.get(), 7, quality.ci_half_width);
  sqlite3_bind_int(s.get(), 8, quality.samples);
  // NULL for an unknown interval end (SQLite would store NaN as NULL anyway).
  if (std::isfinite(quality.low)) sqlite3_bind_double(s.get(), 9, quality.low);
  else sqlite3_bind_null(s.get(), 9);
  if (std::isfinite(quality.high)) sqlite3_bind_double(s.get(), 10, quality.high);
  else sqlite3_bind_null(s.get(), 10);
  if (sqlite3_step(s.get()) != SQLITE_DONE) return impl_->Error("insert");
  return Status::Ok();
}

Status ResultsDb::PutCodec(const EvaluationKey& key, const CodecMetrics& codec) {
  Statement s(impl_->db,
              "INSERT INTO evaluations (model, workload, spec, sample_set, evaluator,"
              " compression_ratio, encode_bytes_per_second, decode_bytes_per_second,"
              " overhead_seconds, seq) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9,"
              " (SELECT IFNULL(MAX(seq), 0) + 1 FROM evaluations))"
              " ON CONFLICT DO UPDATE SET compression_ratio = excluded.compression_ratio,"
              " encode_bytes_per_second = excluded.encode_bytes_per_second,"
              " decode_bytes_per_second = excluded.decode_bytes_per_second,"
              " overhead_seconds = excluded.overhead_seconds");
  if (s.get() == nullptr) return impl_->Error("prepare");
  s.BindKey(key);
  sqlite3_bind_double(s.get(), 6, codec.compression_ratio);
  sqlite3_bind_double(s.get(), 7, codec.encode_bytes_per_second);
  sqlite3_bind_double(s.get(), 8, codec.decode_bytes_per_second);
  sqlite3_bind_double(s.get(), 9, codec.overhead_seconds);
  if (sqlite3_step(s.get()) != SQLITE_DONE) return impl_->Error("insert");
  return Status::Ok();
}

Result<EvaluationRecord> ResultsDb::Get(const EvaluationKey& key) {
  Statement s(impl_->db, (std::string(kColumns) +
                          "WHERE model = ?1 AND workload = ?2 AND spec = ?3 AND"
                          " sample_set = ?4 AND evaluator = ?5")
                             .c_str());
  if (s.get() == nullptr) return impl_->Error("prepare");
  s.BindKey(key);
  const int rc = sqlite3_step(s.get());
  if (rc == SQLITE_ROW) return ReadRow(s.get());
  if (rc == SQLITE_DONE) return Status::NotFound("no evaluation of " + key.spec);
  return impl_->Error("select");
}

Result<std::vector<EvaluationRecord>> ResultsDb::List(const EvaluationKey& scope) {
  Statement s(impl_->db, (std::string(kColumns) +
                          "WHERE model = ?1 AND workload = ?2 AND sample_set = ?4 AND"
                          " evaluator = ?5 ORDER BY seq")
                             .c_str());
  if (s.get() == nullptr) return impl_->Error("prepare");
  s.BindKey(scope);
  std::vector<EvaluationRecord> out;
  int rc;
  while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) out.push_back(ReadRow(s.get()));
  if (rc != SQLITE_DONE) return impl_->Error("select");
  return out;
}

namespace {

class CachingEvaluator final : public Evaluator {
 public:
  CachingEvaluator(Evaluator* inner, ResultsDb* db, EvaluationKey scope, int* reused)
      : inner_(inner), db_(db), scope_(std::move(scope)), reused_(reused) {
    scope_.evaluator = inner_->name();
  }
  std::string name() const override { return inner_->name(); }
  bool is_proxy() const override { return inner_->is_proxy(); }
  Result<QualityEstimate> Evaluate(const Profile& profile) override {
    EvaluationKey key = scope_;
    key.spec = profile.ToString();
    auto stored = db_->Get(key);
    if (stored.ok() && stored->quality) {
      if (reused_ != nullptr) ++*reused_;
      return *stored->quality;
    }
    if (!stored.ok() && stored.status().code() != StatusCode::kNotFound) return stored.status();
    auto q = inner_->Evaluate(profile);
    if (!q.ok()) return q.status();
    KVSERVE_RETURN_IF_ERROR(db_->PutQuality(key, *q));
    return q;
  }

 private:
  Evaluator* inner_;
  ResultsDb* db_;
  EvaluationKey scope_;
  int* reused_;
};

}  // namespace

std::unique_ptr<Evaluator> MakeCachingEvaluator(Evaluator* inner, ResultsDb* db,
                                                EvaluationKey scope, int* reused) {
  return std::make_unique<CachingEvaluator>(inner, db, std::move(scope), reused);
}

}  // namespace kvserve
