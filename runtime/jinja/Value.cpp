//===- Value.cpp - Jinja values with Python's semantics -------------------===//

#include "Jinja.h"

#include <charconv>
#include <cmath>
#include <cstdio>

using namespace mfrt::jinja;

const Value *Value::find(const std::string &key) const {
  if (!isDict())
    return nullptr;
  for (const auto &[k, v] : *dict)
    if (k == key)
      return &v;
  return nullptr;
}

Value mfrt::jinja::fromJson(const nlohmann::ordered_json &j) {
  switch (j.type()) {
  case nlohmann::json::value_t::null:
    return Value::none();
  case nlohmann::json::value_t::boolean:
    return Value::boolean(j.get<bool>());
  case nlohmann::json::value_t::number_integer:
  case nlohmann::json::value_t::number_unsigned:
    return Value::integer(j.get<int64_t>());
  case nlohmann::json::value_t::number_float:
    return Value::number(j.get<double>());
  case nlohmann::json::value_t::string:
    return Value::string(j.get<std::string>());
  case nlohmann::json::value_t::array: {
    List l;
    for (const auto &x : j)
      l.push_back(fromJson(x));
    return Value::listOf(std::move(l));
  }
  case nlohmann::json::value_t::object: {
    Dict d;
    for (const auto &[k, x] : j.items())
      d.emplace_back(k, fromJson(x));
    return Value::dictOf(std::move(d));
  }
  default:
    throw Error("a JSON value of an unsupported type");
  }
}

bool mfrt::jinja::truthy(const Value &v) {
  switch (v.kind) {
  case Value::Undefined:
  case Value::None:
    return false;
  case Value::Bool:
    return v.b;
  case Value::Int:
    return v.i != 0;
  case Value::Float:
    return v.f != 0;
  case Value::String:
    return !v.s.empty();
  case Value::ListV:
    return !v.list->empty();
  case Value::DictV:
  case Value::Namespace:
    return !v.dict->empty();
  case Value::Fn:
    return true;
  }
  return false;
}

namespace {
/// Python's repr of a float.
std::string floatText(double f) {
  if (std::isnan(f))
    return "nan";
  if (std::isinf(f))
    return f > 0 ? "inf" : "-inf";
  char buf[64];
  double a = std::fabs(f);
  if (a != 0 && (a < 1e-4 || a >= 1e16)) {
    auto r =
        std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
    std::string s(buf, r.ptr);
    // Python writes at least two exponent digits: 1e-05, 1e+16.
    size_t e = s.find('e');
    std::string mant = s.substr(0, e), exp = s.substr(e + 2);
    if (exp.size() < 2)
      exp = "0" + exp;
    return mant + "e" + s[e + 1] + exp;
  }
  auto r = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::fixed);
  std::string s(buf, r.ptr);
  if (s.find('.') == std::string::npos)
    s += ".0";
  return s;
}

/// Python's repr of a str: single quotes unless it has one and no double.
std::string repr(const std::string &s) {
  char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos
               ? '"'
               : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\' || c == (unsigned char)q) {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out + q;
}

std::string reprOf(const Value &v) {
  return v.kind == Value::String ? repr(v.s) : str(v);
}
} // namespace

std::string mfrt::jinja::str(const Value &v) {
  switch (v.kind) {
  case Value::Undefined:
    return "";
  case Value::None:
    return "None";
  case Value::Bool:
    return v.b ? "True" : "False";
  case Value::Int:
    return std::to_string(v.i);
  case Value::Float:
    return floatText(v.f);
  case Value::String:
    return v.s;
  case Value::ListV: {
    std::string out = "[";
    for (size_t i = 0; i < v.list->size(); ++i)
      out += (i ? ", " : "") + reprOf((*v.list)[i]);
    return out + "]";
  }
  case Value::DictV: {
    std::string out = "{";
    for (size_t i = 0; i < v.dict->size(); ++i)
      out += (i ? ", " : "") + repr((*v.dict)[i].first) + ": " +
             reprOf((*v.dict)[i].second);
    return out + "}";
  }
  case Value::Namespace:
    return "<Namespace>";
  case Value::Fn:
    return "<function>";
  }
  return "";
}

