//===- Render.cpp - Chat templates: evaluation ----------------------------===//
//
// Expressions with Python's semantics, the filters, tests and methods of the
// subset, and the statements, over a chain of scopes (a for loop's body is a
// scope of its own, as in Jinja: `set` in a loop does not leak out, which is
// what namespaces are for).
//
//===----------------------------------------------------------------------===//

#include "Jinja.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <map>
#include <set>

using namespace mfrt::jinja;

namespace {
[[noreturn]] void fail(int line, const std::string &msg) {
  throw Error("line " + std::to_string(line) + ": " + msg);
}

struct LoopControl {
  bool isBreak;
};

/// Python's str.strip family over `chars` (blanks by default).
std::string stripped(const std::string &s, const Value *chars, bool left,
                     bool right) {
  std::string set = chars && chars->kind == Value::String
                        ? chars->s
                        : std::string(" \t\n\r\f\v");
  size_t b = 0, e = s.size();
  while (left && b < e && set.find(s[b]) != std::string::npos)
    ++b;
  while (right && e > b && set.find(s[e - 1]) != std::string::npos)
    --e;
  return s.substr(b, e - b);
}

List splitString(const std::string &s, const Value *sep, int64_t max) {
  List out;
  if (!sep || sep->kind == Value::None) {
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && std::isspace((unsigned char)s[i]))
        ++i;
      if (i == s.size())
        break;
      size_t j = i;
      if (max >= 0 && int64_t(out.size()) == max) {
        std::string rest = s.substr(i);
        out.push_back(Value::string(stripped(rest, nullptr, false, true)));
        return out;
      }
      while (j < s.size() && !std::isspace((unsigned char)s[j]))
        ++j;
      out.push_back(Value::string(s.substr(i, j - i)));
      i = j;
    }
    return out;
  }
  if (sep->kind != Value::String || sep->s.empty())
    throw Error("split: the separator must be a non-empty string");
  size_t i = 0;
  for (;;) {
    size_t j = s.find(sep->s, i);
    if (j == std::string::npos || (max >= 0 && int64_t(out.size()) == max)) {
      out.push_back(Value::string(s.substr(i)));
      return out;
    }
    out.push_back(Value::string(s.substr(i, j - i)));
    i = j + sep->s.size();
  }
}

std::string replaced(std::string s, const std::string &from,
                     const std::string &to) {
  if (from.empty())
    return s;
  std::string out;
  size_t i = 0;
  for (size_t j; (j = s.find(from, i)) != std::string::npos;
       i = j + from.size())
    out += s.substr(i, j - i) + to;
  return out + s.substr(i);
}

/// Python's index normalisation for a sequence of `n`.
int64_t index(int64_t i, int64_t n) { return i < 0 ? i + n : i; }

/// The items a for loop or a filter iterates: a list's, a dict's keys, a
/// string's characters (bytes of UTF-8 sequences kept together).
List iterate(const Value &v, int line) {
  if (v.kind == Value::ListV)
    return *v.list;
  if (v.isDict()) {
    List keys;
    for (const auto &kv : *v.dict)
      keys.push_back(Value::string(kv.first));
    return keys;
  }
  if (v.kind == Value::String) {
    List chars;
    for (size_t i = 0; i < v.s.size();) {
      size_t n = 1;
      unsigned char c = (unsigned char)v.s[i];
      n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
      chars.push_back(Value::string(v.s.substr(i, n)));
      i += n;
    }
    return chars;
  }
  if (v.kind == Value::Undefined)
    return {};
  fail(line, std::string("a ") + kindName(v) + " is not iterable");
}

Value itemsOf(const Value &d) {
  List items;
  for (const auto &[k, v] : *d.dict)
    items.push_back(Value::listOf({Value::string(k), v}));
  return Value::listOf(std::move(items));
}

const Value *kwarg(Kwargs &kw, const char *name) {
  for (auto &[k, v] : kw)
    if (k == name)
      return &v;
  return nullptr;
}

