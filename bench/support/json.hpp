// The report's JSON, built through cJSON: an owning handle on one cJSON value, copied deeply.
#pragma once

#include <cJSON.h>

#include <string>
#include <vector>

namespace bench {

class Json {
  public:
    Json() = default; // nothing: empty() is true, and set() of it adds nothing
    static Json object();
    static Json array();
    // Numbers rounded to `decimals` places, as the Markdown report prints them.
    static Json numbers(const std::vector<double> &v, int decimals);
    static Json strings(const std::vector<std::string> &v);
    static Json parse_file(const std::string &path); // die()s when the file is missing or not JSON

    Json(const Json &other);
    Json(Json &&other) noexcept;
    Json &operator=(Json other) noexcept;
    ~Json();

    [[nodiscard]] bool empty() const { return j_ == nullptr; }

    // Members of an object, in the order they are added.
    Json &num(const char *key, double v, int decimals);
    Json &integer(const char *key, long long v);
    Json &boolean(const char *key, bool v);
    Json &str(const char *key, const std::string &v);
    Json &set(const char *key, Json v);
    // Every member of `other` (an object) added to this one.
    Json &merge(const Json &other);
    // An element of an array.
    Json &push(Json v);

    // obj[a] when it is a number, else -1.
    [[nodiscard]] double number_at(const char *a) const;
    // obj[a][b] when it is a number, else -1.
    [[nodiscard]] double number_at(const char *a, const char *b) const;

    [[nodiscard]] std::string print() const;

  private:
    explicit Json(cJSON *j) : j_(j) {}
    cJSON *release();
    cJSON *j_ = nullptr;
};

// Writes `text` to `path` through a temporary file and a rename, so a reader never sees half of it.
void write_file_atomically(const std::string &path, const std::string &text);

} // namespace bench