namespace {
/// A JSON string as Python's json.dumps(ensure_ascii=False) writes it
/// (nlohmann's escapes are the same: \" \\ \b \f \n \r \t, other
/// control characters as \u00xx).
void jsonString(const std::string &s, std::string &out) {
  out += nlohmann::json(s).dump(-1, ' ', false,
                                nlohmann::json::error_handler_t::replace);
}

void dumpJson(const Value &v, int indent, int depth, std::string &out) {
  std::string pad =
      indent < 0 ? "" : "\n" + std::string(size_t(indent * (depth + 1)), ' ');
  std::string close =
      indent < 0 ? "" : "\n" + std::string(size_t(indent * depth), ' ');
  const char *sep = indent < 0 ? ", " : ",";
  switch (v.kind) {
  case Value::Undefined:
    throw Error("tojson of an undefined value" +
                (v.name.empty() ? std::string() : " ('" + v.name + "')"));
  case Value::None:
    out += "null";
    return;
  case Value::Bool:
    out += v.b ? "true" : "false";
    return;
  case Value::Int:
  case Value::Float:
    out += str(v);
    return;
  case Value::String:
    return jsonString(v.s, out);
  case Value::ListV:
    if (v.list->empty()) {
      out += "[]";
      return;
    }
    out += "[";
    for (size_t i = 0; i < v.list->size(); ++i) {
      out += (i ? sep : "") + pad;
      dumpJson((*v.list)[i], indent, depth + 1, out);
    }
    out += close + "]";
    return;
  case Value::DictV:
  case Value::Namespace:
    if (v.dict->empty()) {
      out += "{}";
      return;
    }
    out += "{";
    for (size_t i = 0; i < v.dict->size(); ++i) {
      out += (i ? sep : "") + pad;
      jsonString((*v.dict)[i].first, out);
      out += ": ";
      dumpJson((*v.dict)[i].second, indent, depth + 1, out);
    }
    out += close + "}";
    return;
  case Value::Fn:
    throw Error("tojson of a function");
  }
}
} // namespace

std::string mfrt::jinja::toJson(const Value &v, int indent) {
  std::string out;
  dumpJson(v, indent, 0, out);
  return out;
}

bool mfrt::jinja::equal(const Value &a, const Value &b) {
  if (a.isNumber() && b.isNumber())
    return a.asDouble() == b.asDouble();
  if (a.kind != b.kind)
    return (a.kind == Value::DictV || a.kind == Value::Namespace) &&
           (b.kind == Value::DictV || b.kind == Value::Namespace) &&
           a.dict == b.dict;
  switch (a.kind) {
  case Value::Undefined:
  case Value::None:
    return true;
  case Value::String:
    return a.s == b.s;
  case Value::ListV:
    if (a.list->size() != b.list->size())
      return false;
    for (size_t i = 0; i < a.list->size(); ++i)
      if (!equal((*a.list)[i], (*b.list)[i]))
        return false;
    return true;
  case Value::DictV:
  case Value::Namespace:
    if (a.dict->size() != b.dict->size())
      return false;
    for (const auto &[k, x] : *a.dict) {
      const Value *y = b.find(k);
      if (!y || !equal(x, *y))
        return false;
    }
    return true;
  default:
    return a.fn == b.fn;
  }
}

bool mfrt::jinja::less(const Value &a, const Value &b) {
  if (a.isNumber() && b.isNumber())
    return a.asDouble() < b.asDouble();
  if (a.kind == Value::String && b.kind == Value::String)
    return a.s < b.s;
  if (a.kind == Value::ListV && b.kind == Value::ListV)
    return std::lexicographical_compare(a.list->begin(), a.list->end(),
                                        b.list->begin(), b.list->end(), less);
  throw Error(std::string("'<' between ") + kindName(a) + " and " +
              kindName(b));
}

const char *mfrt::jinja::kindName(const Value &v) {
  static const char *names[] = {"undefined", "none",    "bool", "int",
                                "float",     "str",     "list", "dict",
                                "namespace", "function"};
  return names[v.kind];
}