const Value *arg(std::vector<Value> &args, size_t i, Kwargs &kw,
                 const char *name) {
  if (i < args.size())
    return &args[i];
  return kwarg(kw, name);
}

class Renderer {
public:
  explicit Renderer(const Value &context) {
    scopes.emplace_back();
    for (const auto &[k, v] : *context.dict)
      scopes.back()[k] = v;
    addGlobals();
  }

  void run(const std::vector<NodePtr> &nodes, std::string &out) {
    for (const NodePtr &n : nodes)
      exec(*n, out);
  }

private:
  std::vector<std::map<std::string, Value>> scopes;

  void addGlobals() {
    auto &g = scopes.front();
    g["namespace"] = Value::function([](std::vector<Value> &args, Kwargs &kw) {
      Dict d;
      for (Value &a : args)
        if (a.isDict())
          d.insert(d.end(), a.dict->begin(), a.dict->end());
      for (auto &kv : kw)
        d.push_back(kv);
      return Value::dictOf(std::move(d), Value::Namespace);
    });
    g["raise_exception"] = Value::function([](std::vector<Value> &args,
                                              Kwargs &) -> Value {
      throw Error("the template raised: " + (args.empty() ? "" : str(args[0])));
    });
    g["range"] = Value::function([](std::vector<Value> &args, Kwargs &) {
      int64_t lo = 0, hi = 0, step = 1;
      if (args.size() == 1)
        hi = args[0].i;
      if (args.size() >= 2)
        lo = args[0].i, hi = args[1].i;
      if (args.size() == 3)
        step = args[2].i;
      if (step == 0)
        throw Error("range: the step must not be 0");
      List l;
      for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step)
        l.push_back(Value::integer(i));
      return Value::listOf(std::move(l));
    });
    g["strftime_now"] = Value::function([](std::vector<Value> &args, Kwargs &) {
      std::time_t t = std::time(nullptr);
      std::tm tm{};
      localtime_r(&t, &tm);
      char buf[256];
      std::string fmt = args.empty() ? "%Y-%m-%d" : str(args[0]);
      size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
      return Value::string(std::string(buf, n));
    });
  }

  Value lookup(const std::string &name) {
    for (auto it = scopes.rbegin(); it != scopes.rend(); ++it)
      if (auto f = it->find(name); f != it->end())
        return f->second;
    return Value::undefined(name);
  }

  void exec(const Node &n, std::string &out) {
    switch (n.kind) {
    case Node::Text:
      out += n.text;
      return;
    case Node::Output:
      out += str(eval(*n.exprs[0]));
      return;
    case Node::If:
      for (size_t i = 0; i < n.exprs.size(); ++i)
        if (truthy(eval(*n.exprs[i])))
          return run(n.bodies[i], out);
      if (n.bodies.size() > n.exprs.size())
        run(n.bodies.back(), out);
      return;
    case Node::For:
      return loop(n, out);
    case Node::Set:
      return set(n, eval(*n.exprs[0]));
    case Node::SetBlock: {
      std::string captured;
      run(n.bodies[0], captured);
      return set(n, Value::string(captured));
    }
    case Node::Break:
    case Node::Continue:
      throw LoopControl{n.kind == Node::Break};
    case Node::Block:
      return run(n.bodies[0], out);
    }
  }

  void set(const Node &n, Value v) {
    if (n.attr.empty()) {
      scopes.back()[n.targets[0]] = std::move(v);
      return;
    }
    Value ns = lookup(n.targets[0]);
    if (ns.kind != Value::Namespace)
      fail(n.line,
           "'" + n.targets[0] + "' is not a namespace: cannot set ." + n.attr);
    for (auto &[k, x] : *ns.dict)
      if (k == n.attr) {
        x = std::move(v);
        return;
      }
    ns.dict->emplace_back(n.attr, std::move(v));
  }

  void loop(const Node &n, std::string &out) {
    List all = iterate(eval(*n.exprs[0]), n.line);
    List items;
    for (Value &item : all) {
      if (n.exprs.size() > 1) {
        scopes.emplace_back();
        bind(n, item);
        bool keep = truthy(eval(*n.exprs[1]));
        scopes.pop_back();
        if (!keep)
          continue;
      }
      items.push_back(item);
    }
    if (items.empty() && n.bodies.size() > 1)
      return run(n.bodies[1], out);
    int64_t len = int64_t(items.size());
    for (int64_t i = 0; i < len; ++i) {
      scopes.emplace_back();
      bind(n, items[size_t(i)]);
      Dict info = {{"index", Value::integer(i + 1)},
                   {"index0", Value::integer(i)},
                   {"revindex", Value::integer(len - i)},
                   {"revindex0", Value::integer(len - i - 1)},
                   {"first", Value::boolean(i == 0)},
                   {"last", Value::boolean(i == len - 1)},
                   {"length", Value::integer(len)},
                   {"previtem", i > 0 ? items[size_t(i - 1)]
                                      : Value::undefined("loop.previtem")},
                   {"nextitem", i + 1 < len
                                    ? items[size_t(i + 1)]
                                    : Value::undefined("loop.nextitem")}};
      scopes.back()["loop"] = Value::dictOf(std::move(info));
      try {
        run(n.bodies[0], out);
      } catch (const LoopControl &c) {
        scopes.pop_back();
        if (c.isBreak)
          return;
        continue;
      }
      scopes.pop_back();
    }
  }

  void bind(const Node &n, const Value &item) {
    if (n.targets.size() == 1) {
      scopes.back()[n.targets[0]] = item;
      return;
    }
    List parts = iterate(item, n.line);
    if (parts.size() != n.targets.size())
      fail(n.line, "cannot unpack " + std::to_string(parts.size()) +
                       " values into " + std::to_string(n.targets.size()));
    for (size_t i = 0; i < parts.size(); ++i)
      scopes.back()[n.targets[i]] = parts[i];
  }

  Value eval(const Expr &e) {
    switch (e.kind) {
    case Expr::Literal:
      return e.value;
    case Expr::Name:
      return lookup(e.name);
    case Expr::List: {
      List l;
      for (const ExprPtr &x : e.args)
        l.push_back(eval(*x));
      return Value::listOf(std::move(l));
    }
    case Expr::Dict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2)
        d.emplace_back(str(eval(*e.args[i])), eval(*e.args[i + 1]));
      return Value::dictOf(std::move(d));
    }
    case Expr::Attr:
      return attribute(eval(*e.args[0]), e.name, e.line);
    case Expr::Item:
      return item(eval(*e.args[0]), eval(*e.args[1]), e.line);
    case Expr::Slice:
      return slice(e);
    case Expr::Call:
      return call(e);
    case Expr::Filter:
      return filter(e);
    case Expr::Test:
      return Value::boolean(test(e) != e.negated);
    case Expr::Unary: {
      Value v = eval(*e.args[0]);
      if (!v.isNumber())
        fail(e.line, std::string("unary ") + e.name + " of a " + kindName(v));
      if (e.name == "+")
        return v;
      return v.kind == Value::Float ? Value::number(-v.f)
                                    : Value::integer(-int64_t(v.asDouble()));
    }
    case Expr::Binary:
      return binary(e.name, eval(*e.args[0]), eval(*e.args[1]), e.line);
    case Expr::And: {
      Value a = eval(*e.args[0]);
      return truthy(a) ? eval(*e.args[1]) : a;
    }
    case Expr::Or: {
      Value a = eval(*e.args[0]);
      return truthy(a) ? a : eval(*e.args[1]);
    }
    case Expr::Not:
      return Value::boolean(!truthy(eval(*e.args[0])));
    case Expr::Cond:
      if (truthy(eval(*e.args[0])))
        return eval(*e.args[1]);
      return e.args.size() > 2 ? eval(*e.args[2]) : Value::undefined("");
    }
    return Value();
  }

  Value attribute(const Value &v, const std::string &name, int line) {
    if (v.kind == Value::Undefined)
      fail(line, "'" + (v.name.empty() ? std::string("a value") : v.name) +
                     "' is undefined (reading ." + name + ")");
    if (const Value *x = v.find(name))
      return *x;
    return Value::undefined(name);
  }

  Value item(const Value &v, const Value &key, int line) {
    if (v.kind == Value::Undefined)
      fail(line, "'" + (v.name.empty() ? std::string("a value") : v.name) +
                     "' is undefined (reading [" + str(key) + "])");
    if (v.isDict()) {
      const Value *x = key.kind == Value::String ? v.find(key.s) : nullptr;
      return x ? *x : Value::undefined(str(key));
    }
    if ((v.kind == Value::ListV || v.kind == Value::String) &&
        key.kind == Value::Int) {
      int64_t n = v.kind == Value::ListV ? int64_t(v.list->size())
                                         : int64_t(v.s.size());
      int64_t i = index(key.i, n);
      if (i < 0 || i >= n)
        return Value::undefined("[" + std::to_string(key.i) + "]");
      return v.kind == Value::ListV ? (*v.list)[size_t(i)]
                                    : Value::string(v.s.substr(size_t(i), 1));
    }
    fail(line, std::string("a ") + kindName(v) + " cannot be indexed by a " +
                   kindName(key));
  }

  Value slice(const Expr &e) {
    Value v = eval(*e.args[0]);
    auto part = [&](size_t i, int64_t dflt) {
      if (!e.args[i])
        return dflt;
      Value x = eval(*e.args[i]);
      if (x.kind == Value::None)
        return dflt;
      if (x.kind != Value::Int)
        fail(e.line, "a slice bound must be an integer");
      return x.i;
    };
    int64_t step = part(3, 1);
    if (step == 0)
      fail(e.line, "a slice step must not be 0");
    bool isList = v.kind == Value::ListV;
    if (!isList && v.kind != Value::String)
      fail(e.line, std::string("a ") + kindName(v) + " cannot be sliced");
    int64_t n = isList ? int64_t(v.list->size()) : int64_t(v.s.size());
    auto clamp = [&](int64_t i, bool isStart) {
      if (i < 0)
        i += n;
      if (step > 0)
        return std::clamp<int64_t>(i, 0, n);
      return std::clamp<int64_t>(i, -1, n - 1) + (isStart ? 0 : 0);
    };
    int64_t lo = e.args[1] ? clamp(part(1, 0), true) : (step > 0 ? 0 : n - 1);
    int64_t hi = e.args[2] ? clamp(part(2, 0), false) : (step > 0 ? n : -1);
    List l;
    std::string s;
    for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) {
      if (isList)
        l.push_back((*v.list)[size_t(i)]);
      else
        s += v.s[size_t(i)];
    }
    return isList ? Value::listOf(std::move(l)) : Value::string(s);
  }

  void evalArgs(const Expr &e, size_t from, std::vector<Value> &args,
                Kwargs &kw) {
    for (size_t i = from; i < e.args.size(); ++i) {
      Value v = eval(*e.args[i]);
      if (i < e.positional)
        args.push_back(std::move(v));
      else
        kw.emplace_back(e.keys[i - e.positional], std::move(v));
    }
  }

  Value call(const Expr &e) {
    std::vector<Value> args;
    Kwargs kw;
    const Expr &callee = *e.args[0];
    evalArgs(e, 1, args, kw);
    if (callee.kind == Expr::Attr) {
      Value self = eval(*callee.args[0]);
      const Value *member = self.find(callee.name);
      if ((self.kind == Value::String || self.isDict() ||
           self.kind == Value::ListV) &&
          (!member || member->kind != Value::Fn))
        return method(self, callee.name, args, kw, e.line);
    }
    Value f = eval(callee);
    if (f.kind != Value::Fn)
      fail(e.line, "'" + (f.name.empty() ? callee.name : f.name) +
                       "' is not a function");
    return (*f.fn)(args, kw);
  }

  Value method(const Value &self, const std::string &name,
               std::vector<Value> &args, Kwargs &kw, int line) {
    if (self.kind == Value::String) {
      const std::string &s = self.s;
      const Value *a0 = arg(args, 0, kw, "");
      if (name == "startswith" || name == "endswith") {
        List options = a0 && a0->kind == Value::ListV ? *a0->list : List{};
        if (a0 && a0->kind == Value::String)
          options.push_back(*a0);
        for (const Value &o : options)
          if (o.kind == Value::String &&
              (name == "startswith"
                   ? s.rfind(o.s, 0) == 0
                   : s.size() >= o.s.size() && s.compare(s.size() - o.s.size(),
                                                         o.s.size(), o.s) == 0))
            return Value::boolean(true);
        return Value::boolean(false);
      }
      if (name == "strip" || name == "lstrip" || name == "rstrip")
        return Value::string(
            stripped(s, a0, name != "rstrip", name != "lstrip"));
      if (name == "split") {
        const Value *max = arg(args, 1, kw, "maxsplit");
        return Value::listOf(
            splitString(s, arg(args, 0, kw, "sep"), max ? max->i : -1));
      }
      if (name == "upper" || name == "lower") {
        std::string t = s;
        for (char &c : t)
          c = char(name == "upper" ? std::toupper((unsigned char)c)
                                   : std::tolower((unsigned char)c));
        return Value::string(t);
      }
      if (name == "replace" && args.size() >= 2)
        return Value::string(replaced(s, str(args[0]), str(args[1])));
      if (name == "find" && a0)
        return Value::integer(s.find(str(*a0)) == std::string::npos
                                  ? -1
                                  : int64_t(s.find(str(*a0))));
      if (name == "count" && a0)
        return Value::integer(int64_t(splitString(s, a0, -1).size()) - 1);
    }
    if (self.isDict()) {
      if (name == "items")
        return itemsOf(self);
      if (name == "keys" || name == "values") {
        List l;
        for (const auto &[k, v] : *self.dict)
          l.push_back(name == "keys" ? Value::string(k) : v);
        return Value::listOf(std::move(l));
      }
      if (name == "get" && !args.empty()) {
        const Value *x =
            args[0].kind == Value::String ? self.find(args[0].s) : nullptr;
        return x ? *x : args.size() > 1 ? args[1] : Value::none();
      }
    }
    fail(line, std::string("the method ") + kindName(self) + "." + name +
                   "() is not supported");
  }

  Value binary(const std::string &op, const Value &a, const Value &b,
               int line) {
    if (op == "==")
      return Value::boolean(equal(a, b));
    if (op == "!=")
      return Value::boolean(!equal(a, b));
    if (op == "<")
      return Value::boolean(less(a, b));
    if (op == ">")
      return Value::boolean(less(b, a));
    if (op == "<=")
      return Value::boolean(!less(b, a));
    if (op == ">=")
      return Value::boolean(!less(a, b));
    if (op == "in" || op == "not in")
      return Value::boolean(contains(b, a, line) == (op == "in"));
    if (op == "~")
      return Value::string(str(a) + str(b));
    if (op == "+" && a.kind == Value::String && b.kind == Value::String)
      return Value::string(a.s + b.s);
    if (op == "+" && a.kind == Value::ListV && b.kind == Value::ListV) {
      List l = *a.list;
      l.insert(l.end(), b.list->begin(), b.list->end());
      return Value::listOf(std::move(l));
    }
    if (op == "*" && a.kind == Value::String && b.kind == Value::Int) {
      std::string s;
      for (int64_t i = 0; i < b.i; ++i)
        s += a.s;
      return Value::string(s);
    }
    if (!a.isNumber() || !b.isNumber())
      fail(line,
           "'" + op + "' between a " + kindName(a) + " and a " + kindName(b));
    bool ints = a.kind != Value::Float && b.kind != Value::Float;
    double x = a.asDouble(), y = b.asDouble();
    if ((op == "/" || op == "//" || op == "%") && y == 0)
      fail(line, "division by zero");
    if (op == "/")
      return Value::number(x / y);
    if (op == "**")
      return ints && y >= 0 ? Value::integer(int64_t(std::pow(x, y)))
                            : Value::number(std::pow(x, y));
    double r = op == "+"    ? x + y
               : op == "-"  ? x - y
               : op == "*"  ? x * y
               : op == "//" ? std::floor(x / y)
                            : x - y * std::floor(x / y);
    return ints ? Value::integer(int64_t(r)) : Value::number(r);
  }

  bool contains(const Value &hay, const Value &needle, int line) {
    if (hay.kind == Value::String && needle.kind == Value::String)
      return hay.s.find(needle.s) != std::string::npos;
    if (hay.kind == Value::ListV) {
      for (const Value &x : *hay.list)
        if (equal(x, needle))
          return true;
      return false;
    }
    if (hay.isDict())
      return needle.kind == Value::String && hay.find(needle.s);
    fail(line, std::string("'in' a ") + kindName(hay));
  }

  bool test(const Expr &e) {
    Value v = eval(*e.args[0]);
    std::vector<Value> args;
    Kwargs kw;
    evalArgs(e, 1, args, kw);
    const std::string &t = e.name;
    if (t == "defined")
      return v.kind != Value::Undefined;
    if (t == "undefined")
      return v.kind == Value::Undefined;
    if (t == "none")
      return v.kind == Value::None;
    if (t == "string")
      return v.kind == Value::String;
    if (t == "number")
      return v.kind == Value::Int || v.kind == Value::Float;
    if (t == "integer")
      return v.kind == Value::Int;
    if (t == "float")
      return v.kind == Value::Float;
    if (t == "boolean")
      return v.kind == Value::Bool;
    if (t == "true" || t == "false")
      return v.kind == Value::Bool && v.b == (t == "true");
    if (t == "mapping")
      return v.isDict();
    if (t == "sequence" || t == "iterable")
      return v.kind == Value::ListV || v.kind == Value::String || v.isDict();
    if (t == "callable")
      return v.kind == Value::Fn;
    if (t == "odd" || t == "even")
      return v.kind == Value::Int && (v.i % 2 != 0) == (t == "odd");
    if (args.empty())
      fail(e.line, "the test '" + t + "' needs an argument");
    if (t == "divisibleby")
      return v.kind == Value::Int && args[0].i != 0 && v.i % args[0].i == 0;
    if (t == "equalto" || t == "eq" || t == "sameas")
      return equal(v, args[0]);
    if (t == "ne")
      return !equal(v, args[0]);
    if (t == "in")
      return contains(args[0], v, e.line);
    if (t == "lt" || t == "gt" || t == "le" || t == "ge")
      return t == "lt"   ? less(v, args[0])
             : t == "gt" ? less(args[0], v)
             : t == "le" ? !less(args[0], v)
                         : !less(v, args[0]);
    fail(e.line, "the test '" + t + "' is not supported");
  }

  /// A test by name on one value (select, reject, selectattr, rejectattr).
  bool testByName(const std::string &name, const Value &v,
                  std::vector<Value> extra, int line) {
    Expr t;
    t.kind = Expr::Test;
    t.name = name;
    t.line = line;
    auto lit = std::make_shared<Expr>();
    lit->kind = Expr::Literal;
    lit->value = v;
    t.args.push_back(lit);
    for (Value &x : extra) {
      auto a = std::make_shared<Expr>();
      a->kind = Expr::Literal;
      a->value = std::move(x);
      t.args.push_back(a);
    }
    t.positional = t.args.size();
    if (!knownTest(name))
      fail(line, "the test '" + name + "' is not supported");
    return test(t);
  }

  Value filter(const Expr &e) {
    Value v = eval(*e.args[0]);
    std::vector<Value> args;
    Kwargs kw;
    evalArgs(e, 1, args, kw);
    const std::string &f = e.name;
    int line = e.line;
    if (f == "length" || f == "count")
      return Value::integer(
          v.kind == Value::String  ? int64_t(iterate(v, line).size())
          : v.kind == Value::ListV ? int64_t(v.list->size())
          : v.isDict()
              ? int64_t(v.dict->size())
              : (fail(line, std::string("length of a ") + kindName(v)), 0));
    if (f == "tojson") {
      const Value *indent = arg(args, 0, kw, "indent");
      return Value::string(toJson(
          v, indent && indent->kind == Value::Int ? int(indent->i) : -1));
    }
    if (f == "trim")
      return Value::string(
          stripped(str(v), arg(args, 0, kw, "chars"), true, true));
    if (f == "string" || f == "safe" || f == "e" || f == "escape")
      return f == "e" || f == "escape" ? Value::string(escaped(str(v)))
                                       : Value::string(str(v));
    if (f == "upper" || f == "lower" || f == "capitalize" || f == "title")
      return Value::string(cased(str(v), f));
    if (f == "int")
      return Value::integer(v.isNumber() ? int64_t(v.asDouble())
                                         : std::atoll(str(v).c_str()));
    if (f == "float")
      return Value::number(v.isNumber() ? v.asDouble()
                                        : std::atof(str(v).c_str()));
    if (f == "abs")
      return v.kind == Value::Float ? Value::number(std::fabs(v.f))
                                    : Value::integer(std::llabs(v.i));
    if (f == "default" || f == "d") {
      const Value *boolean = arg(args, 1, kw, "boolean");
      bool useDefault = v.kind == Value::Undefined ||
                        (boolean && truthy(*boolean) && !truthy(v));
      return useDefault ? (args.empty() ? Value::string("") : args[0]) : v;
    }
    if (f == "first" || f == "last") {
      List l = iterate(v, line);
      if (l.empty())
        return Value::undefined(f);
      return f == "first" ? l.front() : l.back();
    }
    if (f == "join") {
      const Value *attr = kwarg(kw, "attribute");
      std::string sep = args.empty() ? "" : str(args[0]), out;
      List l = iterate(v, line);
      for (size_t i = 0; i < l.size(); ++i)
        out += (i ? sep : "") +
               str(attr ? attribute(l[i], str(*attr), line) : l[i]);
      return Value::string(out);
    }
    if (f == "items") {
      if (!v.isDict())
        fail(line, std::string("items of a ") + kindName(v));
      return itemsOf(v);
    }
    if (f == "list")
      return Value::listOf(iterate(v, line));
    if (f == "reverse") {
      if (v.kind == Value::String) {
        List l = iterate(v, line);
        std::string s;
        for (auto it = l.rbegin(); it != l.rend(); ++it)
          s += it->s;
        return Value::string(s);
      }
      List l = iterate(v, line);
      std::reverse(l.begin(), l.end());
      return Value::listOf(std::move(l));
    }
    if (f == "replace" && args.size() >= 2)
      return Value::string(replaced(str(v), str(args[0]), str(args[1])));
    if (f == "unique") {
      List out;
      for (const Value &x : iterate(v, line))
        if (std::none_of(out.begin(), out.end(),
                         [&](const Value &y) { return equal(x, y); }))
          out.push_back(x);
      return Value::listOf(std::move(out));
    }
    if (f == "sort") {
      const Value *attr = kwarg(kw, "attribute");
      const Value *rev = kwarg(kw, "reverse");
      List l = iterate(v, line);
      std::stable_sort(l.begin(), l.end(), [&](const Value &a, const Value &b) {
        return attr ? less(attribute(a, str(*attr), line),
                           attribute(b, str(*attr), line))
                    : less(a, b);
      });
      if (rev && truthy(*rev))
        std::reverse(l.begin(), l.end());
      return Value::listOf(std::move(l));
    }
    if (f == "map") {
      const Value *attr = kwarg(kw, "attribute");
      List out;
      for (const Value &x : iterate(v, line)) {
        if (attr) {
          out.push_back(attribute(x, str(*attr), line));
          continue;
        }
        if (args.empty())
          fail(line, "map needs a filter name or attribute=");
        auto lit = std::make_shared<Expr>();
        lit->kind = Expr::Literal;
        lit->value = x;
        Expr sub;
        sub.kind = Expr::Filter;
        sub.name = str(args[0]);
        sub.line = line;
        sub.args.push_back(lit);
        sub.positional = 1;
        if (!knownFilter(sub.name))
          fail(line, "the filter '" + sub.name + "' is not supported");
        out.push_back(filter(sub));
      }
      return Value::listOf(std::move(out));
    }
    if (f == "select" || f == "reject" || f == "selectattr" ||
        f == "rejectattr") {
      bool byAttr = f == "selectattr" || f == "rejectattr";
      bool keepIf = f == "select" || f == "selectattr";
      size_t at = byAttr ? 1 : 0;
      List out;
      for (const Value &x : iterate(v, line)) {
        Value subject = byAttr ? attribute(x, str(args.at(0)), line) : x;
        bool ok = args.size() > at
                      ? testByName(str(args[at]), subject,
                                   std::vector<Value>(args.begin() + at + 1,
                                                      args.end()),
                                   line)
                      : truthy(subject);
        if (ok == keepIf)
          out.push_back(x);
      }
      return Value::listOf(std::move(out));
    }
    if (f == "indent") {
      const Value *width = arg(args, 0, kw, "width");
      const Value *first = arg(args, 1, kw, "first");
      std::string pad(width ? size_t(width->i) : 4u, ' '), s = str(v), out;
      bool atStart = first && truthy(*first);
      for (char c : s) {
        if (atStart && c != '\n')
          out += pad;
        atStart = false;
        out += c;
        if (c == '\n')
          atStart = true;
      }
      return Value::string(out);
    }
    fail(line, "the filter '" + f + "' is not supported with these arguments");
  }

  static std::string escaped(const std::string &s) {
    std::string out;
    for (char c : s)
      out += c == '&'    ? "&amp;"
             : c == '<'  ? "&lt;"
             : c == '>'  ? "&gt;"
             : c == '"'  ? "&#34;"
             : c == '\'' ? "&#39;"
                         : std::string(1, c);
    return out;
  }

  static std::string cased(std::string s, const std::string &how) {
    bool start = true;
    for (char &c : s) {
      unsigned char u = (unsigned char)c;
      if (how == "upper")
        c = char(std::toupper(u));
      else if (how == "lower")
        c = char(std::tolower(u));
      else if (how == "capitalize")
        c = char(start ? std::toupper(u) : std::tolower(u));
      else
        c = char(start ? std::toupper(u) : std::tolower(u));
      start = how == "title" ? !std::isalnum(u) : false;
    }
    return s;
  }
};
} // namespace

