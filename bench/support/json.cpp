#include "json.hpp"

#include "util.hpp"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <utility>

namespace bench {

namespace {

cJSON *checked(cJSON *j) {
    if (j == nullptr) {
        die("cJSON: out of memory");
    }
    return j;
}

double rounded(double v, int decimals) {
    const double scale = std::pow(10.0, decimals);
    return std::round(v * scale) / scale;
}

} // namespace

Json Json::object() {
    return Json(checked(cJSON_CreateObject()));
}

Json Json::array() {
    return Json(checked(cJSON_CreateArray()));
}

Json Json::numbers(const std::vector<double> &v, int decimals) {
    Json a = array();
    for (double x : v) {
        cJSON_AddItemToArray(a.j_, checked(cJSON_CreateNumber(rounded(x, decimals))));
    }
    return a;
}

Json Json::strings(const std::vector<std::string> &v) {
    Json a = array();
    for (const auto &x : v) {
        cJSON_AddItemToArray(a.j_, checked(cJSON_CreateString(x.c_str())));
    }
    return a;
}

Json Json::parse_file(const std::string &path) {
    std::ifstream f(path);
    if (!f) {
        die("cannot read " + path);
    }
    const std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    cJSON *j = cJSON_Parse(all.c_str());
    if (j == nullptr) {
        die(path + " is not JSON");
    }
    return Json(j);
}

Json::Json(const Json &other) : j_(other.j_ == nullptr ? nullptr : checked(cJSON_Duplicate(other.j_, 1))) {}

Json::Json(Json &&other) noexcept : j_(std::exchange(other.j_, nullptr)) {}

Json &Json::operator=(Json other) noexcept {
    std::swap(j_, other.j_);
    return *this;
}

Json::~Json() {
    cJSON_Delete(j_);
}

cJSON *Json::release() {
    return std::exchange(j_, nullptr);
}

Json &Json::num(const char *key, double v, int decimals) {
    checked(cJSON_AddNumberToObject(j_, key, rounded(v, decimals)));
    return *this;
}

Json &Json::integer(const char *key, long long v) {
    checked(cJSON_AddNumberToObject(j_, key, static_cast<double>(v)));
    return *this;
}

Json &Json::boolean(const char *key, bool v) {
    checked(cJSON_AddBoolToObject(j_, key, v ? 1 : 0));
    return *this;
}

Json &Json::str(const char *key, const std::string &v) {
    checked(cJSON_AddStringToObject(j_, key, v.c_str()));
    return *this;
}

Json &Json::set(const char *key, Json v) {
    if (!v.empty()) {
        cJSON_AddItemToObject(j_, key, v.release());
    }
    return *this;
}

Json &Json::merge(const Json &other) {
    if (other.j_ != nullptr) {
        for (const cJSON *m = other.j_->child; m != nullptr; m = m->next) {
            cJSON_AddItemToObject(j_, m->string, checked(cJSON_Duplicate(m, 1)));
        }
    }
    return *this;
}

Json &Json::push(Json v) {
    cJSON_AddItemToArray(j_, v.release());
    return *this;
}

double Json::number_at(const char *a) const {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j_, a);
    return cJSON_IsNumber(x) ? x->valuedouble : -1.0;
}

double Json::number_at(const char *a, const char *b) const {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j_, a);
    x = x != nullptr ? cJSON_GetObjectItemCaseSensitive(x, b) : nullptr;
    return cJSON_IsNumber(x) ? x->valuedouble : -1.0;
}

std::string Json::print() const {
    char *text = cJSON_Print(j_);
    if (text == nullptr) {
        die("cJSON: cannot print the report");
    }
    std::string out(text);
    cJSON_free(text);
    return out + "\n";
}

void write_file_atomically(const std::string &path, const std::string &text) {
    const std::string tmp = path + ".tmp";
    {
        std::ofstream f(tmp);
        f << text;
        if (!f) {
            die("cannot write " + tmp);
        }
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        die("cannot rename " + tmp + " to " + path);
    }
}

} // namespace bench
