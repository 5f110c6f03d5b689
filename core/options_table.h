#pragma once
// Options written once. An Options struct's fields are listed in a table, a
// .def file of rows
//
//   LT_OPTION(type, name, default, "one-line doc", ({"yaml", "choices"}), valid when (of v), "valid text")
//   LT_OPTION_WITH(codec, type, name, ...as above...)   a YAML form of its own (codec: add, read, show)
//   LT_CPP_OPTION(type, name, default)                  C++ only (objects: callbacks, a logger)
//   LT_OPTION_ALIAS(name, "key")                        an attribute of the row `name` above it: YAML's
//                                                       trainer.<name> is an alias, whose value the CLI
//                                                       moves to `key`, the option's place in a config
// Each option row has a /// line directly above it, its doc for readers, as LibTorch's TORCH_ARGs do
// (scripts/check_option_docs.py checks it).
//
// included under different definitions of LT_OPTION (LLVM's PassRegistry.def):
//   - in the struct: LT_OPTION_ARG makes the TORCH_ARG setter and getter;
//   - in the registration: LT_OPTION_SCHEMA adds the YAML init arg, with the
//     default read from a default-constructed struct and the doc, and
//     LT_OPTION_READ sets the field from the validated init args;
//   - in the constructor: LT_OPTION_CHECK throws lt::ValueError naming the
//     option, its value and what is valid;
//   - in a listing: LT_OPTION_SHOW adds each option's name and value.
// How a C++ type is a YAML value is OptionCodec<T>'s: bool, int, int64_t,
// double, std::string ("" is YAML's null where the default is ""), durations
// (seconds as a float), FractionOrCount (an int or a float), enums with an
// OptionEnumNames<E> table, and std::optional of bool, int64_t, double or
// std::string (std::nullopt is YAML's null).
//
// A .def file's includer defines LT_OPTION (and LT_OPTION_WITH, LT_CPP_OPTION
// where the table has them) as one of the modes below, includes it, and
// undefines them. LT_OPTION_ALIAS is optional, as in LLVM's .def files: a
// table with aliases defines it as nothing unless its includer did (to list
// them: LT_OPTION_ALIAS_ENTRY), and undefines it at its end.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/registry.h>
#include <lightning_cpp/core/types.h>

