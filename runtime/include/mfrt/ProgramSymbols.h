//===- ProgramSymbols.h - The symbols the runtime looks up ------*- C++ -*-===//
//
// The symbols of an emitted program that the runtime looks up: the embedded
// manifest, the compiled entry points (the C interface of `func.func
// @prefill` and `@decode`) and, in a program of two pools (meshfold-compile
// --decode-plan), the decode pool's copies of them under a prefix. Each name
// is written once, here, as a macro that expands to the identifier: the
// runtime declares the symbols with the macros (C++ cannot declare a symbol
// from a string), and the compiler names them with the string constants,
// which are the macros stringized. No MLIR: the compiler and the runtime
// both read it.
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_PROGRAMSYMBOLS_H
#define MFRT_PROGRAMSYMBOLS_H

#define MFRT_SYMBOL_CONCAT_(A, B) A##B
#define MFRT_SYMBOL_CONCAT(A, B) MFRT_SYMBOL_CONCAT_(A, B)
#define MFRT_SYMBOL_STRING_(X) #X
/// The identifier `X` expands to, as a string literal.
#define MFRT_SYMBOL_STRING(X) MFRT_SYMBOL_STRING_(X)

/// The manifest the compiler embeds (meshfold/Support/Manifest.h).
#define MFRT_MANIFEST_SYMBOL __mf_manifest
/// The entry points' function names.
#define MFRT_PREFILL_ENTRY prefill
#define MFRT_DECODE_ENTRY decode
/// The C interface of entry point `Name` (MLIR's llvm.emit_c_interface):
/// _mlir_ciface_<Name>.
#define MFRT_CIFACE_PREFIX _mlir_ciface_
#define MFRT_CIFACE(Name) MFRT_SYMBOL_CONCAT(MFRT_CIFACE_PREFIX, Name)
#define MFRT_PREFILL_CIFACE MFRT_CIFACE(MFRT_PREFILL_ENTRY)
#define MFRT_DECODE_CIFACE MFRT_CIFACE(MFRT_DECODE_ENTRY)
/// A program of two pools: symbol `Symbol` of the decode pool (every symbol
/// its module defines is renamed so): __mf_pool1_<Symbol>.
#define MFRT_POOL_SYMBOL_PREFIX __mf_pool1_
#define MFRT_POOL_SYMBOL(Symbol)                                               \
  MFRT_SYMBOL_CONCAT(MFRT_POOL_SYMBOL_PREFIX, Symbol)
#define MFRT_POOL_MANIFEST_SYMBOL MFRT_POOL_SYMBOL(MFRT_MANIFEST_SYMBOL)
#define MFRT_POOL_DECODE_CIFACE MFRT_POOL_SYMBOL(MFRT_DECODE_CIFACE)

#ifdef __cplusplus
#include <string_view>

namespace meshfold {
/// The manifest's symbol name in the emitted program; the runtime reads it.
inline constexpr const char *kManifestSymbol =
    MFRT_SYMBOL_STRING(MFRT_MANIFEST_SYMBOL);
/// The prefix of the decode pool's symbols in a program of two pools: its
/// manifest is `__mf_pool1___mf_manifest`, its step
/// `__mf_pool1__mlir_ciface_decode`.
inline constexpr const char *kPoolSymbolPrefix =
    MFRT_SYMBOL_STRING(MFRT_POOL_SYMBOL_PREFIX);
/// The entry points' function names, and the prefix of their C interface.
inline constexpr const char *kPrefillEntry =
    MFRT_SYMBOL_STRING(MFRT_PREFILL_ENTRY);
inline constexpr const char *kDecodeEntry =
    MFRT_SYMBOL_STRING(MFRT_DECODE_ENTRY);
inline constexpr const char *kCInterfacePrefix =
    MFRT_SYMBOL_STRING(MFRT_CIFACE_PREFIX);

namespace detail {
/// Whether `symbol` is `prefix` followed by `name`.
constexpr bool isJoined(std::string_view symbol, std::string_view prefix,
                        std::string_view name) {
  return symbol.size() == prefix.size() + name.size() &&
         symbol.substr(0, prefix.size()) == prefix &&
         symbol.substr(prefix.size()) == name;
}
} // namespace detail

// The identifiers the runtime declares are the names the compiler gives:
// its prefix joined to the symbol's name.
static_assert(detail::isJoined(MFRT_SYMBOL_STRING(MFRT_PREFILL_CIFACE),
                               kCInterfacePrefix, kPrefillEntry));
static_assert(detail::isJoined(MFRT_SYMBOL_STRING(MFRT_DECODE_CIFACE),
                               kCInterfacePrefix, kDecodeEntry));
static_assert(detail::isJoined(MFRT_SYMBOL_STRING(MFRT_POOL_MANIFEST_SYMBOL),
                               kPoolSymbolPrefix, kManifestSymbol));
static_assert(detail::isJoined(MFRT_SYMBOL_STRING(MFRT_POOL_DECODE_CIFACE),
                               kPoolSymbolPrefix,
                               MFRT_SYMBOL_STRING(MFRT_DECODE_CIFACE)));
} // namespace meshfold
#endif // __cplusplus

#endif // MFRT_PROGRAMSYMBOLS_H
