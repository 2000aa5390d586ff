# Two targets:
# - outbox_c: liboutbox as a static library, from the repository's capi/src and core/ sources
#   (the lists in their CMakeLists.txt), C++17 with exceptions, against the system libpq,
#   librabbitmq-c and cJSON (pkg-config);
# - outbox: the addon, bindings/node/src (node-addon-api glue), which sees only capi/include.
# Built by tools/build.js, which passes --nodedir=<node prefix> so nothing is downloaded.
{
  "target_defaults": {
    "cflags!": ["-fno-exceptions"],
    "cflags_cc!": ["-fno-exceptions", "-fno-rtti", "-std=gnu++17", "-std=gnu++20"],
    "cflags": ["-fPIC", "<!@(pkg-config --cflags libpq librabbitmq libcjson)"],
    "cflags_cc": ["-std=c++17", "-fexceptions", "-frtti", "-fvisibility=hidden", "-fvisibility-inlines-hidden"],
    "xcode_settings": {
      "GCC_ENABLE_CPP_EXCEPTIONS": "YES",
      "GCC_ENABLE_CPP_RTTI": "YES",
      "CLANG_CXX_LANGUAGE_STANDARD": "c++17",
      "OTHER_CFLAGS": ["<!@(pkg-config --cflags libpq librabbitmq libcjson)"]
    }
  },
  "targets": [
    {
      "target_name": "outbox_c",
      "type": "static_library",
      "sources": ["<!@(node tools/sources.js library-sources)"],
      "include_dirs": ["<!@(node tools/sources.js library-includes)"]
    },
    {
      "target_name": "outbox",
      "dependencies": ["outbox_c"],
      "sources": ["<!@(node tools/sources.js addon-sources)"],
      "include_dirs": [
        "<!@(node tools/sources.js public-include)",
        "<!@(node tools/sources.js addon-api)"
      ],
      "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS", "NODE_ADDON_API_DISABLE_DEPRECATED",
                  "NODE_API_SWALLOW_UNTHROWABLE_EXCEPTIONS"],
      "libraries": ["<!@(pkg-config --libs libpq librabbitmq libcjson)"],
      "conditions": [
        ["OS=='linux'", {"ldflags": ["-Wl,--version-script=<(module_root_dir)/tools/addon.map"]}]
      ]
    }
  ]
}
