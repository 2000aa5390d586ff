# Generates outbox_ffi.h from outbox.h for FFI loaders that take plain C declarations (PHP's
# FFI::cdef, Python's cffi): no preprocessor lines, no comments, no inline functions, no export
# macro. Run as: cmake -DIN=outbox.h -DOUT=outbox_ffi.h -P ffi_header.cmake
file(READ "${IN}" text)
# Comments first (/* ... */ may span lines; [^*]|\*+[^*/] keeps the match inside one comment).
string(REGEX REPLACE "/\\*([^*]|\\*+[^*/])*\\*+/" "" text "${text}")
string(REGEX REPLACE "//[^\n]*" "" text "${text}")
# static inline helpers (bodies are one level of braces deep) -- before the lone braces go.
string(REGEX REPLACE "static inline[^{]*{[^}]*}" "" text "${text}")
# Preprocessor lines, the extern "C" wrapper and the export macro.
string(REGEX REPLACE "(^|\n)[ \t]*#[^\n]*" "\\1" text "${text}")
string(REPLACE "extern \"C\" {" "" text "${text}")
string(REGEX REPLACE "\n}[ \t]*\n" "\n" text "${text}")
string(REPLACE "OUTBOX_API " "" text "${text}")
string(REGEX REPLACE "\n[ \t]*\n([ \t]*\n)+" "\n\n" text "${text}")
file(WRITE "${OUT}" "/* Generated from outbox.h for FFI loaders (PHP FFI::cdef). Do not edit. */\n${text}")