namespace lt {

// Options by name, each value as YAML writes it (LT_OPTION_SHOW).
using OptionValues = std::vector<std::pair<std::string, std::string>>;

// A row's LT_OPTION_ALIAS: YAML's trainer.<name> is an alias of `key`.
struct OptionAlias {
  const char* name;
  const char* key;
};

// For an enum E: static constexpr std::pair<E, const char*> kNames[] = {...}, the YAML name of each value.
template <typename E>
struct OptionEnumNames;

template <typename T, typename = void>
struct OptionCodec;

template <>
struct OptionCodec<bool> {
  static void add(ArgSchema& s, const char* name, bool d, const char* doc, std::vector<std::string>) {
    s.add_bool(name, d, doc);
  }
  static bool read(const InitArgs& a, const char* name) { return a.get_bool(name); }
  static std::string show(bool v) { return v ? "true" : "false"; }
};

template <>
struct OptionCodec<int64_t> {
  static void add(ArgSchema& s, const char* name, int64_t d, const char* doc, std::vector<std::string>) {
    s.add_int(name, d, doc);
  }
  static int64_t read(const InitArgs& a, const char* name) { return a.get_int(name); }
  static std::string show(int64_t v) { return std::to_string(v); }
};

// An int (ConsoleLogger's precision), a YAML integer.
template <>
struct OptionCodec<int> {
  static void add(ArgSchema& s, const char* name, int d, const char* doc, std::vector<std::string>) {
    s.add_int(name, d, doc);
  }
  static int read(const InitArgs& a, const char* name) { return static_cast<int>(a.get_int(name)); }
  static std::string show(int v) { return std::to_string(v); }
};

template <>
struct OptionCodec<double> {
  static void add(ArgSchema& s, const char* name, double d, const char* doc, std::vector<std::string>) {
    s.add_float(name, d, doc);
  }
  static double read(const InitArgs& a, const char* name) { return a.get_float(name); }
  static std::string show(double v) { return c10::str(v); }
};

template <>
struct OptionCodec<std::string> {
  static void add(ArgSchema& s, const char* name, const std::string& d, const char* doc,
                  std::vector<std::string> choices) {
    s.add_string(name, d.empty() ? std::nullopt : std::optional<std::string>(d), doc, std::move(choices));
  }
  static std::string read(const InitArgs& a, const char* name) { return a.get_optional_string(name).value_or(""); }
  static std::string show(const std::string& v) { return "'" + v + "'"; }
};

template <>
struct OptionCodec<std::chrono::milliseconds> {
  static void add(ArgSchema& s, const char* name, std::chrono::milliseconds d, const char* doc,
                  std::vector<std::string>) {
    s.add_float(name, static_cast<double>(d.count()) / 1000.0, doc);
  }
  static std::chrono::milliseconds read(const InitArgs& a, const char* name) {
    return std::chrono::milliseconds(static_cast<int64_t>(a.get_float(name) * 1000.0));
  }
  static std::string show(std::chrono::milliseconds v) { return c10::str(static_cast<double>(v.count()) / 1000.0, " s"); }
};

template <>
struct OptionCodec<FractionOrCount> {
  static void add(ArgSchema& s, const char* name, const FractionOrCount& d, const char* doc,
                  std::vector<std::string>) {
    s.add_int_or_float(name, d.is_count() ? ArgValue(d.count()) : ArgValue(d.fraction()), doc);
  }
  static FractionOrCount read(const InitArgs& a, const char* name) {
    const ArgValue& v = a.get(name);
    if (const auto* i = std::get_if<int64_t>(&v)) return FractionOrCount(*i);
    return FractionOrCount(std::get<double>(v));
  }
  static std::string show(const FractionOrCount& v) { return v.is_count() ? c10::str(v.count()) : c10::str(v.fraction()); }
};

// std::optional<T> of a YAML scalar (bool, int64_t, double, std::string): std::nullopt is YAML's null, and
// a default of std::nullopt makes the init arg nullable (ArgSchema's add_* with an optional default).
template <typename T>
struct OptionCodec<std::optional<T>> {
  static_assert(std::is_same_v<T, bool> || std::is_same_v<T, int64_t> || std::is_same_v<T, double> ||
                    std::is_same_v<T, std::string>,
                "OptionCodec<std::optional<T>>: T is bool, int64_t, double or std::string");
  static void add(ArgSchema& s, const char* name, const std::optional<T>& d, const char* doc,
                  std::vector<std::string> choices) {
    if constexpr (std::is_same_v<T, bool>) {
      s.add_bool(name, d, doc);
    } else if constexpr (std::is_same_v<T, int64_t>) {
      s.add_int(name, d, doc);
    } else if constexpr (std::is_same_v<T, double>) {
      s.add_float(name, d, doc);
    } else {
      s.add_string(name, d, doc, std::move(choices));
    }
  }
  static std::optional<T> read(const InitArgs& a, const char* name) {
    if constexpr (std::is_same_v<T, bool>) {
      return a.get_optional_bool(name);
    } else if constexpr (std::is_same_v<T, int64_t>) {
      return a.get_optional_int(name);
    } else if constexpr (std::is_same_v<T, double>) {
      return a.get_optional_float(name);
    } else {
      return a.get_optional_string(name);
    }
  }
  static std::string show(const std::optional<T>& v) { return v ? OptionCodec<T>::show(*v) : "null"; }
};

// An integer, or YAML's true (1) and false (0): Lightning's fast_dev_run.
struct OptionIntOrBool {
  static void add(ArgSchema& s, const char* name, int64_t d, const char* doc, std::vector<std::string>) {
    s.add_int_or_bool(name, d, doc);
  }
  static int64_t read(const InitArgs& a, const char* name) { return a.get_int(name); }
  static std::string show(int64_t v) { return std::to_string(v); }
};

template <typename E>
struct OptionCodec<E, std::enable_if_t<std::is_enum_v<E>>> {
  static const char* name_of(E v) {
    for (const auto& [value, name] : OptionEnumNames<E>::kNames) {
      if (value == v) return name;
    }
    return "?";
  }
  static void add(ArgSchema& s, const char* name, E d, const char* doc, std::vector<std::string>) {
    std::vector<std::string> choices;
    for (const auto& entry : OptionEnumNames<E>::kNames) choices.push_back(entry.second);
    s.add_string(name, std::string(name_of(d)), doc, std::move(choices));
  }
  static E read(const InitArgs& a, const char* name) {
    const std::string& given = a.get_string(name);  // one of the choices: the schema checked it
    for (const auto& [value, entry_name] : OptionEnumNames<E>::kNames) {
      if (given == entry_name) return value;
    }
    throw ValueError(c10::str(name, ": '", given, "' is not a valid value"));
  }
  static std::string show(E v) { return name_of(v); }
};

}  // namespace lt