bool mfrt::jinja::knownFilter(const std::string &name) {
  static const std::set<std::string> filters = {
      "length",     "count",  "tojson", "trim",    "string",     "safe",
      "e",          "escape", "upper",  "lower",   "capitalize", "title",
      "int",        "float",  "abs",    "default", "d",          "first",
      "last",       "join",   "items",  "list",    "reverse",    "replace",
      "unique",     "sort",   "map",    "select",  "reject",     "selectattr",
      "rejectattr", "indent"};
  return filters.count(name) != 0;
}

bool mfrt::jinja::knownTest(const std::string &name) {
  static const std::set<std::string> tests = {
      "defined",  "undefined", "none", "string", "number",      "integer",
      "float",    "boolean",   "true", "false",  "mapping",     "sequence",
      "iterable", "callable",  "odd",  "even",   "divisibleby", "equalto",
      "eq",       "sameas",    "ne",   "in",     "lt",          "gt",
      "le",       "ge"};
  return tests.count(name) != 0;
}

void mfrt::jinja::renderTemplate(const Node &root, const Value &context,
                                 std::string &out) {
  Renderer r(context);
  try {
    r.run(root.bodies[0], out);
  } catch (const LoopControl &) {
    throw Error("'break' or 'continue' outside a loop");
  }
}
