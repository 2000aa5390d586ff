// Shared by the fuzz targets: what counts as a finding besides a sanitizer report.
#pragma once

#include "error.hpp"
#include "json.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace fuzz {

// A property the input broke: print it and crash, so libFuzzer keeps the input.
[[noreturn]] inline void broken(const std::string &what) {
    std::fprintf(stderr, "PROPERTY BROKEN: %s\n", what.c_str());
    std::abort();
}

inline void require(bool ok, const std::string &what) {
    if (!ok) {
        broken(what);
    }
}

// Text that reaches SQL parameters, AMQP headers or C strings.
inline bool clean_text(std::string_view s) { return s.find('\0') == std::string_view::npos && outbox::valid_utf8(s); }

// Runs fn; outbox::Error is the library's answer to bad input and is fine; anything else that
// escapes (std::out_of_range, std::length_error, ...) would be INTERNAL at the C ABI: a finding.
template <typename Fn> bool answered(Fn &&fn) {
    try {
        fn();
        return true;
    } catch (const outbox::Error &e) {
        require(e.code() != outbox::Errc::internal, std::string("INTERNAL error: ") + e.what());
        require(outbox::valid_utf8(e.what()), "error message is not UTF-8");
        return false;
    } catch (const std::bad_alloc &) {
        return false;
    } catch (const std::exception &e) {
        broken(std::string("unexpected exception: ") + e.what());
    }
}

} // namespace fuzz