// In a struct: the field with its TORCH_ARG setter and getter.
#define LT_OPTION_ARG(type, name, default_value, doc, choices, valid, valid_text) \
  TORCH_ARG(type, name) = default_value;
#define LT_OPTION_WITH_ARG(codec, type, name, default_value, doc, choices, valid, valid_text) \
  TORCH_ARG(type, name) = default_value;
#define LT_CPP_OPTION_ARG(type, name, default_value) TORCH_ARG(type, name) = default_value;

// With `schema` (an lt::ArgSchema) and `defaults` (a default-constructed struct) in scope.
#define LT_OPTION_WITH_SCHEMA(codec, type, name, default_value, doc, choices, valid, valid_text) \
  codec::add(schema, #name, defaults.name(), doc, std::vector<std::string> choices);
#define LT_OPTION_SCHEMA(type, name, default_value, doc, choices, valid, valid_text) \
  LT_OPTION_WITH_SCHEMA(::lt::OptionCodec<type>, type, name, default_value, doc, choices, valid, valid_text)

// With `args` (lt::InitArgs) and `options` (the struct being built) in scope.
#define LT_OPTION_WITH_READ(codec, type, name, default_value, doc, choices, valid, valid_text) \
  options.name(codec::read(args, #name));
#define LT_OPTION_READ(type, name, default_value, doc, choices, valid, valid_text) \
  LT_OPTION_WITH_READ(::lt::OptionCodec<type>, type, name, default_value, doc, choices, valid, valid_text)

// With `options` (the struct) and `owner` (what comes before the name: "strategy ddp: ", "trainer.") in scope.
#define LT_OPTION_WITH_CHECK(codec, type, name, default_value, doc, choices, valid, valid_text)           \
  {                                                                                                     \
    [[maybe_unused]] const type& v = options.name();                                                    \
    LT_CHECK_VALUE((valid), owner, #name " must be ", valid_text, ", got ", codec::show(v));           \
  }
#define LT_OPTION_CHECK(type, name, default_value, doc, choices, valid, valid_text) \
  LT_OPTION_WITH_CHECK(::lt::OptionCodec<type>, type, name, default_value, doc, choices, valid, valid_text)

// With `values` (an lt::OptionValues) and `options` (the struct) in scope: each row's name and value as YAML
// writes it (the ranks compare them before the first step).
#define LT_OPTION_WITH_SHOW(codec, type, name, default_value, doc, choices, valid, valid_text) \
  values.emplace_back(#name, codec::show(options.name()));
#define LT_OPTION_SHOW(type, name, default_value, doc, choices, valid, valid_text) \
  LT_OPTION_WITH_SHOW(::lt::OptionCodec<type>, type, name, default_value, doc, choices, valid, valid_text)

// What a C++-only row is in the YAML modes.
#define LT_CPP_OPTION_NONE(type, name, default_value)

// Listing a table's aliases: an array of lt::OptionAlias, with every other row kind LT_OPTION_NONE.
#define LT_OPTION_NONE(...)
#define LT_OPTION_ALIAS_ENTRY(name, key) ::lt::OptionAlias{#name, key},
